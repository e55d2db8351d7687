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
