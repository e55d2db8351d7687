//! `[catalog]`: where the gateway's catalog lives. Absent, the embedded redb catalog under
//! `[gateway] data_dir`; with `url`, a PostgreSQL database shared by every gateway of the
//! deployment (`data_dir` is then scratch only).

use serde::Deserialize;

use crate::ConfigError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileCatalog {
    pub url: Option<String>,
}

/// A shared catalog database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogConfig {
    /// `postgres://user:password@host:port/database` (or `postgresql://`).
    pub url: String,
}

pub(crate) fn validate(file: Option<FileCatalog>) -> Result<Option<CatalogConfig>, ConfigError> {
    let Some(file) = file else {
        return Ok(None);
    };
    let url = file.url.ok_or_else(|| {
        ConfigError::invalid(
            "catalog.url",
            "required with [catalog]: postgres://user:password@host:port/database \
             (leave [catalog] out for the embedded catalog under data_dir)",
        )
    })?;
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(ConfigError::invalid(
            "catalog.url",
            "must be a postgres:// (or postgresql://) URL",
        ));
    }
    Ok(Some(CatalogConfig { url }))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::Config;

    const BASE: &str = "[gateway]\ndata_dir = \"d\"\n";

    fn parse(extra: &str) -> Result<Config, crate::ConfigError> {
        Config::parse(&format!("{BASE}{extra}"), Path::new("/etc/sluice.toml"))
    }

    #[test]
    fn without_a_catalog_section_the_catalog_is_embedded() {
        assert_eq!(parse("").expect("valid").catalog, None);
    }

    #[test]
    fn a_postgres_url_names_the_shared_catalog() {
        let c = parse("[catalog]\nurl = \"postgres://sluice:pw@127.0.0.1:5432/sluice\"\n")
            .expect("valid");
        assert_eq!(
            c.catalog.map(|c| c.url).as_deref(),
            Some("postgres://sluice:pw@127.0.0.1:5432/sluice")
        );
    }

    #[test]
    fn a_catalog_without_a_postgres_url_is_refused_by_name() {
        for (extra, named) in [
            ("[catalog]\n", "catalog.url"),
            ("[catalog]\nurl = \"mysql://x\"\n", "catalog.url"),
            ("[catalog]\nurl = \"postgres://x\"\nuri = \"typo\"\n", "uri"),
        ] {
            let err = parse(extra).expect_err(extra).to_string();
            assert!(err.contains(named), "{extra}: {err}");
        }
    }
}
