//! The `sluice` binary's allocator: the system's (glibc's `malloc`), except that every block of
//! [`LARGE`] bytes or more starts on a [`PAGE`] boundary.
//!
//! Why: a request body arrives in hyper's read buffers, which are large blocks, and the local
//! disk writes bodies with `O_DIRECT`, which takes memory only from an aligned address. When a
//! buffer starts on a page and the bytes read into it start on a page of the body (which the
//! server's reads arrange: see `sluice_serve::framing`), the disk writes them from where they
//! are; otherwise every byte is first copied into an aligned buffer, which was an eighth of the
//! node agent's CPU in a checkpoint burst. glibc places a large block 16 bytes past a page (or
//! anywhere in its heap); carving it on a page costs a page more per block of 64 KiB or more.

use std::alloc::{GlobalAlloc, Layout, System};

/// The size from which blocks are page-aligned.
pub const LARGE: usize = 64 * 1024;
/// The alignment given to large blocks.
pub const PAGE: usize = 4096;

/// The system allocator, with blocks of [`LARGE`] bytes or more aligned to [`PAGE`].
///
/// A large block is carved from a system block a page longer, at its first page boundary
/// past the start; the system block's address is kept in the word just before. (Asking glibc
/// for page alignment instead, with `posix_memalign`, maps fresh memory for every such block:
/// measured, 4 MiB blocks allocated and freed in a loop fault in every page each time, ten
/// times slower than plain `malloc`, which reuses freed memory.)
#[derive(Debug, Default, Clone, Copy)]
pub struct PageAligned;

/// Whether a block of `layout` is carved on a page.
fn large(layout: Layout) -> bool {
    layout.size() >= LARGE && layout.align() < PAGE
}

/// The system block a large block of `layout` is carved from.
fn carrier(layout: Layout) -> Option<Layout> {
    Layout::from_size_align(layout.size().checked_add(PAGE)?, layout.align()).ok()
}

/// Where the system block's address is kept for the large block at `block`: the word before
/// it (aligned, as `block` is page-aligned).
#[allow(unsafe_code, clippy::cast_ptr_alignment)]
unsafe fn slot(block: *mut u8) -> *mut *mut u8 {
    // SAFETY: the caller's block is carved at least a word past the system block's start.
    unsafe { block.cast::<*mut u8>().sub(1) }
}

/// The large block in the system block at `raw` (or null): its first page boundary past
/// `raw`, with `raw` written in the word before it.
///
/// # Safety
/// `raw` is null or a live block of `PAGE` bytes more than the large block, word-aligned.
#[allow(unsafe_code)]
unsafe fn carve(raw: *mut u8) -> *mut u8 {
    if raw.is_null() {
        return raw;
    }
    // Past `raw` by 1..=PAGE bytes, so at least a word (both are word-aligned).
    let skip = PAGE - raw.addr() % PAGE;
    // SAFETY: `skip <= PAGE` leaves the large block within the system block (caller); the
    // word before it lies at or after `raw`, aligned (the large block is page-aligned).
    unsafe {
        let block = raw.add(skip);
        slot(block).write(raw);
        block
    }
}

/// A block of `layout` from `get` (a `System` allocation, plain or zeroed): as it comes if
/// small, else carved from a block of `carrier(layout)`.
///
/// # Safety
/// `layout` has a non-zero size; `get` returns null or a live `System` block of the layout it
/// is given.
#[allow(unsafe_code)]
unsafe fn allocate(layout: Layout, get: impl FnOnce(Layout) -> *mut u8) -> *mut u8 {
    if !large(layout) {
        return get(layout);
    }
    let Some(outer) = carrier(layout) else {
        return std::ptr::null_mut();
    };
    // SAFETY: `outer` is non-zero and PAGE bytes longer than the large block; the stored
    // address lies outside the caller's bytes (so a zeroed block stays zeroed for them).
    unsafe { carve(get(outer)) }
}

// SAFETY: small blocks are `System`'s with the caller's layout. A large block lies within a
// `System` block of `carrier(layout)` (size + PAGE, the caller's alignment, which a page
// boundary also satisfies) and is freed through the address stored before it, which nothing
// else writes (it is outside the caller's block). `large` depends only on the layout, which
// `GlobalAlloc` requires to be the same at allocation and release.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for PageAligned {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout is non-zero; `System.alloc` with the layout it is given.
        unsafe { allocate(layout, |l| System.alloc(l)) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe { allocate(layout, |l| System.alloc_zeroed(l)) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !large(layout) {
            // SAFETY: allocated by `System` with this layout.
            return unsafe { System.dealloc(ptr, layout) };
        }
        // SAFETY: `ptr` was carved from a `System` block of `carrier(layout)` (which was
        // `Some` then, as now), whose address is in the word before it.
        unsafe {
            let raw = slot(ptr).read();
            if let Some(outer) = carrier(layout) {
                System.dealloc(raw, outer);
            }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Ok(new) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        if !large(layout) && !large(new) {
            // SAFETY: a `System` block of `layout`; `new_size` is non-zero.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // A large block on either side: a new block, the bytes moved.
        // SAFETY: `new` is non-zero; the copy stays within both blocks; `ptr` is this
        // allocator's block of `layout`.
        unsafe {
            let to = self.alloc(new);
            if !to.is_null() {
                std::ptr::copy_nonoverlapping(ptr, to, layout.size().min(new_size));
                self.dealloc(ptr, layout);
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
