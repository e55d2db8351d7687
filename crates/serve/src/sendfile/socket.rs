//! A connection's writer that sends GET bodies from the page cache with `sendfile`.
//!
//! A GET response body on the local filesystem carries placeholders for its grains, each
//! queued on the connection's [`SendfileLane`] with the file and offset it stands for (see
//! `super::lane`). This writer passes every other byte to the socket as it is, and for
//! a placeholder at the head of what hyper writes, has the kernel send the file's bytes
//! instead: no copy into a buffer of ours, none out of it. A placeholder the lane cannot
//! account for fails the write (and so the connection), and so does a write without a
//! placeholder while a stretch is queued (the placeholder was copied on its way here: hyper
//! flattened the body): a placeholder is never sent as data.
//!
//! `sendfile` reads from the disk any page not yet in the page cache, and waits for it, so it
//! runs on a blocking thread, never on a runtime thread (where every other connection of that
//! thread would wait behind the disk). The blocking thread sends the whole stretch, waiting for
//! room in the socket itself while the client keeps taking bytes; a client that makes no room
//! within [`ROOM_WAIT`], or has kept the thread waiting [`SEND_WAIT`] in all, gets its
//! connection handed back to the runtime, which waits for room without holding a thread: a
//! slow reader never holds a thread for long, whatever the number of them. The kernel reads each page once, as it sends it, with the file's
//! own read-ahead running ahead of the sends (the page cache was once filled by a blocking
//! thread first and sent from by the runtime after: every page looked up twice, and no byte
//! sent before its whole grain was read).

use std::future::Future;
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use super::lane::{Send, SendfileLane};
use rustix::event::{PollFd, PollFlags, Timespec};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// How long, in all, a blocking thread waits for a client to make room while sending a
/// stretch, before it hands the connection back to the runtime.
pub const SEND_WAIT: Duration = Duration::from_millis(50);
/// How long one wait for room may last: a client that takes longer to make room is a slow one,
/// and waiting for it is the runtime's job, which holds no thread for it.
pub const ROOM_WAIT: Duration = Duration::from_millis(5);

/// Sends that handed their connection back to the runtime for want of room, process-wide.
static STALLS: AtomicU64 = AtomicU64::new(0);

/// How many sends handed their connection back to the runtime because the client made no room
/// in time (slow readers), process-wide: `sluice_sendfile_handbacks_total` in `/metrics`.
pub fn stalls() -> u64 {
    STALLS.load(Ordering::Relaxed)
}

/// A TCP connection whose writes send the file stretches of `lane`'s placeholders.
pub struct SendfileSocket {
    sock: TcpStream,
    lane: SendfileLane,
    /// The stretch being sent by a blocking thread.
    sending: Option<Sending>,
}

struct Sending {
    job: JoinHandle<io::Result<Sent>>,
    /// Set when the connection is dropped: the thread stops sending.
    stop: Arc<AtomicBool>,
}

/// What a blocking thread sent of a stretch, and whether it stopped for want of room.
struct Sent {
    bytes: usize,
    stalled: bool,
}

impl SendfileSocket {
    pub fn new(sock: TcpStream, lane: SendfileLane) -> Self {
        Self {
            sock,
            lane,
            sending: None,
        }
    }

    /// Sends (part of) the stretch `buf` stands for, on a blocking thread.
    fn poll_send(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            if let Some(sending) = &mut self.sending {
                let sent = ready!(Pin::new(&mut sending.job).poll(cx));
                self.sending = None;
                let sent = sent.map_err(io::Error::other)??;
                if sent.stalled {
                    self.forget_writable();
                }
                if sent.bytes > 0 {
                    self.lane.sent(sent.bytes);
                    return Poll::Ready(Ok(sent.bytes));
                }
                if !sent.stalled {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
            }
            let send = self.lane.next(buf)?;
            ready!(self.sock.poll_write_ready(cx))?;
            // The thread's own handle on the socket: it outlives the connection if need be.
            let sock = self.sock.as_fd().try_clone_to_owned()?;
            let stop = Arc::new(AtomicBool::new(false));
            let job = {
                let stop = Arc::clone(&stop);
                tokio::task::spawn_blocking(move || send_stretch(&sock, &send, &stop))
            };
            self.sending = Some(Sending { job, stop });
        }
    }

    /// Clears the runtime's note that the socket is writable unless it is (asked without
    /// waiting), so that the next write waits for room instead of starting a send that finds
    /// none. A readiness event arriving meanwhile is not lost: the runtime clears only the
    /// readiness it saw before asking.
    fn forget_writable(&self) {
        let _ = self.sock.try_io(Interest::WRITABLE, || {
            if has_room(&self.sock, Duration::ZERO)? {
                Ok(())
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            }
        });
    }
}

impl Drop for SendfileSocket {
    fn drop(&mut self) {
        if let Some(sending) = &self.sending {
            sending.stop.store(true, Ordering::Relaxed);
        }
    }
}

/// Sends `stretch` to the (non-blocking) socket `sock`, waiting for room while the client takes
/// bytes: each time for at most [`ROOM_WAIT`], and for [`SEND_WAIT`] in all; stops early when
/// `stop` is set. A file that ends inside the stretch is an error when nothing was sent (the
/// next write meets it otherwise).
fn send_stretch(sock: &OwnedFd, stretch: &Send, stop: &AtomicBool) -> io::Result<Sent> {
    let mut offset = stretch.offset;
    let mut sent = 0;
    let mut waited = Duration::ZERO;
    while sent < stretch.len && !stop.load(Ordering::Relaxed) {
        match rustix::fs::sendfile(sock, &*stretch.file, Some(&mut offset), stretch.len - sent) {
            Ok(0) if sent == 0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "a blob ended inside the range being sent",
                ));
            }
            Ok(0) => break,
            Ok(n) => sent += n,
            Err(rustix::io::Errno::AGAIN) => {
                let wait = SEND_WAIT.saturating_sub(waited).min(ROOM_WAIT);
                let since = Instant::now();
                let room = has_room(sock, wait)?;
                waited += since.elapsed();
                if !room {
                    STALLS.fetch_add(1, Ordering::Relaxed);
                    return Ok(Sent {
                        bytes: sent,
                        stalled: true,
                    });
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(_) if sent > 0 => break,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Sent {
        bytes: sent,
        stalled: false,
    })
}

/// Whether `sock` has room to send, waiting for it at most `wait` (an interrupted wait counts
/// as room: the send that follows finds out).
fn has_room(sock: &impl AsFd, wait: Duration) -> io::Result<bool> {
    let mut fds = [PollFd::new(sock, PollFlags::OUT)];
    let wait = Timespec::try_from(wait).map_err(io::Error::other)?;
    match rustix::event::poll(&mut fds, Some(&wait)) {
        Ok(n) => Ok(n > 0),
        Err(rustix::io::Errno::INTR) => Ok(true),
        Err(e) => Err(e.into()),
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
        if self.sending.is_some() {
            return Poll::Ready(Err(io::Error::other(
                "plain bytes written while a file stretch is being sent",
            )));
        }
        let plain = bufs
            .iter()
            .position(|b| SendfileLane::is_placeholder(b))
            .unwrap_or(bufs.len());
        if plain == bufs.len() && self.lane.is_pending() {
            return Poll::Ready(Err(io::Error::other(
                "a file stretch is queued but no placeholder is among the bytes written: the \
                 body was copied on its way here, and its placeholders would leave as zeros",
            )));
        }
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
    use std::time::Duration;

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

    /// A connected pair whose client receives into a small buffer, so that the server's sends
    /// run out of room as soon as the client stops reading.
    async fn narrow_pair(lane: SendfileLane) -> (SendfileSocket, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(64 * 1024).expect("rcvbuf");
        let (client, accepted) = tokio::join!(socket.connect(addr), listener.accept());
        let (server, _) = accepted.expect("accept");
        (SendfileSocket::new(server, lane), client.expect("connect"))
    }

    /// A file of `len` patterned bytes.
    fn patterned(len: u32) -> (Arc<std::fs::File>, Vec<u8>) {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 13 + i / 509) as u8).collect();
        let mut file = tempfile::tempfile().expect("file");
        file.write_all(&bytes).expect("write");
        (Arc::new(file), bytes)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_stops_reading_gets_the_rest_when_it_reads_again() {
        // More than the socket buffers hold with the client's at 64 KiB (tcp_wmem caps the
        // send buffer at a few MiB).
        let (file, bytes) = patterned(12 << 20);
        let lane = SendfileLane::default();
        let (mut server, mut client) = narrow_pair(lane.clone()).await;
        let p = lane.stand_in(file, 0, bytes.len()).expect("placeholder");
        let before = stalls();
        let writer = tokio::spawn(async move { write_queue(&mut server, vec![p]).await });
        let mut got = vec![0u8; 4096];
        client.read_exact(&mut got).await.expect("first bytes");
        // The stall under test: the client reads nothing more until the sending thread has
        // given up waiting for room and handed the connection back to the runtime.
        tokio::time::timeout(Duration::from_secs(20), async {
            while stalls() == before {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the sending thread handed the stalled connection back");
        client.read_to_end(&mut got).await.expect("the rest");
        writer.await.expect("writer").expect("written");
        assert!(
            got == bytes,
            "{} bytes received of {}",
            got.len(),
            bytes.len()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_dropped_while_sending_closes_after_a_prefix() {
        let (file, bytes) = patterned(12 << 20);
        let lane = SendfileLane::default();
        let (server, mut client) = narrow_pair(lane.clone()).await;
        let p = lane.stand_in(file, 0, bytes.len()).expect("placeholder");
        let writer = tokio::spawn(async move {
            let mut server = server;
            write_queue(&mut server, vec![p]).await
        });
        client.readable().await.expect("sending");
        writer.abort();
        let mut got = Vec::new();
        // Bounded only so that a socket left open fails the test instead of hanging it.
        tokio::time::timeout(Duration::from_secs(20), client.read_to_end(&mut got))
            .await
            .expect("the connection closed")
            .expect("read");
        assert!(
            got.len() < bytes.len(),
            "the send stopped with the connection"
        );
        assert!(got == bytes[..got.len()], "a prefix of the stretch");
    }
}
