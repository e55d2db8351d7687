//! One request as its client and the logs see it: an id, a span, and one line.
//!
//! [`HttpService`](crate::HttpService) runs every request it serves, its own refusals
//! included, through `Served::run`:
//!
//! - **An id.** [`RequestId`]: 16 hex digits, unique within the process, sent back as
//!   `x-amz-request-id` on every response, errors included. `x-amz-id-2` (S3's "host id")
//!   carries the process's random instance number and the request's ordinal: which process
//!   answered, and which of its requests it was. Ids are the instance number plus the ordinal
//!   (modulo 2^64), so they never repeat within a process and processes start at random
//!   places.
//! - **A span**, `request{id method path op tenant}`, around the handler: every line logged
//!   while the request is handled carries it. `op` and `tenant` are filled in when the
//!   request passes the access check ([`set_operation`], [`set_tenant`], called by
//!   `sluice-s3`'s access check), so a request refused before it (a bad signature) has
//!   neither. The path
//!   is recorded, never the query: a presigned URL carries its credentials there. The span is
//!   at ERROR level so that it is enabled under any filter that lets a line through: a log
//!   kept to errors still tells whose request failed.
//! - **One line when the response is ready**, from here and nowhere else. The handler's code
//!   judges its failures where it maps them (`sluice-s3`'s `to_s3`) and reports the cause,
//!   which the client is not told: [`fault`] for ours or the backend's (ERROR),
//!   [`upstream_failure`] for a service beyond this process failing the request (WARN). A
//!   request with a report is logged at the report's level, with its causes. Without one, a
//!   5xx other than `SlowDown` is a fault (s3s's own internal errors); everything else is at
//!   DEBUG: client errors, `SlowDown` (the designed back-pressure of the throughput
//!   scheduler), successes. s3s logs every error response itself, at ERROR even for a
//!   client's mistake, under targets `s3s::*`; [`DEFAULT_LOG_FILTER`] keeps those out.
//!
//! The scope ends with the response head: a body streamed after it (a GET) is written
//! outside the span, and a failure there ends its connection (logged by the accept loop).
//! Work spawned onto other tasks is outside the scope too: a report there is logged at once.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt::{self, Display};
use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http::{HeaderValue, Method, StatusCode, Uri};
use s3s::header::{X_AMZ_ID_2, X_AMZ_REQUEST_ID};
use s3s::{HttpError, HttpResponse};
use tracing::field::Empty;
use tracing::{Instrument, Span};

/// The log filter of the sluice binary when none is given: INFO, with s3s's own lines off
/// (each of its error responses is logged by s3s at ERROR, a client's mistakes included, and
/// once more here at the right level).
pub const DEFAULT_LOG_FILTER: &str = "info,s3s=off";

/// A request's identity: this process's instance number and the request's ordinal in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestId {
    instance: u64,
    ordinal: u64,
}

impl RequestId {
    /// The next id of this process: one counter for every service, so ids stay unique
    /// however many listeners a process has.
    pub fn next() -> Self {
        static INSTANCE: OnceLock<u64> = OnceLock::new();
        static NEXT: AtomicU64 = AtomicU64::new(0);
        // std's hasher keys come from the OS's randomness: a random number without a crate.
        let instance = *INSTANCE.get_or_init(|| RandomState::new().hash_one(std::process::id()));
        Self {
            instance,
            ordinal: NEXT.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The `x-amz-id-2` value: the instance number, then the ordinal (32 hex digits).
    fn host_id(self) -> String {
        format!("{:016X}{:016X}", self.instance, self.ordinal)
    }
}

/// The `x-amz-request-id` value: 16 upper-case hex digits, as S3's.
impl Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016X}", self.instance.wrapping_add(self.ordinal))
    }
}

/// What the handler's code can reach of the request it runs in (a task-local, so that the
/// access check and the error mapping need no handle passed down through s3s).
struct Scope {
    span: Span,
    reports: RefCell<Reports>,
}

/// The failures a handler reported, by kind.
#[derive(Debug, Default)]
struct Reports {
    faults: Vec<String>,
    upstream: Vec<String>,
}

tokio::task_local! {
    static SCOPE: Scope;
}

/// Names the tenant the request was authenticated as, on its span.
pub fn set_tenant(tenant: &str) {
    let _ = SCOPE.try_with(|s| {
        s.span.record("tenant", tracing::field::display(tenant));
    });
}

/// Names the S3 operation (`GetObject`, ...) on the request's span.
pub fn set_operation(op: &str) {
    let _ = SCOPE.try_with(|s| {
        s.span.record("op", tracing::field::display(op));
    });
}

/// Reports a server fault — ours or the backend's — whose cause the client is not told: the
/// request's one line is at ERROR, with it. Outside a request (work on another task), it is
/// logged at ERROR at once.
pub fn fault(cause: impl Display) {
    if SCOPE
        .try_with(|s| s.reports.borrow_mut().faults.push(cause.to_string()))
        .is_err()
    {
        tracing::error!(cause = %cause, "server fault");
    }
}

/// Reports that a service beyond this process (the shared tier behind a node agent) failed the
/// request: nothing here broke, but an operator may want to know. The request's one line is
/// at WARN (ERROR if a fault was reported too), with the cause. Outside a request, it is
/// logged at WARN at once.
pub fn upstream_failure(cause: impl Display) {
    if SCOPE
        .try_with(|s| s.reports.borrow_mut().upstream.push(cause.to_string()))
        .is_err()
    {
        tracing::warn!(cause = %cause, "upstream failure");
    }
}

/// A request being served: its id, its span and when it started.
pub(crate) struct Served {
    id: RequestId,
    span: Span,
    started: Instant,
}

impl Served {
    pub(crate) fn begin(method: &Method, uri: &Uri) -> Self {
        let id = RequestId::next();
        let span = tracing::error_span!(
            "request",
            id = %id,
            method = %method,
            path = %uri.path(),
            op = Empty,
            tenant = Empty,
        );
        Self {
            id,
            span,
            started: Instant::now(),
        }
    }

    /// Runs `respond` in the request's span and scope, stamps the response with the request's
    /// id and logs its outcome once.
    pub(crate) async fn run(
        self,
        respond: impl Future<Output = Result<HttpResponse, HttpError>>,
    ) -> Result<HttpResponse, HttpError> {
        let Self { id, span, started } = self;
        let scope = Scope {
            span: span.clone(),
            reports: RefCell::default(),
        };
        let outcome = async move {
            let result = respond.await;
            let reports = SCOPE.with(|s| s.reports.take());
            let elapsed = started.elapsed();
            match result {
                Ok(mut resp) => {
                    log_outcome(&resp, &reports, elapsed);
                    stamp(&mut resp, id);
                    Ok(resp)
                }
                Err(e) => {
                    // s3s could not even serialize its answer; hyper will drop the connection.
                    let causes = reports.causes();
                    let error = format!("{e:?}");
                    tracing::error!(error, %causes, ?elapsed, "request failed without a response");
                    Err(e)
                }
            }
        };
        SCOPE.scope(scope, outcome).instrument(span).await
    }
}

fn stamp(resp: &mut HttpResponse, id: RequestId) {
    let headers = resp.headers_mut();
    if let Ok(v) = HeaderValue::try_from(id.to_string()) {
        headers.insert(X_AMZ_REQUEST_ID, v);
    }
    if let Ok(v) = HeaderValue::try_from(id.host_id()) {
        headers.insert(X_AMZ_ID_2, v);
    }
}

impl Reports {
    /// The causes reported, faults first, for one log field.
    fn causes(&self) -> Causes<'_> {
        Causes(&self.faults, &self.upstream)
    }
}

/// Causes a handler reported, joined by `; `.
struct Causes<'a>(&'a [String], &'a [String]);

impl Display for Causes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, cause) in self.0.iter().chain(self.1).enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            f.write_str(cause)?;
        }
        Ok(())
    }
}

/// How a response is logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// DEBUG.
    Served,
    /// A client's mistake or designed back-pressure (`SlowDown`): DEBUG.
    Refused,
    /// Failed by a service beyond this process: WARN.
    Upstream,
    /// Ours or the backend's: ERROR.
    Fault,
}

fn outcome(status: StatusCode, code: Option<&str>, reports: &Reports) -> Outcome {
    if !reports.faults.is_empty() {
        Outcome::Fault
    } else if !reports.upstream.is_empty() {
        Outcome::Upstream
    } else if status.is_server_error() && code != Some("SlowDown") {
        Outcome::Fault
    } else if status.is_client_error() || status.is_server_error() {
        Outcome::Refused
    } else {
        Outcome::Served
    }
}

fn log_outcome(resp: &HttpResponse, reports: &Reports, elapsed: Duration) {
    let status = resp.status();
    let body = (status.is_client_error() || status.is_server_error())
        .then(|| resp.body().bytes())
        .flatten();
    let text = body.as_deref().and_then(|b| std::str::from_utf8(b).ok());
    let code = text.and_then(|t| element(t, "Code"));
    let reason = text.and_then(|t| element(t, "Message")).map(unescape);
    let reason = reason.as_deref();
    let causes = reports.causes();
    match outcome(status, code, reports) {
        Outcome::Fault => {
            let status = status.as_u16();
            tracing::error!(status, code, reason, %causes, ?elapsed, "request failed");
        }
        Outcome::Upstream => {
            let status = status.as_u16();
            tracing::warn!(status, code, reason, %causes, ?elapsed, "request failed upstream");
        }
        Outcome::Refused => {
            let status = status.as_u16();
            tracing::debug!(status, code, reason, ?elapsed, "request refused");
        }
        Outcome::Served => tracing::debug!(status = status.as_u16(), ?elapsed, "request served"),
    }
}

/// The text of the first `<name>` element of an S3 error document (every error response's
/// body, whole in memory).
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let len = xml[start..].find(&format!("</{name}>"))?;
    Some(xml[start..start + len].trim())
}

/// XML's five predefined entities replaced by their characters (s3s escapes nothing else).
fn unescape(text: &str) -> Cow<'_, str> {
    if !text.contains('&') {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_sixteen_hex_digits_and_never_repeat() {
        let ids: Vec<_> = (0..1000).map(|_| RequestId::next()).collect();
        let shown: std::collections::HashSet<_> = ids.iter().map(ToString::to_string).collect();
        assert_eq!(shown.len(), ids.len());
        for id in &ids {
            let s = id.to_string();
            assert_eq!(s.len(), 16, "{s}");
            assert!(s.bytes().all(|b| b.is_ascii_hexdigit()), "{s}");
            assert!(
                id.host_id()
                    .starts_with(&format!("{:016X}", ids[0].instance))
            );
        }
    }

    #[test]
    fn slowdown_and_client_errors_are_refusals_other_5xx_and_reports_decide() {
        use Outcome::{Fault, Refused, Served, Upstream};
        let none = Reports::default();
        let fault = Reports {
            faults: vec!["disk gone".into()],
            upstream: vec!["tier down".into()],
        };
        let upstream = Reports {
            faults: vec![],
            upstream: vec!["tier down".into()],
        };
        let cases = [
            (200, None, &none, Served),
            (404, Some("NoSuchKey"), &none, Refused),
            (403, Some("SignatureDoesNotMatch"), &none, Refused),
            (503, Some("SlowDown"), &none, Refused),
            (503, Some("ServiceUnavailable"), &none, Fault),
            (500, Some("InternalError"), &none, Fault),
            (500, None, &none, Fault),
            (404, Some("NoSuchKey"), &fault, Fault),
            (503, Some("ServiceUnavailable"), &upstream, Upstream),
            (200, None, &upstream, Upstream),
        ];
        for (status, code, reports, expected) in cases {
            let status = StatusCode::from_u16(status).expect("status");
            assert_eq!(
                outcome(status, code, reports),
                expected,
                "{status} {code:?} {reports:?}"
            );
        }
        assert_eq!(fault.causes().to_string(), "disk gone; tier down");
    }

    #[test]
    fn an_error_document_gives_its_code_and_message() {
        let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchKey</Code>\
                   <Message>the specified key does not exist</Message></Error>";
        assert_eq!(element(xml, "Code"), Some("NoSuchKey"));
        assert_eq!(
            element(xml, "Message"),
            Some("the specified key does not exist")
        );
        assert_eq!(element(xml, "RequestId"), None);
        assert_eq!(
            unescape("the tenant&apos;s &lt;queue&gt; &amp;c"),
            "the tenant's <queue> &c"
        );
    }
}
