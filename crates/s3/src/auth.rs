//! Who is calling: one SigV4 path for every request, then the tenant behind the access key.
//!
//! s3s verifies signatures (headers, presigned URLs, aws-chunked streaming bodies, trailers)
//! against the secret [`Tenants`] returns. [`TenantAccess`] then runs before any input is
//! parsed: it refuses anonymous requests and the legacy Signature Version 2 and POST-form
//! paths, resolves the tenant, validates bucket and key names, and hands the tenant to the
//! handler in the request's extensions (and names it and the operation on the request's span,
//! for the logs). Handlers never look at an access key again.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::path::S3Path;
use s3s::{S3Result, s3_error};

use crate::error::{ApiError, to_s3};
use crate::name;

/// The tenant a request was authenticated as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller(pub Arc<str>);

/// One tenant's credentials.
#[derive(Debug, Clone)]
pub struct TenantKey {
    pub tenant: Arc<str>,
    pub access_key: String,
    pub secret_key: String,
}

/// Access key → tenant, swapped whole on reload.
#[derive(Debug, Default)]
pub struct Tenants {
    by_key: RwLock<Arc<HashMap<String, TenantKey>>>,
}

impl Tenants {
    pub fn new(keys: Vec<TenantKey>) -> Self {
        let t = Self::default();
        t.replace(keys);
        t
    }

    /// Replaces every credential at once (a configuration reload).
    pub fn replace(&self, keys: Vec<TenantKey>) {
        let map = keys
            .into_iter()
            .map(|k| (k.access_key.clone(), k))
            .collect();
        *self.by_key.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(map);
    }

    pub fn get(&self, access_key: &str) -> Option<TenantKey> {
        self.by_key
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(access_key)
            .cloned()
    }
}

/// S3's refusal of an access key it does not know, in S3's words.
fn invalid_access_key() -> s3s::S3Error {
    s3s::S3Error::with_message(
        s3s::S3ErrorCode::InvalidAccessKeyId,
        "The AWS access key Id you provided does not exist in our records.",
    )
}

/// The secret-key lookup s3s verifies signatures with.
pub struct TenantAuth(pub Arc<Tenants>);

#[async_trait::async_trait]
impl S3Auth for TenantAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        self.0
            .get(access_key)
            .map(|k| SecretKey::from(k.secret_key))
            .ok_or_else(invalid_access_key)
    }
}

/// The bucket-name check s3s runs while it parses a path: anything non-empty passes, so that
/// [`TenantAccess`] checks the name ([`name::check_bucket`]) and the client is told which
/// rule it broke (s3s's own check refuses with a bare `InvalidBucketName`).
pub struct DeferredNameCheck;

impl s3s::validation::NameValidation for DeferredNameCheck {
    fn validate_bucket_name(&self, name: &str) -> bool {
        !name.is_empty()
    }
}

/// Authorization: authenticated SigV4 callers only, names validated, tenant attached.
pub struct TenantAccess(pub Arc<Tenants>);

fn is_sigv2(headers: &http::HeaderMap, uri: &http::Uri) -> bool {
    let header_v2 = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("AWS "));
    let query = uri.query().unwrap_or("");
    let query_v2 = query.split('&').any(|p| p.starts_with("AWSAccessKeyId="))
        || (query.split('&').any(|p| p.starts_with("Signature="))
            && !query.contains("X-Amz-Signature="));
    header_v2 || query_v2
}

/// The longest a presigned URL may stay valid, as S3: a week. s3s takes any `X-Amz-Expires`,
/// so a URL signed for ten years would be a credential that never lapses.
pub const PRESIGNED_MAX_SECS: u64 = 7 * 24 * 3600;

/// A presigned URL whose `X-Amz-Expires` is over [`PRESIGNED_MAX_SECS`] (s3s has already
/// refused one that is not a number).
fn presigned_for_too_long(uri: &http::Uri) -> bool {
    uri.query().unwrap_or("").split('&').any(|p| {
        p.strip_prefix("X-Amz-Expires=")
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|secs| secs > PRESIGNED_MAX_SECS)
    })
}

/// Whether a sluice extension request is this one: `method` on the root path with `name` among
/// its query's parameters (`/?sluice-escrow`, `/?sluice-status`), for an `s3s::route::S3Route`.
#[must_use]
pub fn is_extension(
    method: &http::Method,
    uri: &http::Uri,
    want: &http::Method,
    name: &str,
) -> bool {
    method == want
        && uri.path() == "/"
        && uri
            .query()
            .is_some_and(|q| q.split('&').any(|p| p.split('=').next() == Some(name)))
}

/// The tenant behind a request s3s has authenticated, under the rules every operation follows:
/// Signature Version 4 only, no anonymous caller, a known key; named on the request's span
/// (`sluice_serve::request`). For custom routes (`s3s::route::S3Route`), which s3s
/// authenticates but does not pass through [`TenantAccess`].
pub fn sigv4_tenant(
    tenants: &Tenants,
    headers: &http::HeaderMap,
    uri: &http::Uri,
    credentials: Option<&s3s::auth::Credentials>,
) -> S3Result<TenantKey> {
    if is_sigv2(headers, uri) {
        return Err(s3_error!(
            AccessDenied,
            "only AWS Signature Version 4 is accepted"
        ));
    }
    let Some(creds) = credentials else {
        return Err(s3_error!(AccessDenied, "anonymous requests are refused"));
    };
    if presigned_for_too_long(uri) {
        return Err(s3_error!(
            AuthorizationQueryParametersError,
            "X-Amz-Expires must be at most {PRESIGNED_MAX_SECS} seconds (a week)"
        ));
    }
    let key = tenants
        .get(&creds.access_key)
        .ok_or_else(invalid_access_key)?;
    sluice_serve::request::set_tenant(&key.tenant);
    Ok(key)
}

fn is_post_form(cx: &S3AccessContext<'_>) -> bool {
    cx.method() == http::Method::POST
        && cx
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("multipart/form-data"))
}

#[async_trait::async_trait]
impl S3Access for TenantAccess {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        sluice_serve::request::set_operation(cx.s3_op().name());
        if is_post_form(cx) {
            return Err(s3_error!(
                AccessDenied,
                "only AWS Signature Version 4 is accepted"
            ));
        }
        let key = sigv4_tenant(&self.0, cx.headers(), cx.uri(), cx.credentials())?;
        match cx.s3_path() {
            S3Path::Root => {}
            S3Path::Bucket { bucket } => {
                name::check_bucket(bucket).map_err(|e| to_s3(ApiError::Name(e)))?;
            }
            S3Path::Object { bucket, key } => {
                name::check_bucket(bucket).map_err(|e| to_s3(ApiError::Name(e)))?;
                name::check_key(key).map_err(|e| to_s3(ApiError::Name(e)))?;
            }
        }
        cx.extensions_mut().insert(Caller(key.tenant));
        Ok(())
    }
}
