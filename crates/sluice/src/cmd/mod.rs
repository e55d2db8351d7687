//! Subcommands of the `sluice` binary.

pub mod agent;
pub mod bench;
pub mod bench_agent;
pub mod bench_report;
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

/// Serves until SIGINT or SIGTERM, then shuts down gracefully. SIGHUP reloads tenant
/// specs (credentials, quotas, dmClock parameters) from `config_path`, as a validated swap.
pub async fn until_signal(
    running: sluice_gateway::Running,
    config_path: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let stop = running.stopper();
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    loop {
        tokio::select! {
            r = tokio::signal::ctrl_c() => { r?; break; }
            _ = term.recv() => break,
            _ = hup.recv() => {
                let Some(path) = config_path else {
                    tracing::warn!("SIGHUP ignored: the configuration is embedded");
                    continue;
                };
                match sluice_config::Config::load(path) {
                    Err(e) => tracing::error!(error = %e, "reload refused: invalid configuration"),
                    Ok(config) => {
                        if let Err(e) = running.control.reload(config).await {
                            tracing::error!(error = %e, "reload refused");
                        }
                    }
                }
            }
        }
    }
    tracing::info!("shutting down");
    let _ = stop.send(true);
    running.wait().await;
    Ok(())
}

/// One request with an empty body; the status and the body. With `keys` (access key, secret
/// key) it is signed (SigV4, service `s3`) as an S3 client signs it: for calls `object_store`
/// has no method for (CreateBucket, the agent's `GET /?sluice-status`); without, plain (the
/// agent's status listener).
pub async fn request(
    method: http::Method,
    url: &str,
    keys: Option<(&str, &str)>,
    region: &str,
) -> anyhow::Result<(http::StatusCode, String)> {
    use object_store::aws::{AwsAuthorizer, AwsCredential};
    use object_store::client::{HttpConnector, HttpRequestBody, ReqwestConnector};
    let mut req = http::Request::builder()
        .method(method)
        .uri(url)
        .body(HttpRequestBody::from(bytes::Bytes::new()))?;
    if let Some((access_key, secret_key)) = keys {
        let cred = AwsCredential {
            key_id: access_key.to_owned(),
            secret_key: secret_key.to_owned(),
            token: None,
        };
        AwsAuthorizer::new(&cred, "s3", region).try_authorize(&mut req, None)?;
    }
    let client = ReqwestConnector::default().connect(
        &object_store::ClientOptions::new()
            .with_allow_http(true)
            .with_timeout(std::time::Duration::from_secs(10)),
    )?;
    let resp = client.execute(req).await?;
    let status = resp.status();
    let body = resp.into_body().bytes().await?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}
