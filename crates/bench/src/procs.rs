//! Child processes on loopback for benchmarks: a sluice gateway (on its embedded catalog or a
//! shared one), a node agent and SeaweedFS.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::BenchError;

/// A benchmark's working directory, claimed for one run. A directory that holds anything is
/// refused, never emptied: the benchmark deletes what it writes there, and a path such as an
/// agent's data directory must come out of a mistyped flag intact. An absent directory is
/// created (with any missing parents), an existing empty one is taken as it is.
///
/// Dropped, it removes what the claim created and nothing else: the directory it made (whole)
/// and the parents it made (each only if nothing else was written there meanwhile), or, in a
/// directory that was already there, every entry (it was empty). Declared before the servers
/// that use it, it is dropped after them, so an error anywhere still stops them and then
/// removes their data.
pub struct Scratch {
    dir: PathBuf,
    /// The directories the claim made, `dir` first, then its parents upwards; empty when
    /// `dir` was there.
    created: Vec<PathBuf>,
}

/// Why a directory cannot be a benchmark's working directory. `flag` is what named it to the
/// user (`--workdir`, or a description for directories a benchmark picks itself).
#[derive(Debug, thiserror::Error)]
pub enum ScratchError {
    #[error(
        "{flag} {} is not empty: pick an empty or new directory; the benchmark deletes what it \
         writes there",
        dir.display()
    )]
    NotEmpty { flag: &'static str, dir: PathBuf },
    #[error("{flag} {} is not a directory", dir.display())]
    NotADirectory { flag: &'static str, dir: PathBuf },
    #[error("{flag} {}: {source}", dir.display())]
    Io {
        flag: &'static str,
        dir: PathBuf,
        source: std::io::Error,
    },
}

impl From<ScratchError> for BenchError {
    fn from(e: ScratchError) -> Self {
        let kind = match &e {
            ScratchError::NotEmpty { .. } => std::io::ErrorKind::DirectoryNotEmpty,
            ScratchError::NotADirectory { .. } => std::io::ErrorKind::NotADirectory,
            ScratchError::Io { source, .. } => source.kind(),
        };
        Self::Io(std::io::Error::new(kind, e))
    }
}

impl Scratch {
    /// Claims `dir` where no flag names it: a directory a benchmark picks itself inside its
    /// claimed one, or the claimed one again (it is empty).
    pub fn create(dir: &Path) -> Result<Self, BenchError> {
        Ok(Self::claim("the working directory", dir)?)
    }

    /// Claims `dir`, named to the user by `flag`: creates it if absent, takes it if it is an
    /// empty directory, refuses it otherwise (leaving it as it is).
    pub fn claim(flag: &'static str, dir: &Path) -> Result<Self, ScratchError> {
        let io = |source| ScratchError::Io {
            flag,
            dir: dir.to_path_buf(),
            source,
        };
        match std::fs::metadata(dir) {
            Ok(meta) if !meta.is_dir() => Err(ScratchError::NotADirectory {
                flag,
                dir: dir.to_path_buf(),
            }),
            Ok(_) => {
                if std::fs::read_dir(dir).map_err(io)?.next().is_some() {
                    return Err(ScratchError::NotEmpty {
                        flag,
                        dir: dir.to_path_buf(),
                    });
                }
                Ok(Self {
                    dir: dir.to_path_buf(),
                    created: Vec::new(),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let created = missing_ancestors(dir).map_err(io)?;
                std::fs::create_dir_all(dir).map_err(io)?;
                Ok(Self {
                    dir: dir.to_path_buf(),
                    created,
                })
            }
            Err(e) => Err(io(e)),
        }
    }
}

/// `dir` and those of its parents that do not exist, nearest first.
fn missing_ancestors(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    for at in dir.ancestors().filter(|p| !p.as_os_str().is_empty()) {
        match std::fs::symlink_metadata(at) {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing.push(at.to_path_buf()),
            Err(e) => return Err(e),
        }
    }
    Ok(missing)
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some((made, parents)) = self.created.split_first() {
            let _ = std::fs::remove_dir_all(made);
            // `remove_dir` refuses a directory that is not empty: what another process wrote
            // next to ours stays, and so do the parents above it.
            for parent in parents {
                if std::fs::remove_dir(parent).is_err() {
                    break;
                }
            }
            return;
        }
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let _ = if entry.file_type().is_ok_and(|t| t.is_dir()) {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
        }
    }
}

pub fn free_port() -> Result<u16, BenchError> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits until the server `child` started answers on `port` (see [`answers`]), failing if it
/// exits first or `timeout` passes.
pub fn wait_for_port(port: u16, child: &mut Child, timeout: Duration) -> Result<(), BenchError> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait()? {
            return Err(BenchError::Setup(format!(
                "process exited ({status}) before listening on {port}"
            )));
        }
        if answers(port) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(BenchError::Setup(format!(
        "nothing answered on {port} within {timeout:?}"
    )))
}

/// Whether a server on `port` answers a request: sent `GET /`, it replies or closes the
/// connection within a second. A connection alone says nothing: the gateway binds its
/// listeners before it opens its catalog and backend (so that an address in use fails the
/// start first), and the kernel completes connections to a bound socket that nobody
/// accepts yet; a start counted done at the connection raced the gateway's own start-up
/// (the aggregate's check that a start leaves the backend as it was once saw the
/// backend's `O_DIRECT` probe file). Any reply counts, HTTP or a TLS alert.
fn answers(port: u16) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(mut conn) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let wait = Some(Duration::from_secs(1));
    if conn.set_read_timeout(wait).is_err() || conn.set_write_timeout(wait).is_err() {
        return false;
    }
    if conn
        .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        // Refused or reset while sending: the server is there and closed on us.
        return true;
    }
    // A byte back, or the end (`UnexpectedEof`), is an answer; only the timeout is not.
    let mut byte = [0u8; 1];
    conn.read_exact(&mut byte).map_or_else(
        |e| {
            !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            )
        },
        |()| true,
    )
}

/// A child process killed on drop.
pub struct Proc {
    pub child: Child,
    pub port: u16,
}

/// The last lines of a log shown when its process has died.
const LOG_TAIL_LINES: usize = 20;

impl Proc {
    /// `None` while the process runs; once it has exited, its status and the last lines of
    /// its log `log`: what a failed request should say when its server died under it.
    pub fn exited(&mut self, log: &Path) -> Option<String> {
        let status = self.child.try_wait().ok()??;
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
        Some(format!(
            "exited ({status}); the last lines of {}:\n{tail}",
            log.display()
        ))
    }
}

/// Where [`start_gateway`] and the like put the log of a server of `role` in `dir`.
pub fn log_path(dir: &Path, role: &str) -> PathBuf {
    dir.join(format!("{role}.log"))
}

/// `e`, followed by what became of every process of `procs` (each with its name and its
/// log) that has exited, so that a request that failed because its server died says so.
pub fn with_exits<'a>(
    e: BenchError,
    procs: impl IntoIterator<Item = (String, &'a mut Proc, PathBuf)>,
) -> BenchError {
    let exits: Vec<String> = procs
        .into_iter()
        .filter_map(|(name, p, log)| p.exited(&log).map(|x| format!("{name} {x}")))
        .collect();
    if exits.is_empty() {
        return e;
    }
    BenchError::Setup(format!("{e}\n{}", exits.join("\n")))
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Samples a process's resident memory (VmRSS) every 100 ms until dropped.
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    last: Arc<AtomicU64>,
    handle: Option<std::thread::JoinHandle<()>>,
}

pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

impl RssSampler {
    pub fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let last = Arc::new(AtomicU64::new(0));
        let (s, p, l) = (Arc::clone(&stop), Arc::clone(&peak), Arc::clone(&last));
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Some(rss) = rss_bytes(pid) {
                    p.fetch_max(rss, Ordering::Relaxed);
                    l.store(rss, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Self {
            stop,
            peak,
            last,
            handle: Some(handle),
        }
    }

    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    pub fn last(&self) -> u64 {
        self.last.load(Ordering::Relaxed)
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Credentials the benchmark's tenant uses.
pub const ACCESS_KEY: &str = "AKIDBENCH000000TEST";
pub const SECRET_KEY: &str = "bench-secret-0123456789";

/// Starts `sluice gateway` on a free port with one tenant `bench` owning `bucket`. `extra`
/// is appended to the `[gateway]` table (e.g. a `[gateway.capacity]` section).
pub fn start_gateway(
    sluice: &Path,
    dir: &Path,
    bucket: &str,
    extra: &str,
    tenants_toml: &str,
) -> Result<Proc, BenchError> {
    std::fs::create_dir_all(dir)?;
    let port = free_port()?;
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "[gateway]\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"{}\"\n{extra}\n\
             [[tenant]]\nid = \"bench\"\naccess_key = \"{ACCESS_KEY}\"\nsecret_key = \"{SECRET_KEY}\"\n{tenants_toml}",
            dir.join("data").display()
        ),
    )?;
    // The bucket is made in the catalog before the gateway opens it (and locks the file).
    {
        let data = dir.join("data");
        std::fs::create_dir_all(&data)?;
        let (catalog, _) = sluice_meta::Catalog::open(&data.join("meta.redb"))
            .map_err(|e| BenchError::Setup(e.to_string()))?;
        for b in bucket.split(',') {
            for tenant in tenant_ids(tenants_toml) {
                let _ = catalog.create_bucket(&tenant, b, 0);
            }
        }
    }
    serve(Command::new(sluice), "gateway", &config, dir, port)
}

/// Starts `sluice gateway` on a free port with tenant `bench`, its catalog the shared one at
/// `catalog_url` (`[catalog] url`; the buckets are made there beforehand, see
/// [`crate::postgres::create_bucket`]). Its local filesystem backend is `objects`, shared by
/// every gateway given the same directory: `data_dir/objects` is made a symbolic link to it.
pub fn start_shared_gateway(
    sluice: &Path,
    dir: &Path,
    catalog_url: &str,
    objects: &Path,
) -> Result<Proc, BenchError> {
    let data = dir.join("data");
    std::fs::create_dir_all(&data)?;
    std::fs::create_dir_all(objects)?;
    std::os::unix::fs::symlink(objects, data.join("objects"))?;
    let port = free_port()?;
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "[gateway]\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"{}\"\n\n\
             [catalog]\nurl = \"{catalog_url}\"\n\n\
             [[tenant]]\nid = \"bench\"\naccess_key = \"{ACCESS_KEY}\"\nsecret_key = \"{SECRET_KEY}\"\n",
            data.display()
        ),
    )?;
    serve(Command::new(sluice), "gateway", &config, dir, port)
}

/// Runs `cmd <role> --config <config>` with its log in `dir/<role>.log` until it listens on
/// `port`.
fn serve(
    mut cmd: Command,
    role: &str,
    config: &Path,
    dir: &Path,
    port: u16,
) -> Result<Proc, BenchError> {
    let log = std::fs::File::create(log_path(dir, role))?;
    let mut child = cmd
        .args([role, "--config"])
        .arg(config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?;
    wait_for_port(port, &mut child, Duration::from_secs(30))?;
    Ok(Proc { child, port })
}

/// Starts `sluice agent` on a free port, draining to `upstream`, with `tenants_toml` (its
/// `[[tenant]]` entries, keys included).
pub fn start_agent(
    sluice: &Path,
    dir: &Path,
    upstream: &str,
    tenants_toml: &str,
) -> Result<Proc, BenchError> {
    std::fs::create_dir_all(dir)?;
    let port = free_port()?;
    let config = dir.join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[agent]\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"{}\"\nupstream = \"{upstream}\"\n\n{tenants_toml}",
            dir.join("data").display()
        ),
    )?;
    // At the lowest CPU priority: on a cluster the agent runs on the trainer's node, not on
    // the machine that serves the shared tier; here they share two cores.
    let mut nice = Command::new("nice");
    nice.args(["-n", "19"]).arg(sluice);
    serve(nice, "agent", &config, dir, port)
}

fn tenant_ids(tenants_toml: &str) -> Vec<String> {
    let mut ids = vec!["bench".to_owned()];
    for line in tenants_toml.lines() {
        if let Some(v) = line.trim().strip_prefix("id = ") {
            ids.push(v.trim_matches('"').to_owned());
        }
    }
    ids
}

/// Finds the `weed` binary: `$SLUICE_WEED`, `PATH`, or `./.venv/bin/weed`.
pub fn find_weed() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("SLUICE_WEED") {
        return Some(PathBuf::from(p));
    }
    let in_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("weed"))
            .find(|p| p.exists())
    });
    in_path.or_else(|| PathBuf::from(".venv/bin/weed").canonicalize().ok())
}

/// Starts SeaweedFS (`weed mini`, telemetry off, loopback only) with `bucket` created.
pub fn start_seaweedfs(weed: &Path, dir: &Path, bucket: &str) -> Result<Proc, BenchError> {
    let weed = &weed.canonicalize()?;
    std::fs::create_dir_all(dir.join("data"))?;
    let conf = dir.join("s3.json");
    std::fs::write(
        &conf,
        format!(
            "{{\"identities\":[{{\"name\":\"bench\",\"credentials\":[{{\"accessKey\":\"{ACCESS_KEY}\",\"secretKey\":\"{SECRET_KEY}\"}}],\"actions\":[\"Admin\",\"Read\",\"List\",\"Tagging\",\"Write\"]}}]}}"
        ),
    )?;
    let s3 = free_port()?;
    let master = free_port()?;
    let log = std::fs::File::create(log_path(dir, "weed"))?;
    let mut child = Command::new(weed)
        .arg("mini")
        .arg(format!("-dir={}", dir.join("data").display()))
        .args([
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            "-webdav=false",
            "-admin.ui=false",
        ])
        .arg(format!("-s3.config={}", conf.display()))
        .arg(format!("-s3.port={s3}"))
        .arg(format!("-master.port={master}"))
        .arg(format!("-volume.port={}", free_port()?))
        .arg(format!("-filer.port={}", free_port()?))
        .arg(format!("-s3.port.iceberg={}", free_port()?))
        .arg(format!("-debug.port={}", free_port()?))
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?;
    wait_for_port(s3, &mut child, Duration::from_secs(60))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = Command::new(weed)
            .args(["shell", &format!("-master=127.0.0.1:{master}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                if let Some(stdin) = c.stdin.as_mut() {
                    stdin
                        .write_all(format!("s3.bucket.create -name {bucket}\nexit\n").as_bytes())?;
                }
                c.wait_with_output()
            })?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        if out.status.success() && !text.contains("error") || text.contains("already exist") {
            break;
        }
        if Instant::now() > deadline {
            return Err(BenchError::Setup(format!(
                "creating the SeaweedFS bucket: {text}"
            )));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Ok(Proc { child, port: s3 })
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    /// The readiness check that let the aggregate count a gateway's backend before the
    /// gateway had opened it: a socket that is bound and listening but accepts nothing (as
    /// the gateway's is while it opens its catalog and backend) does not answer; one that
    /// accepts and replies does, and so does one that accepts and closes.
    #[test]
    fn a_bound_socket_nobody_accepts_on_does_not_answer() {
        use std::io::{Read as _, Write as _};
        let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
        assert!(!answers(silent.local_addr().expect("addr").port()));
        let serving = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = serving.local_addr().expect("addr").port();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = serving.accept().expect("accept");
            let mut head = [0u8; 16];
            let _ = conn.read(&mut head);
            conn.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n")
                .expect("reply");
            let (closing, _) = serving.accept().expect("accept");
            drop(closing);
        });
        assert!(answers(port), "a reply is an answer");
        assert!(answers(port), "a close is an answer");
        server.join().expect("server");
    }

    /// A process that died is named with its status and its log's tail; a live one adds
    /// nothing to the error.
    #[test]
    fn an_error_names_the_processes_that_died_with_their_logs() {
        let root = TestRoot::new("exits");
        let log = root.0.join("dead.log");
        let alive_log = root.0.join("alive.log");
        let spawn = |script: &str, log: &Path| Proc {
            child: Command::new("sh")
                .args(["-c", script])
                .stdout(Stdio::null())
                .stderr(fs::File::create(log).expect("log"))
                .spawn()
                .expect("sh"),
            port: 0,
        };
        let mut dead = spawn("echo first >&2; echo 'panicked at here' >&2; exit 3", &log);
        let mut alive = spawn("sleep 30", &alive_log);
        let deadline = Instant::now() + Duration::from_secs(10);
        while dead.child.try_wait().expect("wait").is_none() {
            assert!(Instant::now() < deadline, "sh did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
        let e = with_exits(
            BenchError::Setup("PUT failed".into()),
            [
                ("gateway 1".to_owned(), &mut alive, alive_log.clone()),
                ("gateway 2".to_owned(), &mut dead, log),
            ],
        )
        .to_string();
        assert!(e.contains("PUT failed"), "{e}");
        assert!(e.contains("gateway 2 exited"), "{e}");
        assert!(e.contains("panicked at here"), "{e}");
        assert!(!e.contains("gateway 1"), "{e}");
        let e = with_exits(
            BenchError::Setup("PUT failed".into()),
            [("gateway 1".to_owned(), &mut alive, alive_log)],
        );
        assert!(e.to_string().ends_with("PUT failed"), "{e}");
    }

    /// A fresh directory for one test under the system's temporary directory, removed when
    /// dropped (the tests check what `Scratch` leaves inside it).
    struct TestRoot(PathBuf);

    impl TestRoot {
        fn new(name: &str) -> Self {
            let root = std::env::temp_dir()
                .join(format!("sluice-scratch-test-{}-{name}", std::process::id()));
            let _ = fs::remove_dir_all(&root);
            fs::create_dir_all(&root).expect("test root");
            Self(root)
        }
    }

    impl Drop for TestRoot {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// Writes what a run would: a file and a directory with a file in it.
    fn write_a_run(dir: &Path) {
        fs::write(dir.join("sluice.toml"), "x").expect("file");
        fs::create_dir_all(dir.join("data/tenants")).expect("dirs");
        fs::write(dir.join("data/tenants/blob"), "y").expect("nested file");
    }

    #[test]
    fn a_directory_that_holds_anything_is_refused_and_left_intact() {
        let root = TestRoot::new("refused");
        let dir = root.0.join("agent-data");
        fs::create_dir_all(dir.join("journal")).expect("dirs");
        fs::write(dir.join("journal/0001"), "acknowledged bytes").expect("file");
        let err = Scratch::claim("--dir", &dir)
            .err()
            .expect("a non-empty directory is refused");
        assert!(matches!(err, ScratchError::NotEmpty { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!(
                "--dir {} is not empty: pick an empty or new directory; the benchmark deletes \
                 what it writes there",
                dir.display()
            )
        );
        // As the benchmarks' own directories inside a claimed one are claimed.
        let err = Scratch::create(&dir)
            .err()
            .expect("refused without a flag too");
        assert!(err.to_string().contains("is not empty"), "{err}");
        assert_eq!(
            fs::read_to_string(dir.join("journal/0001")).expect("still there"),
            "acknowledged bytes"
        );
    }

    #[test]
    fn a_file_is_refused_and_left_intact() {
        let root = TestRoot::new("file");
        let path = root.0.join("not-a-dir");
        fs::write(&path, "data").expect("file");
        let err = Scratch::claim("--workdir", &path)
            .err()
            .expect("a file is refused");
        assert!(matches!(err, ScratchError::NotADirectory { .. }), "{err:?}");
        assert_eq!(fs::read_to_string(&path).expect("still there"), "data");
    }

    #[test]
    fn a_new_directory_is_created_with_its_parents_and_removed_whole() {
        let root = TestRoot::new("new");
        let dir = root.0.join("a/b/c");
        let scratch = Scratch::claim("--workdir", &dir).expect("claimed");
        assert!(dir.is_dir());
        write_a_run(&dir);
        drop(scratch);
        assert!(!root.0.join("a").exists(), "the parents it made are gone");
        assert!(root.0.is_dir(), "what was there stays");
    }

    #[test]
    fn a_parent_it_made_stays_when_something_else_was_written_there() {
        let root = TestRoot::new("shared-parent");
        let dir = root.0.join("a/b");
        let scratch = Scratch::claim("--workdir", &dir).expect("claimed");
        write_a_run(&dir);
        fs::write(root.0.join("a/other"), "not the benchmark's").expect("file");
        drop(scratch);
        assert!(!dir.exists(), "its own directory is gone");
        assert_eq!(
            fs::read_to_string(root.0.join("a/other")).expect("kept"),
            "not the benchmark's"
        );
    }

    #[test]
    fn an_existing_empty_directory_is_emptied_and_kept() {
        let root = TestRoot::new("empty");
        let dir = root.0.join("mounted");
        fs::create_dir(&dir).expect("dir");
        let scratch = Scratch::claim("--dir", &dir).expect("an empty directory is taken");
        write_a_run(&dir);
        drop(scratch);
        assert!(
            dir.is_dir(),
            "the directory was not the benchmark's to remove"
        );
        assert_eq!(fs::read_dir(&dir).expect("read").count(), 0, "emptied");
    }

    #[test]
    fn a_directory_claimed_twice_is_emptied_by_the_inner_claim_and_removed_by_the_outer() {
        // As `bench gateway` claims `--workdir` and its run claims the same directory again.
        let root = TestRoot::new("nested");
        let dir = root.0.join("work");
        let outer = Scratch::claim("--workdir", &dir).expect("outer");
        let inner = Scratch::create(&dir).expect("inner: the directory is empty");
        write_a_run(&dir);
        drop(inner);
        assert_eq!(fs::read_dir(&dir).expect("read").count(), 0);
        drop(outer);
        assert!(!dir.exists());
    }
}
