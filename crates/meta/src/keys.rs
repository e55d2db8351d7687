//! Composite table keys. Tenant ids, bucket names and object keys never contain NUL (the
//! gateway validates them), so `tenant \0 bucket \0 key` sorts exactly as S3 lists: by the
//! UTF-8 bytes of the key within one bucket.

pub const SEP: u8 = 0;

pub fn bucket(tenant: &str, bucket: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(tenant.len() + bucket.len() + 1);
    k.extend_from_slice(tenant.as_bytes());
    k.push(SEP);
    k.extend_from_slice(bucket.as_bytes());
    k
}

/// The key prefix shared by everything under `tenant`.
pub fn tenant_prefix(tenant: &str) -> Vec<u8> {
    let mut k = tenant.as_bytes().to_vec();
    k.push(SEP);
    k
}

/// The key prefix shared by every entry of one bucket.
pub fn bucket_prefix(tenant: &str, bucket_name: &str) -> Vec<u8> {
    let mut k = bucket(tenant, bucket_name);
    k.push(SEP);
    k
}

pub fn entry(tenant: &str, bucket_name: &str, name: &str) -> Vec<u8> {
    let mut k = bucket_prefix(tenant, bucket_name);
    k.extend_from_slice(name.as_bytes());
    k
}

/// The smallest key greater than every key starting with `prefix` (`None`: no such key).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Splits `tenant \0 rest` into its parts.
pub fn split_tenant(key: &[u8]) -> Option<(&str, &[u8])> {
    let pos = key.iter().position(|&b| b == SEP)?;
    let tenant = std::str::from_utf8(&key[..pos]).ok()?;
    Some((tenant, &key[pos + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_bounds_the_prefix() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[b'a', 0xff]), Some(b"b".to_vec()));
        assert_eq!(prefix_end(&[0xff]), None);
    }

    #[test]
    fn tenants_do_not_share_prefixes() {
        // "a" must not see entries of tenant "ab".
        assert!(!entry("ab", "b", "k").starts_with(&bucket_prefix("a", "b")));
        assert!(!bucket("ab", "x").starts_with(&tenant_prefix("a")));
    }
}
