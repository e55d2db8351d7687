//! The gateway's control plane: the Prometheus `/metrics` listener, the health endpoints and
//! configuration reload.
//!
//! Health, on the metrics listener: `GET /healthz` answers 200 while the process serves (it
//! checks nothing else: a liveness probe that fails restarts the process). `GET /readyz`
//! answers 200 when the catalog answers a read and the backend a listing of its root, each
//! within [`READY_TIMEOUT`]; otherwise 503 with the reason on one line (a load balancer
//! stops sending requests this gateway could not serve).
//!
//! Reload is a validated swap: the new file is parsed and checked as a whole (reservations
//! against capacity included) before anything changes; then credentials, quotas and dmClock
//! parameters are replaced, and the S3 listener's certificate is read anew from `tls_cert` and
//! `tls_key` (a certificate that does not load refuses the whole reload; new connections get
//! the new one). Listen addresses, the backend, the capacity and whether the listener speaks
//! TLS at all are not reloadable (they need a restart) and a reload that changes them is
//! refused. `[gateway.scrub]` is reloadable as a whole (see `scrub`).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use sluice_config::Config;
use sluice_meta::Catalog;
use sluice_metrics::{Gauge, Metrics};
use sluice_s3::Tenants;
use sluice_serve::tls::ServerTls;
use sluice_throttle::{TenantSpec, Throttle};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How long `/readyz` waits for the catalog and for the backend.
pub const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

use crate::admin::Sealer;
use crate::{GatewayError, gateway_section};

/// What a running gateway exposes for observation and reload.
#[derive(Clone)]
pub struct Control {
    pub(crate) catalog: Arc<Catalog>,
    /// The backend's root, for the readiness probe.
    pub(crate) backend: Arc<dyn object_store::ObjectStore>,
    pub(crate) tenants: Arc<Tenants>,
    pub(crate) throttle: Option<Arc<Throttle>>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) config: Arc<std::sync::Mutex<Config>>,
    /// Held by a reload and by the shared catalog's tenant refresh, so that neither loses the
    /// other's update of `config`.
    pub(crate) applying: Arc<tokio::sync::Mutex<()>>,
    /// The S3 listener's certificate, when it speaks TLS (set once serving).
    pub(crate) tls: Option<ServerTls>,
    /// The continuous scrub (`[gateway.scrub]`; see `scrub`).
    pub(crate) scrub: Arc<crate::scrub::Scrub>,
    /// The seal key of tenants' secrets in the catalog (see `admin::seal`).
    pub(crate) sealer: Arc<Sealer>,
    /// The bearer token `POST /admin` requires (see `admin`); `None`: no admin endpoint.
    pub(crate) admin_token: Option<Arc<str>>,
    /// This gateway's part in cluster-wide QoS, when it shares the tier (see `cluster`).
    pub(crate) cluster: Option<Arc<crate::cluster::Cluster>>,
}

/// Puts the configured tenants' capacity limits into the ledger: bytes, objects (with uploads
/// in progress) and buckets. At start, on reload, and for `sluice tenant list`.
pub fn set_tenant_limits(ledger: &sluice_meta::Ledger, config: &Config) {
    for t in &config.tenants {
        ledger.set_quota(&t.id, t.capacity);
        ledger.set_max_objects(&t.id, t.max_objects);
        ledger.set_max_buckets(&t.id, t.max_buckets);
    }
}

/// The dmClock parameters of the configured tenants.
pub fn tenant_specs(config: &Config) -> Result<Vec<TenantSpec>, GatewayError> {
    config
        .tenants
        .iter()
        .map(|t| {
            sluice_qos::TenantQos::new(t.qos.reservation, t.qos.weight, t.qos.limit)
                .map(|qos| TenantSpec {
                    name: t.id.clone(),
                    qos,
                })
                .map_err(|e| GatewayError::Reload(format!("tenant {:?}: {e}", t.id)))
        })
        .collect()
}

/// The scheduler's served work per tenant and the capacity it paces to (`sluice top`).
fn qos_render(th: &Throttle) -> String {
    use std::fmt::Write as _;
    let tier = th.config().bandwidth;
    let now = th.share().map_or(tier, |s| s.capacity);
    let mut out = format!(
        "# HELP sluice_qos_tier_capacity_bytes_per_second The tier's capacity ([gateway.capacity] bandwidth).\n\
         # TYPE sluice_qos_tier_capacity_bytes_per_second gauge\n\
         sluice_qos_tier_capacity_bytes_per_second {tier}\n\
         # HELP sluice_qos_capacity_bytes_per_second The capacity this gateway paces to now.\n\
         # TYPE sluice_qos_capacity_bytes_per_second gauge\n\
         sluice_qos_capacity_bytes_per_second {now}\n\
         # HELP sluice_qos_served_cost_total Cost units (bytes plus the per-operation cost) the scheduler granted.\n\
         # TYPE sluice_qos_served_cost_total counter\n"
    );
    for u in th.usage() {
        let name = u.name.replace('\\', "\\\\").replace('"', "\\\"");
        let _ = writeln!(
            out,
            "sluice_qos_served_cost_total{{tenant=\"{name}\"}} {}",
            u.served
        );
    }
    out
}

impl Control {
    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let usage = self.catalog.ledger().all();
        let mut gauges = vec![
            Gauge {
                name: "quota_used_bytes",
                help: "Bytes the tenant stores on the shared tier (committed).",
                values: usage
                    .iter()
                    .map(|(t, used, _, _)| (t.clone(), *used as f64))
                    .collect(),
            },
            Gauge {
                name: "quota_reserved_bytes",
                help: "Bytes reserved by writes in progress.",
                values: usage
                    .iter()
                    .map(|(t, _, r, _)| (t.clone(), *r as f64))
                    .collect(),
            },
            Gauge {
                name: "quota_limit_bytes",
                help: "The tenant's hard quota (capacity).",
                values: usage
                    .iter()
                    .map(|(t, _, _, q)| {
                        (
                            t.clone(),
                            if *q == u64::MAX {
                                f64::INFINITY
                            } else {
                                *q as f64
                            },
                        )
                    })
                    .collect(),
            },
        ];
        if let Some(th) = &self.throttle {
            let specs = th.specs();
            gauges.push(Gauge {
                name: "qos_reservation_bytes_per_second",
                help: "Configured dmClock reservation (cost units = bytes per second).",
                values: specs
                    .iter()
                    .map(|s| (s.name.clone(), s.qos.reservation()))
                    .collect(),
            });
            gauges.push(Gauge {
                name: "qos_weight",
                help: "Configured dmClock weight.",
                values: specs
                    .iter()
                    .map(|s| (s.name.clone(), s.qos.weight()))
                    .collect(),
            });
            gauges.push(Gauge {
                name: "qos_limit_bytes_per_second",
                help: "Configured dmClock limit (+Inf: none).",
                values: specs
                    .iter()
                    .map(|s| (s.name.clone(), s.qos.limit().unwrap_or(f64::INFINITY)))
                    .collect(),
            });
            gauges.push(Gauge {
                name: "qos_queued_requests",
                help: "Requests waiting for their first admission now (SlowDown past queue_depth).",
                values: th
                    .usage()
                    .into_iter()
                    .map(|u| (u.name, u.waiting as f64))
                    .collect(),
            });
        }
        let mut text = self.metrics.render("sluice", &gauges);
        if let Some(th) = &self.throttle {
            text.push_str(&qos_render(th));
        }
        text.push_str(&sluice_serve::sendfile::render_metrics());
        text.push_str(&self.scrub.render());
        if let Some(c) = &self.cluster {
            text.push_str(&c.render());
        }
        text
    }

    /// Applies a new configuration (see the module doc for what may change).
    pub async fn reload(&self, new: Config) -> Result<(), GatewayError> {
        let _applying = self.applying.lock().await;
        let old = self
            .config
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let (og, ng) = (gateway_section(&old)?, gateway_section(&new)?);
        if og.listen != ng.listen
            || og.data_dir != ng.data_dir
            || old.backend != new.backend
            || og.throttle != ng.throttle
            || og.metrics_listen != ng.metrics_listen
        {
            return Err(GatewayError::Reload(
                "listen, data_dir, backend, metrics_listen and [gateway.capacity] need a restart"
                    .into(),
            ));
        }
        let staged = match (&self.tls, &ng.tls) {
            (None, None) => None,
            (Some(tls), Some(files)) => Some(tls.check(&files.cert, &files.key)?),
            // Before serving (no listener yet) the files are read when it starts.
            (None, Some(_)) if og.tls.is_some() => None,
            _ => {
                return Err(GatewayError::Reload(
                    "turning TLS on or off (tls_cert, tls_key) needs a restart".into(),
                ));
            }
        };
        // The catalog's tenants are served: the file's are seeded into it first.
        let specs = crate::tenants::seed(&self.catalog, &new, &self.sealer).await?;
        let keys = crate::tenants::keys_of(&specs, &self.sealer);
        let new = crate::tenants::adopt(&new, &specs, &keys);
        if let Some(th) = &self.throttle {
            th.update(tenant_specs(&new)?)
                .await
                .map_err(|e| GatewayError::Reload(e.to_string()))?;
        }
        if let (Some(tls), Some(staged)) = (&self.tls, staged) {
            tls.install(staged);
        }
        self.scrub.configure(gateway_section(&new)?.scrub);
        set_tenant_limits(self.catalog.ledger(), &new);
        self.tenants.replace(keys);
        for t in &new.tenants {
            self.metrics.tenant(&t.id);
        }
        *self
            .config
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = new;
        tracing::info!("configuration reloaded");
        Ok(())
    }

    /// Reads the catalog's tenants and serves them (after an admin change).
    pub(crate) async fn serve_catalog_tenants(&self) -> Result<(), GatewayError> {
        let catalog = Arc::clone(&self.catalog);
        let specs = tokio::task::spawn_blocking(move || catalog.tenants())
            .await
            .map_err(|e| GatewayError::Join(e.to_string()))??
            .unwrap_or_default();
        self.serve_tenants(&specs).await
    }

    /// Serves the catalog's tenants `specs` (quotas, rates and live keys), keeping the
    /// rest of the running configuration (see `tenants`).
    pub(crate) async fn serve_tenants(
        &self,
        specs: &[sluice_meta::TenantSpec],
    ) -> Result<(), GatewayError> {
        let _applying = self.applying.lock().await;
        let current = self
            .config
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let keys = crate::tenants::keys_of(specs, &self.sealer);
        let new = crate::tenants::adopt(&current, specs, &keys);
        if let Some(th) = &self.throttle {
            th.update(tenant_specs(&new)?)
                .await
                .map_err(|e| GatewayError::Reload(e.to_string()))?;
        }
        set_tenant_limits(self.catalog.ledger(), &new);
        self.tenants.replace(keys);
        for t in &new.tenants {
            self.metrics.tenant(&t.id);
        }
        *self
            .config
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = new;
        Ok(())
    }

    /// Serves `/metrics`, `/healthz`, `/readyz` and `POST /admin` (see `admin`) on
    /// `listener` until `stop` changes.
    pub fn serve_metrics(
        self,
        listener: TcpListener,
        stop: watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
            let control = self.clone();
            async move {
                if req.uri().path().starts_with(crate::admin::ADMIN_PATH) {
                    return control.admin(req).await;
                }
                if req.uri().path().starts_with("/qos/") {
                    return Ok(control.qos(req).await);
                }
                Ok::<_, Infallible>(control.answer(&req).await)
            }
        });
        tokio::spawn(sluice_serve::serve_http(
            listener,
            svc,
            sluice_serve::HEADER_READ_TIMEOUT,
            stop,
        ))
    }

    /// Why the gateway is not ready (see the module doc), or `None` when it is.
    pub async fn unready(&self) -> Option<String> {
        let catalog = Arc::clone(&self.catalog);
        let read = tokio::task::spawn_blocking(move || catalog.list_buckets("").map(|_| ()));
        match tokio::time::timeout(READY_TIMEOUT, read).await {
            Err(_) => return Some("the catalog did not answer a read in time".into()),
            Ok(Err(e)) => return Some(format!("the catalog read failed: {e}")),
            Ok(Ok(Err(e))) => return Some(format!("the catalog read failed: {e}")),
            Ok(Ok(Ok(()))) => {}
        }
        match tokio::time::timeout(READY_TIMEOUT, self.backend.list_with_delimiter(None)).await {
            Err(_) => Some("the backend did not answer a listing in time".into()),
            Ok(Err(e)) => Some(format!("the backend is unreachable: {e}")),
            Ok(Ok(_)) => None,
        }
    }

    /// `GET /qos/cluster` (the admin token), `POST /qos/report` (a gateway's signed report)
    /// and `POST /qos/view` (the coordinator's signed view, pushed; see `cluster`).
    async fn qos(&self, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
        let reply = |status: StatusCode, body: String| {
            let mut resp = Response::new(Full::new(Bytes::from(body + "\n")));
            *resp.status_mut() = status;
            resp.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            resp
        };
        let error =
            |status, why: &str| reply(status, serde_json::json!({ "error": why }).to_string());
        let Some(cluster) = &self.cluster else {
            return error(
                StatusCode::NOT_FOUND,
                "this gateway does not share its tier (no shared catalog, no [gateway.capacity], or coordinate = false)",
            );
        };
        match (req.method().clone(), req.uri().path()) {
            (hyper::Method::GET, "/qos/cluster") => {
                let given = req
                    .headers()
                    .get(hyper::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .unwrap_or("");
                let Some(token) = self.admin_token.as_deref() else {
                    return error(StatusCode::NOT_FOUND, "no admin token on this gateway");
                };
                let admin = given.len() == token.len()
                    && given
                        .bytes()
                        .zip(token.bytes())
                        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
                        == 0;
                if !admin && crate::admin::node::node_of(token, given).is_none() {
                    tracing::warn!("a read of /qos/cluster without the admin token refused");
                    return error(
                        StatusCode::UNAUTHORIZED,
                        "admin credentials required (Authorization: Bearer <admin token>)",
                    );
                }
                let view = serde_json::to_string(&cluster.view()).unwrap_or_default();
                reply(StatusCode::OK, view)
            }
            (hyper::Method::POST, "/qos/report") => {
                let body = match signed_body(cluster, req, 1 << 20, "report").await {
                    Ok(body) => body,
                    Err((status, why)) => return error(status, &why),
                };
                let report = match serde_json::from_slice::<crate::cluster::Report>(&body) {
                    Ok(r) => r,
                    Err(e) => return error(StatusCode::BAD_REQUEST, &format!("not a report: {e}")),
                };
                match cluster.take_report(report) {
                    Some(view) => reply(
                        StatusCode::OK,
                        serde_json::to_string(&view).unwrap_or_default(),
                    ),
                    None => error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "not coordinating now (or still collecting reports)",
                    ),
                }
            }
            (hyper::Method::POST, "/qos/view") => {
                let body = match signed_body(cluster, req, 4 << 20, "view").await {
                    Ok(body) => body,
                    Err((status, why)) => return error(status, &why),
                };
                match serde_json::from_slice::<crate::cluster::View>(&body) {
                    Ok(view) => {
                        let taken = cluster.take_view(view);
                        reply(
                            StatusCode::OK,
                            serde_json::json!({ "taken": taken }).to_string(),
                        )
                    }
                    Err(e) => error(StatusCode::BAD_REQUEST, &format!("not a view: {e}")),
                }
            }
            _ => error(
                StatusCode::METHOD_NOT_ALLOWED,
                "GET /qos/cluster, POST /qos/report or POST /qos/view",
            ),
        }
    }

    async fn answer<B>(&self, req: &Request<B>) -> Response<Full<Bytes>> {
        let (status, ctype, body) = match req.uri().path() {
            "/metrics" => (StatusCode::OK, "text/plain; version=0.0.4", self.render()),
            "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
            "/readyz" => match self.unready().await {
                None => (StatusCode::OK, "text/plain", "ready\n".to_owned()),
                Some(why) => {
                    tracing::warn!(reason = %why, "not ready");
                    (StatusCode::SERVICE_UNAVAILABLE, "text/plain", why + "\n")
                }
            },
            _ => (
                StatusCode::NOT_FOUND,
                "text/plain",
                "not found; try /metrics, /healthz, /readyz, GET /qos/cluster or POST /admin\n"
                    .to_owned(),
            ),
        };
        let mut resp = Response::new(Full::new(Bytes::from(body)));
        *resp.status_mut() = status;
        resp.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static(ctype),
        );
        resp
    }
}

/// The body of a POST another gateway of the deployment signed (a QoS `what`: report or
/// view), read up to `limit` bytes; refused 400 when it cannot be read, 403 when its
/// signature is not the deployment's.
async fn signed_body(
    cluster: &crate::cluster::Cluster,
    req: Request<hyper::body::Incoming>,
    limit: usize,
    what: &str,
) -> Result<Bytes, (StatusCode, String)> {
    use http_body_util::BodyExt as _;
    let signature = req
        .headers()
        .get(crate::cluster::SIGNATURE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .unwrap_or_default();
    let body = http_body_util::Limited::new(req.into_body(), limit)
        .collect()
        .await
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("reading the body: {e}")))?
        .to_bytes();
    if !cluster.verify(&signature, &body) {
        tracing::warn!("a QoS {what} without a valid signature refused");
        return Err((
            StatusCode::FORBIDDEN,
            format!("not a signed {what} of this deployment"),
        ));
    }
    Ok(body)
}
