//! Administration of a running deployment: tenants, quotas, rates and keys changed online
//! (`sluice tenant add|set|key add|key revoke|remove|list|history`).
//!
//! Every change is one [`AdminRequest`], executed by [`execute`] against the catalog, which
//! applies it with its audit entry in one transaction ([`sluice_meta::Engine::change_tenant`]).
//! Where it runs depends on the catalog:
//! - **embedded** (redb, which one process holds): the CLI sends the request to the running
//!   gateway's control listener (`[gateway] metrics_listen`), `POST /admin` with a JSON body
//!   and `Authorization: Bearer <token>`; the token is `[admin] token`, or the gateway's own
//!   in `data_dir/admin.token` (created at start, mode 0600: readable only by the gateway's
//!   user). The gateway serves the change before it answers.
//! - **shared** (PostgreSQL): the CLI connects to the catalog itself with `[catalog] url`, the
//!   catalog's own credentials, and executes the request there; every gateway reads the
//!   tenants again every second ([`crate::TENANT_REFRESH`]).
//!
//! No tenant credential is ever an admin credential: the control listener accepts only the
//! bearer token (a SigV4 `Authorization` is refused), and the S3 listener serves no admin
//! operation. Secrets are sealed before they reach the catalog (`seal`), and no answer but
//! the one creating a key carries a secret.

pub mod node;
mod purge;
pub mod seal;

use std::convert::Infallible;
use std::path::PathBuf;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request, Response, StatusCode};
use serde::Deserialize;
use sluice_config::Config;
use sluice_meta::{
    AuditEntry, Catalog, LocalSettings, TenantChange, TenantKeySpec, TenantPatch, TenantRefusal,
    TenantSpec, now_ms,
};

pub use purge::{Purged, purge};
pub use seal::{SealError, Sealer};

use crate::{Control, GatewayError, gateway_section};

/// The control listener's path of admin requests.
pub const ADMIN_PATH: &str = "/admin";

/// The largest admin request body.
const MAX_BODY: usize = 64 * 1024;

/// A tenant's settings in an admin request; `None` keeps (for `set`) or defaults (for `add`:
/// no object limit, 1000 buckets, reservation 0, weight 1, no limit).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub capacity: Option<u64>,
    pub max_objects: Option<u64>,
    pub max_buckets: Option<u64>,
    /// Bytes per second.
    pub reservation: Option<f64>,
    pub weight: Option<f64>,
    /// Bytes per second; `0` removes the limit (`set`).
    pub limit: Option<f64>,
    /// The node agents' settings of the tenant, held in the catalog and served to them
    /// (`sluice_meta::LocalSettings`): bytes, bytes per second, the weight, bytes per second
    /// (`0` removes the local limit).
    #[serde(default)]
    pub local_capacity: Option<u64>,
    #[serde(default)]
    pub local_reservation: Option<f64>,
    #[serde(default)]
    pub local_weight: Option<f64>,
    #[serde(default)]
    pub local_limit: Option<f64>,
    /// `set`: the catalog no longer holds the node-local settings not given here (the
    /// agents' files govern them again).
    #[serde(default)]
    pub clear_local: bool,
}

impl Settings {
    /// The node-local settings given, for a new tenant.
    fn local(&self) -> LocalSettings {
        LocalSettings {
            capacity: self.local_capacity,
            reservation: self.local_reservation,
            weight: self.local_weight,
            limit: self.local_limit.filter(|l| *l > 0.0),
        }
    }
}

/// One admin operation, as the CLI sends it (JSON, `"op"` names it).
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum AdminRequest {
    Add {
        id: String,
        #[serde(default)]
        settings: Settings,
    },
    Set {
        id: String,
        #[serde(default)]
        settings: Settings,
    },
    KeyAdd {
        id: String,
        /// ms since the Unix epoch after which the key stops working.
        #[serde(default)]
        expires_ms: Option<i64>,
    },
    KeyRevoke {
        id: String,
        access_key: String,
    },
    Remove {
        id: String,
    },
    List,
    History {
        #[serde(default)]
        id: Option<String>,
    },
}

impl AdminRequest {
    /// The request as JSON (what the CLI sends).
    pub fn to_json(&self) -> serde_json::Value {
        let s = |s: &Settings| {
            serde_json::json!({
                "capacity": s.capacity, "max_objects": s.max_objects,
                "max_buckets": s.max_buckets, "reservation": s.reservation,
                "weight": s.weight, "limit": s.limit, "local_capacity": s.local_capacity,
                "local_reservation": s.local_reservation, "local_weight": s.local_weight,
                "local_limit": s.local_limit, "clear_local": s.clear_local,
            })
        };
        match self {
            Self::Add { id, settings } => {
                serde_json::json!({ "op": "add", "id": id, "settings": s(settings) })
            }
            Self::Set { id, settings } => {
                serde_json::json!({ "op": "set", "id": id, "settings": s(settings) })
            }
            Self::KeyAdd { id, expires_ms } => {
                serde_json::json!({ "op": "key-add", "id": id, "expires_ms": expires_ms })
            }
            Self::KeyRevoke { id, access_key } => {
                serde_json::json!({ "op": "key-revoke", "id": id, "access_key": access_key })
            }
            Self::Remove { id } => serde_json::json!({ "op": "remove", "id": id }),
            Self::List => serde_json::json!({ "op": "list" }),
            Self::History { id } => serde_json::json!({ "op": "history", "id": id }),
        }
    }
}

/// Why an admin request failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The catalog refused the change (nothing changed).
    #[error("{0}")]
    Refused(#[from] TenantRefusal),
    #[error("catalog: {0}")]
    Catalog(#[from] sluice_meta::MetaError),
    #[error("{0}")]
    Seal(#[from] SealError),
    #[error("{0}")]
    Invalid(String),
}

impl AdminError {
    fn status(&self) -> StatusCode {
        match self {
            Self::Refused(TenantRefusal::NoSuchTenant(_) | TenantRefusal::NoSuchKey { .. }) => {
                StatusCode::NOT_FOUND
            }
            Self::Refused(TenantRefusal::Invalid(_)) | Self::Invalid(_) => StatusCode::BAD_REQUEST,
            Self::Refused(_) => StatusCode::CONFLICT,
            Self::Catalog(_) | Self::Seal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// A new access key: `SL` and 18 upper-case hex digits, like S3's 20-character ids.
fn new_access_key() -> String {
    format!("SL{}", seal::random_hex(9).to_uppercase())
}

/// What the deployment allows beside the catalog's own rules: the reservations' sum within
/// the tier's bandwidth when dmClock schedules it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub bandwidth: Option<f64>,
}

impl Limits {
    /// The limits of `config`'s gateway.
    pub fn of(config: &Config) -> Self {
        let bandwidth = config
            .gateway
            .as_ref()
            .and_then(|g| g.throttle)
            .filter(|t| t.policy == sluice_config::Policy::DmClock)
            .map(|t| t.bandwidth);
        Self { bandwidth }
    }
}

fn change_of(
    req: &AdminRequest,
    sealer: &Sealer,
    now: i64,
) -> Option<(TenantChange, Option<(String, String)>)> {
    let new_key = |expires_ms| {
        let access = new_access_key();
        let secret = seal::random_hex(20);
        let key = TenantKeySpec {
            expires_ms,
            ..TenantKeySpec::new(access.clone(), sealer.seal(&access, &secret), now)
        };
        (key, (access, secret))
    };
    Some(match req {
        AdminRequest::Add { id, settings: s } => {
            let (key, shown) = new_key(None);
            let spec = TenantSpec {
                id: id.clone(),
                capacity: s.capacity.unwrap_or(u64::MAX),
                max_objects: s.max_objects.unwrap_or(u64::MAX),
                max_buckets: s.max_buckets.unwrap_or(sluice_config::DEFAULT_MAX_BUCKETS),
                reservation: s.reservation.unwrap_or(0.0),
                weight: s.weight.unwrap_or(1.0),
                limit: s.limit.filter(|l| *l > 0.0),
                keys: vec![key],
                online: true,
                local: s.local(),
            };
            (TenantChange::Add(spec), Some(shown))
        }
        AdminRequest::Set { id, settings: s } => {
            // Given: set; not given: kept, or with `clear_local` no longer held.
            #[allow(clippy::option_option)] // TenantPatch's shape: kept, set or cleared
            fn local<T>(given: Option<T>, clear: bool) -> Option<Option<T>> {
                given.map(Some).or(clear.then_some(None))
            }
            let c = s.clear_local;
            (
                TenantChange::Set {
                    id: id.clone(),
                    patch: TenantPatch {
                        capacity: s.capacity,
                        max_objects: s.max_objects,
                        max_buckets: s.max_buckets,
                        reservation: s.reservation,
                        weight: s.weight,
                        limit: s.limit.map(|l| (l > 0.0).then_some(l)),
                        local_capacity: local(s.local_capacity, c),
                        local_reservation: local(s.local_reservation, c),
                        local_weight: local(s.local_weight, c),
                        local_limit: s
                            .local_limit
                            .map(|l| (l > 0.0).then_some(l))
                            .or(c.then_some(None)),
                    },
                },
                None,
            )
        }
        AdminRequest::KeyAdd { id, expires_ms } => {
            let (key, shown) = new_key(*expires_ms);
            (
                TenantChange::AddKey {
                    id: id.clone(),
                    key,
                },
                Some(shown),
            )
        }
        AdminRequest::KeyRevoke { id, access_key } => (
            TenantChange::RevokeKey {
                id: id.clone(),
                access_key: access_key.clone(),
            },
            None,
        ),
        AdminRequest::Remove { id } => (TenantChange::Remove { id: id.clone() }, None),
        AdminRequest::List | AdminRequest::History { .. } => return None,
    })
}

/// One tenant as `tenant list --json` shows it: usage, quota, rates and key ids, never a
/// secret.
pub fn tenant_row(catalog: &Catalog, t: &TenantSpec, now: i64) -> serde_json::Value {
    let limit = |n: u64| (n != u64::MAX).then_some(n);
    let used = catalog.ledger().usage(&t.id).map_or(0, |u| u.0);
    let objects = catalog.ledger().objects(&t.id).map_or(0, |o| o.0);
    let keys: Vec<_> = t
        .keys
        .iter()
        .map(|k| {
            serde_json::json!({
                "access_key": k.access_key, "created_ms": k.created_ms,
                "expires_ms": k.expires_ms, "revoked_ms": k.revoked_ms, "live": k.live(now),
            })
        })
        .collect();
    serde_json::json!({
        "tenant": t.id, "used_bytes": used, "quota_bytes": limit(t.capacity),
        "objects": objects, "max_objects": limit(t.max_objects),
        "max_buckets": limit(t.max_buckets), "reservation": t.reservation,
        "weight": t.weight, "limit": t.limit, "keys": keys,
        "local_capacity": t.local.capacity, "local_reservation": t.local.reservation,
        "local_weight": t.local.weight, "local_limit": t.local.limit,
    })
}

fn audit_row(e: &AuditEntry) -> serde_json::Value {
    serde_json::json!({
        "at_ms": e.at_ms, "who": e.who, "tenant": e.tenant, "action": e.action,
        "detail": serde_json::from_str::<serde_json::Value>(&e.detail)
            .unwrap_or_else(|_| serde_json::Value::String(e.detail.clone())),
    })
}

/// Executes `req` against `catalog` as `who` (blocking: call from a blocking thread). The
/// answer: `{"id", "access_key", "secret_key"}` for `add` and `key-add`, the tenant's row for
/// `set`, `{"id", "access_key", "revoked": true}`, `{"id", "removed": true}`, the rows for
/// `list`, the audit entries for `history`.
pub fn execute(
    catalog: &Catalog,
    sealer: &Sealer,
    limits: Limits,
    req: &AdminRequest,
    who: &str,
) -> Result<serde_json::Value, AdminError> {
    let now = now_ms();
    let tenants =
        || -> Result<Vec<TenantSpec>, AdminError> { Ok(catalog.tenants()?.unwrap_or_default()) };
    let Some((change, shown)) = change_of(req, sealer, now) else {
        return Ok(match req {
            AdminRequest::History { id } => serde_json::Value::Array(
                catalog
                    .tenant_history(id.as_deref())?
                    .iter()
                    .map(audit_row)
                    .collect(),
            ),
            _ => serde_json::Value::Array(
                tenants()?
                    .iter()
                    .map(|t| tenant_row(catalog, t, now))
                    .collect(),
            ),
        });
    };
    if let Some(bandwidth) = limits.bandwidth {
        // What the change would make of the tenants, checked before it is committed: the
        // scheduler refuses reservations over the tier's bandwidth.
        let all = tenants()?;
        let applied = sluice_meta::apply_change(&all, &change, who, now, |_| 0)?;
        let total: f64 = all
            .iter()
            .filter(|t| t.id != applied.id)
            .chain(applied.after.as_ref())
            .map(|t| t.reservation)
            .sum();
        if total > bandwidth {
            return Err(AdminError::Invalid(format!(
                "reservations would sum to {total} B/s, over the tier's bandwidth of \
                 {bandwidth} B/s ([gateway.capacity])"
            )));
        }
    }
    let after = catalog.change_tenant(&change, who)??;
    Ok(match (req, shown, after) {
        (_, Some((access_key, secret_key)), _) => serde_json::json!({
            "id": change_id(&change), "access_key": access_key, "secret_key": secret_key,
        }),
        (AdminRequest::KeyRevoke { id, access_key }, _, _) => {
            serde_json::json!({ "id": id, "access_key": access_key, "revoked": true })
        }
        (_, None, Some(t)) => tenant_row(catalog, &t, now),
        (_, None, None) => serde_json::json!({ "id": change_id(&change), "removed": true }),
    })
}

fn change_id(change: &TenantChange) -> &str {
    match change {
        TenantChange::Add(s) => &s.id,
        TenantChange::Set { id, .. }
        | TenantChange::AddKey { id, .. }
        | TenantChange::RevokeKey { id, .. }
        | TenantChange::Remove { id } => id,
    }
}

/// The seal key of tenants' secrets for `config` (see `seal`): `[admin] seal_key_file`, else
/// with a shared catalog one derived from its URL, else `data_dir/seal.key` (created if
/// `create`).
pub fn sealer(config: &Config, create: bool) -> Result<Sealer, GatewayError> {
    if let Some(path) = &config.admin.seal_key_file {
        return Ok(Sealer::new(&seal::read_key(path)?));
    }
    if let Some(shared) = &config.catalog {
        return Ok(Sealer::derived_from(&shared.url));
    }
    let path = gateway_section(config)?.data_dir.join("seal.key");
    let key = if create {
        seal::create_private(&path, &seal::random_hex(32))
    } else {
        std::fs::read_to_string(&path).map(|s| s.trim().to_owned())
    }
    .map_err(|source| GatewayError::DataDir {
        path: path.clone(),
        source,
    })?;
    Ok(Sealer::new(key.as_bytes()))
}

/// Where the gateway's own admin token lives.
pub fn token_path(config: &Config) -> Result<PathBuf, GatewayError> {
    Ok(gateway_section(config)?.data_dir.join("admin.token"))
}

/// The admin token: `[admin] token`, else the gateway's own (created if `create`).
pub fn admin_token(config: &Config, create: bool) -> Result<String, GatewayError> {
    if let Some(t) = &config.admin.token {
        return Ok(t.clone());
    }
    let path = token_path(config)?;
    if create {
        seal::create_private(&path, &seal::random_hex(32))
    } else {
        std::fs::read_to_string(&path).map(|s| s.trim().to_owned())
    }
    .map_err(|source| GatewayError::DataDir { path, source })
}

/// Whether `a` and `b` are equal, in time independent of where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string() + "\n")));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    resp
}

fn refused(status: StatusCode, why: &str) -> Response<Full<Bytes>> {
    json_response(status, &serde_json::json!({ "error": why }))
}

impl Control {
    /// `POST /admin` on the control listener (see the module doc).
    pub(crate) async fn admin(
        &self,
        req: Request<hyper::body::Incoming>,
    ) -> Result<Response<Full<Bytes>>, Infallible> {
        let Some(token) = self.admin_token.as_deref() else {
            return Ok(refused(
                StatusCode::NOT_FOUND,
                "no admin endpoint on this gateway",
            ));
        };
        let auth = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let Some(auth) = auth else {
            return Ok(refused(
                StatusCode::UNAUTHORIZED,
                "admin credentials required (Authorization: Bearer <admin token>)",
            ));
        };
        let given = auth.strip_prefix("Bearer ").unwrap_or("");
        if req.uri().path() == node::NODE_PATH {
            return Ok(self.node_read(&req, token, given).await);
        }
        if !same(given.as_bytes(), token.as_bytes()) {
            tracing::warn!("an admin request with other credentials than the admin token refused");
            return Ok(refused(
                StatusCode::FORBIDDEN,
                "not the admin credentials (tenants' keys are never admin credentials)",
            ));
        }
        if req.method() != hyper::Method::POST || req.uri().path() != ADMIN_PATH {
            return Ok(refused(
                StatusCode::METHOD_NOT_ALLOWED,
                "POST /admin with a JSON body",
            ));
        }
        let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                return Ok(refused(
                    StatusCode::BAD_REQUEST,
                    &format!("reading the body: {e}"),
                ));
            }
        };
        #[derive(Deserialize)]
        struct Envelope {
            #[serde(default)]
            who: Option<String>,
            #[serde(flatten)]
            rest: serde_json::Value,
        }
        let parsed = serde_json::from_slice::<Envelope>(&body)
            .and_then(|e| serde_json::from_value::<AdminRequest>(e.rest).map(|r| (e.who, r)));
        let (who, request) = match parsed {
            Ok(p) => p,
            Err(e) => {
                return Ok(refused(
                    StatusCode::BAD_REQUEST,
                    &format!("not an admin request: {e}"),
                ));
            }
        };
        let who = format!(
            "{} (admin token)",
            who.filter(|w| w.len() <= 128)
                .unwrap_or_else(|| "unnamed".into())
        );
        let (catalog, sealer) = (
            std::sync::Arc::clone(&self.catalog),
            std::sync::Arc::clone(&self.sealer),
        );
        let limits = Limits::of(
            &self
                .config
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let changes = !matches!(request, AdminRequest::List | AdminRequest::History { .. });
        let done =
            tokio::task::spawn_blocking(move || execute(&catalog, &sealer, limits, &request, &who))
                .await;
        let answer = match done {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => return Ok(refused(e.status(), &e.to_string())),
            Err(e) => return Ok(refused(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())),
        };
        if changes && let Err(e) = self.serve_catalog_tenants().await {
            tracing::error!(error = %e, "a tenant change was committed but not applied");
            return Ok(refused(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("committed, but not applied here: {e}"),
            ));
        }
        Ok(json_response(StatusCode::OK, &answer))
    }
}

impl Control {
    /// `GET /admin/tenants` with a node credential or the admin token (see `node`).
    async fn node_read(
        &self,
        req: &Request<hyper::body::Incoming>,
        token: &str,
        given: &str,
    ) -> Response<Full<Bytes>> {
        let who = if same(given.as_bytes(), token.as_bytes()) {
            "the admin token".to_owned()
        } else if let Some(n) = node::node_of(token, given) {
            format!("node {n}")
        } else {
            tracing::warn!(
                "a read of the tenants with neither a node credential nor the admin token refused"
            );
            return refused(
                StatusCode::FORBIDDEN,
                "not a node credential (sluice tenant node-token NODE) nor the admin token",
            );
        };
        if req.method() != hyper::Method::GET {
            return refused(
                StatusCode::METHOD_NOT_ALLOWED,
                "GET /admin/tenants: a node credential reads the tenants, it changes nothing",
            );
        }
        let catalog = std::sync::Arc::clone(&self.catalog);
        let specs = match tokio::task::spawn_blocking(move || catalog.tenants()).await {
            Ok(Ok(specs)) => specs.unwrap_or_default(),
            Ok(Err(e)) => return refused(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
            Err(e) => return refused(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        };
        tracing::debug!(%who, tenants = specs.len(), "the tenants read");
        json_response(StatusCode::OK, &node::tenants_answer(&specs, &self.sealer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_from_the_clis_json_and_back() {
        let reqs = [
            AdminRequest::Add {
                id: "t".into(),
                settings: Settings {
                    capacity: Some(5),
                    ..Settings::default()
                },
            },
            AdminRequest::KeyRevoke {
                id: "t".into(),
                access_key: "AK".into(),
            },
            AdminRequest::History { id: None },
            AdminRequest::List,
        ];
        for r in reqs {
            let back: AdminRequest = serde_json::from_value(r.to_json()).expect("parses");
            assert_eq!(back.to_json(), r.to_json());
        }
        assert!(serde_json::from_str::<AdminRequest>(r#"{"op":"drop-all"}"#).is_err());
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd") && !same(b"abc", b"ab") && !same(b"", b"a"));
    }

    #[test]
    fn a_key_added_online_is_sealed_in_the_catalog_and_shown_once() {
        let dir = tempfile::tempdir().expect("tmp");
        let (catalog, _) = Catalog::open(&dir.path().join("m.redb")).expect("open");
        let sealer = Sealer::new(b"k");
        let add = AdminRequest::Add {
            id: "t".into(),
            settings: Settings {
                capacity: Some(1 << 20),
                ..Settings::default()
            },
        };
        let shown = execute(&catalog, &sealer, Limits::default(), &add, "me").expect("added");
        let (ak, sk) = (
            shown["access_key"].as_str().expect("ak"),
            shown["secret_key"].as_str().expect("sk"),
        );
        let stored = &catalog.tenants().expect("read").expect("some")[0].keys[0];
        assert_eq!(stored.access_key, ak);
        assert!(!stored.secret_key.contains(sk), "sealed at rest");
        assert_eq!(sealer.open(ak, &stored.secret_key).expect("opens"), sk);
        let list = execute(
            &catalog,
            &sealer,
            Limits::default(),
            &AdminRequest::List,
            "me",
        )
        .expect("list");
        assert!(!list.to_string().contains(sk), "no secret in a listing");
        let over = AdminRequest::Set {
            id: "t".into(),
            settings: Settings {
                reservation: Some(2e6),
                ..Settings::default()
            },
        };
        let refused = execute(
            &catalog,
            &sealer,
            Limits {
                bandwidth: Some(1e6),
            },
            &over,
            "me",
        );
        assert!(
            matches!(refused, Err(AdminError::Invalid(_))),
            "{refused:?}"
        );
    }

    #[test]
    fn node_local_settings_are_added_raised_cleared_listed_and_served_to_the_agents() {
        let dir = tempfile::tempdir().expect("tmp");
        let (catalog, _) = Catalog::open(&dir.path().join("m.redb")).expect("open");
        let sealer = Sealer::new(b"k");
        let run = |req: AdminRequest| execute(&catalog, &sealer, Limits::default(), &req, "me");
        let add = AdminRequest::Add {
            id: "t".into(),
            settings: Settings {
                capacity: Some(1 << 30),
                local_capacity: Some(1 << 20),
                local_weight: Some(4.0),
                ..Settings::default()
            },
        };
        let back: AdminRequest = serde_json::from_value(add.to_json()).expect("parses");
        assert_eq!(back.to_json(), add.to_json());
        run(add).expect("added");
        let row = run(AdminRequest::Set {
            id: "t".into(),
            settings: Settings {
                local_capacity: Some(2 << 20),
                local_limit: Some(5e6),
                ..Settings::default()
            },
        })
        .expect("raised");
        assert_eq!(
            (
                &row["local_capacity"],
                &row["local_weight"],
                &row["local_limit"],
                &row["local_reservation"]
            ),
            (
                &serde_json::json!(2 << 20),
                &serde_json::json!(4.0),
                &serde_json::json!(5e6),
                &serde_json::Value::Null
            ),
            "what was not given is kept: {row}"
        );
        let specs = catalog.tenants().expect("read").expect("some");
        let answer = node::tenants_answer(&specs, &sealer);
        assert_eq!(answer["tenants"][0]["local_capacity"], 2 << 20);
        assert_eq!(answer["tenants"][0]["local_weight"], 4.0);
        let refused = run(AdminRequest::Set {
            id: "t".into(),
            settings: Settings {
                local_weight: Some(-1.0),
                ..Settings::default()
            },
        });
        assert!(
            matches!(&refused, Err(AdminError::Refused(TenantRefusal::Invalid(w))) if w.contains("local_weight")),
            "{refused:?}"
        );
        let row = run(AdminRequest::Set {
            id: "t".into(),
            settings: Settings {
                local_limit: Some(0.0),
                ..Settings::default()
            },
        })
        .expect("limit removed");
        assert_eq!(row["local_limit"], serde_json::Value::Null);
        assert_eq!(row["local_capacity"], 2 << 20);
        let row = run(AdminRequest::Set {
            id: "t".into(),
            settings: Settings {
                local_weight: Some(2.0),
                clear_local: true,
                ..Settings::default()
            },
        })
        .expect("cleared");
        assert_eq!(
            (&row["local_capacity"], &row["local_weight"]),
            (&serde_json::Value::Null, &serde_json::json!(2.0)),
            "cleared but for what was given: {row}"
        );
    }
}
