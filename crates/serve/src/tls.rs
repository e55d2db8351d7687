//! TLS on the S3 listeners of the gateway and the agent (`tls_cert`, `tls_key`), with rustls and
//! its aws-lc-rs provider (the one `object_store`'s client already brings).
//!
//! [`ServerTls`] holds the certificate a listener serves. It is read and checked as a whole —
//! the chain parsed, the key parsed and matched to the chain's first certificate — at start
//! ([`ServerTls::load`]) and on every reload ([`ServerTls::reload`]); a reload whose files do
//! not pass leaves the old certificate in place. Every handshake asks for the current
//! certificate ([`ResolvesServerCert`]), so new connections get a reloaded one while
//! connections already open keep theirs. ALPN offers `h2` and `http/1.1`, as the plain
//! listener serves both.
//!
//! A TLS connection is never offered a sendfile lane: rustls reads every byte hyper writes to
//! encrypt it, placeholders included (see the crate doc), so GET bodies take the ordinary body
//! path. Reads still end on pages of request bodies ([`crate::framing::PageReads`] sits above
//! the decryption).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

/// Why a certificate or key was refused: the configuration key, the file and the problem.
#[derive(Debug, thiserror::Error)]
#[error("`{key}` {}: {problem}", path.display())]
pub struct TlsError {
    /// The configuration key that names the file, e.g. `[gateway] tls_cert`.
    pub key: String,
    pub path: PathBuf,
    pub problem: String,
}

/// The certificate a TLS listener serves, replaceable while it serves.
#[derive(Clone)]
pub struct ServerTls {
    /// `[gateway]` or `[agent]`: the section whose keys name the files, for errors.
    section: &'static str,
    current: Arc<Current>,
    config: Arc<rustls::ServerConfig>,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("section", &self.section)
            .finish_non_exhaustive()
    }
}

/// A certificate and key read and checked by [`ServerTls::check`], not yet served.
pub struct Staged(Arc<CertifiedKey>);

/// The certificate handed to each new handshake.
#[derive(Debug)]
struct Current(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(
            &self.0.read().unwrap_or_else(PoisonError::into_inner),
        ))
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

impl ServerTls {
    /// Reads the PEM certificate chain at `cert` and the PEM private key at `key`, named by
    /// `section`'s `tls_cert` and `tls_key`.
    pub fn load(section: &'static str, cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let provider = provider();
        let certified = certified_key(section, cert, key, &provider)?;
        let current = Arc::new(Current(RwLock::new(Arc::new(certified))));
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError {
                key: format!("{section} tls_cert"),
                path: cert.to_owned(),
                problem: e.to_string(),
            })?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(&current) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self {
            section,
            current,
            config: Arc::new(config),
        })
    }

    /// Replaces the certificate for new connections with the one in `cert` and `key`, if they
    /// pass as at [`ServerTls::load`]; otherwise nothing changes.
    pub fn reload(&self, cert: &Path, key: &Path) -> Result<(), TlsError> {
        let staged = self.check(cert, key)?;
        self.install(staged);
        Ok(())
    }

    /// Reads and checks `cert` and `key` as [`ServerTls::reload`] does, changing nothing: for a
    /// reload that must validate everything before it changes anything.
    pub fn check(&self, cert: &Path, key: &Path) -> Result<Staged, TlsError> {
        certified_key(self.section, cert, key, &provider()).map(|c| Staged(Arc::new(c)))
    }

    /// Serves `staged` (from [`ServerTls::check`]) to new connections.
    pub fn install(&self, staged: Staged) {
        *self
            .current
            .0
            .write()
            .unwrap_or_else(PoisonError::into_inner) = staged.0;
    }

    /// What accepts a connection with the current certificate.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(Arc::clone(&self.config))
    }
}

/// The chain in `cert` with the key in `key`, checked to belong together.
fn certified_key(
    section: &str,
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let cert_key = format!("{section} tls_cert");
    let key_key = format!("{section} tls_key");
    let refused = |key: &str, path: &Path, problem: String| TlsError {
        key: key.to_owned(),
        path: path.to_owned(),
        problem,
    };
    let cert_pem =
        std::fs::read(cert).map_err(|e| refused(&cert_key, cert, format!("cannot read: {e}")))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| refused(&cert_key, cert, format!("not a PEM certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(refused(
            &cert_key,
            cert,
            "no certificate in the file (expected PEM `BEGIN CERTIFICATE` sections)".into(),
        ));
    }
    let key_pem =
        std::fs::read(key).map_err(|e| refused(&key_key, key, format!("cannot read: {e}")))?;
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        refused(
            &key_key,
            key,
            format!("no PEM private key (PKCS#8, PKCS#1 or SEC1) in the file: {e}"),
        )
    })?;
    let signing = provider
        .key_provider
        .load_private_key(private)
        .map_err(|e| refused(&key_key, key, format!("an unusable private key: {e}")))?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(certified)
        }
        Err(e) => Err(refused(
            &key_key,
            key,
            format!("not the private key of `tls_cert` {}: {e}", cert.display()),
        )),
    }
}
