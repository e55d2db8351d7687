//! Binding and serving.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use sluice_config::{Config, Policy};
use sluice_meta::Catalog;
use sluice_metrics::Metrics;
use sluice_s3::sendfile::SendfileLane;
use sluice_s3::{BlobStore, Front, FrontConfig, TenantKey, Tenants};
use sluice_throttle::{Throttle, ThrottleConfig};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::framing::PageReads;
use crate::sendfile::{SendfileSocket, WithLane};
use crate::{
    Control, GatewayError, ReconcileSummary, gateway_section, open_backend, reconcile, tenant_specs,
};

/// Requests in flight at shutdown get this long to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// An opened (reconciled, not yet serving) gateway.
pub struct Gateway {
    front: Front,
    control: Control,
    listen: String,
    metrics_listen: Option<String>,
    pub summary: ReconcileSummary,
}

/// A gateway serving in the background.
pub struct Running {
    pub addr: SocketAddr,
    /// Where `/metrics` is served, if `metrics_listen` is set.
    pub metrics_addr: Option<SocketAddr>,
    pub control: Control,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

pub(crate) fn tenant_keys(config: &Config) -> Vec<TenantKey> {
    config
        .tenants
        .iter()
        .map(|t| TenantKey {
            tenant: Arc::from(t.id.as_str()),
            access_key: t.access_key.clone(),
            secret_key: t.secret_key.clone(),
        })
        .collect()
}

impl Gateway {
    /// Opens the catalog and backend and reconciles them.
    pub async fn open(config: &Config) -> Result<Self, GatewayError> {
        let g = gateway_section(config)?;
        std::fs::create_dir_all(&g.data_dir).map_err(|source| GatewayError::DataDir {
            path: g.data_dir.clone(),
            source,
        })?;
        let (catalog, report) = {
            let path = g.data_dir.join("meta.redb");
            tokio::task::spawn_blocking(move || Catalog::open(&path))
                .await
                .map_err(|e| GatewayError::Reconcile(e.to_string()))??
        };
        crate::set_tenant_limits(catalog.ledger(), config);
        let grain = g
            .throttle
            .map_or(sluice_s3::blob::DEFAULT_GRAIN, |c| c.grain);
        let local = matches!(config.backend, sluice_config::Backend::Local);
        let blobs = BlobStore::new(
            open_backend(config)?,
            grain,
            crate::backend::part_size(config, grain),
        );
        let blobs = Arc::new(if local {
            blobs.with_local_files()
        } else {
            blobs
        });
        let local_root = local.then(|| g.data_dir.join("objects"));
        let mut summary = reconcile(&catalog, &blobs, local_root.as_deref()).await?;
        summary.usage_fixed = report.usage_fixed;
        for (tenant, was, now) in &summary.usage_fixed {
            tracing::warn!(tenant, was, now, "usage recomputed from the catalog");
        }
        for (tenant, blob) in &summary.missing {
            tracing::error!(
                tenant,
                blob,
                "the backend has lost a blob the catalog references"
            );
        }
        if summary.orphans_deleted + summary.staged_deleted > 0 {
            tracing::info!(
                orphans = summary.orphans_deleted,
                staged = summary.staged_deleted,
                "removed the remains of interrupted writes"
            );
        }
        let throttle = match g.throttle {
            None => None,
            Some(c) => Some(Throttle::start(
                ThrottleConfig {
                    policy: match c.policy {
                        Policy::DmClock => sluice_throttle::Policy::DmClock,
                        Policy::Fifo => sluice_throttle::Policy::Fifo,
                        Policy::RateLimit => sluice_throttle::Policy::RateLimit,
                    },
                    bandwidth: c.bandwidth,
                    ops: c.ops,
                    queue_depth: c.queue_depth,
                    // Half a grain's service time, within 2–10 ms (see sluice-throttle).
                    lookahead: Duration::from_secs_f64(c.grain as f64 / c.bandwidth / 2.0).clamp(
                        sluice_throttle::DEFAULT_LOOKAHEAD,
                        Duration::from_millis(10),
                    ),
                },
                tenant_specs(config)?,
            )?),
        };
        let catalog = Arc::new(catalog);
        let metrics = Arc::new(Metrics::default());
        for t in &config.tenants {
            metrics.tenant(&t.id);
        }
        let front = Front::with_throttle(
            Arc::clone(&catalog),
            blobs,
            FrontConfig {
                region: g.region.clone(),
                max_object_size: g.max_object_size,
            },
            throttle.clone(),
            Arc::clone(&metrics),
        );
        let control = Control {
            catalog,
            tenants: Arc::new(Tenants::new(tenant_keys(config))),
            throttle,
            metrics,
            config: Arc::new(std::sync::Mutex::new(config.clone())),
        };
        Ok(Self {
            front,
            control,
            listen: g.listen.clone(),
            metrics_listen: g.metrics_listen.clone(),
            summary,
        })
    }

    pub fn front(&self) -> &Front {
        &self.front
    }

    /// Binds the configured address (port 0 picks a free one) and serves in the background.
    pub async fn start(self) -> Result<Running, GatewayError> {
        let listener =
            TcpListener::bind(&self.listen)
                .await
                .map_err(|source| GatewayError::Listen {
                    addr: self.listen.clone(),
                    source,
                })?;
        let addr = listener
            .local_addr()
            .map_err(|source| GatewayError::Listen {
                addr: self.listen.clone(),
                source,
            })?;
        let service = sluice_s3::service(self.front, &self.control.tenants);
        let (tx, rx) = watch::channel(false);
        let metrics_addr = match &self.metrics_listen {
            None => None,
            Some(m) => Some(self.control.clone().serve_metrics(m, rx.clone()).await?.0),
        };
        let task = tokio::spawn(serve_http(listener, service, HEADER_READ_TIMEOUT, rx));
        Ok(Running {
            addr,
            metrics_addr,
            control: self.control,
            shutdown: tx,
            task,
        })
    }
}

/// How long a client may take to send a request's headers. hyper's header timer also runs
/// while a keep-alive connection waits for its next request, so an idle connection is closed
/// after as long: a client that connects and sends nothing, or trickles its headers, holds a
/// socket for at most this.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Accepts connections on `listener` and serves HTTP/1.1 and HTTP/2 with `service` until
/// `stop` turns true, then lets requests in flight finish (bounded). Headers must arrive
/// within `header_timeout` ([`HEADER_READ_TIMEOUT`]); HTTP/2 peers that stop answering pings
/// are dropped. Reads end on pages of request bodies ([`PageReads`]), so that large bodies
/// reach the local disk without a copy; HTTP/1 GET bodies leave it by `sendfile`
/// ([`SendfileSocket`]). Every listener of the gateway and the node agent.
pub async fn serve_http<S, B>(
    listener: TcpListener,
    service: S,
    header_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) where
    S: hyper::service::Service<http::Request<Incoming>, Response = http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut http = auto::Builder::new(TokioExecutor::new());
    http.http1()
        // Body chunks go to the socket unflattened (see `sendfile`).
        .writev(true)
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    http.http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(header_timeout);
    let graceful = GracefulShutdown::new();
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
                // hyper must write straight into the `SendfileSocket` that holds this lane:
                // anything between them that reads the bytes (TLS, say) would read the
                // placeholders' zeros, so such a connection must not be offered a lane.
                let lane = SendfileLane::default();
                let io = TokioIo::new(PageReads::new(SendfileSocket::new(sock, lane.clone())));
                let service = WithLane { inner: service.clone(), lane };
                let conn = http.serve_connection(io, service).into_owned();
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

impl Running {
    /// Stops accepting, lets requests in flight finish (bounded), and returns.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
    }

    /// Serves until the task ends (it only ends on shutdown).
    pub async fn wait(self) {
        let _ = self.task.await;
    }

    /// A handle that triggers shutdown from elsewhere (e.g. a signal handler).
    pub fn stopper(&self) -> watch::Sender<bool> {
        self.shutdown.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::io::{Read as _, Write as _};

    use super::*;

    /// A request's bytes until the server closes the connection; an error if it has not after
    /// 10 s (the timeouts under test are 200 ms).
    fn until_closed(addr: SocketAddr, request: &'static [u8]) -> std::io::Result<Vec<u8>> {
        let mut s = std::net::TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.write_all(request)?;
        let mut got = Vec::new();
        s.read_to_end(&mut got)?;
        Ok(got)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn trickled_headers_and_idle_keep_alive_connections_are_closed() -> std::io::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let svc = hyper::service::service_fn(|_req| async {
            Ok::<_, Infallible>(http::Response::new(http_body_util::Full::new(
                bytes::Bytes::from_static(b"ok"),
            )))
        });
        let (stop, rx) = watch::channel(false);
        let server = tokio::spawn(serve_http(listener, svc, Duration::from_millis(200), rx));
        let (partial, idle) = tokio::task::spawn_blocking(move || {
            // Headers that never end.
            let partial = until_closed(addr, b"GET / HTTP/1.1\r\nHost: x\r\n")?;
            // A whole request, answered, then nothing: the connection waits for the next one.
            let idle = until_closed(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")?;
            std::io::Result::Ok((partial, idle))
        })
        .await??;
        assert!(!partial.starts_with(b"HTTP/1.1 200"), "{partial:?}");
        let idle = String::from_utf8_lossy(&idle);
        assert!(
            idle.starts_with("HTTP/1.1 200") && idle.ends_with("ok"),
            "{idle}"
        );
        let _ = stop.send(true);
        let _ = server.await;
        Ok(())
    }
}
