//! A PostgreSQL server of the caller's own, for tests and benchmarks (feature `server`):
//! Debian's binaries (`initdb`, `postgres`: `$SLUICE_POSTGRES`, `PATH`, or the newest
//! `/usr/lib/postgresql/*/bin`), a fresh cluster in a directory of its own, on a free loopback
//! port, trust authentication for user `sluice`, stopped (fast shutdown) when dropped.
//!
//! initdb refuses to run as root: as root the server runs as `nobody` (`setpriv`), in a
//! directory that belongs to `nobody`. The caller's directory is used if `nobody` can reach it;
//! otherwise (a working directory under a private one, such as a test's), or when the caller
//! names none, a new directory in the system's temporary directory, removed when the server
//! stops. `fsync` chooses whether the server fsyncs its WAL: measurements of commits need it
//! (the embedded catalog they are compared with fsyncs every commit), tests do not.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What to say when no PostgreSQL is found.
pub const INSTALL_HINT: &str = "PostgreSQL not found (no initdb and postgres on PATH or under \
     /usr/lib/postgresql/*/bin): apt-get install postgresql";

/// Why a server could not be started or a statement failed; the message says which.
#[derive(Debug)]
pub struct ServerError(pub String);

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ServerError {}

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
    /// `dir` was made here, not given: removed on drop.
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

fn free_port() -> Result<u16, ServerError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| ServerError(format!("no free loopback port: {e}")))
}

/// A directory name no other server of this process or another one has taken.
fn fresh_temp_dir() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    std::env::temp_dir().join(format!(
        "sluice-postgres-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

impl PgServer {
    /// Makes a cluster with the binaries of `bin` in `dir` (created if absent; `None`: a
    /// temporary directory) and starts it; returns once it accepts connections.
    pub fn start(bin: &Path, dir: Option<&Path>, fsync: bool) -> Result<Self, ServerError> {
        let setup = |what: &str, e: &dyn std::fmt::Display| {
            ServerError(format!("PostgreSQL ({}): {what}: {e}", bin.display()))
        };
        let root = running_as_root();
        let (dir, own_dir) = match dir {
            Some(d) if !root || reachable_by_others(d) => (d.to_path_buf(), false),
            _ => (fresh_temp_dir(), true),
        };
        std::fs::create_dir_all(&dir).map_err(|e| setup(&dir.display().to_string(), &e))?;
        // Until the server owns it (and removes it when dropped), a failure removes it here.
        let cleanup = |e: ServerError| {
            if own_dir {
                let _ = std::fs::remove_dir_all(&dir);
            }
            e
        };
        if root {
            std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY))
                .map_err(|e| cleanup(setup("chown to nobody", &e)))?;
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
        let log = std::fs::File::create(dir.join("postgres.log"))
            .map_err(|e| cleanup(setup("postgres.log", &e)))?;
        let child = as_server_user(&bin.join("postgres"), root)
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(&dir)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                if fsync { "fsync=on" } else { "fsync=off" },
                "-c",
                if fsync {
                    "synchronous_commit=on"
                } else {
                    "synchronous_commit=off"
                },
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
            dir,
            own_dir,
            version,
        };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&mut self) -> Result<(), ServerError> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self
                .child
                .try_wait()
                .map_err(|e| ServerError(format!("postgres: {e}")))?
            {
                return Err(ServerError(format!(
                    "postgres exited ({status}) before accepting connections: {}",
                    self.log()
                )));
            }
            if self.execute("postgres", "SELECT 1").is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(ServerError(format!(
                    "postgres did not accept connections within 60 s: {}",
                    self.log()
                )));
            }
            // Polling a starting server: nothing to wait on but its socket.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What the server logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default()
    }

    /// The URL of `database` on this server, as `[catalog] url` takes it.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://sluice@127.0.0.1:{}/{database}", self.port)
    }

    /// Runs `f` with a connection of its own to `database`, on a runtime of its own (call from
    /// a thread that is not a runtime's worker).
    fn with_client<T>(
        &self,
        database: &str,
        sql: &str,
        f: impl AsyncFnOnce(&tokio_postgres::Client) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, ServerError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ServerError(format!("runtime: {e}")))?;
        rt.block_on(async {
            let (client, conn) =
                tokio_postgres::connect(&self.url(database), tokio_postgres::NoTls).await?;
            let conn = tokio::spawn(conn);
            let done = f(&client).await;
            drop(client);
            let _ = conn.await;
            done
        })
        .map_err(|e| ServerError(format!("PostgreSQL: {sql}: {e}")))
    }

    /// Runs `sql` in `database`.
    pub fn execute(&self, database: &str, sql: &str) -> Result<(), ServerError> {
        self.with_client(database, sql, async |c| c.batch_execute(sql).await)
    }

    /// The one BIGINT `sql` returns in `database`.
    pub fn query_i64(&self, database: &str, sql: &str) -> Result<i64, ServerError> {
        self.with_client(database, sql, async |c| {
            c.query_one(sql, &[]).await.map(|r| r.get::<_, i64>(0))
        })
    }

    /// A new empty database; returns its URL.
    pub fn database(&self, name: &str) -> Result<String, ServerError> {
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
