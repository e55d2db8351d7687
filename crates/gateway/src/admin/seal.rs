//! Tenants' secret keys at rest: sealed with a key the catalog does not hold.
//!
//! SigV4 needs the secret itself (the gateway computes the signature with it), so a hash
//! cannot stand in for it; instead every secret reaches the catalog sealed with AES-256-GCM
//! under a *seal key* kept outside the catalog, and a catalog dump alone yields no usable key.
//! The seal key is, in order: the file `[admin] seal_key_file` names (32 bytes, or 64 hex
//! digits); with the embedded catalog `data_dir/seal.key`, created at first start (mode
//! 0600); with a shared catalog, derived from `[catalog] url`, which the database's own dump
//! does not contain (every gateway of one catalog must then name it with the same text, or
//! all use one `seal_key_file`).
//!
//! Sealing is deterministic (the nonce is an HMAC of access key and secret under a key
//! derived from the seal key: a synthetic IV), so the same file entry seals to the same text
//! on every gateway and a file compared with the catalog agrees exactly where the secrets do.
//! A nonce repeats only for the same access key and secret, where the ciphertext is the same
//! anyway. The access key is the associated data: a sealed secret moved to another key does
//! not open. Stored text: `sealed1:` and hex of nonce ‖ ciphertext ‖ tag. A secret without the
//! prefix (written before sealing, schema v3/v4) is read as it is.

use std::io::Write;
use std::path::Path;

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::hmac;

const PREFIX: &str = "sealed1:";

/// Why a sealed secret did not open, or a seal key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("a sealed secret of access key {0} does not open with this seal key")]
    Open(String),
    #[error("seal key {path}: {problem}")]
    KeyFile {
        path: std::path::PathBuf,
        problem: String,
    },
}

/// Seals and opens tenants' secrets (see the module doc).
pub struct Sealer {
    aead: LessSafeKey,
    iv: hmac::Key,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer")
    }
}

fn derive(key: &[u8], label: &str) -> [u8; 32] {
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), label.as_bytes());
    let mut out = [0; 32];
    out.copy_from_slice(&tag.as_ref()[..32]);
    out
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// The bytes of lower- or upper-case hex `text`; `None` if it is not hex.
pub(crate) fn unhex(text: &str) -> Option<Vec<u8>> {
    hex::decode(text).ok()
}

impl Sealer {
    /// A sealer under the seal key `key` (any length; 32 random bytes in practice).
    pub fn new(key: &[u8]) -> Self {
        let enc = derive(key, "sluice tenant secrets: aes-256-gcm");
        let aead = LessSafeKey::new(
            UnboundKey::new(&AES_256_GCM, &enc).unwrap_or_else(|_| unreachable!("32 bytes")),
        );
        let iv = hmac::Key::new(hmac::HMAC_SHA256, &derive(key, "sluice tenant secrets: iv"));
        Self { aead, iv }
    }

    /// A sealer whose key is derived from `text` (a shared catalog's URL).
    pub fn derived_from(text: &str) -> Self {
        Self::new(&derive(
            text.as_bytes(),
            "sluice seal key from the catalog url",
        ))
    }

    /// `secret`, sealed for `access_key`.
    pub fn seal(&self, access_key: &str, secret: &str) -> String {
        let mut msg = Vec::with_capacity(access_key.len() + secret.len() + 1);
        msg.extend_from_slice(access_key.as_bytes());
        msg.push(0);
        msg.extend_from_slice(secret.as_bytes());
        let tag = hmac::sign(&self.iv, &msg);
        let mut nonce = [0; NONCE_LEN];
        nonce.copy_from_slice(&tag.as_ref()[..NONCE_LEN]);
        let mut body = secret.as_bytes().to_vec();
        self.aead
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(access_key.as_bytes()),
                &mut body,
            )
            .unwrap_or_else(|_| unreachable!("a secret is far below AES-GCM's limit"));
        let mut out = nonce.to_vec();
        out.extend_from_slice(&body);
        format!("{PREFIX}{}", hex(&out))
    }

    /// The secret `stored` holds for `access_key` (a secret stored unsealed is returned as
    /// it is).
    pub fn open(&self, access_key: &str, stored: &str) -> Result<String, SealError> {
        let Some(text) = stored.strip_prefix(PREFIX) else {
            return Ok(stored.to_owned());
        };
        let failed = || SealError::Open(access_key.to_owned());
        let raw = unhex(text)
            .filter(|r| r.len() > NONCE_LEN)
            .ok_or_else(failed)?;
        let (nonce, body) = raw.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| failed())?;
        let mut body = body.to_vec();
        let plain = self
            .aead
            .open_in_place(nonce, Aad::from(access_key.as_bytes()), &mut body)
            .map_err(|_| failed())?;
        String::from_utf8(plain.to_vec()).map_err(|_| failed())
    }
}

/// Reads the seal key at `path`: 32 raw bytes or 64 hex digits (a trailing newline allowed).
pub fn read_key(path: &Path) -> Result<Vec<u8>, SealError> {
    let bad = |problem: String| SealError::KeyFile {
        path: path.to_owned(),
        problem,
    };
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    if bytes.len() == 32 {
        return Ok(bytes);
    }
    std::str::from_utf8(&bytes)
        .ok()
        .map(str::trim)
        .filter(|t| t.len() == 64)
        .and_then(unhex)
        .ok_or_else(|| bad("must hold 32 bytes or 64 hex digits".into()))
}

/// `n` random bytes as hex.
pub fn random_hex(n: usize) -> String {
    let mut buf = vec![0; n];
    aws_lc_rs::rand::fill(&mut buf).unwrap_or_else(|_| unreachable!("the system's RNG"));
    hex(&buf)
}

/// The file at `path`, created with `contents` readable only by this user if it does not
/// exist; its contents either way.
pub fn create_private(path: &Path, contents: &str) -> std::io::Result<String> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(mut f) => {
            f.write_all(contents.as_bytes())?;
            f.sync_all()?;
            Ok(contents.to_owned())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Ok(std::fs::read_to_string(path)?.trim().to_owned())
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_secret_opens_only_with_its_key_and_for_its_access_key() {
        let s = Sealer::new(b"0123456789abcdef0123456789abcdef");
        let sealed = s.seal("AKID", "the-secret");
        assert!(!sealed.contains("the-secret"));
        assert_eq!(sealed, s.seal("AKID", "the-secret"), "deterministic");
        assert_ne!(sealed, s.seal("AKID2", "the-secret"));
        assert_eq!(s.open("AKID", &sealed).expect("opens"), "the-secret");
        assert!(s.open("AKID2", &sealed).is_err(), "bound to its access key");
        let other = Sealer::new(b"another key of thirty-two bytes!");
        assert!(other.open("AKID", &sealed).is_err());
        assert_eq!(
            s.open("AKID", "legacy-clear").expect("clear"),
            "legacy-clear"
        );
        let mut tampered = sealed.clone();
        tampered.pop();
        tampered.push('0');
        assert!(s.open("AKID", &tampered).is_err() || tampered == sealed);
    }
}
