//! A request body read by the server lands in memory in phase with its offsets (address and
//! offset agreeing modulo the page), so that the local disk writes it without copying it: the
//! binary's allocator (`sluice-alloc`, installed here as in `sluice`), hyper's read buffers
//! and the server's page-ending reads (`sluice_serve::framing`) together.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[global_allocator]
static ALLOC: sluice_alloc::PageAligned = sluice_alloc::PageAligned;

const PAGE: usize = sluice_serve::framing::PAGE as usize;

/// Bytes of the bodies received, in phase and in all.
type Tally = Arc<Mutex<(usize, usize)>>;

async fn serve(tally: Tally) -> (std::net::SocketAddr, tokio::sync::watch::Sender<bool>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let tally = Arc::clone(&tally);
        async move {
            let mut body = req.into_body();
            let mut pos = 0usize;
            while let Some(frame) = body.frame().await {
                let Ok(data) = frame?.into_data() else {
                    continue;
                };
                let in_phase = data.as_ptr().addr().wrapping_sub(pos) % PAGE == 0;
                let mut t = tally.lock().expect("tally");
                t.1 += data.len();
                if in_phase {
                    t.0 += data.len();
                }
                pos += data.len();
            }
            Ok::<_, hyper::Error>(http::Response::new(Full::new(Bytes::from(pos.to_string()))))
        }
    });
    let (stop, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(sluice_serve::serve_http(
        listener,
        svc,
        sluice_serve::HEADER_READ_TIMEOUT,
        rx,
    ));
    (addr, stop)
}

/// Two 16 MiB PUTs on one connection, sent as fast as loopback takes them: all but a small
/// part of each body (its first pieces, read with the head into a small buffer) arrives in
/// phase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_arrives_in_phase_with_its_pages() {
    let tally = Tally::default();
    let (addr, _stop) = serve(Arc::clone(&tally)).await;
    let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let len = 16 << 20;
    let body = vec![7u8; len];
    for _ in 0..2 {
        let head = format!("PUT /b/k HTTP/1.1\r\nhost: x\r\ncontent-length: {len}\r\n\r\n");
        conn.write_all(head.as_bytes()).await.expect("head");
        conn.write_all(&body).await.expect("body");
        // The response: its body is the length the server received.
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.ends_with(len.to_string().as_bytes()) {
            let n = conn.read(&mut buf).await.expect("response");
            assert!(
                n > 0,
                "connection closed: {}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
        }
        assert!(got.starts_with(b"HTTP/1.1 200"));
    }
    let (in_phase, all) = *tally.lock().expect("tally");
    assert_eq!(all, 2 * len);
    assert!(
        in_phase * 100 >= all * 95,
        "only {in_phase} of {all} bytes arrived in phase"
    );
}
