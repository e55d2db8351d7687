//! A stretch of a file's pages, mapped read-only, so that they can be checked where they are
//! in the page cache and then sent from there by `sendfile`, never copied through a buffer.
//!
//! A verified GET used to read every grain into a buffer (one copy out of the page cache),
//! check its chunks there, and have hyper write the buffer (a second copy into the socket).
//! [`Mapped::map`] maps the stretch instead and has the kernel fault every page of it in
//! (`MADV_POPULATE_READ`), reading from the disk what is not cached; the caller checks the
//! pages through [`Mapped::bytes`], and the connection then sends the same pages with
//! `sendfile` while the mapping is held ([`super::SendfileLane::stand_in_mapped`]): checked
//! once, copied by nobody.
//!
//! Why this is sound, and what it leaves:
//! - A mapped file page that cannot be read (a disk error) is a `SIGBUS` on access. The pages
//!   are faulted in by `MADV_POPULATE_READ` before any is touched, which reports such a page
//!   as an error instead (`EFAULT`, `EHWPOISON`): the read fails cleanly, as a `pread` would.
//!   Left: a populated page reclaimed under memory pressure in the fraction of a millisecond
//!   between the populate and its check, and unreadable when faulted in again.
//! - Blobs never change once written (a temporary file is written, synced and renamed into
//!   place, and nothing writes or truncates it after), which is what makes a shared mapping of
//!   one safe to read as a byte slice. A file truncated under the mapping by something other
//!   than sluice would be a `SIGBUS`.
//! - The pages are sent as they were checked: they stay mapped, and so in the page cache, until
//!   the connection has sent them. Left: a mapped page can still be reclaimed under memory
//!   pressure; `sendfile` would then read it from the disk again, unchecked.
//!
//! Linux only (`MADV_POPULATE_READ`, Linux 5.14). Elsewhere, or on an older kernel, `map`
//! fails with [`io::ErrorKind::Unsupported`] and the caller reads into a buffer instead.

use std::fs::File;
use std::io;

/// `len` bytes of a file from `offset`, mapped read-only with every page faulted in.
pub struct Mapped {
    /// The mapping's start (page aligned) and length.
    base: *mut std::ffi::c_void,
    span: usize,
    /// Where the stretch asked for starts in the mapping.
    skip: usize,
    len: usize,
}

// SAFETY: the mapping is read-only and owned by this value alone; its pages may be read from
// any thread, and `munmap` (in `drop`) may run on any thread.
#[allow(unsafe_code)]
unsafe impl Send for Mapped {}
// SAFETY: as above; `bytes` only reads.
#[allow(unsafe_code)]
unsafe impl Sync for Mapped {}

impl Mapped {
    /// Maps `len` bytes of `file` from `offset` and faults them in. The file must hold them
    /// (the caller checked its length) and must not change while mapped (see the module doc).
    ///
    /// # Errors
    /// The kernel's, with a page that cannot be read reported as an error, never a signal;
    /// [`io::ErrorKind::Unsupported`] where mapping cannot be made safe (see the module doc).
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    pub fn map(file: &File, offset: u64, len: usize) -> io::Result<Self> {
        use rustix::mm::{Advice, MapFlags, ProtFlags};
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an empty stretch",
            ));
        }
        let page = rustix::param::page_size() as u64;
        let aligned = offset / page * page;
        let skip = usize::try_from(offset - aligned).map_err(io::Error::other)?;
        let span = skip
            .checked_add(len)
            .ok_or_else(|| io::Error::other("stretch too long to map"))?;
        // SAFETY: a fresh mapping (no address asked for), read-only, of a file we hold open;
        // nothing else in this process refers to the range it returns.
        let base = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                span,
                ProtFlags::READ,
                MapFlags::SHARED,
                file,
                aligned,
            )
        }?;
        let mapped = Self {
            base,
            span,
            skip,
            len,
        };
        // SAFETY: the range is exactly the mapping made above; populating reads no memory.
        match unsafe { rustix::mm::madvise(base, span, Advice::LinuxPopulateRead) } {
            Ok(()) => Ok(mapped),
            // An older kernel without MADV_POPULATE_READ: touching the pages could raise a
            // signal, so this mapping is not used.
            Err(rustix::io::Errno::INVAL) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "MADV_POPULATE_READ is not supported by this kernel",
            )),
            Err(e) => Err(io::Error::other(format!(
                "faulting the file's pages in: {e} (a page that cannot be read)"
            ))),
        }
    }

    /// Not available off Linux: the caller reads into a buffer.
    ///
    /// # Errors
    /// Always [`io::ErrorKind::Unsupported`].
    #[cfg(not(target_os = "linux"))]
    pub fn map(_file: &File, _offset: u64, _len: usize) -> io::Result<Self> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "mapped reads are built for Linux only",
        ))
    }

    /// The stretch's bytes, where they are in the page cache.
    #[must_use]
    #[allow(unsafe_code)]
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `base + skip .. + len` lies in the mapping, which is readable, populated,
        // lives as long as `self`, and maps a file nothing writes (see the module doc).
        unsafe { std::slice::from_raw_parts(self.base.cast::<u8>().add(self.skip), self.len) }
    }

    /// How many bytes are mapped for the stretch.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the stretch is empty (never: `map` refuses one).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapped {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; no slice of it outlives `self`.
        let _ = unsafe { rustix::mm::munmap(self.base, self.span) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn maps_an_unaligned_stretch_exactly() {
        let mut f = tempfile::tempfile().expect("temp file");
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        f.write_all(&data).expect("write");
        for (offset, len) in [
            (0usize, 1usize),
            (1, 4096),
            (4095, 2),
            (12_345, 100_000),
            (0, 200_000),
        ] {
            let m = Mapped::map(&f, offset as u64, len).expect("map");
            assert_eq!(m.bytes(), &data[offset..offset + len], "{offset}+{len}");
            assert_eq!(m.len(), len);
        }
    }

    #[test]
    fn a_stretch_past_the_end_of_the_file_is_an_error_not_a_signal() {
        let mut f = tempfile::tempfile().expect("temp file");
        f.write_all(&[1u8; 10_000]).expect("write");
        // Pages wholly past the end would raise SIGBUS if touched; populating reports them.
        let err = Mapped::map(&f, 0, 64 * 1024).err().expect("past the end");
        assert_ne!(err.kind(), io::ErrorKind::Unsupported, "{err}");
        assert!(Mapped::map(&f, 20_000, 4096).is_err());
    }

    #[test]
    fn refuses_an_empty_stretch() {
        let f = tempfile::tempfile().expect("temp file");
        assert!(Mapped::map(&f, 0, 0).is_err());
    }
}
