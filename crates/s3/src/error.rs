//! Domain errors of the S3 front end and their one mapping to S3 codes and HTTP status.
//!
//! Quota exhaustion and throttling are distinct for clients: `QuotaExceeded` (403, not
//! retried: more space will not appear by waiting, as in Ceph RGW) versus `SlowDown` (503 with
//! `Retry-After`, which every S3 SDK backs off on). A backend out of space is 503 too, with its
//! own message: on the node agent the drain frees space. A client's mistake is logged at
//! debug; only failures of our own or of the backend are logged at error, once: they are
//! reported where they are mapped (`sluice_serve::request::fault`), and the request's one log
//! line carries them. A failure of the tier behind the node ([`TierError`], classified by its
//! HTTP status) is reported as an upstream failure (logged at warn) when it fails a request:
//! the node cannot serve it, but nothing here broke.

use s3s::{S3Error, S3ErrorCode};
use sluice_meta::MetaError;

use crate::name::NameError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    Meta(#[from] MetaError),
    #[error("backend: {0}")]
    Backend(#[from] object_store::Error),
    #[error("{0}")]
    Name(#[from] NameError),
    #[error("the specified key does not exist")]
    NoSuchKey,
    #[error("the request body ended before its declared length")]
    IncompleteBody,
    #[error("the request body is longer than its declared length")]
    BodyTooLong,
    #[error("request body: {0}")]
    Body(String),
    #[error("object is larger than the {0}-byte maximum")]
    EntityTooLarge(u64),
    #[error("the Content-MD5 you specified did not match what we received")]
    BadDigest,
    #[error("the Content-MD5 you specified is not valid")]
    InvalidDigest,
    /// An `x-amz-checksum-*` header or trailer that does not match the body (algorithm name).
    #[error("The {0} you specified did not match the calculated checksum.")]
    ChecksumMismatch(&'static str),
    #[error("{0}")]
    MalformedXml(String),
    #[error(
        "user metadata is {0} bytes; at most {max} are allowed",
        max = crate::front::METADATA_MAX
    )]
    MetadataTooLarge(usize),
    #[error("the requested range is not satisfiable")]
    InvalidRange,
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0} is not implemented")]
    NotImplemented(&'static str),
    /// A conditional request (`If-Match`, `If-Unmodified-Since`) the object does not meet.
    #[error("At least one of the pre-conditions you specified did not hold")]
    PreconditionFailed,
    /// A conditional GET or HEAD (`If-None-Match`, `If-Modified-Since`) of an object the
    /// client already has: 304, no body, with the object's validators.
    #[error("Not Modified")]
    NotModified {
        etag: String,
        last_modified: s3s::dto::Timestamp,
    },
    #[error("access denied")]
    AccessDenied,
    #[error("{0}")]
    SlowDown(#[from] sluice_throttle::Throttled),
    /// A write refused by the tenant's quota of a store that buffers for a tier behind it (the
    /// node agent's local buffer); `stalled` is why the drain is not emptying it, if the last
    /// attempt to reach the tier failed.
    #[error(
        "this node's local buffer for the tenant is full: {}; {refused}",
        stalled.as_ref().map_or_else(
            || "the drain to the shared tier has not caught up".to_owned(),
            |e| format!("the shared tier is not taking this tenant's data ({e})"),
        )
    )]
    LocalQuotaExceeded {
        refused: MetaError,
        stalled: Option<String>,
    },
    /// A write the store buffering for a tier will not acknowledge: the tier's quota for the
    /// tenant, held here in escrow, cannot cover it (the node agent: its shared-tier escrow).
    #[error(
        "shared tier quota exceeded: {needed} more bytes requested, {available} available to \
         this node of the tenant's {quota}"
    )]
    SharedQuotaExceeded {
        needed: u64,
        available: u64,
        quota: u64,
    },
    /// The tier behind this store failed a read this store cannot answer itself.
    #[error("{0}")]
    Tier(#[from] TierError),
    /// A confidential tenant's key is unavailable (see [`crate::Confidential`]): nothing is
    /// written or served in its place.
    #[error(
        "this tenant's objects are encrypted on this node and its key is not available \
         ({0}); nothing was written or read"
    )]
    KeyUnavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

/// Why the tier behind this store (the node agent's shared tier) could not answer, by the HTTP
/// status it answered with. Absence and unsatisfiable ranges are not failures: a tier reports
/// them as [`ApiError::NoSuchKey`], `NoSuchBucket` and [`ApiError::InvalidRange`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TierError {
    /// Throttled (503 or 429): the client should back off and retry.
    #[error("the shared tier asked to slow down and this node has no copy: {0}")]
    SlowDown(String),
    /// Unreachable, timed out, or failing (a 5xx other than 503).
    #[error("the shared tier is unreachable and this node has no copy: {0}")]
    Unavailable(String),
    /// Refused this node's request (a 4xx other than 404, 416 and 429): credentials or policy
    /// upstream, which an operator must mend.
    #[error(
        "the shared tier refused this node's request ({status}) and this node has no copy: {message}"
    )]
    Refused { status: u16, message: String },
}

pub type ApiResult<T> = Result<T, ApiError>;

impl From<ApiError> for S3Error {
    fn from(e: ApiError) -> Self {
        to_s3(e)
    }
}

fn with(code: S3ErrorCode, msg: impl Into<String>) -> S3Error {
    S3Error::with_message(code, msg.into())
}

/// The single place where a domain error becomes an S3 error.
pub fn to_s3(e: ApiError) -> S3Error {
    use S3ErrorCode as C;
    let msg = e.to_string();
    match e {
        ApiError::Meta(m) => match m {
            MetaError::NoSuchBucket => with(C::NoSuchBucket, msg),
            MetaError::BucketExists => with(C::BucketAlreadyOwnedByYou, msg),
            MetaError::BucketNotEmpty => with(C::BucketNotEmpty, msg),
            MetaError::TooManyBuckets { .. } => with(C::TooManyBuckets, msg),
            MetaError::NoSuchUpload => with(C::NoSuchUpload, msg),
            MetaError::InvalidPart(_) => with(C::InvalidPart, msg),
            MetaError::InvalidPartOrder => with(C::InvalidPartOrder, msg),
            MetaError::EntityTooSmall(_) => with(C::EntityTooSmall, msg),
            MetaError::QuotaExceeded { .. } | MetaError::TooManyObjects { .. } => {
                quota_exceeded(msg)
            }
            MetaError::UnknownTenant => with(C::AccessDenied, "access denied"),
            MetaError::PreconditionFailed => with(C::PreconditionFailed, msg),
            MetaError::Storage(_)
            | MetaError::Database(_)
            | MetaError::SchemaTooNew { .. }
            | MetaError::Corrupt(_)
            | MetaError::Inconsistent(_) => internal(&msg),
        },
        ApiError::Backend(b) => match b {
            object_store::Error::NotFound { .. } => {
                sluice_serve::request::fault(format_args!("object data missing from backend: {b}"));
                with(C::InternalError, "object data is missing from the backend")
            }
            other if crate::blob::integrity::is_corrupt(&other) => {
                sluice_serve::request::fault(format_args!("{other}"));
                with(
                    C::InternalError,
                    "the object's stored data failed its integrity check",
                )
            }
            object_store::Error::Generic { source, .. }
                if source.is::<crate::confidential::Undecryptable>()
                    || source.is::<crate::confidential::manifest::RolledBack>() =>
            {
                sluice_serve::request::fault(format_args!("{source}"));
                with(C::InternalError, source.to_string())
            }
            other if out_of_space(&other) => {
                sluice_serve::request::fault(format_args!("the storage is out of space: {other}"));
                let mut err = with(
                    C::ServiceUnavailable,
                    "the storage is out of space; retry once space is freed",
                );
                err.set_status_code(http::StatusCode::SERVICE_UNAVAILABLE);
                err
            }
            other => {
                sluice_serve::request::fault(format_args!("backend request failed: {other}"));
                let mut err = with(C::ServiceUnavailable, "the storage backend is unavailable");
                err.set_status_code(http::StatusCode::SERVICE_UNAVAILABLE);
                err
            }
        },
        ApiError::Name(n) => match n {
            NameError::Bucket(_) => with(C::InvalidBucketName, msg),
            NameError::KeyTooLong => with(C::KeyTooLongError, msg),
            NameError::EmptyKey | NameError::ControlCharacter | NameError::DotOrEmptySegment => {
                with(C::Custom("InvalidObjectName".into()), msg).status(400)
            }
        },
        ApiError::NoSuchKey => with(C::NoSuchKey, msg),
        ApiError::IncompleteBody => with(C::IncompleteBody, msg),
        ApiError::BodyTooLong | ApiError::Body(_) => with(C::InvalidRequest, msg),
        ApiError::EntityTooLarge(_) => with(C::EntityTooLarge, msg),
        ApiError::InvalidRange => with(C::InvalidRange, msg),
        ApiError::BadDigest | ApiError::ChecksumMismatch(_) => with(C::BadDigest, msg),
        ApiError::InvalidDigest => with(C::InvalidDigest, msg),
        ApiError::MalformedXml(_) => with(C::MalformedXML, msg),
        ApiError::MetadataTooLarge(_) => with(C::MetadataTooLarge, msg),
        ApiError::InvalidArgument(_) => with(C::InvalidArgument, msg),
        ApiError::InvalidRequest(_) => with(C::InvalidRequest, msg),
        ApiError::NotImplemented(_) => with(C::NotImplemented, msg),
        ApiError::PreconditionFailed => with(C::PreconditionFailed, msg),
        ApiError::NotModified {
            etag,
            last_modified,
        } => not_modified(&etag, &last_modified),
        ApiError::AccessDenied => with(C::AccessDenied, msg),
        ApiError::SlowDown(t) => {
            let mut err = with(C::SlowDown, msg);
            err.set_status_code(http::StatusCode::SERVICE_UNAVAILABLE);
            let mut headers = http::HeaderMap::new();
            headers.insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from(t.retry_after.as_secs().max(1)),
            );
            err.set_headers(headers);
            err
        }
        ApiError::LocalQuotaExceeded { .. } | ApiError::SharedQuotaExceeded { .. } => {
            quota_exceeded(msg)
        }
        ApiError::Tier(t) => {
            let code = if let TierError::SlowDown(_) = t {
                tracing::debug!(error = %t, "the shared tier is throttling a read");
                C::SlowDown
            } else {
                sluice_serve::request::upstream_failure(&t);
                C::ServiceUnavailable
            };
            let mut err = with(code, msg);
            err.set_status_code(http::StatusCode::SERVICE_UNAVAILABLE);
            err
        }
        ApiError::KeyUnavailable(_) => {
            let mut err = with(C::ServiceUnavailable, msg);
            err.set_status_code(http::StatusCode::SERVICE_UNAVAILABLE);
            err
        }
        ApiError::Internal(_) => internal(&msg),
    }
}

/// 304 carries the validators a 200 would and no body (hyper sends none for a 304; the
/// headers set here replace the error document's).
fn not_modified(etag: &str, last_modified: &s3s::dto::Timestamp) -> S3Error {
    let mut err = S3Error::new(S3ErrorCode::NotModified);
    let mut headers = http::HeaderMap::new();
    if let Ok(v) = http::HeaderValue::try_from(format!("\"{etag}\"")) {
        headers.insert(http::header::ETAG, v);
    }
    let mut date = Vec::new();
    if last_modified
        .format(s3s::dto::TimestampFormat::HttpDate, &mut date)
        .is_ok()
        && let Ok(v) = http::HeaderValue::try_from(date)
    {
        headers.insert(http::header::LAST_MODIFIED, v);
    }
    err.set_headers(headers);
    err
}

/// 403, not retried: more space does not appear by waiting (as in Ceph RGW).
fn quota_exceeded(msg: String) -> S3Error {
    let mut err = with(S3ErrorCode::Custom("QuotaExceeded".into()), msg);
    err.set_status_code(http::StatusCode::FORBIDDEN);
    err
}

/// Whether a backend failure is its filesystem out of space (`ENOSPC`, or a disk quota):
/// on the node agent, space the drain and eviction will free, so worth a retry, and never
/// "the shared tier is down".
fn out_of_space(e: &object_store::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            )
        {
            return true;
        }
        cause = c.source();
    }
    false
}

fn internal(msg: &str) -> S3Error {
    sluice_serve::request::fault(format_args!("internal error: {msg}"));
    with(S3ErrorCode::InternalError, "internal error")
}

trait Status {
    fn status(self, code: u16) -> Self;
}

impl Status for S3Error {
    fn status(mut self, code: u16) -> Self {
        if let Ok(s) = http::StatusCode::from_u16(code) {
            self.set_status_code(s);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error whose cause is an I/O error, as `object_store`'s local store reports them.
    #[derive(Debug, thiserror::Error)]
    #[error("unable to copy data to file: {0}")]
    struct Wrapped(#[source] std::io::Error);

    fn backend(source: Box<dyn std::error::Error + Send + Sync>) -> S3Error {
        to_s3(ApiError::Backend(object_store::Error::Generic {
            store: "test",
            source,
        }))
    }

    #[test]
    fn each_tier_failure_is_a_503_throttling_only_when_the_tier_throttles() {
        let cases = [
            (TierError::SlowDown("busy".into()), S3ErrorCode::SlowDown),
            (
                TierError::Unavailable("connection refused".into()),
                S3ErrorCode::ServiceUnavailable,
            ),
            (
                TierError::Refused {
                    status: 403,
                    message: "AccessDenied".into(),
                },
                S3ErrorCode::ServiceUnavailable,
            ),
        ];
        for (tier, code) in cases {
            let e = to_s3(ApiError::Tier(tier.clone()));
            assert_eq!(e.code(), &code, "{tier:?}");
            assert_eq!(
                e.status_code(),
                Some(http::StatusCode::SERVICE_UNAVAILABLE),
                "{tier:?}"
            );
            let msg = e.message().unwrap_or_default();
            assert!(msg.contains("this node has no copy"), "{msg}");
        }
        let refused = to_s3(ApiError::Tier(TierError::Refused {
            status: 403,
            message: "AccessDenied".into(),
        }));
        assert!(
            refused
                .message()
                .is_some_and(|m| m.contains("(403)") && m.contains("AccessDenied")),
            "{refused:?}"
        );
    }

    #[test]
    fn a_local_quota_refusal_is_the_same_403_as_the_tenants_with_its_own_message() {
        let refused = || MetaError::QuotaExceeded {
            needed: 11,
            available: 10,
            quota: 10,
        };
        let shared = to_s3(ApiError::Meta(refused()));
        let local = to_s3(ApiError::LocalQuotaExceeded {
            refused: refused(),
            stalled: None,
        });
        for e in [&shared, &local] {
            assert_eq!(e.code(), &S3ErrorCode::Custom("QuotaExceeded".into()));
            assert_eq!(e.status_code(), Some(http::StatusCode::FORBIDDEN));
        }
        assert_eq!(shared.message(), Some(refused().to_string().as_str()));
        assert_eq!(
            local.message(),
            Some(
                "this node's local buffer for the tenant is full: the drain to the shared tier \
                 has not caught up; quota exceeded: 11 more bytes requested, 10 available of 10"
            )
        );
    }

    #[test]
    fn a_full_disk_is_reported_as_such_and_anything_else_as_unavailable() {
        let enospc = std::io::Error::from_raw_os_error(28);
        for full in [
            backend(Box::new(Wrapped(enospc))),
            backend(Box::new(std::io::Error::from(
                std::io::ErrorKind::QuotaExceeded,
            ))),
        ] {
            assert_eq!(full.code(), &S3ErrorCode::ServiceUnavailable);
            assert!(
                full.message().is_some_and(|m| m.contains("out of space")),
                "{full:?}"
            );
        }
        let other = backend(Box::new(Wrapped(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        ))));
        assert_eq!(
            other.status_code(),
            Some(http::StatusCode::SERVICE_UNAVAILABLE)
        );
        assert!(
            other.message().is_some_and(|m| !m.contains("space")),
            "{other:?}"
        );
    }
}
