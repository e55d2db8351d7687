//! Binding and serving: the S3 API on `listen`, and status and metrics on the same listener
//! under `/_sluice/` (no bucket name can start with `_`) and, when `status_listen` is set, on
//! that address as `/status` and `/metrics` too.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use sluice_s3::HttpService;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::drain::Drain;
use crate::status;

const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Serves status and metrics documents.
#[derive(Clone)]
pub struct StatusRoutes {
    pub drain: Arc<Drain>,
}

impl StatusRoutes {
    async fn respond(&self, path: &str, bare: bool) -> Option<http::Response<s3s::Body>> {
        let which = match path {
            "/_sluice/status" => "status",
            "/_sluice/metrics" => "metrics",
            "/status" | "/" if bare => "status",
            "/metrics" if bare => "metrics",
            _ => return None,
        };
        let drain = Arc::clone(&self.drain);
        let snap = tokio::task::spawn_blocking(move || {
            let journal = Arc::clone(&drain.journal);
            status::snapshot(&drain, &journal)
        })
        .await;
        let (code, ctype, body) = match snap {
            Ok(Ok(s)) if which == "status" => (
                200,
                "application/json",
                serde_json::to_string_pretty(&s).unwrap_or_default(),
            ),
            Ok(Ok(s)) => (200, "text/plain; version=0.0.4", status::prometheus(&s)),
            Ok(Err(e)) => (500, "text/plain", e.to_string()),
            Err(e) => (500, "text/plain", e.to_string()),
        };
        http::Response::builder()
            .status(code)
            .header(http::header::CONTENT_TYPE, ctype)
            .body(s3s::Body::from(body))
            .ok()
    }
}

/// Accepts connections until `stop` turns true. `s3`: `None` on the status-only listener.
pub async fn serve(
    listener: TcpListener,
    s3: Option<HttpService>,
    routes: StatusRoutes,
    mut stop: watch::Receiver<bool>,
) {
    let http = auto::Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    let bare = s3.is_none();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (sock, _) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        continue;
                    }
                };
                let _ = sock.set_nodelay(true);
                let s3 = s3.clone();
                let routes = routes.clone();
                let svc = service_fn(move |req: http::Request<Incoming>| {
                    let s3 = s3.clone();
                    let routes = routes.clone();
                    async move {
                        if let Some(resp) = routes.respond(req.uri().path(), bare).await {
                            return Ok::<_, s3s::HttpError>(resp);
                        }
                        match s3 {
                            Some(s3) => hyper::service::Service::call(&s3, req).await,
                            None => Ok(http::Response::builder()
                                .status(404)
                                .body(s3s::Body::from("not found\n".to_owned()))
                                .unwrap_or_default()),
                        }
                    }
                });
                let conn = http.serve_connection(TokioIo::new(sock), svc).into_owned();
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                });
            }
            _ = stop.changed() => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after the shutdown grace period");
    }
}

pub async fn bind(addr: &str) -> Result<(TcpListener, SocketAddr), crate::AgentError> {
    let l = TcpListener::bind(addr)
        .await
        .map_err(|source| crate::AgentError::Listen {
            addr: addr.to_owned(),
            source,
        })?;
    let a = l.local_addr().map_err(|source| crate::AgentError::Listen {
        addr: addr.to_owned(),
        source,
    })?;
    Ok((l, a))
}
