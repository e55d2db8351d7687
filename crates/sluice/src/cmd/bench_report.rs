//! `sluice bench report`: the benchmarks' JSON reports as the Markdown tables of
//! `docs/benchmarks.md` and the README (rendering: `sluice_bench::report`).
//!
//! With `--out FILE` the sections between the `<!-- figures:NAME:begin -->` and
//! `<!-- figures:NAME:end -->` markers of FILE are rewritten in place (`gateway`, `agent`,
//! `noisy-neighbor`), with `--readme FILE` its `summary` section; the rest of each file is
//! left as it is. With neither, the sections are printed, markers included.

use std::path::{Path, PathBuf};

use anyhow::Context;
use sluice_bench::report::{self, Inputs, SUMMARY, Source};

const GATEWAY_JSON: &str = "docs/bench/gateway.json";
const AGENT_JSON: &str = "docs/bench/agent.json";
const NOISY_JSON: &str = "docs/bench/noisy-neighbor.json";

#[derive(clap::Args)]
pub struct ReportArgs {
    /// `sluice bench gateway --json` report [default: docs/bench/gateway.json, if present].
    #[arg(long)]
    pub gateway: Option<PathBuf>,
    /// `sluice bench agent --json` report [default: docs/bench/agent.json, if present].
    #[arg(long)]
    pub agent: Option<PathBuf>,
    /// `sluice bench noisy-neighbor --json` report [default: docs/bench/noisy-neighbor.json,
    /// if present].
    #[arg(long)]
    pub noisy: Option<PathBuf>,
    /// Rewrite the figures sections of this file in place (docs/benchmarks.md).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Rewrite the summary section of this file in place (README.md).
    #[arg(long)]
    pub readme: Option<PathBuf>,
}

/// The report at `given`, or at `default` if none was given; a missing default is "not yet
/// measured", a missing file that was named is an error.
fn source(given: Option<&Path>, default: &str) -> anyhow::Result<Source> {
    let path = given.unwrap_or_else(|| Path::new(default));
    let json = match std::fs::read_to_string(path) {
        Ok(text) => Some(
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && given.is_none() => None,
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    Ok(Source {
        path: path.display().to_string(),
        json,
    })
}

/// Rewrites the `sections` of `path` in place.
fn rewrite(path: &Path, sections: &[(&str, String)]) -> anyhow::Result<()> {
    let mut doc =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    for (name, content) in sections {
        doc = report::splice(&doc, name, content).with_context(|| path.display().to_string())?;
    }
    std::fs::write(path, doc).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("rewrote {}", path.display());
    Ok(())
}

pub fn run(args: &ReportArgs) -> anyhow::Result<()> {
    let inputs = Inputs {
        gateway: source(args.gateway.as_deref(), GATEWAY_JSON)?,
        agent: source(args.agent.as_deref(), AGENT_JSON)?,
        noisy: source(args.noisy.as_deref(), NOISY_JSON)?,
    };
    let figures = report::figures(&inputs)?;
    let summary = vec![(SUMMARY, report::summary(&inputs)?)];
    if let Some(out) = &args.out {
        rewrite(out, &figures)?;
    }
    if let Some(readme) = &args.readme {
        rewrite(readme, &summary)?;
    }
    if args.out.is_none() && args.readme.is_none() {
        for (name, content) in figures.iter().chain(&summary) {
            println!(
                "{}\n\n{}\n\n{}\n",
                report::begin_marker(name),
                content.trim_end(),
                report::end_marker(name)
            );
        }
    }
    Ok(())
}
