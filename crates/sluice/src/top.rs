//! `sluice top --config F`: every tenant of the deployment, across its gateways and agents,
//! refreshed every second — achieved bytes/s and ops/s against reservation, weight share and
//! limit, queue, SlowDowns, why it is held back, the per-gateway split and the agents'
//! durability lag. `--once` prints one frame as text, `--once --json` as JSON (the shape:
//! `docs/top.md`).
//!
//! Rates are measured: each frame differences the counters of two samples one interval
//! apart (the live view keeps the previous sample; `--once` takes two), never lifetime
//! averages. `fetch` finds the endpoints from the file and samples them (the only I/O),
//! `frame` turns two samples into rows (pure), `render` draws rows into a ratatui buffer
//! (pure), and this module runs the terminal.

mod fetch;
mod frame;
mod prom;
mod render;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use sluice_units::HumanDuration;

/// The live view's last line.
const HINT: &str = "q, Esc or Ctrl-C quits";
/// Columns of the `--once` text.
const TEXT_WIDTH: u16 = 160;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, short)]
    pub config: PathBuf,
    /// Print one frame (two samples one interval apart) and exit.
    #[arg(long)]
    pub once: bool,
    /// With --once: the frame as JSON.
    #[arg(long, requires = "once")]
    pub json: bool,
    /// Time between samples (the interval rates are measured over).
    #[arg(long, default_value = "1s")]
    pub interval: HumanDuration,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let config = sluice_config::Config::load(&args.config)?;
    let interval = args.interval.0.max(Duration::from_millis(100));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut deployment = runtime.block_on(fetch::Deployment::find(&config))?;
    let clock = Instant::now();
    if !args.once {
        return live(&runtime, &mut deployment, clock, interval);
    }
    let mut first = runtime.block_on(deployment.sample(clock));
    if first.gateways.len() < deployment.gateways.len() {
        // The cluster's view named gateways the file does not: sample again, so both
        // samples of the frame cover every gateway (a gateway in one sample only has no rate).
        first = runtime.block_on(deployment.sample(clock));
    }
    let next = clock + Duration::from_secs_f64(first.at) + interval;
    std::thread::sleep(next.saturating_duration_since(Instant::now()));
    let second = runtime.block_on(deployment.sample(clock));
    let f = frame::frame(Some(&first), &second);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&f)?);
    } else {
        print!("{}", render::text(&f, TEXT_WIDTH));
    }
    Ok(())
}

/// The live view until q, Esc or Ctrl-C; the terminal is restored however it ends (ratatui's
/// panic hook restores it on a panic).
fn live(
    runtime: &tokio::runtime::Runtime,
    deployment: &mut fetch::Deployment,
    clock: Instant,
    interval: Duration,
) -> anyhow::Result<()> {
    let mut terminal = ratatui::try_init()?;
    let result = (|| -> anyhow::Result<()> {
        let mut prev: Option<frame::Sample> = None;
        loop {
            let started = Instant::now();
            let cur = runtime.block_on(deployment.sample(clock));
            let f = frame::frame(prev.as_ref(), &cur);
            prev = Some(cur);
            terminal.draw(|fr| render::draw(&f, HINT, fr.area(), fr.buffer_mut()))?;
            let next = started + interval;
            loop {
                let left = next.saturating_duration_since(Instant::now());
                if left.is_zero() || !event::poll(left)? {
                    break;
                }
                match event::read()? {
                    Event::Key(k)
                        if k.kind != KeyEventKind::Release && quits(k.code, k.modifiers) =>
                    {
                        return Ok(());
                    }
                    Event::Resize(..) => {
                        terminal.draw(|fr| render::draw(&f, HINT, fr.area(), fr.buffer_mut()))?;
                    }
                    _ => {}
                }
            }
        }
    })();
    ratatui::restore();
    result
}

fn quits(code: KeyCode, modifiers: KeyModifiers) -> bool {
    match code {
        KeyCode::Char('q' | 'Q') | KeyCode::Esc => true,
        KeyCode::Char('c') => modifiers.contains(KeyModifiers::CONTROL),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q_esc_and_ctrl_c_quit_and_other_keys_do_not() {
        assert!(quits(KeyCode::Char('q'), KeyModifiers::NONE));
        assert!(quits(KeyCode::Esc, KeyModifiers::NONE));
        assert!(quits(KeyCode::Char('c'), KeyModifiers::CONTROL));
        assert!(!quits(KeyCode::Char('c'), KeyModifiers::NONE));
        assert!(!quits(KeyCode::Char('x'), KeyModifiers::NONE));
    }
}
