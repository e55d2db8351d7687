//! What only a shared catalog does: several engines ("gateways") over one database.

mod common;

use std::sync::Arc;
use std::time::Duration;

use sluice_catalog_pg::SCHEMA_VERSION;
use sluice_meta::{Catalog, MetaError};

const MIB: u64 = 1 << 20;

use common::obj;

fn gateway(pg: &common::Pg, quota: u64) -> Catalog {
    let c = Catalog::new(Arc::new(pg.engine()));
    c.ledger().set_quota("t", quota);
    c.ledger().set_max_buckets("t", 2);
    c
}

#[test]
fn two_gateways_racing_for_the_last_bytes_never_exceed_the_quota() {
    let Some(pg) = common::Pg::start() else {
        return;
    };
    let gateways = [gateway(&pg, 10 * MIB), gateway(&pg, 10 * MIB)];
    assert!(gateways.iter().all(|g| g.is_shared()));
    gateways[0].create_bucket("t", "b", 1).expect("bucket");
    let barrier = Arc::new(std::sync::Barrier::new(16));
    let results: Vec<Result<(), MetaError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let g = gateways[i % 2].clone();
                let barrier = Arc::clone(&barrier);
                s.spawn(move || {
                    barrier.wait();
                    (0..3)
                        .map(|j| {
                            let key = format!("k{i}-{j}");
                            let r = g.ledger().reserve("t", MIB)?;
                            g.put_object("t", "b", &key, &obj(MIB, &key), None, r)
                                .map(drop)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("writer"))
            .collect()
    });
    let admitted = results.iter().filter(|r| r.is_ok()).count() as u64;
    for r in &results {
        assert!(
            matches!(r, Ok(()) | Err(MetaError::QuotaExceeded { .. })),
            "{r:?}"
        );
    }
    let q = sluice_meta::ListQuery {
        max: 1000,
        ..sluice_meta::ListQuery::default()
    };
    let page = gateways[1].list_objects("t", "b", &q).expect("list");
    let stored = page.entries.len() as u64 * MIB;
    assert_eq!(
        stored,
        admitted * MIB,
        "every admitted put is visible everywhere"
    );
    assert!(
        stored <= 10 * MIB,
        "stored {stored} bytes over a 10 MiB quota"
    );
    assert!(
        admitted >= 9,
        "only {admitted} of 10 fitting writes admitted"
    );
    // A third gateway starting now reads the same usage from the database.
    let third = gateway(&pg, 10 * MIB);
    assert_eq!(third.ledger().usage("t").map(|u| u.0), Some(stored));
}

#[test]
fn bucket_and_object_limits_hold_across_gateways() {
    let Some(pg) = common::Pg::start() else {
        return;
    };
    let (a, b) = (gateway(&pg, MIB), gateway(&pg, MIB));
    for g in [&a, &b] {
        g.ledger().set_max_objects("t", 1);
    }
    a.create_bucket("t", "one", 1).expect("one");
    b.create_bucket("t", "two", 1).expect("two");
    assert!(matches!(
        a.create_bucket("t", "three", 1),
        Err(MetaError::TooManyBuckets { max: 2 })
    ));
    let r = a.ledger().reserve("t", 1).expect("reserve");
    a.put_object("t", "one", "k", &obj(1, "x"), None, r)
        .expect("the one object");
    // b's own ledger has not seen a's object: the database refuses it.
    let r = b.ledger().reserve("t", 1).expect("reserve");
    assert!(matches!(
        b.put_object("t", "two", "k", &obj(1, "y"), None, r),
        Err(MetaError::TooManyObjects { max: 1 })
    ));
    assert_eq!(
        b.get_object("t", "one", "k").expect("get").map(|o| o.size),
        Some(1)
    );
}

#[test]
fn a_named_lease_passes_to_another_gateway_once_it_lapses() {
    let Some(pg) = common::Pg::start() else {
        return;
    };
    let (a, b) = (gateway(&pg, 0), gateway(&pg, 0));
    let hour = Duration::from_secs(3600);
    assert!(a.try_lease("gc", "a", hour).expect("a takes it"));
    assert!(!b.try_lease("gc", "b", hour).expect("a holds it"));
    // As if a had died an hour ago.
    pg.server.sql(
        "sluice",
        "UPDATE leases SET expires_ms = 0 WHERE name = 'gc'",
    );
    assert!(b.try_lease("gc", "b", hour).expect("lapsed"));
    assert!(!a.try_lease("gc", "a", hour).expect("b holds it"));
}

/// How the gateways find their QoS coordinator: the one that fails to take the lease reads
/// who holds it, with the control URL the holder advertised, from the other's engine.
#[test]
fn every_gateway_reads_the_lease_holder_another_took_until_it_lapses() {
    let Some(pg) = common::Pg::start() else {
        return;
    };
    let (a, b) = (gateway(&pg, 0), gateway(&pg, 0));
    let hour = Duration::from_secs(3600);
    let (ha, hb) = ("a http://127.0.0.1:9201", "b http://127.0.0.1:9202");
    assert_eq!(b.lease_holder("qos").expect("read"), None);
    assert!(a.try_lease("qos", ha, hour).expect("a takes it"));
    assert!(!b.try_lease("qos", hb, hour).expect("a holds it"));
    assert_eq!(b.lease_holder("qos").expect("read").as_deref(), Some(ha));
    // As if a had died an hour ago: nobody holds it, and b's next attempt takes it.
    pg.server.sql(
        "sluice",
        "UPDATE leases SET expires_ms = 0 WHERE name = 'qos'",
    );
    assert_eq!(a.lease_holder("qos").expect("read"), None, "lapsed");
    assert_eq!(b.lease_holder("qos").expect("read"), None, "lapsed");
    assert!(b.try_lease("qos", hb, hour).expect("lapsed"));
    assert!(!a.try_lease("qos", ha, hour).expect("b holds it"));
    assert_eq!(a.lease_holder("qos").expect("read").as_deref(), Some(hb));
}

#[test]
fn a_schema_newer_than_the_binary_is_refused_and_left_alone() {
    let Some(pg) = common::Pg::start() else {
        return;
    };
    drop(pg.engine());
    pg.server.sql(
        "sluice",
        &format!("UPDATE sluice_schema SET version = {}", SCHEMA_VERSION + 1),
    );
    let err = sluice_catalog_pg::PgCatalog::open(
        &pg.url,
        pg.rt.handle().clone(),
        &sluice_catalog_pg::PgOptions::default(),
    )
    .err()
    .expect("refused");
    assert!(
        matches!(err, MetaError::SchemaTooNew { found, known } if found == SCHEMA_VERSION + 1 && known == SCHEMA_VERSION),
        "{err}"
    );
    assert!(err.to_string().contains("newer"), "{err}");
    // Nothing was migrated back.
    pg.server.sql(
        "sluice",
        &format!(
            "DO $$ BEGIN IF (SELECT version FROM sluice_schema) <> {} THEN RAISE 'changed'; END IF; END $$",
            SCHEMA_VERSION + 1
        ),
    );
}

#[test]
fn a_lapsed_gateways_escrow_returns_and_its_late_commit_is_checked_again() {
    let Some(pg) = common::Pg::start() else {
        return;
    };
    const QUOTA: u64 = 64 * MIB;
    // Gateway a never renews by itself: its lease lapses only when the test says so.
    let hour = Duration::from_secs(3600);
    let a_engine = Arc::new(pg.engine_with(&sluice_catalog_pg::PgOptions {
        refresh: hour,
        lease_ttl: hour,
        ..sluice_catalog_pg::PgOptions::default()
    }));
    let holder = a_engine.holder().to_owned();
    let a = Catalog::new(a_engine);
    a.ledger().set_quota("t", QUOTA);
    a.create_bucket("t", "b", 1).expect("bucket");
    let put = |g: &Catalog, key: &str, size: u64| {
        let r = g.ledger().reserve("t", size)?;
        g.put_object("t", "b", key, &obj(size, key), None, r)
            .map(drop)
    };
    put(&a, "small", 1024).expect("a's first put");
    let escrow = |holder: &str| {
        pg.server.query_i64(
            "sluice",
            &format!(
                "SELECT COALESCE(SUM(bytes), 0)::BIGINT FROM escrow WHERE holder = '{holder}'"
            ),
        )
    };
    // Far from the quota a's commit took a chunk: quota / 64.
    assert_eq!(escrow(&holder), signed(QUOTA / 64));
    let b = gateway(&pg, QUOTA);
    let rest = QUOTA - 1024;
    match put(&b, "rest", rest) {
        Err(MetaError::QuotaExceeded { available, .. }) => {
            assert_eq!(available, rest - QUOTA / 64, "a's escrow is held");
        }
        other => panic!("{other:?}"),
    }
    // As if a had been killed a lease period ago.
    pg.server.sql(
        "sluice",
        &format!("UPDATE leases SET expires_ms = 0 WHERE holder = '{holder}'"),
    );
    put(&b, "rest", rest).expect("a's escrow returned: the quota fills exactly");
    // a, still running on its lapsed lease, must not spend the escrow it thinks it has.
    assert!(matches!(
        put(&a, "late", 1),
        Err(MetaError::QuotaExceeded { available: 0, .. })
    ));
    assert_eq!(
        pg.server.query_i64(
            "sluice",
            "SELECT SUM(bytes)::BIGINT FROM usage WHERE tenant = convert_to('t', 'UTF8')"
        ),
        signed(QUOTA)
    );
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).expect("small")
}

#[test]
fn a_gateway_that_stops_gives_its_escrow_back_without_waiting_for_its_lease() {
    let Some(pg) = common::Pg::start() else {
        return;
    };
    const QUOTA: u64 = 64 * MIB;
    let a = gateway(&pg, QUOTA);
    a.create_bucket("t", "b", 1).expect("bucket");
    let r = a.ledger().reserve("t", 1024).expect("reserve");
    a.put_object("t", "b", "small", &obj(1024, "small"), None, r)
        .expect("put");
    let escrowed = || {
        pg.server
            .query_i64("sluice", "SELECT COUNT(*) FROM escrow WHERE bytes > 0")
    };
    assert_eq!(escrowed(), 1, "a holds a chunk");
    drop(a);
    // The release runs on the runtime in the background: poll for it.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while escrowed() != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "escrow never given back"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let b = gateway(&pg, QUOTA);
    let r = b.ledger().reserve("t", QUOTA - 1024).expect("reserve");
    b.put_object("t", "b", "rest", &obj(QUOTA - 1024, "rest"), None, r)
        .expect("the whole rest of the quota");
}
