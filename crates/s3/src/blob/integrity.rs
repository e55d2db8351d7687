//! Per-chunk checksums of blobs: computed on the way in, verified on the way out.
//!
//! A blob is cut into [`CHUNK`]-byte chunks (the last one shorter) and each chunk gets its
//! CRC-64/NVME as the body streams in ([`ChunkHasher`], fed while each piece is still in
//! the CPU's cache from the socket read). The values go into the object's record
//! ([`SegmentChecksums`]) and its recovery record. A read fetches whole chunks (a range is
//! widened to the chunks it touches) and checks every one before any of its bytes is handed
//! on ([`check`]); a mismatch is an [`Corrupt`] error, counted per tenant
//! (`sluice_integrity_errors_total`) and logged at error with the object and the segment.
//!
//! CRC-64/NVME because it is what S3 keeps by default (so one algorithm serves integrity
//! and the clients' default checksum), combinable (the whole blob's and a multipart object's
//! full-object checksum follow from the chunks' without re-reading), and computed with
//! carry-less multiplication by `crc_fast` at memory speed on x86-64 and aarch64.

use std::sync::Arc;

use sluice_meta::{ChunkAlgorithm, SegmentChecksums};
use sluice_store::Crc;

/// Bytes per checksummed chunk: a ranged read fetches at most one chunk more at each end
/// than it asked for, and a record holds one value per MiB of body (16 hex digits).
pub const CHUNK: u64 = 1024 * 1024;

/// Checksums of a body, chunk by chunk, as it streams past.
pub struct ChunkHasher {
    digest: crc_fast::Digest,
    /// Bytes of the current chunk hashed so far.
    filled: u64,
    values: Vec<u64>,
}

impl Default for ChunkHasher {
    fn default() -> Self {
        Self {
            digest: crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc64Nvme),
            filled: 0,
            values: Vec::new(),
        }
    }
}

impl ChunkHasher {
    pub fn update(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let room = usize::try_from(CHUNK - self.filled).unwrap_or(usize::MAX);
            let (now, rest) = data.split_at(room.min(data.len()));
            self.digest.update(now);
            self.filled += now.len() as u64;
            data = rest;
            if self.filled == CHUNK {
                self.values.push(self.digest.finalize_reset());
                self.filled = 0;
            }
        }
    }

    /// The checksums of everything that passed.
    pub fn finish(mut self) -> SegmentChecksums {
        if self.filled > 0 {
            self.values.push(self.digest.finalize());
        }
        SegmentChecksums {
            algorithm: ChunkAlgorithm::Crc64nvme,
            chunk_size: CHUNK,
            values: self.values,
            client: None,
        }
    }
}

/// The CRC-64/NVME of a whole blob of `size` bytes, combined from its chunks' checksums.
pub fn whole(sums: &SegmentChecksums, size: u64) -> Crc {
    let mut at = 0;
    sums.values.iter().fold(Crc::default(), |acc, &crc| {
        let len = sums.chunk_size.min(size - at.min(size));
        at += len;
        acc.then(Crc { crc, len })
    })
}

/// Which object a read is of, for the error log when its bytes fail their checksum.
#[derive(Debug, Clone, Default)]
pub struct ReadLabel {
    pub bucket: String,
    pub key: String,
}

/// Stored bytes that do not match their checksum.
#[derive(Debug, thiserror::Error)]
#[error(
    "stored data failed its checksum: blob {blob} (segment {segment}), chunk {chunk}: \
     CRC-64/NVME {actual:016x}, recorded {expected:016x}"
)]
pub struct Corrupt {
    pub blob: String,
    pub segment: usize,
    pub chunk: u64,
    pub expected: u64,
    pub actual: u64,
}

/// What a grain of a read is checked against: its segment's checksums.
#[derive(Clone)]
pub struct Verify {
    pub sums: Arc<SegmentChecksums>,
    pub segment: usize,
    pub blob: Arc<str>,
}

impl Verify {
    /// Checks `bytes`, which start at the chunk-aligned `offset` of the blob and end at a
    /// chunk boundary or the blob's end.
    pub fn check(&self, offset: u64, bytes: &[u8]) -> Result<(), Corrupt> {
        let chunk_size = self.sums.chunk_size.max(1);
        let first = offset / chunk_size;
        let pieces = bytes.chunks(usize::try_from(chunk_size).unwrap_or(usize::MAX));
        for (i, piece) in (first..).zip(pieces) {
            let actual = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Nvme, piece);
            let expected = usize::try_from(i)
                .ok()
                .and_then(|i| self.sums.values.get(i).copied());
            if expected != Some(actual) {
                return Err(Corrupt {
                    blob: self.blob.to_string(),
                    segment: self.segment,
                    chunk: i,
                    expected: expected.unwrap_or(0),
                    actual,
                });
            }
        }
        Ok(())
    }
}

/// The name a failure of an inline body gives in place of a blob (it has none: its bytes
/// are in the catalog, with its record).
pub const INLINE: &str = "(inline body)";

/// The checksums of a whole body held in memory (an inline object's, taken as it arrived;
/// [`ChunkHasher`] over the one piece).
pub fn of_body(body: &[u8]) -> SegmentChecksums {
    let mut h = ChunkHasher::default();
    h.update(body);
    h.finish()
}

/// Checks an inline object's body against the checksums its record keeps. `None`: a record
/// written before inline checksums existed, whose body cannot be verified (the caller counts
/// it unverified). Checksums that do not describe a body of this length fail like a wrong
/// CRC, never half-verified.
pub fn check_inline(sums: Option<&SegmentChecksums>, body: &[u8]) -> Option<Result<(), Corrupt>> {
    let sums = sums?;
    let verify = Verify {
        sums: Arc::new(sums.clone()),
        segment: 0,
        blob: Arc::from(INLINE),
    };
    if !sums.fits(body.len() as u64) {
        return Some(Err(Corrupt {
            blob: INLINE.to_owned(),
            segment: 0,
            chunk: sums.values.len() as u64,
            expected: 0,
            actual: 0,
        }));
    }
    Some(verify.check(0, body))
}

/// Counts and logs a checksum failure of `tenant`'s object, and turns it into the read's
/// error (which fails the request: a 5xx before the status line, a broken connection after).
pub fn report(
    metrics: &sluice_metrics::TenantMetrics,
    tenant: &str,
    label: &ReadLabel,
    corrupt: Corrupt,
) -> object_store::Error {
    metrics
        .integrity_errors
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tracing::error!(
        tenant,
        bucket = label.bucket,
        key = label.key,
        blob = corrupt.blob,
        segment = corrupt.segment,
        chunk = corrupt.chunk,
        expected = format_args!("{:016x}", corrupt.expected),
        actual = format_args!("{:016x}", corrupt.actual),
        "integrity: stored bytes failed their checksum; the read is refused"
    );
    object_store::Error::Generic {
        store: "sluice",
        source: Box::new(corrupt),
    }
}

/// Whether a backend error is a checksum failure (see [`report`]).
pub fn is_corrupt(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::Generic { source, .. } if source.is::<Corrupt>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[test]
    fn chunks_are_the_same_however_the_body_is_cut() {
        let body = pattern(2 * CHUNK as usize + 12_345);
        let mut whole_body = ChunkHasher::default();
        whole_body.update(&body);
        let mut pieces = ChunkHasher::default();
        for piece in body.chunks(7_777) {
            pieces.update(piece);
        }
        let (a, b) = (whole_body.finish(), pieces.finish());
        assert_eq!(a, b);
        assert_eq!(a.values.len(), 3);
        assert!(a.fits(body.len() as u64));
        let c = usize::try_from(CHUNK).expect("chunk");
        assert_eq!(
            a.values[2],
            crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Nvme, &body[2 * c..])
        );
        assert_eq!(whole(&a, body.len() as u64), Crc::of(&body));
    }

    #[test]
    fn a_flipped_byte_is_found_in_its_chunk_and_nowhere_else() {
        let mut body = pattern(3 * CHUNK as usize);
        let mut h = ChunkHasher::default();
        h.update(&body);
        let verify = Verify {
            sums: Arc::new(h.finish()),
            segment: 2,
            blob: Arc::from("b/00/x"),
        };
        verify.check(0, &body).expect("intact");
        let c = usize::try_from(CHUNK).expect("chunk");
        body[c + 10] ^= 0x20;
        let e = verify.check(0, &body).expect_err("corrupt");
        assert_eq!((e.chunk, e.segment), (1, 2));
        // A read of the other chunks alone still passes.
        verify.check(0, &body[..c]).expect("chunk 0");
        verify.check(2 * CHUNK, &body[2 * c..]).expect("chunk 2");
        // Bytes beyond the recorded chunks are refused, not waved through.
        assert!(verify.check(3 * CHUNK, b"more").is_err());
        assert!(is_corrupt(&report(
            &sluice_metrics::TenantMetrics::default(),
            "t",
            &ReadLabel::default(),
            e
        )));
    }

    #[test]
    fn an_inline_body_is_checked_whole_and_an_old_one_is_unverifiable() {
        let body = pattern(16 * 1024);
        let sums = of_body(&body);
        assert_eq!(sums.values.len(), 1);
        assert!(matches!(check_inline(Some(&sums), &body), Some(Ok(()))));
        let mut bad = body.clone();
        bad[9_000] ^= 1;
        let e = check_inline(Some(&sums), &bad)
            .expect("checked")
            .expect_err("a flipped byte");
        assert_eq!((e.blob.as_str(), e.chunk), (INLINE, 0));
        // A body of another length than the checksums describe is refused, not waved through.
        assert!(matches!(
            check_inline(Some(&sums), &body[..10]),
            Some(Err(_))
        ));
        assert!(matches!(
            check_inline(Some(&of_body(b"")), b""),
            Some(Ok(()))
        ));
        assert!(matches!(
            check_inline(Some(&of_body(b"")), b"x"),
            Some(Err(_))
        ));
        assert!(check_inline(None, &body).is_none());
    }

    #[test]
    fn an_empty_body_has_no_chunks() {
        let sums = ChunkHasher::default().finish();
        assert!(sums.values.is_empty());
        assert!(sums.fits(0));
        assert_eq!(whole(&sums, 0), Crc::default());
    }
}
