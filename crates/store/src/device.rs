//! An emulated storage device in front of any backend: a single FIFO server with a bounded
//! bandwidth and operation rate, so that the shared tier saturates at a chosen capacity on any
//! machine (benchmarks of isolation need a tier that contention can actually fill).
//!
//! Each backend call occupies the device for `1/ops + bytes/bandwidth` seconds, in arrival
//! order; a call returns once its turn has been served, so concurrent load builds a queue and
//! latency grows with it, as on a real device. It is a decorator over `ObjectStore` and
//! forwards every method, charging each, those with defaults in the trait included:
//! `get_ranges` is one call for the sum of its ranges, a listing one call before its first
//! entry.
//!
//! The device is this process's ([`EmulatedDevice::new`], on tokio's clock, so tests run it in
//! paused time) or one shared by every process on the machine that names the same state file
//! ([`EmulatedDevice::shared`], `[backend.emulate] shared`): several gateways then contend on
//! one tier as they would on a real one. The FIFO has one piece of state, the instant the
//! device is next free; shared, it lives in the file as a `CLOCK_MONOTONIC` reading (one clock
//! for every process of one boot), and a call reserves its turn by reading it and writing it
//! forward under an exclusive lock on the file (`flock`; the lock is released with the file if
//! a process dies, and a write of 8 bytes at offset 44 is all a crash can leave half done: a
//! state that does not parse is an idle device, see [`SharedClock`]). The call then sleeps on
//! tokio's clock until its turn is served.

use std::fmt;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
    UploadPart,
};
use tokio::time::Instant;

/// When the device is next free: this process's, or the shared state file's.
#[derive(Debug)]
enum Clock {
    Local(Mutex<Option<Instant>>),
    Shared(Arc<SharedClock>),
}

#[derive(Debug)]
struct Queue {
    bandwidth: f64,
    ops: f64,
    clock: Clock,
}

impl Queue {
    /// Waits for this call's turn on the device and its service time.
    async fn occupy(&self, bytes: u64) -> Result<()> {
        let service = Duration::from_secs_f64(1.0 / self.ops + bytes as f64 / self.bandwidth);
        match &self.clock {
            Clock::Local(free_at) => {
                let done = {
                    let mut free = free_at.lock().unwrap_or_else(PoisonError::into_inner);
                    let now = Instant::now();
                    let start = free.map_or(now, |f| f.max(now));
                    *free = Some(start + service);
                    start + service
                };
                tokio::time::sleep_until(done).await;
            }
            Clock::Shared(clock) => {
                let clock = Arc::clone(clock);
                let wait = tokio::task::spawn_blocking(move || clock.reserve(service))
                    .await
                    .map_err(|e| device_error(std::io::Error::other(e)))?
                    .map_err(device_error)?;
                tokio::time::sleep(wait).await;
            }
        }
        Ok(())
    }
}

fn device_error(e: std::io::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "EmulatedDevice",
        source: Box::new(e),
    }
}

/// The state file of a device shared between processes: [`MAGIC`], the boot it was written in
/// (`/proc/sys/kernel/random/boot_id`, 36 bytes) and the `CLOCK_MONOTONIC` nanosecond at which
/// the device is next free (little-endian u64). A state from another boot (its clock started
/// over), a short one or a garbled one is an idle device: the next call starts at once and
/// writes a whole state.
#[derive(Debug)]
struct SharedClock {
    path: PathBuf,
    /// One reservation at a time within this process too: `flock` is held by the open file,
    /// which this process's calls share.
    file: Mutex<File>,
    boot: [u8; BOOT_LEN],
}

/// The first bytes of a shared device's state file.
const MAGIC: &[u8; 8] = b"SLDEVQ01";
const BOOT_LEN: usize = 36;
const STATE_LEN: usize = MAGIC.len() + BOOT_LEN + 8;

/// Why a shared device's state file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("emulated device state {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "emulated device state {}: the file holds something else (it does not begin with \
         sluice's device state); name a new file or an empty one",
        path.display()
    )]
    NotDeviceState { path: PathBuf },
}

/// The `CLOCK_MONOTONIC` reading in nanoseconds: the same clock in every process of one boot.
fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

/// This boot's id, to tell a state written before a reboot (zeros where the kernel has none).
fn boot_id() -> [u8; BOOT_LEN] {
    let mut id = [0u8; BOOT_LEN];
    if let Ok(text) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
        let text = text.trim().as_bytes();
        let n = text.len().min(BOOT_LEN);
        id[..n].copy_from_slice(&text[..n]);
    }
    id
}

impl SharedClock {
    /// Opens (creating it if absent) the state file at `path`. A file that holds anything but a
    /// device state, even a short one, is refused and left as it is.
    fn open(path: &std::path::Path) -> Result<Self, DeviceError> {
        let io = |source| DeviceError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        file.lock().map_err(io)?;
        let mut head = [0u8; MAGIC.len()];
        let read = read_prefix(&file, &mut head);
        file.unlock().map_err(io)?;
        let n = read.map_err(io)?;
        if n > 0 && !MAGIC.starts_with(&head[..n]) {
            return Err(DeviceError::NotDeviceState {
                path: path.to_path_buf(),
            });
        }
        Ok(Self {
            path: path.to_path_buf(),
            file: Mutex::new(file),
            boot: boot_id(),
        })
    }

    /// Reserves the device for `service` after every call reserved before it, in any process;
    /// returns how long from now until this call's turn has been served. Blocks on the file's
    /// lock (call it off the async threads).
    fn reserve(&self, service: Duration) -> std::io::Result<Duration> {
        let file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        file.lock()?;
        let reserved = self.reserve_locked(&file, service);
        let unlocked = file.unlock();
        let wait = reserved?;
        unlocked?;
        Ok(wait)
    }

    fn reserve_locked(&self, file: &File, service: Duration) -> std::io::Result<Duration> {
        let mut state = [0u8; STATE_LEN];
        let n = read_prefix(file, &mut state)?;
        let now = monotonic_ns();
        let free = self.free_at(&state[..n]).unwrap_or(now);
        let service = u64::try_from(service.as_nanos()).unwrap_or(u64::MAX);
        let done = free.max(now).saturating_add(service);
        let mut next = [0u8; STATE_LEN];
        next[..MAGIC.len()].copy_from_slice(MAGIC);
        next[MAGIC.len()..MAGIC.len() + BOOT_LEN].copy_from_slice(&self.boot);
        next[MAGIC.len() + BOOT_LEN..].copy_from_slice(&done.to_le_bytes());
        if n == STATE_LEN && state[..MAGIC.len() + BOOT_LEN] == next[..MAGIC.len() + BOOT_LEN] {
            // Only the instant changes.
            file.write_all_at(
                &next[MAGIC.len() + BOOT_LEN..],
                (MAGIC.len() + BOOT_LEN) as u64,
            )?;
        } else {
            if n != 0 {
                tracing::warn!(
                    path = %self.path.display(),
                    "emulated device state unreadable or from another boot: the device starts idle"
                );
            }
            file.write_all_at(&next, 0)?;
            file.set_len(STATE_LEN as u64)?;
        }
        Ok(Duration::from_nanos(done - now))
    }

    /// The instant the state says the device is next free, if it is a whole state of this
    /// boot.
    fn free_at(&self, state: &[u8]) -> Option<u64> {
        let (magic, rest) = state.split_first_chunk::<8>()?;
        let (boot, rest) = rest.split_first_chunk::<BOOT_LEN>()?;
        let free = rest.first_chunk::<8>()?;
        (magic == MAGIC && *boot == self.boot && rest.len() == 8).then(|| u64::from_le_bytes(*free))
    }
}

/// Reads from the start of `file` into `buf` until it is full or the file ends; returns the
/// bytes read.
fn read_prefix(file: &File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The backend `inner` behind a device of `bandwidth` bytes/s and `ops` operations/s.
#[derive(Debug, Clone)]
pub struct EmulatedDevice {
    inner: Arc<dyn ObjectStore>,
    queue: Arc<Queue>,
}

impl EmulatedDevice {
    pub fn new(inner: Arc<dyn ObjectStore>, bandwidth: f64, ops: f64) -> Self {
        Self {
            inner,
            queue: Arc::new(Queue {
                bandwidth,
                ops,
                clock: Clock::Local(Mutex::new(None)),
            }),
        }
    }

    /// The backend `inner` behind the device every process on this machine naming the state
    /// file `path` occupies with it (created if absent; a file holding anything else is
    /// refused). Each process must give the same `bandwidth` and `ops`: a call is charged at
    /// its own process's rate.
    pub fn shared(
        inner: Arc<dyn ObjectStore>,
        bandwidth: f64,
        ops: f64,
        path: &std::path::Path,
    ) -> Result<Self, DeviceError> {
        Ok(Self {
            inner,
            queue: Arc::new(Queue {
                bandwidth,
                ops,
                clock: Clock::Shared(Arc::new(SharedClock::open(path)?)),
            }),
        })
    }
}

impl fmt::Display for EmulatedDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "EmulatedDevice({} B/s, {} ops/s, {})",
            self.queue.bandwidth, self.queue.ops, self.inner
        )
    }
}

/// A listing that occupies the device for one operation before its first entry.
fn paced(
    queue: Arc<Queue>,
    listing: BoxStream<'static, Result<ObjectMeta>>,
) -> BoxStream<'static, Result<ObjectMeta>> {
    futures::stream::once(async move {
        match queue.occupy(0).await {
            Ok(()) => listing,
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        }
    })
    .flatten()
    .boxed()
}

#[derive(Debug)]
struct DeviceUpload {
    inner: Box<dyn MultipartUpload>,
    queue: Arc<Queue>,
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl MultipartUpload for DeviceUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let queue = Arc::clone(&self.queue);
        let len = data.content_length() as u64;
        let part = self.inner.put_part(data);
        Box::pin(async move {
            queue.occupy(len).await?;
            part.await
        })
    }

    async fn complete(&mut self) -> Result<PutResult> {
        self.queue.occupy(0).await?;
        self.inner.complete().await
    }

    async fn abort(&mut self) -> Result<()> {
        self.queue.occupy(0).await?;
        self.inner.abort().await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ObjectStore for EmulatedDevice {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.queue.occupy(payload.content_length() as u64).await?;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.queue.occupy(0).await?;
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(DeviceUpload {
            inner,
            queue: Arc::clone(&self.queue),
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let head = options.head;
        let result = self.inner.get_opts(location, options).await?;
        let bytes = if head {
            0
        } else {
            result.range.end - result.range.start
        };
        self.queue.occupy(bytes).await?;
        Ok(result)
    }

    /// Charged, as `get_opts` is, for the bytes it returns once the backend has answered (the
    /// ranges asked for may be malformed or run past the end).
    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let got = self.inner.get_ranges(location, ranges).await?;
        self.queue
            .occupy(got.iter().map(|b| b.len() as u64).sum())
            .await?;
        Ok(got)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let queue = Arc::clone(&self.queue);
        let paced = locations
            .then(move |l| {
                let queue = Arc::clone(&queue);
                async move {
                    queue.occupy(0).await?;
                    l
                }
            })
            .boxed();
        self.inner.delete_stream(paced)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        paced(Arc::clone(&self.queue), self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        paced(
            Arc::clone(&self.queue),
            self.inner.list_with_offset(prefix, offset),
        )
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.queue.occupy(0).await?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let size = self.inner.head(from).await.map_or(0, |m| m.size);
        self.queue.occupy(size).await?;
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.queue.occupy(0).await?;
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use object_store::memory::InMemory;

    #[tokio::test(start_paused = true)]
    async fn calls_queue_in_order_at_the_device_rate() {
        let dev = EmulatedDevice::new(Arc::new(InMemory::new()), 1024.0 * 1024.0, 1000.0);
        let start = Instant::now();
        let body = Bytes::from(vec![7u8; 1024 * 1024]);
        let puts: Vec<_> = (0..4)
            .map(|i| {
                let dev = dev.clone();
                let body = body.clone();
                tokio::spawn(async move {
                    dev.put(&Path::from(format!("o{i}")), PutPayload::from(body))
                        .await
                        .expect("put");
                    start.elapsed()
                })
            })
            .collect();
        let mut done = Vec::new();
        for p in puts {
            done.push(p.await.expect("task"));
        }
        done.sort();
        // Four 1 MiB writes at 1 MiB/s, served one after another: ~1, 2, 3, 4 s.
        for (i, d) in done.iter().enumerate() {
            let want = (i + 1) as f64 * 1.001;
            assert!((d.as_secs_f64() - want).abs() < 0.01, "{i}: {d:?}");
        }
        let got = dev
            .get(&Path::from("o0"))
            .await
            .expect("get")
            .bytes()
            .await
            .expect("bytes");
        assert_eq!(got, body);
    }

    /// The methods `ObjectStore` provides defaults for are charged as the device's policy
    /// says, not as the default would charge them: `get_ranges` is one operation for the sum
    /// of its ranges (the default would issue one `get_opts` per range far apart), and a
    /// listing is one operation (a forwarded stream would pass uncharged).
    #[tokio::test(start_paused = true)]
    async fn ranged_reads_and_listings_occupy_the_device() {
        const MIB: u64 = 1024 * 1024;
        let inner = Arc::new(InMemory::new());
        let path = Path::from("o");
        inner
            .put(&path, PutPayload::from(vec![1u8; 5 * MIB as usize]))
            .await
            .expect("put");
        // 100 ms an operation, 1 MiB/s.
        let dev = EmulatedDevice::new(inner, MIB as f64, 10.0);
        let charged = |bytes: u64| Duration::from_secs_f64(0.1 + bytes as f64 / MIB as f64);
        let close = |got: Duration, want: Duration| got.abs_diff(want) < Duration::from_millis(2);

        let start = Instant::now();
        let got = dev
            .get_ranges(&path, &[0..100_000, 4 * MIB..4 * MIB + 100_000])
            .await
            .expect("get_ranges");
        assert_eq!(got.iter().map(Bytes::len).sum::<usize>(), 200_000);
        let took = start.elapsed();
        assert!(close(took, charged(200_000)), "get_ranges took {took:?}");

        let start = Instant::now();
        let listed: Vec<_> = dev.list(None).collect().await;
        assert_eq!(listed.len(), 1);
        let took = start.elapsed();
        assert!(close(took, charged(0)), "list took {took:?}");

        let start = Instant::now();
        let listed: Vec<_> = dev.list_with_offset(None, &Path::from("a")).collect().await;
        assert_eq!(listed.len(), 1);
        let took = start.elapsed();
        assert!(close(took, charged(0)), "list_with_offset took {took:?}");
    }

    /// Two devices on one state file, as two gateways' processes would open it: their calls
    /// take turns on one device. `ops` = 2 makes every call half a second of service.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn devices_sharing_a_state_file_serve_one_queue() {
        let dir = tempfile::tempdir().expect("dir");
        let state = dir.path().join("tier.dev");
        let service = Duration::from_millis(500);
        let open =
            || EmulatedDevice::shared(Arc::new(InMemory::new()), 1e12, 2.0, &state).expect("open");
        let (a, b) = (open(), open());
        let start = Instant::now();
        let call = |dev: EmulatedDevice, key: &'static str| async move {
            dev.put(&Path::from(key), PutPayload::from_static(b"x"))
                .await
                .expect("put");
            start.elapsed()
        };
        let both = tokio::time::timeout(
            Duration::from_secs(10),
            futures::future::join(call(a.clone(), "a"), call(b.clone(), "b")),
        )
        .await
        .expect("both calls were served within 10 s");
        let (first, second) = (both.0.min(both.1), both.0.max(both.1));
        let slack = Duration::from_millis(300);
        assert!(
            first >= service && first < service + slack,
            "the first call took {first:?}"
        );
        assert!(
            second >= 2 * service && second < 2 * service + slack,
            "the second call waited for the first: {second:?}"
        );

        // A device whose state file another device left idle starts at once.
        tokio::time::sleep_until(start + 2 * service).await;
        let start = Instant::now();
        a.head(&Path::from("a")).await.expect("head");
        let took = start.elapsed();
        assert!(took >= service && took < service + slack, "{took:?}");
    }

    /// A state file cut short or overwritten with garbage (a crash mid-write, a hand edit) is an
    /// idle device, never a panic or a wait for ever; a state from another boot (its clock
    /// started over, the instant may lie hours ahead) too. A file that is not a device state at
    /// all is refused with its path, and left intact.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_short_garbled_or_stale_state_is_an_idle_device_and_a_foreign_file_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let state = dir.path().join("tier.dev");
        let service = Duration::from_millis(200);
        let mut old_boot = Vec::from(*MAGIC);
        old_boot.extend_from_slice(&[b'z'; BOOT_LEN]);
        old_boot.extend_from_slice(&u64::MAX.to_le_bytes());
        let mut far_ahead = Vec::from(*MAGIC);
        far_ahead.extend_from_slice(&boot_id());
        for (what, bytes) in [
            ("short", MAGIC[..3].to_vec()),
            ("magic only", MAGIC.to_vec()),
            ("garbled", [MAGIC.as_slice(), &[0xff; 20]].concat()),
            ("another boot", old_boot),
            ("an instant cut short", far_ahead),
        ] {
            std::fs::write(&state, &bytes).expect("write");
            let dev = EmulatedDevice::shared(Arc::new(InMemory::new()), 1e12, 5.0, &state)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let start = Instant::now();
            tokio::time::timeout(
                Duration::from_secs(5),
                dev.put(&Path::from("o"), PutPayload::from_static(b"x")),
            )
            .await
            .unwrap_or_else(|_| panic!("{what}: the device did not start idle"))
            .expect("put");
            let took = start.elapsed();
            assert!(
                took >= service && took < service + Duration::from_millis(300),
                "{what}: {took:?}"
            );
            assert_eq!(
                std::fs::read(&state).expect("read").len(),
                STATE_LEN,
                "{what}: a whole state written"
            );
        }

        let foreign = dir.path().join("notes.txt");
        std::fs::write(&foreign, "not a device").expect("write");
        let err = EmulatedDevice::shared(Arc::new(InMemory::new()), 1e12, 5.0, &foreign)
            .expect_err("refused");
        assert!(matches!(err, DeviceError::NotDeviceState { .. }), "{err:?}");
        assert!(err.to_string().contains("notes.txt"), "{err}");
        assert_eq!(
            std::fs::read_to_string(&foreign).expect("read"),
            "not a device"
        );
    }
}
