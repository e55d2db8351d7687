//! Subcommands of the `sluice` binary.

pub mod agent;
pub mod bench;
pub mod gateway;
pub mod plan;
pub mod tenant;
pub mod up;

/// The multi-threaded runtime every serving command runs on.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Returns on SIGINT or SIGTERM.
pub async fn wait_for_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}

/// Serves until SIGINT or SIGTERM, then shuts down gracefully.
pub async fn until_signal(running: sluice_gateway::Running) -> anyhow::Result<()> {
    let stop = running.stopper();
    let signals = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r,
            _ = term.recv() => Ok(()),
        }
    };
    tokio::select! {
        r = signals => {
            r?;
            tracing::info!("shutting down");
            let _ = stop.send(true);
            running.wait().await;
        }
    }
    Ok(())
}
