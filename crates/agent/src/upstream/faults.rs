//! [`Faulty`]: an [`UpstreamStore`] decorator that injects failures, for tests. Every method
//! forwards to the inner store unless the plan says otherwise: scripted (the next calls, or
//! those after the next N), or drawn from a seeded RNG at a given rate, so a run replays.
//! A fault either answers an error without forwarding ([`Fault::Fail`]), forwards and then
//! answers an error as if the answer were lost on its way back ([`Fault::LoseAnswer`]), or
//! forwards late ([`Fault::Delay`], on tokio's clock: free in paused time).

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use object_store::PutPayload;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use sluice_meta::ObjectRecord;

use super::{Head, UpstreamError, UpstreamStore};

/// Which operation a call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    CreateBucket,
    DeleteBucket,
    Put,
    CreateMultipart,
    PutPart,
    CompleteMultipart,
    AbortMultipart,
    Head,
    Delete,
}

/// One call reaching the decorator (`key` is empty for bucket calls).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub kind: CallKind,
    pub tenant: String,
    pub bucket: String,
    pub key: String,
}

/// What happens to a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer this error; the inner store never sees the call.
    Fail(UpstreamError),
    /// The inner store carries the call out, then the caller gets this error instead of its
    /// answer (a timeout after the upstream acted).
    LoseAnswer(UpstreamError),
    /// Wait this long on tokio's clock, then forward.
    Delay(Duration),
}

type Observer = Box<dyn Fn(&Call, &Fault) + Send + Sync>;

#[derive(Default)]
struct Plan {
    /// The next calls' fates, in order (`None`: forward).
    script: VecDeque<Option<Fault>>,
    random: Option<Random>,
}

struct Random {
    rng: Xoshiro256PlusPlus,
    rate: f64,
    faults: Vec<Fault>,
}

/// The decorator (see the module doc).
pub struct Faulty<U> {
    inner: U,
    plan: Mutex<Plan>,
    observer: Option<Observer>,
}

impl<U: UpstreamStore> Faulty<U> {
    pub fn new(inner: U) -> Self {
        Self {
            inner,
            plan: Mutex::default(),
            observer: None,
        }
    }

    /// Calls `f` with every call a fault is injected into, as it is injected.
    #[must_use]
    pub fn observed(mut self, f: impl Fn(&Call, &Fault) + Send + Sync + 'static) -> Self {
        self.observer = Some(Box::new(f));
        self
    }

    pub fn inner(&self) -> &U {
        &self.inner
    }

    fn plan(&self) -> MutexGuard<'_, Plan> {
        self.plan.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forwards the next `ok` calls, then gives the `n` after them `fault` (after those already
    /// scripted).
    pub fn fail_after(&self, ok: usize, n: usize, fault: &Fault) {
        let mut p = self.plan();
        p.script.extend(std::iter::repeat_n(None, ok));
        p.script.extend(std::iter::repeat_n(Some(fault.clone()), n));
    }

    /// Gives each unscripted call, with probability `rate`, one of `faults` (drawn from an RNG
    /// seeded with `seed`).
    pub fn randomly(&self, seed: u64, rate: f64, faults: Vec<Fault>) {
        self.plan().random = (!faults.is_empty()).then(|| Random {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            rate,
            faults,
        });
    }

    /// Forwards every call from now on.
    pub fn clear(&self) {
        let mut p = self.plan();
        p.script.clear();
        p.random = None;
    }

    fn fate(&self, call: &Call) -> Option<Fault> {
        let fault = {
            let mut p = self.plan();
            match p.script.pop_front() {
                Some(scripted) => scripted,
                None => p.random.as_mut().and_then(|r| {
                    if r.rng.random_bool(r.rate.clamp(0.0, 1.0)) {
                        let i = r.rng.random_range(0..r.faults.len());
                        Some(r.faults[i].clone())
                    } else {
                        None
                    }
                }),
            }
        };
        if let (Some(f), Some(observe)) = (&fault, &self.observer) {
            observe(call, f);
        }
        fault
    }

    /// Runs `forward` (the inner call, not started yet) as the plan says.
    async fn run<T>(
        &self,
        kind: CallKind,
        (tenant, bucket, key): (&str, &str, &str),
        forward: impl Future<Output = Result<T, UpstreamError>>,
    ) -> Result<T, UpstreamError> {
        let call = Call {
            kind,
            tenant: tenant.to_owned(),
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        };
        match self.fate(&call) {
            None => forward.await,
            Some(Fault::Fail(e)) => Err(e),
            Some(Fault::LoseAnswer(e)) => {
                let _lost = forward.await;
                Err(e)
            }
            Some(Fault::Delay(d)) => {
                tokio::time::sleep(d).await;
                forward.await
            }
        }
    }
}

#[async_trait::async_trait]
impl<U: UpstreamStore> UpstreamStore for Faulty<U> {
    fn endpoint(&self) -> &str {
        self.inner.endpoint()
    }

    async fn create_bucket(&self, tenant: &str, bucket: &str) -> Result<(), UpstreamError> {
        let forward = self.inner.create_bucket(tenant, bucket);
        self.run(CallKind::CreateBucket, (tenant, bucket, ""), forward)
            .await
    }

    async fn delete_bucket(&self, tenant: &str, bucket: &str) -> Result<(), UpstreamError> {
        let forward = self.inner.delete_bucket(tenant, bucket);
        self.run(CallKind::DeleteBucket, (tenant, bucket, ""), forward)
            .await
    }

    async fn put(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        payload: PutPayload,
        object: &ObjectRecord,
    ) -> Result<Option<String>, UpstreamError> {
        let forward = self.inner.put(tenant, bucket, key, payload, object);
        self.run(CallKind::Put, (tenant, bucket, key), forward)
            .await
    }

    async fn create_multipart(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        object: &ObjectRecord,
    ) -> Result<String, UpstreamError> {
        let forward = self.inner.create_multipart(tenant, bucket, key, object);
        self.run(CallKind::CreateMultipart, (tenant, bucket, key), forward)
            .await
    }

    async fn put_part(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
        index: usize,
        payload: PutPayload,
    ) -> Result<String, UpstreamError> {
        let forward = self
            .inner
            .put_part(tenant, bucket, key, upload_id, index, payload);
        self.run(CallKind::PutPart, (tenant, bucket, key), forward)
            .await
    }

    async fn complete_multipart(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
        etags: Vec<String>,
    ) -> Result<(), UpstreamError> {
        let forward = self
            .inner
            .complete_multipart(tenant, bucket, key, upload_id, etags);
        self.run(CallKind::CompleteMultipart, (tenant, bucket, key), forward)
            .await
    }

    async fn abort_multipart(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), UpstreamError> {
        let forward = self.inner.abort_multipart(tenant, bucket, key, upload_id);
        self.run(CallKind::AbortMultipart, (tenant, bucket, key), forward)
            .await
    }

    async fn head(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
    ) -> Result<Option<Head>, UpstreamError> {
        let forward = self.inner.head(tenant, bucket, key);
        self.run(CallKind::Head, (tenant, bucket, key), forward)
            .await
    }

    async fn delete(&self, tenant: &str, bucket: &str, key: &str) -> Result<(), UpstreamError> {
        let forward = self.inner.delete(tenant, bucket, key);
        self.run(CallKind::Delete, (tenant, bucket, key), forward)
            .await
    }
}
