//! A connection's writer that sends GET bodies from the page cache with `sendfile`.
//!
//! A GET response body on the local filesystem carries placeholders for its grains, each
//! queued on the connection's [`SendfileLane`] with the file and offset it stands for (see
//! `sluice_s3::sendfile`). This writer passes every other byte to the socket as it is, and for
//! a placeholder at the head of what hyper writes, has the kernel send the file's bytes
//! instead: no copy into a buffer of ours, none out of it. A placeholder the lane cannot
//! account for fails the write (and so the connection): it is never sent as data.
//!
//! `sendfile` runs on a runtime thread and would wait there for any page not yet read from
//! the disk, holding up every other connection on that thread; so a grain is stood in only
//! once a blocking thread has brought it into the page cache (`sluice_s3::blob`).

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use sluice_s3::sendfile::SendfileLane;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// A TCP connection whose writes send the file stretches of `lane`'s placeholders.
pub struct SendfileSocket {
    sock: TcpStream,
    lane: SendfileLane,
}

impl SendfileSocket {
    pub fn new(sock: TcpStream, lane: SendfileLane) -> Self {
        Self { sock, lane }
    }

    /// Sends (part of) the stretch `buf` stands for.
    fn poll_send(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let send = self.lane.next(buf)?;
        loop {
            ready!(self.sock.poll_write_ready(cx))?;
            let written = self.sock.try_io(Interest::WRITABLE, || {
                let mut offset = send.offset;
                rustix::fs::sendfile(&self.sock, &*send.file, Some(&mut offset), send.len)
                    .map_err(io::Error::from)
            });
            match written {
                Ok(0) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "a blob ended inside the range being sent",
                    )));
                }
                Ok(n) => {
                    self.lane.sent(n);
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncRead for SendfileSocket {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.sock).poll_read(cx, buf)
    }
}

impl AsyncWrite for SendfileSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    /// Writes the bytes before the first placeholder, or sends the placeholder's stretch
    /// when one is first.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let bufs = match bufs.iter().position(|b| !b.is_empty()) {
            Some(first) => &bufs[first..],
            None => return Poll::Ready(Ok(0)),
        };
        if SendfileLane::is_placeholder(&bufs[0]) {
            return self.poll_send(cx, &bufs[0]);
        }
        let plain = bufs
            .iter()
            .position(|b| SendfileLane::is_placeholder(b))
            .unwrap_or(bufs.len());
        Pin::new(&mut self.sock).poll_write_vectored(cx, &bufs[..plain])
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.sock).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.sock).poll_shutdown(cx)
    }
}

/// `inner` with the connection's lane in the extensions of every HTTP/1 request (where a GET
/// finds it). HTTP/2 requests never see it: h2 frames body chunks itself.
#[derive(Clone)]
pub struct WithLane<S> {
    pub inner: S,
    pub lane: SendfileLane,
}

impl<S, B> hyper::service::Service<http::Request<B>> for WithLane<S>
where
    S: hyper::service::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn call(&self, mut req: http::Request<B>) -> Self::Future {
        if req.version() < http::Version::HTTP_2 {
            req.extensions_mut().insert(self.lane.clone());
        }
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::sync::Arc;

    use bytes::{Buf as _, Bytes};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    use super::*;

    async fn pair(lane: SendfileLane) -> (SendfileSocket, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (server, _) = accepted.expect("accept");
        (SendfileSocket::new(server, lane), client.expect("connect"))
    }

    /// Writes `bufs` as hyper's vectored queue does: all of them each time, advanced by what
    /// each write took.
    async fn write_queue(sock: &mut SendfileSocket, mut bufs: Vec<Bytes>) -> io::Result<()> {
        while !bufs.is_empty() {
            let slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
            let mut n = sock.write_vectored(&slices).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            while n > 0 {
                let take = n.min(bufs[0].len());
                bufs[0].advance(take);
                n -= take;
                if bufs[0].is_empty() {
                    bufs.remove(0);
                }
            }
        }
        sock.shutdown().await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn placeholders_go_out_as_their_files_bytes_between_plain_bytes() {
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut file = tempfile::tempfile().expect("file");
        file.write_all(&bytes).expect("write");
        let file = Arc::new(file);
        let lane = SendfileLane::default();
        let (mut server, mut client) = pair(lane.clone()).await;
        // Larger than the socket's buffers, so sends are partial and resume mid-stretch.
        let a = lane.stand_in(Arc::clone(&file), 5, 2_500_000).expect("a");
        let b = lane.stand_in(Arc::clone(&file), 2_999_990, 10).expect("b");
        let bufs = vec![
            Bytes::from_static(b"head\r\n"),
            a,
            Bytes::from_static(b"--"),
            b,
        ];
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            client.read_to_end(&mut got).await.map(|_| got)
        });
        write_queue(&mut server, bufs).await.expect("written");
        let got = reader.await.expect("reader").expect("read");
        let mut want = b"head\r\n".to_vec();
        want.extend_from_slice(&bytes[5..2_500_005]);
        want.extend_from_slice(b"--");
        want.extend_from_slice(&bytes[2_999_990..]);
        assert!(
            got == want,
            "{} bytes received, {} expected",
            got.len(),
            want.len()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_placeholder_without_its_stretch_fails_and_sends_nothing_of_it() {
        let (mut server, mut client) = pair(SendfileLane::default()).await;
        let other = SendfileLane::default();
        let orphan = other
            .stand_in(Arc::new(tempfile::tempfile().expect("file")), 0, 4096)
            .expect("placeholder");
        let err = write_queue(&mut server, vec![Bytes::from_static(b"head"), orphan])
            .await
            .expect_err("nothing queued on this connection's lane");
        assert_eq!(err.kind(), io::ErrorKind::Other, "{err}");
        drop(server);
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.expect("read");
        assert_eq!(got, b"head");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_file_shorter_than_its_stretch_fails_the_write() {
        let mut file = tempfile::tempfile().expect("file");
        file.write_all(&[1; 100]).expect("write");
        let lane = SendfileLane::default();
        let (mut server, _client) = pair(lane.clone()).await;
        let p = lane.stand_in(Arc::new(file), 50, 100).expect("placeholder");
        let err = write_queue(&mut server, vec![p])
            .await
            .expect_err("the file ends 50 bytes early");
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
    }
}
