//! Commits per second of the shared catalog with 1, 4 and 16 concurrent writers, on a server
//! that fsyncs its WAL: how far PostgreSQL's group commit across the pool's connections
//! batches the engine's commits, and how many transactions were rolled back (serialization
//! failures retried) meanwhile. New keys on one tenant, the same keys overwritten, new keys on
//! a tenant per writer. `cargo run --release -p sluice-catalog-pg --example commit_rate`.

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
    let rollbacks = || {
        pg.server.query_i64(
            "sluice",
            "SELECT xact_rollback FROM pg_stat_database WHERE datname = 'sluice'",
        )
    };
    let catalog = Catalog::new(Arc::new(pg.engine()));
    for t in 0..16 {
        let t = format!("t{t}");
        catalog.ledger().set_quota(&t, u64::MAX);
        catalog.create_bucket(&t, "b", 0).expect("bucket");
    }
    println!(
        "commits/s (rolled back), inline 4 KiB PutObject, fsync=on\n\
         writers  one tenant, new keys  same keys again  a tenant each, new keys"
    );
    for writers in [1usize, 4, 16] {
        let mut cells = Vec::new();
        for (own_tenant, round) in [(false, 0), (false, 1), (true, 0)] {
            let before = rollbacks();
            let r = rate(&catalog, writers, own_tenant, round);
            cells.push(format!("{r:.0} ({})", rollbacks() - before));
        }
        println!(
            "{writers:>7}  {:>20}  {:>15}  {:>23}",
            cells[0], cells[1], cells[2]
        );
    }
}

/// Commits per second of `writers` threads, all on tenant `t0` or each on its own tenant;
/// `round` 1 writes the keys of round 0 again.
fn rate(catalog: &Catalog, writers: usize, own_tenant: bool, round: u8) -> f64 {
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
                let body = vec![round; 4096];
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
