//! Confidential bodies (issue #29): the seam through which the node agent tells the front
//! which tenants' bodies it encrypts, and with what key.
//!
//! The gateway never sets one, so it stores and serves whatever bodies it is given (on the
//! node agent's drain, ciphertext) as opaque bytes.

use std::sync::Arc;

pub use sluice_crypt::TenantKey;

/// Where a tenant's confidential-object key comes from (the node agent implements it; the
/// gateway never sets one, so it stores and serves ciphertext as opaque bytes).
pub trait Confidential: Send + Sync + 'static {
    /// `Ok(None)`: this tenant has no `[tenant.encryption]`: bodies go in clear as today.
    /// `Ok(Some(key))`: encrypt/decrypt this tenant's bodies with it.
    /// `Err(reason)`: the tenant is configured for encryption but its key is not available
    /// (broker refused, unreachable, ...): the front refuses the request with a clear S3
    /// error (503 ServiceUnavailable-style, message naming the reason) — it never writes or
    /// serves plaintext in its place.
    fn tenant_key(&self, tenant: &str) -> Result<Option<Arc<TenantKey>>, String>;
}
