//! Buffers that GETs read local-disk grains into, kept for the next grain.
//!
//! A grain read from a file used to land in a fresh `Vec` of the grain's size (4 MiB by
//! default), and glibc hands blocks that large back to the kernel when they are freed (unmapped,
//! or trimmed off an arena's top). Every grain then faulted in, and zeroed, a new mapping
//! before the copy out of the page cache could fill it: `perf` of a GET put 8% of the reads'
//! samples in page faults, 5% in charging the new pages to the cgroup. Here a grain's buffer
//! goes back to a free list once the last `Bytes` of it is dropped (the response has been
//! sent), and the next grain reads into it, which no fault interrupts.
//!
//! Every buffer is zeroed once, when it is made, and holds a run of [`ALIGN`]-aligned space
//! ([`Lent::space`]) with room for the bytes asked for from any offset of a file, rounded out
//! to whole blocks on both sides: what a read with `O_DIRECT` needs (an aligned address, offset
//! and length). A kept buffer is handed out again as it was left; only the bytes a read puts
//! in it are ever shown ([`Lent::freeze`]).
//!
//! The list holds at most [`KEEP_BYTES`] of buffers, so what GETs keep between them is
//! bounded; reads of less than half a grain (small objects' last grains, short ranges) take an
//! exact allocation instead, so that a slow client of a small range never holds a whole grain.

use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

/// The most bytes of buffers kept for reuse: enough for a few dozen GETs' read-ahead.
pub const KEEP_BYTES: usize = 64 * 1024 * 1024;

/// The alignment of [`Lent::space`]: the block size `O_DIRECT` reads take on the filesystems
/// sluice runs on (512 or 4096 bytes), and a page.
pub const ALIGN: usize = 4096;

/// What a buffer holds beyond the bytes asked for: the part of a block before them, the rest
/// of the block after them, and up to a block before the first aligned address.
const SLACK: usize = 3 * ALIGN;

/// A free list of grain-sized buffers, shared by every read of one store.
#[derive(Clone)]
pub struct ReadBuffers(Arc<Free>);

struct Free {
    size: usize,
    keep: usize,
    list: Mutex<Vec<Vec<u8>>>,
}

impl ReadBuffers {
    /// Buffers of `size` bytes (the store's grain).
    pub fn new(size: usize) -> Self {
        Self(Arc::new(Free {
            size,
            keep: (KEEP_BYTES / size.max(1)).max(1),
            list: Mutex::new(Vec::new()),
        }))
    }

    /// A buffer with aligned room for `len` bytes read from any offset: a kept one if `len`
    /// is half a grain or more (and no more than a grain), else a new one sized for `len`.
    pub fn take(&self, len: usize) -> Lent {
        let pooled = len <= self.0.size && len >= self.0.size / 2;
        let buf = if pooled {
            let kept = self
                .0
                .list
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            kept.unwrap_or_else(|| vec![0; self.0.size.saturating_add(SLACK)])
        } else {
            vec![0; len.saturating_add(SLACK)]
        };
        let pad = buf.as_ptr().align_offset(ALIGN).min(ALIGN);
        Lent {
            buf,
            pad,
            shown: 0..0,
            home: pooled.then(|| Arc::clone(&self.0)),
        }
    }

    /// Buffers kept now (for tests).
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.0
            .list
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// A buffer on loan from [`ReadBuffers`]: fill [`Lent::space`], then [`Lent::freeze`] the
/// part filled.
pub struct Lent {
    buf: Vec<u8>,
    /// Where the aligned space starts in `buf`.
    pad: usize,
    /// The part of the space shown once frozen.
    shown: Range<usize>,
    home: Option<Arc<Free>>,
}

impl Lent {
    /// The buffer's aligned space: it starts on an [`ALIGN`] boundary, is a whole number of
    /// blocks long, and holds the `len` asked for from any offset within a block, rounded up
    /// to a whole block. What it holds before a read is zeros or an earlier read's bytes.
    pub fn space(&mut self) -> &mut [u8] {
        let blocks = (self.buf.len() - self.pad) / ALIGN;
        &mut self.buf[self.pad..self.pad + blocks * ALIGN]
    }

    /// `range` of the space (the bytes read), as `Bytes` that give the buffer back when the
    /// last of them is dropped. A range past the space is cut to it.
    pub fn freeze(mut self, range: Range<usize>) -> Bytes {
        let len = self.space().len();
        self.shown = range.start.min(len)..range.end.min(len);
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.buf[self.pad + self.shown.start..self.pad + self.shown.end]
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let Some(home) = self.home.take() else {
            return;
        };
        let buf = std::mem::take(&mut self.buf);
        if buf.len() != home.size.saturating_add(SLACK) {
            return;
        }
        let mut list = home.list.lock().unwrap_or_else(PoisonError::into_inner);
        if list.len() < home.keep {
            list.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(buffers: &ReadBuffers, len: usize, byte: u8) -> Bytes {
        let mut lent = buffers.take(len);
        lent.space()[..len].fill(byte);
        lent.freeze(0..len)
    }

    #[test]
    fn a_grain_reuses_the_buffer_of_one_already_sent() {
        let buffers = ReadBuffers::new(1 << 20);
        let first = filled(&buffers, 1 << 20, 1);
        let at = first.as_ptr();
        let clone = first.slice(10..20);
        drop(first);
        // A slice of it is still being sent: the buffer is not free yet.
        assert_eq!(buffers.kept(), 0);
        let second = filled(&buffers, 1 << 20, 2);
        assert_ne!(second.as_ptr(), at);
        assert!(clone.iter().all(|&b| b == 1), "a lent buffer was reused");
        drop(clone);
        assert_eq!(buffers.kept(), 1);
        // Half a grain or more reads into a kept buffer.
        let third = filled(&buffers, 600 << 10, 3);
        assert_eq!(third.as_ptr(), at);
        assert_eq!(third.len(), 600 << 10);
        assert!(third.iter().all(|&b| b == 3));
        assert!(second.iter().all(|&b| b == 2));
    }

    #[test]
    fn short_reads_take_exact_buffers_and_the_list_is_bounded() {
        let buffers = ReadBuffers::new(KEEP_BYTES / 4);
        let small = filled(&buffers, 100, 7);
        drop(small);
        assert_eq!(buffers.kept(), 0, "a short read's buffer was kept");
        let many: Vec<Bytes> = (0..6)
            .map(|_| filled(&buffers, KEEP_BYTES / 4, 1))
            .collect();
        drop(many);
        assert_eq!(buffers.kept(), 4, "more than KEEP_BYTES kept");
    }

    #[test]
    fn the_space_is_aligned_and_holds_the_length_from_any_offset_in_whole_blocks() {
        let buffers = ReadBuffers::new(64 * ALIGN);
        for len in [
            1,
            100,
            ALIGN - 1,
            ALIGN,
            ALIGN + 1,
            40 * ALIGN + 7,
            64 * ALIGN,
        ] {
            let mut lent = buffers.take(len);
            let space = lent.space();
            assert_eq!(space.as_ptr().align_offset(ALIGN), 0, "len {len}");
            assert_eq!(space.len() % ALIGN, 0, "len {len}");
            // The worst offset: the last byte of a block, and the read rounded up past it.
            let need = (ALIGN - 1 + len).next_multiple_of(ALIGN);
            assert!(space.len() >= need, "len {len}: {} < {need}", space.len());
        }
    }

    #[test]
    fn only_the_range_frozen_is_shown_and_a_reused_buffer_shows_none_of_the_last_read() {
        let buffers = ReadBuffers::new(8 * ALIGN);
        let mut lent = buffers.take(8 * ALIGN);
        lent.space().fill(9);
        drop(lent.freeze(0..8 * ALIGN));
        let mut again = buffers.take(6 * ALIGN);
        again.space()[100..200].fill(4);
        let shown = again.freeze(100..200);
        assert_eq!(shown.len(), 100);
        assert!(shown.iter().all(|&b| b == 4));
        // Cut to the space, never past the buffer.
        let lent = buffers.take(5 * ALIGN);
        assert!(lent.freeze(0..usize::MAX).len() >= 5 * ALIGN);
    }
}
