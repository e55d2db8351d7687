//! The `sluice` binary's allocator: the system's (glibc's `malloc`), except that every block of
//! [`LARGE`] bytes or more starts on a [`PAGE`] boundary.
//!
//! Why: a request body arrives in hyper's read buffers, which are large blocks, and the local
//! disk writes bodies with `O_DIRECT`, which takes memory only from an aligned address. When a
//! buffer starts on a page and the bytes read into it start on a page of the body (which the
//! server's reads arrange: see `sluice_gateway::framing`), the disk writes them from where they
//! are; otherwise every byte is first copied into an aligned buffer, which was an eighth of the
//! node agent's CPU in a checkpoint burst. glibc places a large block 16 bytes past a page (or
//! anywhere in its heap); asking for page alignment costs at most a page of a block of 64 KiB
//! or more.

use std::alloc::{GlobalAlloc, Layout, System};

/// The size from which blocks are page-aligned.
pub const LARGE: usize = 64 * 1024;
/// The alignment given to large blocks.
pub const PAGE: usize = 4096;

/// The system allocator, with blocks of [`LARGE`] bytes or more aligned to [`PAGE`].
#[derive(Debug, Default, Clone, Copy)]
pub struct PageAligned;

/// The layout actually asked of the system for `layout`: a function of the size and the
/// alignment alone, so that a block is freed with the layout it was allocated with.
fn widened(layout: Layout) -> Layout {
    if layout.size() >= LARGE && layout.align() < PAGE {
        Layout::from_size_align(layout.size(), PAGE).unwrap_or(layout)
    } else {
        layout
    }
}

// SAFETY: every call forwards to `System` with `widened(layout)`, which has the caller's size
// and an alignment at least the caller's, so what `System` returns satisfies the caller's
// layout; and a block is always freed or resized with the same widened layout it was allocated
// with, because `widened` depends only on the layout the caller passes, which `GlobalAlloc`
// requires to be the allocation's.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for PageAligned {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: `widened` keeps the size, which the caller guarantees is non-zero.
        unsafe { System.alloc(widened(layout)) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(widened(layout)) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator with `layout`, so by `System` with
        // `widened(layout)`.
        unsafe { System.dealloc(ptr, widened(layout)) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = widened(layout);
        // The caller guarantees `new_size`, rounded up to the alignment, does not overflow.
        let Ok(new) = Layout::from_size_align(new_size, layout.align()).map(widened) else {
            return std::ptr::null_mut();
        };
        if new.align() == old.align() {
            // SAFETY: `ptr` is `System`'s, allocated with `old`; `new_size` is non-zero.
            return unsafe { System.realloc(ptr, old, new_size) };
        }
        // The block crosses `LARGE`: a new block with the other alignment, the bytes moved.
        // SAFETY: `new` has a non-zero size; the copy stays within both blocks (the smaller
        // of the two sizes); `ptr` is freed with the layout it was allocated with.
        unsafe {
            let to = System.alloc(new);
            if !to.is_null() {
                std::ptr::copy_nonoverlapping(ptr, to, layout.size().min(new_size));
                System.dealloc(ptr, old);
            }
            to
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static ALLOC: PageAligned = PageAligned;

    #[test]
    fn large_blocks_start_on_a_page_and_small_ones_need_not() {
        for size in [LARGE, LARGE + 1, 400 * 1024, 8 * 1024 * 1024] {
            let v: Vec<u8> = Vec::with_capacity(size);
            assert_eq!(v.as_ptr().addr() % PAGE, 0, "{size} bytes");
        }
        // Small blocks keep the system's placement (16-byte alignment, not pages): among a
        // few of them, some are off a page boundary.
        let small: Vec<Vec<u8>> = (0..16).map(|_| Vec::with_capacity(100)).collect();
        assert!(
            small
                .iter()
                .any(|v| !v.as_ptr().addr().is_multiple_of(PAGE))
        );
    }

    #[test]
    fn growing_and_shrinking_across_the_threshold_keeps_the_bytes() {
        let mut v: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let expect = v.clone();
        // Small to large: moved into a page-aligned block.
        v.reserve_exact(LARGE * 2);
        assert_eq!(v.as_ptr().addr() % PAGE, 0);
        assert_eq!(v, expect);
        // Large to larger: still aligned.
        v.extend(std::iter::repeat_n(7u8, LARGE * 3));
        assert_eq!(v.as_ptr().addr() % PAGE, 0);
        assert_eq!(&v[..1000], &expect[..]);
        // Large to small: the bytes kept.
        v.truncate(1000);
        v.shrink_to_fit();
        assert_eq!(v, expect);
    }
}
