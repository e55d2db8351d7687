//! Conditional requests, as S3 documents them after RFC 9110 §13.2.2.
//!
//! A read (GET, HEAD) is evaluated against the object it would return — from this store or
//! from the tier behind it: `If-Match` first (412 if it fails), and only without it
//! `If-Unmodified-Since`; then `If-None-Match` (304 if it fails), and only without it
//! `If-Modified-Since`. So If-Match beats If-Unmodified-Since and If-None-Match beats
//! If-Modified-Since, as S3 states. Dates have a second's resolution in HTTP, so the object's
//! modification time is compared truncated to the second.
//!
//! A write (PutObject, CompleteMultipartUpload, the CopyObject destination) takes
//! `If-None-Match: *` (create-only) or `If-Match: "<etag>"` (compare-and-swap), turned into
//! a [`Precondition`] that the catalog decides in the transaction committing the new object,
//! never here: a check before the commit would race.

use s3s::dto::{ETag, ETagCondition, Timestamp};
use sluice_meta::{ObjectRecord, Precondition};

use crate::error::{ApiError, ApiResult};
use crate::front::timestamp;

/// The conditions of a GET or HEAD, named as their headers are.
#[derive(Debug, Default)]
#[allow(clippy::struct_field_names)]
pub(in crate::front) struct ReadConditions {
    pub if_match: Option<ETagCondition>,
    pub if_none_match: Option<ETagCondition>,
    pub if_modified_since: Option<Timestamp>,
    pub if_unmodified_since: Option<Timestamp>,
}

impl ReadConditions {
    /// `Ok` when `rec` may be returned; else `PreconditionFailed` (412) or `NotModified` (304).
    pub(in crate::front) fn check(&self, rec: &ObjectRecord) -> ApiResult<()> {
        let modified = timestamp(rec.last_modified_ms - rec.last_modified_ms.rem_euclid(1000));
        let fails = match &self.if_match {
            Some(cond) => !strong_match(cond, &rec.etag),
            None => self
                .if_unmodified_since
                .as_ref()
                .is_some_and(|since| modified > *since),
        };
        if fails {
            return Err(ApiError::PreconditionFailed);
        }
        let unchanged = match &self.if_none_match {
            Some(cond) => weak_match(cond, &rec.etag),
            None => self
                .if_modified_since
                .as_ref()
                .is_some_and(|since| modified <= *since),
        };
        if unchanged {
            return Err(ApiError::NotModified {
                etag: rec.etag.clone(),
                last_modified: timestamp(rec.last_modified_ms),
            });
        }
        Ok(())
    }
}

/// `If-Match` compares strongly: a weak tag never matches.
fn strong_match(cond: &ETagCondition, etag: &str) -> bool {
    match cond {
        ETagCondition::Any => true,
        ETagCondition::ETag(ETag::Strong(v)) => v == etag,
        ETagCondition::ETag(ETag::Weak(_)) => false,
    }
}

/// `If-None-Match` compares weakly.
fn weak_match(cond: &ETagCondition, etag: &str) -> bool {
    match cond {
        ETagCondition::Any => true,
        ETagCondition::ETag(tag) => tag.value() == etag,
    }
}

/// The precondition of a write from its `If-Match` and `If-None-Match`, as S3 takes them:
/// `If-None-Match` only as `*`, `If-Match` as one ETag, `*` meaning any existing object; not both.
pub(in crate::front) fn write_precondition(
    if_match: Option<ETagCondition>,
    if_none_match: Option<ETagCondition>,
) -> ApiResult<Precondition> {
    match (if_match, if_none_match) {
        (None, None) => Ok(Precondition::None),
        (None, Some(ETagCondition::Any)) => Ok(Precondition::IfAbsent),
        (None, Some(ETagCondition::ETag(_))) => Err(ApiError::NotImplemented(
            "If-None-Match with an ETag on a write (S3 takes only `*`)",
        )),
        (Some(ETagCondition::Any), None) => Ok(Precondition::IfPresent),
        (Some(ETagCondition::ETag(tag)), None) => Ok(Precondition::IfEtag(tag.value().to_owned())),
        (Some(_), Some(_)) => Err(ApiError::NotImplemented(
            "If-Match together with If-None-Match on a write",
        )),
    }
}

/// The write precondition carried by a request's headers, for operations whose s3s input
/// has no field for them (the CopyObject destination's `If-Match` and `If-None-Match`).
pub(in crate::front) fn write_precondition_of(
    headers: &http::HeaderMap,
) -> ApiResult<Precondition> {
    let parse = |name: http::header::HeaderName| {
        headers
            .get(&name)
            .map(|v| {
                ETagCondition::parse_http_header(v.as_bytes()).map_err(|_| {
                    ApiError::InvalidArgument(format!("the {name} header is not an entity tag"))
                })
            })
            .transpose()
    };
    write_precondition(
        parse(http::header::IF_MATCH)?,
        parse(http::header::IF_NONE_MATCH)?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec() -> ObjectRecord {
        ObjectRecord {
            etag: "abc".into(),
            last_modified_ms: 10_500,
            ..ObjectRecord::default()
        }
    }

    fn at(secs: u64) -> Timestamp {
        Timestamp::from(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
    }

    fn tag(v: &str) -> Option<ETagCondition> {
        Some(ETagCondition::ETag(ETag::Strong(v.into())))
    }

    fn outcome(c: &ReadConditions) -> &'static str {
        match c.check(&rec()) {
            Ok(()) => "200",
            Err(ApiError::PreconditionFailed) => "412",
            Err(ApiError::NotModified { .. }) => "304",
            Err(_) => "other",
        }
    }

    #[test]
    fn read_conditions_follow_s3s_precedence() {
        let c = |m: ReadConditions| outcome(&m);
        assert_eq!(c(ReadConditions::default()), "200");
        assert_eq!(
            c(ReadConditions {
                if_match: tag("abc"),
                ..Default::default()
            }),
            "200"
        );
        assert_eq!(
            c(ReadConditions {
                if_match: tag("old"),
                ..Default::default()
            }),
            "412"
        );
        let weak = Some(ETagCondition::ETag(ETag::Weak("abc".into())));
        assert_eq!(
            c(ReadConditions {
                if_match: weak.clone(),
                ..Default::default()
            }),
            "412"
        );
        assert_eq!(
            c(ReadConditions {
                if_none_match: weak,
                ..Default::default()
            }),
            "304"
        );
        assert_eq!(
            c(ReadConditions {
                if_none_match: tag("abc"),
                ..Default::default()
            }),
            "304"
        );
        assert_eq!(
            c(ReadConditions {
                if_none_match: tag("old"),
                ..Default::default()
            }),
            "200"
        );
        // Modified at 10.5 s: compared as 10 s.
        let ims = |s| ReadConditions {
            if_modified_since: Some(at(s)),
            ..Default::default()
        };
        assert_eq!((c(ims(9)), c(ims(10)), c(ims(11))), ("200", "304", "304"));
        let ius = |s| ReadConditions {
            if_unmodified_since: Some(at(s)),
            ..Default::default()
        };
        assert_eq!((c(ius(9)), c(ius(10))), ("412", "200"));
        // If-Match true beats If-Unmodified-Since false; If-None-Match false beats
        // If-Modified-Since true.
        let both = ReadConditions {
            if_match: tag("abc"),
            if_unmodified_since: Some(at(1)),
            if_none_match: tag("old"),
            if_modified_since: Some(at(100)),
        };
        assert_eq!(c(both), "200");
        // A failed If-Match is 412 even when If-None-Match would say 304.
        let fail = ReadConditions {
            if_match: tag("old"),
            if_none_match: tag("abc"),
            ..Default::default()
        };
        assert_eq!(c(fail), "412");
    }

    #[test]
    fn write_conditions_take_star_for_create_and_one_etag_for_swap() {
        assert_eq!(
            write_precondition(None, None).ok(),
            Some(Precondition::None)
        );
        assert_eq!(
            write_precondition(None, Some(ETagCondition::Any)).ok(),
            Some(Precondition::IfAbsent)
        );
        assert_eq!(
            write_precondition(tag("e"), None).ok(),
            Some(Precondition::IfEtag("e".into()))
        );
        assert!(write_precondition(None, tag("e")).is_err());
        assert!(write_precondition(tag("e"), Some(ETagCondition::Any)).is_err());
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::IF_NONE_MATCH,
            http::HeaderValue::from_static("*"),
        );
        assert_eq!(write_precondition_of(&h).ok(), Some(Precondition::IfAbsent));
        h.insert(
            http::header::IF_MATCH,
            http::HeaderValue::from_static("\"e\""),
        );
        assert!(write_precondition_of(&h).is_err());
    }
}
