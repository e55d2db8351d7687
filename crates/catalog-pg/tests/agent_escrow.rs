//! A node agent's escrow across gateways: granted through one gateway, counted by every
//! other's commits in the database, and spent by the agent's uploads through any of them.

mod common;

use std::sync::Arc;
use std::time::Duration;

use sluice_meta::{Catalog, EscrowGrant, MetaError};

const MIB: u64 = 1 << 20;

use common::obj;

fn held(g: EscrowGrant) -> u64 {
    match g {
        EscrowGrant::Held { bytes, .. } => bytes,
        EscrowGrant::Unlimited => panic!("unlimited"),
    }
}

#[test]
fn an_agents_escrow_granted_through_one_gateway_holds_on_every_other() {
    let Some(pg) = common::Pg::start() else {
        return;
    };
    let engines = [Arc::new(pg.engine()), Arc::new(pg.engine())];
    let [a, b] = engines
        .clone()
        .map(|e| Catalog::new(e as Arc<dyn sluice_meta::Engine>));
    for c in [&a, &b] {
        c.ledger().set_quota("t", 10 * MIB);
    }
    a.create_bucket("t", "b", 1).expect("bucket");
    // 6 of 10 MiB stored: less than half free, so no gateway holds escrow of its own.
    let r = a.ledger().reserve("t", 6 * MIB).expect("reserve");
    a.put_object("t", "b", "stored", &obj(6 * MIB, "stored"), None, r)
        .expect("put");
    let minute = Duration::from_secs(60);
    assert_eq!(
        held(
            a.grant_escrow("t", "agent:n1", 8 * MIB, minute)
                .expect("grant")
        ),
        4 * MIB
    );
    // Gateway b's ledger has not seen the grant (its pre-check passes), but its commit is
    // refused by the database, which counts the agent's live escrow.
    let r = b.ledger().reserve("t", MIB).expect("b's stale pre-check");
    assert!(matches!(
        b.put_object("t", "b", "direct", &obj(MIB, "direct"), None, r),
        Err(MetaError::QuotaExceeded { .. })
    ));
    // Another agent asking through b gets nothing.
    assert_eq!(
        held(b.grant_escrow("t", "agent:n2", MIB, minute).expect("grant")),
        0
    );
    // Once b's ledger is refreshed, the agent's upload through b spends its escrow.
    engines[1].refresh_ledger().expect("refresh");
    let r = b
        .ledger()
        .reserve_from_escrow("t", "agent:n1", 3 * MIB)
        .expect("drawn");
    assert_eq!(r.escrow(), Some(("agent:n1", 3 * MIB)));
    b.put_object("t", "b", "drained", &obj(3 * MIB, "drained"), None, r)
        .expect("put from escrow");
    // What is left of it is 1 MiB: renewing for more gets no more, and nobody else has room.
    assert_eq!(
        held(
            a.grant_escrow("t", "agent:n1", 4 * MIB, minute)
                .expect("renew")
        ),
        MIB
    );
    let r = a.ledger().reserve("t", MIB);
    let refused = match r {
        Err(e) => e,
        Ok(r) => a
            .put_object("t", "b", "direct2", &obj(MIB, "direct2"), None, r)
            .expect_err("the last MiB is the agent's"),
    };
    assert!(
        matches!(refused, MetaError::QuotaExceeded { .. }),
        "{refused}"
    );
    // A lapsed grant holds nothing: its MiB is free again through either gateway.
    a.grant_escrow("t", "agent:n1", MIB, Duration::from_millis(1))
        .expect("short lease");
    // Polled: the lease lapses by the database's clock.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        engines[1].refresh_ledger().expect("refresh");
        if let Ok(r) = b.ledger().reserve("t", MIB) {
            match b.put_object("t", "b", "direct3", &obj(MIB, "direct3"), None, r) {
                Ok(_) => break,
                Err(MetaError::QuotaExceeded { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lapsed escrow never returned"
        );
    }
}
