//! Node agents' escrow of shared-tier quota, on the gateway's S3 listener.
//!
//! A node agent acknowledges writes before they reach the shared tier, so it must hold the
//! shared tier's quota for them first: it asks the gateway for escrow with a signed
//! `POST /?sluice-escrow&holder=<node>&bytes=<target>&ttl-ms=<ms>` (SigV4 with the tenant's
//! own key, like every operation; an s3s custom route, [`EscrowRoute`]). The catalog sets the
//! holder's escrow of that tenant's quota to `bytes` for `ttl-ms` as far as the quota allows
//! ([`sluice_meta::Engine::grant_escrow`]: `used + reserved + live escrow ≤ quota` across every
//! gateway sharing the catalog), and the answer is JSON:
//! `{"unlimited": false, "bytes": <held>, "expires_ms": <epoch ms>, "quota": <bytes>}`
//! (`"unlimited": true` and nothing else for a tenant without a quota). Asking again renews
//! the lease and resets the amount; one that is not renewed lapses and holds nothing.
//!
//! The agent's uploads (PutObject, UploadPart) carry [`HOLDER_HEADER`] naming the holder:
//! their space is drawn from its escrow first ([`sluice_meta::Ledger::reserve_from_escrow`]),
//! the remainder from free space, and the commit that makes them visible spends it. The
//! header needs no authority of its own: a request can only spend the escrow its own tenant's
//! agent holds for that tenant.

use std::sync::Arc;
use std::time::Duration;

use s3s::route::S3Route;
use s3s::{Body, S3Request, S3Response, S3Result};
use sluice_meta::{EscrowGrant, Reservation};

use super::Front;
use crate::auth::{Caller, Tenants, sigv4_tenant};
use crate::error::{ApiError, ApiResult, to_s3};

/// The query parameter that marks an escrow request.
pub const ESCROW_QUERY: &str = "sluice-escrow";

/// The header naming the escrow an upload spends (the node agent's holder id).
pub const HOLDER_HEADER: &str = "x-sluice-escrow-holder";

/// The longest lease an escrow request may ask for.
pub const MAX_TTL: Duration = Duration::from_secs(600);

/// The holder an upload names, checked: 1 to 128 characters of `A-Z a-z 0-9 . _ - :`.
pub fn holder(headers: &http::HeaderMap) -> ApiResult<Option<String>> {
    headers
        .get(HOLDER_HEADER)
        .map(|v| {
            v.to_str()
                .ok()
                .filter(|h| valid_holder(h))
                .map(str::to_owned)
                .ok_or_else(|| {
                    ApiError::InvalidArgument(format!(
                        "{HOLDER_HEADER} must be 1 to 128 characters of A-Z a-z 0-9 . _ - :"
                    ))
                })
        })
        .transpose()
}

fn valid_holder(h: &str) -> bool {
    (1..=128).contains(&h.len())
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-:".contains(&b))
}

impl Front {
    /// Reserves `bytes` of the tenant's quota: from `escrow`'s escrow first when it names a
    /// holder, else from free space.
    pub(super) fn reserve(
        &self,
        tenant: &str,
        bytes: u64,
        escrow: Option<&str>,
    ) -> ApiResult<Reservation> {
        let ledger = self.catalog().ledger();
        Ok(match escrow {
            Some(holder) => ledger.reserve_from_escrow(tenant, &escrow_holder(holder), bytes)?,
            None => ledger.reserve(tenant, bytes)?,
        })
    }

    /// Asks the tier behind this front (the node agent's shared tier) whether a write of
    /// `bytes` may be acknowledged (see [`super::Tier::admit_write`]); a front without a tier
    /// needs no one's leave.
    /// The answer is attached to `reservation`, told whether the write committed.
    pub(super) async fn admit_write(
        &self,
        tenant: &str,
        bytes: u64,
        reservation: &mut Reservation,
    ) -> ApiResult<()> {
        if let Some(tier) = &self.inner.tier
            && let Some(on_end) = tier.admit_write(tenant, bytes).await?
        {
            reservation.on_end(on_end);
        }
        Ok(())
    }

    /// The escrow route, served by the gateway beside this front (see the module doc).
    #[must_use]
    pub fn escrow_route(&self, tenants: &Arc<Tenants>) -> EscrowRoute {
        EscrowRoute {
            front: self.clone(),
            tenants: Arc::clone(tenants),
        }
    }
}

/// A holder's name in the catalog: agents' grants are kept apart from anything else.
fn escrow_holder(holder: &str) -> String {
    format!("agent:{holder}")
}

/// `POST /?sluice-escrow`: see the module doc.
pub struct EscrowRoute {
    front: Front,
    tenants: Arc<Tenants>,
}

/// The request's parameters.
struct Ask {
    holder: String,
    bytes: u64,
    ttl: Duration,
}

fn parse(query: &str) -> ApiResult<Ask> {
    let (mut holder, mut bytes, mut ttl) = (None, None, None);
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "holder" => holder = Some(v.to_owned()),
            "bytes" => bytes = v.parse::<u64>().ok(),
            "ttl-ms" => ttl = v.parse::<u64>().ok(),
            _ => {}
        }
    }
    let holder = holder.filter(|h| valid_holder(h)).ok_or_else(|| {
        ApiError::InvalidArgument(
            "an escrow request names its holder: 1 to 128 characters of A-Z a-z 0-9 . _ - :".into(),
        )
    })?;
    let bytes = bytes.ok_or_else(|| {
        ApiError::InvalidArgument("an escrow request says how many bytes it wants".into())
    })?;
    let ttl = ttl
        .filter(|t| (1..=MAX_TTL.as_millis()).contains(&u128::from(*t)))
        .ok_or_else(|| {
            ApiError::InvalidArgument(format!(
                "an escrow request asks for a lease of 1 to {} ms (ttl-ms)",
                MAX_TTL.as_millis()
            ))
        })?;
    Ok(Ask {
        holder,
        bytes,
        ttl: Duration::from_millis(ttl),
    })
}

#[async_trait::async_trait]
impl S3Route for EscrowRoute {
    fn is_match(
        &self,
        method: &http::Method,
        uri: &http::Uri,
        _headers: &http::HeaderMap,
        _extensions: &mut http::Extensions,
    ) -> bool {
        crate::is_extension(method, uri, &http::Method::POST, ESCROW_QUERY)
    }

    async fn check_access(&self, req: &mut S3Request<Body>) -> S3Result<()> {
        let key = sigv4_tenant(
            &self.tenants,
            &req.headers,
            &req.uri,
            req.credentials.as_ref(),
        )?;
        req.extensions.insert(Caller(key.tenant));
        Ok(())
    }

    async fn call(&self, req: S3Request<Body>) -> S3Result<S3Response<Body>> {
        let Some(Caller(tenant)) = req.extensions.get::<Caller>().cloned() else {
            return Err(s3s::s3_error!(
                AccessDenied,
                "anonymous requests are refused"
            ));
        };
        let ask = parse(req.uri.query().unwrap_or_default()).map_err(to_s3)?;
        let holder = escrow_holder(&ask.holder);
        let t = tenant.to_string();
        let grant = self
            .front
            .meta(move |c| c.grant_escrow(&t, &holder, ask.bytes, ask.ttl))
            .await
            .map_err(to_s3)?;
        let json = match grant {
            EscrowGrant::Unlimited => serde_json::json!({ "unlimited": true }),
            EscrowGrant::Held {
                bytes,
                expires_ms,
                quota,
            } => serde_json::json!({
                "unlimited": false,
                "bytes": bytes,
                "expires_ms": expires_ms,
                "quota": quota,
            }),
        };
        let mut resp = S3Response::new(Body::from(json.to_string()));
        resp.headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        Ok(resp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_escrow_request_names_a_valid_holder_an_amount_and_a_bounded_lease() {
        let ask = parse("sluice-escrow&holder=node-1&bytes=42&ttl-ms=3000").expect("valid");
        assert_eq!((ask.holder.as_str(), ask.bytes), ("node-1", 42));
        assert_eq!(ask.ttl, Duration::from_secs(3));
        for bad in [
            "sluice-escrow&bytes=1&ttl-ms=1000",
            "sluice-escrow&holder=a/b&bytes=1&ttl-ms=1000",
            "sluice-escrow&holder=n&ttl-ms=1000",
            "sluice-escrow&holder=n&bytes=-1&ttl-ms=1000",
            "sluice-escrow&holder=n&bytes=1&ttl-ms=0",
            "sluice-escrow&holder=n&bytes=1&ttl-ms=600001",
        ] {
            assert!(
                matches!(parse(bad), Err(ApiError::InvalidArgument(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn an_uploads_holder_header_is_checked() {
        let mut h = http::HeaderMap::new();
        assert_eq!(holder(&h).expect("none"), None);
        h.insert(HOLDER_HEADER, http::HeaderValue::from_static("node-1"));
        assert_eq!(holder(&h).expect("valid").as_deref(), Some("node-1"));
        h.insert(HOLDER_HEADER, http::HeaderValue::from_static("no spaces"));
        assert!(holder(&h).is_err());
    }
}
