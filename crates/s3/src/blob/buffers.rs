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
//! The list holds at most [`KEEP_BYTES`] of buffers, so what GETs keep between them is
//! bounded; reads of less than half a grain (small objects' last grains, short ranges) take an
//! exact allocation instead, so that a slow client of a small range never holds a whole grain.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

/// The most bytes of buffers kept for reuse: enough for a few dozen GETs' read-ahead.
pub const KEEP_BYTES: usize = 64 * 1024 * 1024;

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

    /// An empty buffer with room for `len` bytes: a kept one if `len` is half a grain or more
    /// (and no more than a grain), else a new one of exactly `len`.
    pub fn take(&self, len: usize) -> Lent {
        let pooled = len <= self.0.size && len >= self.0.size / 2;
        let buf = if pooled {
            let kept = self
                .0
                .list
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            kept.unwrap_or_else(|| Vec::with_capacity(self.0.size))
        } else {
            Vec::with_capacity(len)
        };
        Lent {
            buf,
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

/// A buffer on loan from [`ReadBuffers`]: fill [`Lent::buf`], then [`Lent::freeze`] it.
pub struct Lent {
    pub buf: Vec<u8>,
    home: Option<Arc<Free>>,
}

impl Lent {
    /// The bytes read, as `Bytes` that give the buffer back when the last of them is dropped.
    pub fn freeze(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let Some(home) = self.home.take() else {
            return;
        };
        let mut buf = std::mem::take(&mut self.buf);
        if buf.capacity() != home.size {
            return;
        }
        buf.clear();
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
        lent.buf.resize(len, byte);
        lent.freeze()
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
}
