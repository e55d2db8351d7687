//! Tenants seeded into the shared catalog from the gateways' files.

mod common;

use sluice_meta::{Engine, TenantKeySpec, TenantSpec};

fn spec(id: &str, capacity: u64, key: &str) -> TenantSpec {
    TenantSpec {
        id: id.into(),
        capacity,
        max_objects: u64::MAX,
        max_buckets: 1000,
        reservation: 1e6,
        weight: 2.0,
        limit: None,
        keys: vec![TenantKeySpec::new(key, format!("{key}-secret"), 1)],
        online: false,
        local: sluice_meta::LocalSettings::default(),
    }
}

#[test]
fn seeding_inserts_what_is_missing_reports_conflicts_and_keeps_the_catalogs_settings() {
    let Some(pg) = common::Pg::start() else {
        return;
    };
    let (a, b) = (pg.engine(), pg.engine());
    let alice = spec("alice", 1 << 30, "AKALICE");
    let mut bob = spec("bob", 2 << 30, "AKBOB");
    bob.limit = Some(5e6);
    bob.max_objects = 10;

    let first = a.seed_tenants(&[alice.clone(), bob.clone()]).expect("seed");
    assert_eq!(first.inserted, ["alice", "bob"]);
    assert!(first.conflicts.is_empty(), "{first:?}");
    assert_eq!(
        b.tenants().expect("read"),
        Some(vec![alice.clone(), bob.clone()]),
        "another gateway reads the tenants back exactly"
    );

    let again = b
        .seed_tenants(&[alice.clone(), bob.clone()])
        .expect("again");
    assert_eq!(again, sluice_meta::SeedReport::default(), "idempotent");

    let mut other_alice = alice.clone();
    other_alice.capacity = 1 << 20;
    other_alice.keys[0].secret_key = "changed".into();
    let thief = spec("carol", 1, "AKBOB");
    let report = b
        .seed_tenants(&[other_alice, thief, spec("dave", 7, "AKDAVE")])
        .expect("conflicting seed");
    assert_eq!(report.inserted, ["dave"]);
    assert_eq!(
        report.conflicts,
        [
            ("alice".to_owned(), vec!["capacity", "keys"]),
            ("carol".to_owned(), vec!["keys"]),
        ]
    );
    let now = a.tenants().expect("read").expect("stored");
    assert_eq!(now.len(), 3, "carol, whose key is bob's, was not inserted");
    assert_eq!(now[0], alice, "the catalog's alice wins over the file's");
    assert_eq!(now[1], bob);
    assert_eq!(now[2].capacity, 7);
}

#[test]
fn a_schema_v5_catalogs_tenants_read_unchanged_once_migrated_and_then_hold_node_local_settings() {
    let Some(pg) = common::Pg::start() else {
        return;
    };
    // A catalog as a schema v5 gateway left it, with one tenant changed online.
    let mut sql = String::from(
        "CREATE TABLE sluice_schema (singleton INT PRIMARY KEY, version BIGINT NOT NULL);",
    );
    for from in 0..5 {
        sql.push_str(sluice_catalog_pg::migration(from).expect("a known migration"));
    }
    sql.push_str(
        "INSERT INTO sluice_schema VALUES (1, 5);
         INSERT INTO tenants (id, capacity, max_objects, max_buckets, reservation, weight,
                              qos_limit, created_ms, online)
         VALUES (convert_to('alice', 'UTF8'), 1048576, NULL, 1000, 0, 1, 2e6, 1, TRUE);
         INSERT INTO tenant_keys (access_key, tenant, secret, created_ms)
         VALUES ('AKALICE', convert_to('alice', 'UTF8'), 'sealed', 1);",
    );
    pg.server.sql("sluice", &sql);

    let a = pg.engine();
    assert!(
        pg.server
            .query_i64("sluice", "SELECT version FROM sluice_schema")
            >= 6,
        "migrated"
    );
    let mut alice = spec("alice", 1 << 20, "AKALICE");
    alice.reservation = 0.0;
    alice.weight = 1.0;
    alice.limit = Some(2e6);
    alice.keys[0].secret_key = "sealed".into();
    alice.online = true;
    assert_eq!(
        a.tenants().expect("read"),
        Some(vec![alice.clone()]),
        "the v5 row reads as it did: no node-local setting held, the agents' files govern"
    );

    let changed = a
        .change_tenant(
            &sluice_meta::TenantChange::Set {
                id: "alice".into(),
                patch: sluice_meta::TenantPatch {
                    local_capacity: Some(Some(64 << 20)),
                    local_weight: Some(Some(3.0)),
                    ..sluice_meta::TenantPatch::default()
                },
            },
            "admin@test",
        )
        .expect("catalog")
        .expect("accepted")
        .expect("kept");
    alice.local = sluice_meta::LocalSettings {
        capacity: Some(64 << 20),
        weight: Some(3.0),
        ..sluice_meta::LocalSettings::default()
    };
    assert_eq!(changed, alice);
    assert_eq!(
        pg.engine().tenants().expect("read"),
        Some(vec![alice]),
        "another gateway reads them back"
    );
}
