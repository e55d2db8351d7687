//! Additional checksums (`x-amz-checksum-*`): the integrity check a client attaches to a
//! request body, as a header or, on an aws-chunked body, as a trailer.
//!
//! Current SDKs send one with every PutObject and UploadPart (CRC32 by default in botocore
//! and the AWS CLI since 2025, CRC64/NVME in others) and rely on the server to refuse a body
//! that does not match. The body is hashed on its way to the backend ([`Hashing`]); once it
//! has been read to its end (when a trailer has arrived too) the digest is compared
//! ([`Expected::verify`]): a mismatch refuses the write with `BadDigest` before anything is
//! visible, and a match is echoed in the response, as S3 does.
//!
//! The verified checksum is stored with the blob it covers (`SegmentChecksums::client`) and a
//! GET or HEAD with `x-amz-checksum-mode: ENABLED` returns the object's ([`of_object`]): the
//! client's algorithm for a PutObject, S3's composite (`-N`) of the parts' for a multipart
//! upload in CRC32, CRC32C, SHA-1 or SHA-256, and otherwise (CRC-64/NVME multipart, no
//! checksum sent) the full-object CRC-64/NVME combined from the chunk checksums every blob
//! and inline body gets at write (`blob::integrity`). An inline object keeps its client's
//! checksum in its record's `inline_checksums`; one written before they existed answers the
//! CRC-64/NVME of its bytes. Clients that validate downloads (boto3, the AWS CLI) then check
//! what they read. A PutObject without a client checksum answers the body's CRC-64/NVME
//! ([`crc64nvme_of`]), as S3 does since 2024.

use std::pin::Pin;
use std::task::{Context, Poll};

use base64::Engine;
use bytes::Bytes;
use futures::Stream;
use http::HeaderMap;
use s3s::TrailingHeaders;
use s3s::checksum::ChecksumHasher;
use s3s::crypto::{Checksum as _, Crc32, Crc32c, Crc64Nvme, Sha1, Sha256};

use crate::error::{ApiError, ApiResult};

/// A checksum algorithm S3 accepts for request bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Crc32,
    Crc32c,
    Crc64Nvme,
    Sha1,
    Sha256,
}

impl Algorithm {
    pub const ALL: [Self; 5] = [
        Self::Crc32,
        Self::Crc32c,
        Self::Crc64Nvme,
        Self::Sha1,
        Self::Sha256,
    ];

    /// The header (or trailer) carrying the base64 digest.
    pub fn header(self) -> &'static str {
        match self {
            Self::Crc32 => "x-amz-checksum-crc32",
            Self::Crc32c => "x-amz-checksum-crc32c",
            Self::Crc64Nvme => "x-amz-checksum-crc64nvme",
            Self::Sha1 => "x-amz-checksum-sha1",
            Self::Sha256 => "x-amz-checksum-sha256",
        }
    }

    /// The name S3 uses in messages (`CRC32`, `SHA256`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Crc32 => "CRC32",
            Self::Crc32c => "CRC32C",
            Self::Crc64Nvme => "CRC64NVME",
            Self::Sha1 => "SHA1",
            Self::Sha256 => "SHA256",
        }
    }

    fn digest_len(self) -> usize {
        match self {
            Self::Crc32 | Self::Crc32c => 4,
            Self::Crc64Nvme => 8,
            Self::Sha1 => 20,
            Self::Sha256 => 32,
        }
    }

    fn from_header(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|a| a.header().eq_ignore_ascii_case(name.trim()))
    }

    fn hasher(self) -> ChecksumHasher {
        let mut h = ChecksumHasher::default();
        match self {
            Self::Crc32 => h.crc32 = Some(Crc32::new()),
            Self::Crc32c => h.crc32c = Some(Crc32c::new()),
            Self::Crc64Nvme => h.crc64nvme = Some(Crc64Nvme::new()),
            Self::Sha1 => h.sha1 = Some(Sha1::new()),
            Self::Sha256 => h.sha256 = Some(Sha256::new()),
        }
        h
    }
}

/// The base64 digest of one algorithm, as computed over a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digest {
    pub algorithm: Algorithm,
    pub value: String,
}

impl Digest {
    /// How the digest is kept with the blob it covers.
    pub fn stored(&self) -> sluice_meta::ClientChecksum {
        sluice_meta::ClientChecksum {
            algorithm: self.algorithm.name().to_owned(),
            value: self.value.clone(),
        }
    }

    /// The digest of `data` (tests, and callers that hold a whole body).
    pub fn of(algorithm: Algorithm, data: &[u8]) -> Self {
        let mut h = algorithm.hasher();
        h.update(data);
        finish(algorithm, h)
    }
}

fn finish(algorithm: Algorithm, h: ChecksumHasher) -> Digest {
    let c = h.finalize();
    let value = match algorithm {
        Algorithm::Crc32 => c.checksum_crc32,
        Algorithm::Crc32c => c.checksum_crc32c,
        Algorithm::Crc64Nvme => c.checksum_crc64nvme,
        Algorithm::Sha1 => c.checksum_sha1,
        Algorithm::Sha256 => c.checksum_sha256,
    };
    Digest {
        algorithm,
        value: value.unwrap_or_default(),
    }
}

/// What a request declared about its body's checksum.
#[derive(Debug, Default)]
pub enum Expected {
    /// No checksum: only Content-MD5 (if any) is checked.
    #[default]
    None,
    /// `x-amz-checksum-<algorithm>: <base64>` in the request headers.
    Header(Digest),
    /// `x-amz-trailer: x-amz-checksum-<algorithm>`: the value follows the aws-chunked body.
    Trailer(Algorithm, TrailingHeaders),
}

impl Expected {
    /// Reads the declaration from a request's headers; `trailers` is the handle s3s gives
    /// for aws-chunked bodies with trailers.
    pub fn from_request(
        headers: &HeaderMap,
        trailers: Option<&TrailingHeaders>,
    ) -> ApiResult<Self> {
        let mut declared = Algorithm::ALL
            .into_iter()
            .filter_map(|a| headers.get(a.header()).map(|v| (a, v)));
        let header = declared.next();
        if declared.next().is_some() {
            return Err(ApiError::InvalidRequest(
                "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed."
                    .into(),
            ));
        }
        if let Some((algorithm, value)) = header {
            let value = value.to_str().ok().filter(|v| valid(algorithm, v));
            let Some(value) = value else {
                return Err(invalid_value(algorithm));
            };
            return Ok(Self::Header(Digest {
                algorithm,
                value: value.to_owned(),
            }));
        }
        let trailer = headers
            .get("x-amz-trailer")
            .and_then(|v| v.to_str().ok())
            .and_then(Algorithm::from_header);
        match (trailer, trailers) {
            (None, _) => Ok(Self::None),
            (Some(a), Some(t)) => Ok(Self::Trailer(a, t.clone())),
            (Some(a), None) => Err(ApiError::InvalidRequest(format!(
                "{} is declared as a trailer but the body is not aws-chunked",
                a.header()
            ))),
        }
    }

    /// The algorithm to hash the body with, if any.
    pub fn algorithm(&self) -> Option<Algorithm> {
        match self {
            Self::None => None,
            Self::Header(d) => Some(d.algorithm),
            Self::Trailer(a, _) => Some(*a),
        }
    }

    /// Compares the declared digest with the one computed over the whole body (call after
    /// the body has been read to its end, so that a trailer has arrived).
    pub fn verify(&self, computed: Option<Digest>) -> ApiResult<Option<Digest>> {
        let (algorithm, declared) = match self {
            Self::None => return Ok(None),
            Self::Header(d) => (d.algorithm, Some(d.value.clone())),
            Self::Trailer(a, t) => (
                *a,
                t.read(|h| h.get(a.header()).cloned())
                    .flatten()
                    .and_then(|v| v.to_str().ok().map(str::to_owned)),
            ),
        };
        let Some(declared) = declared else {
            return Err(ApiError::InvalidRequest(format!(
                "the {} trailer declared in x-amz-trailer was not sent",
                algorithm.header()
            )));
        };
        if !valid(algorithm, &declared) {
            return Err(invalid_value(algorithm));
        }
        match computed {
            Some(c) if c.algorithm == algorithm && c.value == declared.trim() => Ok(Some(c)),
            _ => Err(ApiError::ChecksumMismatch(algorithm.name())),
        }
    }
}

fn valid(algorithm: Algorithm, value: &str) -> bool {
    base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .is_ok_and(|d| d.len() == algorithm.digest_len())
}

fn invalid_value(algorithm: Algorithm) -> ApiError {
    ApiError::InvalidRequest(format!(
        "Value for {} header is invalid.",
        algorithm.header()
    ))
}

/// A body stream that hashes what passes through it with one algorithm (or none).
pub struct Hashing<S> {
    inner: S,
    hasher: Option<(Algorithm, ChecksumHasher)>,
}

impl<S> Hashing<S> {
    pub fn new(inner: S, algorithm: Option<Algorithm>) -> Self {
        Self {
            inner,
            hasher: algorithm.map(|a| (a, a.hasher())),
        }
    }

    /// The digest of everything that passed.
    pub fn finish(self) -> Option<Digest> {
        self.hasher.map(|(a, h)| finish(a, h))
    }
}

impl<S, E> Stream for Hashing<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    type Item = Result<Bytes, E>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let next = Pin::new(&mut this.inner).poll_next(cx);
        if let Poll::Ready(Some(Ok(chunk))) = &next
            && let Some((_, h)) = this.hasher.as_mut()
        {
            h.update(chunk);
        }
        next
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

/// How a stored full-object checksum was formed (S3's `x-amz-checksum-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Of the whole body.
    FullObject,
    /// Of a multipart object's parts' checksums laid end to end, `-N`.
    Composite,
}

impl Kind {
    pub fn dto(self) -> s3s::dto::ChecksumType {
        s3s::dto::ChecksumType::from_static(match self {
            Self::FullObject => s3s::dto::ChecksumType::FULL_OBJECT,
            Self::Composite => s3s::dto::ChecksumType::COMPOSITE,
        })
    }
}

/// The checksum of a stored object that a GET or HEAD with `x-amz-checksum-mode: ENABLED`
/// returns: in the algorithm its client sent on upload (a PutObject's, or a multipart
/// object's composite of its parts' as S3 forms it — `-N` for CRC32, CRC32C, SHA-1 and
/// SHA-256, full-object for CRC-64/NVME), else the CRC-64/NVME of the whole body, combined
/// from the segments' chunk checksums without reading the body. `inline` is the body of an
/// object kept in the catalog, already verified: its client's checksum if its record keeps
/// one, else its CRC-64/NVME taken from the bytes. `None` for a blob object written before
/// checksums were stored.
pub fn of_object(rec: &sluice_meta::ObjectRecord, inline: Option<&[u8]>) -> Option<(Digest, Kind)> {
    if let Some(body) = inline {
        let client = rec
            .inline_checksums
            .as_deref()
            .and_then(client_digest)
            .unwrap_or_else(|| Digest::of(Algorithm::Crc64Nvme, body));
        return Some((client, Kind::FullObject));
    }
    let sums: Vec<&sluice_meta::SegmentChecksums> = rec
        .segments
        .iter()
        .map(|s| s.checksums.as_ref())
        .collect::<Option<_>>()?;
    let clients: Option<Vec<Digest>> = sums.iter().copied().map(client_digest).collect();
    let one_algorithm = clients.filter(|c| {
        c.first()
            .is_some_and(|f| c.iter().all(|d| d.algorithm == f.algorithm))
    });
    let crc64 = |values: &mut dyn Iterator<Item = sluice_store::Crc>| {
        let whole = values.fold(sluice_store::Crc::default(), sluice_store::Crc::then);
        Digest {
            algorithm: Algorithm::Crc64Nvme,
            value: base64::engine::general_purpose::STANDARD.encode(whole.crc.to_be_bytes()),
        }
    };
    match one_algorithm {
        Some(c) if rec.parts == 0 && c.len() == 1 => {
            c.into_iter().next().map(|d| (d, Kind::FullObject))
        }
        Some(c) if rec.parts > 0 && c[0].algorithm != Algorithm::Crc64Nvme => {
            let algorithm = c[0].algorithm;
            let mut h = algorithm.hasher();
            for d in &c {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(&d.value)
                    .ok()?;
                h.update(&raw);
            }
            let mut whole = finish(algorithm, h);
            whole.value = format!("{}-{}", whole.value, c.len());
            Some((whole, Kind::Composite))
        }
        _ => {
            let mut values = rec
                .segments
                .iter()
                .zip(&sums)
                .map(|(seg, s)| crate::blob::integrity::whole(s, seg.size));
            Some((crc64(&mut values), Kind::FullObject))
        }
    }
}

/// The client's checksum kept with a blob or an inline body, if it sent one this code knows.
fn client_digest(sums: &sluice_meta::SegmentChecksums) -> Option<Digest> {
    let c = sums.client.as_ref()?;
    let algorithm = Algorithm::ALL
        .into_iter()
        .find(|a| a.name() == c.algorithm)?;
    Some(Digest {
        algorithm,
        value: c.value.clone(),
    })
}

/// The CRC-64/NVME of a body just written, combined from the chunk checksums taken on the
/// way in (what a PutObject without a client checksum answers, as S3 does).
pub fn crc64nvme_of(written: &crate::blob::Written) -> Option<Digest> {
    let sums = written.checksums.as_ref()?;
    let whole = crate::blob::integrity::whole(sums, written.size);
    Some(Digest {
        algorithm: Algorithm::Crc64Nvme,
        value: base64::engine::general_purpose::STANDARD.encode(whole.crc.to_be_bytes()),
    })
}

/// The response field for `algorithm`: the verified digest when it is of that algorithm.
pub fn value(digest: Option<&Digest>, algorithm: Algorithm) -> Option<String> {
    digest
        .filter(|d| d.algorithm == algorithm)
        .map(|d| d.value.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().expect("header value"));
        }
        h
    }

    #[test]
    fn digests_match_the_published_check_values() {
        // "123456789" is the standard check input for CRCs.
        let crc32 = Digest::of(Algorithm::Crc32, b"123456789");
        assert_eq!(crc32.value, "y/Q5Jg=="); // 0xCBF43926
        let crc32c = Digest::of(Algorithm::Crc32c, b"123456789");
        assert_eq!(crc32c.value, "4waSgw=="); // 0xE3069283
        let sha256 = Digest::of(Algorithm::Sha256, b"");
        assert_eq!(sha256.value, "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=");
    }

    #[tokio::test]
    async fn a_matching_header_checksum_is_echoed_and_a_wrong_one_refused() {
        let body = b"hello world".to_vec();
        let good = Digest::of(Algorithm::Crc32, &body).value;
        let expected = Expected::from_request(&headers(&[("x-amz-checksum-crc32", &good)]), None)
            .expect("declared");
        let chunks = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(body.clone()))]);
        let mut hashing = Hashing::new(chunks, expected.algorithm());
        while hashing.next().await.is_some() {}
        let echoed = expected.verify(hashing.finish()).expect("matches");
        assert_eq!(echoed.map(|d| d.value), Some(good));

        let wrong = Expected::from_request(&headers(&[("x-amz-checksum-crc32", "AAAAAA==")]), None)
            .expect("declared");
        let computed = Some(Digest::of(Algorithm::Crc32, &body));
        assert!(matches!(
            wrong.verify(computed),
            Err(ApiError::ChecksumMismatch("CRC32"))
        ));
    }

    #[test]
    fn malformed_and_multiple_declarations_are_refused() {
        // Wrong length for the algorithm: 3 bytes for a CRC32.
        let short = Expected::from_request(&headers(&[("x-amz-checksum-crc32", "AAAA")]), None);
        assert!(matches!(short, Err(ApiError::InvalidRequest(_))));
        let two = Expected::from_request(
            &headers(&[
                ("x-amz-checksum-crc32", "AAAAAA=="),
                ("x-amz-checksum-sha1", "AAAAAAAAAAAAAAAAAAAAAAAAAAA="),
            ]),
            None,
        );
        assert!(matches!(two, Err(ApiError::InvalidRequest(_))));
        let none = Expected::from_request(&headers(&[]), None).expect("nothing declared");
        assert!(matches!(none, Expected::None));
        assert!(none.verify(None).expect("nothing to check").is_none());
    }
}
