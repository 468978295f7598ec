//! A server that takes no writes: a standby, such as the former primary
//! after a failover, reached through an address that has not moved yet, or
//! a database set `default_transaction_read_only`. Reads and pings would
//! go on working over its connections while every reservation failed, and
//! the pool keeps a connection for as long as it is open: after such a
//! failover, the gateway would refuse keyed requests for good.
//!
//! So the store notes each refused write (SQLSTATE 25006) and `/readyz`'s
//! finding of a read-only session, and the pool drops, at their next
//! checkout, the connections made before that sighting; the new ones look
//! the address up again (docs/postgres.md, "A server that takes no writes").

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use deadpool_postgres::{Hook, HookError};
use tokio_postgres::error::SqlState;

use super::cause::PostgresCause;
use crate::store::{StoreError, Unavailable};

/// When a read-only session was last seen; shared by the store and its
/// pool's hook.
#[derive(Clone)]
pub struct Sightings {
    inner: Arc<Inner>,
}

struct Inner {
    /// The instant the nanoseconds below count from.
    origin: Instant,
    /// Nanoseconds after `origin` of the last sighting; 0: none yet.
    last: AtomicU64,
}

impl Sightings {
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                origin: Instant::now(),
                last: AtomicU64::new(0),
            }),
        }
    }

    /// A session was found read-only now.
    pub fn seen(&self) {
        let nanos = self.inner.origin.elapsed().as_nanos();
        let nanos = u64::try_from(nanos).unwrap_or(u64::MAX).max(1);
        self.inner.last.fetch_max(nanos, Ordering::Relaxed);
    }

    /// Notes `error` when it is a write the server refused as read-only.
    pub fn note(&self, error: &StoreError) {
        if refused_write(error) {
            self.seen();
        }
    }

    /// Whether a connection made at `created` may be a read-only server's.
    fn stale(&self, created: Instant) -> bool {
        let last = self.inner.last.load(Ordering::Relaxed);
        last != 0
            && created
                .saturating_duration_since(self.inner.origin)
                .as_nanos()
                <= u128::from(last)
    }

    /// The pool's check before handing out a kept connection.
    pub fn hook(&self) -> Hook {
        let sightings = self.clone();
        Hook::sync_fn(move |_, metrics| {
            if sightings.stale(metrics.created) {
                Err(HookError::message(
                    "made before a read-only session was seen; dropped",
                ))
            } else {
                Ok(())
            }
        })
    }
}

/// SQLSTATE 25006, `read_only_sql_transaction`: what a standby, or a
/// read-only transaction, answers a write.
pub fn refused_write(error: &StoreError) -> bool {
    match error {
        StoreError::Unavailable(Unavailable::Postgres(PostgresCause::Driver(driver))) => {
            driver.code() == Some(&SqlState::READ_ONLY_SQL_TRANSACTION)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_made_before_a_sighting_are_stale_and_later_ones_are_not() {
        let sightings = Sightings::new();
        let before = Instant::now();
        assert!(!sightings.stale(before), "nothing seen yet");
        sightings.seen();
        let after = Instant::now();
        assert!(sightings.stale(before));
        assert!(!sightings.stale(after));
        sightings.seen();
        assert!(sightings.stale(after), "a later sighting");
    }

    #[test]
    fn only_a_refused_write_is_noted() {
        let sightings = Sightings::new();
        let other = StoreError::Unavailable(PostgresCause::NoAnswer(Default::default()).into());
        sightings.note(&other);
        assert!(!sightings.stale(Instant::now() - std::time::Duration::from_secs(1)));
    }
}
