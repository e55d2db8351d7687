//! Node agents' read-only access to the tenants: `GET /admin/tenants` on the control
//! listener, with a *node credential* instead of the admin token. The answer is every
//! tenant's shared-tier settings and its live keys with their secrets (an agent verifies its
//! trainers' SigV4 signatures and signs its drain with them), so that no node's file has to
//! hold a tenant's secret.
//!
//! A node credential is `sluice-node.<NODE>.<tag>`, the tag an HMAC-SHA256 of the node's
//! name under the admin token (`sluice tenant node-token NODE`): the gateway keeps no list of
//! them, every gateway sharing the admin token accepts it, and changing the admin token
//! revokes every node credential at once. It reads; it never changes anything: `POST /admin`
//! with it is refused (403) like any credential but the admin token.

use aws_lc_rs::hmac;
use sluice_meta::TenantSpec;

use super::{AdminError, Sealer, same, seal::hex};

/// The control listener's path of the node agents' read.
pub const NODE_PATH: &str = "/admin/tenants";

const PREFIX: &str = "sluice-node.";

fn tag(admin_token: &str, node: &str) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, admin_token.as_bytes());
    hex(hmac::sign(&key, format!("sluice node credential\0{node}").as_bytes()).as_ref())
}

/// The credential of node `node` (1 to 63 characters of a-z, A-Z, 0-9, '-' and '_').
pub fn node_token(admin_token: &str, node: &str) -> Result<String, AdminError> {
    let ok = (1..=63).contains(&node.len())
        && node
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !ok {
        return Err(AdminError::Invalid(format!(
            "node name {node:?}: 1 to 63 characters of a-z, A-Z, 0-9, '-' and '_'"
        )));
    }
    Ok(format!("{PREFIX}{node}.{}", tag(admin_token, node)))
}

/// The node `given` is the credential of, if it is one under `admin_token`.
pub fn node_of(admin_token: &str, given: &str) -> Option<String> {
    let (node, _) = given.strip_prefix(PREFIX)?.split_once('.')?;
    let expected = node_token(admin_token, node).ok()?;
    same(given.as_bytes(), expected.as_bytes()).then(|| node.to_owned())
}

/// The answer of `GET /admin/tenants`: the tenants' shared-tier settings, the node-local
/// settings the catalog holds (`local_capacity`, `local_reservation`, `local_weight`,
/// `local_limit`; `null`: the agent's own file governs) and live keys, secrets opened (a key
/// that does not open is left out, as the gateway does).
pub fn tenants_answer(specs: &[TenantSpec], sealer: &Sealer) -> serde_json::Value {
    let keys = crate::tenants::keys_of(specs, sealer);
    let tenants: Vec<_> = specs
        .iter()
        .map(|s| {
            let live: Vec<_> = keys
                .iter()
                .filter(|k| *k.tenant == *s.id)
                .map(
                    |k| serde_json::json!({"access_key": k.access_key, "secret_key": k.secret_key}),
                )
                .collect();
            serde_json::json!({
                "id": s.id, "capacity": s.capacity, "max_objects": s.max_objects,
                "max_buckets": s.max_buckets, "keys": live,
                "local_capacity": s.local.capacity, "local_reservation": s.local.reservation,
                "local_weight": s.local.weight, "local_limit": s.local.limit,
            })
        })
        .collect();
    serde_json::json!({ "tenants": tenants })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_credential_names_its_node_under_its_admin_token_only() {
        let admin = "a".repeat(40);
        let t = node_token(&admin, "gpu-07").expect("valid");
        assert!(t.starts_with("sluice-node.gpu-07."), "{t}");
        assert_eq!(node_of(&admin, &t).as_deref(), Some("gpu-07"));
        assert_eq!(node_of(&"b".repeat(40), &t), None);
        let other = t.replace("gpu-07", "gpu-08");
        assert_eq!(node_of(&admin, &other), None);
        assert_eq!(node_of(&admin, &admin), None);
        assert!(node_token(&admin, "a.b").is_err());
        assert!(node_token(&admin, "").is_err());
    }
}
