//! Commits per second of the shared catalog with 1, 4 and 16 concurrent writers, on a server
//! that fsyncs its WAL: how far PostgreSQL's group commit across the pool's connections
//! batches the engine's commits. `cargo run -p sluice-catalog-pg --example commit_rate`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Instant;

use sluice_meta::{Catalog, ObjectRecord};

const PUTS_PER_WRITER: usize = 200;

fn main() {
    let Some(server) = common::PgServer::start_with(true) else {
        return;
    };
    let pg = common::Pg::on(server).expect("database");
    let catalog = Catalog::new(Arc::new(pg.engine()));
    for t in 0..16 {
        let t = format!("t{t}");
        catalog.ledger().set_quota(&t, u64::MAX);
        catalog.create_bucket(&t, "b", 0).expect("bucket");
    }
    println!("writers  one tenant  a tenant each   (commits/s, inline 4 KiB PutObject, fsync=on)");
    for writers in [1usize, 4, 16] {
        let one = rate(&catalog, writers, false);
        let each = rate(&catalog, writers, true);
        println!("{writers:>7}  {one:>10.0}  {each:>13.0}");
    }
}

/// Commits per second of `writers` threads, all on tenant `t0` or each on its own tenant.
fn rate(catalog: &Catalog, writers: usize, own_tenant: bool) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for w in 0..writers {
            let c = catalog.clone();
            let t = if own_tenant {
                format!("t{w}")
            } else {
                "t0".to_owned()
            };
            s.spawn(move || {
                let body = vec![7u8; 4096];
                for i in 0..PUTS_PER_WRITER {
                    let rec = ObjectRecord {
                        size: body.len() as u64,
                        etag: "00".into(),
                        inline: true,
                        ..ObjectRecord::default()
                    };
                    let r = c.ledger().reserve(&t, rec.size).expect("reserve");
                    c.put_object(
                        &t,
                        "b",
                        &format!("{own_tenant}-{writers}-{w}-{i}"),
                        &rec,
                        Some(&body),
                        r,
                    )
                    .expect("put");
                }
            });
        }
    });
    (writers * PUTS_PER_WRITER) as f64 / start.elapsed().as_secs_f64()
}
