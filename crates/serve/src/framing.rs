//! A connection's reads, cut so that a request body's pages land on pages of memory.
//!
//! The local disk writes bodies with `O_DIRECT`, which takes memory only from an address
//! aligned to the disk's block, at a file offset aligned the same way. hyper reads a body into
//! buffers of its own and hands it on in pieces as they were read; a piece can be written from
//! where it is only when its address and its offset in the body agree modulo the page ("in
//! phase"), otherwise every byte is copied into an aligned buffer first (an eighth of the node
//! agent's CPU in a checkpoint burst, measured).
//!
//! A piece is in phase when the buffer it lands in starts on a page (the binary's allocator,
//! `sluice-alloc`, starts every large block on one) and the bytes read into it start on a page
//! of the body. The second is arranged here: the reader follows the HTTP/1.1 framing (it
//! parses each request head with `httparse`, as hyper does, for `Content-Length`), and when a
//! read ends inside a body, away from a page boundary, it holds the bytes past the last
//! boundary back (fewer than a page) and hands them over at the start of the next read. Every
//! read then ends on a page of the body, so whatever buffer the next one lands in, it starts
//! in phase.
//!
//! The byte stream itself is never changed, only where reads end; bytes are held back only
//! while the body they belong to is incomplete, so the peer has more of it to send. Anything
//! this reader does not follow (a chunked body, an upgrade, HTTP/2, a head it cannot parse)
//! turns it into a plain pass-through for the rest of the connection.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The body offsets reads are made to end on: multiples of the local disk's alignment for
/// direct writes.
pub const PAGE: u64 = 4096;

/// The longest request head followed; a longer one (which the server refuses anyway) turns
/// the reader into a pass-through.
const HEAD_MAX: usize = 64 * 1024;

/// Where the reader is in the connection's byte stream.
#[derive(Debug)]
enum State {
    /// Inside a request head: its bytes so far.
    Head(Vec<u8>),
    /// Inside a body of `len` bytes, `pos` of them read.
    Body { pos: u64, len: u64 },
    /// Not following the framing.
    Off,
}

/// `io`, with reads that end on a page of any request body they are inside.
#[derive(Debug)]
pub struct PageReads<T> {
    io: T,
    state: State,
    /// Bytes read from `io` and held back (fewer than a page).
    held: Vec<u8>,
}

impl<T> PageReads<T> {
    pub fn new(io: T) -> Self {
        Self {
            io,
            state: State::Head(Vec::new()),
            held: Vec::new(),
        }
    }

    /// Follows `data`, the next bytes of the stream; returns how many of its last bytes to
    /// hold back (they are then not counted as read).
    fn follow(&mut self, mut data: &[u8]) -> usize {
        let n = data.len();
        while !data.is_empty() {
            match &mut self.state {
                State::Off => return 0,
                State::Body { pos, len } => {
                    let take = (*len - *pos).min(data.len() as u64);
                    *pos += take;
                    data = &data[take as usize..];
                    if *pos == *len {
                        self.state = State::Head(Vec::new());
                    }
                }
                State::Head(head) => {
                    // The terminator may straddle reads: search from 3 bytes back.
                    let from = head.len().saturating_sub(3);
                    let before = head.len();
                    head.extend_from_slice(data);
                    match head[from..].windows(4).position(|w| w == b"\r\n\r\n") {
                        Some(at) => {
                            let end = from + at + 4;
                            data = &data[end - before..];
                            match body_length(&head[..end]) {
                                Some(0) => head.clear(),
                                Some(len) => self.state = State::Body { pos: 0, len },
                                None => self.state = State::Off,
                            }
                        }
                        None if head.len() > HEAD_MAX => self.state = State::Off,
                        None => data = &[],
                    }
                }
            }
        }
        // Inside a body, off a page boundary: hold back the bytes past the last boundary if
        // that leaves something of this read to hand over.
        if let State::Body { pos, len } = &mut self.state
            && *pos < *len
        {
            let past = (*pos % PAGE) as usize;
            if past > 0 && past < n {
                *pos -= past as u64;
                return past;
            }
        }
        0
    }
}

/// The body length a complete request head declares: `Some(0)` without one; `None` when the
/// reader cannot follow what comes next (a chunked body, an upgrade, an unparsable or
/// ambiguous head).
fn body_length(head: &[u8]) -> Option<u64> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    if !matches!(req.parse(head), Ok(httparse::Status::Complete(n)) if n == head.len()) {
        return None;
    }
    if req.method == Some("CONNECT") {
        return None;
    }
    let mut length = None;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("transfer-encoding")
            || h.name.eq_ignore_ascii_case("upgrade")
        {
            return None;
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            let v: u64 = std::str::from_utf8(h.value).ok()?.trim().parse().ok()?;
            if length.is_some_and(|l| l != v) {
                return None;
            }
            length = Some(v);
        }
    }
    Some(length.unwrap_or(0))
}

impl<T: AsyncRead + Unpin> AsyncRead for PageReads<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let start = buf.filled().len();
        // What was held back goes first; then, if it all fit, whatever the socket has.
        let handed = this.held.len().min(buf.remaining());
        buf.put_slice(&this.held[..handed]);
        if handed == this.held.len() {
            match Pin::new(&mut this.io).poll_read(cx, buf) {
                Poll::Ready(Ok(())) => {}
                // Nothing more yet (or an error): nothing handed over, the held bytes kept.
                other => {
                    buf.set_filled(start);
                    return other;
                }
            }
        }
        this.held.drain(..handed);
        let end = buf.filled().len();
        let hold = this.follow(&buf.filled()[start..end]);
        if hold > 0 {
            let tail = &buf.filled()[end - hold..end];
            // Before anything still held from earlier (only when there was no room for it).
            this.held.splice(0..0, tail.iter().copied());
            buf.set_filled(end - hold);
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for PageReads<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt as _;

    use super::*;

    /// A peer that sends `data` in pieces of the sizes in `sizes` (cycled), with "nothing
    /// yet" between pieces when `stall` is set.
    struct Peer {
        data: Vec<u8>,
        at: usize,
        sizes: Vec<usize>,
        next: usize,
        stall: bool,
        stalled: bool,
    }

    impl AsyncRead for Peer {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            if this.stall && !this.stalled {
                this.stalled = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            this.stalled = false;
            let size = this.sizes[this.next % this.sizes.len()];
            this.next += 1;
            let n = size.min(this.data.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.data[this.at..this.at + n]);
            this.at += n;
            Poll::Ready(Ok(()))
        }
    }

    /// A request head and body of `len` bytes (each byte its offset's low bits, so that a
    /// byte out of place shows).
    fn put(len: usize) -> (Vec<u8>, Vec<u8>) {
        let head = format!("PUT /b/k HTTP/1.1\r\nhost: x\r\ncontent-length: {len}\r\n\r\n");
        let body = (0..len).map(|i| (i % 251) as u8).collect();
        (head.into_bytes(), body)
    }

    /// Reads everything through `PageReads` with buffers of the sizes in `caps` (cycled);
    /// returns each read's range in the stream.
    async fn read_all(peer: Peer, caps: &[usize]) -> (Vec<u8>, Vec<(usize, usize)>) {
        let mut reads = PageReads::new(peer);
        let (mut out, mut ranges) = (Vec::new(), Vec::new());
        for i in 0.. {
            let mut buf = vec![0u8; caps[i % caps.len()]];
            let n = reads.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            ranges.push((out.len(), out.len() + n));
            out.extend_from_slice(&buf[..n]);
        }
        (out, ranges)
    }

    /// Across pipelined requests, with and without bodies, read in pieces of every size: the
    /// bytes come through unchanged, and a read that ends inside a body ends on a page of it
    /// unless the whole read lies within that last partial page.
    #[tokio::test]
    async fn reads_inside_a_body_end_on_its_pages() {
        let mut stream = Vec::new();
        let mut bodies = Vec::new();
        for len in [3 * 4096 + 100, 0, 70_000, 5] {
            let (head, body) = put(len);
            stream.extend_from_slice(&head);
            bodies.push((stream.len(), stream.len() + len));
            stream.extend_from_slice(&body);
        }
        stream.extend_from_slice(b"GET /b/k HTTP/1.1\r\nhost: x\r\n\r\n");
        let (head, body) = put(50_000);
        stream.extend_from_slice(&head);
        bodies.push((stream.len(), stream.len() + body.len()));
        stream.extend_from_slice(&body);

        for (sizes, caps, stall) in [
            (vec![1000, 65_483, 7, 20_000], vec![8192, 100_000, 3], false),
            (vec![65_483], vec![417_792], true),
            (vec![3, 5000, 1], vec![4000, 9000], true),
        ] {
            let peer = Peer {
                data: stream.clone(),
                at: 0,
                sizes: sizes.clone(),
                next: 0,
                stall,
                stalled: false,
            };
            let (out, ranges) = read_all(peer, &caps).await;
            assert!(out == stream, "bytes changed (sizes {sizes:?})");
            for &(start, end) in &ranges {
                for &(b0, b1) in &bodies {
                    if end > b0 && end < b1 && !((end - b0) as u64).is_multiple_of(PAGE) {
                        let page = b0 + (end - b0) / PAGE as usize * PAGE as usize;
                        assert!(
                            start >= page,
                            "read {start}..{end} ends off a page of body {b0}..{b1}"
                        );
                    }
                }
            }
        }
    }

    /// What the reader does not follow (here a chunked body) it passes through: every read
    /// hands over exactly what the peer sent.
    #[tokio::test]
    async fn a_chunked_body_turns_it_into_a_pass_through() {
        let mut stream =
            b"PUT /b/k HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        let head = stream.len();
        stream.extend_from_slice(b"2710\r\n");
        stream.extend(std::iter::repeat_n(b'x', 10_000));
        stream.extend_from_slice(b"\r\n0\r\n\r\n");
        let peer = Peer {
            data: stream.clone(),
            at: 0,
            sizes: vec![head, 5000, 5000, 5000],
            next: 0,
            stall: false,
            stalled: false,
        };
        let (out, ranges) = read_all(peer, &[1 << 20]).await;
        assert!(out == stream);
        let lens: Vec<usize> = ranges.iter().map(|(a, b)| b - a).collect();
        assert_eq!(lens[..3], [head, 5000, 5000]);
    }

    #[test]
    fn the_body_length_is_read_from_the_head_as_hyper_reads_it() {
        let len = |h: &str| body_length(h.as_bytes());
        assert_eq!(
            len("PUT / HTTP/1.1\r\nContent-Length: 12\r\n\r\n"),
            Some(12)
        );
        assert_eq!(len("GET / HTTP/1.1\r\nhost: x\r\n\r\n"), Some(0));
        assert_eq!(
            len("PUT / HTTP/1.1\r\ncontent-length: 3\r\ncontent-length: 3\r\n\r\n"),
            Some(3)
        );
        for unfollowed in [
            "PUT / HTTP/1.1\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\n",
            "PUT / HTTP/1.1\r\ncontent-length: x\r\n\r\n",
            "PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n",
            "PRI * HTTP/2.0\r\n\r\n",
            "not http\r\n\r\n",
        ] {
            assert_eq!(len(unfollowed), None, "{unfollowed:?}");
        }
    }
}
