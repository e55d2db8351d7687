//! Binding and serving: the S3 API on `listen`, and status and metrics on `status_listen`
//! (`/status`, `/metrics`), the operator's address: every tenant's figures, names included
//! (the newest durable checkpoint, the last error), so never on the address trainers reach.
//! The health endpoints are there too: `/healthz` answers 200 while the process serves;
//! `/readyz` answers 200 when the node's catalog answers a read and its disk store a listing,
//! each within [`READY_TIMEOUT`], and 503 with the reason otherwise. The upstream is not
//! asked: an agent whose gateway is down still takes writes (it absorbs them and drains
//! later), so it stays ready.
//! There a tenant asks for its own status as an S3 request: `GET /?sluice-status`, signed
//! with its keys (header or presigned), through the same signature check as every operation.

use std::net::SocketAddr;
use std::sync::Arc;

use http::StatusCode;
use hyper::body::Incoming;
use hyper::service::service_fn;
use object_store::ObjectStore as _;
use s3s::route::S3Route;
use s3s::{Body, S3Request, S3Response, S3Result};
use sluice_s3::{Caller, HttpService, Tenants};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::drain::Drain;
use crate::status;

/// How long `/readyz` waits for the catalog and for the node's disk store.
pub const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Why the agent is not ready (see the module doc), or `None` when it is.
pub async fn unready(drain: &Drain) -> Option<String> {
    let catalog = Arc::clone(drain.journal.catalog());
    let read = tokio::task::spawn_blocking(move || catalog.list_buckets("").map(|_| ()));
    match tokio::time::timeout(READY_TIMEOUT, read).await {
        Err(_) => return Some("the catalog did not answer a read in time".into()),
        Ok(Err(e)) => return Some(format!("the catalog read failed: {e}")),
        Ok(Ok(Err(e))) => return Some(format!("the catalog read failed: {e}")),
        Ok(Ok(Ok(()))) => {}
    }
    let disk = drain.blobs.root().list_with_delimiter(None);
    match tokio::time::timeout(READY_TIMEOUT, disk).await {
        Err(_) => Some("the node's disk store did not answer a listing in time".into()),
        Ok(Err(e)) => Some(format!("the node's disk store failed a listing: {e}")),
        Ok(Ok(_)) => None,
    }
}

/// The query parameter of a tenant's status request on the S3 listener.
pub const STATUS_QUERY: &str = "sluice-status";

/// A status snapshot, all tenants or one, off the runtime's threads.
async fn snapshot(
    drain: &Arc<Drain>,
    keys: &crate::keys::Keys,
    only: Option<String>,
) -> Result<status::Status, String> {
    let (drain, keys) = (Arc::clone(drain), keys.clone());
    tokio::task::spawn_blocking(move || {
        let journal = Arc::clone(&drain.journal);
        status::snapshot(&drain, &journal, only.as_deref()).map(|s| s.with_keys(&keys))
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())
}

/// Serves the operator's status and metrics documents on `status_listen`.
#[derive(Clone)]
pub struct StatusRoutes {
    pub drain: Arc<Drain>,
    /// The S3 front's per-tenant counters: body bytes in and out of the node's store, queue
    /// waits on its local device, throttled requests.
    pub metrics: Arc<sluice_metrics::Metrics>,
    /// The tenants' confidential-object keys (whether each is loaded, its id).
    pub keys: crate::keys::Keys,
}

impl StatusRoutes {
    async fn respond(&self, path: &str) -> http::Response<Body> {
        let metrics = match path {
            "/status" | "/" => false,
            "/metrics" => true,
            "/healthz" => return plain(StatusCode::OK, "text/plain", "ok\n".to_owned()),
            "/readyz" => {
                return match unready(&self.drain).await {
                    None => plain(StatusCode::OK, "text/plain", "ready\n".to_owned()),
                    Some(why) => {
                        tracing::warn!(reason = %why, "not ready");
                        plain(StatusCode::SERVICE_UNAVAILABLE, "text/plain", why + "\n")
                    }
                };
            }
            _ => {
                return plain(
                    StatusCode::NOT_FOUND,
                    "text/plain",
                    "not found\n".to_owned(),
                );
            }
        };
        match snapshot(&self.drain, &self.keys, None).await {
            Ok(s) if metrics => plain(
                StatusCode::OK,
                "text/plain; version=0.0.4",
                status::prometheus(&s)
                    + &self.metrics.render("sluice", &[])
                    + &sluice_serve::sendfile::render_metrics(),
            ),
            Ok(s) => plain(
                StatusCode::OK,
                "application/json",
                serde_json::to_string_pretty(&s).unwrap_or_default(),
            ),
            Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", e),
        }
    }
}

fn plain(code: StatusCode, ctype: &'static str, body: String) -> http::Response<Body> {
    let mut resp = http::Response::new(Body::from(body));
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(ctype),
    );
    resp
}

/// A tenant's own status on the S3 listener: `GET /?sluice-status`, authenticated by s3s,
/// answered with that tenant's row only.
pub struct TenantStatusRoute {
    pub drain: Arc<Drain>,
    pub tenants: Arc<Tenants>,
    pub keys: crate::keys::Keys,
}

#[async_trait::async_trait]
impl S3Route for TenantStatusRoute {
    fn is_match(
        &self,
        method: &http::Method,
        uri: &http::Uri,
        _headers: &http::HeaderMap,
        _extensions: &mut http::Extensions,
    ) -> bool {
        sluice_s3::is_extension(method, uri, &http::Method::GET, STATUS_QUERY)
    }

    async fn check_access(&self, req: &mut S3Request<Body>) -> S3Result<()> {
        let caller = req.credentials.as_ref();
        let key = sluice_s3::sigv4_tenant(&self.tenants, &req.headers, &req.uri, caller)?;
        req.extensions.insert(Caller(key.tenant));
        Ok(())
    }

    async fn call(&self, req: S3Request<Body>) -> S3Result<S3Response<Body>> {
        let Some(Caller(tenant)) = req.extensions.get::<Caller>() else {
            return Err(s3s::s3_error!(
                AccessDenied,
                "anonymous requests are refused"
            ));
        };
        let status = snapshot(&self.drain, &self.keys, Some(tenant.to_string()))
            .await
            .map_err(|e| {
                sluice_serve::request::fault(format_args!("status snapshot failed: {e}"));
                s3s::s3_error!(InternalError, "internal error")
            })?;
        let json = serde_json::to_string_pretty(&status).unwrap_or_default();
        let mut resp = S3Response::new(Body::from(json));
        resp.headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        Ok(resp)
    }
}

/// What a listener answers.
#[derive(Clone)]
pub enum Listener {
    /// The S3 API (trainers).
    S3(HttpService),
    /// Status and metrics (the operator).
    Status(StatusRoutes),
}

/// Accepts connections until `stop` turns true (the gateway's server loop and timeouts).
pub async fn serve(listener: TcpListener, serves: Listener, stop: watch::Receiver<bool>) {
    let svc = service_fn(move |req: http::Request<Incoming>| {
        let serves = serves.clone();
        async move {
            match serves {
                Listener::S3(s3) => hyper::service::Service::call(&s3, req).await,
                Listener::Status(routes) => {
                    Ok::<_, s3s::HttpError>(routes.respond(req.uri().path()).await)
                }
            }
        }
    });
    sluice_serve::serve_http(listener, svc, sluice_serve::HEADER_READ_TIMEOUT, stop).await;
}

/// Binds `addr` (the agent's S3 address: `[agent] listen`).
pub async fn bind(addr: &str) -> Result<(TcpListener, SocketAddr), crate::AgentError> {
    bind_key("[agent] listen", addr).await
}

/// Binds `addr`, which the configuration names under `key`.
pub async fn bind_key(
    key: &'static str,
    addr: &str,
) -> Result<(TcpListener, SocketAddr), crate::AgentError> {
    let failed = |source| crate::AgentError::Listen {
        key,
        addr: addr.to_owned(),
        source,
    };
    let l = TcpListener::bind(addr).await.map_err(failed)?;
    let a = l.local_addr().map_err(failed)?;
    Ok((l, a))
}
