//! `sluice plan`: placeholder until the planner crate lands.

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The planning input (TOML).
    pub file: PathBuf,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    anyhow::bail!("sluice plan is not built yet ({})", args.file.display())
}
