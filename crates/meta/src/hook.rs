//! An optional observer of catalog mutations that writes in the same redb transaction.
//!
//! The gateway installs none. The node agent installs one that appends each visible change
//! (an object put, an object deleted, a bucket created or deleted) to its drain journal in the
//! transaction that makes the change visible: the catalog commit *is* the journal entry, so a
//! crash can never leave an acknowledged object without its journal entry, or a journal entry
//! for an object that was never acknowledged.
//!
//! A hook error aborts the transaction (the mutation fails as a whole).

use crate::{ObjectRecord, Result};

/// A visible change to the catalog, as it is being committed.
#[derive(Debug, Clone, Copy)]
pub enum Change<'a> {
    /// `object` is now visible at `key` (a PUT, a copy, a completed multipart upload),
    /// replacing `replaced` if there was one. `body` holds its bytes when it is inline.
    Put {
        tenant: &'a str,
        bucket: &'a str,
        key: &'a str,
        object: &'a ObjectRecord,
        body: Option<&'a [u8]>,
        replaced: Option<&'a ObjectRecord>,
    },
    /// `key` was deleted; `old` is what was visible (`None`: nothing was, which an observer
    /// that mirrors deletes elsewhere still needs to hear about).
    Delete {
        tenant: &'a str,
        bucket: &'a str,
        key: &'a str,
        old: Option<&'a ObjectRecord>,
    },
    BucketCreated {
        tenant: &'a str,
        bucket: &'a str,
    },
    BucketDeleted {
        tenant: &'a str,
        bucket: &'a str,
    },
}

/// Called inside the write transaction of every mutation that changes what clients see.
pub trait CommitHook: Send + Sync {
    /// Runs before the transaction commits; an error aborts it.
    fn on_commit(&self, txn: &redb::WriteTransaction, change: &Change<'_>) -> Result<()> {
        let _ = (txn, change);
        Ok(())
    }
}
