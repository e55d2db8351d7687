//! GET bodies sent from the page cache by the kernel (`sendfile`), never copied through ours.
//!
//! A large GET on the local filesystem used to cost the gateway two copies per byte: out of the
//! page cache into a grain buffer, then out of that buffer into the socket. hyper only writes
//! bytes it holds, so to let the kernel move a file's bytes the body carries *placeholders*:
//! slices of one static run of zeros ([`PLACEHOLDER_MAX`] long, in the binary's zero-filled
//! data, so it costs no memory). Each placeholder stands for a stretch of a file queued on the
//! connection's [`SendfileLane`], in the order the body yields them, which is the order hyper
//! writes them in. The connection ([`super::SendfileSocket`]) recognises a placeholder by
//! its address and sends the stretch of the file instead.
//!
//! Placeholders are never sent as data: a placeholder the lane cannot account for (none
//! queued, or out of step with the stretch at the front) fails the write, and so does a write
//! that carries no placeholder while a stretch is queued (its placeholder was copied on the
//! way, as a hyper that flattened bodies would): either breaks the connection, and the client
//! sees a short body against its `Content-Length`. The lane is offered only where this holds
//! end to end: on an HTTP/1 connection whose writer is hyper's vectored queue (it hands body
//! chunks through unflattened, which `tests/hyper_contract.rs` pins), to a GET response body
//! and nothing else (copies, the agent's drain and other readers get bytes).

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

/// The longest stretch one placeholder stands for: the largest grain (`gateway.capacity.grain`
/// is at most 16 MiB).
pub const PLACEHOLDER_MAX: usize = 16 * 1024 * 1024;

/// The bytes placeholders are slices of. Never sent; zero-filled so that it lives in `.bss`.
static PLACEHOLDER: [u8; PLACEHOLDER_MAX] = [0; PLACEHOLDER_MAX];

/// Bytes stood in for by placeholders, on every connection of the process.
static STOOD_IN: AtomicU64 = AtomicU64::new(0);

/// How many bytes of files response bodies of this process have carried placeholders for
/// (counted before the body yields them, so before any of them is sent):
/// `sluice_sendfile_bytes_total` in `/metrics`.
pub fn bytes_stood_in() -> u64 {
    STOOD_IN.load(Ordering::Relaxed)
}

/// `len` bytes of `file` from `offset`, `sent` of them written.
struct Stretch {
    file: Arc<File>,
    offset: u64,
    len: u64,
    sent: u64,
}

/// What to send for a placeholder: `len` bytes of `file` from `offset`.
pub struct Send {
    pub file: Arc<File>,
    pub offset: u64,
    pub len: usize,
}

/// One connection's file stretches, queued by response bodies, taken by its writer.
#[derive(Clone, Default)]
pub struct SendfileLane(Arc<Mutex<VecDeque<Stretch>>>);

impl SendfileLane {
    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Stretch>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `len` bytes of `file` from `offset` and returns the placeholder the body carries
    /// for them; `None` (nothing queued) when `len` is 0 or over [`PLACEHOLDER_MAX`]. Called as
    /// the body yields the placeholder: a stretch queued ahead of it would fail the writes
    /// before it (see [`Self::is_pending`]).
    pub fn stand_in(&self, file: Arc<File>, offset: u64, len: usize) -> Option<Bytes> {
        if len == 0 || len > PLACEHOLDER_MAX {
            return None;
        }
        STOOD_IN.fetch_add(len as u64, Ordering::Relaxed);
        self.queue().push_back(Stretch {
            file,
            offset,
            len: len as u64,
            sent: 0,
        });
        Some(Bytes::from_static(&PLACEHOLDER[..len]))
    }

    /// Whether `buf` lies in the placeholder (so must not be written as it is).
    pub fn is_placeholder(buf: &[u8]) -> bool {
        let base = PLACEHOLDER.as_ptr() as usize;
        let at = buf.as_ptr() as usize;
        !buf.is_empty() && at >= base && at < base + PLACEHOLDER_MAX
    }

    /// What to send for `buf`, a placeholder slice at the head of the writer's bytes: the
    /// unsent rest (or the start of it) of the stretch at the front. An error when it does not
    /// line up with that stretch.
    pub fn next(&self, buf: &[u8]) -> io::Result<Send> {
        let at = (buf.as_ptr() as usize).wrapping_sub(PLACEHOLDER.as_ptr() as usize) as u64;
        let queue = self.queue();
        let Some(s) = queue.front() else {
            return Err(io::Error::other(
                "a placeholder with no file stretch queued",
            ));
        };
        if at != s.sent || buf.len() as u64 > s.len - s.sent {
            return Err(io::Error::other(format!(
                "a placeholder at {at} (+{}) out of step with its stretch ({} of {} sent)",
                buf.len(),
                s.sent,
                s.len
            )));
        }
        Ok(Send {
            file: Arc::clone(&s.file),
            offset: s.offset + s.sent,
            len: buf.len(),
        })
    }

    /// Whether a stretch is queued and not yet sent in full. Bodies stand a stretch in as they
    /// yield its placeholder, so while one is queued its placeholder is in hyper's hands, and
    /// every write must carry it.
    pub fn is_pending(&self) -> bool {
        !self.queue().is_empty()
    }

    /// Records `n` bytes of the front stretch as sent (dropping it once whole).
    pub fn sent(&self, n: usize) {
        let mut queue = self.queue();
        if let Some(s) = queue.front_mut() {
            s.sent += n as u64;
            if s.sent >= s.len {
                queue.pop_front();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> Arc<File> {
        Arc::new(tempfile::tempfile().expect("temp file"))
    }

    #[test]
    fn placeholders_follow_their_stretches_in_order() {
        let lane = SendfileLane::default();
        let a = lane.stand_in(file(), 100, 10).expect("queued");
        let b = lane.stand_in(file(), 7, 4).expect("queued");
        assert!(SendfileLane::is_placeholder(&a) && SendfileLane::is_placeholder(&b));
        assert!(!SendfileLane::is_placeholder(b"bytes"));
        let s = lane.next(&a).expect("front");
        assert_eq!((s.offset, s.len), (100, 10));
        lane.sent(6);
        // A partial write: hyper's next slice starts 6 bytes in.
        assert!(
            lane.next(&a).is_err(),
            "the whole slice again is out of step"
        );
        let s = lane.next(&a[6..]).expect("rest");
        assert_eq!((s.offset, s.len), (106, 4));
        lane.sent(4);
        let s = lane.next(&b).expect("second");
        assert_eq!((s.offset, s.len), (7, 4));
        lane.sent(4);
        assert!(lane.next(&b).is_err(), "nothing left queued");
    }

    #[test]
    fn empty_and_oversized_stretches_are_not_stood_in() {
        let lane = SendfileLane::default();
        assert!(lane.stand_in(file(), 0, 0).is_none());
        assert!(lane.stand_in(file(), 0, PLACEHOLDER_MAX + 1).is_none());
        let whole = lane
            .stand_in(file(), 0, PLACEHOLDER_MAX)
            .expect("at the limit");
        assert_eq!(whole.len(), PLACEHOLDER_MAX);
    }
}
