//! `[admin]`: the credentials of the deployment's administration (`sluice tenant ...`), never
//! a tenant's. Absent, a gateway with the embedded catalog keeps a token of its own in
//! `data_dir/admin.token` (mode 0600) and seals tenants' secrets with `data_dir/seal.key`;
//! on a shared catalog the CLI uses the catalog's own credentials (`[catalog] url`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::ConfigError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileAdmin {
    pub token: Option<String>,
    pub seal_key_file: Option<String>,
}

/// `[admin]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdminConfig {
    /// The bearer token of the gateway's admin endpoint (at least 32 characters);
    /// `None`: the gateway's own in `data_dir/admin.token`.
    pub token: Option<String>,
    /// The key tenants' secrets are sealed with at rest (32 bytes or 64 hex digits);
    /// `None`: `data_dir/seal.key` (embedded catalog) or one derived from `[catalog] url`.
    pub seal_key_file: Option<PathBuf>,
}

pub(crate) fn validate(file: Option<FileAdmin>, base: &Path) -> Result<AdminConfig, ConfigError> {
    let Some(file) = file else {
        return Ok(AdminConfig::default());
    };
    if let Some(t) = &file.token
        && (t.len() < 32 || !t.bytes().all(|b| b.is_ascii_graphic()))
    {
        return Err(ConfigError::invalid(
            "admin.token",
            "must be at least 32 printable characters without spaces",
        ));
    }
    Ok(AdminConfig {
        token: file.token,
        seal_key_file: file.seal_key_file.map(|p| base.join(p)),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::Config;

    #[test]
    fn admin_credentials_are_checked() {
        let parse = |extra: &str| {
            Config::parse(
                &format!("[gateway]\ndata_dir = \"d\"\n{extra}"),
                Path::new("/etc/s.toml"),
            )
        };
        let c = parse("").expect("no [admin]");
        assert_eq!(c.admin, crate::AdminConfig::default());
        let c = parse(
            "[admin]\ntoken = \"0123456789abcdef0123456789abcdef\"\nseal_key_file = \"seal\"\n",
        )
        .expect("valid");
        assert_eq!(
            c.admin.seal_key_file.as_deref(),
            Some(Path::new("/etc/seal"))
        );
        let e = parse("[admin]\ntoken = \"short\"\n").expect_err("short");
        assert!(e.to_string().contains("admin.token"), "{e}");
        assert!(
            parse("[admin]\nuser = \"x\"\n").is_err(),
            "unknown fields are refused"
        );
    }
}
