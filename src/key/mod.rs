//! Idempotency keys and what they are compared by: extraction from a header
//! (RFC 8941 string or bare token), a JSON body, a query parameter, a form
//! field, or derived from business identifiers; validation, the scope hash
//! that separates tenants, and the request fingerprint.
//!
//! Pure functions over bytes and strings: nothing here knows of hyper.

pub mod body;
pub mod canonical_json;
pub mod derive;
pub mod fingerprint;
pub mod form;
pub mod header;
mod json_number;
pub mod json_pointer;
mod media_type;
pub mod multipart;
pub mod pattern;
pub mod pointer;
pub mod scope;
pub mod source;

pub use body::{BodyRules, FingerprintBody, Pointers};
pub use fingerprint::{FingerprintInput, FingerprintPart, fingerprint, fingerprint_with};
pub use header::{from_header_value, unquotes_in_a_header};
pub use json_pointer::from_json_body;
pub use pattern::{KeyPattern, PatternError};
pub use scope::scope_hash;
pub use source::{Derive, DerivePart, DerivePartError, FoundKey, KeySource, RequestView};

/// Why a request has no usable key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// No key at all (header absent; body not JSON or no string/number at the pointer).
    #[error("missing idempotency key")]
    Missing,
    /// A key is present but unusable; the message says why (never echoes the key).
    #[error("invalid idempotency key: {0}")]
    Invalid(&'static str),
}

/// Checks an unwrapped key: 1–255 visible ASCII characters (0x21..=0x7E).
pub fn validate(key: &str) -> Result<(), KeyError> {
    within(key, 0x21, "contains a character that is not visible ASCII")
}

/// Checks a key that may hold spaces (an sf-string's content, a decoded
/// query or form value): 1–255 printable ASCII characters (0x20..=0x7E).
pub fn validate_printable(key: &str) -> Result<(), KeyError> {
    within(
        key,
        0x20,
        "contains a character that is not printable ASCII",
    )
}

/// A key as an operator names it (the admin API's key path, `idemgate
/// keys`): as stored, as the listing shows it, byte for byte. Nothing is
/// unquoted: `"ab"` is the four-byte key a JSON body can give, never the key
/// `ab` that the header `Idempotency-Key: "ab"` gives, so a key passed back
/// from the listing finds its own record and no other. Refused, the message
/// never repeating it, when no source could give it: empty, over 255
/// characters, or anything but printable ASCII.
pub fn as_stored(named: &[u8]) -> Result<&str, KeyError> {
    // Non-UTF-8 bytes are all >= 0x80, i.e. not printable ASCII either.
    let key = std::str::from_utf8(named)
        .map_err(|_| KeyError::Invalid("contains a character that is not printable ASCII"))?;
    validate_printable(key)?;
    Ok(key)
}

/// 1–255 characters, each from `lowest` to `~` (0x7E).
fn within(key: &str, lowest: u8, outside: &'static str) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Invalid("empty"));
    }
    // Characters first: once every byte is ASCII, bytes == characters, so the
    // length check below measures characters.
    if !key.bytes().all(|b| (lowest..=0x7E).contains(&b)) {
        return Err(KeyError::Invalid(outside));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(KeyError::Invalid("longer than 255 characters"));
    }
    Ok(())
}

/// Longest accepted key, in characters.
pub const MAX_KEY_LEN: usize = 255;

/// A short, stable hash of a key for logs: raw keys never appear there.
pub fn short_hash(key: &str) -> String {
    use sha2::{Digest, Sha256};
    // 6 bytes = 12 hex chars: enough to correlate log lines, too short to be a
    // useful lookup handle for the key itself.
    let digest = Sha256::digest(key.as_bytes());
    hex_lower(&digest[..6])
}

/// Lower-case hex. `hex::encode` collects one `char` at a time, which showed
/// in the replay profile (three digests per request).
pub(crate) fn hex_lower(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

/// A deterministic xorshift64 step: the parsers' never-panics tests draw
/// their inputs from it, with no extra crate.
#[cfg(test)]
pub(crate) fn xorshift(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_is_lower_case_and_matches_the_hex_crate() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(super::hex_lower(&bytes), hex::encode(&bytes));
    }

    use super::*;

    fn invalid(key: &str) -> &'static str {
        match validate(key) {
            Err(KeyError::Invalid(msg)) => msg,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn accepts_visible_ascii() {
        assert_eq!(validate("a"), Ok(()));
        assert_eq!(validate("!~"), Ok(()));
        assert_eq!(validate("8e03978e-40d5-43e8-bc93-6894a57f9324"), Ok(()));
        assert_eq!(validate(&"x".repeat(255)), Ok(()));
    }

    #[test]
    fn rejects_bad_keys() {
        assert_eq!(invalid(""), "empty");
        assert_eq!(invalid(&"x".repeat(256)), "longer than 255 characters");
        let not_visible = "contains a character that is not visible ASCII";
        assert_eq!(invalid("a b"), not_visible);
        assert_eq!(invalid("a\tb"), not_visible);
        assert_eq!(invalid("a\nb"), not_visible);
        assert_eq!(invalid("a\u{0}b"), not_visible);
        assert_eq!(invalid("a\u{7f}b"), not_visible);
        assert_eq!(invalid("clé"), not_visible);
        assert_eq!(invalid("ключ"), not_visible);
    }

    #[test]
    fn error_message_never_echoes_key() {
        let key = "secret\u{1}";
        let err = validate(key)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(!err.contains("secret"), "{err}");
    }

    #[test]
    fn short_hash_is_stable_and_short() {
        let h = short_hash("abc");
        assert_eq!(h.len(), 12);
        // sha256("abc") = ba7816bf8f01cfea...
        assert_eq!(h, "ba7816bf8f01");
        assert_ne!(short_hash("abd"), h);
    }
}
