//! Which connection a newcomer may take the place of when a listener is at
//! `max_connections`: the one that has waited longest with no request in
//! progress (no whole head yet, a TLS handshake not over, an HTTP/1
//! keep-alive or HTTP/2 connection between requests). Closing it cuts no
//! work, so clients that open connections and send nothing cannot keep
//! probes and requests out for `header_read_timeout` (docs/operating.md,
//! "Connections at the cap").
//!
//! The idle connections are kept in a `BTreeMap` by when each became idle
//! (a sequence number): marking one idle or busy, and taking the oldest,
//! are O(log n) under one lock held for that alone. A connection taken is
//! told through its token; its own task closes it and gives its slot back.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Told each connection a listener closes for a newcomer, with the
/// listener's name: counts it.
pub type OnEviction = Arc<dyn Fn(&'static str) + Send + Sync>;

#[derive(Default)]
pub(super) struct IdleConnections {
    state: Mutex<State>,
    /// Told when a connection becomes idle while a newcomer waits for one.
    became_idle: Notify,
}

#[derive(Default)]
struct State {
    next: u64,
    /// By when each became idle: the first is the one that waited longest.
    idle: BTreeMap<u64, CancellationToken>,
    /// A newcomer found none idle and waits to be told of the next.
    waiting: bool,
}

/// One connection's entry: idle from its accept until it has a request.
pub(super) struct Place {
    set: Arc<IdleConnections>,
    evicted: CancellationToken,
    /// Its key in the map while idle, else [`NOT_IDLE`]; only changed
    /// under the set's lock.
    idle_since: AtomicU64,
}

const NOT_IDLE: u64 = u64::MAX;

impl IdleConnections {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic under the lock leaves the map whole: each change is one call.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A connection just accepted: idle until it has a request.
    pub(super) fn open(self: &Arc<Self>) -> Arc<Place> {
        let place = Arc::new(Place {
            set: self.clone(),
            evicted: CancellationToken::new(),
            idle_since: AtomicU64::new(NOT_IDLE),
        });
        place.idle();
        place
    }

    /// Tells the connection idle longest to close, and takes it out of the
    /// map; `false` when none is idle. Until `waiting` is next seen false,
    /// the next connection to become idle wakes [`IdleConnections::idle_one`].
    pub(super) fn evict_oldest(&self) -> bool {
        let mut state = self.lock();
        match state.idle.pop_first() {
            Some((_, evicted)) => {
                evicted.cancel();
                true
            }
            None => {
                state.waiting = true;
                false
            }
        }
    }

    /// Resolves once a connection becomes idle after
    /// [`IdleConnections::evict_oldest`] found none: made before that call,
    /// so that one becoming idle in between is not missed.
    pub(super) fn idle_one(&self) -> Pin<Box<tokio::sync::futures::Notified<'_>>> {
        let mut notified = Box::pin(self.became_idle.notified());
        notified.as_mut().enable();
        notified
    }
}

impl Place {
    /// Closed for a newcomer: the connection ends, having no request.
    pub(super) async fn evicted(&self) {
        self.evicted.cancelled().await;
    }

    /// No request in progress (from now on, until [`Place::busy`]).
    pub(super) fn idle(&self) {
        self.track(|| true);
    }

    /// A request is in progress. `false` when the connection was closed for
    /// a newcomer first: it must not take the request.
    #[must_use]
    pub(super) fn busy(&self) -> bool {
        self.track(|| false)
    }

    /// Marks the connection idle or not, as `idle` says under the lock (so
    /// that of two changes racing, the one marked last reads the later
    /// state); `false` once it was evicted.
    pub(super) fn track(&self, idle: impl FnOnce() -> bool) -> bool {
        let mut state = self.set.lock();
        if self.evicted.is_cancelled() {
            return false;
        }
        let idle = idle();
        let since = self.idle_since.load(Ordering::Relaxed);
        if idle && since == NOT_IDLE {
            let at = state.next;
            state.next += 1;
            state.idle.insert(at, self.evicted.clone());
            self.idle_since.store(at, Ordering::Relaxed);
            if std::mem::take(&mut state.waiting) {
                self.set.became_idle.notify_waiters();
            }
        } else if !idle && since != NOT_IDLE {
            state.idle.remove(&since);
            self.idle_since.store(NOT_IDLE, Ordering::Relaxed);
        }
        true
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut state = self.set.lock();
        let since = self.idle_since.load(Ordering::Relaxed);
        if since != NOT_IDLE {
            state.idle.remove(&since);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_idle_longest_is_evicted_and_a_busy_one_never() {
        let set = Arc::new(IdleConnections::default());
        let first = set.open();
        let second = set.open();
        let third = set.open();
        assert!(first.busy());
        // `second` has been idle longest now.
        assert!(set.evict_oldest());
        assert!(second.evicted.is_cancelled());
        assert!(!second.busy(), "an evicted connection takes no request");
        first.idle();
        assert!(set.evict_oldest());
        assert!(third.evicted.is_cancelled());
        assert!(set.evict_oldest());
        assert!(first.evicted.is_cancelled());
        assert!(!set.evict_oldest(), "none left idle");
    }

    #[test]
    fn a_closed_connection_leaves_the_map() {
        let set = Arc::new(IdleConnections::default());
        let gone = set.open();
        let busy = set.open();
        assert!(busy.busy());
        drop(gone);
        assert!(!set.evict_oldest());
        assert!(!busy.evicted.is_cancelled());
    }

    #[tokio::test]
    async fn a_newcomer_waiting_is_told_of_the_next_idle_connection() {
        let set = Arc::new(IdleConnections::default());
        let busy = set.open();
        assert!(busy.busy());
        let told = set.idle_one();
        assert!(!set.evict_oldest());
        busy.idle();
        tokio::time::timeout(std::time::Duration::from_secs(1), told)
            .await
            .expect("told");
        assert!(set.evict_oldest());
    }
}
