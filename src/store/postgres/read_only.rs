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
//! A sighting marks connections at most once per [`REMARK`]: while the
//! server stays read-only, every keyed request is refused, and marking on
//! each would make a new connection for each (hundreds a second, each a
//! server process forked), where this makes each of the pool's at most
//! once per [`REMARK`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use deadpool_postgres::{Hook, HookError};
use tokio_postgres::error::SqlState;

use super::cause::PostgresCause;
use crate::store::{StoreError, Unavailable};

/// A sighting this soon after the last one that counted marks nothing
/// more: connections made since are not dropped before the next one.
pub const REMARK: Duration = Duration::from_secs(1);

/// When a read-only session was last seen; shared by the store and its
/// pool's hook.
#[derive(Clone)]
pub struct Sightings {
    inner: Arc<Inner>,
}

struct Inner {
    /// The instant the nanoseconds below count from.
    origin: Instant,
    /// Nanoseconds after `origin` of the last sighting that counted; 0:
    /// none yet.
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
        self.seen_at(Instant::now());
    }

    /// A session was found read-only at `at`: connections made before it
    /// are marked, unless the last marking was less than [`REMARK`] ago.
    fn seen_at(&self, at: Instant) {
        let nanos = at.saturating_duration_since(self.inner.origin).as_nanos();
        let nanos = u64::try_from(nanos).unwrap_or(u64::MAX).max(1);
        let gap = u64::try_from(REMARK.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .inner
            .last
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                (last == 0 || nanos.saturating_sub(last) >= gap).then_some(nanos)
            });
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
        sightings.seen_at(after + REMARK);
        assert!(sightings.stale(after), "a later sighting");
    }

    /// While the server stays read-only every write is refused: the
    /// connections made after one marking are kept until the next, a
    /// second on, rather than each refusal making a new one.
    #[test]
    fn sightings_mark_at_most_once_per_remark() {
        let sightings = Sightings::new();
        let first = Instant::now();
        sightings.seen_at(first);
        let made = first + Duration::from_millis(10);
        for after in [20, 500, 990] {
            sightings.seen_at(first + Duration::from_millis(after));
            assert!(!sightings.stale(made), "{after} ms after the marking");
        }
        sightings.seen_at(first + REMARK + Duration::from_millis(1));
        assert!(sightings.stale(made));
        assert!(!sightings.stale(first + REMARK + Duration::from_millis(2)));
    }

    #[test]
    fn only_a_refused_write_is_noted() {
        let sightings = Sightings::new();
        let other = StoreError::Unavailable(PostgresCause::NoAnswer(Default::default()).into());
        sightings.note(&other);
        assert!(!sightings.stale(Instant::now() - std::time::Duration::from_secs(1)));
    }
}
