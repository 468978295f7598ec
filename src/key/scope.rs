//! The scope hash, which keeps one tenant's keys apart from another's, and
//! the length-prefixed hashing it shares with the fingerprint.

use std::sync::{Arc, LazyLock};

use sha2::{Digest, Sha256};

/// Hex hash of the scope parts: each `(label, value)` in configured order, a
/// missing value distinct from an empty one. No parts → the hash of nothing
/// (one global namespace).
///
/// Full SHA-256, 64 lower-case hex characters: the scope separates tenants, so
/// it gets the whole digest rather than a collision-prone prefix.
///
/// Encoding per part, so no two different part lists share a byte stream:
/// `len(label) as u64 BE`, `label`, then `0x00` if the value is absent or
/// `0x01`, `len(value) as u64 BE`, `value`.
pub fn scope_hash<V: AsRef<[u8]>>(parts: &[(&str, Option<V>)]) -> Arc<str> {
    // `scope = []`, the usual single-tenant setting: the same hash every time,
    // shared rather than copied.
    static NOTHING: LazyLock<Arc<str>> =
        LazyLock::new(|| Arc::from(super::hex_lower(&Sha256::digest([]))));
    if parts.is_empty() {
        return NOTHING.clone();
    }
    let mut h = Sha256::new();
    for (label, value) in parts {
        update_len_prefixed(&mut h, label.as_bytes());
        update_optional(&mut h, value.as_ref().map(AsRef::as_ref));
    }
    Arc::from(super::hex_lower(&h.finalize()))
}

/// Feeds `bytes` preceded by its length, so field boundaries are unambiguous.
pub(crate) fn update_len_prefixed(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_be_bytes());
    h.update(bytes);
}

/// Feeds a value that may be absent: `0x00`, or `0x01` then the value
/// length-prefixed, so a missing value differs from an empty one.
pub(crate) fn update_optional(h: &mut Sha256, value: Option<&[u8]>) {
    match value {
        None => h.update([0u8]),
        Some(v) => {
            h.update([1u8]);
            update_len_prefixed(h, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Some`, coercing a byte-string literal to a slice.
    fn s(b: &[u8]) -> Option<&[u8]> {
        Some(b)
    }

    #[test]
    fn no_parts_is_hash_of_nothing() {
        assert_eq!(
            &*scope_hash::<&[u8]>(&[]),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn shape() {
        let h = scope_hash(&[("tenant", s(b"t1"))]);
        assert_eq!(h.len(), 64);
        assert!(
            h.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_eq!(h, scope_hash(&[("tenant", s(b"t1"))]));
    }

    #[test]
    fn different_values_differ() {
        assert_ne!(
            scope_hash(&[("tenant", s(b"t1"))]),
            scope_hash(&[("tenant", s(b"t2"))])
        );
        assert_ne!(scope_hash(&[("a", s(b"x"))]), scope_hash(&[("b", s(b"x"))]));
        assert_ne!(scope_hash(&[("a", s(b"x"))]), scope_hash::<&[u8]>(&[]));
    }

    #[test]
    fn absent_differs_from_empty() {
        assert_ne!(
            scope_hash::<&[u8]>(&[("tenant", None)]),
            scope_hash(&[("tenant", s(b""))])
        );
    }

    #[test]
    fn order_matters() {
        let ab = scope_hash(&[("a", s(b"1")), ("b", s(b"2"))]);
        let ba = scope_hash(&[("b", s(b"2")), ("a", s(b"1"))]);
        assert_ne!(ab, ba);
    }

    #[test]
    fn boundaries_are_unambiguous() {
        assert_ne!(
            scope_hash(&[("a", s(b"bc"))]),
            scope_hash(&[("ab", s(b"c"))])
        );
        assert_ne!(
            scope_hash(&[("l", s(b"a")), ("l", s(b"bc"))]),
            scope_hash(&[("l", s(b"ab")), ("l", s(b"c"))])
        );
        assert_ne!(
            scope_hash::<&[u8]>(&[("l", None), ("l", None)]),
            scope_hash(&[("l", s(b""))])
        );
    }
}
