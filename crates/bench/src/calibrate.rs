//! `sluice calibrate`: measures what a backend can serve, to fill `[gateway.capacity]`, or
//! (`--agent`) what the node agent's local disk can, to fill `[agent.capacity]`.
//!
//! Bandwidth is measured with grain-sized transfers (the scheduler's unit) at high
//! concurrency, writes and reads separately, and the lower of the two is suggested: the
//! scheduler hands out one budget for both directions. Operations are measured with
//! zero-byte HEADs at high concurrency. Everything goes under `calibrate/` in the backend and
//! is deleted afterwards.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::Serialize;

use crate::BenchError;
use crate::gateway::payload;

const GRAIN: usize = 4 << 20;

#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    pub write_bytes_per_second: f64,
    pub read_bytes_per_second: f64,
    pub head_ops_per_second: f64,
    pub grains: usize,
    pub concurrency: usize,
}

impl Calibration {
    /// The `[gateway.capacity]` section to paste, with 10% headroom.
    pub fn toml(&self) -> String {
        self.section("gateway.capacity")
    }

    /// The `[agent.capacity]` section to paste (the node's local disk), with 10% headroom.
    pub fn agent_toml(&self) -> String {
        self.section("agent.capacity")
    }

    fn section(&self, table: &str) -> String {
        let bw = self.write_bytes_per_second.min(self.read_bytes_per_second) * 0.9;
        format!(
            "[{table}]\nbandwidth = \"{}MiB/s\"\nops = {}\n",
            (bw / 1_048_576.0).floor(),
            (self.head_ops_per_second * 0.9).floor()
        )
    }
}

async fn timed<F, Fut>(n: usize, concurrency: usize, f: F) -> Result<Duration, BenchError>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), object_store::Error>>,
{
    let start = Instant::now();
    let mut s = futures::stream::iter(0..n)
        .map(f)
        .buffer_unordered(concurrency);
    while let Some(r) = s.next().await {
        r?;
    }
    Ok(start.elapsed())
}

pub async fn run(
    store: Arc<dyn ObjectStore>,
    grains: usize,
    concurrency: usize,
) -> Result<Calibration, BenchError> {
    let body = payload(GRAIN, 11);
    let path = |i: usize| Path::from(format!("calibrate/grain-{i}"));
    let write = timed(grains, concurrency, |i| {
        let (store, body) = (Arc::clone(&store), body.clone());
        async move {
            store
                .put(&path(i), PutPayload::from(body))
                .await
                .map(|_| ())
        }
    })
    .await?;
    let read = timed(grains, concurrency, |i| {
        let store = Arc::clone(&store);
        async move { store.get(&path(i)).await?.bytes().await.map(|_| ()) }
    })
    .await?;
    let heads = grains * 20;
    let head = timed(heads, concurrency * 4, |i| {
        let store = Arc::clone(&store);
        async move { store.head(&path(i % grains)).await.map(|_| ()) }
    })
    .await?;
    for i in 0..grains {
        let _ = store.delete(&path(i)).await;
    }
    let bytes = (grains * GRAIN) as f64;
    Ok(Calibration {
        write_bytes_per_second: bytes / write.as_secs_f64(),
        read_bytes_per_second: bytes / read.as_secs_f64(),
        head_ops_per_second: heads as f64 / head.as_secs_f64(),
        grains,
        concurrency,
    })
}
