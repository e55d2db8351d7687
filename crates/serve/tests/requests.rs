//! What every request is to its client and to the logs, through `serve_http` and
//! `HttpService` on a loopback port, around an s3s service whose answers the test chooses: an
//! id in `x-amz-request-id` and `x-amz-id-2` on every response (s3s's errors and the
//! service's own refusals included), and one log line per request at the level its outcome
//! deserves, carrying the request's id and tenant.

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use s3s::dto::{HeadObjectInput, HeadObjectOutput};
use s3s::service::S3ServiceBuilder;
use s3s::{S3Request, S3Response, S3Result, s3_error};
use sluice_serve::{DEFAULT_LOG_FILTER, HttpService, request};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;

/// HeadObject answered by key: `ok`, `missing` (NoSuchKey), `busy` (SlowDown), `broken` (an
/// internal error whose cause is reported as a fault). Every caller is "alice".
struct Stub;

#[async_trait::async_trait]
impl s3s::S3 for Stub {
    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        request::set_tenant("alice");
        match req.input.key.as_str() {
            "missing" => Err(s3_error!(NoSuchKey)),
            "busy" => {
                let mut e = s3_error!(SlowDown, "the tenant's queue is full");
                e.set_status_code(http::StatusCode::SERVICE_UNAVAILABLE);
                Err(e)
            }
            "broken" => {
                request::fault("the disk is on fire");
                Err(s3_error!(InternalError, "internal error"))
            }
            _ => Ok(S3Response::new(HeadObjectOutput::default())),
        }
    }
}

async fn serve() -> (SocketAddr, tokio::sync::watch::Sender<bool>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let service = HttpService::new(S3ServiceBuilder::new(Stub).build()).with_header_limit(4096);
    let (stop, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(sluice_serve::serve_http(
        listener,
        service,
        sluice_serve::HEADER_READ_TIMEOUT,
        rx,
    ));
    (addr, stop)
}

/// A response's status and headers (lower-case names).
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Answer {
    fn header(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map_or_else(|| panic!("no {name} in {self:?}"), |(_, v)| v.as_str())
    }
}

/// HEAD `/bucket/<key>` with `extra` header lines, on a connection of its own.
fn head(addr: SocketAddr, key: &str, extra: &str) -> Answer {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "HEAD /bucket/{key} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{extra}\r\n"
    )
    .expect("write");
    let mut got = Vec::new();
    s.read_to_end(&mut got).expect("read");
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    resp.parse(&got).expect("a response");
    Answer {
        status: resp.code.expect("status"),
        headers: resp
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect(),
    }
}

/// HEADs of the four stub keys and one over the header limit, answered in this order.
async fn five_requests(addr: SocketAddr) -> Vec<Answer> {
    tokio::task::spawn_blocking(move || {
        let oversized = format!("x-amz-meta-big: {}\r\n", "a".repeat(8192));
        vec![
            head(addr, "ok", ""),
            head(addr, "missing", ""),
            head(addr, "busy", ""),
            head(addr, "broken", ""),
            head(addr, "ok", &oversized),
        ]
    })
    .await
    .expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_carries_its_own_request_id_and_host_id() {
    let (addr, stop) = serve().await;
    let answers = five_requests(addr).await;
    let statuses: Vec<_> = answers.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [200, 404, 503, 500, 400]);
    let ids: std::collections::HashSet<_> = answers
        .iter()
        .map(|a| a.header("x-amz-request-id"))
        .collect();
    let host_ids: std::collections::HashSet<_> =
        answers.iter().map(|a| a.header("x-amz-id-2")).collect();
    assert_eq!(ids.len(), answers.len(), "{answers:?}");
    assert_eq!(host_ids.len(), answers.len(), "{answers:?}");
    for a in &answers {
        let id = a.header("x-amz-request-id");
        assert!(
            id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()),
            "{a:?}"
        );
        // The process's instance number leads every host id.
        assert_eq!(
            a.header("x-amz-id-2")[..16],
            answers[0].header("x-amz-id-2")[..16]
        );
    }
    let _ = stop.send(true);
}

/// A log in memory, one per filter. (The two layers share the span's formatted fields, so in
/// these logs a field recorded after the span began shows twice.)
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Log {
    type Writer = Log;

    fn make_writer(&'a self) -> Log {
        self.clone()
    }
}

impl Log {
    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().expect("log"))
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

fn layer<S>(log: &Log, filter: &str) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(log.clone())
        .with_filter(EnvFilter::new(filter))
}

/// The same requests logged twice, under the binary's default filter and at debug: only the
/// fault leaves a line the default keeps — one, at ERROR, with its cause and request id —
/// while at debug each refusal's one line names its code, request id and tenant. (On a
/// current-thread runtime, so that the server's tasks log to this test's subscriber.)
#[tokio::test]
async fn refusals_log_at_debug_and_a_fault_once_at_error() {
    let default = Log::default();
    let debug = Log::default();
    let subscriber = tracing_subscriber::registry()
        .with(layer(&default, DEFAULT_LOG_FILTER))
        .with(layer(&debug, "debug"));
    let _guard = tracing::subscriber::set_default(subscriber);
    let (addr, stop) = serve().await;
    let answers = five_requests(addr).await;
    let _ = stop.send(true);
    let id = |i: usize| answers[i].header("x-amz-request-id").to_owned();

    let kept = default.lines();
    let loud: Vec<_> = kept
        .iter()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    assert_eq!(loud.len(), 1, "{kept:#?}");
    let fault = loud[0];
    assert!(fault.contains(" ERROR "), "{fault}");
    assert!(fault.contains(&format!("id={}", id(3))), "{fault}");
    assert!(fault.contains("tenant=alice"), "{fault}");
    assert!(fault.contains("the disk is on fire"), "{fault}");
    assert!(fault.contains("code=\"InternalError\""), "{fault}");

    let all = debug.lines();
    for (i, code) in [(1, "NoSuchKey"), (2, "SlowDown")] {
        let lines: Vec<_> = all
            .iter()
            .filter(|l| l.contains(&format!("id={}", id(i))) && l.contains("request refused"))
            .collect();
        assert_eq!(lines.len(), 1, "{all:#?}");
        let line = lines[0];
        assert!(line.contains(" DEBUG "), "{line}");
        assert!(line.contains("tenant=alice"), "{line}");
        assert!(line.contains(&format!("code=\"{code}\"")), "{line}");
    }
    // The service's own refusal, before s3s sees the request.
    assert!(
        all.iter().any(|l| l.contains(&format!("id={}", id(4)))
            && l.contains("code=\"RequestHeaderSectionTooLarge\"")),
        "{all:#?}"
    );
}
