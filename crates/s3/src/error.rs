//! Domain errors of the S3 front end and their one mapping to S3 codes and HTTP status.
//!
//! Quota exhaustion and throttling are distinct for clients: `QuotaExceeded` (403, not
//! retried: more space will not appear by waiting, as in Ceph RGW) versus `SlowDown` (503 with
//! `Retry-After`, which every S3 SDK backs off on). A backend out of space is 503 too, with its
//! own message: on the node agent the drain frees space. A client's mistake is logged at
//! debug; only failures of our own or of the backend are logged at error, once, where they are
//! mapped.

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
    #[error("access denied")]
    AccessDenied,
    #[error("{0}")]
    SlowDown(#[from] sluice_throttle::Throttled),
    #[error("internal error: {0}")]
    Internal(String),
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
                let mut err = with(C::Custom("QuotaExceeded".into()), msg);
                err.set_status_code(http::StatusCode::FORBIDDEN);
                err
            }
            MetaError::UnknownTenant => with(C::AccessDenied, "access denied"),
            MetaError::Storage(_) | MetaError::Corrupt(_) | MetaError::Inconsistent(_) => {
                internal(&msg)
            }
        },
        ApiError::Backend(b) => match b {
            object_store::Error::NotFound { .. } => {
                tracing::error!(error = %b, "object data missing from backend");
                with(C::InternalError, "object data is missing from the backend")
            }
            other if out_of_space(&other) => {
                tracing::error!(error = %other, "the storage is out of space");
                let mut err = with(
                    C::ServiceUnavailable,
                    "the storage is out of space; retry once space is freed",
                );
                err.set_status_code(http::StatusCode::SERVICE_UNAVAILABLE);
                err
            }
            other => {
                tracing::error!(error = %other, "backend request failed");
                let mut err = with(C::ServiceUnavailable, "the storage backend is unavailable");
                err.set_status_code(http::StatusCode::SERVICE_UNAVAILABLE);
                err
            }
        },
        ApiError::Name(n) => match n {
            NameError::Bucket => with(C::InvalidBucketName, msg),
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
        ApiError::Internal(_) => internal(&msg),
    }
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
    tracing::error!(error = msg, "internal error");
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
