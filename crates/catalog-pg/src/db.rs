//! Transactions from blocking threads: each statement is one `Handle::block_on` on the
//! runtime that owns the pool's connections, and every write transaction is SERIALIZABLE,
//! retried from the start on a serialization failure (SQLSTATE 40001) or a deadlock (40P01)
//! with jittered exponential backoff.
//!
//! A transaction's `BEGIN` is sent with its first statement, pipelined on the connection
//! (the server answers them in order), so it costs no round trip of its own: a commit of
//! `n` statements is `n + 1` round trips (the last one `COMMIT`), not `n + 2`.
//!
//! `Handle::block_on` panics when called from an async task: calling the catalog from a
//! runtime worker instead of a blocking thread fails loudly at the first call, never
//! deadlocks.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use std::str::FromStr;

use std::cell::Cell;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use sluice_meta::MetaError;
use tokio::runtime::Handle;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row, Statement};

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

impl TxError {
    /// The error as the catalog reports it.
    pub(crate) fn into_meta(self) -> MetaError {
        match self {
            Self::Pg(e) => db_error(e),
            Self::Meta(e) => e,
        }
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

/// One transaction in progress on a pooled connection, driven from a blocking thread. Its
/// `BEGIN` goes out with its first statement; it ends with [`Tx::commit`], or with a
/// `ROLLBACK` when dropped.
pub(crate) struct Tx<'a> {
    handle: &'a Handle,
    client: &'a Object,
    /// `BEGIN ...`, until it has been sent.
    begin: Cell<Option<&'static str>>,
    /// The transaction is over (committed or rolled back) or never began.
    done: Cell<bool>,
}

type Params<'p> = &'p [&'p (dyn ToSql + Sync)];

impl Tx<'_> {
    /// Runs `st` through `run`, with the transaction's `BEGIN` pipelined ahead of it if it
    /// has not been sent yet.
    fn statement<T, F>(&self, sql: &str, run: impl FnOnce(Statement) -> F) -> TxResult<T>
    where
        F: std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    {
        Ok(self.handle.block_on(async {
            let st = self.client.prepare_cached(sql).await?;
            match self.begin.take() {
                None => run(st).await,
                Some(begin) => {
                    // Polled in order: `BEGIN` is on the wire before the statement.
                    let (opened, out) = tokio::join!(self.client.batch_execute(begin), run(st));
                    opened?;
                    out
                }
            }
        })?)
    }

    pub(crate) fn query(&self, sql: &str, params: Params<'_>) -> TxResult<Vec<Row>> {
        self.statement(
            sql,
            |st| async move { self.client.query(&st, params).await },
        )
    }

    pub(crate) fn query_opt(&self, sql: &str, params: Params<'_>) -> TxResult<Option<Row>> {
        self.statement(
            sql,
            |st| async move { self.client.query_opt(&st, params).await },
        )
    }

    pub(crate) fn query_one(&self, sql: &str, params: Params<'_>) -> TxResult<Row> {
        self.statement(
            sql,
            |st| async move { self.client.query_one(&st, params).await },
        )
    }

    pub(crate) fn execute(&self, sql: &str, params: Params<'_>) -> TxResult<u64> {
        self.statement(
            sql,
            |st| async move { self.client.execute(&st, params).await },
        )
    }

    /// A batch of statements without parameters (the schema's migrations).
    pub(crate) fn batch(&self, sql: &str) -> TxResult<()> {
        if let Some(begin) = self.begin.take() {
            self.handle.block_on(self.client.batch_execute(begin))?;
        }
        Ok(self.handle.block_on(self.client.batch_execute(sql))?)
    }

    /// Commits (a transaction that ran no statement has nothing to commit).
    fn commit(&self) -> Result<(), tokio_postgres::Error> {
        if self.begin.take().is_some() {
            self.done.set(true);
            return Ok(());
        }
        self.done.set(true);
        self.handle.block_on(self.client.batch_execute("COMMIT"))
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if self.done.get() || self.begin.get().is_some() {
            return;
        }
        // An error ended the transaction early (perhaps the server aborted it already):
        // roll it back before the connection returns to the pool. Should even that fail,
        // the connection is broken and the pool's recycling check drops it.
        let _ = self.handle.block_on(self.client.batch_execute("ROLLBACK"));
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

    /// Runs one read-only statement on its own, outside any transaction block: the statement
    /// is its own snapshot (on CockroachDB an implicit transaction, serializable), so a
    /// single-row read costs one round trip, not three (`BEGIN`, the statement, `COMMIT`).
    pub(crate) fn read_one(&self, sql: &str, params: Params<'_>) -> Result<Option<Row>, MetaError> {
        self.handle.block_on(async {
            let client = self.pool.get().await.map_err(db_error)?;
            let st = client.prepare_cached(sql).await.map_err(db_error)?;
            client.query_opt(&st, params).await.map_err(db_error)
        })
    }

    /// Runs `f` in a SERIALIZABLE transaction and commits it, trying again from the start
    /// while it loses a conflict. `f` must be safe to run more than once: it changes nothing
    /// outside the transaction.
    pub(crate) fn write<T>(&self, f: impl FnMut(&Tx<'_>) -> TxResult<T>) -> Result<T, MetaError> {
        self.run("BEGIN ISOLATION LEVEL SERIALIZABLE", f)
    }

    /// Runs `f` in a read-only snapshot (REPEATABLE READ, which CockroachDB runs as
    /// SERIALIZABLE).
    pub(crate) fn read<T>(&self, f: impl FnMut(&Tx<'_>) -> TxResult<T>) -> Result<T, MetaError> {
        self.run("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", f)
    }

    fn run<T>(
        &self,
        begin: &'static str,
        mut f: impl FnMut(&Tx<'_>) -> TxResult<T>,
    ) -> Result<T, MetaError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let client = self.handle.block_on(self.pool.get()).map_err(db_error)?;
            let tx = Tx {
                handle: &self.handle,
                client: &client,
                begin: Cell::new(Some(begin)),
                done: Cell::new(false),
            };
            let outcome = match f(&tx) {
                Ok(v) => tx.commit().map(|()| v).map_err(TxError::Pg),
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
