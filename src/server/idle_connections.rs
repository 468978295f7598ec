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
//! told through its flag and waker; its own task closes it and gives its
//! slot back. An HTTP/1 connection goes idle and busy around every request,
//! so both cost no lock but the set's and no allocation (a flag and a waker,
//! not a `CancellationToken`, whose clone and whose wait each take a lock).

use std::collections::BTreeMap;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;

use futures_util::task::AtomicWaker;
use tokio::sync::Notify;

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
    idle: BTreeMap<u64, Arc<Eviction>>,
    /// A newcomer found none idle and waits to be told of the next.
    waiting: bool,
}

/// Set once a connection is closed for a newcomer; wakes the connection's
/// task, the only one that waits for it.
#[derive(Default)]
struct Eviction {
    told: AtomicBool,
    task: AtomicWaker,
}

impl Eviction {
    fn tell(&self) {
        self.told.store(true, Ordering::Release);
        self.task.wake();
    }

    fn told(&self) -> bool {
        self.told.load(Ordering::Acquire)
    }
}

/// One connection's entry: idle from its accept until it has a request.
pub(super) struct Place {
    set: Arc<IdleConnections>,
    eviction: Arc<Eviction>,
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
            eviction: Arc::default(),
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
                evicted.tell();
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
    /// Closed for a newcomer: the connection ends, having no request. Only
    /// the connection's own task waits for it (one waker is kept).
    pub(super) async fn evicted(&self) {
        poll_fn(|cx| {
            if self.eviction.told() {
                return Poll::Ready(());
            }
            self.eviction.task.register(cx.waker());
            // Told between the look and the register: its wake may have
            // found no waker.
            if self.eviction.told() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }

    /// No request in progress (from now on, until [`Place::busy`]).
    pub(super) fn idle(&self) {
        self.track(|| true);
    }

    /// A request is in progress. `false` when the connection was closed for
    /// a newcomer first: it must not take the request. For a connection
    /// marked by one task alone (HTTP/1): one not in the map (its head was
    /// buffered before it went idle) cannot be evicted meanwhile, and needs
    /// no lock.
    #[must_use]
    pub(super) fn busy(&self) -> bool {
        if self.idle_since.load(Ordering::Relaxed) == NOT_IDLE {
            return !self.eviction.told();
        }
        self.track(|| false)
    }

    /// Marks the connection idle or not, as `idle` says under the lock (so
    /// that of two changes racing, the one marked last reads the later
    /// state); `false` once it was evicted.
    pub(super) fn track(&self, idle: impl FnOnce() -> bool) -> bool {
        let mut state = self.set.lock();
        if self.eviction.told() {
            return false;
        }
        let idle = idle();
        let since = self.idle_since.load(Ordering::Relaxed);
        if idle && since == NOT_IDLE {
            let at = state.next;
            state.next += 1;
            state.idle.insert(at, self.eviction.clone());
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
        // Dropped, it is marked by no one else: not idle is not in the map.
        if *self.idle_since.get_mut() == NOT_IDLE {
            return;
        }
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

    fn evicted(place: &Place) -> bool {
        place.eviction.told()
    }

    #[test]
    fn the_connection_idle_longest_is_evicted_and_a_busy_one_never() {
        let set = Arc::new(IdleConnections::default());
        let first = set.open();
        let second = set.open();
        let third = set.open();
        assert!(first.busy());
        // `second` has been idle longest now.
        assert!(set.evict_oldest());
        assert!(evicted(&second));
        assert!(!second.busy(), "an evicted connection takes no request");
        first.idle();
        assert!(set.evict_oldest());
        assert!(evicted(&third));
        assert!(set.evict_oldest());
        assert!(evicted(&first));
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
        assert!(!evicted(&busy));
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

    #[tokio::test]
    async fn a_connection_waiting_is_woken_when_evicted() {
        let set = Arc::new(IdleConnections::default());
        let place = set.open();
        let waiting = tokio::spawn({
            let place = place.clone();
            async move { place.evicted().await }
        });
        tokio::task::yield_now().await;
        assert!(set.evict_oldest());
        tokio::time::timeout(std::time::Duration::from_secs(1), waiting)
            .await
            .expect("woken")
            .expect("joined");
    }
}
