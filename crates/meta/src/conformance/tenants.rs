//! Tenants in the catalog: seeding, changes online, several keys, the audit record.

use super::Harness;
use crate::{TenantChange, TenantKeySpec, TenantPatch, TenantRefusal, TenantSpec};

fn spec(id: &str, key: &str) -> TenantSpec {
    TenantSpec {
        id: id.into(),
        capacity: 1 << 30,
        max_objects: u64::MAX,
        max_buckets: 1000,
        reservation: 0.0,
        weight: 1.0,
        limit: None,
        keys: vec![TenantKeySpec::new(key, format!("{key}-sealed"), 1)],
        online: false,
        local: crate::LocalSettings::default(),
    }
}

fn apply(c: &crate::Catalog, change: &TenantChange) -> Option<TenantSpec> {
    c.change_tenant(change, "admin@test")
        .expect("catalog")
        .expect("accepted")
}

fn tenant(c: &crate::Catalog, id: &str) -> Option<TenantSpec> {
    c.tenants()
        .expect("read")
        .expect("stored")
        .into_iter()
        .find(|t| t.id == id)
}

pub fn tenants_are_seeded_changed_online_with_several_keys_and_audited(h: &dyn Harness) {
    let c = super::open(h);
    let seeded = c
        .seed_tenants(&[spec("a", "AKA"), spec("b", "AKB")])
        .expect("seed");
    assert_eq!(seeded.inserted, ["a", "b"]);
    let again = c
        .seed_tenants(&[spec("a", "AKA"), spec("b", "AKB")])
        .expect("again");
    assert_eq!(again, crate::SeedReport::default(), "seeding is idempotent");
    assert_eq!(
        tenant(&c, "a").expect("a"),
        spec("a", "AKA"),
        "read back exactly"
    );

    apply(&c, &TenantChange::Add(spec("c", "AKC1")));
    apply(
        &c,
        &TenantChange::AddKey {
            id: "c".into(),
            key: TenantKeySpec::new("AKC2", "second", 2),
        },
    );
    apply(
        &c,
        &TenantChange::RevokeKey {
            id: "c".into(),
            access_key: "AKC1".into(),
        },
    );
    let after = apply(
        &c,
        &TenantChange::Set {
            id: "c".into(),
            patch: TenantPatch {
                capacity: Some(5 << 20),
                limit: Some(Some(1e6)),
                ..TenantPatch::default()
            },
        },
    )
    .expect("kept");
    assert_eq!((after.capacity, after.limit), (5 << 20, Some(1e6)));
    drop(c);

    let c = super::open(h);
    let t = tenant(&c, "c").expect("survives a reopen");
    assert!(t.online);
    assert_eq!((t.capacity, t.limit), (5 << 20, Some(1e6)));
    let keys: Vec<_> = t
        .keys
        .iter()
        .map(|k| (k.access_key.as_str(), k.revoked_ms.is_some()))
        .collect();
    assert_eq!(keys, [("AKC1", true), ("AKC2", false)]);
    assert!(!t.keys[0].live(crate::now_ms()) && t.keys[1].live(crate::now_ms()));
    let actions: Vec<_> = c
        .tenant_history(Some("c"))
        .expect("history")
        .into_iter()
        .map(|e| {
            assert_eq!(e.who, "admin@test");
            assert!(
                !e.detail.contains("second"),
                "no secret in the audit: {}",
                e.detail
            );
            e.action
        })
        .collect();
    assert_eq!(actions, ["add", "key-add", "key-revoke", "set"]);
    let all = c.tenant_history(None).expect("all");
    assert_eq!(all.iter().filter(|e| e.action == "seed").count(), 2);
    assert_eq!(all.first().map(|e| e.who.as_str()), Some("config"));

    c.create_bucket("a", "bkt", 1).expect("bucket");
    let refused = c
        .change_tenant(&TenantChange::Remove { id: "a".into() }, "admin@test")
        .expect("catalog");
    assert_eq!(
        refused,
        Err(TenantRefusal::NotEmpty {
            tenant: "a".into(),
            buckets: 1
        })
    );
    assert!(
        tenant(&c, "a").is_some(),
        "a refused removal changes nothing"
    );
    assert_eq!(apply(&c, &TenantChange::Remove { id: "c".into() }), None);
    assert!(tenant(&c, "c").is_none());
    assert_eq!(
        c.tenant_history(Some("c"))
            .expect("history")
            .last()
            .map(|e| e.action.clone()),
        Some("remove".into()),
        "the record outlives the tenant"
    );
}

pub fn a_file_contradicting_a_tenant_changed_online_is_reported_and_the_catalog_kept(
    h: &dyn Harness,
) {
    let c = super::open(h);
    c.seed_tenants(&[spec("a", "AKA")]).expect("seed");
    c.change_tenant(
        &TenantChange::Set {
            id: "a".into(),
            patch: TenantPatch {
                capacity: Some(7),
                ..TenantPatch::default()
            },
        },
        "admin",
    )
    .expect("catalog")
    .expect("accepted");
    let report = c.seed_tenants(&[spec("a", "AKA")]).expect("seed again");
    assert_eq!(report.conflicts, [("a".to_owned(), vec!["capacity"])]);
    assert!(report.updated.is_empty() && report.removed.is_empty());
    assert_eq!(
        tenant(&c, "a").expect("a").capacity,
        7,
        "the catalog's is kept"
    );
    let report = c.seed_tenants(&[]).expect("a file without it");
    assert!(
        report.removed.is_empty(),
        "a tenant changed online is not the file's to remove"
    );
    assert!(tenant(&c, "a").is_some());
}

pub fn an_access_key_belongs_to_one_tenant(h: &dyn Harness) {
    let c = super::open(h);
    c.seed_tenants(&[spec("a", "AKA")]).expect("seed");
    let taken = c
        .change_tenant(&TenantChange::Add(spec("b", "AKA")), "admin")
        .expect("catalog");
    assert!(
        matches!(taken, Err(TenantRefusal::KeyTaken { .. })),
        "{taken:?}"
    );
    let taken = c
        .change_tenant(
            &TenantChange::AddKey {
                id: "a".into(),
                key: TenantKeySpec::new("AKA", "x", 1),
            },
            "admin",
        )
        .expect("catalog");
    assert!(
        matches!(taken, Err(TenantRefusal::KeyTaken { .. })),
        "{taken:?}"
    );
    let report = c
        .seed_tenants(&[spec("a", "AKA"), spec("thief", "AKA")])
        .expect("seed");
    assert_eq!(report.conflicts, [("thief".to_owned(), vec!["keys"])]);
    assert!(tenant(&c, "thief").is_none());
    let missing = c
        .change_tenant(
            &TenantChange::Remove {
                id: "nobody".into(),
            },
            "admin",
        )
        .expect("catalog");
    assert_eq!(missing, Err(TenantRefusal::NoSuchTenant("nobody".into())));
}

pub fn a_tenants_node_local_settings_are_held_changed_cleared_and_audited(h: &dyn Harness) {
    let c = super::open(h);
    c.seed_tenants(&[spec("a", "AKA")]).expect("seed");
    assert!(
        tenant(&c, "a").expect("a").local.is_empty(),
        "a seeded tenant holds no node-local setting: the agents' files govern"
    );
    let mut n = spec("n", "AKN");
    n.local = crate::LocalSettings {
        capacity: Some(5 << 20),
        reservation: None,
        weight: Some(2.5),
        limit: None,
    };
    apply(&c, &TenantChange::Add(n.clone()));
    assert_eq!(
        tenant(&c, "n").expect("n").local,
        n.local,
        "read back exactly"
    );

    let set = |patch: TenantPatch| {
        c.change_tenant(
            &TenantChange::Set {
                id: "a".into(),
                patch,
            },
            "admin@test",
        )
        .expect("catalog")
    };
    let after = set(TenantPatch {
        local_capacity: Some(Some(9 << 20)),
        local_reservation: Some(Some(1e6)),
        local_limit: Some(Some(4e6)),
        ..TenantPatch::default()
    })
    .expect("accepted")
    .expect("kept");
    let want = crate::LocalSettings {
        capacity: Some(9 << 20),
        reservation: Some(1e6),
        weight: None,
        limit: Some(4e6),
    };
    assert_eq!(after.local, want);
    assert_eq!(
        after.capacity,
        1 << 30,
        "the shared tier's quota is unchanged"
    );
    for (bad, names) in [
        (
            TenantPatch {
                local_weight: Some(Some(0.0)),
                ..TenantPatch::default()
            },
            "local_weight",
        ),
        (
            TenantPatch {
                local_limit: Some(Some(5e5)),
                ..TenantPatch::default()
            },
            "local_limit",
        ),
        (
            TenantPatch {
                local_reservation: Some(Some(-1.0)),
                ..TenantPatch::default()
            },
            "local_reservation",
        ),
    ] {
        match set(bad) {
            Err(TenantRefusal::Invalid(why)) => assert!(why.contains(names), "{why}"),
            other => panic!("{names}: {other:?}"),
        }
    }
    assert_eq!(
        tenant(&c, "a").expect("a").local,
        want,
        "a refusal changes nothing"
    );

    let report = c.seed_tenants(&[spec("a", "AKA")]).expect("seed again");
    assert_eq!(
        report,
        crate::SeedReport::default(),
        "the files seed no node-local setting: the catalog's are kept and no conflict reported"
    );
    let cleared = set(TenantPatch {
        local_capacity: Some(None),
        ..TenantPatch::default()
    })
    .expect("accepted")
    .expect("kept");
    assert_eq!(
        cleared.local.capacity, None,
        "cleared: the agents' files govern again"
    );
    drop(c);

    let c = super::open(h);
    let a = tenant(&c, "a").expect("survives a reopen");
    assert_eq!(
        a.local,
        crate::LocalSettings {
            capacity: None,
            ..want
        }
    );
    let history = c.tenant_history(Some("a")).expect("history");
    let sets: Vec<serde_json::Value> = history
        .iter()
        .filter(|e| e.action == "set")
        .map(|e| serde_json::from_str(&e.detail).expect("json"))
        .collect();
    assert_eq!(sets.len(), 2, "refused changes leave no entry");
    assert_eq!(
        sets[0]["before"]["local"]["local_capacity"],
        serde_json::Value::Null
    );
    assert_eq!(sets[0]["after"]["local"]["local_capacity"], 9 << 20);
    assert_eq!(sets[0]["after"]["local"]["local_limit"], 4e6);
    assert_eq!(
        sets[1]["after"]["local"]["local_capacity"],
        serde_json::Value::Null
    );
}
