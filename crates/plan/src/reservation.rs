//! What to configure on the gateway for each tenant, as `[[tenant]]` entries ready to paste.
//!
//! With node-local absorption a tenant's steady need from the shared tier is its drain plus
//! its reads, so that is its **reservation**: the scheduler guarantees it whatever the others
//! do, and the drains finish in time. The **limit** is what the tenant could ever use, reads
//! plus its burst bandwidth (a restore, or a drain catching up on idle capacity). The
//! **weight**, which shares idle capacity, is proportional to the reservation: one unit per
//! MiB/s. Rates are rounded *up* to two decimals of their unit, so the pasted values never
//! reserve less than the plan needs.

use std::fmt::Write as _;

use serde::Serialize;
use sluice_units::Rate;

use crate::absorption::Absorbed;
use crate::fleet::Tenant;

const MIB: f64 = 1024.0 * 1024.0;

/// The gateway settings for one copy of a tenant shape.
#[derive(Debug, Clone, Serialize)]
pub struct Reservation {
    /// bytes/s, rounded up as printed.
    pub reservation: f64,
    pub weight: u64,
    /// bytes/s, rounded up as printed.
    pub limit: f64,
}

pub(crate) fn recommend(tenant: &Tenant, absorbed: &Absorbed) -> Reservation {
    let reservation = round_up(absorbed.shared_bandwidth);
    let limit = round_up(tenant.reads() + tenant.peak() as f64).max(reservation);
    Reservation {
        reservation,
        weight: ((reservation / MIB).round() as u64).max(1),
        limit,
    }
}

/// Rounds a rate up to two decimals of the binary unit it is displayed in.
pub fn round_up(bytes_per_sec: f64) -> f64 {
    let mut unit = 1.0;
    while bytes_per_sec >= unit * 1024.0 && unit < MIB * MIB * 1024.0 {
        unit *= 1024.0;
    }
    (bytes_per_sec / unit * 100.0).ceil() / 100.0 * unit
}

/// The gateway ids of a shape's copies: its name alone, or `name-1` … `name-N`.
pub fn ids(tenant: &Tenant) -> Vec<String> {
    if tenant.count == 1 {
        vec![tenant.name.clone()]
    } else {
        (1..=tenant.count)
            .map(|i| format!("{}-{i}", tenant.name))
            .collect()
    }
}

/// `[[tenant]]` entries for every copy of every shape.
pub fn gateway_toml(shapes: &[(&Tenant, &Absorbed, &Reservation)]) -> String {
    let mut out = String::new();
    for (tenant, absorbed, r) in shapes {
        for id in ids(tenant) {
            let _ = writeln!(out, "[[tenant]]");
            let _ = writeln!(out, "id = {id:?}");
            let _ = writeln!(
                out,
                "reservation = \"{}\"  # drain {} + reads {}",
                Rate(r.reservation),
                Rate(absorbed.drain_rate),
                tenant.read_bandwidth
            );
            let _ = writeln!(out, "weight = {}", r.weight);
            let _ = writeln!(
                out,
                "limit = \"{}\"  # reads + burst bandwidth",
                Rate(r.limit)
            );
            out.push('\n');
        }
    }
    out
}
