//! `[gateway.scrub]`: the gateway's continuous scrub, off unless the table is present.
//!
//! ```toml
//! [gateway.scrub]
//! rate = "50MiB/s"    # required: the most the scrub reads per second
//! interval = "24h"    # from the end of one pass to the start of the next (default 24h)
//! enabled = true      # default true when the table is present
//! ```
//!
//! With `[gateway.capacity]` the scrub is a background class of the throughput scheduler: it
//! gets only capacity the tenants leave unused, and never more than `rate`.

use std::time::Duration;

use serde::Deserialize;
use sluice_units::{HumanDuration, Rate};

use crate::ConfigError;

/// Passes this close together would re-read a small store in a loop.
const MIN_INTERVAL: Duration = Duration::from_secs(1);
const DEFAULT_INTERVAL: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileScrub {
    pub enabled: Option<bool>,
    pub rate: Option<Rate>,
    pub interval: Option<HumanDuration>,
}

/// The gateway's continuous scrub (`[gateway.scrub]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScrubConfig {
    /// `enabled = false` keeps the table (and its settings) but runs no pass.
    pub enabled: bool,
    /// Bytes per second at most.
    pub rate: f64,
    /// From the end of one pass to the start of the next.
    pub interval: Duration,
}

pub(crate) fn validate(file: Option<FileScrub>) -> Result<Option<ScrubConfig>, ConfigError> {
    let Some(file) = file else {
        return Ok(None);
    };
    let rate = file.rate.map(|r| r.0).ok_or_else(|| {
        ConfigError::invalid(
            "gateway.scrub.rate",
            "required: the most the scrub may read per second, e.g. \"50MiB/s\"",
        )
    })?;
    if !(rate.is_finite() && rate > 0.0) {
        return Err(ConfigError::invalid(
            "gateway.scrub.rate",
            "must be positive",
        ));
    }
    let interval = file.interval.map_or(DEFAULT_INTERVAL, |d| d.0);
    if interval < MIN_INTERVAL {
        return Err(ConfigError::invalid(
            "gateway.scrub.interval",
            "must be at least 1s",
        ));
    }
    Ok(Some(ScrubConfig {
        enabled: file.enabled.unwrap_or(true),
        rate,
        interval,
    }))
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::ScrubConfig;
    use crate::Config;

    fn scrub(extra: &str) -> Result<Option<ScrubConfig>, crate::ConfigError> {
        Config::parse(
            &format!("[gateway]\ndata_dir = \"d\"\n{extra}"),
            Path::new("/etc/sluice.toml"),
        )
        .map(|c| c.gateway.expect("a gateway").scrub)
    }

    #[test]
    fn without_the_table_there_is_no_scrub() {
        assert_eq!(scrub("").expect("valid"), None);
    }

    #[test]
    fn the_table_turns_it_on_with_a_daily_interval() {
        let c = scrub("[gateway.scrub]\nrate = \"50MiB/s\"\n")
            .expect("valid")
            .expect("a scrub");
        assert_eq!(
            c,
            ScrubConfig {
                enabled: true,
                rate: 50.0 * 1024.0 * 1024.0,
                interval: Duration::from_secs(86_400),
            }
        );
        let c = scrub("[gateway.scrub]\nrate = \"1MB/s\"\ninterval = \"90s\"\nenabled = false\n")
            .expect("valid")
            .expect("a scrub");
        assert!(!c.enabled);
        assert_eq!(c.interval, Duration::from_secs(90));
    }

    #[test]
    fn bad_settings_are_refused_by_name() {
        for (extra, named) in [
            ("[gateway.scrub]\n", "gateway.scrub.rate"),
            ("[gateway.scrub]\nrate = \"0MiB/s\"\n", "gateway.scrub.rate"),
            ("[gateway.scrub]\nrate = \"fast\"\n", "rate"),
            (
                "[gateway.scrub]\nrate = \"1MiB/s\"\ninterval = \"10ms\"\n",
                "gateway.scrub.interval",
            ),
            ("[gateway.scrub]\nrate = \"1MiB/s\"\nspeed = 2\n", "speed"),
        ] {
            let err = scrub(extra).expect_err(extra).to_string();
            assert!(err.contains(named), "{extra}: {err}");
        }
    }
}
