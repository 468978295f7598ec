//! Request ids for requests that came without one: 32 hex characters, unique
//! across processes (a random 64-bit prefix drawn once) and within one (a
//! counter), without a system call per request.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

static PREFIX: OnceLock<u64> = OnceLock::new();
static COUNTER: AtomicU64 = AtomicU64::new(0);

pub fn next() -> String {
    let prefix = *PREFIX.get_or_init(|| uuid::Uuid::new_v4().as_u64_pair().0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix:016x}{n:016x}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_32_hex_and_distinct() {
        let a = super::next();
        let b = super::next();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
