//! A PostgreSQL server for the gateway benchmark's shared-catalog targets: Debian's binaries
//! (`initdb`, `postgres`; `--postgres DIR`, `$SLUICE_POSTGRES`, `PATH`, or the newest
//! `/usr/lib/postgresql/*/bin`), a fresh cluster in the run's working directory, on a free
//! loopback port, trust authentication, stopped (fast shutdown) when dropped.
//!
//! initdb refuses to run as root: as root the server runs as `nobody` (`setpriv`), in a
//! directory of its own that belongs to `nobody`: in the run's working directory if `nobody`
//! can reach it, else (a working directory under a private one, such as a test's) in a new
//! directory in the system's temporary directory, removed when the server stops. The server fsyncs its WAL (`fsync=on`,
//! `synchronous_commit=on`, the defaults): the embedded catalog it is compared with fsyncs
//! every commit too.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::BenchError;
use crate::procs::free_port;

/// What to say when no PostgreSQL is found.
pub const INSTALL_HINT: &str = "PostgreSQL not found (no initdb and postgres on PATH or under \
     /usr/lib/postgresql/*/bin; apt-get install postgresql, or --postgres DIR)";

/// The directory holding `initdb` and `postgres`: `$SLUICE_POSTGRES`, `PATH`, or the newest
/// `/usr/lib/postgresql/*/bin`.
pub fn find_bin_dir() -> Option<PathBuf> {
    let has_both = |d: &Path| d.join("initdb").is_file() && d.join("postgres").is_file();
    if let Some(d) = std::env::var_os("SLUICE_POSTGRES") {
        return Some(PathBuf::from(d));
    }
    if let Some(path) = std::env::var_os("PATH")
        && let Some(d) = std::env::split_paths(&path).find(|d| has_both(d))
    {
        return Some(d);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|d| has_both(d))
        .collect();
    // By version number, not by text: 9.6 before 15.
    found.sort_by_key(|d| {
        d.parent()
            .and_then(Path::file_name)
            .and_then(|v| v.to_str())
            .and_then(|v| v.split('.').next())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    found.pop()
}

/// A running server, stopped when dropped.
pub struct PgServer {
    child: Child,
    pub port: u16,
    dir: PathBuf,
    /// `dir` was made outside the run's working directory: removed on drop.
    own_dir: bool,
    /// `postgres --version`.
    pub version: String,
}

/// Uid and gid of `nobody:nogroup` on Debian.
const NOBODY: u32 = 65534;

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Whether a user other than the owner can reach `dir`: every existing ancestor lets others
/// search it.
fn reachable_by_others(dir: &Path) -> bool {
    dir.ancestors()
        .filter_map(|a| std::fs::metadata(a).ok())
        .all(|m| m.mode() & 0o001 != 0)
}

/// `program`, as `nobody` when `root`.
fn as_server_user(program: &Path, root: bool) -> Command {
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
    /// Makes a cluster in `dir` (which must not exist) with the binaries of `bin` and starts
    /// it; returns once it accepts connections.
    pub fn start(bin: &Path, dir: &Path) -> Result<Self, BenchError> {
        let setup = |what: &str, e: &dyn std::fmt::Display| {
            BenchError::Setup(format!("PostgreSQL ({}): {what}: {e}", bin.display()))
        };
        let root = running_as_root();
        let own_dir = root && !reachable_by_others(dir);
        let dir = &if own_dir {
            std::env::temp_dir().join(format!(
                "sluice-bench-postgres-{}-{}",
                std::process::id(),
                free_port()?
            ))
        } else {
            dir.to_path_buf()
        };
        std::fs::create_dir_all(dir)?;
        // Until the server owns it (and removes it when dropped), a failure removes it here.
        let cleanup = |e: BenchError| {
            if own_dir {
                let _ = std::fs::remove_dir_all(dir);
            }
            e
        };
        if root {
            std::os::unix::fs::chown(dir, Some(NOBODY), Some(NOBODY))
                .map_err(|e| cleanup(e.into()))?;
        }
        let version = Command::new(bin.join("postgres"))
            .arg("--version")
            .output()
            .map_err(|e| cleanup(setup("postgres --version", &e)))?;
        let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
        let data = dir.join("data");
        let out = as_server_user(&bin.join("initdb"), root)
            .arg("-D")
            .arg(&data)
            .args(["-U", "sluice", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .output()
            .map_err(|e| cleanup(setup("initdb", &e)))?;
        if !out.status.success() {
            return Err(cleanup(setup(
                "initdb failed",
                &String::from_utf8_lossy(&out.stderr).trim(),
            )));
        }
        let port = free_port().map_err(cleanup)?;
        let log = std::fs::File::create(dir.join("postgres.log")).map_err(|e| cleanup(e.into()))?;
        let child = as_server_user(&bin.join("postgres"), root)
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(dir)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=on",
                "-c",
                "synchronous_commit=on",
                "-c",
                "max_connections=200",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| cleanup(setup("starting postgres", &e)))?;
        let mut server = Self {
            child,
            port,
            dir: dir.clone(),
            own_dir,
            version,
        };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&mut self) -> Result<(), BenchError> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(BenchError::Setup(format!(
                    "postgres exited ({status}) before accepting connections: {}",
                    self.log()
                )));
            }
            if self.execute("postgres", "SELECT 1").is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(BenchError::Setup(format!(
                    "postgres did not accept connections within 60 s: {}",
                    self.log()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default()
    }

    /// The URL of `database` on this server, as `[catalog] url` takes it.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://sluice@127.0.0.1:{}/{database}", self.port)
    }

    /// Runs `sql` in `database` on a connection of its own (from a thread that is not a
    /// runtime's worker).
    pub fn execute(&self, database: &str, sql: &str) -> Result<(), BenchError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            let (client, conn) =
                tokio_postgres::connect(&self.url(database), tokio_postgres::NoTls).await?;
            let conn = tokio::spawn(conn);
            let done = client.batch_execute(sql).await;
            drop(client);
            let _ = conn.await;
            done
        })
        .map_err(|e| BenchError::Setup(format!("PostgreSQL: {sql}: {e}")))
    }

    /// A new empty database; returns its URL.
    pub fn database(&self, name: &str) -> Result<String, BenchError> {
        self.execute("postgres", &format!("CREATE DATABASE {name}"))?;
        Ok(self.url(name))
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown (ends the sessions, then exits).
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        if self.own_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Makes `bucket` for `tenant` in the shared catalog at `url` (migrating its schema first, as
/// a gateway's start does), before the gateways start, as the embedded catalog's targets get
/// theirs. Call from a blocking thread; `handle` runs the connections.
pub fn create_bucket(
    url: &str,
    handle: tokio::runtime::Handle,
    tenant: &str,
    buckets: &[&str],
) -> Result<(), BenchError> {
    let failed = |e: sluice_meta::MetaError| BenchError::Setup(format!("shared catalog: {e}"));
    let engine =
        sluice_catalog_pg::PgCatalog::open(url, handle, &sluice_catalog_pg::PgOptions::default())
            .map_err(failed)?;
    let catalog = sluice_meta::Catalog::new(std::sync::Arc::new(engine));
    for b in buckets {
        catalog.create_bucket(tenant, b, 0).map_err(failed)?;
    }
    Ok(())
}
