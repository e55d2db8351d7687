//! The node agent's scheduling settings: `[agent.capacity]` (the node's local device and the
//! drain's uplink), `[agent.emulate]`, and each tenant's node-local share
//! (`local_reservation`, `local_weight`, `local_limit`).
//!
//! Rules: a share needs `[agent.capacity]` (it is a share *of* that capacity); the local
//! reservations sum to at most `[agent.capacity] bandwidth`; a local limit is not below the
//! local reservation. Errors name the field.

use crate::file::{FileAgentCapacity, FileCapacity, FileDevice};
use crate::validate::positive;
use crate::{Capacity, ConfigError, Device, Qos, Tenant};

/// `[agent.capacity]` without its `uplink`, validated like `[gateway.capacity]`.
pub(crate) fn capacity(c: &FileAgentCapacity) -> Result<Capacity, ConfigError> {
    crate::validate::capacity(
        "agent.capacity",
        "the node's local device throughput, as `sluice calibrate --agent` measures it",
        &FileCapacity {
            bandwidth: c.bandwidth,
            ops: c.ops,
            policy: c.policy.clone(),
            queue_depth: c.queue_depth,
            grain: c.grain,
            coordinate: None,
        },
    )
}

/// `[agent.capacity] uplink`, when given: positive.
pub(crate) fn uplink(c: &FileAgentCapacity) -> Result<Option<f64>, ConfigError> {
    match c.uplink {
        None => Ok(None),
        Some(r) => {
            positive("agent.capacity.uplink", r.0)?;
            Ok(Some(r.0))
        }
    }
}

/// `[agent.emulate]`: positive bandwidth and operations.
pub(crate) fn emulate(d: &FileDevice) -> Result<Device, ConfigError> {
    positive("agent.emulate.bandwidth", d.bandwidth.0)?;
    positive("agent.emulate.ops", d.ops)?;
    if d.shared.is_some() {
        return Err(ConfigError::invalid(
            "agent.emulate.shared",
            "only [backend.emulate] can be shared between processes",
        ));
    }
    Ok(Device {
        bandwidth: d.bandwidth.0,
        ops: d.ops,
    })
}

/// A tenant's node-local share; defaults: no reservation, weight 1, no limit.
pub(crate) fn local_qos(
    reservation: Option<f64>,
    weight: Option<f64>,
    limit: Option<f64>,
) -> Result<Qos, ConfigError> {
    let weight = weight.unwrap_or(1.0);
    positive("local_weight", weight)?;
    let reservation = reservation.unwrap_or(0.0);
    if !(reservation.is_finite() && reservation >= 0.0) {
        return Err(ConfigError::invalid(
            "local_reservation",
            "must be a rate of zero or more",
        ));
    }
    if let Some(l) = limit {
        positive("local_limit", l)?;
        if l < reservation {
            return Err(ConfigError::invalid(
                "local_limit",
                "must not be below the local_reservation",
            ));
        }
    }
    Ok(Qos {
        reservation,
        weight,
        limit,
    })
}

/// The tenants' node-local shares against `[agent.capacity]`: none without it (naming the
/// first tenant and key that sets one), and reservations that fit its bandwidth.
pub(crate) fn check_local_shares(
    tenants: &[Tenant],
    capacity: Option<Capacity>,
) -> Result<(), ConfigError> {
    let Some(capacity) = capacity else {
        for (i, t) in tenants.iter().enumerate() {
            let q = t.local.local_qos;
            let key = if q.reservation > 0.0 {
                "local_reservation"
            } else if q.limit.is_some() {
                "local_limit"
            } else if (q.weight - 1.0).abs() > f64::EPSILON {
                "local_weight"
            } else {
                continue;
            };
            return Err(ConfigError::invalid(
                format!("tenant[{i}] {:?}: {key}", t.id),
                "a share of the node's local device needs [agent.capacity] (its bandwidth, \
                 e.g. from `sluice calibrate --agent`)",
            ));
        }
        return Ok(());
    };
    let total: f64 = tenants.iter().map(|t| t.local.local_qos.reservation).sum();
    if total > capacity.bandwidth {
        return Err(ConfigError::invalid(
            "tenant.local_reservation",
            format!(
                "local reservations sum to {} but agent.capacity.bandwidth is {}",
                sluice_units::Rate(total),
                sluice_units::Rate(capacity.bandwidth)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // the values are parsed exactly from the text
mod tests {
    use std::path::Path;

    use crate::{Config, ConfigError, Policy};

    const MIB: f64 = 1_048_576.0;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/sluice/sluice.toml"))
    }

    fn tenant(id: &str, extra: &str) -> String {
        format!(
            "[[tenant]]\nid = \"{id}\"\naccess_key = \"AK{id}\"\nsecret_key = \"{id}-secret\"\n{extra}"
        )
    }

    #[test]
    fn the_agents_capacity_and_local_shares_are_read() {
        let c = parse(&format!(
            "[agent]\n[agent.capacity]\nbandwidth = \"400MiB/s\"\nops = 20000\ngrain = \"256KiB\"\n\
             uplink = \"100MiB/s\"\n[agent.emulate]\nbandwidth = \"500MiB/s\"\nops = 50000\n{}{}",
            tenant(
                "victim",
                "local_reservation = \"100MiB/s\"\nlocal_weight = 8\nlocal_limit = \"300MiB/s\"\n"
            ),
            tenant("noisy", "")
        ))
        .expect("valid");
        let a = c.agent.expect("agent");
        let cap = a.capacity.expect("capacity");
        assert_eq!(cap.bandwidth, 400.0 * MIB);
        assert_eq!(cap.ops, 20_000.0);
        assert_eq!(cap.grain, 256 * 1024);
        assert_eq!(cap.policy, Policy::DmClock);
        assert_eq!(a.uplink, Some(100.0 * MIB));
        assert_eq!(a.emulate.expect("emulate").bandwidth, 500.0 * MIB);
        let v = c.tenants[0].local.local_qos;
        assert_eq!(v.reservation, 100.0 * MIB);
        assert_eq!(v.weight, 8.0);
        assert_eq!(v.limit, Some(300.0 * MIB));
        let n = c.tenants[1].local.local_qos;
        assert_eq!((n.reservation, n.weight, n.limit), (0.0, 1.0, None));
    }

    #[test]
    fn local_reservations_above_the_local_capacity_are_refused() {
        let err = parse(&format!(
            "[agent]\n[agent.capacity]\nbandwidth = \"100MiB/s\"\n{}{}",
            tenant("a", "local_reservation = \"60MiB/s\"\n"),
            tenant("b", "local_reservation = \"50MiB/s\"\n")
        ))
        .expect_err("overbooked");
        let err = err.to_string();
        assert!(
            err.starts_with("tenant.local_reservation: local reservations sum to")
                && err.contains("but agent.capacity.bandwidth is"),
            "{err}"
        );
    }

    #[test]
    fn a_local_share_without_the_agents_capacity_is_refused_naming_the_key() {
        let err = parse(&format!(
            "[agent]\n{}{}",
            tenant("a", ""),
            tenant("b", "local_weight = 4\n")
        ))
        .expect_err("no capacity");
        assert!(
            err.to_string()
                .starts_with("tenant[1] \"b\": local_weight: a share of the node's local device needs [agent.capacity]"),
            "{err}"
        );
    }

    #[test]
    fn a_local_limit_below_the_local_reservation_is_refused() {
        let err = parse(&format!(
            "[agent]\n[agent.capacity]\nbandwidth = \"100MiB/s\"\n{}",
            tenant(
                "a",
                "local_reservation = \"20MiB/s\"\nlocal_limit = \"10MiB/s\"\n"
            )
        ))
        .expect_err("limit below reservation");
        assert_eq!(
            err.to_string(),
            "tenant[0] \"a\": local_limit: must not be below the local_reservation"
        );
    }

    #[test]
    fn the_agents_capacity_needs_a_bandwidth_and_knows_its_keys() {
        let err = parse("[agent]\n[agent.capacity]\nops = 100\n").expect_err("no bandwidth");
        assert!(
            err.to_string()
                .starts_with("agent.capacity.bandwidth: required"),
            "{err}"
        );
        let err = parse("[agent]\n[agent.capacity]\nbandwidth = \"1GiB/s\"\nweight = 2\n")
            .expect_err("unknown key");
        assert!(err.to_string().contains("unknown field `weight`"), "{err}");
        let err = parse("[agent]\n[agent.capacity]\nbandwidth = \"1GiB/s\"\npolicy = \"wfq\"\n")
            .expect_err("bad policy");
        assert!(
            err.to_string()
                .starts_with("agent.capacity.policy: \"wfq\""),
            "{err}"
        );
    }
}
