//! Bucket-name and object-key validation.
//!
//! Object bytes live under opaque blob names, so a key can never become a backend path; the
//! rules below still refuse every key that could mean something else to a filesystem or a
//! proxy (dot segments, empty segments, control characters, percent-encoded variants of
//! those, over-long keys), so that no layer above or below us has to re-decide.

/// S3's limit on a key's length in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("{0}")]
    Bucket(BucketRule),
    #[error("object key is empty")]
    EmptyKey,
    #[error("object key is longer than {MAX_KEY_BYTES} bytes")]
    KeyTooLong,
    #[error("object key contains a control character")]
    ControlCharacter,
    #[error("object key contains an empty, '.' or '..' path segment")]
    DotOrEmptySegment,
}

/// The bucket-naming rule a name broke, stated in S3's words (the client is told which).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BucketRule {
    #[error("Bucket names must be between 3 (min) and 63 (max) characters long.")]
    Length,
    #[error(
        "Bucket names can consist only of lowercase letters, numbers, periods (.), and hyphens (-)."
    )]
    Characters,
    #[error("Bucket names must begin and end with a letter or number.")]
    Edges,
    #[error("Bucket names must not contain two adjacent periods, or a period next to a hyphen.")]
    AdjacentPeriods,
}

/// S3's general-purpose bucket naming rules, checked in the order S3's documentation lists
/// them; the first one broken is the one reported.
pub fn check_bucket(name: &str) -> Result<(), NameError> {
    let b = name.as_bytes();
    let rule = if !(3..=63).contains(&b.len()) {
        Some(BucketRule::Length)
    } else if !b
        .iter()
        .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'-')
    {
        Some(BucketRule::Characters)
    } else if !b[0].is_ascii_alphanumeric() || !b[b.len() - 1].is_ascii_alphanumeric() {
        Some(BucketRule::Edges)
    } else if name.contains("..") || name.contains(".-") || name.contains("-.") {
        Some(BucketRule::AdjacentPeriods)
    } else {
        None
    };
    rule.map_or(Ok(()), |r| Err(NameError::Bucket(r)))
}

pub fn check_key(key: &str) -> Result<(), NameError> {
    if key.is_empty() {
        return Err(NameError::EmptyKey);
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(NameError::KeyTooLong);
    }
    check_segments(key)?;
    // The same rules hold for the key as a percent-decoding layer would see it.
    if key.contains('%') {
        let decoded = percent_decode(key);
        check_segments(&decoded)?;
    }
    Ok(())
}

fn check_segments(key: &str) -> Result<(), NameError> {
    if key.chars().any(char::is_control) {
        return Err(NameError::ControlCharacter);
    }
    // Backslash separates segments for some consumers; treat it as one here.
    if key
        .split(['/', '\\'])
        .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return Err(NameError::DotOrEmptySegment);
    }
    Ok(())
}

/// Lossy percent-decoding (invalid escapes stay as they are).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len() + 1
            && let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_checkpoint_keys_pass() {
        for k in [
            "run/step-100/__0_0.distcp",
            "run/step-100/.metadata",
            "a b/c+d/é/100%",
            "x",
            "file.tar.gz",
        ] {
            assert_eq!(check_key(k), Ok(()), "{k}");
        }
    }

    #[test]
    fn traversal_and_malformed_keys_are_refused() {
        let long = "k".repeat(MAX_KEY_BYTES + 1);
        for (k, e) in [
            ("", NameError::EmptyKey),
            ("../x", NameError::DotOrEmptySegment),
            ("a/../../b", NameError::DotOrEmptySegment),
            ("a/./b", NameError::DotOrEmptySegment),
            ("/abs", NameError::DotOrEmptySegment),
            ("a//b", NameError::DotOrEmptySegment),
            ("dir/", NameError::DotOrEmptySegment),
            ("..\\windows", NameError::DotOrEmptySegment),
            ("a/%2e%2e/b", NameError::DotOrEmptySegment),
            ("a/%2E%2e", NameError::DotOrEmptySegment),
            ("%2fabs", NameError::DotOrEmptySegment),
            ("nul\0byte", NameError::ControlCharacter),
            ("new\nline", NameError::ControlCharacter),
            ("enc%0aoded", NameError::ControlCharacter),
            (long.as_str(), NameError::KeyTooLong),
        ] {
            assert_eq!(check_key(k), Err(e), "{k:?}");
        }
    }

    #[test]
    fn bucket_names_follow_s3_rules() {
        for ok in ["ckpt", "my-bucket.2", "abc"] {
            assert_eq!(check_bucket(ok), Ok(()), "{ok}");
        }
        for (bad, rule) in [
            ("ab", BucketRule::Length),
            (&"x".repeat(64), BucketRule::Length),
            ("UPPER", BucketRule::Characters),
            ("a_b", BucketRule::Characters),
            ("-lead", BucketRule::Edges),
            ("trail-", BucketRule::Edges),
            ("../x", BucketRule::Characters),
            (".lead", BucketRule::Edges),
            ("a..b", BucketRule::AdjacentPeriods),
            ("a.-b", BucketRule::AdjacentPeriods),
        ] {
            assert_eq!(check_bucket(bad), Err(NameError::Bucket(rule)), "{bad}");
        }
    }
}
