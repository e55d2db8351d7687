//! Listing a bucket: a scan in key order, rolled up at the delimiter, that jumps past each
//! common prefix instead of reading what it rolls up (as the embedded engine does).

use sluice_meta::{Entry, ListPage, ListQuery, MetaError, Result, prefix_end};

use crate::Inner;
use crate::db::{Tx, TxError, TxResult};
use crate::objects::{decode, require_bucket};

/// Rows fetched per round trip.
const BATCH: usize = 1000;

/// Up to `limit` `(key, record, has_body)` rows from `start` (excluded or not) to `end`.
fn fetch(
    tx: &Tx<'_>,
    tenant: &str,
    bucket: &str,
    start: &[u8],
    excluded: bool,
    end: Option<&[u8]>,
    limit: usize,
) -> TxResult<Vec<tokio_postgres::Row>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let sql = if excluded {
        "SELECT key, record, body IS NOT NULL FROM objects
         WHERE tenant = $1 AND bucket = $2 AND key > $3 AND ($4::BYTEA IS NULL OR key < $4)
         ORDER BY key LIMIT $5"
    } else {
        "SELECT key, record, body IS NOT NULL FROM objects
         WHERE tenant = $1 AND bucket = $2 AND key >= $3 AND ($4::BYTEA IS NULL OR key < $4)
         ORDER BY key LIMIT $5"
    };
    tx.query(
        sql,
        &[&tenant.as_bytes(), &bucket.as_bytes(), &start, &end, &limit],
    )
}

impl Inner {
    pub(crate) fn list_objects(
        &self,
        tenant: &str,
        bucket: &str,
        q: &ListQuery<'_>,
    ) -> Result<ListPage> {
        self.db.read(|tx| {
            require_bucket(tx, tenant, bucket)?;
            scan(tx, tenant, bucket, q)
        })
    }
}

fn scan(tx: &Tx<'_>, tenant: &str, bucket: &str, q: &ListQuery<'_>) -> TxResult<ListPage> {
    let end = prefix_end(q.prefix.as_bytes());
    let mut start = q.prefix.as_bytes().to_vec();
    let mut excluded = false;
    if let Some(after) = q.after
        && after >= q.prefix
    {
        start = after.as_bytes().to_vec();
        excluded = true;
    }
    let delimiter = q.delimiter.filter(|d| !d.is_empty());
    let limit = q.max.saturating_add(1).min(BATCH);
    let mut entries = Vec::new();
    let mut truncated = false;
    'scan: loop {
        let rows = fetch(tx, tenant, bucket, &start, excluded, end.as_deref(), limit)?;
        let fetched = rows.len();
        let mut last: Option<Vec<u8>> = None;
        for row in rows {
            let key: &[u8] = row.get(0);
            let name = std::str::from_utf8(key)
                .map_err(|e| TxError::Meta(MetaError::Corrupt(e.to_string())))?
                .to_owned();
            if let Some(d) = delimiter
                && let Some(pos) = name[q.prefix.len()..].find(d)
            {
                let common = name[..q.prefix.len() + pos + d.len()].to_owned();
                // A common prefix at or before the marker was returned on an earlier page.
                if q.after.is_none_or(|a| common.as_str() > a) {
                    if entries.len() == q.max {
                        truncated = true;
                        break 'scan;
                    }
                    entries.push(Entry::Prefix(common.clone()));
                }
                match prefix_end(common.as_bytes()) {
                    Some(next) => {
                        start = next;
                        excluded = false;
                        continue 'scan;
                    }
                    None => break 'scan,
                }
            }
            if entries.len() == q.max {
                truncated = true;
                break 'scan;
            }
            let rec = decode(row.get(1), row.get(2))?;
            entries.push(Entry::Object(name, rec));
            last = Some(key.to_vec());
        }
        match last {
            Some(key) if fetched == limit => {
                start = key;
                excluded = true;
            }
            _ => break,
        }
    }
    Ok(ListPage { entries, truncated })
}
