//! The coordinator's and a member's decisions in paused tokio time, and report signatures.

use super::*;

const MIB: f64 = 1024.0 * 1024.0;

fn report(id: &str, tenants: &[(&str, f64)]) -> Report {
    Report {
        id: id.to_owned(),
        s3: format!("http://{id}"),
        control: format!("http://{id}/control"),
        tenants: tenants
            .iter()
            .map(|(t, d)| {
                (
                    (*t).to_owned(),
                    Usage {
                        demand_bps: *d,
                        served_bps: 0.0,
                    },
                )
            })
            .collect(),
        urgent: false,
    }
}

fn tenants() -> BTreeMap<String, TenantQos> {
    BTreeMap::from([
        (
            "a".to_owned(),
            TenantQos::new(0.0, 1.0, None).expect("valid"),
        ),
        (
            "b".to_owned(),
            TenantQos::new(0.0, 3.0, Some(30.0 * MIB)).expect("valid"),
        ),
    ])
}

fn total(v: &View) -> f64 {
    v.gateways.iter().map(|g| g.capacity_bps).sum()
}

/// A gateway killed under load: its share is back with the others within 2 s, while the
/// survivors keep reporting every round.
#[tokio::test(start_paused = true)]
async fn a_dead_gateways_share_is_reassigned_within_two_seconds() {
    let cap = 48.0 * MIB;
    let mut c = Coordinator::new("g1", Instant::now());
    let round = |c: &mut Coordinator, ids: &[&str]| {
        for id in ids {
            c.report(
                Instant::now(),
                report(id, &[("a", 20.0 * MIB), ("b", 40.0 * MIB)]),
            );
        }
        c.assign(Instant::now(), cap, &tenants())
    };
    assert!(round(&mut c, &["g1", "g2", "g3"]).is_none(), "warming up");
    tokio::time::advance(WARMUP).await;
    let v = round(&mut c, &["g1", "g2", "g3"]).expect("assigned");
    assert_eq!(v.gateways.len(), 3);
    assert!((total(&v) - cap).abs() < 1.0);
    let killed = Instant::now();
    let mut converged = None;
    while killed.elapsed() < Duration::from_secs(3) {
        tokio::time::advance(ROUND).await;
        let v = round(&mut c, &["g1", "g2"]).expect("assigned");
        if v.gateways.len() == 2 {
            assert!((total(&v) - cap).abs() < 1.0, "{}", total(&v));
            // B's limit is split over the two survivors only.
            let l: f64 = v
                .gateways
                .iter()
                .map(|g| g.tenants["b"].limit_bps.expect("limited"))
                .sum();
            assert!((l - 30.0 * MIB).abs() < 1.0);
            converged = Some(killed.elapsed());
            break;
        }
    }
    let t = converged.expect("re-converged");
    assert!(t <= Duration::from_secs(2), "re-converged after {t:?}");
}

/// A gateway that joins under load is in the split from the round after its first report:
/// the capacity and B's limit are then shared by all three, B's part following its demand.
#[tokio::test(start_paused = true)]
async fn a_joining_gateway_is_in_the_next_split() {
    let cap = 48.0 * MIB;
    let mut c = Coordinator::new("g1", Instant::now());
    tokio::time::advance(WARMUP).await;
    for id in ["g1", "g2"] {
        c.report(Instant::now(), report(id, &[("b", 40.0 * MIB)]));
    }
    let v = c.assign(Instant::now(), cap, &tenants()).expect("assigned");
    assert_eq!(v.gateways.len(), 2);
    tokio::time::advance(ROUND).await;
    for id in ["g1", "g2", "g3"] {
        c.report(Instant::now(), report(id, &[("b", 40.0 * MIB)]));
    }
    let v = c.assign(Instant::now(), cap, &tenants()).expect("assigned");
    assert_eq!(v.gateways.len(), 3, "{v:?}");
    assert!((total(&v) - cap).abs() < 1.0, "{}", total(&v));
    let limits: Vec<f64> = v
        .gateways
        .iter()
        .map(|g| g.tenants["b"].limit_bps.expect("limited"))
        .collect();
    assert!(
        (limits.iter().sum::<f64>() - 30.0 * MIB).abs() < 1.0,
        "{limits:?}"
    );
    // Equal demand on each: an equal third of the limit each.
    for l in &limits {
        assert!((l - 10.0 * MIB).abs() < 1.0, "{limits:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_member_without_a_coordinator_falls_back_to_capacity_over_n() {
    let cap = 48.0 * MIB;
    let mut c = Coordinator::new("g1", Instant::now());
    tokio::time::advance(WARMUP).await;
    for id in ["g1", "g2", "g3"] {
        c.report(Instant::now(), report(id, &[("a", 10.0 * MIB)]));
    }
    let v = c.assign(Instant::now(), cap, &tenants()).expect("assigned");
    let mut m = Member::new("g2", Instant::now());
    assert!(matches!(
        m.round(Instant::now(), Some(&v)),
        Action::Apply(_)
    ));
    assert_eq!(m.live(), 3);
    // The coordinator goes away: the last share is kept, then capacity / 3.
    let lost = Instant::now();
    let fell_back = loop {
        tokio::time::advance(ROUND).await;
        match m.round(Instant::now(), None) {
            Action::Keep => assert!(!m.fallback()),
            Action::Fallback(n) => break (n, lost.elapsed()),
            Action::Apply(_) => panic!("no view, no share"),
        }
    };
    assert_eq!(
        fell_back.0, 3,
        "never the whole capacity with three gateways"
    );
    assert!(fell_back.1 >= FALLBACK_AFTER && fell_back.1 <= FALLBACK_AFTER + ROUND);
    assert!(m.fallback());
    let s = fallback_share(cap, fell_back.0);
    assert!((s.capacity - cap / 3.0).abs() < 1.0);
    assert!((s.scale - 1.0 / 3.0).abs() < 1e-12);
    // A view that does not name this gateway is no assignment either.
    let other = View {
        gateways: v
            .gateways
            .iter()
            .filter(|g| g.id != "g2")
            .cloned()
            .collect(),
        ..v.clone()
    };
    assert!(matches!(
        m.round(Instant::now(), Some(&other)),
        Action::Fallback(3)
    ));
    // The coordinator is back.
    assert!(matches!(
        m.round(Instant::now(), Some(&v)),
        Action::Apply(_)
    ));
    assert!(!m.fallback());
}

#[tokio::test(start_paused = true)]
async fn a_lone_gateway_gets_the_whole_capacity_and_fallback_never_exceeds_it() {
    let mut c = Coordinator::new("g1", Instant::now());
    tokio::time::advance(WARMUP).await;
    c.report(Instant::now(), report("g1", &[("a", 1.0)]));
    let v = c
        .assign(Instant::now(), 100.0, &tenants())
        .expect("assigned");
    let share = v.share_of("g1").expect("named");
    assert!((share.capacity - 100.0).abs() < 1e-9);
    assert!((fallback_share(100.0, 0).capacity - 100.0).abs() < 1e-9);
}

#[test]
fn reports_verify_only_with_the_deployments_key_and_in_time() {
    let k = hmac::Key::new(hmac::HMAC_SHA256, b"deployment secret");
    let other = hmac::Key::new(hmac::HMAC_SHA256, b"someone else");
    let body = br#"{"id":"g2"}"#;
    let now = 1_700_000_000_000;
    let sig = sign(&k, now, body);
    assert!(verify(&k, now + 1000, &sig, body));
    assert!(!verify(&other, now, &sig, body), "forged with another key");
    assert!(!verify(&k, now, &sig, br#"{"id":"g3"}"#), "a changed body");
    assert!(!verify(&k, now + 6000, &sig, body), "too old");
    assert!(!verify(&k, now, "garbage", body));
    assert!(!verify(&k, now, "123.zz", body));
    let forged = sign(&other, now, body);
    assert!(!verify(&k, now, &forged, body));
}

/// A gateway held to its floor, its tenant's requests all waiting for their first admission,
/// must still report that tenant's demand: the meter counted only what those requests had
/// asked for (their operation's cost, 6 KiB each here), so such a gateway reported almost no
/// demand and the coordinator kept it on its floor for as long as the floor took to clear
/// (over a second for one 1 MiB grain at 0.8 MiB/s).
#[tokio::test(start_paused = true)]
async fn requests_waiting_for_their_first_admission_count_as_demand() {
    use sluice_throttle::{Policy, Share, TenantSpec, ThrottleConfig};
    let throttle = Throttle::start(
        ThrottleConfig {
            policy: Policy::DmClock,
            bandwidth: 48.0 * MIB,
            ops: 8000.0,
            queue_depth: 64,
            lookahead: sluice_throttle::DEFAULT_LOOKAHEAD,
        },
        vec![TenantSpec {
            name: "a".into(),
            qos: TenantQos::new(0.0, 1.0, None).expect("valid"),
        }],
    )
    .expect("start");
    throttle
        .set_share(Some(Share {
            capacity: 0.8 * MIB,
            tenants: HashMap::new(),
            scale: 1.0 / 3.0,
        }))
        .await
        .expect("the floor");
    let mut meter = Meter::new(1 << 20);
    let _ = meter.rates(&throttle, Instant::now());
    // One grain books the floor for over a second; four requests then wait behind it.
    throttle.admit_bytes("a", 1 << 20).await;
    let waiting: Vec<_> = (0..4)
        .map(|_| {
            let t = Arc::clone(&throttle);
            tokio::spawn(async move { t.admit_op("a").await })
        })
        .collect();
    tokio::time::advance(ROUND).await;
    let usage = meter.rates(&throttle, Instant::now());
    let a = usage["a"];
    assert!(
        a.demand_bps >= 4.0 * MIB / BACKLOG_WINDOW,
        "four waiting requests are four grains of demand: {a:?}"
    );
    assert!(a.served_bps >= 10.0 * MIB, "the granted grain: {a:?}");
    for w in waiting {
        w.abort();
    }
}

/// A gateway bound to `0.0.0.0` advertised `0.0.0.0:PORT` to the others (and took it as its
/// id, the same on every host): with `[gateway] advertise` it names the address given, its id
/// is that `host:port`, and its S3 URL that host at its own S3 port.
#[tokio::test]
async fn a_gateway_names_itself_by_its_advertised_address() {
    use sluice_throttle::{Policy, ThrottleConfig};
    let text = |advertise: &str| {
        format!(
            "[gateway]\nlisten = \"0.0.0.0:9000\"\nmetrics_listen = \"0.0.0.0:9100\"\n{advertise}\n\
             [gateway.capacity]\nbandwidth = \"48MiB/s\"\n\
             [catalog]\nurl = \"postgres://u:p@db:5432/sluice\"\n"
        )
    };
    let throttle = Throttle::start(
        ThrottleConfig {
            policy: Policy::DmClock,
            bandwidth: 48.0 * MIB,
            ops: 8000.0,
            queue_depth: 64,
            lookahead: sluice_throttle::DEFAULT_LOOKAHEAD,
        },
        Vec::new(),
    )
    .expect("start");
    let s3: std::net::SocketAddr = "0.0.0.0:9000".parse().expect("addr");
    let control: std::net::SocketAddr = "0.0.0.0:9100".parse().expect("addr");
    let path = std::path::Path::new("/etc/sluice/sluice.toml");
    let config =
        sluice_config::Config::parse(&text("advertise = \"10.0.0.7:9100\""), path).expect("valid");
    let c = Cluster::new(&config, Arc::clone(&throttle), s3, control).expect("cluster");
    assert_eq!(
        (c.id.as_str(), c.s3.as_str(), c.control.as_str()),
        (
            "10.0.0.7:9100",
            "http://10.0.0.7:9000",
            "http://10.0.0.7:9100"
        )
    );
    let config =
        sluice_config::Config::parse(&text("advertise = \"https://gw-2.internal:443\""), path)
            .expect("valid");
    let c = Cluster::new(&config, throttle, s3, control).expect("cluster");
    assert_eq!(
        (c.id.as_str(), c.s3.as_str(), c.control.as_str()),
        (
            "gw-2.internal:443",
            "http://gw-2.internal:9000",
            "https://gw-2.internal:443"
        )
    );
    // Without it, such a gateway does not start: it would advertise 0.0.0.0.
    let err = sluice_config::Config::parse(&text(""), path)
        .expect_err("an unspecified bind needs advertise")
        .to_string();
    assert!(err.contains("gateway.advertise"), "{err}");
}

#[test]
fn without_advertise_the_bound_addresses_name_the_gateway() {
    let s3 = "10.0.0.1:9000".parse().expect("addr");
    let control = "10.0.0.1:9100".parse().expect("addr");
    assert_eq!(
        Names::of(s3, control, None, true),
        Names {
            id: "10.0.0.1:9000".into(),
            s3: "https://10.0.0.1:9000".into(),
            control: "http://10.0.0.1:9100".into(),
        }
    );
}

fn throttle(bandwidth: f64, tenants: &[&str]) -> Arc<Throttle> {
    use sluice_throttle::{Policy, TenantSpec, ThrottleConfig};
    Throttle::start(
        ThrottleConfig {
            policy: Policy::DmClock,
            bandwidth,
            ops: 8000.0,
            queue_depth: 64,
            lookahead: sluice_throttle::DEFAULT_LOOKAHEAD,
        },
        tenants
            .iter()
            .map(|t| TenantSpec {
                name: (*t).to_owned(),
                qos: TenantQos::new(0.0, 1.0, None).expect("valid"),
            })
            .collect(),
    )
    .expect("start")
}

/// A burst's onset and its end are reported between rounds: the victim's read waited up to
/// two rounds (its gateway's next report, then the other gateway's) for the capacity it
/// needed, and its share stayed with it for a round after it was done, the served rate of
/// the round still counting as demand.
#[tokio::test(start_paused = true)]
async fn a_burst_and_its_end_are_urgent_and_an_idle_tenant_demands_nothing() {
    let cap = 100.0 * MIB;
    let throttle = throttle(cap, &["v"]);
    throttle
        .set_share(Some(Share {
            capacity: 2.5 * MIB,
            tenants: HashMap::new(),
            scale: 0.5,
        }))
        .await
        .expect("the floor");
    let mut meter = Meter::new(256 << 10);
    let _ = meter.rates(&throttle, Instant::now());
    tokio::time::advance(SAMPLE).await;
    assert!(
        !meter.urgent(&throttle, Instant::now(), cap),
        "nothing asked: nothing to say"
    );
    // One grain books the floor for 100 ms; a GET then waits for its first admission.
    throttle.admit_bytes("v", 256 << 10).await;
    let t = Arc::clone(&throttle);
    let get = tokio::spawn(async move { t.admit_op("v").await });
    tokio::task::yield_now().await;
    assert!(
        meter.urgent(&throttle, Instant::now(), cap),
        "a request waiting on a gateway that reported nothing"
    );
    let usage = meter.rates(&throttle, Instant::now());
    assert!(
        usage["v"].demand_bps >= cap,
        "a waiting GET asks for its read-ahead within the backlog window: {:?}",
        usage["v"]
    );
    // Sampled as the loop samples, until the GET is admitted (the floor's grain takes 100 ms).
    while !get.is_finished() {
        tokio::time::advance(SAMPLE).await;
        tokio::task::yield_now().await;
        assert!(
            !meter.urgent(&throttle, Instant::now(), cap),
            "the same backlog again is not news"
        );
    }
    get.await.expect("joined").expect("admitted");
    // Everything granted: idle once IDLE has passed with nothing asked (as sampled, so
    // between IDLE and IDLE + SAMPLE after it was).
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(!meter.urgent(&throttle, Instant::now(), cap));
    tokio::time::advance(IDLE).await;
    assert!(
        meter.urgent(&throttle, Instant::now(), cap),
        "a tenant that demanded the tier has gone idle"
    );
    let usage = meter.rates(&throttle, Instant::now());
    assert!(
        usage["v"].demand_bps.abs() < f64::EPSILON,
        "{:?}",
        usage["v"]
    );
    tokio::time::advance(SAMPLE).await;
    assert!(
        !meter.urgent(&throttle, Instant::now(), cap),
        "its end was reported once"
    );
}

fn coordinating_cluster(throttle: Arc<Throttle>) -> Arc<Cluster> {
    let text = "[gateway]\nlisten = \"127.0.0.1:9000\"\nmetrics_listen = \"127.0.0.1:9100\"\n\
                [gateway.capacity]\nbandwidth = \"100MiB/s\"\n\
                [catalog]\nurl = \"postgres://u:p@db:5432/sluice\"\n";
    let config = sluice_config::Config::parse(text, std::path::Path::new("/etc/sluice.toml"))
        .expect("valid");
    let c = Cluster::new(
        &config,
        throttle,
        "127.0.0.1:9000".parse().expect("addr"),
        "127.0.0.1:9100".parse().expect("addr"),
    )
    .expect("cluster");
    c.state().coordinator = Some(Coordinator::new(&c.id, Instant::now()));
    c
}

/// An urgent report is split on at once, the reporter answered with its new share and the
/// coordinator's own gateway handed the new view: a plain report is answered with the view
/// of the coordinator's last round, which knew nothing of the burst.
#[tokio::test(start_paused = true)]
async fn an_urgent_report_is_split_at_once_and_the_view_pushed() {
    let cap = 100.0 * MIB;
    let c = coordinating_cluster(throttle(cap, &["v", "agg"]));
    let me = c.id.clone();
    tokio::time::advance(WARMUP).await;
    c.state()
        .coordinator
        .as_mut()
        .expect("coordinating")
        .report(Instant::now(), report(&me, &[("agg", 500.0 * MIB)]));
    assert!(c.take_report(report("g2", &[])).is_none(), "no round yet");
    let round =
        coordinate(&c, Instant::now(), report(&me, &[("agg", 500.0 * MIB)])).expect("a view");
    let g2 = |v: &View| {
        v.gateways
            .iter()
            .find(|g| g.id == "g2")
            .expect("g2")
            .capacity_bps
    };
    assert!(g2(&round) < 0.1 * cap, "g2 idle: its floor: {round:?}");
    assert!(c.state().pushed.is_none(), "a round pushes nothing");
    let mut burst = report("g2", &[("v", 400.0 * MIB)]);
    let plain = c.take_report(burst.clone()).expect("the round's view");
    assert!((g2(&plain) - g2(&round)).abs() < 1.0, "not split again");
    burst.urgent = true;
    let urgent = c.take_report(burst).expect("split at once");
    assert!(
        g2(&urgent) > 0.45 * cap,
        "the burst's gateway has its half: {urgent:?}"
    );
    let pushed = c
        .state()
        .pushed
        .clone()
        .expect("pushed to the coordinator's own gateway");
    assert_eq!(pushed, urgent);
    assert_eq!(c.view(), urgent);
}

/// A pushed view older than the one applied from the same coordinator, or one that does not
/// name this gateway, is not taken: a replay within the signature's window cannot roll a
/// share back.
#[tokio::test(start_paused = true)]
async fn a_pushed_view_is_taken_only_if_newer_and_naming_this_gateway() {
    let c = coordinating_cluster(throttle(100.0 * MIB, &["v"]));
    let view = |ms: u64, id: &str| View {
        coordinator: Some("g9".into()),
        updated_ms: ms,
        fallback: false,
        gateways: vec![GatewayView {
            id: id.to_owned(),
            s3: String::new(),
            control: String::new(),
            capacity_bps: MIB,
            age_ms: 0,
            tenants: BTreeMap::new(),
        }],
    };
    c.state().applied = (Some("g9".into()), 1_000);
    assert!(!c.take_view(view(999, &c.id)), "older than the one applied");
    assert!(
        !c.take_view(view(2_000, "someone-else")),
        "not this gateway's"
    );
    assert!(c.state().pushed.is_none());
    assert!(c.take_view(view(2_000, &c.id)));
    assert_eq!(c.state().pushed.as_ref().map(|v| v.updated_ms), Some(2_000));
    // A new coordinator's clock may be behind the old one's: its views are not stale.
    let mut other = view(500, &c.id);
    other.coordinator = Some("g8".into());
    assert!(c.take_view(other));
}
