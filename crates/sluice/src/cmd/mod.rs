//! Subcommands of the `sluice` binary.

pub mod agent;
pub mod bench;
pub mod bench_agent;
pub mod bench_report;
pub mod catalog;
pub mod gateway;
pub mod plan;
pub mod scrub;
pub mod tenant;
pub mod up;

/// The multi-threaded runtime every serving command runs on.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// What SIGHUP reloads in this process: the gateway's and the agent's tenant settings
/// (credentials, quotas, rates), from the configuration file the process was started with.
pub struct Reload<'a> {
    pub path: Option<&'a std::path::Path>,
    /// What the command line overrides in the file (`sluice up`'s listen flags).
    pub adjust: Option<&'a (dyn Fn(&mut sluice_config::Config) + Sync)>,
    pub gateway: Option<&'a sluice_gateway::Control>,
    pub agent: Option<&'a sluice_agent::Control>,
}

impl Reload<'_> {
    /// Loads the file and applies it to both processes, or to neither: a file that does not
    /// parse, or that either refuses, changes nothing (the old configuration stays) and is
    /// logged with why. Never fatal.
    async fn apply(&self) {
        let Some(path) = self.path else {
            tracing::warn!(
                "SIGHUP ignored: the configuration is embedded (start with --config FILE to reload)"
            );
            return;
        };
        let mut config = match sluice_config::Config::load(path) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(file = %path.display(), error = %e, "reload refused: invalid configuration; the old one stays");
                return;
            }
        };
        if let Some(adjust) = self.adjust {
            adjust(&mut config);
        }
        if let Some(agent) = self.agent
            && let Err(e) = agent.check(&config)
        {
            tracing::error!(file = %path.display(), error = %e, "reload refused; the old configuration stays");
            return;
        }
        if let Some(gateway) = self.gateway
            && let Err(e) = gateway.reload(config.clone()).await
        {
            tracing::error!(file = %path.display(), error = %e, "reload refused; the old configuration stays");
            return;
        }
        if let Some(agent) = self.agent
            && let Err(e) = agent.reload(&config)
        {
            tracing::error!(file = %path.display(), error = %e, "agent reload refused");
        }
    }
}

/// Returns on SIGINT or SIGTERM; on SIGHUP, applies `reload` and goes on.
pub async fn serve_until_signal(reload: &Reload<'_>) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    loop {
        tokio::select! {
            r = tokio::signal::ctrl_c() => { r?; break; }
            _ = term.recv() => break,
            _ = hup.recv() => reload.apply().await,
        }
    }
    tracing::info!("shutting down");
    Ok(())
}

/// Serves the gateway until SIGINT or SIGTERM (SIGHUP reloads from `config_path`), then
/// shuts down gracefully.
pub async fn until_signal(
    running: sluice_gateway::Running,
    config_path: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let reload = Reload {
        path: config_path,
        adjust: None,
        gateway: Some(&running.control),
        agent: None,
    };
    serve_until_signal(&reload).await?;
    let _ = running.stopper().send(true);
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
