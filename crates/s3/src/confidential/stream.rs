//! The streams of a confidential body: [`Encrypting`] turns a request body into the stored
//! ciphertext as it arrives (a few MiB of it held at a time), and [`decrypt`] turns
//! the stored pieces a plaintext range touches back into exactly that plaintext, fetching
//! only the headers and segments it needs and passing on no byte before the segment holding
//! it authenticated. A failure is an [`Undecryptable`] error in place of the rest of the body
//! (the front primes the stream, so one in the first segment fails before the status line);
//! a body that ends early is one too, never a clean end.

use std::collections::VecDeque;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{Stream, StreamExt as _};
use md5::{Digest as _, Md5};
use sluice_crypt::{Decryptor, Encryptor, HEADER_LEN, TAG_LEN, TenantKey};

use super::buffers::SealBuffers;
use super::{Entry, EntryError, Undecryptable};
use crate::blob::ReadStream;
use crate::error::{ApiError, ApiResult};

/// Stored bytes an [`Encrypting`] stream gathers before it hands them on, at least: large
/// enough that the few bytes it carries over to the next buffer each time (the tail of a
/// block) are a small share of what it hands on.
const EMIT: usize = 2 << 20;
/// The block the local disk writes directly (`O_DIRECT`): every buffer an [`Encrypting`]
/// stream hands on starts at a multiple of it in the stored body.
const BLOCK: usize = 4096;

/// The length of the buffers an [`Encrypting`] stream of `segment_size` writes into: a
/// buffer's worth, a segment and its tag, and the block carried over.
fn buffer_len(segment_size: usize) -> usize {
    EMIT + segment_size + TAG_LEN + BLOCK
}

/// A request body encrypted on its way through: the header, then the segments as they are
/// completed, the last at the end, handed on in buffers of at least [`EMIT`] bytes (the last
/// one shorter). Hashes the plaintext it takes when asked to (a client's Content-MD5 is of the
/// plaintext; without one the hash would be work thrown away: the ETag is the stored
/// ciphertext's, computed by the blob writer).
///
/// No plaintext byte is copied: the body's pieces are kept as they came (shared `Bytes`)
/// until a segment is complete and known not to be the last (a byte after it has come),
/// and the AEAD reads the segment from those pieces and writes its ciphertext into the
/// output buffer ([`Encryptor::seal_next`]): a segment across two pieces is sealed from both
/// where they are, and only one across three or more (pieces shorter than a segment) is
/// gathered first. The output buffers come from [`SealBuffers`] (initialized, reused, no
/// fault) and start on a page (the `sluice` binary's allocator, see `sluice-alloc`); every
/// one handed on starts at a multiple of [`BLOCK`] of the stored body, so the node's disk
/// writes it from where it is. An encrypted body costs the node the cipher, reading the
/// plaintext and writing the ciphertext once, and the few bytes of a block carried from
/// one buffer to the next.
pub struct Encrypting<S> {
    inner: S,
    encryptor: Option<Encryptor>,
    /// The output being filled: `out[..filled]` are stored bytes from a multiple of
    /// [`BLOCK`] of the body.
    out: Vec<u8>,
    filled: usize,
    buffers: SealBuffers,
    /// The plaintext of the segment being filled, in the pieces it came in.
    held: Vec<Bytes>,
    held_len: usize,
    /// What is left of the piece of body being taken in.
    rest: Bytes,
    segment: usize,
    md5: Option<Md5>,
}

impl<S> Encrypting<S> {
    pub fn new(
        inner: S,
        key: &TenantKey,
        entry: &Entry,
        identity: &sluice_crypt::Identity<'_>,
        hash_plaintext: bool,
        buffers: &SealBuffers,
    ) -> ApiResult<Self> {
        let (encryptor, header) = Encryptor::new(key, identity, entry.segment_size)
            .map_err(|e| ApiError::Internal(format!("encrypting a body: {e}")))?;
        let segment = entry.segment_size as usize;
        let mut out = buffers.take(buffer_len(segment));
        out[..header.len()].copy_from_slice(&header);
        Ok(Self {
            inner,
            encryptor: Some(encryptor),
            out,
            filled: header.len(),
            buffers: buffers.clone(),
            held: Vec::new(),
            held_len: 0,
            rest: Bytes::new(),
            segment,
            md5: hash_plaintext.then(Md5::new),
        })
    }

    /// The MD5 of the plaintext taken so far, if it was asked for.
    pub fn plaintext_md5(&self) -> Option<[u8; 16]> {
        self.md5.as_ref().map(|m| m.clone().finalize().into())
    }

    /// Hands on the first `n` bytes filled (a multiple of [`BLOCK`], or all at the end),
    /// carrying the rest over to the start of a fresh buffer.
    fn hand_on(&mut self, n: usize) -> Bytes {
        let mut next = self.buffers.take(self.out.len());
        let carry = self.filled - n;
        next[..carry].copy_from_slice(&self.out[n..self.filled]);
        self.filled = carry;
        let full = std::mem::replace(&mut self.out, next);
        self.buffers.hand_on(full, n)
    }

    /// Seals the segment held plus `take` bytes of `rest` into the output.
    fn seal(&mut self, take: usize, last: bool) -> Result<(), sluice_crypt::Error> {
        let Some(enc) = self.encryptor.as_mut() else {
            return Ok(());
        };
        let tail = self.rest.split_to(take);
        let len = self.held_len + tail.len();
        let out = &mut self.out[self.filled..self.filled + len + TAG_LEN];
        let sealed = match self.held.as_slice() {
            [] => enc.seal_next(&tail, &[], last, out),
            [head] => enc.seal_next(head, &tail, last, out),
            pieces => {
                // Pieces shorter than a segment: gathered, the one copy left.
                let mut gathered = Vec::with_capacity(len);
                for p in pieces {
                    gathered.extend_from_slice(p);
                }
                gathered.extend_from_slice(&tail);
                enc.seal_next(&gathered, &[], last, out)
            }
        };
        sealed?;
        self.filled += len + TAG_LEN;
        self.held.clear();
        self.held_len = 0;
        Ok(())
    }
}

/// A failure of an [`Encrypting`] stream: the body's own, or the encryptor's refusal of a
/// segment (a fault of the stream's own bookkeeping, never of the client's bytes).
#[derive(Debug)]
pub enum SealError<E> {
    Body(E),
    Seal(sluice_crypt::Error),
}

impl<E: std::fmt::Display> std::fmt::Display for SealError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Body(e) => e.fmt(f),
            Self::Seal(e) => write!(f, "encrypting a body: {e}"),
        }
    }
}

impl<S, E> Stream for Encrypting<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    type Item = Result<Bytes, SealError<E>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.encryptor.is_none() {
                return Poll::Ready(None);
            }
            while !this.rest.is_empty() {
                let need = this.segment - this.held_len;
                if this.rest.len() <= need {
                    // The segment is not complete, or not known not to be the last: held
                    // as it came until the next piece (or the end) says which.
                    this.held_len += this.rest.len();
                    this.held.push(std::mem::take(&mut this.rest));
                    break;
                }
                if let Err(e) = this.seal(need, false) {
                    this.encryptor = None;
                    return Poll::Ready(Some(Err(SealError::Seal(e))));
                }
                if this.filled >= EMIT {
                    let n = this.filled / BLOCK * BLOCK;
                    return Poll::Ready(Some(Ok(this.hand_on(n))));
                }
            }
            match Pin::new(&mut this.inner).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(SealError::Body(e)))),
                Poll::Ready(Some(Ok(chunk))) => {
                    if let Some(md5) = this.md5.as_mut() {
                        md5.update(&chunk);
                    }
                    this.rest = chunk;
                }
                Poll::Ready(None) => {
                    // The segment held is the last (or, for an empty body, the only one).
                    let sealed = this.seal(0, true);
                    this.encryptor = None;
                    if let Err(e) = sealed {
                        return Poll::Ready(Some(Err(SealError::Seal(e))));
                    }
                    // All of it, with nothing to carry: no next buffer.
                    let full = std::mem::take(&mut this.out);
                    return Poll::Ready(Some(Ok(this.buffers.hand_on(full, this.filled))));
                }
            }
        }
    }
}

/// Reads bytes `range` of the stored body.
pub type Fetch = Arc<dyn Fn(Range<u64>) -> BoxFuture<'static, ApiResult<ReadStream>> + Send + Sync>;

/// Which object a body is, for opening it and for naming it in errors.
#[derive(Clone)]
pub struct Opening {
    pub key: Arc<TenantKey>,
    pub entry: Entry,
    pub tenant: String,
    pub bucket: String,
    pub object: String,
}

impl Opening {
    fn fail(&self, reason: impl std::fmt::Display) -> object_store::Error {
        Undecryptable {
            bucket: self.bucket.clone(),
            key: self.object.clone(),
            reason: reason.to_string(),
        }
        .into_store_error()
    }

    /// The same, as the front's error (for failures before any stream exists).
    pub fn refuse(&self, e: &EntryError) -> ApiError {
        ApiError::Backend(self.fail(e))
    }
}

/// One piece's share of a read: where its header and the segments wanted are stored, and
/// which plaintext bytes of those segments are wanted.
#[derive(Debug, Clone)]
struct PieceRead {
    part: u32,
    layout: sluice_crypt::Layout,
    header: Range<u64>,
    segments: Range<u64>,
    first: u64,
    last: u64,
    skip: u64,
    len: u64,
}

/// The pieces plaintext bytes `range` of a stored body of `stored` bytes touch; an empty
/// range (only a whole read of an empty object asks for one) still authenticates the body.
fn plan(entry: &Entry, stored: u64, range: &Range<u64>) -> Result<Vec<PieceRead>, EntryError> {
    let mut out = Vec::new();
    for p in entry.pieces(stored)? {
        let plain = p.plain_offset..p.plain_offset + p.layout.plaintext_len();
        let header = p.offset..p.offset + HEADER_LEN as u64;
        if range.is_empty() {
            if range.start == plain.start && plain.is_empty() {
                out.push(PieceRead {
                    part: p.part,
                    layout: p.layout,
                    header: header.clone(),
                    segments: header.end..p.offset + p.layout.ciphertext_len(),
                    first: 0,
                    last: 0,
                    skip: 0,
                    len: 0,
                });
            }
            continue;
        }
        let (lo, hi) = (range.start.max(plain.start), range.end.min(plain.end));
        if lo >= hi {
            continue;
        }
        let span = p
            .layout
            .span(lo - plain.start..hi - plain.start)
            .map_err(EntryError::Length)?;
        out.push(PieceRead {
            part: p.part,
            layout: p.layout,
            header,
            segments: p.offset + span.ciphertext.start..p.offset + span.ciphertext.end,
            first: span.first,
            last: span.last,
            skip: span.skip,
            len: hi - lo,
        });
    }
    Ok(out)
}

struct Current {
    decryptor: Decryptor,
    body: ReadStream,
    buf: Vec<u8>,
    index: u64,
    last: u64,
    skip: u64,
    remaining: u64,
}

struct State {
    opening: Opening,
    fetch: Fetch,
    pieces: VecDeque<PieceRead>,
    current: Option<Current>,
    failed: bool,
}

fn store_error(e: ApiError) -> object_store::Error {
    match e {
        ApiError::Backend(e) => e,
        other => object_store::Error::Generic {
            store: "sluice",
            source: other.to_string().into(),
        },
    }
}

impl State {
    async fn open(&self, p: PieceRead) -> Result<Current, object_store::Error> {
        let mut header = Vec::with_capacity(HEADER_LEN);
        let mut body = (self.fetch)(p.header.clone()).await.map_err(store_error)?;
        while let Some(chunk) = body.next().await {
            header.extend_from_slice(&chunk?);
        }
        let identity = self.opening.entry.identity(
            &self.opening.tenant,
            &self.opening.bucket,
            &self.opening.object,
            p.part,
        );
        let decryptor = Decryptor::open(
            &self.opening.key,
            &identity,
            &header,
            p.layout.ciphertext_len(),
        )
        .map_err(|e| self.opening.fail(e))?;
        let body = (self.fetch)(p.segments.clone())
            .await
            .map_err(store_error)?;
        Ok(Current {
            decryptor,
            body,
            buf: Vec::new(),
            index: p.first,
            last: p.last,
            skip: p.skip,
            remaining: p.len,
        })
    }

    /// The next plaintext bytes, `None` at the end.
    async fn next(&mut self) -> Option<Result<Bytes, object_store::Error>> {
        loop {
            let Some(cur) = self.current.as_mut() else {
                let p = self.pieces.pop_front()?;
                match self.open(p).await {
                    Ok(c) => self.current = Some(c),
                    Err(e) => return Some(Err(e)),
                }
                continue;
            };
            if cur.index > cur.last {
                if !cur.buf.is_empty() {
                    return Some(Err(self.opening.fail("the stored body ran long")));
                }
                self.current = None;
                continue;
            }
            let need = cur.decryptor.layout().segment_plaintext_len(cur.index) as usize + TAG_LEN;
            if cur.buf.len() >= need {
                let mut out = Vec::with_capacity(need);
                if let Err(e) =
                    cur.decryptor
                        .decrypt_segments(cur.index, &cur.buf[..need], &mut out)
                {
                    return Some(Err(self.opening.fail(e)));
                }
                cur.buf.drain(..need);
                cur.index += 1;
                let skip = (cur.skip as usize).min(out.len());
                cur.skip -= skip as u64;
                let take =
                    (out.len() - skip).min(usize::try_from(cur.remaining).unwrap_or(usize::MAX));
                cur.remaining -= take as u64;
                if take > 0 {
                    return Some(Ok(Bytes::from(out).slice(skip..skip + take)));
                }
                continue;
            }
            match cur.body.next().await {
                Some(Ok(chunk)) => cur.buf.extend_from_slice(&chunk),
                Some(Err(e)) => return Some(Err(e)),
                None => {
                    return Some(Err(self
                        .opening
                        .fail(sluice_crypt::Error::Segment { index: cur.index })));
                }
            }
        }
    }
}

/// Plaintext bytes `range` of the stored body of `stored` bytes that `fetch` reads, as a
/// stream (see the module doc). The entry is checked against `stored` here.
pub fn decrypt(
    opening: Opening,
    stored: u64,
    range: &Range<u64>,
    fetch: Fetch,
) -> ApiResult<ReadStream> {
    let pieces = plan(&opening.entry, stored, range).map_err(|e| opening.refuse(&e))?;
    let state = State {
        opening,
        fetch,
        pieces: pieces.into(),
        current: None,
        failed: false,
    };
    Ok(ReadStream::new(
        futures::stream::unfold(state, |mut st| async move {
            if st.failed {
                return None;
            }
            let item = st.next().await?;
            st.failed = item.is_err();
            Some((item, st))
        })
        .fuse()
        .boxed(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::confidential::Entry;

    /// `plain` encrypted from pieces of the sizes `sizes` (cycled), as a socket hands them
    /// in: the buffers handed on, each with its offset in the stored body.
    async fn seal_in_pieces(
        plain: &[u8],
        sizes: &[usize],
        buffers: &SealBuffers,
    ) -> (Vec<u8>, Vec<(usize, usize)>) {
        let key = TenantKey::from_bytes(&[7u8; 32]).expect("key");
        let entry = Entry::fresh(65_536);
        let identity = entry.identity("t", "b", "o", 0);
        let mut pieces = Vec::new();
        let mut at = 0;
        for size in sizes.iter().cycle() {
            if at == plain.len() {
                break;
            }
            let to = (at + size).min(plain.len());
            pieces.push(Ok::<_, std::convert::Infallible>(Bytes::copy_from_slice(
                &plain[at..to],
            )));
            at = to;
        }
        let mut sealed = Encrypting::new(
            futures::stream::iter(pieces),
            &key,
            &entry,
            &identity,
            false,
            buffers,
        )
        .expect("encrypting");
        let mut stored = Vec::new();
        let mut handed = Vec::new();
        while let Some(b) = sealed.next().await {
            let b = b.expect("infallible");
            handed.push((stored.len(), b.len()));
            stored.extend_from_slice(&b);
        }
        let back = sluice_crypt::decrypt(&key, &identity, &stored).expect("decrypts");
        assert!(back == plain, "the plaintext back exactly");
        (stored, handed)
    }

    /// An encrypted body handed on in uneven pieces (one byte, less than a block, a segment
    /// and a byte, several segments, ...: segments within one piece, across two and across
    /// many) comes out in buffers of at least `EMIT` bytes (the last shorter), each starting
    /// at a multiple of `BLOCK` of the stored body (what lets the disk write it from where it
    /// is), which together decrypt exactly.
    #[tokio::test]
    async fn buffers_start_on_blocks_of_the_body_and_decrypt_to_the_plaintext() {
        let plain: Vec<u8> = (0..5 * EMIT + 12_345)
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        let buffers = SealBuffers::default();
        let sizes = [1, 4095, 65_537, 300_000, 77, 131_072, 1 << 20];
        let (_, handed) = seal_in_pieces(&plain, &sizes, &buffers).await;
        let (last, most) = handed.split_last().expect("buffers");
        for &(offset, len) in most {
            assert_eq!(offset % BLOCK, 0, "a buffer at {offset}");
            // Handed on once a segment takes it past EMIT: never grown past its capacity.
            assert!(
                (EMIT - BLOCK..=EMIT + 65_536 + TAG_LEN).contains(&len),
                "a buffer of {len}: {handed:?}"
            );
        }
        assert_eq!(last.0 % BLOCK, 0);
        assert!(handed.len() >= 5, "{handed:?}");
        // Every buffer came back once its bytes were dropped; a second body reuses them.
        let kept = buffers.kept();
        assert!(kept >= 1, "no buffer came back");
        seal_in_pieces(&plain, &sizes, &buffers).await;
        assert_eq!(
            buffers.kept(),
            kept,
            "a second body did not reuse the buffers"
        );
    }

    /// Pieces of exactly a segment (each segment held until the next piece shows it is not
    /// the last), of whole blocks, and an empty body, all decrypt exactly; the empty body is
    /// the header and one empty last segment.
    #[tokio::test]
    async fn segment_sized_pieces_and_an_empty_body_decrypt_exactly() {
        let buffers = SealBuffers::default();
        let plain: Vec<u8> = (0..3 * EMIT).map(|i| (i * 7 % 253) as u8).collect();
        for sizes in [&[65_536][..], &[4096], &[2 * 65_536, 65_536 - 4096]] {
            seal_in_pieces(&plain, sizes, &buffers).await;
            seal_in_pieces(&plain[..65_536], sizes, &buffers).await;
        }
        let (stored, handed) = seal_in_pieces(&[], &[1], &buffers).await;
        assert_eq!(stored.len(), HEADER_LEN + TAG_LEN);
        assert_eq!(handed, vec![(0, HEADER_LEN + TAG_LEN)]);
    }
}
