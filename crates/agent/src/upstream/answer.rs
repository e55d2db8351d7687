//! How an upstream error answer keeps its HTTP status on its way through `object_store`.
//!
//! `object_store` turns an error answer into its own `Error`: typed for a few statuses (404,
//! 403, 412, …) and otherwise `Generic`, around a type it does not export that holds the
//! status. So the agent's HTTP client ([`StatusClient`]) takes error answers (4xx, 5xx) out
//! of `object_store`'s hands: it reads the answer's body and returns it as an
//! `HttpError` carrying an [`ErrorAnswer`] — status, S3 error code and message — which
//! reaches [`UpstreamError`]'s conversion through the error's source chain, whatever
//! `object_store` wraps around it. `object_store` never retries such an error (its kind is
//! `Unknown`), which is what the agent wants: the drain owns retrying.
//!
//! A request that got no answer is `Unavailable` with its causes spelled out (a TLS
//! certificate the agent's roots do not trust reads `invalid peer certificate: UnknownIssuer`).
//!
//! Given a pool's [`Ledger`], the client also carries dmClock's δ and ρ on each request to
//! its gateway and counts what the gateway served, and what of it the gateway's answer says
//! it served in its reservation phase (see `ledger`).
//!
//! Successful answers and redirects pass untouched. An S3 error inside a 200 answer (which
//! `CompleteMultipartUpload` may send) stays `object_store`'s and is `Unavailable`, as S3
//! asks: retry it.

use std::error::Error as StdError;
use std::sync::Arc;

use async_trait::async_trait;
use object_store::ClientOptions;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
    ReqwestConnector,
};

use sluice_throttle::elsewhere::{DELTA_HEADER, RESERVED_HEADER, RHO_HEADER, Service};

use super::UpstreamError;
use super::ledger::Ledger;

/// An error answer from upstream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {}", self.detail())]
pub struct ErrorAnswer {
    pub status: http::StatusCode,
    /// The S3 error code (`<Code>`), when the body has one.
    pub code: Option<String>,
    /// The S3 error message (`<Message>`), when the body has one.
    pub message: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ErrorBody {
    code: Option<String>,
    message: Option<String>,
}

impl ErrorAnswer {
    /// The answer with this status and body (an S3 `<Error>` document, or anything else).
    pub fn parse(status: http::StatusCode, body: &[u8]) -> Self {
        let parsed = std::str::from_utf8(body)
            .ok()
            .and_then(|text| quick_xml::de::from_str::<ErrorBody>(text).ok());
        let (code, message) = parsed.map_or((None, None), |b| (b.code, b.message));
        Self {
            status,
            code,
            message,
        }
    }

    /// What the upstream said, in a few words: `Code: message`, or the status's reason.
    pub fn detail(&self) -> String {
        match (&self.code, &self.message) {
            (Some(c), Some(m)) => format!("{c}: {m}"),
            (Some(c), None) => c.clone(),
            (None, Some(m)) => m.clone(),
            (None, None) => self
                .status
                .canonical_reason()
                .unwrap_or("no reason given")
                .to_owned(),
        }
    }

    pub fn is(&self, code: &str) -> bool {
        self.code.as_deref() == Some(code)
    }
}

impl From<ErrorAnswer> for UpstreamError {
    fn from(a: ErrorAnswer) -> Self {
        UpstreamError::from_status(a.status.as_u16(), a.detail())
    }
}

impl From<object_store::Error> for UpstreamError {
    fn from(e: object_store::Error) -> Self {
        use object_store::Error as E;
        if let Some(answer) = find::<ErrorAnswer>(&e) {
            return answer.clone().into();
        }
        if let Some(http) = find::<HttpError>(&e) {
            // No answer: the request failed on its way (connect, timeout, reset, decode).
            return UpstreamError::Unavailable(format!("{:?}: {}", http.kind(), with_causes(http)));
        }
        // The typed variants `object_store` makes from a status (the answers `StatusClient`
        // does not take: 304 and 412 come back as answers to conditional requests).
        let status = match &e {
            E::NotFound { .. } => return UpstreamError::NotFound,
            E::NotModified { .. } => 304,
            E::Precondition { .. } => 412,
            E::AlreadyExists { .. } => 409,
            E::PermissionDenied { .. } => 403,
            E::Unauthenticated { .. } => 401,
            E::InvalidPath { .. } => 400,
            _ => return UpstreamError::Unavailable(e.to_string()),
        };
        UpstreamError::from_status(status, e.to_string())
    }
}

/// `e` and the causes under it, each once: reqwest's "error sending request" says nothing of
/// why without them (a certificate its roots do not trust, a refused connection).
fn with_causes(e: &(dyn StdError + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

/// The first error of type `T` in `e`'s source chain.
fn find<'a, T: StdError + 'static>(e: &'a (dyn StdError + 'static)) -> Option<&'a T> {
    let mut current: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(c) = current {
        if let Some(t) = c.downcast_ref::<T>() {
            return Some(t);
        }
        current = c.source();
    }
    None
}

/// The agent's HTTP client: `reqwest`'s, with error answers returned as [`ErrorAnswer`]s, and
/// with a pool's [`Ledger`] the dmClock δ on each request and the count of what it served.
#[derive(Debug)]
struct StatusService {
    inner: HttpClient,
    dmclock: Option<Dmclock>,
}

/// Which gateway of a pool this client talks to, and the pool's ledger.
#[derive(Debug, Clone)]
pub struct Dmclock {
    pub ledger: Arc<Ledger>,
    pub gateway: usize,
}

/// The access key a SigV4 request is signed with (`Credential=KEY/...` of its
/// `Authorization`): the tenant the ledger counts for.
fn access_key(req: &HttpRequest) -> Option<String> {
    let auth = req
        .headers()
        .get(http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (_, rest) = auth.split_once("Credential=")?;
    let (key, _) = rest.split_once('/')?;
    Some(key.to_owned())
}

/// Did the gateway admit the request (and so charge it), by its answer's status? `SlowDown`
/// (503, 429) is refused before admission; other 5xx are taken as not served.
fn admitted(status: http::StatusCode) -> bool {
    !(status.is_server_error() || status == http::StatusCode::TOO_MANY_REQUESTS)
}

impl StatusService {
    async fn send(&self, mut req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let Some((d, key)) = self
            .dmclock
            .as_ref()
            .and_then(|d| access_key(&req).map(|k| (d, k)))
        else {
            return self.inner.execute(req).await;
        };
        let told = d.ledger.take(&key, d.gateway);
        for (name, value) in [(DELTA_HEADER, told.delta), (RHO_HEADER, told.rho)] {
            if !value.is_zero() {
                // Digits and a space: always a valid header value.
                if let Ok(v) = http::HeaderValue::from_str(&value.to_string()) {
                    req.headers_mut().insert(name, v);
                }
            }
        }
        let head = req.method() == http::Method::HEAD;
        let sent = req.body().content_length() as u64;
        match self.inner.execute(req).await {
            Ok(resp) if admitted(resp.status()) => {
                let ok = resp.status().is_success();
                let received = resp
                    .headers()
                    .get(http::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok())
                    .filter(|_| ok && !head)
                    .unwrap_or(0);
                // A refused request (4xx) was charged its operation, not its body.
                let bytes = if ok { sent.saturating_add(received) } else { 0 };
                // What of it the gateway served by reservation (none when it does not say,
                // or says something that is not two numbers); the ledger cuts it to the rest.
                let reserved = resp
                    .headers()
                    .get(RESERVED_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<Service>().ok())
                    .unwrap_or_default();
                d.ledger
                    .served(&key, d.gateway, Service { requests: 1, bytes }, reserved);
                Ok(resp)
            }
            other => {
                d.ledger.unreport(&key, d.gateway, told);
                other
            }
        }
    }
}

#[async_trait]
impl HttpService for StatusService {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let resp = self.send(req).await?;
        let status = resp.status();
        if !(status.is_client_error() || status.is_server_error()) {
            return Ok(resp);
        }
        let body = resp.into_body().bytes().await?;
        Err(HttpError::new(
            HttpErrorKind::Unknown,
            ErrorAnswer::parse(status, &body),
        ))
    }
}

/// One [`StatusService`] shared by every store of an [`Upstream`](super::Upstream) (one
/// connection pool), handed to `object_store` as its connector: built once with the client
/// options every store is given, it hands out that one client whatever options `connect`
/// receives.
#[derive(Debug, Clone)]
pub struct StatusClient(HttpClient);

impl StatusClient {
    /// A client counting what it is served in `dmclock`'s ledger, if given.
    pub fn new(options: &ClientOptions, dmclock: Option<Dmclock>) -> Result<Self, UpstreamError> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(Self(HttpClient::new(StatusService { inner, dmclock })))
    }

    /// Sends a request: the answer if it succeeded, else what went wrong.
    pub async fn execute(&self, req: HttpRequest) -> Result<HttpResponse, Failure> {
        self.0
            .execute(req)
            .await
            .map_err(|e| match find::<ErrorAnswer>(&e) {
                Some(a) => Failure::Answer(a.clone()),
                None => Failure::Upstream(UpstreamError::Unavailable(format!(
                    "{:?}: {}",
                    e.kind(),
                    with_causes(&e)
                ))),
            })
    }
}

impl HttpConnector for StatusClient {
    fn connect(&self, _: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(self.0.clone())
    }
}

/// Why a request sent with [`StatusClient::execute`] failed.
#[derive(Debug)]
pub enum Failure {
    /// The upstream answered with an error.
    Answer(ErrorAnswer),
    /// No answer (or an unreadable one).
    Upstream(UpstreamError),
}

impl From<Failure> for UpstreamError {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Answer(a) => a.into(),
            Failure::Upstream(e) => e,
        }
    }
}
