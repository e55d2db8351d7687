//! dmClock's δ and ρ as a client carries them: what the *other* gateways of a deployment
//! served it since its previous request to this one.
//!
//! A client spread over several gateways (the node agent's `Pool`) counts, per tenant and per
//! gateway, the requests and bytes each gateway served it, and sends on each request what the
//! others served since its last request here: δ in [`DELTA_HEADER`] (in any phase), ρ in
//! [`RHO_HEADER`] (in the reservation phase, at most δ). Each value is two decimal numbers,
//! `requests bytes` (`x-sluice-dmclock-delta: 12 50331648`). The gateway prices them as it
//! prices its own work ([`Throttle::admit_op_elsewhere`](crate::Throttle::admit_op_elsewhere):
//! `requests × per_op + bytes`, the per-operation cost of its [`CostModel`]), so they are in
//! the cost units its scheduler charges, and advances the tenant's clocks by them on top of
//! the request's own cost (see `sluice_qos::Request::with_service_elsewhere`).
//!
//! They can only charge a tenant more, never less than its request's own cost: a client that
//! lies about them only holds itself back. So the gateway takes them from any authenticated
//! request (signed with a tenant's key) without further proof; a value that is not two
//! decimal numbers is refused (`InvalidArgument`), and one above [`MAX_SECONDS`] of the
//! tier's capacity is cut to it.
//!
//! # What the gateway tells the client: ρ's source
//!
//! For the client to count ρ, the gateway says which part of a request it served in the
//! reservation phase: [`RESERVED_HEADER`] on its answer (`requests bytes`, like δ and ρ),
//! the request's operation (`1 0`) and the bytes of its body's grains whose admission the
//! scheduler made in the reservation phase (`sluice_qos::Dispatch::phase`). The gateway
//! counts them with [`counting_reserved`] around the request's handler: every admission of
//! this throttle made within it, on the handler's task, notes itself. What is admitted after
//! the answer's head is sent (a GET's body, streamed to the client after its headers) or on
//! another task is not in it, so the count is at most what was served by reservation: the
//! client counts the rest as δ only, which charges the tenant's reservation clock elsewhere
//! less, never more, than it was served (ρ ≤ δ, the safe side). The count is about the
//! request's own tenant and phase only; it says nothing of other tenants.

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::str::FromStr;

use sluice_qos::CostModel;

/// dmClock's δ: what the other gateways served this tenant, in any phase.
pub const DELTA_HEADER: &str = "x-sluice-dmclock-delta";
/// dmClock's ρ: the part of δ the other gateways served in their reservation phase.
pub const RHO_HEADER: &str = "x-sluice-dmclock-rho";
/// On a gateway's answer: what of this request it served in the reservation phase (see the
/// module doc).
pub const RESERVED_HEADER: &str = "x-sluice-dmclock-reserved";
/// The most service elsewhere one request is charged for, in seconds of the tier's
/// capacity: a larger (forged) value is cut to it, so a tag never runs more than that far
/// ahead on one request's word.
pub const MAX_SECONDS: f64 = 60.0;

/// Requests and bytes served (one of δ or ρ).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Service {
    pub requests: u64,
    pub bytes: u64,
}

impl Service {
    pub fn is_zero(self) -> bool {
        self.requests == 0 && self.bytes == 0
    }

    #[must_use]
    pub fn saturating_add(self, other: Self) -> Self {
        Self {
            requests: self.requests.saturating_add(other.requests),
            bytes: self.bytes.saturating_add(other.bytes),
        }
    }

    #[must_use]
    pub fn saturating_sub(self, other: Self) -> Self {
        Self {
            requests: self.requests.saturating_sub(other.requests),
            bytes: self.bytes.saturating_sub(other.bytes),
        }
    }

    /// In cost units under `model`, at most `cap`.
    pub fn cost(self, model: CostModel, cap: u64) -> u64 {
        self.requests
            .saturating_mul(model.per_op())
            .saturating_add(self.bytes)
            .min(cap)
    }
}

/// `requests bytes`, as the headers carry it.
impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.requests, self.bytes)
    }
}

/// A header value that is not two decimal numbers separated by spaces.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{header}: {value:?} is not two decimal numbers, requests and bytes")]
pub struct ElsewhereError {
    pub header: &'static str,
    pub value: String,
}

impl FromStr for Service {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        let mut parts = s.split_ascii_whitespace();
        let mut number = || -> Result<u64, ()> {
            let p = parts.next().ok_or(())?;
            // Digits only: no sign, no `+`.
            if !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(());
            }
            // Beyond u64 is a forged value: as large as can be, then cut to the cap.
            Ok(p.parse().unwrap_or(u64::MAX))
        };
        let service = Self {
            requests: number()?,
            bytes: number()?,
        };
        match parts.next() {
            None => Ok(service),
            Some(_) => Err(()),
        }
    }
}

tokio::task_local! {
    /// What the admissions of the request being handled on this task got from the
    /// reservation phase (see [`counting_reserved`]).
    static RESERVED: Cell<Service>;
}

/// Runs `f`, counting what this task's admissions in it got from the reservation phase:
/// requests for operations ([`Throttle::admit_op_elsewhere`](crate::Throttle::admit_op_elsewhere)),
/// bytes for grains ([`Throttle::admit_bytes`](crate::Throttle::admit_bytes)). Admissions on
/// other tasks, or after `f` returns, are not counted (see the module doc).
pub async fn counting_reserved<F: Future>(f: F) -> (F::Output, Service) {
    RESERVED
        .scope(Cell::new(Service::default()), async move {
            let out = f.await;
            (out, RESERVED.with(Cell::get))
        })
        .await
}

/// An admission of this task was served in the reservation phase: counted if a
/// [`counting_reserved`] is around it, else nothing (one thread-local look-up).
pub(crate) fn note_reserved(service: Service) {
    let _ = RESERVED.try_with(|c| c.set(c.get().saturating_add(service)));
}

/// What a request says the other gateways served its tenant since its previous request here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Elsewhere {
    /// δ: in any phase.
    pub delta: Service,
    /// ρ: in the reservation phase (δ is raised to at least ρ when charged).
    pub rho: Service,
}

impl Elsewhere {
    /// From the values of [`DELTA_HEADER`] and [`RHO_HEADER`] (`None`: absent); `None` if
    /// both are absent or zero.
    pub fn from_values(
        delta: Option<&[u8]>,
        rho: Option<&[u8]>,
    ) -> Result<Option<Self>, ElsewhereError> {
        let parse = |header: &'static str, value: Option<&[u8]>| match value {
            None => Ok(Service::default()),
            Some(v) => std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| ElsewhereError {
                    header,
                    value: String::from_utf8_lossy(v).into_owned(),
                }),
        };
        let e = Self {
            delta: parse(DELTA_HEADER, delta)?,
            rho: parse(RHO_HEADER, rho)?,
        };
        Ok((!(e.delta.is_zero() && e.rho.is_zero())).then_some(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_as_requests_and_bytes_and_junk_is_refused() {
        let e = Elsewhere::from_values(Some(b"3 4096"), Some(b" 1  1024 "))
            .expect("valid")
            .expect("not zero");
        assert_eq!(
            (e.delta, e.rho),
            (
                Service {
                    requests: 3,
                    bytes: 4096
                },
                Service {
                    requests: 1,
                    bytes: 1024
                }
            )
        );
        assert_eq!(Elsewhere::from_values(None, None), Ok(None));
        assert_eq!(Elsewhere::from_values(Some(b"0 0"), None), Ok(None));
        for bad in [
            &b"-1 5"[..],
            b"1",
            b"1 2 3",
            b"+1 2",
            b"1.5 2",
            b"",
            b"a b",
            b"\xff 1",
        ] {
            let e = Elsewhere::from_values(Some(bad), None).expect_err("refused");
            assert_eq!(e.header, DELTA_HEADER);
        }
        assert!(Elsewhere::from_values(None, Some(b"x")).is_err());
    }

    use std::time::Duration;

    use sluice_qos::TenantQos;

    use crate::{DEFAULT_LOOKAHEAD, Policy, TenantSpec, Throttle, ThrottleConfig};

    const MIB: u64 = 1 << 20;

    /// A dmClock throttle of 64 MiB/s (per_op 1024 at 65,536 ops/s) with tenant `a` limited
    /// to 1 MiB/s, honouring δ/ρ or not.
    fn limited(policy: Policy, honour: bool) -> std::sync::Arc<Throttle> {
        let t = Throttle::start(
            ThrottleConfig {
                policy,
                bandwidth: 64.0 * MIB as f64,
                ops: 65_536.0,
                queue_depth: 64,
                lookahead: DEFAULT_LOOKAHEAD,
            },
            vec![TenantSpec {
                name: "a".into(),
                qos: TenantQos::new(0.0, 1.0, Some(MIB as f64)).expect("qos"),
            }],
        )
        .expect("start");
        t.honour_elsewhere(honour);
        t
    }

    fn told(requests: u64, bytes: u64) -> Option<Elsewhere> {
        Some(Elsewhere {
            delta: Service { requests, bytes },
            rho: Service::default(),
        })
    }

    /// How long `a`'s next 1 MiB grain waits after an operation that says `elsewhere`.
    async fn wait_after(t: &Throttle, elsewhere: Option<Elsewhere>) -> Duration {
        let own = t
            .admit_op_elsewhere("a", elsewhere)
            .await
            .expect("admitted");
        assert!(
            own < Duration::from_millis(1),
            "its own admission waits for nothing"
        );
        t.admit_bytes("a", MIB).await
    }

    #[tokio::test(start_paused = true)]
    async fn service_elsewhere_holds_the_tenant_at_its_limit_for_it_too() {
        // Alone: the op (1024 units) then a grain within the limit's one-request slack.
        let alone = wait_after(&limited(Policy::DmClock, true), None).await;
        assert!(alone < Duration::from_millis(5), "waited {alone:?}");
        // 2 MiB and 2 requests served elsewhere (2 MiB + 2048 units): the limit clock stands
        // 2 MiB + 3072 units on at 1 MiB/s, of which the grain may start one request (its own
        // 1 MiB + 1024) early: 1 MiB + 2048 units, 1.002 s.
        let t = limited(Policy::DmClock, true);
        let held = wait_after(&t, told(2, 2 * MIB)).await;
        assert!(
            held >= Duration::from_millis(995) && held <= Duration::from_millis(1010),
            "waited {held:?}"
        );
        // The tier was not charged for it: its usage is its own work only.
        let usage = t.usage();
        assert_eq!(usage[0].served, 1024 + (1024 + MIB));
        // Not honoured (a coordinated gateway), or under fifo: no effect.
        for t in [limited(Policy::DmClock, false), limited(Policy::Fifo, true)] {
            let w = wait_after(&t, told(2, 2 * MIB)).await;
            assert!(w < Duration::from_millis(20), "waited {w:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_forged_huge_delta_is_cut_to_a_minute_of_the_tier() {
        let t = limited(Policy::DmClock, true);
        let held = wait_after(&t, told(u64::MAX, u64::MAX)).await;
        // Cut to 60 s of 64 MiB/s, 3840 MiB: at 1 MiB/s the grain may start after 3840 s
        // less its own one-request slack, 3839 s (not after u64::MAX units, nor at once).
        assert!(
            held >= Duration::from_millis(3_838_900) && held <= Duration::from_millis(3_839_100),
            "waited {held:?}"
        );
    }

    /// A dmClock throttle of 64 MiB/s (per_op 1024) with `r` reserved 8 MiB/s and `w` with
    /// no reservation, both weight 1.
    fn reserved_and_not() -> std::sync::Arc<Throttle> {
        Throttle::start(
            ThrottleConfig {
                policy: Policy::DmClock,
                bandwidth: 64.0 * MIB as f64,
                ops: 65_536.0,
                queue_depth: 64,
                lookahead: DEFAULT_LOOKAHEAD,
            },
            ["r", "w"]
                .into_iter()
                .zip([8.0 * MIB as f64, 0.0])
                .map(|(name, r)| TenantSpec {
                    name: name.into(),
                    qos: TenantQos::new(r, 1.0, None).expect("qos"),
                })
                .collect(),
        )
        .expect("start")
    }

    /// An operation and `grains` grains of 1 MiB for `tenant`, on a task of its own: what of
    /// it the reservation phase served.
    fn flood(
        t: &std::sync::Arc<Throttle>,
        tenant: &'static str,
        grains: u32,
    ) -> tokio::task::JoinHandle<Service> {
        let t = std::sync::Arc::clone(t);
        tokio::spawn(async move {
            let ((), reserved) = counting_reserved(async {
                t.admit_op(tenant).await.expect("admitted");
                for _ in 0..grains {
                    t.admit_bytes(tenant, MIB).await;
                }
            })
            .await;
            reserved
        })
    }

    #[tokio::test(start_paused = true)]
    async fn admissions_say_whether_the_reservation_phase_served_them() {
        // Both flooding for about a second (64 grains of 1 MiB at 64 MiB/s): `r` is served
        // its 8 MiB/s by reservation and the rest by weight; `w`, with no reservation, all by
        // weight. Each one's first admission, `r`'s operation, is due on arrival.
        let t = reserved_and_not();
        let (r, w) = (flood(&t, "r", 32), flood(&t, "w", 32));
        let (r, w) = (r.await.expect("r"), w.await.expect("w"));
        assert_eq!(w, Service::default(), "no reservation, nothing by it");
        assert_eq!(r.requests, 1, "its operation, due at once");
        assert!(
            (6 * MIB..=10 * MIB).contains(&r.bytes),
            "about 8 MiB of its 32 by reservation: {r:?}"
        );
        // Alone and under its reservation (4 MiB/s of its 8): every grain by reservation.
        let t = reserved_and_not();
        let ((), alone) = counting_reserved(async {
            for _ in 0..4 {
                t.admit_bytes("r", MIB).await;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
        .await;
        assert_eq!(
            alone,
            Service {
                requests: 0,
                bytes: 4 * MIB
            }
        );
        // Outside a count an admission notes nothing and is not hurt.
        assert!(t.admit_bytes("r", MIB).await < Duration::from_secs(1));
    }

    #[test]
    fn a_huge_value_saturates_and_is_cut_to_the_cap() {
        let e = Elsewhere::from_values(Some(b"99999999999999999999999 18446744073709551615"), None)
            .expect("digits are a number")
            .expect("not zero");
        assert_eq!(e.delta.requests, u64::MAX);
        assert_eq!(e.delta.cost(CostModel::new(1000), 5_000), 5_000);
        let s = Service {
            requests: 2,
            bytes: 10,
        };
        assert_eq!(s.cost(CostModel::new(1000), u64::MAX), 2010);
        assert_eq!(s.to_string().parse::<Service>(), Ok(s));
    }
}
