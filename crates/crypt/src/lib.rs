//! Confidential object bodies: a segmented AEAD with authenticated ranged reads.
//!
//! Owns the byte format of an encrypted object (`docs/design/confidential-format.md` gives it
//! byte by byte) and nothing else: no I/O, no key fetching, no S3. The agent encrypts a
//! tenant's bodies with it before they touch the node's disk; the gateway and the tier only
//! ever see its output.
//!
//! An object is a fixed 80-byte header followed by segments. The header carries the version,
//! the plaintext segment size, the tenant key's id and a random per-object *data key* wrapped
//! (AES-256-GCM) by the tenant's key, with the header's own fields and the object's
//! [`Identity`] (tenant, bucket, key, generation, part) as associated data: a header copied to
//! another object, key or generation does not unwrap. Each segment holds `segment_size`
//! plaintext bytes (the last one fewer, or none for an empty object) sealed with AES-256-GCM
//! under the data key; its nonce is the part number and the segment index, and its associated
//! data is the identity, the index and a last-segment flag. So segments cannot be reordered
//! (the index), dropped from the end (the flag: the new last segment was sealed as not last),
//! cut (the tag) or moved to another object (the identity, and the data key itself).
//!
//! Every length maps both ways ([`Layout`]): plaintext length ⇄ ciphertext length, and a
//! plaintext range → the segments that hold it and their ciphertext byte range, so a ranged
//! read fetches the header and those segments only and authenticates what it returns.
//!
//! Nonces never repeat under one data key: the key is random per object (per part of a
//! multipart upload), and within it the nonce is (part, index), unique per segment.

use std::ops::Range;

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::hmac;

/// The first four bytes of every encrypted object.
pub const MAGIC: [u8; 4] = *b"SLCE";
/// The format version this build writes and reads.
pub const VERSION: u8 = 1;
/// Length of the header that opens every object.
pub const HEADER_LEN: usize = 80;
/// Length of the authentication tag that closes every segment.
pub const TAG_LEN: usize = 16;
/// Length of a tenant key and of a data key (AES-256).
pub const KEY_LEN: usize = 32;
/// Plaintext bytes per segment the agent writes: 64 KiB (0.024% overhead, and a ranged read
/// of a few bytes decrypts at most 128 KiB).
pub const DEFAULT_SEGMENT_SIZE: u32 = 64 * 1024;
/// Smallest segment size accepted (tests use small segments to cross many boundaries).
pub const MIN_SEGMENT_SIZE: u32 = 16;
/// Largest segment size accepted: 16 MiB.
pub const MAX_SEGMENT_SIZE: u32 = 16 << 20;

const KEY_ID_LEN: usize = 8;
const NONCE_LEN: usize = 12;
/// Header bytes the key wrap authenticates: magic, version, reserved, segment size, key id.
const HEADER_AAD_LEN: usize = 20;
const IDENTITY_LABEL: &[u8] = b"sluice-crypt v1\0";

/// Why a body could not be encrypted or did not decrypt. Every variant is a refusal: no
/// function here ever returns bytes that did not authenticate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("a tenant key is {KEY_LEN} bytes, this one is {0}")]
    KeyLength(usize),
    #[error("segment size {0} is outside {MIN_SEGMENT_SIZE}..={MAX_SEGMENT_SIZE} bytes")]
    SegmentSize(u32),
    #[error("not a sluice confidential object (no valid header)")]
    NotEncrypted,
    #[error("confidential format version {0} is not supported (this build reads version 1)")]
    Version(u8),
    #[error(
        "the object's data key is wrapped under another tenant key (key id {found}, the tenant's is {expected})"
    )]
    WrongKey { found: String, expected: String },
    #[error(
        "the object's header does not authenticate for this object: tampered with, or copied from another object, key or generation"
    )]
    Header,
    #[error(
        "segment {index} does not authenticate: the ciphertext was tampered with, reordered or truncated"
    )]
    Segment { index: u64 },
    #[error(
        "{len} bytes is not the length of an object of {segment_size}-byte segments: truncated or extended"
    )]
    Length { len: u64, segment_size: u32 },
    #[error("range {start}..{end} is not inside an object of {len} bytes")]
    Range { start: u64, end: u64, len: u64 },
    #[error(
        "segment {index} given {len} plaintext bytes into {out} bytes: every segment but the last holds exactly {segment_size}, and its output is {TAG_LEN} bytes longer"
    )]
    Misfit {
        index: u64,
        len: usize,
        out: usize,
        segment_size: usize,
    },
}

/// A tenant's key encryption key. Only its id is ever printed.
pub struct TenantKey {
    wrap: LessSafeKey,
    id: [u8; KEY_ID_LEN],
    /// The rollback manifests' MAC key (see [`TenantKey::manifest_mac`]).
    manifest: hmac::Key,
}

impl std::fmt::Debug for TenantKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TenantKey({})", hex(&self.id))
    }
}

fn derive(key: &[u8], label: &str) -> hmac::Tag {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), label.as_bytes())
}

const MANIFEST_INFO: &[u8] = b"sluice manifest mac v1";

/// HKDF-SHA256 (RFC 5869) of `key` with an empty salt and `info`, 32 bytes.
fn hkdf(key: &[u8], info: &'static [u8]) -> [u8; KEY_LEN] {
    struct Len;
    impl aws_lc_rs::hkdf::KeyType for Len {
        fn len(&self) -> usize {
            KEY_LEN
        }
    }
    let mut out = [0; KEY_LEN];
    aws_lc_rs::hkdf::Salt::new(aws_lc_rs::hkdf::HKDF_SHA256, &[])
        .extract(key)
        .expand(&[info], Len)
        .and_then(|okm| okm.fill(&mut out))
        .unwrap_or_else(|_| unreachable!("32 bytes is a valid HKDF-SHA256 length"));
    out
}

fn aes(key: &[u8]) -> LessSafeKey {
    LessSafeKey::new(
        UnboundKey::new(&AES_256_GCM, key).unwrap_or_else(|_| unreachable!("a 32-byte key")),
    )
}

fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

fn random<const N: usize>() -> [u8; N] {
    let mut buf = [0; N];
    aws_lc_rs::rand::fill(&mut buf).unwrap_or_else(|_| unreachable!("the system's RNG"));
    buf
}

impl TenantKey {
    /// The key from its 32 raw bytes. The wrapping key and the id are derived from it with
    /// HMAC-SHA256 under distinct labels, so the id reveals nothing of the wrapping key.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, Error> {
        if bytes.len() != KEY_LEN {
            return Err(Error::KeyLength(bytes.len()));
        }
        let wrap = aes(&derive(bytes, "sluice-crypt wrap v1").as_ref()[..KEY_LEN]);
        let mut id = [0; KEY_ID_LEN];
        id.copy_from_slice(&derive(bytes, "sluice-crypt key id v1").as_ref()[..KEY_ID_LEN]);
        let manifest = hmac::Key::new(hmac::HMAC_SHA256, &hkdf(bytes, MANIFEST_INFO));
        Ok(Self { wrap, id, manifest })
    }

    /// HMAC-SHA256 of `message` under the key's manifest MAC key: HKDF-SHA256 of the tenant
    /// key (no salt, info `sluice manifest mac v1`), so it is independent of the wrapping key
    /// and the id. The rollback manifests of `sluice_s3::confidential::manifest` are signed
    /// with it (`docs/design/confidential-format.md`).
    pub fn manifest_mac(&self, message: &[u8]) -> [u8; 32] {
        let mut out = [0; 32];
        out.copy_from_slice(hmac::sign(&self.manifest, message).as_ref());
        out
    }

    /// Whether `tag` is [`TenantKey::manifest_mac`] of `message` (compared in constant time).
    pub fn verify_manifest_mac(&self, message: &[u8], tag: &[u8]) -> bool {
        hmac::verify(&self.manifest, message, tag).is_ok()
    }

    /// The key's public id, written in every header it wraps.
    pub fn id(&self) -> String {
        hex(&self.id)
    }
}

/// Which object a body belongs to: bound into every header and segment, so ciphertext moved
/// to another tenant, bucket, key, generation or part does not decrypt. `part` is 0 for a
/// single-PUT object and the part number (1..=10000) for a part of a multipart upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity<'a> {
    pub tenant: &'a str,
    pub bucket: &'a str,
    pub key: &'a str,
    pub generation: u64,
    pub part: u32,
}

impl Identity<'_> {
    /// The identity's associated-data encoding: a label, then tenant, bucket and key each as
    /// a u32 little-endian length and the UTF-8 bytes, then generation (u64 LE), part (u32 LE).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            IDENTITY_LABEL.len() + 24 + self.tenant.len() + self.bucket.len() + self.key.len(),
        );
        out.extend_from_slice(IDENTITY_LABEL);
        for s in [self.tenant, self.bucket, self.key] {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        out.extend_from_slice(&self.generation.to_le_bytes());
        out.extend_from_slice(&self.part.to_le_bytes());
        out
    }
}

fn check_segment_size(segment_size: u32) -> Result<(), Error> {
    if (MIN_SEGMENT_SIZE..=MAX_SEGMENT_SIZE).contains(&segment_size) {
        Ok(())
    } else {
        Err(Error::SegmentSize(segment_size))
    }
}

/// The shape of one encrypted body: its segment size and plaintext length, from which every
/// length and offset follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    segment_size: u32,
    plaintext_len: u64,
}

/// The segments a plaintext range touches and where they lie in the ciphertext.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentSpan {
    /// Index of the first segment touched.
    pub first: u64,
    /// Index of the last segment touched (inclusive).
    pub last: u64,
    /// Byte range of those segments in the ciphertext (the header is not included: a reader
    /// fetches bytes `0..HEADER_LEN` too).
    pub ciphertext: Range<u64>,
    /// Offset of the range's first byte in the first segment's plaintext.
    pub skip: u64,
}

impl Layout {
    pub fn new(segment_size: u32, plaintext_len: u64) -> Result<Self, Error> {
        check_segment_size(segment_size)?;
        Ok(Self {
            segment_size,
            plaintext_len,
        })
    }

    /// The layout of a body of `ciphertext_len` bytes, refused when no plaintext length
    /// encrypts to it (a cut in the middle of a segment's tag, or a trailing empty segment).
    pub fn from_ciphertext_len(segment_size: u32, ciphertext_len: u64) -> Result<Self, Error> {
        check_segment_size(segment_size)?;
        let bad = Error::Length {
            len: ciphertext_len,
            segment_size,
        };
        let Some(body) = ciphertext_len.checked_sub((HEADER_LEN + TAG_LEN) as u64) else {
            return Err(bad);
        };
        let body = body + TAG_LEN as u64;
        let stride = u64::from(segment_size) + TAG_LEN as u64;
        let count = body.div_ceil(stride);
        let last = body - (count - 1) * stride;
        if last < TAG_LEN as u64 || (count > 1 && last == TAG_LEN as u64) {
            return Err(bad);
        }
        Ok(Self {
            segment_size,
            plaintext_len: body - count * TAG_LEN as u64,
        })
    }

    pub fn segment_size(&self) -> u32 {
        self.segment_size
    }

    pub fn plaintext_len(&self) -> u64 {
        self.plaintext_len
    }

    /// Segments in the body: one for an empty object, else ⌈len / segment_size⌉.
    pub fn segment_count(&self) -> u64 {
        self.plaintext_len
            .div_ceil(u64::from(self.segment_size))
            .max(1)
    }

    /// Header, plaintext and one tag per segment.
    pub fn ciphertext_len(&self) -> u64 {
        HEADER_LEN as u64 + self.plaintext_len + self.segment_count() * TAG_LEN as u64
    }

    /// Plaintext bytes in segment `index`.
    pub fn segment_plaintext_len(&self, index: u64) -> u64 {
        let start = index * u64::from(self.segment_size);
        (self.plaintext_len - start.min(self.plaintext_len)).min(u64::from(self.segment_size))
    }

    fn segment_offset(&self, index: u64) -> u64 {
        HEADER_LEN as u64 + index * (u64::from(self.segment_size) + TAG_LEN as u64)
    }

    /// The segments that hold plaintext bytes `range` (non-empty, inside the object).
    pub fn span(&self, range: Range<u64>) -> Result<SegmentSpan, Error> {
        if range.start >= range.end || range.end > self.plaintext_len {
            return Err(Error::Range {
                start: range.start,
                end: range.end,
                len: self.plaintext_len,
            });
        }
        let size = u64::from(self.segment_size);
        let first = range.start / size;
        let last = (range.end - 1) / size;
        let end = if last + 1 == self.segment_count() {
            self.ciphertext_len()
        } else {
            self.segment_offset(last + 1)
        };
        Ok(SegmentSpan {
            first,
            last,
            ciphertext: self.segment_offset(first)..end,
            skip: range.start - first * size,
        })
    }
}

fn nonce(part: u32, index: u64) -> Nonce {
    let mut n = [0; NONCE_LEN];
    n[..4].copy_from_slice(&part.to_be_bytes());
    n[4..].copy_from_slice(&index.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

/// The per-segment associated data: the identity's encoding, then index and last flag.
struct SegmentAad {
    buf: Vec<u8>,
    prefix: usize,
}

impl SegmentAad {
    fn new(identity: &Identity<'_>) -> Self {
        let buf = identity.encode();
        Self {
            prefix: buf.len(),
            buf,
        }
    }

    fn at(&mut self, index: u64, last: bool) -> Aad<&[u8]> {
        self.buf.truncate(self.prefix);
        self.buf.extend_from_slice(&index.to_le_bytes());
        self.buf.push(u8::from(last));
        Aad::from(&self.buf[..])
    }
}

/// Encrypts one body a piece at a time: [`Encryptor::new`] gives the header, [`update`]
/// appends to the caller's buffer every segment completed so far, [`finish`] the last one.
///
/// The segment being filled is kept as plaintext at the end of that buffer, where it is
/// sealed in place once the next byte shows it is not the last (whose flag is known only at
/// the end): each plaintext byte is copied once, into the buffer, and encrypted there. So
/// between calls the caller may take bytes off the front of the buffer only up to
/// `len - pending()` (the sealed ciphertext), and must keep the rest at its end.
///
/// [`update`]: Encryptor::update
/// [`finish`]: Encryptor::finish
pub struct Encryptor {
    key: LessSafeKey,
    aad: SegmentAad,
    part: u32,
    segment_size: usize,
    index: u64,
    /// Plaintext bytes of the segment being filled, at the end of the caller's buffer.
    pending: usize,
    plaintext_len: u64,
}

impl Encryptor {
    /// A fresh random data key for the object `identity`, wrapped by `tenant`; returns the
    /// encryptor and the header to write first.
    pub fn new(
        tenant: &TenantKey,
        identity: &Identity<'_>,
        segment_size: u32,
    ) -> Result<(Self, [u8; HEADER_LEN]), Error> {
        check_segment_size(segment_size)?;
        let data_key: [u8; KEY_LEN] = random();
        let mut header = [0; HEADER_LEN];
        header[..4].copy_from_slice(&MAGIC);
        header[4] = VERSION;
        header[8..12].copy_from_slice(&segment_size.to_le_bytes());
        header[12..HEADER_AAD_LEN].copy_from_slice(&tenant.id);
        let wrap_nonce: [u8; NONCE_LEN] = random();
        header[HEADER_AAD_LEN..HEADER_AAD_LEN + NONCE_LEN].copy_from_slice(&wrap_nonce);
        let mut aad = header[..HEADER_AAD_LEN].to_vec();
        aad.extend_from_slice(&identity.encode());
        let wrapped = &mut header[HEADER_AAD_LEN + NONCE_LEN..HEADER_LEN - TAG_LEN];
        wrapped.copy_from_slice(&data_key);
        let tag = tenant
            .wrap
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(wrap_nonce),
                Aad::from(&aad[..]),
                wrapped,
            )
            .unwrap_or_else(|_| unreachable!("32 bytes always seal"));
        header[HEADER_LEN - TAG_LEN..].copy_from_slice(tag.as_ref());
        let size = segment_size as usize;
        Ok((
            Self {
                key: aes(&data_key),
                aad: SegmentAad::new(identity),
                part: identity.part,
                segment_size: size,
                index: 0,
                pending: 0,
                plaintext_len: 0,
            },
            header,
        ))
    }

    /// Seals the segment being filled, in place at the end of `out`, and appends its tag.
    fn seal(&mut self, last: bool, out: &mut Vec<u8>) {
        debug_assert!(
            out.len() >= self.pending,
            "the pending segment left the buffer"
        );
        let start = out.len().saturating_sub(self.pending);
        let tag = self
            .key
            .seal_in_place_separate_tag(
                nonce(self.part, self.index),
                self.aad.at(self.index, last),
                &mut out[start..],
            )
            .unwrap_or_else(|_| unreachable!("a segment is far below GCM's length limit"));
        out.extend_from_slice(tag.as_ref());
        self.index += 1;
        self.pending = 0;
    }

    /// Takes more plaintext into the end of `out`, sealing there the segments it completes
    /// (see the type's doc for what `out` must keep).
    pub fn update(&mut self, mut data: &[u8], out: &mut Vec<u8>) {
        self.plaintext_len += data.len() as u64;
        while !data.is_empty() {
            if self.pending == self.segment_size {
                self.seal(false, out);
            }
            let take = (self.segment_size - self.pending).min(data.len());
            out.extend_from_slice(&data[..take]);
            self.pending += take;
            data = &data[take..];
        }
    }

    /// Seals the next segment out of place, for a caller that keeps the plaintext where it
    /// arrived: its plaintext is `head` then `tail` (a segment that lies across two of the
    /// caller's buffers; either may be empty), and its ciphertext then tag go to `out`,
    /// exactly `head.len() + tail.len() + TAG_LEN` bytes. The AEAD reads the plaintext
    /// where it is and writes the ciphertext once, so no byte is copied first. Every segment
    /// but the `last` holds exactly the segment size; a misfit is refused, `out` untouched.
    /// Not to be mixed with [`update`](Encryptor::update) in one body.
    pub fn seal_next(
        &mut self,
        head: &[u8],
        tail: &[u8],
        last: bool,
        out: &mut [u8],
    ) -> Result<(), Error> {
        let len = head.len() + tail.len();
        let fits = if last {
            len <= self.segment_size
        } else {
            len == self.segment_size
        };
        if !fits || self.pending != 0 || out.len() != len + TAG_LEN {
            return Err(Error::Misfit {
                index: self.index,
                len,
                out: out.len(),
                segment_size: self.segment_size,
            });
        }
        let (ciphertext, rest) = out.split_at_mut(head.len());
        self.key
            .seal_out_of_place_scatter(
                nonce(self.part, self.index),
                self.aad.at(self.index, last),
                head,
                ciphertext,
                tail,
                rest,
            )
            .unwrap_or_else(|_| unreachable!("the lengths are checked above"));
        self.index += 1;
        self.plaintext_len += len as u64;
        Ok(())
    }

    /// Plaintext bytes per segment.
    #[must_use]
    pub fn segment_size(&self) -> usize {
        self.segment_size
    }

    /// Plaintext bytes taken so far.
    #[must_use]
    pub fn plaintext_len(&self) -> u64 {
        self.plaintext_len
    }

    /// Plaintext bytes at the end of the caller's buffer not yet sealed: the segment being
    /// filled.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Appends the last segment; returns the body's plaintext length.
    pub fn finish(mut self, out: &mut Vec<u8>) -> u64 {
        self.seal(true, out);
        self.plaintext_len
    }
}

/// The segment size a header declares, read without the key (to compute a [`Layout`] before
/// fetching segments).
pub fn header_segment_size(header: &[u8]) -> Result<u32, Error> {
    if header.len() < HEADER_LEN || header[..4] != MAGIC {
        return Err(Error::NotEncrypted);
    }
    if header[4] != VERSION {
        return Err(Error::Version(header[4]));
    }
    let size = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
    check_segment_size(size)?;
    Ok(size)
}

/// Decrypts segments of one body: opened from its header and total ciphertext length.
pub struct Decryptor {
    key: LessSafeKey,
    aad: SegmentAad,
    part: u32,
    layout: Layout,
}

impl std::fmt::Debug for Decryptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decryptor")
            .field("layout", &self.layout)
            .finish_non_exhaustive()
    }
}

impl Decryptor {
    /// Checks the header (format, tenant key, identity) and unwraps the data key.
    /// `ciphertext_len` is the whole stored body's length (HEAD, or a ranged GET's
    /// `Content-Range` total).
    pub fn open(
        tenant: &TenantKey,
        identity: &Identity<'_>,
        header: &[u8],
        ciphertext_len: u64,
    ) -> Result<Self, Error> {
        let segment_size = header_segment_size(header)?;
        if header[12..HEADER_AAD_LEN] != tenant.id {
            return Err(Error::WrongKey {
                found: hex(&header[12..HEADER_AAD_LEN]),
                expected: hex(&tenant.id),
            });
        }
        let layout = Layout::from_ciphertext_len(segment_size, ciphertext_len)?;
        let mut aad = header[..HEADER_AAD_LEN].to_vec();
        aad.extend_from_slice(&identity.encode());
        let mut nonce = [0; NONCE_LEN];
        nonce.copy_from_slice(&header[HEADER_AAD_LEN..HEADER_AAD_LEN + NONCE_LEN]);
        let mut wrapped = [0; KEY_LEN + TAG_LEN];
        wrapped.copy_from_slice(&header[HEADER_AAD_LEN + NONCE_LEN..HEADER_LEN]);
        let data_key = tenant
            .wrap
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&aad[..]),
                &mut wrapped,
            )
            .map_err(|_| Error::Header)?;
        Ok(Self {
            key: aes(data_key),
            aad: SegmentAad::new(identity),
            part: identity.part,
            layout,
        })
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Decrypts consecutive whole segments starting at `first` (their ciphertext exactly, as
    /// [`Layout::span`] gives it) and appends their plaintext to `out`. On an error `out` is
    /// left as it was: nothing unauthenticated is ever appended.
    pub fn decrypt_segments(
        &mut self,
        first: u64,
        mut ciphertext: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        let keep = out.len();
        let count = self.layout.segment_count();
        let mut index = first;
        while !ciphertext.is_empty() || index == first {
            if index >= count {
                out.truncate(keep);
                return Err(Error::Segment { index });
            }
            let len = self.layout.segment_plaintext_len(index) as usize + TAG_LEN;
            if ciphertext.len() < len {
                out.truncate(keep);
                return Err(Error::Segment { index });
            }
            let start = out.len();
            out.extend_from_slice(&ciphertext[..len]);
            let opened = self.key.open_in_place(
                nonce(self.part, index),
                self.aad.at(index, index + 1 == count),
                &mut out[start..],
            );
            if opened.is_err() {
                out.truncate(keep);
                return Err(Error::Segment { index });
            }
            out.truncate(start + len - TAG_LEN);
            ciphertext = &ciphertext[len..];
            index += 1;
        }
        Ok(())
    }
}

/// Encrypts a whole body at once.
pub fn encrypt(
    tenant: &TenantKey,
    identity: &Identity<'_>,
    segment_size: u32,
    plaintext: &[u8],
) -> Result<Vec<u8>, Error> {
    let (mut enc, header) = Encryptor::new(tenant, identity, segment_size)?;
    let layout = Layout::new(segment_size, plaintext.len() as u64)?;
    let mut out = Vec::with_capacity(layout.ciphertext_len() as usize);
    out.extend_from_slice(&header);
    enc.update(plaintext, &mut out);
    enc.finish(&mut out);
    Ok(out)
}

/// Decrypts a whole body, authenticating every segment before returning any byte.
pub fn decrypt(
    tenant: &TenantKey,
    identity: &Identity<'_>,
    ciphertext: &[u8],
) -> Result<Vec<u8>, Error> {
    let mut dec = Decryptor::open(tenant, identity, ciphertext, ciphertext.len() as u64)?;
    let mut out = Vec::with_capacity(dec.layout().plaintext_len() as usize);
    dec.decrypt_segments(0, &ciphertext[HEADER_LEN..], &mut out)?;
    Ok(out)
}

/// Decrypts plaintext bytes `range` of a body of `ciphertext_len` bytes from its header and
/// the ciphertext of the segments [`Layout::span`] names for that range (and only those).
pub fn decrypt_range(
    tenant: &TenantKey,
    identity: &Identity<'_>,
    header: &[u8],
    ciphertext_len: u64,
    range: Range<u64>,
    segments: &[u8],
) -> Result<Vec<u8>, Error> {
    let mut dec = Decryptor::open(tenant, identity, header, ciphertext_len)?;
    let span = dec.layout().span(range.clone())?;
    let mut out = Vec::with_capacity((span.ciphertext.end - span.ciphertext.start) as usize);
    dec.decrypt_segments(span.first, segments, &mut out)?;
    let skip = span.skip as usize;
    let len = (range.end - range.start) as usize;
    if out.len() < skip + len {
        return Err(Error::Segment { index: span.last });
    }
    out.truncate(skip + len);
    out.drain(..skip);
    Ok(out)
}

/// Seals `segments` segments of `segment_size` bytes in place in one buffer, each the way
/// [`Encryptor`] seals a body's (AES-256-GCM under a fresh random data key, the nonce and
/// associated data of its index in a fixed identity, the last one flagged), with none of the
/// encryptor's copies: the AEAD's own speed, which `sluice bench agent` sets the agent's
/// encryption against. Returns the plaintext bytes sealed; the caller times it.
pub fn seal_segments(segments: u64, segment_size: u32) -> Result<u64, Error> {
    check_segment_size(segment_size)?;
    let key = aes(&random::<KEY_LEN>());
    let mut aad = SegmentAad::new(&Identity {
        tenant: "bench",
        bucket: "bench",
        key: "segments",
        generation: 0,
        part: 0,
    });
    let mut buf = vec![0u8; segment_size as usize];
    for index in 0..segments {
        let tag = key
            .seal_in_place_separate_tag(
                nonce(0, index),
                aad.at(index, index + 1 == segments),
                &mut buf,
            )
            .unwrap_or_else(|_| unreachable!("a segment is far below GCM's length limit"));
        std::hint::black_box(tag.as_ref());
    }
    Ok(segments * u64::from(segment_size))
}
