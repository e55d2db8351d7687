//! The front's side of recovery records (see [`crate::recovery`]): written after each commit
//! and before the acknowledgement, dropped after the catalog drops what they describe. A
//! front with a tier behind it (the node agent's buffer) writes none: the shared tier is the
//! authority there, and its gateway records what reaches it.

use std::ops::Range;

use bytes::Bytes;
use sluice_meta::ObjectRecord;

use super::Front;
use crate::blob::ReadStream;
use crate::error::ApiResult;
use crate::recovery::{BucketRecord, ObjectRecovery, bucket_record_name, object_record_name};

impl Front {
    /// Writes the record of `rec`, just committed at `key`; then reads the key again and,
    /// if a racing overwrite or delete has already replaced this version, deletes the record
    /// again (that writer could not delete a record not yet written). A failure to write is
    /// the request's failure: the object is visible, but unacknowledged without its record.
    pub(super) async fn record_object(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        rec: &ObjectRecord,
        inline: Option<&[u8]>,
    ) -> ApiResult<()> {
        if !self.inner.records || (inline.is_some() && !self.inner.inline_records) {
            return Ok(());
        }
        let record = ObjectRecovery::new(tenant, bucket, key, rec, inline);
        let name = record.name();
        self.blobs()
            .put_small(tenant, &name, record.to_json())
            .await?;
        let (t, b, k) = (tenant.to_owned(), bucket.to_owned(), key.to_owned());
        let current = self.meta(move |c| c.get_object(&t, &b, &k)).await?;
        if current.is_none_or(|c| c.version != rec.version) {
            self.blobs().delete(tenant, [name]).await;
        }
        Ok(())
    }

    /// Deletes the record of the object `old` that the catalog no longer holds at `key`.
    pub(super) async fn drop_record(&self, tenant: &str, bucket: &str, key: &str, old: u64) {
        if self.inner.records && old > 0 {
            let name = object_record_name(bucket, key, old);
            self.blobs().delete(tenant, [name]).await;
        }
    }

    /// Writes the record of a bucket just created.
    pub(super) async fn record_bucket(
        &self,
        tenant: &str,
        bucket: &str,
        created_ms: i64,
    ) -> ApiResult<()> {
        if !self.inner.records {
            return Ok(());
        }
        let record = BucketRecord::new(tenant, bucket, created_ms);
        let json = Bytes::from(serde_json::to_vec(&record).unwrap_or_default());
        self.blobs()
            .put_small(tenant, &bucket_record_name(bucket), json)
            .await
    }

    /// Deletes the record of a bucket just deleted.
    pub(super) async fn drop_bucket_record(&self, tenant: &str, bucket: &str) {
        if self.inner.records {
            self.blobs()
                .delete(tenant, [bucket_record_name(bucket)])
                .await;
        }
    }

    /// A GET's body, held back until it is known to be there: every blob the range touches
    /// after the first checked (in parallel with the first grain's fetch), and the first
    /// grain awaited. A missing blob then fails the request with a 5xx before the status
    /// line goes out, never as a 200 with a short body.
    pub(super) async fn checked_body(
        &self,
        tenant: &str,
        rec: &ObjectRecord,
        range: &Range<u64>,
        body: ReadStream,
    ) -> ApiResult<ReadStream> {
        let mut start = 0;
        let mut touched = Vec::new();
        for s in &rec.segments {
            let end = start + s.size;
            if start < range.end && range.start < end {
                touched.push(s.blob.as_str());
            }
            start = end;
        }
        let rest = touched.get(1..).unwrap_or_default();
        let (present, body) =
            futures::future::join(self.blobs().check_present(tenant, rest), body.primed()).await;
        present?;
        body
    }
}

#[cfg(test)]
mod tests;
