//! The agent's reload ([`sluice_agent::Control::reload`]) on a real, serving agent: a new
//! tenant and changed limits take effect; a file that moves what needs a restart is refused
//! and changes nothing. Its health answers ready without asking its (absent) upstream.

use sluice_agent::Agent;
use sluice_config::Config;

const CONFIG: &str = r#"
[agent]
listen = "127.0.0.1:0"
status_listen = "127.0.0.1:0"
data_dir = "DATA"
upstream = "http://127.0.0.1:9"
[[tenant]]
id = "alice"
access_key = "AKIDALICE000000RELD"
secret_key = "alice-secret-0123456789"
local_capacity = "8MiB"
drain_rate = "10MiB/s"
"#;

const CAROL: &str = r#"
[[tenant]]
id = "carol"
access_key = "AKIDCAROL000000RELD"
secret_key = "carol-secret-0123456789"
local_capacity = "4MiB"
"#;

fn parse(dir: &std::path::Path, text: &str) -> Config {
    let text = text.replace("DATA", &dir.join("data").display().to_string());
    Config::parse(&text, &dir.join("agent.toml")).expect("config")
}

const MIB: u64 = 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_tenants_and_changes_limits_and_refuses_a_new_address() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = parse(dir.path(), CONFIG);
    let running = Agent::open(&config)
        .await
        .expect("open")
        .start()
        .await
        .expect("start");
    // Ready although nothing listens at its upstream: the agent absorbs writes.
    assert_eq!(sluice_agent::server::unready(&running.drain).await, None);
    let ledger = || running.drain.journal.catalog().ledger();
    assert_eq!(ledger().usage("alice").map(|u| u.2), Some(8 * MIB));
    assert!(!running.drain.with_tenants(|t| t.contains_key("carol")));

    let grown = format!("{}{CAROL}", CONFIG.replace("\"8MiB\"", "\"16MiB\""));
    running
        .control
        .reload(&parse(dir.path(), &grown))
        .expect("reload");
    assert_eq!(ledger().usage("alice").map(|u| u.2), Some(16 * MIB));
    assert_eq!(ledger().usage("carol").map(|u| u.2), Some(4 * MIB));
    running.drain.with_tenants(|t| {
        assert_eq!(t["carol"].local_capacity, 4 * MIB);
        assert_eq!(t["alice"].policy.drain_rate, Some(10.0 * MIB as f64));
    });

    let moved = grown.replace("\"16MiB\"", "\"1MiB\"").replace(
        "status_listen = \"127.0.0.1:0\"",
        "status_listen = \"127.0.0.1:1\"",
    );
    let err = running
        .control
        .reload(&parse(dir.path(), &moved))
        .expect_err("refused");
    assert!(err.to_string().contains("status_listen"), "{err}");
    assert_eq!(ledger().usage("alice").map(|u| u.2), Some(16 * MIB));
    running.shutdown().await;
}
