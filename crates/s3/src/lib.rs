//! sluice's S3 front end: the `s3s` service that the gateway (and the node agent) serve.
//!
//! It owns the request path from an authenticated S3 call to bytes in the backend:
//! - [`auth`]: one SigV4 path, tenant resolution, name validation (the namespace boundary);
//! - [`front`]: the S3 operations, confined to the caller's namespace, with quota reserved
//!   before bytes move (the capacity boundary); on the node agent, with the shared tier behind
//!   them as a [`Tier`] (reads that miss here, merged listings);
//! - [`confidential`]: which tenants' bodies the node agent encrypts, and with what key;
//! - [`checksum`]: the `x-amz-checksum-*` a client attaches to a body, verified on the way in;
//! - [`blob`]: streaming object bytes to and from `object_store` under a per-tenant prefix
//!   (or handing a small body back, for the catalog to keep inline with its record);
//! - [`error`]: the one mapping from domain errors to S3 codes and HTTP status;
//! - [`reconcile`]: the catalog and the blobs checked against each other at start;
//! - [`recovery`]: the recovery record beside every object in the backend, and the catalog
//!   rebuilt, checked and garbage-collected from them.
//!
//! It does not own listeners, configuration files or process lifecycle (the gateway and agent
//! crates do), nor metadata storage (`sluice-meta`).

pub mod auth;
pub mod blob;
pub mod checksum;
pub mod confidential;
pub mod error;
pub mod front;
pub mod name;
pub mod reconcile;
pub mod recovery;

pub use auth::{Caller, TenantAccess, TenantAuth, TenantKey, Tenants, is_extension, sigv4_tenant};
pub use blob::BlobStore;
pub use confidential::Confidential;
pub use front::{Front, FrontConfig, Tier, TierBucket, TierRead};
pub use reconcile::{ReconcileError, ReconcileSummary, reconcile};
pub use sluice_serve::HttpService;

use std::sync::Arc;

use s3s::config::{S3Config, StaticConfigProvider};
use s3s::service::S3ServiceBuilder;

/// The HTTP service: signature verification, tenant access checks, then `front`.
pub fn service(front: Front, tenants: &Arc<Tenants>) -> HttpService {
    service_with(front, tenants)
}

/// The same service around any [`s3s::S3`] implementation: the same signature check, access
/// rules and limits.
pub fn service_with(s3: impl s3s::S3, tenants: &Arc<Tenants>) -> HttpService {
    HttpService::new(builder(s3, tenants).build())
}

/// The gateway's service: [`service`] plus the node agents' escrow requests
/// ([`front::escrow`]).
pub fn gateway_service(front: Front, tenants: &Arc<Tenants>) -> HttpService {
    let route = front.escrow_route(tenants);
    service_with_route(front, tenants, route)
}

/// [`service_with`] plus a custom route (the node agent's tenant-scoped status), which s3s
/// answers after the same signature check; its access rule is its own (see [`sigv4_tenant`]).
pub fn service_with_route(
    s3: impl s3s::S3,
    tenants: &Arc<Tenants>,
    route: impl s3s::route::S3Route,
) -> HttpService {
    let mut b = builder(s3, tenants);
    b.set_route(route);
    HttpService::new(b.build())
}

fn builder<S: s3s::S3>(s3: S, tenants: &Arc<Tenants>) -> S3ServiceBuilder {
    let mut b = S3ServiceBuilder::new(s3);
    b.set_auth(TenantAuth(Arc::clone(tenants)));
    b.set_access(TenantAccess(Arc::clone(tenants)));
    b.set_validation(auth::DeferredNameCheck);
    let mut config = S3Config::default();
    // Clock skew allowed on signed requests and presigned URLs (replay window), as AWS.
    config.presigned_url_max_skew_time_secs = 15 * 60;
    config.xml_max_body_size = 4 * 1024 * 1024;
    b.set_config(Arc::new(StaticConfigProvider::new(Arc::new(config))));
    b
}
