use std::collections::VecDeque;
use std::sync::Mutex;

use super::*;

fn key(ak: &str) -> FetchedKey {
    FetchedKey {
        access_key: ak.into(),
        secret_key: format!("{ak}-secret"),
    }
}

fn fetched(tenants: &[(&str, &[&str])]) -> Fetched {
    Fetched {
        tenants: tenants
            .iter()
            .map(|(id, keys)| FetchedTenant {
                id: (*id).into(),
                capacity: 1 << 20,
                max_objects: 10,
                max_buckets: 3,
                keys: keys.iter().map(|k| key(k)).collect(),
                local_capacity: None,
                local_reservation: None,
                local_weight: None,
                local_limit: None,
            })
            .collect(),
    }
}

fn file_tenant(id: &str, local_capacity: u64) -> Tenant {
    let mut t = node_defaults(id);
    t.access_key = format!("FILE{id}");
    t.secret_key = format!("file-{id}-secret");
    t.local.local_capacity = local_capacity;
    t
}

fn served(keys: &[TenantKey]) -> Vec<(String, String)> {
    let mut v: Vec<_> = keys
        .iter()
        .map(|k| (k.tenant.to_string(), k.access_key.clone()))
        .collect();
    v.sort();
    v
}

#[test]
fn without_an_answer_the_files_tenants_and_keys_are_served_as_they_are() {
    let file = [file_tenant("alice", 5)];
    let (tenants, keys) = merge(&file, None);
    assert_eq!(tenants.len(), 1);
    assert_eq!(served(&keys), [("alice".into(), "FILEalice".into())]);
}

#[test]
fn the_gateways_keys_replace_the_files_for_the_tenants_they_name_and_keep_its_local_settings() {
    let file = [file_tenant("alice", 5), file_tenant("carol", 7)];
    let answer = fetched(&[
        ("alice", &["AK1", "AK2"]),
        ("dave", &["AK3"]),
        ("gone", &[]),
    ]);
    let (tenants, keys) = merge(&file, Some(&answer));
    assert_eq!(
        served(&keys),
        [
            ("alice".into(), "AK1".into()),
            ("alice".into(), "AK2".into()),
            ("carol".into(), "FILEcarol".into()),
            ("dave".into(), "AK3".into()),
        ]
    );
    let alice = tenants.iter().find(|t| t.id == "alice").expect("alice");
    assert_eq!(
        alice.local.local_capacity, 5,
        "the file's node-local setting"
    );
    assert_eq!((alice.capacity, alice.max_buckets), (1 << 20, 3));
    assert_eq!(
        (alice.access_key.as_str(), alice.secret_key.as_str()),
        ("AK1", "AK1-secret")
    );
    let dave = tenants.iter().find(|t| t.id == "dave").expect("dave");
    assert_eq!(
        dave.local.local_capacity,
        u64::MAX,
        "the node-local default"
    );
    assert!(
        !tenants.iter().any(|t| t.id == "gone"),
        "no live key: not served"
    );
}

#[test]
fn the_catalogs_node_local_settings_are_served_over_the_files_key_by_key_and_conflicts_reported() {
    let mut alice = file_tenant("alice", 5 << 20);
    alice.local.local_qos = Qos {
        reservation: 1e6,
        weight: 4.0,
        limit: None,
    };
    let file = [alice, file_tenant("carol", u64::MAX)];
    let mut answer = fetched(&[("alice", &["AK1"]), ("carol", &["AK2"]), ("dave", &["AK3"])]);
    answer.tenants[0].local_capacity = Some(9 << 20);
    answer.tenants[0].local_limit = Some(3e6);
    answer.tenants[1].local_capacity = Some(7 << 20);
    answer.tenants[2].local_weight = Some(2.0);
    let (tenants, _) = merge(&file, Some(&answer));
    let find = |id: &str| tenants.iter().find(|t| t.id == id).expect("served");
    let alice = find("alice");
    assert_eq!(
        alice.local.local_capacity,
        9 << 20,
        "the catalog's, over the file's"
    );
    assert_eq!(
        alice.local.local_qos,
        Qos {
            reservation: 1e6,
            weight: 4.0,
            limit: Some(3e6)
        },
        "what the catalog does not hold stays the file's"
    );
    assert_eq!(find("carol").local.local_capacity, 7 << 20);
    let dave = find("dave");
    assert_eq!(
        (dave.local.local_capacity, dave.local.local_qos.weight),
        (u64::MAX, 2.0),
        "a tenant the file does not name: the catalog's over the defaults"
    );

    let mut t = file[0].clone();
    let conflicts = apply_local(&mut t, &answer.tenants[0]);
    assert_eq!(
        conflicts,
        [LocalConflict {
            tenant: "alice".into(),
            key: "local_capacity",
            file: "5MiB".into(),
            catalog: "9MiB".into(),
        }],
        "the file's limit was unset, its capacity another: only that one is a conflict"
    );
    let mut t = file[1].clone();
    assert!(
        apply_local(&mut t, &answer.tenants[1]).is_empty(),
        "a key the file leaves unset is no conflict"
    );
}

#[test]
fn a_catalog_local_limit_below_the_files_reservation_keeps_the_files_shares() {
    let mut alice = file_tenant("alice", u64::MAX);
    alice.local.local_qos.reservation = 4e6;
    let mut answer = fetched(&[("alice", &["AK1"])]);
    answer.tenants[0].local_limit = Some(1e6);
    answer.tenants[0].local_capacity = Some(1 << 20);
    let (tenants, _) = merge(&[alice.clone()], Some(&answer));
    assert_eq!(tenants[0].local.local_qos, alice.local.local_qos);
    assert_eq!(
        tenants[0].local.local_capacity,
        1 << 20,
        "the local quota is still the catalog's"
    );
}

#[test]
fn an_answer_or_cache_without_node_local_settings_reads_as_none_held() {
    let old = r#"{"tenants":[{"id":"alice","capacity":1,"max_objects":2,"max_buckets":3,
        "keys":[{"access_key":"AK1","secret_key":"s"}]}]}"#;
    let f: Fetched = serde_json::from_str(old).expect("an older gateway's answer");
    let t = &f.tenants[0];
    assert_eq!(
        (
            t.local_capacity,
            t.local_reservation,
            t.local_weight,
            t.local_limit
        ),
        (None, None, None, None)
    );
    let file = [file_tenant("alice", 5)];
    let (tenants, _) = merge(&file, Some(&f));
    assert_eq!(
        tenants[0].local, file[0].local,
        "the file governs, as before"
    );
}

#[test]
fn the_cache_is_private_and_reads_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = cache_path(dir.path());
    assert_eq!(load_cache(&path), None);
    let a = fetched(&[("alice", &["AK1"])]);
    save_cache(&path, &a).expect("saved");
    let b = fetched(&[("alice", &["AK2"])]);
    save_cache(&path, &b).expect("saved again");
    assert_eq!(load_cache(&path), Some(b));
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
    std::fs::write(&path, "not json").expect("write");
    assert_eq!(load_cache(&path), None);
}

/// Answers from a script, one per call; an outage once it runs out.
struct Script(Mutex<VecDeque<Option<Fetched>>>);

#[async_trait::async_trait]
impl Source for Script {
    async fn fetch(&self) -> Result<Fetched, FetchError> {
        let next = self.0.lock().expect("script").pop_front().flatten();
        next.ok_or_else(|| FetchError::Timeout {
            addr: "script".into(),
        })
    }
}

#[tokio::test(start_paused = true)]
async fn each_new_answer_is_cached_and_applied_once_and_an_outage_keeps_the_last() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = cache_path(dir.path());
    let (a, b) = (
        fetched(&[("alice", &["AK1"])]),
        fetched(&[("alice", &["AK2"])]),
    );
    let script = Arc::new(Script(Mutex::new(VecDeque::from([
        Some(a.clone()),
        Some(a.clone()),
        None,
        Some(b.clone()),
        None,
    ]))));
    let applied = Arc::new(Mutex::new(Vec::new()));
    let (stop, rx) = watch::channel(false);
    let start = tokio::time::Instant::now();
    let task = {
        let applied = Arc::clone(&applied);
        tokio::spawn(run(
            script,
            cache.clone(),
            None,
            move |f| {
                applied
                    .lock()
                    .expect("applied")
                    .push((start.elapsed(), f.clone()));
            },
            rx,
        ))
    };
    tokio::time::sleep(POLL * 4 + POLL / 2).await;
    assert_eq!(
        *applied.lock().expect("applied"),
        [(Duration::ZERO, a), (POLL * 3, b.clone())],
        "an answer applied when it changes, on the poll that brought it"
    );
    assert_eq!(load_cache(&cache), Some(b));
    stop.send(true).expect("stop");
    task.await.expect("the loop ends");
}

#[tokio::test(start_paused = true)]
async fn the_cached_answer_is_not_applied_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = fetched(&[("alice", &["AK1"])]);
    let script = Arc::new(Script(Mutex::new(VecDeque::from([Some(a.clone())]))));
    let applied = Arc::new(Mutex::new(0));
    let (stop, rx) = watch::channel(false);
    let task = {
        let applied = Arc::clone(&applied);
        tokio::spawn(run(
            script,
            cache_path(dir.path()),
            Some(a),
            move |_| *applied.lock().expect("applied") += 1,
            rx,
        ))
    };
    tokio::time::sleep(POLL * 2).await;
    assert_eq!(*applied.lock().expect("applied"), 0);
    stop.send(true).expect("stop");
    task.await.expect("the loop ends");
}

/// A control listener answering every connection with `status` and `body`.
async fn gateway(status: u16, body: String) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr").to_string();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).await.unwrap_or(0);
            let asked = String::from_utf8_lossy(&buf[..n]).into_owned();
            let body = if asked.starts_with("GET /admin/tenants ")
                && asked.contains("Authorization: Bearer sluice-node.n1.tag\r\n")
            {
                body.clone()
            } else {
                "{\"error\":\"unexpected request\"}".to_owned()
            };
            let answer = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(answer.as_bytes()).await;
        }
    });
    addr
}

#[tokio::test]
async fn the_gateways_are_asked_in_turn_with_the_node_credential() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cred = dir.path().join("node.cred");
    std::fs::write(&cred, "sluice-node.n1.tag\n").expect("write");
    let a = fetched(&[("alice", &["AK1"])]);
    let refusing = gateway(403, "{\"error\":\"not a node credential\"}".into()).await;
    let answering = gateway(200, serde_json::to_string(&a).expect("json")).await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").to_string()
    };
    let both = Gateways::new(vec![closed.clone(), answering], &cred).expect("cred");
    assert_eq!(both.fetch().await.expect("the second answers"), a);
    let refused = Gateways::new(vec![closed, refusing], &cred)
        .expect("cred")
        .fetch()
        .await
        .expect_err("refused");
    assert!(
        matches!(&refused, FetchError::Refused { status: 403, why, .. } if why == "not a node credential"),
        "{refused}"
    );
    assert!(matches!(
        Gateways::new(vec![], &dir.path().join("missing")),
        Err(FetchError::Credential { .. })
    ));
}
