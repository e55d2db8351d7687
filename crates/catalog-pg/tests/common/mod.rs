//! A PostgreSQL server for one test (`sluice_catalog_pg::server`, in a temporary directory,
//! as `nobody` when the tests run as root), and the harness the conformance suite runs on.
//! Without the binaries the test is skipped with a message, except in CI (`CI` set), where
//! that is a failure.

#![allow(dead_code)]

use std::sync::Arc;

use sluice_catalog_pg::server::{self, INSTALL_HINT};
use sluice_catalog_pg::{PgCatalog, PgOptions};
use sluice_meta::Catalog;
use sluice_meta::conformance::Harness;

/// The shared server, with the tests' panicking helpers.
pub struct PgServer(pub server::PgServer);

impl PgServer {
    /// Starts a server, or `None` (with a message) where PostgreSQL is not installed.
    /// Without fsync: tests need no durability across a power cut.
    pub fn start() -> Option<Self> {
        Self::start_with(false)
    }

    /// [`PgServer::start`], fsyncing its WAL when `fsync` (measurements of commits).
    pub fn start_with(fsync: bool) -> Option<Self> {
        let Some(bin) = server::find_bin_dir() else {
            assert!(std::env::var_os("CI").is_none(), "{INSTALL_HINT}");
            eprintln!("skipped: {INSTALL_HINT}");
            return None;
        };
        let s = server::PgServer::start(&bin, None, fsync).unwrap_or_else(|e| panic!("{e}"));
        Some(Self(s))
    }

    pub fn url(&self, database: &str) -> String {
        self.0.url(database)
    }

    /// Runs `sql` in `database` on a connection of its own.
    pub fn try_sql(&self, database: &str, sql: &str) -> Result<(), server::ServerError> {
        self.0.execute(database, sql)
    }

    /// The one BIGINT `sql` returns in `database`.
    pub fn query_i64(&self, database: &str, sql: &str) -> i64 {
        self.0
            .query_i64(database, sql)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn sql(&self, database: &str, sql: &str) {
        self.try_sql(database, sql)
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// A new empty database.
    pub fn database(&self, name: &str) -> String {
        self.0.database(name).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// One server, one database, and the runtime the engines' connections run on.
pub struct Pg {
    pub rt: tokio::runtime::Runtime,
    pub url: String,
    pub server: PgServer,
}

impl Pg {
    pub fn start() -> Option<Self> {
        Self::on(PgServer::start()?)
    }

    /// One database on `server`.
    pub fn on(server: PgServer) -> Option<Self> {
        let url = server.database("sluice");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        Some(Self { rt, url, server })
    }

    pub fn engine(&self) -> PgCatalog {
        self.engine_with(&PgOptions::default())
    }

    pub fn engine_with(&self, options: &PgOptions) -> PgCatalog {
        PgCatalog::open(&self.url, self.rt.handle().clone(), options).expect("open the catalog")
    }
}

impl Harness for Pg {
    fn open(&self) -> Catalog {
        Catalog::new(Arc::new(self.engine()))
    }
}

/// A blob object of `size` bytes in one segment of `blob`, for the shared-catalog tests.
pub fn obj(size: u64, blob: &str) -> sluice_meta::ObjectRecord {
    sluice_meta::ObjectRecord {
        size,
        etag: "00".into(),
        segments: vec![sluice_meta::Segment {
            blob: blob.into(),
            size,
            checksums: None,
        }],
        ..sluice_meta::ObjectRecord::default()
    }
}
