//! From the file schema to validated runtime types. Every error names its field.

use std::collections::HashSet;
use std::path::Path;

use crate::file::{FileCapacity, FileConfig, FileDevice, FileRetention, FileTenant, OneOrMany};
use crate::{
    AgentConfig, Backend, Capacity, Config, ConfigError, DEFAULT_COMMIT_MARKERS, Device,
    GatewayConfig, LocalSpec, Policy, Qos, Retention, S3Backend, Tenant, TlsFiles,
};

const GIB: u64 = 1024 * 1024 * 1024;
/// Operations per second assumed when `[gateway.capacity]` gives only a bandwidth: effectively
/// free operations, every byte still counted.
const UNBOUNDED_OPS: f64 = 1e9;

/// Validates a parsed file; relative paths resolve against `base` (the file's directory).
pub fn validate(file: FileConfig, base: &Path) -> Result<Config, ConfigError> {
    let resolve = |p: &str| {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_owned()
        } else {
            base.join(p)
        }
    };

    let gateway = match file.gateway {
        None => None,
        Some(g) => {
            let capacity = match g.capacity {
                None => None,
                Some(c) => Some(capacity(
                    "gateway.capacity",
                    "the shared tier's measured throughput",
                    &c,
                )?),
            };
            let region = g.region.unwrap_or_else(|| "us-east-1".to_owned());
            if region.is_empty() {
                return Err(ConfigError::invalid("gateway.region", "must not be empty"));
            }
            let max_object_size = g.max_object_size.map_or(5 * 1024 * GIB, |s| s.0);
            if max_object_size == 0 {
                return Err(ConfigError::invalid(
                    "gateway.max_object_size",
                    "must be positive",
                ));
            }
            let tls = tls_files(
                "gateway",
                g.tls_cert.as_deref(),
                g.tls_key.as_deref(),
                &resolve,
            )?;
            Some(GatewayConfig {
                listen: g.listen.unwrap_or_else(|| "127.0.0.1:9000".to_owned()),
                data_dir: resolve(g.data_dir.as_deref().unwrap_or("./data/gateway")),
                region,
                metrics_listen: g.metrics_listen,
                advertise: g.advertise.as_deref().map(advertise).transpose()?,
                max_object_size,
                throttle: capacity,
                tls,
                scrub: crate::scrub::validate(g.scrub)?,
            })
        }
    };

    let emulate = match file.backend.as_ref().and_then(|b| b.emulate.as_ref()) {
        None => None,
        Some(d) => {
            positive("backend.emulate.bandwidth", d.bandwidth.0)?;
            positive("backend.emulate.ops", d.ops)?;
            Some(Device {
                bandwidth: d.bandwidth.0,
                ops: d.ops,
            })
        }
    };
    let emulate_shared = match file.backend.as_ref().and_then(|b| b.emulate.as_ref()) {
        Some(FileDevice {
            shared: Some(p), ..
        }) => {
            if p.trim().is_empty() {
                return Err(ConfigError::invalid(
                    "backend.emulate.shared",
                    "an empty path: name the device's state file, or leave the key out",
                ));
            }
            Some(resolve(p))
        }
        _ => None,
    };
    let backend = match file.backend {
        None => Backend::Local,
        Some(b) => match b.url.as_deref() {
            None | Some("" | "file://" | "local") => Backend::Local,
            Some(url) => {
                let bucket = url.strip_prefix("s3://").ok_or_else(|| {
                    ConfigError::invalid(
                        "backend.url",
                        format!("{url:?}: expected s3://BUCKET (or omit [backend] for the local filesystem)"),
                    )
                })?;
                let bucket = bucket.trim_end_matches('/');
                if bucket.is_empty() || bucket.contains('/') {
                    return Err(ConfigError::invalid(
                        "backend.url",
                        format!("{url:?}: expected s3://BUCKET with a bucket name and no path"),
                    ));
                }
                let access_key = b.access_key.ok_or_else(|| {
                    ConfigError::invalid("backend.access_key", "required for an s3:// backend")
                })?;
                let secret_key = b.secret_key.ok_or_else(|| {
                    ConfigError::invalid("backend.secret_key", "required for an s3:// backend")
                })?;
                Backend::S3(S3Backend {
                    bucket: bucket.to_owned(),
                    endpoint: b.endpoint,
                    region: b.region.unwrap_or_else(|| "us-east-1".to_owned()),
                    access_key,
                    secret_key,
                })
            }
        },
    };

    let agent = match file.agent {
        None => None,
        Some(a) => Some(AgentConfig {
            tls: tls_files(
                "agent",
                a.tls_cert.as_deref(),
                a.tls_key.as_deref(),
                &resolve,
            )?,
            listen: a.listen.unwrap_or_else(|| "127.0.0.1:9100".to_owned()),
            data_dir: resolve(a.data_dir.as_deref().unwrap_or("./data/agent")),
            upstream: upstreams(a.upstream)?,
            upstream_region: a.upstream_region.unwrap_or_else(|| "us-east-1".to_owned()),
            status_listen: a.status_listen,
            upstream_ca: a.upstream_ca.as_deref().map(&resolve),
            escrow_lease: escrow_lease(a.escrow_lease)?,
            capacity: match &a.capacity {
                None => None,
                Some(c) => Some(crate::node::capacity(c)?),
            },
            uplink: a
                .capacity
                .as_ref()
                .map(crate::node::uplink)
                .transpose()?
                .flatten(),
            emulate: a.emulate.as_ref().map(crate::node::emulate).transpose()?,
            fetch: tenant_fetch(
                a.node_credential_file.as_deref().map(&resolve),
                a.gateway_control,
            )?,
        }),
    };
    let mut tenants = Vec::with_capacity(file.tenants.len());
    let mut ids = HashSet::new();
    let mut keys = HashSet::new();
    let mut encryption = std::collections::BTreeMap::new();
    for (i, mut t) in file.tenants.into_iter().enumerate() {
        let label = format!("tenant[{i}] {:?}", t.id);
        let named = |e| match e {
            ConfigError::Invalid { field, problem } => {
                ConfigError::invalid(format!("{label}: {field}"), problem)
            }
            other => other,
        };
        let encrypted = crate::encryption::validate(t.encryption.take(), base).map_err(named)?;
        let tenant = tenant(t).map_err(named)?;
        if let Some(e) = encrypted {
            encryption.insert(tenant.id.clone(), e);
        }
        if !ids.insert(tenant.id.clone()) {
            return Err(ConfigError::invalid(
                format!("{label}: id"),
                "duplicate tenant id",
            ));
        }
        if !keys.insert(tenant.access_key.clone()) {
            return Err(ConfigError::invalid(
                format!("{label}: access_key"),
                "another tenant already uses this access key",
            ));
        }
        tenants.push(tenant);
    }

    if let Some(c) = gateway.as_ref().and_then(|g| g.throttle) {
        check_reservations(&tenants, c)?;
    }
    if let Some(a) = &agent {
        crate::node::check_local_shares(&tenants, a.capacity)?;
    }

    let catalog = crate::catalog::validate(file.catalog)?;
    if let Some(g) = &gateway {
        check_advertised(g, catalog.is_some())?;
    }

    Ok(Config {
        gateway,
        backend,
        emulate,
        emulate_shared,
        agent,
        tenants,
        catalog,
        admin: crate::admin::validate(file.admin, base)?,
        encryption,
    })
}

/// `[gateway] advertise`: `http://host:port`, `https://host:port` or `host:port` (read as
/// `http://`), with a port and nothing after it; the URL, without a trailing `/`.
fn advertise(given: &str) -> Result<String, ConfigError> {
    let bad = |why: &str| {
        ConfigError::invalid(
            "gateway.advertise",
            format!(
                "{given:?}: {why}; expected http(s)://host:port or host:port, an address the \
                 other gateways reach this one's metrics_listen at"
            ),
        )
    };
    let (scheme, rest) = match given.split_once("://") {
        Some((s @ ("http" | "https"), rest)) => (s, rest),
        Some(_) => return Err(bad("the scheme must be http or https")),
        None => ("http", given),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains(['/', '?', '#', '@']) || rest.contains(char::is_whitespace) {
        return Err(bad("only a host and a port"));
    }
    let Some((host, port)) = rest.rsplit_once(':') else {
        return Err(bad("no port"));
    };
    if port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(bad("the port must be 1–65535"));
    }
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
    let unspecified = bare
        .unwrap_or(host)
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified());
    if host.is_empty() || unspecified {
        return Err(bad(
            "a host the other gateways can reach (not 0.0.0.0 or ::)",
        ));
    }
    Ok(format!("{scheme}://{rest}"))
}

/// With cluster-wide QoS on (a shared catalog, `policy = "dmclock"` and `coordinate`), a
/// gateway tells the others where its control listener is: an unspecified bind address
/// (`0.0.0.0`, `::`) says nothing they can reach, so it needs `advertise`.
fn check_advertised(g: &GatewayConfig, shared: bool) -> Result<(), ConfigError> {
    let coordinated = shared
        && g.throttle
            .is_some_and(|c| c.coordinate && c.policy == Policy::DmClock);
    let Some(listen) = g.metrics_listen.as_deref() else {
        return Ok(());
    };
    let unspecified = listen
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|a| a.ip().is_unspecified());
    if coordinated && unspecified && g.advertise.is_none() {
        return Err(ConfigError::invalid(
            "gateway.metrics_listen",
            format!(
                "{listen:?} is an unspecified address, which the other gateways cannot reach for \
                 cluster QoS ([gateway.capacity] coordinate): set gateway.advertise to the \
                 address they reach it at (http://host:port), or bind a specific address"
            ),
        ));
    }
    Ok(())
}

/// Reservations are promises: their sum must fit what the tier can serve.
/// `tls_cert` and `tls_key` of `section`: both (paths resolved like every other) or neither.
fn tls_files(
    section: &str,
    cert: Option<&str>,
    key: Option<&str>,
    resolve: &impl Fn(&str) -> std::path::PathBuf,
) -> Result<Option<TlsFiles>, ConfigError> {
    match (cert, key) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => Ok(Some(TlsFiles {
            cert: resolve(cert),
            key: resolve(key),
        })),
        (Some(_), None) => Err(ConfigError::invalid(
            format!("{section}.tls_key"),
            format!("required with {section}.tls_cert: the certificate's private key (PEM)"),
        )),
        (None, Some(_)) => Err(ConfigError::invalid(
            format!("{section}.tls_cert"),
            format!("required with {section}.tls_key: the certificate chain (PEM)"),
        )),
    }
}

pub(crate) fn check_reservations(
    tenants: &[Tenant],
    capacity: Capacity,
) -> Result<(), ConfigError> {
    let total: f64 = tenants.iter().map(|t| t.qos.reservation).sum();
    if total > capacity.bandwidth {
        return Err(ConfigError::invalid(
            "tenant.reservation",
            format!(
                "reservations sum to {} but gateway.capacity.bandwidth is {}",
                sluice_units::Rate(total),
                sluice_units::Rate(capacity.bandwidth)
            ),
        ));
    }
    Ok(())
}

/// A `[... capacity]` table: `section` names it in errors, `what` says what its bandwidth is.
pub(crate) fn capacity(
    section: &str,
    what: &str,
    c: &FileCapacity,
) -> Result<Capacity, ConfigError> {
    let field = |key: &str| format!("{section}.{key}");
    let bandwidth = c.bandwidth.map(|r| r.0).ok_or_else(|| {
        ConfigError::invalid(
            field("bandwidth"),
            format!("required: {what}, e.g. \"1GiB/s\""),
        )
    })?;
    let ops = c.ops.unwrap_or(UNBOUNDED_OPS);
    positive(&field("bandwidth"), bandwidth)?;
    positive(&field("ops"), ops)?;
    let policy = match c.policy.as_deref().unwrap_or("dmclock") {
        "dmclock" => Policy::DmClock,
        "fifo" => Policy::Fifo,
        "rate_limit" => Policy::RateLimit,
        other => {
            return Err(ConfigError::invalid(
                field("policy"),
                format!("{other:?}: expected \"dmclock\", \"fifo\" or \"rate_limit\""),
            ));
        }
    };
    let queue_depth = c.queue_depth.unwrap_or(64);
    if queue_depth == 0 {
        return Err(ConfigError::invalid(
            field("queue_depth"),
            "must be at least 1",
        ));
    }
    let grain = c.grain.map_or(1024 * 1024, |g| g.0);
    if !(64 * 1024..=16 * 1024 * 1024).contains(&grain) {
        return Err(ConfigError::invalid(
            field("grain"),
            "must be between 64KiB and 16MiB (1MiB to 4MiB is usual)",
        ));
    }
    Ok(Capacity {
        bandwidth,
        ops,
        policy,
        queue_depth,
        grain,
        coordinate: c.coordinate.unwrap_or(true),
    })
}

pub(crate) fn positive(field: &str, v: f64) -> Result<(), ConfigError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(ConfigError::invalid(field, format!("{v} must be positive")))
    }
}

fn tenant(t: FileTenant) -> Result<Tenant, ConfigError> {
    if t.id.is_empty()
        || t.id.len() > 63
        || !t
            .id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
    {
        return Err(ConfigError::invalid(
            "id",
            "1 to 63 characters of a-z, 0-9, '-' and '_'",
        ));
    }
    if t.access_key.len() < 3 || t.access_key.len() > 128 || !t.access_key.is_ascii() {
        return Err(ConfigError::invalid(
            "access_key",
            "3 to 128 ASCII characters",
        ));
    }
    if t.secret_key.len() < 8 {
        return Err(ConfigError::invalid("secret_key", "at least 8 characters"));
    }
    if t.max_objects == Some(0) {
        return Err(ConfigError::invalid("max_objects", "must be at least 1"));
    }
    if t.max_buckets == Some(0) {
        return Err(ConfigError::invalid("max_buckets", "must be at least 1"));
    }
    let weight = t.weight.unwrap_or(1.0);
    positive("weight", weight)?;
    let reservation = t.reservation.map_or(0.0, |r| r.0);
    let limit = t.limit.map(|r| r.0);
    if let Some(l) = limit {
        positive("limit", l)?;
        if l < reservation {
            return Err(ConfigError::invalid(
                "limit",
                "must not be below the reservation",
            ));
        }
    }
    let local_qos = crate::node::local_qos(
        t.local_reservation.map(|r| r.0),
        t.local_weight,
        t.local_limit.map(|r| r.0),
    )?;
    let retention = match t.retention {
        None => Retention::Checkpoints(2),
        Some(FileRetention::Checkpoints(n)) => Retention::Checkpoints(n),
        Some(FileRetention::Bytes(b)) => Retention::Bytes(b.0),
    };
    if let Some(d) = t.drain_rate {
        positive("drain_rate", d.0)?;
    }
    let interval = t.interval.map(sluice_units::HumanDuration::get);
    if interval.is_some_and(|i| i.is_zero()) {
        return Err(ConfigError::invalid("interval", "must be positive"));
    }
    let commit_markers = t.commit_markers.unwrap_or_else(|| {
        DEFAULT_COMMIT_MARKERS
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    });
    if let Some(bad) = commit_markers
        .iter()
        .find(|m| m.is_empty() || m.contains('/'))
    {
        return Err(ConfigError::invalid(
            "commit_markers",
            format!("{bad:?}: a marker is a file name (or *.suffix), not a path"),
        ));
    }
    Ok(Tenant {
        id: t.id,
        access_key: t.access_key,
        secret_key: t.secret_key,
        capacity: t.capacity.map_or(u64::MAX, |c| c.0),
        max_objects: t.max_objects.unwrap_or(u64::MAX),
        max_buckets: t.max_buckets.unwrap_or(crate::DEFAULT_MAX_BUCKETS),
        qos: Qos {
            reservation,
            weight,
            limit,
        },
        local: LocalSpec {
            local_capacity: t.local_capacity.map_or(u64::MAX, |c| c.0),
            drain_rate: t.drain_rate.map(|r| r.0),
            interval,
            retention,
            commit_markers,
            local_qos,
        },
    })
}

/// `[agent] upstream`: one URL or a list of them, each `http(s)://host[:port]` (a trailing
/// `/` dropped), none twice. Absent: the gateway on this host's default port.
/// `[agent] node_credential_file` with `gateway_control` (one needs the other).
fn tenant_fetch(
    file: Option<std::path::PathBuf>,
    control: Option<OneOrMany>,
) -> Result<Option<crate::TenantFetch>, ConfigError> {
    let control = control.map(OneOrMany::into_vec);
    match (file, control) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(ConfigError::invalid(
            "agent.gateway_control",
            "needs agent.node_credential_file (the node's credential, from `sluice tenant \
             node-token NODE`)",
        )),
        (Some(_), None) => Err(ConfigError::invalid(
            "agent.node_credential_file",
            "needs agent.gateway_control (the gateways' control listeners, host:port)",
        )),
        (Some(credential_file), Some(control)) => {
            if control.is_empty() {
                return Err(ConfigError::invalid(
                    "agent.gateway_control",
                    "an empty list: name at least one gateway's control listener",
                ));
            }
            if let Some((i, bad)) = control.iter().enumerate().find(|(_, c)| {
                c.contains('/')
                    || c.rsplit_once(':')
                        .is_none_or(|(_, p)| p.parse::<u16>().is_err())
            }) {
                return Err(ConfigError::invalid(
                    format!("agent.gateway_control[{i}]"),
                    format!("{bad:?}: expected host:port (the gateway's metrics_listen)"),
                ));
            }
            Ok(Some(crate::TenantFetch {
                credential_file,
                control,
            }))
        }
    }
}

fn upstreams(given: Option<OneOrMany>) -> Result<Vec<String>, ConfigError> {
    let Some(given) = given else {
        return Ok(vec!["http://127.0.0.1:9000".to_owned()]);
    };
    let list = given.into_vec();
    if list.is_empty() {
        return Err(ConfigError::invalid(
            "agent.upstream",
            "an empty list: name at least one gateway",
        ));
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(list.len());
    for (i, url) in list.into_iter().enumerate() {
        let field = format!("agent.upstream[{i}]");
        let normal = upstream_url(&url).map_err(|p| ConfigError::invalid(&field, p))?;
        if !seen.insert(normal.to_ascii_lowercase()) {
            return Err(ConfigError::invalid(
                field,
                format!("{url:?} is named twice"),
            ));
        }
        out.push(normal);
    }
    Ok(out)
}

/// One upstream URL checked: `http(s)://host[:port]`, without a trailing `/`.
fn upstream_url(url: &str) -> Result<String, String> {
    let expected = "expected an http:// or https:// URL of a gateway (scheme, host, optional port)";
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("{url:?}: {expected}"))?;
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    let bad = authority.is_empty()
        || authority
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '/' | '?' | '#' | '@'));
    if bad {
        return Err(format!("{url:?}: {expected}"));
    }
    // `[v6]:port`, `host:port` or a bare host; a port must be a number.
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (addr, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("{url:?}: {expected}"))?;
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| format!("{url:?}: {expected}"))?,
            ),
        };
        (addr, port)
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(format!("{url:?}: {expected}"));
    }
    if let Some(p) = port
        && p.parse::<u16>().map_or(true, |p| p == 0)
    {
        return Err(format!("{url:?}: port {p:?} is not a port number"));
    }
    Ok(url.strip_suffix('/').unwrap_or(url).to_owned())
}

/// `[agent] escrow_lease`: 1 s to 10 min (the gateway's longest), default 30 s.
fn escrow_lease(
    d: Option<sluice_units::HumanDuration>,
) -> Result<std::time::Duration, ConfigError> {
    let d = d.map_or(std::time::Duration::from_secs(30), |d| d.0);
    if d < std::time::Duration::from_secs(1) || d > std::time::Duration::from_secs(600) {
        return Err(ConfigError::invalid(
            "agent: escrow_lease",
            "must be between 1s and 10m",
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/sluice/sluice.toml"))
    }

    const ALICE: &str =
        "[[tenant]]\nid = \"alice\"\naccess_key = \"AKALICE\"\nsecret_key = \"alice-secret\"\n";

    #[test]
    fn defaults_fill_a_minimal_gateway() {
        let c = parse(&format!("[gateway]\n{ALICE}capacity = \"10MiB\"\n")).expect("valid");
        let g = c.gateway.expect("gateway");
        assert_eq!(g.listen, "127.0.0.1:9000");
        assert_eq!(g.data_dir, Path::new("/etc/sluice/./data/gateway"));
        assert_eq!(c.backend, Backend::Local);
        assert_eq!(c.tenants[0].capacity, 10 * 1024 * 1024);
        assert_eq!(c.tenants[0].local.commit_markers.len(), 4);
    }

    #[test]
    fn bad_size_names_tenant_and_field() {
        let err = parse(&format!("{ALICE}capacity = \"10 furlongs\"\n"))
            .expect_err("must fail")
            .to_string();
        assert!(err.contains("capacity"), "{err}");
        assert!(err.contains("furlongs"), "{err}");
    }

    #[test]
    fn unknown_tenant_field_is_refused() {
        let err = parse(&format!("{ALICE}limt = \"1MiB/s\"\n"))
            .expect_err("must fail")
            .to_string();
        assert!(err.contains("limt"), "{err}");
    }

    #[test]
    fn duplicate_access_keys_are_refused() {
        let bob = ALICE.replace("\"alice\"", "\"bob\"");
        let err = parse(&format!("{ALICE}{bob}"))
            .expect_err("must fail")
            .to_string();
        assert!(err.contains("tenant[1] \"bob\": access_key"), "{err}");
    }

    #[test]
    fn capacity_is_coordinated_unless_said_otherwise() {
        let on = parse("[gateway.capacity]\nbandwidth = \"48MiB/s\"\n").expect("valid");
        let cap = |c: Config| c.gateway.and_then(|g| g.throttle).expect("capacity");
        assert!(cap(on).coordinate);
        let off = parse("[gateway.capacity]\nbandwidth = \"48MiB/s\"\ncoordinate = false\n")
            .expect("valid");
        assert!(!cap(off).coordinate);
        let err = parse("[gateway.capacity]\nbandwidth = \"48MiB/s\"\ncoordinate = \"yes\"\n")
            .expect_err("a string is not a bool")
            .to_string();
        assert!(err.contains("coordinate"), "{err}");
    }

    #[test]
    fn advertise_is_a_reachable_host_and_port_and_an_unspecified_bind_needs_it() {
        let gw = |extra: &str| {
            parse(&format!(
                "[gateway]\nmetrics_listen = \"0.0.0.0:9100\"\n{extra}\n\
                 [gateway.capacity]\nbandwidth = \"48MiB/s\"\n\
                 [catalog]\nurl = \"postgres://u:p@db:5432/sluice\"\n"
            ))
        };
        let err = gw("")
            .expect_err("unspecified bind, coordinated")
            .to_string();
        assert!(err.contains("gateway.metrics_listen"), "{err}");
        assert!(err.contains("gateway.advertise"), "{err}");
        let url = |c: Config| c.gateway.and_then(|g| g.advertise);
        assert_eq!(
            url(gw("advertise = \"10.0.0.1:9100\"").expect("valid")).as_deref(),
            Some("http://10.0.0.1:9100")
        );
        assert_eq!(
            url(gw("advertise = \"https://gw-1.internal:9100/\"").expect("valid")).as_deref(),
            Some("https://gw-1.internal:9100")
        );
        assert_eq!(
            url(gw("advertise = \"[fd00::1]:9100\"").expect("valid")).as_deref(),
            Some("http://[fd00::1]:9100")
        );
        for bad in [
            "0.0.0.0:9100",
            "[::]:9100",
            "gw-1",
            "gw-1:0",
            "gw-1:99999",
            "ftp://gw-1:9100",
            "http://gw-1:9100/qos",
            ":9100",
        ] {
            let err = gw(&format!("advertise = \"{bad}\""))
                .expect_err(bad)
                .to_string();
            assert!(err.contains("gateway.advertise"), "{bad}: {err}");
        }
        // Not coordinated (no shared catalog, or coordinate = false): nothing to advertise.
        parse("[gateway]\nmetrics_listen = \"0.0.0.0:9100\"\n[gateway.capacity]\nbandwidth = \"48MiB/s\"\n")
            .expect("embedded catalog");
        parse(
            "[gateway]\nmetrics_listen = \"[::]:9100\"\n[gateway.capacity]\nbandwidth = \"48MiB/s\"\n\
             coordinate = false\n[catalog]\nurl = \"postgres://u:p@db:5432/sluice\"\n",
        )
        .expect("uncoordinated");
    }

    #[test]
    fn reservations_above_capacity_are_refused() {
        let text = format!(
            "[gateway.capacity]\nbandwidth = \"100MiB/s\"\n{ALICE}reservation = \"80MiB/s\"\n{}reservation = \"30MiB/s\"\n",
            ALICE.replace("alice", "bob").replace("AKALICE", "AKBOB")
        );
        let err = parse(&text).expect_err("must fail").to_string();
        assert!(err.contains("reservations sum to"), "{err}");
    }

    #[test]
    fn s3_backend_needs_credentials() {
        let err = parse("[backend]\nurl = \"s3://tier\"\n")
            .expect_err("must fail")
            .to_string();
        assert!(err.contains("backend.access_key"), "{err}");
        let c = parse("[backend]\nurl = \"s3://tier\"\nendpoint = \"http://127.0.0.1:8333\"\naccess_key = \"a\"\nsecret_key = \"b\"\n").expect("valid");
        assert!(matches!(c.backend, Backend::S3(ref s) if s.bucket == "tier"));
    }

    #[test]
    fn max_objects_is_optional_and_at_least_one() {
        let c = parse(ALICE).expect("valid");
        assert_eq!(c.tenants[0].max_objects, u64::MAX);
        assert_eq!(c.tenants[0].max_buckets, crate::DEFAULT_MAX_BUCKETS);
        let err = parse(&format!("{ALICE}max_buckets = 0\n"))
            .expect_err("must fail")
            .to_string();
        assert!(err.contains("tenant[0] \"alice\": max_buckets"), "{err}");
        let c = parse(&format!("{ALICE}max_objects = 1000\n")).expect("valid");
        assert_eq!(c.tenants[0].max_objects, 1000);
        let err = parse(&format!("{ALICE}max_objects = 0\n"))
            .expect_err("must fail")
            .to_string();
        assert!(err.contains("tenant[0] \"alice\": max_objects"), "{err}");
    }

    #[test]
    fn the_agents_escrow_lease_defaults_to_30s_and_is_bounded() {
        let c = parse("[agent]\n").expect("valid");
        assert_eq!(
            c.agent.expect("agent").escrow_lease,
            std::time::Duration::from_secs(30)
        );
        let c = parse("[agent]\nescrow_lease = \"2s\"\n").expect("valid");
        assert_eq!(
            c.agent.expect("agent").escrow_lease,
            std::time::Duration::from_secs(2)
        );
        for bad in ["500ms", "11m"] {
            let e = parse(&format!("[agent]\nescrow_lease = \"{bad}\"\n")).expect_err(bad);
            assert!(e.to_string().contains("escrow_lease"), "{e}");
        }
    }

    #[test]
    fn the_agents_node_credential_comes_with_the_gateways_control_listeners() {
        assert_eq!(
            parse("[agent]\n")
                .expect("valid")
                .agent
                .expect("agent")
                .fetch,
            None
        );
        let c = parse(
            "[agent]\nnode_credential_file = \"node.cred\"\ngateway_control = [\"gw1:9091\", \"10.0.0.2:9091\"]\n",
        )
        .expect("valid");
        let f = c.agent.expect("agent").fetch.expect("fetch");
        assert!(f.credential_file.ends_with("node.cred"), "{f:?}");
        assert_eq!(f.control, ["gw1:9091", "10.0.0.2:9091"]);
        for (bad, field) in [
            (
                "node_credential_file = \"n\"\n",
                "agent.node_credential_file",
            ),
            ("gateway_control = \"gw:9091\"\n", "agent.gateway_control"),
            (
                "node_credential_file = \"n\"\ngateway_control = \"http://gw:9091\"\n",
                "agent.gateway_control[0]",
            ),
            (
                "node_credential_file = \"n\"\ngateway_control = []\n",
                "agent.gateway_control",
            ),
        ] {
            let e = parse(&format!("[agent]\n{bad}"))
                .expect_err(bad)
                .to_string();
            assert!(e.contains(field), "{bad}: {e}");
        }
    }

    #[test]
    fn the_agent_signs_for_the_configured_upstream_region_or_us_east_1() {
        let c = parse("[agent]\n").expect("valid");
        assert_eq!(c.agent.expect("agent").upstream_region, "us-east-1");
        let c = parse("[agent]\nupstream_region = \"eu-west-3\"\n").expect("valid");
        assert_eq!(c.agent.expect("agent").upstream_region, "eu-west-3");
    }

    #[test]
    fn limit_below_reservation_is_refused() {
        let err = parse(&format!(
            "{ALICE}reservation = \"10MiB/s\"\nlimit = \"5MiB/s\"\n"
        ))
        .expect_err("must fail")
        .to_string();
        assert!(err.contains("limit"), "{err}");
    }

    #[test]
    fn tls_needs_both_a_certificate_and_a_key_and_resolves_their_paths() {
        let c = parse("[gateway]\ntls_cert = \"c.pem\"\ntls_key = \"/k.pem\"\n").expect("valid");
        let tls = c.gateway.expect("gateway").tls.expect("tls");
        assert_eq!(tls.cert, Path::new("/etc/sluice/c.pem"));
        assert_eq!(tls.key, Path::new("/k.pem"));
        let err = parse("[gateway]\ntls_cert = \"c.pem\"\n").expect_err("no key");
        assert!(
            err.to_string().starts_with("gateway.tls_key: required"),
            "{err}"
        );
        let err = parse("[agent]\ntls_key = \"k.pem\"\n").expect_err("no cert");
        assert!(
            err.to_string().starts_with("agent.tls_cert: required"),
            "{err}"
        );
        let c = parse("[agent]\nupstream_ca = \"ca.pem\"\n").expect("valid");
        let a = c.agent.expect("agent");
        assert_eq!(
            a.upstream_ca.as_deref(),
            Some(Path::new("/etc/sluice/ca.pem"))
        );
        assert!(a.tls.is_none());
    }

    #[test]
    fn upstream_is_one_url_or_a_list_of_them() {
        let c = parse("[agent]\n").expect("valid");
        assert_eq!(c.agent.expect("agent").upstream, ["http://127.0.0.1:9000"]);
        let c = parse("[agent]\nupstream = \"https://gw:9443/\"\n").expect("valid");
        assert_eq!(c.agent.expect("agent").upstream, ["https://gw:9443"]);
        let c = parse("[agent]\nupstream = [\"http://gw1:9000\", \"http://[::1]:9001\"]\n")
            .expect("valid");
        assert_eq!(
            c.agent.expect("agent").upstream,
            ["http://gw1:9000", "http://[::1]:9001"]
        );
    }

    #[test]
    fn a_bad_upstream_list_is_refused_naming_the_entry() {
        for (toml, field, says) in [
            ("upstream = []", "agent.upstream:", "empty"),
            ("upstream = \"gw:9000\"", "agent.upstream[0]:", "http://"),
            (
                "upstream = [\"http://a:9000\", \"ftp://b\"]",
                "agent.upstream[1]:",
                "http://",
            ),
            (
                "upstream = [\"http://a:9000\", \"http://A:9000/\"]",
                "agent.upstream[1]:",
                "twice",
            ),
            (
                "upstream = [\"http://a:port\"]",
                "agent.upstream[0]:",
                "port",
            ),
            ("upstream = [\"http://a:0\"]", "agent.upstream[0]:", "port"),
            (
                "upstream = [\"http://a:9000/path\"]",
                "agent.upstream[0]:",
                "http://",
            ),
            (
                "upstream = [\"http://:9000\"]",
                "agent.upstream[0]:",
                "http://",
            ),
            (
                "upstream = [\"http://u@a:9000\"]",
                "agent.upstream[0]:",
                "http://",
            ),
            (
                "upstream = [\"http://[::1\"]",
                "agent.upstream[0]:",
                "http://",
            ),
        ] {
            let err = parse(&format!("[agent]\n{toml}\n"))
                .expect_err(toml)
                .to_string();
            assert!(
                err.starts_with(field) && err.contains(says),
                "{toml}: {err}"
            );
        }
        let err = parse("[agent]\nupstream = 9000\n").expect_err("a number");
        assert!(err.to_string().contains("upstream"), "{err}");
    }

    #[test]
    fn an_emulated_tier_is_shared_through_the_state_file_it_names() {
        let device = "[backend.emulate]\nbandwidth = \"100MiB/s\"\nops = 8000\n";
        let own = parse(&format!("[gateway]\n{device}")).expect("valid");
        assert!(own.emulate.is_some());
        assert_eq!(own.emulate_shared, None);
        let shared =
            parse(&format!("[gateway]\n{device}shared = \"run/tier.dev\"\n")).expect("valid");
        assert_eq!(
            shared.emulate_shared.as_deref(),
            Some(Path::new("/etc/sluice/run/tier.dev")),
            "resolved against the file's directory"
        );
        let err = parse(&format!("[gateway]\n{device}shared = \" \"\n"))
            .expect_err("an empty path")
            .to_string();
        assert!(err.contains("backend.emulate.shared"), "{err}");
        let err = parse(
            "[agent]\nupstream = \"http://127.0.0.1:9000\"\n[agent.emulate]\nbandwidth = \"1MiB/s\"\nops = 10\nshared = \"x\"\n",
        )
        .expect_err("only the backend's device is shared")
        .to_string();
        assert!(err.contains("agent.emulate.shared"), "{err}");
    }
}
