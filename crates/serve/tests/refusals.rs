//! A refusal decided before the body is read reaches an HTTP/1 client intact: the rest of the
//! body is read first, so the client finishes sending, reads the refusal and keeps its
//! connection, instead of being reset while it writes (`unread`).

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use s3s::dto::{HeadObjectInput, HeadObjectOutput, PutObjectInput, PutObjectOutput};
use s3s::service::S3ServiceBuilder;
use s3s::{S3Request, S3Response, S3Result, s3_error};
use sluice_serve::HttpService;

/// PutObject refused at once, its body never touched; HeadObject always answered.
struct Refuser;

#[async_trait::async_trait]
impl s3s::S3 for Refuser {
    async fn put_object(
        &self,
        _req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let mut e = s3_error!(InvalidRequest, "over quota, decided from the headers");
        e.set_status_code(http::StatusCode::FORBIDDEN);
        Err(e)
    }

    async fn head_object(
        &self,
        _req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        Ok(S3Response::new(HeadObjectOutput::default()))
    }
}

async fn serve() -> (SocketAddr, tokio::sync::watch::Sender<bool>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let service = HttpService::new(S3ServiceBuilder::new(Refuser).build());
    let (stop, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(sluice_serve::serve_http(
        listener,
        service,
        sluice_serve::HEADER_READ_TIMEOUT,
        rx,
    ));
    (addr, stop)
}

/// One response off `reader`: status, lower-case headers, body.
fn response(reader: &mut BufReader<TcpStream>) -> (u16, Vec<(String, String)>, String) {
    let mut line = String::new();
    reader.read_line(&mut line).expect("status line");
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).expect("header");
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':').expect("header line");
        headers.push((n.to_ascii_lowercase(), v.trim().to_owned()));
    }
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse().expect("length"));
    let mut body = vec![0; len];
    reader.read_exact(&mut body).expect("body");
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

fn put_head(len: usize, extra: &str) -> String {
    format!("PUT /bucket/too-big HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\n{extra}\r\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_refused_unread_is_taken_in_full_and_the_connection_kept() {
    let (addr, _stop) = serve().await;
    tokio::task::spawn_blocking(move || {
        let len = 8 * 1024 * 1024;
        let mut conn = TcpStream::connect(addr).expect("connect");
        conn.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        conn.write_all(put_head(len, "").as_bytes()).expect("head");
        // The whole body goes through: a server that answered and closed with the body
        // unread would reset the connection under these writes.
        let chunk = vec![0xA5u8; 64 * 1024];
        for _ in 0..len / chunk.len() {
            conn.write_all(&chunk)
                .expect("the server takes the whole body");
        }
        let mut reader = BufReader::new(conn.try_clone().expect("clone"));
        let (status, headers, body) = response(&mut reader);
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("over quota"), "{body}");
        assert!(
            !headers
                .iter()
                .any(|(n, v)| n == "connection" && v == "close"),
            "{headers:?}"
        );
        // The same connection serves the next request.
        conn.write_all(b"HEAD /bucket/k HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("second request");
        let mut line = String::new();
        reader.read_line(&mut line).expect("second status");
        assert!(line.starts_with("HTTP/1.1 200"), "{line:?}");
    })
    .await
    .expect("client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_that_expected_continue_is_answered_without_waiting_for_the_body() {
    let (addr, _stop) = serve().await;
    tokio::task::spawn_blocking(move || {
        let mut conn = TcpStream::connect(addr).expect("connect");
        conn.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let started = Instant::now();
        conn.write_all(put_head(1024 * 1024, "Expect: 100-continue\r\n").as_bytes())
            .expect("head");
        let mut reader = BufReader::new(conn);
        let (status, headers, body) = response(&mut reader);
        assert_eq!(status, 403, "{body}");
        assert!(
            headers
                .iter()
                .any(|(n, v)| n == "connection" && v == "close"),
            "{headers:?}"
        );
        // Not held for the body the client never sends (that would be the 5 s linger).
        assert!(
            started.elapsed() < sluice_serve::unread::LINGER_FOR,
            "{:?}",
            started.elapsed()
        );
    })
    .await
    .expect("client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_bound_is_not_waited_for() {
    let (addr, _stop) = serve().await;
    tokio::task::spawn_blocking(move || {
        let len = usize::try_from(sluice_serve::unread::LINGER_MAX).expect("fits") + 1;
        let mut conn = TcpStream::connect(addr).expect("connect");
        conn.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        conn.write_all(put_head(len, "").as_bytes()).expect("head");
        let mut reader = BufReader::new(conn);
        let (status, headers, _) = response(&mut reader);
        assert_eq!(status, 403);
        assert!(
            headers
                .iter()
                .any(|(n, v)| n == "connection" && v == "close"),
            "{headers:?}"
        );
    })
    .await
    .expect("client");
}
