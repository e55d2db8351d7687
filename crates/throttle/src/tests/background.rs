//! The background class in paused tokio time: it takes only what the tenants leave, never
//! more than its rate, and a tenant's wait behind it is bounded by one of its grains.

use super::*;

/// Runs `streams` clients through `handle` admitting `grain`-byte grains back to back for
/// `secs` of virtual time (naming tenant `name`); returns the bytes granted.
async fn stream(t: &Arc<Throttle>, name: &str, streams: usize, grain: u64, secs: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut handles = Vec::new();
    for _ in 0..streams {
        let t = Arc::clone(t);
        let name = name.to_owned();
        handles.push(tokio::spawn(async move {
            let mut granted = 0u64;
            while Instant::now() < deadline {
                t.admit_bytes(&name, grain).await;
                granted += grain;
            }
            granted
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await.expect("client task");
    }
    total
}

fn mib_s(bytes: u64, secs: u64) -> f64 {
    bytes as f64 / secs as f64 / MIB
}

fn one(name: &str, q: TenantQos) -> Vec<TenantSpec> {
    vec![TenantSpec {
        name: name.into(),
        qos: q,
    }]
}

#[tokio::test(start_paused = true)]
async fn a_busy_tenant_keeps_the_whole_tier_and_the_background_gets_nothing() {
    let t = Throttle::start(
        config(Policy::DmClock, 64.0),
        one("busy", qos(0.0, 1.0, None)),
    )
    .expect("start");
    let scrub = t.background("scrub", None).expect("class");
    let (busy, bg) = tokio::join!(
        stream(&t, "busy", 4, 1 << 20, 20),
        stream(&scrub, "busy", 4, 1 << 20, 20),
    );
    let (busy, bg) = (mib_s(busy, 20), mib_s(bg, 20));
    // Alone the tenant would get 64 MiB/s; with the background beside it, the same.
    assert!(busy >= 64.0 * 0.97, "the tenant got {busy} MiB/s of 64");
    assert!(
        bg <= 64.0 * 0.02,
        "the background got {bg} MiB/s past a busy tenant"
    );
}

#[tokio::test(start_paused = true)]
async fn the_background_gets_what_a_capped_tenant_leaves() {
    let t = Throttle::start(
        config(Policy::DmClock, 64.0),
        one("capped", qos(0.0, 1.0, Some(16.0))),
    )
    .expect("start");
    let scrub = t.background("scrub", None).expect("class");
    let (capped, bg) = tokio::join!(
        stream(&t, "capped", 4, 1 << 20, 20),
        stream(&scrub, "capped", 4, 1 << 20, 20),
    );
    let (capped, bg) = (mib_s(capped, 20), mib_s(bg, 20));
    assert!(
        (16.0 * 0.9..=16.0 * 1.05).contains(&capped),
        "the tenant got {capped} MiB/s, its limit is 16"
    );
    // Work-conserving: the background takes the rest of the tier.
    assert!(
        bg >= 48.0 * 0.9 && capped + bg <= 64.0 * 1.02,
        "the background got {bg} MiB/s of the 48 left"
    );
}

#[tokio::test(start_paused = true)]
async fn weights_and_reservations_are_unchanged_by_the_background() {
    let specs = vec![
        TenantSpec {
            name: "small".into(),
            qos: qos(24.0, 1.0, None),
        },
        TenantSpec {
            name: "big".into(),
            qos: qos(0.0, 3.0, None),
        },
    ];
    let t = Throttle::start(config(Policy::DmClock, 64.0), specs).expect("start");
    let scrub = t.background("scrub", None).expect("class");
    let (small, big, bg) = tokio::join!(
        stream(&t, "small", 4, 1 << 20, 20),
        stream(&t, "big", 4, 1 << 20, 20),
        stream(&scrub, "-", 4, 1 << 20, 20),
    );
    let (small, big, bg) = (mib_s(small, 20), mib_s(big, 20), mib_s(bg, 20));
    assert!(small >= 24.0 * 0.95, "small got {small} MiB/s, reserved 24");
    assert!(
        small + big >= 64.0 * 0.97,
        "tenants got {} of 64",
        small + big
    );
    assert!(bg <= 64.0 * 0.02, "the background got {bg} MiB/s");
}

#[tokio::test(start_paused = true)]
async fn the_background_is_held_to_its_rate_and_a_new_rate_applies() {
    let t = Throttle::start(
        config(Policy::DmClock, 64.0),
        one("idle", qos(0.0, 1.0, None)),
    )
    .expect("start");
    let scrub = t.background("scrub", Some(8.0 * MIB)).expect("class");
    assert_eq!(scrub.background_name(), Some("scrub"));
    let got = mib_s(stream(&scrub, "idle", 4, 1 << 20, 10).await, 10);
    assert!(
        (8.0 * 0.9..=8.0 * 1.05).contains(&got),
        "{got} MiB/s, cap 8"
    );
    scrub
        .set_background_rate(Some(32.0 * MIB))
        .expect("a positive rate");
    let got = mib_s(stream(&scrub, "idle", 4, 1 << 20, 10).await, 10);
    assert!(
        (32.0 * 0.9..=32.0 * 1.05).contains(&got),
        "{got} MiB/s, cap 32"
    );
    assert!(matches!(
        scrub.set_background_rate(Some(0.0)),
        Err(ThrottleError::Rate(_))
    ));
    assert!(matches!(
        t.set_background_rate(None),
        Err(ThrottleError::NotBackground)
    ));
    assert!(t.background("bad", Some(-1.0)).is_err());
}

/// An open-loop tenant (a 1 MiB read every 50 ms) beside a saturating background of
/// 256 KiB grains: each of its admissions waits at most one background grain's service time
/// (4 ms at 64 MiB/s) past the lookahead, and its throughput is what it asks for.
#[tokio::test(start_paused = true)]
async fn a_tenant_waits_behind_at_most_one_background_grain() {
    let t = Throttle::start(
        config(Policy::DmClock, 64.0),
        one("reader", qos(0.0, 1.0, None)),
    )
    .expect("start");
    let scrub = t.background("scrub", None).expect("class");
    let bg = {
        let scrub = Arc::clone(&scrub);
        tokio::spawn(async move { stream(&scrub, "-", 4, 256 << 10, 10).await })
    };
    let start = Instant::now();
    let mut worst = Duration::ZERO;
    for k in 0..190u32 {
        tokio::time::sleep_until(start + Duration::from_millis(50) * k).await;
        worst = worst.max(t.admit_bytes("reader", 1 << 20).await);
    }
    let bg = mib_s(bg.await.expect("background task"), 10);
    let grain = Duration::from_secs_f64(f64::from(256u32 << 10) / (64.0 * MIB));
    assert!(
        worst <= grain + Duration::from_millis(1),
        "a tenant admission waited {worst:?} behind the background (one grain is {grain:?})"
    );
    // The reader used 20 MiB/s; the background had the other 44.
    assert!(bg >= 44.0 * 0.9, "the background got {bg} MiB/s of 44");
}

#[tokio::test(start_paused = true)]
async fn without_a_capacity_model_the_background_is_held_to_its_rate_alone() {
    let t = Throttle::start(
        config(Policy::RateLimit, 64.0),
        one("a", qos(0.0, 1.0, Some(100.0))),
    )
    .expect("start");
    let scrub = t.background("scrub", Some(8.0 * MIB)).expect("class");
    let (_, bg) = tokio::join!(
        stream(&t, "a", 4, 1 << 20, 10),
        stream(&scrub, "a", 2, 1 << 20, 10),
    );
    let bg = mib_s(bg, 10);
    assert!((8.0 * 0.9..=8.0 * 1.05).contains(&bg), "{bg} MiB/s, cap 8");
}

#[tokio::test(start_paused = true)]
async fn a_dropped_class_stops_and_the_tenants_carry_on() {
    let t = Throttle::start(config(Policy::DmClock, 64.0), one("a", qos(0.0, 1.0, None)))
        .expect("start");
    let scrub = t.background("scrub", None).expect("class");
    scrub.admit_bytes("a", 1 << 20).await;
    drop(scrub);
    let got = mib_s(stream(&t, "a", 2, 1 << 20, 5).await, 5);
    assert!(got >= 64.0 * 0.97, "{got} MiB/s after the class went");
}
