//! A PostgreSQL server for one test: Debian's binaries (`initdb`, `postgres`; on `PATH` or
//! under `/usr/lib/postgresql/*/bin`), a fresh cluster in a temporary directory, on a free
//! loopback port, run as `nobody` when the tests run as root (initdb refuses root), stopped
//! when dropped. Without the binaries the test is skipped with a message, except in CI (`CI`
//! set), where that is a failure.

#![allow(dead_code)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_catalog_pg::{PgCatalog, PgOptions};
use sluice_meta::Catalog;
use sluice_meta::conformance::Harness;

pub struct PgServer {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

fn bin_dir() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            if d.join("initdb").is_file() && d.join("postgres").is_file() {
                return Some(d);
            }
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|d| d.join("initdb").is_file())
        .collect();
    found.sort();
    found.pop()
}

fn as_postgres_user(program: &Path, root: bool) -> Command {
    if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .arg(program);
        c
    } else {
        Command::new(program)
    }
}

impl PgServer {
    /// Starts a server, or `None` (with a message) where PostgreSQL is not installed.
    /// Without fsync: tests need no durability across a power cut.
    pub fn start() -> Option<Self> {
        Self::start_with(false)
    }

    /// [`PgServer::start`], fsyncing its WAL when `fsync` (measurements of commits).
    pub fn start_with(fsync: bool) -> Option<Self> {
        let Some(bin) = bin_dir() else {
            let msg = "PostgreSQL is not installed (no initdb on PATH or under \
                       /usr/lib/postgresql/*/bin): apt-get install postgresql";
            assert!(std::env::var_os("CI").is_none(), "{msg}");
            eprintln!("skipped: {msg}");
            return None;
        };
        let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
        let dir = tempfile::tempdir().expect("tempdir");
        if root {
            // nobody:nogroup on Debian.
            std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).expect("chown");
        }
        let data = dir.path().join("data");
        let out = as_postgres_user(&bin.join("initdb"), root)
            .arg("-D")
            .arg(&data)
            .args(["-U", "sluice", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log = std::fs::File::create(dir.path().join("postgres.log")).expect("log");
        let child = as_postgres_user(&bin.join("postgres"), root)
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(dir.path())
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                if fsync { "fsync=on" } else { "fsync=off" },
                "-c",
                "max_connections=200",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start postgres");
        let server = Self { child, port, dir };
        server.wait_ready();
        Some(server)
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.try_sql("postgres", "SELECT 1").is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "postgres did not accept connections: {}",
                std::fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn url(&self, database: &str) -> String {
        format!("postgres://sluice@127.0.0.1:{}/{database}", self.port)
    }

    /// Runs `sql` in `database` on a connection of its own.
    pub fn try_sql(&self, database: &str, sql: &str) -> Result<(), tokio_postgres::Error> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let (client, conn) =
                tokio_postgres::connect(&self.url(database), tokio_postgres::NoTls).await?;
            tokio::spawn(conn);
            client.batch_execute(sql).await
        })
    }

    /// The one BIGINT `sql` returns in `database`.
    pub fn query_i64(&self, database: &str, sql: &str) -> i64 {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let (client, conn) =
                tokio_postgres::connect(&self.url(database), tokio_postgres::NoTls).await?;
            tokio::spawn(conn);
            client.query_one(sql, &[]).await.map(|r| r.get::<_, i64>(0))
        })
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    pub fn sql(&self, database: &str, sql: &str) {
        self.try_sql(database, sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// A new empty database.
    pub fn database(&self, name: &str) -> String {
        self.sql("postgres", &format!("CREATE DATABASE {name}"));
        self.url(name)
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown (ends sessions, then exits).
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
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
