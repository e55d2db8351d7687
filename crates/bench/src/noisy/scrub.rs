//! `dmclock_scrub`: the `dmclock` scenario with the gateway's continuous scrub running
//! (`[gateway.scrub]`) over a pre-filled store, at a rate above the tier's capacity, so it
//! wants every byte of capacity the tenants leave unused. The scrub is a background class of
//! the throughput scheduler; the claim measured is that the victim's p99 stays where
//! `dmclock` puts it while the scrub takes the idle tier.
//!
//! `solo_scrub` is the same without the aggressor: the scrub then takes most of the tier, the
//! harder test of "it does not move a tenant's tail".
//!
//! `scrub_bps` is what the scrub read over the victim's run, from the gateway's
//! `sluice_scrub_bytes_total`; the scenario's `tier_utilization` counts tenants' bytes
//! only, as in the other scenarios.

use super::{Config, MIB};
use crate::BenchError;
use crate::client::S3Client;
use crate::gateway::payload;

/// The scenario's name.
pub const NAME: &str = "dmclock_scrub";
/// The victim alone beside the scrub (no aggressor): the scrub then has what the victim
/// leaves, most of the tier, and the victim's p99 is against `solo`'s.
pub const SOLO_NAME: &str = "solo_scrub";
/// Objects written before the clock starts for the scrub to read (besides the victim's
/// shards), and their size.
const PREFILL_OBJECTS: usize = 8;
const PREFILL_BYTES: u64 = 32 << 20;

/// The `[gateway.scrub]` table: twice the tier's capacity, one pass a second.
pub fn gateway_toml(cfg: &Config) -> String {
    format!(
        "[gateway.scrub]\nrate = \"{}MiB/s\"\ninterval = \"1s\"\n",
        (2.0 * cfg.tier_bandwidth_bps / MIB).round()
    )
}

/// Fills the store (as the aggressor's tenant) before the clock starts.
pub async fn prefill(client: &S3Client, cfg: &Config) -> Result<(), BenchError> {
    let body = payload(PREFILL_BYTES as usize, cfg.seed ^ 0x5C2B);
    for i in 0..PREFILL_OBJECTS {
        client
            .put(&format!("scrub-fill/obj-{i}"), body.clone())
            .await?;
    }
    Ok(())
}

/// `sluice_scrub_bytes_total` from the gateway's `/metrics` (0 if it cannot be read).
pub async fn scrubbed_bytes(metrics_port: u16) -> u64 {
    super::metric_total(metrics_port, &["sluice_scrub_bytes_total"]).await
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn the_scrub_wants_more_than_the_tier() {
        let cfg = Config::default_run(1, PathBuf::new(), PathBuf::new());
        let toml = gateway_toml(&cfg);
        assert!(toml.contains("rate = \"200MiB/s\""), "{toml}");
        assert!(toml.starts_with("[gateway.scrub]\n"), "{toml}");
    }
}
