//! Transactions from blocking threads: each statement is one `Handle::block_on` on the
//! runtime that owns the pool's connections, and every write transaction is SERIALIZABLE,
//! retried from the start on a serialization failure (SQLSTATE 40001) or a deadlock (40P01)
//! with jittered exponential backoff.
//!
//! `Handle::block_on` panics when called from an async task: calling the catalog from a
//! runtime worker instead of a blocking thread fails loudly at the first call, never
//! deadlocks.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use std::str::FromStr;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Transaction};
use sluice_meta::MetaError;
use tokio::runtime::Handle;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{IsolationLevel, NoTls, Row};

/// How often a transaction is tried before its conflict is reported.
const ATTEMPTS: u32 = 30;

/// A failure inside a transaction: a database error (perhaps retryable) or a domain refusal.
#[derive(Debug)]
pub(crate) enum TxError {
    Pg(tokio_postgres::Error),
    Meta(MetaError),
}

impl From<tokio_postgres::Error> for TxError {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Pg(e)
    }
}

impl From<MetaError> for TxError {
    fn from(e: MetaError) -> Self {
        Self::Meta(e)
    }
}

pub(crate) type TxResult<T> = Result<T, TxError>;

pub(crate) fn db_error(e: impl std::error::Error + Send + Sync + 'static) -> MetaError {
    MetaError::Database(Box::new(e))
}

fn retryable(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    )
}

/// One transaction in progress, driven from a blocking thread.
pub(crate) struct Tx<'a> {
    handle: &'a Handle,
    tx: Transaction<'a>,
}

type Params<'p> = &'p [&'p (dyn ToSql + Sync)];

impl Tx<'_> {
    pub(crate) fn query(&self, sql: &str, params: Params<'_>) -> TxResult<Vec<Row>> {
        Ok(self.handle.block_on(async {
            let st = self.tx.prepare_cached(sql).await?;
            self.tx.query(&st, params).await
        })?)
    }

    pub(crate) fn query_opt(&self, sql: &str, params: Params<'_>) -> TxResult<Option<Row>> {
        Ok(self.handle.block_on(async {
            let st = self.tx.prepare_cached(sql).await?;
            self.tx.query_opt(&st, params).await
        })?)
    }

    pub(crate) fn query_one(&self, sql: &str, params: Params<'_>) -> TxResult<Row> {
        Ok(self.handle.block_on(async {
            let st = self.tx.prepare_cached(sql).await?;
            self.tx.query_one(&st, params).await
        })?)
    }

    pub(crate) fn execute(&self, sql: &str, params: Params<'_>) -> TxResult<u64> {
        Ok(self.handle.block_on(async {
            let st = self.tx.prepare_cached(sql).await?;
            self.tx.execute(&st, params).await
        })?)
    }

    /// A batch of statements without parameters (the schema's migrations).
    pub(crate) fn batch(&self, sql: &str) -> TxResult<()> {
        Ok(self.handle.block_on(self.tx.batch_execute(sql))?)
    }
}

/// The pool and the runtime its connections run on.
#[derive(Clone)]
pub(crate) struct Db {
    pub(crate) pool: Pool,
    pub(crate) handle: Handle,
}

impl Db {
    /// A pool of up to `size` connections to `url`, run on `handle`'s runtime (connected
    /// lazily, at the first transaction).
    pub(crate) fn connect(url: &str, handle: Handle, size: usize) -> Result<Self, MetaError> {
        let config = tokio_postgres::Config::from_str(url).map_err(db_error)?;
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(size.max(1))
            .build()
            .map_err(db_error)?;
        Ok(Self { pool, handle })
    }

    /// Runs `f` in a SERIALIZABLE transaction and commits it, trying again from the start
    /// while it loses a conflict. `f` must be safe to run more than once: it changes nothing
    /// outside the transaction.
    pub(crate) fn write<T>(&self, f: impl FnMut(&Tx<'_>) -> TxResult<T>) -> Result<T, MetaError> {
        self.run(IsolationLevel::Serializable, false, f)
    }

    /// Runs `f` in a read-only snapshot (REPEATABLE READ, which CockroachDB runs as
    /// SERIALIZABLE).
    pub(crate) fn read<T>(&self, f: impl FnMut(&Tx<'_>) -> TxResult<T>) -> Result<T, MetaError> {
        self.run(IsolationLevel::RepeatableRead, true, f)
    }

    fn run<T>(
        &self,
        level: IsolationLevel,
        read_only: bool,
        mut f: impl FnMut(&Tx<'_>) -> TxResult<T>,
    ) -> Result<T, MetaError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut client = self.handle.block_on(self.pool.get()).map_err(db_error)?;
            let tx = self
                .handle
                .block_on(
                    client
                        .build_transaction()
                        .isolation_level(level)
                        .read_only(read_only)
                        .start(),
                )
                .map_err(db_error)?;
            let tx = Tx {
                handle: &self.handle,
                tx,
            };
            let outcome = match f(&tx) {
                Ok(v) => self
                    .handle
                    .block_on(tx.tx.commit())
                    .map(|()| v)
                    .map_err(TxError::Pg),
                Err(e) => {
                    // Dropping the transaction rolls it back.
                    drop(tx);
                    Err(e)
                }
            };
            match outcome {
                Ok(v) => return Ok(v),
                Err(TxError::Meta(e)) => return Err(e),
                Err(TxError::Pg(e)) if retryable(&e) && attempt < ATTEMPTS => {
                    tracing::debug!(attempt, "catalog transaction lost a conflict; retrying");
                    std::thread::sleep(backoff(attempt));
                }
                Err(TxError::Pg(e)) => return Err(db_error(e)),
            }
        }
    }
}

/// Full jitter over an exponential ceiling: 1 ms doubling to 128 ms.
fn backoff(attempt: u32) -> Duration {
    let ceiling_us = 1_000u64 << attempt.min(7);
    let jitter = RandomState::new().hash_one(attempt) % ceiling_us;
    Duration::from_micros(jitter.max(100))
}

#[cfg(test)]
mod tests;
