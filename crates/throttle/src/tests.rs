//! The dispatcher in paused tokio time: throughput shares, limits and bounds as clients see
//! them through `admit_*`, with the clock advanced only by the runtime.

use super::*;

const MIB: f64 = 1024.0 * 1024.0;

fn qos(r: f64, w: f64, l: Option<f64>) -> TenantQos {
    TenantQos::new(r * MIB, w, l.map(|l| l * MIB)).expect("valid qos")
}

fn config(policy: Policy, mib_per_sec: f64) -> ThrottleConfig {
    ThrottleConfig {
        policy,
        bandwidth: mib_per_sec * MIB,
        ops: 1e6,
        queue_depth: 64,
        lookahead: DEFAULT_LOOKAHEAD,
    }
}

/// Runs `streams` saturating clients per tenant for `secs` of virtual time, each admitting
/// 1 MiB grains back to back; returns the bytes granted to each tenant.
async fn saturate(t: &Arc<Throttle>, tenants: &[&str], streams: usize, secs: u64) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut handles = Vec::new();
    for (i, name) in tenants.iter().enumerate() {
        for _ in 0..streams {
            let t = Arc::clone(t);
            let name = (*name).to_owned();
            handles.push(tokio::spawn(async move {
                let mut granted = 0u64;
                while Instant::now() < deadline {
                    t.admit_bytes(&name, 1 << 20).await;
                    granted += 1 << 20;
                }
                (i, granted)
            }));
        }
    }
    let mut out = vec![0; tenants.len()];
    for h in handles {
        let (i, g) = h.await.expect("client task");
        out[i] += g;
    }
    out
}

#[tokio::test(start_paused = true)]
async fn weights_split_the_capacity() {
    let t = Throttle::start(
        config(Policy::DmClock, 64.0),
        vec![
            TenantSpec {
                name: "a".into(),
                qos: qos(0.0, 1.0, None),
            },
            TenantSpec {
                name: "b".into(),
                qos: qos(0.0, 3.0, None),
            },
        ],
    )
    .expect("start");
    let got = saturate(&t, &["a", "b"], 4, 20).await;
    let total = (got[0] + got[1]) as f64 / 20.0 / MIB;
    assert!(
        (total - 64.0).abs() < 64.0 * 0.05,
        "served {total} MiB/s of 64"
    );
    let ratio = got[1] as f64 / got[0] as f64;
    assert!((ratio - 3.0).abs() < 3.0 * 0.05, "ratio {ratio}");
}

#[tokio::test(start_paused = true)]
async fn reservation_holds_against_a_heavier_neighbour() {
    let t = Throttle::start(
        config(Policy::DmClock, 64.0),
        vec![
            TenantSpec {
                name: "small".into(),
                qos: qos(24.0, 1.0, None),
            },
            TenantSpec {
                name: "big".into(),
                qos: qos(0.0, 100.0, None),
            },
        ],
    )
    .expect("start");
    let got = saturate(&t, &["small", "big"], 4, 20).await;
    let small = got[0] as f64 / 20.0 / MIB;
    assert!(small >= 24.0 * 0.95, "small got {small} MiB/s, reserved 24");
}

#[tokio::test(start_paused = true)]
async fn limit_caps_a_tenant_alone() {
    let t = Throttle::start(
        config(Policy::DmClock, 64.0),
        vec![TenantSpec {
            name: "capped".into(),
            qos: qos(0.0, 1.0, Some(16.0)),
        }],
    )
    .expect("start");
    let got = saturate(&t, &["capped"], 4, 20).await;
    let rate = got[0] as f64 / 20.0 / MIB;
    assert!(
        (16.0 * 0.9..=16.0 * 1.05).contains(&rate),
        "capped at {rate} MiB/s"
    );
}

#[tokio::test(start_paused = true)]
async fn fifo_gives_no_isolation_and_rate_limit_no_pacing() {
    let fifo = Throttle::start(
        config(Policy::Fifo, 64.0),
        vec![
            TenantSpec {
                name: "a".into(),
                qos: qos(0.0, 1.0, None),
            },
            TenantSpec {
                name: "b".into(),
                qos: qos(0.0, 3.0, None),
            },
        ],
    )
    .expect("start");
    // One stream against eight: FIFO serves streams, not tenants.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut handles = Vec::new();
    for (name, streams) in [("a", 1), ("b", 8)] {
        for _ in 0..streams {
            let t = Arc::clone(&fifo);
            handles.push(tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    t.admit_bytes(name, 1 << 20).await;
                    n += 1;
                }
                (name, n)
            }));
        }
    }
    let (mut a, mut b) = (0, 0);
    for h in handles {
        match h.await.expect("task") {
            ("a", n) => a += n,
            (_, n) => b += n,
        }
    }
    assert!(b > 6 * a, "fifo a={a} b={b}");

    let capped = Throttle::start(
        config(Policy::RateLimit, 64.0),
        vec![TenantSpec {
            name: "a".into(),
            qos: qos(0.0, 1.0, Some(100.0)),
        }],
    )
    .expect("start");
    let got = saturate(&capped, &["a"], 4, 10).await;
    let rate = got[0] as f64 / 10.0 / MIB;
    assert!(
        rate > 90.0,
        "rate_limit is not paced to capacity: {rate} MiB/s"
    );
}

/// Real time here: the paused clock would auto-advance while tasks line up. The tier is
/// booked for ten seconds per operation, so nothing is granted during the test.
#[tokio::test]
async fn a_full_queue_refuses_only_that_tenant() {
    let mut cfg = config(Policy::DmClock, 1.0);
    cfg.queue_depth = 2;
    cfg.ops = 0.1;
    let t = Throttle::start(
        cfg,
        vec![
            TenantSpec {
                name: "noisy".into(),
                qos: qos(0.0, 1.0, None),
            },
            TenantSpec {
                name: "quiet".into(),
                qos: qos(0.0, 1.0, None),
            },
        ],
    )
    .expect("start");
    // The first op takes the tier for ten seconds; the next two wait for it.
    t.admit_op("noisy")
        .await
        .expect("first op is admitted at once");
    let waiting: Vec<_> = (0..2)
        .map(|_| {
            let t = Arc::clone(&t);
            tokio::spawn(async move { t.admit_op("noisy").await })
        })
        .collect();
    let slot = t.slot("noisy").expect("slot");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while slot.waiting.load(Ordering::SeqCst) < 2 {
        assert!(std::time::Instant::now() < deadline, "the two never queued");
        tokio::task::yield_now().await;
    }
    let refused = t
        .admit_op("noisy")
        .await
        .expect_err("a third waiting op must be refused");
    assert_eq!(refused.waiting, 2);
    assert!(refused.retry_after >= Duration::from_secs(1));
    // The quiet tenant is not refused: its admission is queued, not rejected.
    let quiet = Arc::clone(&t);
    let quiet = tokio::spawn(async move { quiet.admit_op("quiet").await });
    let qslot = t.slot("quiet").expect("slot");
    while qslot.waiting.load(Ordering::SeqCst) < 1 && !quiet.is_finished() {
        assert!(std::time::Instant::now() < deadline, "quiet never queued");
        tokio::task::yield_now().await;
    }
    if quiet.is_finished() {
        assert!(
            quiet.await.expect("task").is_ok(),
            "the quiet tenant was refused"
        );
    } else {
        quiet.abort();
    }
    for w in waiting {
        w.abort();
    }
}

#[tokio::test(start_paused = true)]
async fn reload_swaps_parameters_and_refuses_overbooking() {
    let t = Throttle::start(
        config(Policy::DmClock, 64.0),
        vec![TenantSpec {
            name: "a".into(),
            qos: qos(0.0, 1.0, Some(8.0)),
        }],
    )
    .expect("start");
    let before = saturate(&t, &["a"], 2, 5).await[0] as f64 / 5.0 / MIB;
    assert!(before <= 8.0 * 1.1, "{before}");
    let over = t
        .update(vec![TenantSpec {
            name: "a".into(),
            qos: qos(100.0, 1.0, None),
        }])
        .await;
    assert!(
        over.is_err(),
        "a reservation above capacity must be refused"
    );
    t.update(vec![
        TenantSpec {
            name: "a".into(),
            qos: qos(0.0, 1.0, Some(32.0)),
        },
        TenantSpec {
            name: "new".into(),
            qos: qos(0.0, 1.0, None),
        },
    ])
    .await
    .expect("valid update");
    let after = saturate(&t, &["a"], 2, 5).await[0] as f64 / 5.0 / MIB;
    assert!(after > 24.0 && after <= 32.0 * 1.1, "{after}");
    assert!(t.specs().iter().any(|s| s.name == "new"));
}

mod background;

/// A share set live (as the cluster coordinator does every round) changes the pace and the
/// tenants' local parameters at once, and the usage counters see every granted byte.
#[tokio::test(start_paused = true)]
async fn a_live_share_changes_capacity_and_limits() {
    let t = Throttle::start(
        config(Policy::DmClock, 64.0),
        vec![
            TenantSpec {
                name: "a".into(),
                qos: qos(0.0, 1.0, None),
            },
            TenantSpec {
                name: "b".into(),
                qos: qos(0.0, 1.0, Some(40.0)),
            },
        ],
    )
    .expect("start");
    let whole = saturate(&t, &["a", "b"], 4, 5).await;
    let whole_total = (whole[0] + whole[1]) as f64 / 5.0 / MIB;
    assert!((whole_total - 64.0).abs() < 64.0 * 0.05, "{whole_total}");
    t.set_share(Some(Share {
        capacity: 16.0 * MIB,
        tenants: HashMap::from([("b".to_owned(), qos(0.0, 1.0, Some(4.0)))]),
        scale: 0.25,
    }))
    .await
    .expect("share");
    // The grains granted under the old share (the lookahead) drain first.
    let settle = saturate(&t, &["a", "b"], 4, 1).await;
    let part = saturate(&t, &["a", "b"], 4, 10).await;
    let (a, b) = (part[0] as f64 / 10.0 / MIB, part[1] as f64 / 10.0 / MIB);
    // Each of the 8 streams may finish one grain granted before the deadline: 0.8 MiB/s
    // over 10 s on top of the share; b's limit allows its bucket (2 grains) on top of that.
    assert!(
        a + b >= 16.0 * 0.97 && a + b <= 16.0 + 0.8 + 0.1,
        "a {a} b {b} of 16"
    );
    assert!(b <= 4.0 + 0.4 + 0.2 + 0.05, "b's local limit 4: {b}");
    assert!(b >= 4.0 * 0.9, "b held to its local limit, not below: {b}");
    // The configured parameters are unchanged; only the local ones follow the share.
    assert_eq!(t.specs()[1].qos.limit(), Some(40.0 * MIB));
    let usage = t.usage();
    let served: u64 = usage.iter().map(|u| u.served).sum();
    let granted: u64 = whole.iter().chain(&settle).chain(&part).sum();
    // Served counts cost units: each 1 MiB grain plus its per-op cost.
    assert!(served >= granted, "served {served} < granted {granted}");
    assert!(usage.iter().all(|u| u.asked == u.served && u.waiting == 0));
    // The visiting form hands on the same counters, every tenant once.
    let mut visited = Vec::new();
    t.each_usage(|name, asked, served, waiting| {
        visited.push(usage_of(name, asked, served, waiting));
    });
    visited.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(visited, usage);
    assert!(served > 0 && usage.len() == 2, "{usage:?}");
    // Back to the whole tier.
    t.set_share(None).await.expect("unshare");
    let again = saturate(&t, &["a", "b"], 4, 5).await;
    let total = (again[0] + again[1]) as f64 / 5.0 / MIB;
    assert!((total - 64.0).abs() < 64.0 * 0.05, "{total}");
}

#[tokio::test(start_paused = true)]
async fn a_share_without_capacity_is_refused() {
    let t = Throttle::start(config(Policy::DmClock, 64.0), Vec::new()).expect("start");
    let bad = Share {
        capacity: 0.0,
        tenants: HashMap::new(),
        scale: 1.0,
    };
    assert!(matches!(
        t.set_share(Some(bad)).await,
        Err(ThrottleError::Rate(_))
    ));
}

/// A grain booked under a small share must not hold the tier closed for its old service time
/// once the share is raised: the dispatcher kept the booked work in seconds, so a gateway on
/// the cluster's 5% floor that granted one 1 MiB grain stayed closed for a second after the
/// coordinator raised its share (a burst's first grains waited a round and more).
#[tokio::test(start_paused = true)]
async fn a_raised_share_shortens_the_work_already_booked() {
    let t = Throttle::start(
        config(Policy::DmClock, 64.0),
        vec![TenantSpec {
            name: "a".into(),
            qos: qos(0.0, 1.0, None),
        }],
    )
    .expect("start");
    let share = |mib: f64| Share {
        capacity: mib * MIB,
        tenants: HashMap::new(),
        scale: 1.0,
    };
    t.set_share(Some(share(1.0))).await.expect("small share");
    // Granted at once (the tier is free); it books about a second at 1 MiB/s.
    assert!(t.admit_bytes("a", 1 << 20).await < Duration::from_millis(1));
    t.set_share(Some(share(64.0))).await.expect("raised share");
    let raised = t.admit_bytes("a", 1 << 20).await;
    // At 64 MiB/s the booked MiB is 16 ms of work.
    assert!(raised <= Duration::from_millis(20), "waited {raised:?}");
    // Lowered, the work already booked stays as booked (the second grain, 15.6 ms, and the
    // lookahead before it): the new rate governs what follows, 1 MiB at 4 MiB/s.
    t.set_share(Some(share(4.0))).await.expect("lowered share");
    let lowered = t.admit_bytes("a", 1 << 20).await;
    assert!(lowered <= Duration::from_millis(20), "waited {lowered:?}");
    let next = t.admit_bytes("a", 1 << 20).await;
    assert!(
        next >= Duration::from_millis(240) && next <= Duration::from_millis(260),
        "waited {next:?}"
    );
}

fn usage_of(name: &str, asked: u64, served: u64, waiting: usize) -> TenantUsage {
    TenantUsage {
        name: name.to_owned(),
        asked,
        served,
        waiting,
    }
}
