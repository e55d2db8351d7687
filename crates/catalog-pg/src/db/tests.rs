//! Transactions against a real server: a lost serialization conflict is retried.

#[path = "../../tests/common/mod.rs"]
mod common;

use super::Db;

#[test]
fn a_transaction_that_loses_a_serialization_conflict_runs_again_and_commits() {
    let Some(pg) = common::Pg::start() else {
        return;
    };
    pg.server.sql(
        "sluice",
        "CREATE TABLE skew (id BIGINT PRIMARY KEY, n BIGINT NOT NULL);
         INSERT INTO skew VALUES (1, 0), (2, 0);",
    );
    let db = Db::connect(&pg.url, pg.rt.handle().clone(), 2).expect("pool");
    let mut attempts = 0;
    let seen = db
        .write(|tx| {
            attempts += 1;
            let sum: i64 = tx.query_one("SELECT SUM(n)::BIGINT FROM skew", &[])?.get(0);
            if attempts == 1 {
                // Write skew: another transaction reads both rows, writes the other one and
                // commits first, so this one cannot be serialized after it.
                pg.server.sql(
                    "sluice",
                    "BEGIN ISOLATION LEVEL SERIALIZABLE;
                     SELECT SUM(n) FROM skew;
                     UPDATE skew SET n = n + 1 WHERE id = 2;
                     COMMIT;",
                );
            }
            tx.execute("UPDATE skew SET n = $1::BIGINT + 1 WHERE id = 1", &[&sum])?;
            Ok(sum)
        })
        .expect("committed on a later attempt");
    assert_eq!(attempts, 2, "the first attempt lost the conflict");
    assert_eq!(seen, 1, "the retry saw the other transaction's write");
    let n: i64 = db
        .read(|tx| Ok(tx.query_one("SELECT n FROM skew WHERE id = 1", &[])?.get(0)))
        .expect("read");
    assert_eq!(n, 2);
}
