//! The contract with hyper that GET bodies sent by `sendfile` rely on (the crate doc, "The
//! contract with hyper", point 1): with `serve_http`'s configuration, every body chunk reaches
//! the connection's `SendfileSocket` at the address it was created with, so a placeholder (a
//! slice of the static run of zeros) is recognised and replaced by the file stretch its
//! `SendfileLane` queued. If hyper ever copied chunks on their way (a change of its write
//! strategy, or of `serve_http`'s), placeholders would reach the socket as plain zeros.
//!
//! Every test here serves, through the real [`serve_http`] on loopback, a response body that
//! mixes plain bytes with placeholders taken from the request's lane, and reads it with
//! hyper's own client. The file's bytes hold no zero, so a placeholder that left as data can
//! never pass for the file: the client must receive exactly the file's bytes where
//! placeholders stood, or (for a placeholder the lane cannot account for) a broken body,
//! never zeros with a clean end. A server that flattens bodies (`writev(false)`) shows what
//! the configuration is worth; HTTP/2 requests never get a lane.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fs::File;
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::os::unix::fs::FileExt as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, Version};
use http_body_util::{BodyExt as _, Empty};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo};
use sluice_serve::sendfile::{PLACEHOLDER_MAX, SendfileLane, SendfileSocket, WithLane, stalls};
use sluice_serve::{HEADER_READ_TIMEOUT, serve_http};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;

/// The file placeholders stand for: patterned bytes, none of them zero.
struct Blob {
    file: Arc<File>,
    bytes: Vec<u8>,
}

impl Blob {
    fn new(len: usize) -> Self {
        let bytes: Vec<u8> = (0..len)
            .map(|i| u8::try_from((i * 7 + i / 251) % 255 + 1).expect("below 256"))
            .collect();
        let mut file = tempfile::tempfile().expect("temp file");
        file.write_all(&bytes).expect("write the file");
        Self {
            file: Arc::new(file),
            bytes,
        }
    }
}

/// One frame of a response body.
#[derive(Clone, Debug)]
enum Part {
    /// Plain bytes.
    Plain(&'static [u8]),
    /// `len` bytes of the file from `offset`: a placeholder from the request's lane (the
    /// file's bytes themselves when the request has none).
    File { offset: u64, len: usize },
    /// The body is not ready once (woken at once): hyper flushes what it holds meanwhile.
    Pause,
    /// A placeholder from a lane that is not the connection's: nothing accounts for it.
    Orphan { len: usize },
    /// A placeholder from the request's lane, one byte into its stretch: out of step.
    Skewed { offset: u64, len: usize },
}

impl Part {
    /// The bytes the client should receive for this part.
    fn expected(&self, blob: &Blob) -> Vec<u8> {
        match *self {
            Self::Plain(b) => b.to_vec(),
            Self::File { offset, len } => {
                let at = usize::try_from(offset).expect("offset");
                blob.bytes[at..at + len].to_vec()
            }
            Self::Pause => Vec::new(),
            Self::Orphan { .. } | Self::Skewed { .. } => {
                unreachable!("a body with an unaccounted placeholder has no expected bytes")
            }
        }
    }

    /// The bytes this part puts in the body.
    fn len(&self) -> usize {
        match *self {
            Self::Plain(b) => b.len(),
            Self::File { len, .. } | Self::Orphan { len } => len,
            Self::Skewed { len, .. } => len - 1,
            Self::Pause => 0,
        }
    }
}

/// How the response delimits its body.
#[derive(Clone, Copy)]
enum Framing {
    ContentLength,
    Chunked,
}

/// A response body yielding `parts` in order. A file part is stood in on the lane when it is
/// yielded, as `sluice_s3`'s GET bodies do: the order the body yields placeholders in is the
/// order hyper writes them in.
struct Frames {
    parts: VecDeque<Part>,
    file: Arc<File>,
    lane: Option<SendfileLane>,
    len: Option<u64>,
    paused: bool,
}

impl Frames {
    fn next_data(&mut self, part: Part) -> io::Result<Bytes> {
        let stand_in = |lane: &SendfileLane, offset, len| {
            lane.stand_in(Arc::clone(&self.file), offset, len)
                .ok_or_else(|| io::Error::other("a stretch the lane does not take"))
        };
        match (part, &self.lane) {
            (Part::Plain(b), _) => Ok(Bytes::from_static(b)),
            (Part::File { offset, len }, Some(lane)) => stand_in(lane, offset, len),
            (Part::File { offset, len }, None) => {
                let mut buf = vec![0; len];
                self.file.read_exact_at(&mut buf, offset)?;
                Ok(buf.into())
            }
            (Part::Orphan { len }, _) => stand_in(&SendfileLane::default(), 0, len),
            (Part::Skewed { offset, len }, Some(lane)) => {
                Ok(stand_in(lane, offset, len)?.slice(1..))
            }
            (Part::Skewed { .. }, None) => Err(io::Error::other("no lane to skew")),
            (Part::Pause, _) => unreachable!("pauses are taken in poll_frame"),
        }
    }
}

impl Body for Frames {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        loop {
            let Some(part) = this.parts.pop_front() else {
                return Poll::Ready(None);
            };
            if matches!(part, Part::Pause) {
                if !this.paused {
                    this.paused = true;
                    this.parts.push_front(part);
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                this.paused = false;
                continue;
            }
            return Poll::Ready(Some(this.next_data(part).map(Frame::data)));
        }
    }

    fn size_hint(&self) -> SizeHint {
        self.len.map(SizeHint::with_exact).unwrap_or_default()
    }
}

/// The service under test: answers every request with `parts`, noting for each request its
/// version and whether it carried a lane.
#[derive(Clone)]
struct Responder {
    file: Arc<File>,
    parts: Arc<Vec<Part>>,
    framing: Framing,
    seen: Arc<Mutex<Vec<(Version, bool)>>>,
}

impl Responder {
    fn new(blob: &Blob, parts: Vec<Part>, framing: Framing) -> Self {
        Self {
            file: Arc::clone(&blob.file),
            parts: Arc::new(parts),
            framing,
            seen: Arc::default(),
        }
    }

    /// The requests served so far: version, and whether the request had a lane.
    fn seen(&self) -> Vec<(Version, bool)> {
        self.seen.lock().expect("seen").clone()
    }
}

impl hyper::service::Service<Request<Incoming>> for Responder {
    type Response = Response<Frames>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Frames>, Infallible>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let lane = req.extensions().get::<SendfileLane>().cloned();
        self.seen
            .lock()
            .expect("seen")
            .push((req.version(), lane.is_some()));
        let len = self.parts.iter().map(Part::len).sum::<usize>() as u64;
        let body = Frames {
            parts: self.parts.iter().cloned().collect(),
            file: Arc::clone(&self.file),
            lane,
            len: match self.framing {
                Framing::ContentLength => Some(len),
                Framing::Chunked => None,
            },
            paused: false,
        };
        std::future::ready(Ok(Response::new(body)))
    }
}

/// `responder` served by [`serve_http`] on loopback until the returned sender is dropped.
async fn serve(responder: Responder) -> (SocketAddr, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, rx) = watch::channel(false);
    tokio::spawn(serve_http(listener, responder, HEADER_READ_TIMEOUT, rx));
    (addr, stop)
}

/// A connection to `addr`, receiving into a buffer of `rcvbuf` bytes if given (so that the
/// server runs out of room as soon as the client stops reading).
async fn connect(addr: SocketAddr, rcvbuf: Option<u32>) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    if let Some(size) = rcvbuf {
        socket.set_recv_buffer_size(size).expect("rcvbuf");
    }
    socket.connect(addr).await.expect("connect")
}

/// An HTTP/1.1 client connection (hyper's) to `addr`.
async fn client(
    addr: SocketAddr,
    rcvbuf: Option<u32>,
) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let io = TokioIo::new(connect(addr, rcvbuf).await);
    let (sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .expect("handshake");
    tokio::spawn(conn);
    sender
}

fn get() -> Request<Empty<Bytes>> {
    Request::get("/")
        .header(http::header::HOST, "sluice")
        .body(Empty::new())
        .expect("request")
}

/// What the client made of a response body.
#[derive(Debug)]
enum Outcome {
    /// The body ended as its framing said it would, with these bytes.
    Clean(Vec<u8>),
    /// The connection broke after these bytes of the body (none if before the response).
    Broken { got: Vec<u8>, error: String },
}

/// Reads `body` to its end, or to the error that broke it.
async fn read_body(mut body: Incoming, mut got: Vec<u8>) -> Outcome {
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    got.extend_from_slice(&data);
                }
            }
            Err(e) => {
                return Outcome::Broken {
                    got,
                    error: e.to_string(),
                };
            }
        }
    }
    Outcome::Clean(got)
}

/// One GET on `sender`'s connection, once it is ready for one, read to its end.
async fn fetch(sender: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>) -> Outcome {
    if let Err(e) = sender.ready().await {
        return Outcome::Broken {
            got: Vec::new(),
            error: e.to_string(),
        };
    }
    match sender.send_request(get()).await {
        Ok(resp) => {
            assert_eq!(resp.status(), StatusCode::OK);
            read_body(resp.into_body(), Vec::new()).await
        }
        Err(e) => Outcome::Broken {
            got: Vec::new(),
            error: e.to_string(),
        },
    }
}

/// What the client must receive for `parts`.
fn expected(blob: &Blob, parts: &[Part]) -> Vec<u8> {
    parts.iter().flat_map(|p| p.expected(blob)).collect()
}

/// How many bytes of `bytes` are zero (the file has none: each is a placeholder's).
#[expect(
    clippy::naive_bytecount,
    reason = "a test's failure message, not a hot loop"
)]
fn zeros(bytes: &[u8]) -> usize {
    bytes.iter().filter(|b| **b == 0).count()
}

/// `outcome` is exactly `want`, ended cleanly; a mismatch says where, and whether zeros
/// (a placeholder sent as data) arrived.
fn assert_received(outcome: &Outcome, want: &[u8]) {
    let got = match outcome {
        Outcome::Clean(got) => got,
        Outcome::Broken { got, error } => {
            panic!(
                "the body broke after {} of {} bytes: {error}",
                got.len(),
                want.len()
            )
        }
    };
    if got != want {
        let at = got.iter().zip(want).position(|(g, w)| g != w);
        panic!(
            "{} bytes received, {} expected; first difference at {at:?}; {} zero bytes \
             received (the file has none: a placeholder left as data)",
            got.len(),
            want.len(),
            zeros(got)
        );
    }
}

/// `outcome` is a body cut short: a prefix of `prefix`'s plain bytes at most, no zero in it.
fn assert_broken(outcome: &Outcome, prefix: &[u8]) {
    match outcome {
        Outcome::Clean(got) => panic!(
            "the body ended cleanly with {} bytes ({} zeros): an unaccounted placeholder was \
             sent",
            got.len(),
            zeros(got)
        ),
        Outcome::Broken { got, .. } => {
            assert!(!got.contains(&0), "zeros received before the break");
            assert!(
                prefix.starts_with(got),
                "{} bytes received, not a prefix of the plain bytes before the placeholder",
                got.len()
            );
        }
    }
}

/// Serves `parts` through `serve_http` with `framing`, GETs it `rounds` times on one
/// connection, and checks every response and that every request had a lane.
async fn round_trip(blob: &Blob, parts: Vec<Part>, framing: Framing, rounds: usize) {
    let want = expected(blob, &parts);
    let responder = Responder::new(blob, parts, framing);
    let (addr, _stop) = serve(responder.clone()).await;
    let mut sender = client(addr, None).await;
    for _ in 0..rounds {
        assert_received(&fetch(&mut sender).await, &want);
    }
    let seen = responder.seen();
    assert_eq!(seen.len(), rounds);
    assert!(
        seen.iter().all(|&(v, lane)| v == Version::HTTP_11 && lane),
        "every HTTP/1.1 request carries its connection's lane: {seen:?}"
    );
}

const MIB: usize = 1 << 20;

/// Placeholders of many sizes, small and large, up to [`PLACEHOLDER_MAX`], some adjacent,
/// some between plain bytes, some after a pause (a flush between them).
fn many_placeholders() -> Vec<Part> {
    let file = |offset, len| Part::File { offset, len };
    vec![
        file(0, 1),
        Part::Plain(b"|plain|"),
        file(1, 2),
        file(3, 4095),
        file(4098, 4096),
        Part::Pause,
        file(8194, 4097),
        Part::Plain(b"-"),
        file(12_291, 65_539),
        file(77_830, MIB),
        Part::Plain(b"between"),
        Part::Pause,
        file(5, PLACEHOLDER_MAX),
        file(3, 1),
        Part::Plain(b"end"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_placeholder_goes_out_as_the_files_bytes() {
    let blob = Blob::new(MIB);
    let parts = vec![Part::File {
        offset: 17,
        len: 500_000,
    }];
    round_trip(&blob, parts, Framing::ContentLength, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_placeholders_of_every_size_between_plain_bytes_go_out_as_the_files_bytes() {
    let blob = Blob::new(PLACEHOLDER_MAX + 8);
    round_trip(&blob, many_placeholders(), Framing::ContentLength, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_of_placeholders_goes_out_as_the_files_bytes() {
    let blob = Blob::new(PLACEHOLDER_MAX + 8);
    round_trip(&blob, many_placeholders(), Framing::Chunked, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_one_after_another_on_a_connection_keep_their_lane_in_step() {
    let blob = Blob::new(4 * MIB);
    let parts = vec![
        Part::Plain(b"head"),
        Part::File {
            offset: 1,
            len: 3 * MIB,
        },
        Part::File { offset: 0, len: 10 },
    ];
    round_trip(&blob, parts, Framing::ContentLength, 3).await;
}

/// More than the socket buffers between server and client hold (a few MiB with the client's
/// at 64 KiB): sends run out of room, are partial, and resume mid-stretch.
fn larger_than_the_socket_buffers() -> Vec<Part> {
    vec![
        Part::Plain(b"start"),
        Part::File {
            offset: 0,
            len: PLACEHOLDER_MAX,
        },
        Part::Plain(b"between"),
        Part::File {
            offset: 3,
            len: PLACEHOLDER_MAX,
        },
        Part::File {
            offset: 999,
            len: 7 * MIB + 5,
        },
        Part::Plain(b"end"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_larger_than_the_socket_buffers_arrives_whole_at_a_narrow_client() {
    let blob = Blob::new(PLACEHOLDER_MAX + 8);
    let parts = larger_than_the_socket_buffers();
    let want = expected(&blob, &parts);
    let (addr, _stop) = serve(Responder::new(&blob, parts, Framing::ContentLength)).await;
    let mut sender = client(addr, Some(64 * 1024)).await;
    assert_received(&fetch(&mut sender).await, &want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_gets_the_files_bytes_after_its_connection_was_handed_back() {
    let blob = Blob::new(PLACEHOLDER_MAX + 8);
    let parts = larger_than_the_socket_buffers();
    let want = expected(&blob, &parts);
    let (addr, _stop) = serve(Responder::new(&blob, parts, Framing::ContentLength)).await;
    let mut sender = client(addr, Some(64 * 1024)).await;
    let before = stalls();
    sender.ready().await.expect("ready");
    let resp = sender.send_request(get()).await.expect("response");
    let mut body = resp.into_body();
    let mut got = Vec::new();
    while got.len() < MIB {
        let frame = body.frame().await.expect("more body").expect("a frame");
        if let Ok(data) = frame.into_data() {
            got.extend_from_slice(&data);
        }
    }
    // The client takes nothing more until a sending thread has found no room and handed the
    // connection back to the runtime (the rest of the body is far more than the buffers hold;
    // the hand-back may have come already, while the first bytes were read).
    tokio::time::timeout(Duration::from_secs(20), async {
        while stalls() == before {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("a send handed the stalled connection back");
    assert_received(&read_body(body, got).await, &want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_from_another_lane_breaks_the_connection_instead_of_sending_zeros() {
    let blob = Blob::new(MIB);
    for framing in [Framing::ContentLength, Framing::Chunked] {
        let parts = vec![
            Part::Plain(b"before"),
            Part::File {
                offset: 0,
                len: 4096,
            },
            Part::Orphan { len: 4096 },
            Part::Plain(b"after"),
        ];
        let mut prefix = b"before".to_vec();
        prefix.extend_from_slice(&blob.bytes[..4096]);
        let (addr, _stop) = serve(Responder::new(&blob, parts, framing)).await;
        let mut sender = client(addr, None).await;
        assert_broken(&fetch(&mut sender).await, &prefix);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_out_of_step_with_its_stretch_breaks_the_connection() {
    let blob = Blob::new(MIB);
    let parts = vec![
        Part::Plain(b"before"),
        Part::Skewed {
            offset: 10,
            len: 8192,
        },
    ];
    let (addr, _stop) = serve(Responder::new(&blob, parts, Framing::ContentLength)).await;
    let mut sender = client(addr, None).await;
    assert_broken(&fetch(&mut sender).await, b"before");
}

/// `responder` served like [`serve_http`] serves (a `SendfileSocket` under hyper, the lane in
/// every request) but by an HTTP/1 server that copies every body into a buffer of its own
/// (`writev(false)`): what a change of hyper's write strategy would do.
async fn serve_flattened(responder: Responder) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let lane = SendfileLane::default();
            let io = TokioIo::new(SendfileSocket::new(sock, lane.clone()));
            let service = WithLane {
                inner: responder.clone(),
                lane,
            };
            let conn = hyper::server::conn::http1::Builder::new()
                .writev(false)
                .serve_connection(io, service);
            tokio::spawn(conn);
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_flattens_bodies_breaks_the_connection_instead_of_sending_zeros() {
    let blob = Blob::new(PLACEHOLDER_MAX + 8);
    let cases = [
        (
            vec![Part::File {
                offset: 0,
                len: 4096,
            }],
            Framing::ContentLength,
        ),
        (many_placeholders(), Framing::ContentLength),
        (many_placeholders(), Framing::Chunked),
    ];
    for (parts, framing) in cases {
        let responder = Responder::new(&blob, parts, framing);
        let addr = serve_flattened(responder.clone()).await;
        let mut sender = client(addr, None).await;
        let outcome = fetch(&mut sender).await;
        assert!(
            responder.seen().iter().all(|&(_, lane)| lane),
            "the request had a lane"
        );
        // Nothing of the body can leave: its first bytes are a placeholder's or lie before
        // one in the same copy.
        assert_broken(&outcome, b"");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_requests_get_no_lane_and_their_bodies_go_out_as_bytes() {
    let blob = Blob::new(PLACEHOLDER_MAX + 8);
    let parts = many_placeholders();
    let want = expected(&blob, &parts);
    let responder = Responder::new(&blob, parts, Framing::ContentLength);
    let (addr, _stop) = serve(responder.clone()).await;
    // Prior knowledge (h2c): the connection starts with HTTP/2's preface.
    let io = TokioIo::new(connect(addr, None).await);
    let (mut h2, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
        .await
        .expect("h2 handshake");
    tokio::spawn(conn);
    let req = Request::get(format!("http://{addr}/"))
        .body(Empty::<Bytes>::new())
        .expect("request");
    h2.ready().await.expect("ready");
    let resp = h2.send_request(req).await.expect("h2 response");
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.version(), Version::HTTP_2);
    assert_received(&read_body(resp.into_body(), Vec::new()).await, &want);
    // And an HTTP/1.1 request to the same server does get one.
    let mut h1 = client(addr, None).await;
    assert_received(&fetch(&mut h1).await, &want);
    assert_eq!(
        responder.seen(),
        vec![(Version::HTTP_2, false), (Version::HTTP_11, true)]
    );
}
