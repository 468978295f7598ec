//! Idempotency keys and what they are compared by: extraction from a header
//! (RFC 8941 string or bare token) or from a JSON body, validation, the scope
//! hash that separates tenants, and the request fingerprint.
//!
//! Pure functions over bytes and strings: nothing here knows of hyper.

pub mod fingerprint;
pub mod header;
pub mod json_pointer;
pub mod scope;

pub use fingerprint::{FingerprintInput, fingerprint};
pub use header::from_header_value;
pub use json_pointer::from_json_body;
pub use scope::scope_hash;

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
    let _ = key;
    todo!("key validation")
}

/// A short, stable hash of a key for logs: raw keys never appear there.
pub fn short_hash(key: &str) -> String {
    let _ = key;
    todo!("short hash")
}
