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

use std::fmt;
use std::ops::Range;
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

#[derive(Debug)]
struct Queue {
    bandwidth: f64,
    ops: f64,
    free_at: Mutex<Option<Instant>>,
}

impl Queue {
    /// Waits for this call's turn on the device and its service time.
    async fn occupy(&self, bytes: u64) {
        let service = Duration::from_secs_f64(1.0 / self.ops + bytes as f64 / self.bandwidth);
        let done = {
            let mut free = self.free_at.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            let start = free.map_or(now, |f| f.max(now));
            *free = Some(start + service);
            start + service
        };
        tokio::time::sleep_until(done).await;
    }
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
                free_at: Mutex::new(None),
            }),
        }
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
        queue.occupy(0).await;
        listing
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
            queue.occupy(len).await;
            part.await
        })
    }

    async fn complete(&mut self) -> Result<PutResult> {
        self.queue.occupy(0).await;
        self.inner.complete().await
    }

    async fn abort(&mut self) -> Result<()> {
        self.queue.occupy(0).await;
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
        self.queue.occupy(payload.content_length() as u64).await;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.queue.occupy(0).await;
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
        self.queue.occupy(bytes).await;
        Ok(result)
    }

    /// Charged, as `get_opts` is, for the bytes it returns once the backend has answered (the
    /// ranges asked for may be malformed or run past the end).
    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let got = self.inner.get_ranges(location, ranges).await?;
        self.queue
            .occupy(got.iter().map(|b| b.len() as u64).sum())
            .await;
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
                    queue.occupy(0).await;
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
        self.queue.occupy(0).await;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let size = self.inner.head(from).await.map_or(0, |m| m.size);
        self.queue.occupy(size).await;
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.queue.occupy(0).await;
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
}
