//! `[tenant.encryption]`: where the node agent gets a tenant's confidential-object key.
//!
//! ```toml
//! [[tenant]]
//! id = "alice"
//! # ...
//! [tenant.encryption]
//! key_url = "http://127.0.0.1:8006/cdh/resource/default/sluice/alice"  # the key broker's resource
//! # key_file = "/run/secrets/alice.key"   # development fallback: a file of 32 raw bytes
//! # evidence_file = "/run/sluice/evidence" # stand-in for TEE evidence, sent with key_url
//! ```
//!
//! Exactly one of `key_url` and `key_file`. `key_url` is an `http://` or `https://` URL the
//! agent GETs (in Confidential Containers, the local Confidential Data Hub, which attests to
//! the Trustee KBS itself: the request carries nothing). `evidence_file` (only with `key_url`)
//! names a file whose contents the agent sends in the [`EVIDENCE_HEADER`] header of every key
//! request: the stand-in for TEE evidence that lets a test broker (or a broker without
//! attestation) release the key only to a caller holding the token. Paths resolve against the
//! file's directory. The key itself is never read here: the agent fetches it.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::ConfigError;

/// The request header the agent sends `evidence_file`'s contents in.
pub const EVIDENCE_HEADER: &str = "sluice-evidence";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEncryption {
    pub key_url: Option<String>,
    pub key_file: Option<String>,
    pub evidence_file: Option<String>,
}

/// A tenant's `[tenant.encryption]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encryption {
    pub key: KeySource,
    /// `evidence_file`: sent (trimmed) in [`EVIDENCE_HEADER`] with every `key_url` request,
    /// read anew for each.
    pub evidence_file: Option<PathBuf>,
}

/// Where the tenant's 32-byte key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// `key_url`: the key broker's resource, fetched with an HTTP GET.
    Url(String),
    /// `key_file`: a file of exactly 32 raw bytes (development fallback).
    File(PathBuf),
}

pub(crate) fn validate(
    file: Option<FileEncryption>,
    base: &Path,
) -> Result<Option<Encryption>, ConfigError> {
    let Some(file) = file else {
        return Ok(None);
    };
    let resolve = |p: &str| {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_owned()
        } else {
            base.join(p)
        }
    };
    let nonempty = |field: &str, v: String| {
        if v.trim().is_empty() {
            Err(ConfigError::invalid(
                format!("encryption.{field}"),
                "must not be empty",
            ))
        } else {
            Ok(v)
        }
    };
    let key = match (file.key_url, file.key_file) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::invalid(
                "encryption",
                "key_url and key_file are exclusive: name the key broker's resource or a key \
                 file, not both",
            ));
        }
        (None, None) => {
            return Err(ConfigError::invalid(
                "encryption",
                "needs key_url (the key broker's resource, e.g. \
                 \"http://127.0.0.1:8006/cdh/resource/default/sluice/TENANT\") or key_file \
                 (a file of 32 raw bytes)",
            ));
        }
        (Some(url), None) => KeySource::Url(key_url(&nonempty("key_url", url)?)?),
        (None, Some(path)) => KeySource::File(resolve(&nonempty("key_file", path)?)),
    };
    let evidence_file = match file.evidence_file {
        None => None,
        Some(_) if matches!(key, KeySource::File(_)) => {
            return Err(ConfigError::invalid(
                "encryption.evidence_file",
                "only with key_url: it is sent to the key broker",
            ));
        }
        Some(p) => Some(resolve(&nonempty("evidence_file", p)?)),
    };
    Ok(Some(Encryption { key, evidence_file }))
}

/// `key_url`: `http://` or `https://`, a host, and a path naming the resource.
fn key_url(url: &str) -> Result<String, ConfigError> {
    let bad = |why: &str| {
        ConfigError::invalid(
            "encryption.key_url",
            format!(
                "{url:?}: {why} (e.g. \"http://127.0.0.1:8006/cdh/resource/default/sluice/alice\")"
            ),
        )
    };
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| bad("expected an http:// or https:// URL"))?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if authority.is_empty() || authority.contains('@') {
        return Err(bad(
            "expected a host (and optional port), without credentials",
        ));
    }
    if path.is_empty() {
        return Err(bad("expected the resource's path after the host"));
    }
    if url.chars().any(char::is_whitespace) || url.contains('#') {
        return Err(bad("not a URL"));
    }
    Ok(url.to_owned())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{Encryption, KeySource};
    use crate::{Config, ConfigError};

    fn parse(extra: &str) -> Result<Config, ConfigError> {
        Config::parse(
            &format!(
                "[agent]\n[[tenant]]\nid = \"alice\"\naccess_key = \"AKALICE\"\n\
                 secret_key = \"alice-secret\"\n{extra}\
                 [[tenant]]\nid = \"bob\"\naccess_key = \"AKBOB\"\nsecret_key = \"bob-secret\"\n"
            ),
            Path::new("/etc/sluice/sluice.toml"),
        )
    }

    #[test]
    fn a_tenant_without_the_table_has_no_encryption() {
        let c = parse("").expect("valid");
        assert_eq!(c.encryption("alice"), None);
        assert!(c.encryption.is_empty());
    }

    #[test]
    fn a_key_url_is_read_with_its_evidence_file_resolved() {
        let c = parse(
            "[tenant.encryption]\nkey_url = \"http://127.0.0.1:8006/cdh/resource/default/sluice/alice\"\n\
             evidence_file = \"run/evidence\"\n",
        )
        .expect("valid");
        assert_eq!(
            c.encryption("alice"),
            Some(&Encryption {
                key: KeySource::Url(
                    "http://127.0.0.1:8006/cdh/resource/default/sluice/alice".into()
                ),
                evidence_file: Some("/etc/sluice/run/evidence".into()),
            })
        );
        assert_eq!(c.encryption("bob"), None, "the table is alice's only");
    }

    #[test]
    fn a_key_file_is_resolved_against_the_files_directory() {
        let c = parse("[tenant.encryption]\nkey_file = \"secrets/alice.key\"\n").expect("valid");
        assert_eq!(
            c.encryption("alice").map(|e| &e.key),
            Some(&KeySource::File("/etc/sluice/secrets/alice.key".into()))
        );
        let c =
            parse("[tenant.encryption]\nkey_file = \"/run/secrets/alice.key\"\n").expect("valid");
        assert_eq!(
            c.encryption("alice").map(|e| &e.key),
            Some(&KeySource::File("/run/secrets/alice.key".into()))
        );
    }

    #[test]
    fn bad_tables_are_refused_naming_the_tenant_and_the_field() {
        for (table, says) in [
            ("", "tenant[0] \"alice\": encryption: needs key_url"),
            (
                "key_url = \"http://b/r\"\nkey_file = \"k\"\n",
                "tenant[0] \"alice\": encryption: key_url and key_file are exclusive",
            ),
            (
                "key_url = \"kbs:///default/sluice/alice\"\n",
                "tenant[0] \"alice\": encryption.key_url: \"kbs:///default/sluice/alice\": expected an http://",
            ),
            (
                "key_url = \"http://127.0.0.1:8006\"\n",
                "tenant[0] \"alice\": encryption.key_url: \"http://127.0.0.1:8006\": expected the resource's path",
            ),
            (
                "key_url = \"http://u:p@broker/r\"\n",
                "tenant[0] \"alice\": encryption.key_url: \"http://u:p@broker/r\": expected a host",
            ),
            (
                "key_file = \" \"\n",
                "tenant[0] \"alice\": encryption.key_file: must not be empty",
            ),
            (
                "key_file = \"k\"\nevidence_file = \"e\"\n",
                "tenant[0] \"alice\": encryption.evidence_file: only with key_url",
            ),
        ] {
            let err = parse(&format!("[tenant.encryption]\n{table}"))
                .expect_err(table)
                .to_string();
            assert!(err.starts_with(says), "{table}: {err}");
        }
    }

    #[test]
    fn an_unknown_key_in_the_table_is_refused() {
        let err = parse("[tenant.encryption]\nkey_url = \"http://b/r\"\nkey_uri = \"x\"\n")
            .expect_err("typo")
            .to_string();
        assert!(err.contains("unknown field `key_uri`"), "{err}");
    }
}
