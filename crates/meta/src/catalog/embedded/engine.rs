//! [`Engine`] for the embedded catalog: each method is the inherent one of the same name.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::RedbCatalog;
use crate::catalog::{Engine, ListPage, ListQuery, PartSpec};
use crate::{Ledger, ObjectRecord, PartRecord, Precondition, Reservation, Result, UploadRecord};

impl Engine for RedbCatalog {
    fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    fn is_shared(&self) -> bool {
        false
    }

    fn seed_tenants(&self, specs: &[crate::TenantSpec]) -> Result<crate::SeedReport> {
        Self::seed_tenants(self, specs)
    }

    fn tenants(&self) -> Result<Option<Vec<crate::TenantSpec>>> {
        Self::tenants(self).map(Some)
    }

    fn change_tenant(
        &self,
        change: &crate::TenantChange,
        who: &str,
    ) -> Result<std::result::Result<Option<crate::TenantSpec>, crate::TenantRefusal>> {
        Self::change_tenant(self, change, who)
    }

    fn tenant_history(&self, tenant: Option<&str>) -> Result<Vec<crate::AuditEntry>> {
        Self::tenant_history(self, tenant)
    }

    fn referenced_blobs(&self) -> Result<HashMap<String, HashSet<String>>> {
        Self::referenced_blobs(self)
    }

    fn create_bucket(&self, tenant: &str, bucket: &str, now_ms: i64) -> Result<()> {
        Self::create_bucket(self, tenant, bucket, now_ms)
    }

    fn delete_bucket(&self, tenant: &str, bucket: &str) -> Result<Vec<String>> {
        Self::delete_bucket(self, tenant, bucket)
    }

    fn bucket_exists(&self, tenant: &str, bucket: &str) -> Result<bool> {
        Self::bucket_exists(self, tenant, bucket)
    }

    fn list_buckets(&self, tenant: &str) -> Result<Vec<(String, i64)>> {
        Self::list_buckets(self, tenant)
    }

    fn get_object(&self, tenant: &str, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        Self::get_object(self, tenant, bucket, key)
    }

    fn get_object_with_body(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
    ) -> Result<Option<(ObjectRecord, Option<Vec<u8>>)>> {
        Self::get_object_with_body(self, tenant, bucket, key)
    }

    fn put_object_if(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        rec: &ObjectRecord,
        body: Option<&[u8]>,
        reservation: Reservation,
        cond: &Precondition,
    ) -> Result<(u64, Option<ObjectRecord>)> {
        Self::put_object_if(self, tenant, bucket, key, rec, body, reservation, cond)
    }

    fn delete_object(&self, tenant: &str, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        Self::delete_object(self, tenant, bucket, key)
    }

    fn evict_object(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        expected: &ObjectRecord,
    ) -> Result<bool> {
        Self::evict_object(self, tenant, bucket, key, expected)
    }

    fn list_objects(&self, tenant: &str, bucket: &str, q: &ListQuery<'_>) -> Result<ListPage> {
        Self::list_objects(self, tenant, bucket, q)
    }

    fn create_upload(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        rec: &UploadRecord,
    ) -> Result<()> {
        Self::create_upload(self, tenant, bucket, upload_id, rec)
    }

    fn get_upload(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
    ) -> Result<UploadRecord> {
        Self::get_upload(self, tenant, bucket, upload_id, key)
    }

    fn put_part(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
        number: u32,
        part: PartRecord,
        reservation: Reservation,
    ) -> Result<Option<PartRecord>> {
        Self::put_part(
            self,
            tenant,
            bucket,
            upload_id,
            key,
            number,
            part,
            reservation,
        )
    }

    fn complete_upload_if(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
        parts: &[PartSpec],
        now_ms: i64,
        cond: &Precondition,
        metadata: Option<&std::collections::BTreeMap<String, String>>,
    ) -> Result<(ObjectRecord, Option<ObjectRecord>, Vec<String>)> {
        Self::complete_upload_if(
            self, tenant, bucket, upload_id, key, parts, now_ms, cond, metadata,
        )
    }

    fn abort_upload(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
    ) -> Result<Vec<String>> {
        Self::abort_upload(self, tenant, bucket, upload_id, key)
    }

    fn list_uploads(&self, tenant: &str, bucket: &str) -> Result<Vec<(String, UploadRecord)>> {
        Self::list_uploads(self, tenant, bucket)
    }

    fn restore_bucket(&self, tenant: &str, bucket: &str, created_ms: i64) -> Result<()> {
        Self::restore_bucket(self, tenant, bucket, created_ms)
    }

    fn restore_object_with_body(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        record: &ObjectRecord,
        body: Option<&[u8]>,
    ) -> Result<bool> {
        Self::restore_object_with_body(self, tenant, bucket, key, record, body)
    }

    fn try_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        Self::try_lease(self, name, holder, ttl)
    }

    fn release_lease(&self, name: &str, holder: &str) -> Result<()> {
        Self::release_lease(self, name, holder)
    }

    fn lease_holder(&self, name: &str) -> Result<Option<String>> {
        Self::lease_holder(self, name)
    }

    fn grant_escrow(
        &self,
        tenant: &str,
        holder: &str,
        target: u64,
        ttl: Duration,
    ) -> Result<crate::EscrowGrant> {
        Self::grant_escrow(self, tenant, holder, target, ttl)
    }
}
