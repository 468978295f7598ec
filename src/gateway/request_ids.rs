//! Request ids for requests that came without one: 32 hex characters, unique
//! across processes (a random 64-bit prefix drawn once) and within one (a
//! counter), without a system call per request; and the choice between
//! the client's own id and a new one.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use http::HeaderValue;

static PREFIX: OnceLock<u64> = OnceLock::new();
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The next id, ready to be sent as a header value (one allocation).
fn next() -> HeaderValue {
    let prefix = *PREFIX.get_or_init(|| uuid::Uuid::new_v4().as_u64_pair().0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut hex = [0u8; 32];
    for (half, value) in [prefix, n].into_iter().enumerate() {
        for (i, byte) in value.to_be_bytes().into_iter().enumerate() {
            let at = half * 16 + i * 2;
            hex[at] = HEX[usize::from(byte >> 4)];
            hex[at + 1] = HEX[usize::from(byte & 0x0f)];
        }
    }
    HeaderValue::from_bytes(&hex).unwrap_or_else(|_| HeaderValue::from_static("-"))
}

const HEX: &[u8; 16] = b"0123456789abcdef";

pub const X_REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-request-id");

/// The client's `X-Request-Id` when it sent a usable one, else a new one set on
/// the request so the upstream's logs and ours can be joined.
pub fn ensure(headers: &mut http::HeaderMap, keep: bool) -> Option<http::HeaderValue> {
    if let Some(id) = headers
        .get(&X_REQUEST_ID)
        .filter(|v| v.to_str().is_ok_and(|v| !v.is_empty() && v.len() <= 128))
    {
        return keep.then(|| id.clone());
    }
    let id = next();
    let kept = keep.then(|| id.clone());
    headers.insert(X_REQUEST_ID, id);
    kept
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_32_hex_and_distinct() {
        let a = super::next();
        let b = super::next();
        assert_eq!(a.len(), 32);
        assert!(a.as_bytes().iter().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        // The counter is the low half, in order.
        let low =
            |v: &http::HeaderValue| u64::from_str_radix(&v.to_str().unwrap()[16..], 16).unwrap();
        assert_eq!(low(&b), low(&a) + 1);
    }
}
