//! The buffers an encrypting body writes its ciphertext into, kept for the next one.
//!
//! The AEAD seals out of place into a buffer it is given as a byte slice, so the buffer must
//! hold initialized bytes; a fresh one would cost a pass of zeros (or, when glibc maps it
//! fresh, a fault and a zeroed page per 4 KiB) before each byte of ciphertext. Here a buffer
//! goes back to a free list once the last `Bytes` of it is dropped (the disk has written it,
//! or the upload has sent it), still full of the ciphertext it last held, and the next body
//! overwrites it. Only the part a stream fills is ever handed on, so the stale bytes of the
//! rest never leave; they are ciphertext in any case.
//!
//! The list keeps at most [`KEEP_BYTES`] of buffers, all of one size (the front's): a body
//! encrypted with another segment size takes buffers of its own, not kept.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

/// The most bytes of buffers kept: enough for a dozen PUTs' write-behind at once.
pub const KEEP_BYTES: usize = 48 * 1024 * 1024;

/// A free list of equal buffers, shared by every encrypting body of one front.
#[derive(Clone, Default)]
pub struct SealBuffers(Arc<Mutex<Vec<Vec<u8>>>>);

impl SealBuffers {
    /// A buffer of exactly `len` initialized bytes (a kept one when there is one that long).
    pub fn take(&self, len: usize) -> Vec<u8> {
        let kept = {
            let mut list = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            match list.last() {
                Some(b) if b.len() == len => list.pop(),
                Some(_) => {
                    // Kept for another size: this front's segment size changed (tests).
                    list.clear();
                    None
                }
                None => None,
            }
        };
        kept.unwrap_or_else(|| vec![0u8; len])
    }

    /// The first `n` bytes of `buf`, as `Bytes` that give `buf` back here when the last of
    /// them is dropped.
    pub fn hand_on(&self, buf: Vec<u8>, n: usize) -> Bytes {
        Bytes::from_owner(Lent {
            buf,
            home: self.clone(),
        })
        .slice(..n)
    }

    /// Buffers kept now (for tests).
    #[cfg(test)]
    pub fn kept(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

struct Lent {
    buf: Vec<u8>,
    home: SealBuffers,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        if buf.is_empty() {
            return;
        }
        let mut list = self.home.0.lock().unwrap_or_else(PoisonError::into_inner);
        if (list.len() + 1) * buf.len() <= KEEP_BYTES {
            list.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_comes_back_when_its_last_bytes_are_dropped_and_the_list_is_bounded() {
        let buffers = SealBuffers::default();
        let mut buf = buffers.take(1 << 20);
        buf[..4].copy_from_slice(b"seal");
        let at = buf.as_ptr();
        let handed = buffers.hand_on(buf, 4);
        assert_eq!(&handed[..], b"seal");
        let clone = handed.slice(1..3);
        drop(handed);
        assert_eq!(buffers.kept(), 0, "kept while a slice of it is still held");
        let other = buffers.take(1 << 20);
        assert_ne!(other.as_ptr(), at);
        drop(clone);
        assert_eq!(buffers.kept(), 1);
        let again = buffers.take(1 << 20);
        assert_eq!(again.as_ptr(), at, "the kept buffer was not reused");
        assert_eq!(again.len(), 1 << 20);
        // Another size is not served from the list.
        assert_eq!(buffers.take(4096).len(), 4096);
        let many: Vec<Bytes> = (0..KEEP_BYTES / (4 << 20) + 3)
            .map(|_| buffers.hand_on(buffers.take(4 << 20), 1))
            .collect();
        drop(many);
        assert_eq!(
            buffers.kept(),
            KEEP_BYTES / (4 << 20),
            "more than KEEP_BYTES kept"
        );
    }
}
