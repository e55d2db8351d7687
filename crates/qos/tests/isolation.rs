//! The isolation properties of issue 3, each on a fixed scenario, in virtual time.
//!
//! The backend serves `C = 100 MiB/s`; requests are 1 MiB grains unless said otherwise, so one
//! grain is 10 ms of backend time. Tolerances are stated in grains: a decision is atomic, so a
//! tenant can be one request early or late at either end of a window, and no tighter promise
//! is possible at this granularity.

mod simulation;

use simulation::{Costs, Load, MIB, Pattern, Rng, allocation, simulate};
use sluice_qos::{Phase, TenantQos};

const C: f64 = 100.0 * MIB as f64;
const GRAIN: u64 = MIB;

fn mib(x: f64) -> f64 {
    x * MIB as f64
}

fn qos(reservation_mib: f64, weight: f64, limit_mib: Option<f64>) -> TenantQos {
    TenantQos::new(mib(reservation_mib), weight, limit_mib.map(mib)).expect("valid qos")
}

fn in_mib(x: impl Into<f64>) -> f64 {
    x.into() / MIB as f64
}

#[test]
fn three_saturating_tenants_each_get_their_reservation() {
    // By weight alone (1:1:8) A and B would get 10 MiB/s each; their reservations are 50 and 20.
    let tenants = [
        qos(50.0, 1.0, None),
        qos(20.0, 1.0, None),
        qos(10.0, 8.0, None),
    ];
    let loads = tenants.map(|q| Load::saturating(q, GRAIN));
    let run = simulate(C, &loads, 60.0, &mut Rng::new(1));
    for (i, q) in tenants.iter().enumerate() {
        let (worst, at) = run
            .min_in_backlogged_window(i, 1.0, 0.0, 60.0)
            .expect("saturating tenants are always backlogged");
        assert!(
            worst as f64 >= q.reservation() - 2.0 * GRAIN as f64,
            "tenant {i} got {} MiB in the second from {at:.3} s, reserved {} MiB/s",
            in_mib(worst as f64),
            in_mib(q.reservation())
        );
        assert!(run.rate(i, 0.0, 60.0) >= q.reservation());
    }
}

#[test]
fn spare_capacity_splits_by_weight() {
    // Reservations take 30 MiB/s; the other 70 split 1:2:5 = 8.75, 17.5, 43.75.
    let tenants = [
        qos(10.0, 1.0, None),
        qos(0.0, 2.0, None),
        qos(20.0, 5.0, None),
    ];
    let loads = tenants.map(|q| Load::saturating(q, GRAIN));
    let run = simulate(C, &loads, 60.0, &mut Rng::new(2));
    let spare = C - tenants.iter().map(TenantQos::reservation).sum::<f64>();
    let weights: f64 = tenants.iter().map(TenantQos::weight).sum();
    for (i, q) in tenants.iter().enumerate() {
        let expected = spare * q.weight() / weights;
        let got = run.rate(i, 0.0, 60.0) - q.reservation();
        assert!(
            (got - expected).abs() <= 0.05 * expected,
            "tenant {i}: {:.2} MiB/s above its reservation, expected {:.2}",
            in_mib(got),
            in_mib(expected)
        );
    }
}

#[test]
fn what_a_capped_tenant_cannot_take_splits_by_weight_among_the_others() {
    // Equal weights would give 33 each; A is capped at 10, so B and C split 90 as 1:2.
    let tenants = [
        qos(0.0, 1.0, Some(10.0)),
        qos(0.0, 1.0, None),
        qos(0.0, 2.0, None),
    ];
    let expected = allocation(C, &tenants);
    let in_mib_per_s: Vec<f64> = expected.iter().map(|&x| in_mib(x)).collect();
    for (got, want) in in_mib_per_s.iter().zip([10.0, 30.0, 60.0]) {
        assert!((got - want).abs() < 1e-6, "{in_mib_per_s:?}");
    }
    let loads = tenants.map(|q| Load::saturating(q, GRAIN));
    let run = simulate(C, &loads, 60.0, &mut Rng::new(3));
    for (i, want) in expected.iter().enumerate() {
        let got = run.rate(i, 0.0, 60.0);
        assert!(
            (got - want).abs() <= 0.05 * want,
            "tenant {i}: {:.2} MiB/s, expected {:.2}",
            in_mib(got),
            in_mib(*want)
        );
    }
}

#[test]
fn no_tenant_exceeds_its_limit_in_any_one_second_window() {
    // A's weight alone would give it ~80 MiB/s; B is reserved 10 and could borrow more; both
    // are capped. Request sizes vary from 64 KiB to 1 MiB so tags do not line up neatly.
    let costs = Costs::Uniform {
        min: 64 << 10,
        max: GRAIN,
    };
    let tenants = [
        qos(0.0, 10.0, Some(20.0)),
        qos(10.0, 1.0, Some(15.0)),
        qos(0.0, 1.0, None),
    ];
    let loads = tenants.map(|q| Load {
        costs,
        ..Load::saturating(q, GRAIN)
    });
    let run = simulate(C, &loads, 60.0, &mut Rng::new(4));
    for (i, q) in tenants.iter().enumerate() {
        let Some(limit) = q.limit() else { continue };
        let (most, at) = run.max_in_window(i, 1.0);
        // The limit tag lets a tenant held back by others catch up by one request, so a
        // window can hold the limit plus two requests (one at each end).
        assert!(
            most as f64 <= limit + 2.0 * GRAIN as f64,
            "tenant {i} got {:.2} MiB in the second from {at:.3} s, limit {} MiB/s",
            in_mib(most as f64),
            in_mib(limit)
        );
        // And the limit is a ceiling, not a throttle far below it.
        assert!(run.rate(i, 0.0, 60.0) >= 0.95 * limit);
    }
}

#[test]
fn a_lone_tenant_is_held_to_its_limit_with_the_backend_idle() {
    // Nobody else wants the backend, and still the tenant gets 25 MiB/s, not 100: the scheduler
    // answers NextAt and the backend waits.
    let tenants = [qos(0.0, 1.0, Some(25.0))];
    let loads = tenants.map(|q| Load::saturating(q, GRAIN));
    let run = simulate(C, &loads, 20.0, &mut Rng::new(5));
    let (most, _) = run.max_in_window(0, 1.0);
    assert!(most as f64 <= mib(25.0) + 2.0 * GRAIN as f64);
    assert!(run.rate(0, 0.0, 20.0) >= mib(25.0) * 0.99);
}

#[test]
fn a_tenant_idle_for_a_minute_gains_no_burst() {
    // B (reserved 20, weight 1) works for 10 s, is idle for 60 s, then returns while A (weight
    // 1) has had the backend to itself. Together they should get A 40, B 60 — from the first
    // moment B is back, not after B has spent a minute's worth of saved-up credit.
    let a = qos(0.0, 1.0, None);
    let b = qos(20.0, 1.0, None);
    let loads = [
        Load::saturating(a, GRAIN),
        Load {
            pattern: Pattern::OnOff {
                on: 10.0,
                off: 60.0,
            },
            ..Load::saturating(b, GRAIN)
        },
    ];
    let run = simulate(C, &loads, 80.0, &mut Rng::new(6));
    assert_eq!(run.served(1, 10.5, 70.0), 0, "B is idle from 10 to 70 s");
    assert!(
        run.rate(0, 11.0, 69.0) >= 0.99 * C,
        "A has it all meanwhile"
    );
    let expected = allocation(C, &[a, b]);
    for (from, to) in [(70.0, 70.2), (70.0, 71.0), (70.0, 80.0)] {
        let window = to - from;
        let got_b = run.served(1, from, to) as f64;
        let got_a = run.served(0, from, to) as f64;
        let slack = 2.0 * GRAIN as f64;
        assert!(
            got_b <= expected[1] * window * 1.05 + slack,
            "B got {:.1} MiB in [{from}, {to}), its share is {:.1}",
            in_mib(got_b),
            in_mib(expected[1] * window)
        );
        assert!(
            got_a >= expected[0] * window * 0.95 - slack,
            "A got {:.1} MiB in [{from}, {to}), its share is {:.1}",
            in_mib(got_a),
            in_mib(expected[0] * window)
        );
    }
}

#[test]
fn a_limited_tenant_idle_for_a_minute_gains_no_burst() {
    let loads = [
        Load::saturating(qos(0.0, 1.0, None), GRAIN),
        Load {
            pattern: Pattern::OnOff { on: 5.0, off: 60.0 },
            ..Load::saturating(qos(0.0, 10.0, Some(30.0)), GRAIN)
        },
    ];
    let run = simulate(C, &loads, 70.0, &mut Rng::new(7));
    let (most, at) = run.max_in_window(1, 1.0);
    assert!(
        most as f64 <= mib(30.0) + 2.0 * GRAIN as f64,
        "{:.1} MiB from {at}",
        in_mib(most as f64)
    );
    assert!(run.served(1, 65.0, 70.0) as f64 >= mib(30.0) * 5.0 * 0.95);
}

#[test]
fn a_tenant_no_longer_held_by_its_limit_gains_no_burst() {
    // For 30 s A is held to its limit of 30 MiB/s (B takes the other 70). Then C arrives with
    // weight 8 and A's share by weight drops to 10. Had A been building up credit for the
    // share its limit kept it from, it would now keep taking 30 for a long while.
    let a = qos(0.0, 1.0, Some(30.0));
    let b = qos(0.0, 1.0, None);
    let c = qos(0.0, 8.0, None);
    let loads = [
        Load::saturating(a, GRAIN),
        Load::saturating(b, GRAIN),
        Load::saturating(c, GRAIN).between(30.0, f64::INFINITY),
    ];
    let run = simulate(C, &loads, 40.0, &mut Rng::new(10));
    assert!(
        run.rate(0, 0.0, 30.0) >= mib(30.0) * 0.98,
        "A was at its limit"
    );
    let shares = allocation(C, &[a, b, c]);
    for (i, share) in shares.iter().enumerate() {
        let got = run.served(i, 30.0, 31.0) as f64;
        assert!(
            (got - share).abs() <= 0.05 * share + 2.0 * GRAIN as f64,
            "tenant {i} got {:.1} MiB in the second after C arrived, its share is {:.1}",
            in_mib(got),
            in_mib(*share)
        );
    }
}

#[test]
fn a_new_tenant_gets_its_reservation_within_one_grain() {
    // A and B saturate with large weights and reservations. N (reserved 30, weight 0.1: by
    // weight it would get almost nothing) arrives at t = 20 s.
    let n = qos(30.0, 0.1, None);
    let loads = [
        Load::saturating(qos(30.0, 10.0, None), GRAIN),
        Load::saturating(qos(30.0, 10.0, None), GRAIN),
        Load::saturating(n, GRAIN).between(20.0, f64::INFINITY),
    ];
    let run = simulate(C, &loads, 40.0, &mut Rng::new(8));
    let grain_time = GRAIN as f64 / C;
    let arrival = run.arrivals[2][0];
    assert!((20.0..20.0 + grain_time).contains(&arrival));
    let first = run.first_dispatch_after(2, 0.0).expect("N is served");
    assert!(
        first <= arrival + grain_time,
        "first served {:.1} ms after arriving",
        (first - arrival) * 1e3
    );
    // From then on, it is never more than one grain behind its reservation.
    for &t in run.dispatch_times(2) {
        let owed = n.reservation() * (t - arrival);
        let got = run.served(2, arrival, t + 1e-9) as f64;
        assert!(
            got >= owed - GRAIN as f64,
            "by {t:.3} s N got {:.2} MiB of the {:.2} owed",
            in_mib(got),
            in_mib(owed)
        );
    }
    assert!(run.rate(2, 20.0, 40.0) >= n.reservation());
}

#[test]
fn reservation_and_weight_phases_both_serve_a_reserved_tenant() {
    // A reserved tenant that also has weight is served in both phases, and its reservation
    // phase alone delivers its reservation (the weight phase does not eat into it).
    let tenants = [qos(30.0, 1.0, None), qos(0.0, 1.0, None)];
    let loads = tenants.map(|q| Load::saturating(q, GRAIN));
    let run = simulate(C, &loads, 30.0, &mut Rng::new(9));
    let by_phase = |phase| -> f64 {
        run.served
            .iter()
            .filter(|s| s.tenant == 0 && s.phase == phase)
            .map(|s| s.cost as f64)
            .sum::<f64>()
            / 30.0
    };
    let reserved = by_phase(Phase::Reservation);
    assert!(
        (reserved - mib(30.0)).abs() <= mib(1.0),
        "{}",
        in_mib(reserved)
    );
    assert!((by_phase(Phase::Weight) - mib(35.0)).abs() <= mib(35.0) * 0.05);
}
