//! A server with no room for another connection (SQLSTATE 53300,
//! `too_many_connections`: its `max_connections` reached, or the role's
//! `CONNECTION LIMIT`). The pool makes a connection whenever none is free,
//! so under load every request asked the server for one more, was refused
//! and failed, while the connections the pool had would have served it a
//! moment later; and every refusal cost the server a process forked.
//!
//! After a refusal the pool makes no connection for a pause ([`FIRST`],
//! doubled while refusals go on, up to [`LONGEST`]): operations share the
//! connections it has (`lent` waits for one to come back), and only when
//! it has none do they fail at once, with the refusal. When the pause is
//! over, one operation tries to connect; the others wait for its outcome
//! (docs/postgres.md, "A server with no room for another connection").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use deadpool_postgres::PoolError;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio_postgres::error::SqlState;

/// The pause after a first refusal.
pub const FIRST: Duration = Duration::from_millis(250);
/// The longest pause, while refusals go on.
pub const LONGEST: Duration = Duration::from_secs(4);

/// What an operation may do about connecting, now.
pub enum Gate {
    /// Get a connection as usual, made if none is free.
    Open,
    /// Use a free connection, or wait for one; connect only when `probe`
    /// (the pause is over, and this operation tries for all of them).
    /// `refusal` is the answer when there is no connection at all.
    Shared {
        refusal: Arc<PoolError>,
        probe: bool,
    },
}

/// Refusals seen; shared by the pool's operations.
#[derive(Clone, Default)]
pub struct Crowded(Arc<Shared>);

#[derive(Default)]
struct Shared {
    /// Whether connecting is paused: read by every operation, and by every
    /// connection that comes back, so that those of a server with room
    /// take no lock.
    paused: AtomicBool,
    state: Mutex<State>,
    /// Told, while connecting is paused, when a connection goes back to
    /// the pool (or frees its slot), and when the pause ends.
    returned: Notify,
}

#[derive(Default)]
struct State {
    /// The last refusal, while connecting is paused.
    refusal: Option<Arc<PoolError>>,
    /// When the pause ends (or the probe's outcome is due).
    until: Option<Instant>,
    pause: Duration,
    last_refused: Option<Instant>,
}

impl Crowded {
    pub fn gate(&self) -> Gate {
        if !self.paused() {
            return Gate::Open;
        }
        let now = Instant::now();
        let mut state = self.state();
        let (Some(refusal), Some(until)) = (state.refusal.clone(), state.until) else {
            return Gate::Open;
        };
        let probe = now >= until;
        if probe {
            // The others wait for this one's outcome, for one more pause.
            state.until = Some(now + state.pause);
        }
        Gate::Shared { refusal, probe }
    }

    /// A connection was refused for want of room: connecting pauses.
    pub fn refused(&self, err: PoolError) -> Arc<PoolError> {
        let now = Instant::now();
        let refusal = Arc::new(err);
        let mut state = self.state();
        let started = state.refusal.is_none();
        // Refusals that go on (the last one within two pauses) double it.
        let going_on = state
            .last_refused
            .is_some_and(|last| now.saturating_duration_since(last) <= state.pause * 2);
        state.pause = if going_on {
            (state.pause * 2).min(LONGEST)
        } else {
            FIRST
        };
        state.last_refused = Some(now);
        state.until = Some(now + state.pause);
        state.refusal = Some(refusal.clone());
        self.0.paused.store(true, Ordering::SeqCst);
        let pause = state.pause;
        drop(state);
        if started {
            tracing::warn!(
                error = %super::cause::PostgresCause::Pool(refusal.clone()),
                pause_ms = pause.as_millis() as u64,
                "postgres has no room for another connection; the pool shares the connections it has and connects again after a pause"
            );
        }
        refusal
    }

    /// A connection was made after a pause: connecting as usual again.
    pub fn made(&self) {
        let mut state = self.state();
        if state.refusal.take().is_some() {
            state.until = None;
            self.0.paused.store(false, Ordering::SeqCst);
            drop(state);
            // Those waiting for a connection to come back connect instead.
            self.0.returned.notify_waiters();
            tracing::info!("postgres took a new connection again; the pool grows as needed");
        }
    }
}

impl Crowded {
    /// Whether connecting is paused. SeqCst, as the flag and `returned`'s
    /// count of notifications together tell a waiter that it missed no word
    /// (`lent`).
    pub fn paused(&self) -> bool {
        self.0.paused.load(Ordering::SeqCst)
    }

    /// A wait for a connection to come back, or for the pause to end; it
    /// hears of those from the moment it is made.
    pub fn returned(&self) -> Notified<'_> {
        self.0.returned.notified()
    }

    /// A connection went back to the pool, or freed its slot: the waiters
    /// are told, only while connecting is paused (there are none else), so
    /// that a connection coming back to a pool with room takes no lock.
    pub fn came_back(&self) {
        if self.paused() {
            self.0.returned.notify_waiters();
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// SQLSTATE 53300: the server (or the role) is at its connection limit.
pub fn no_room(err: &PoolError) -> bool {
    matches!(err, PoolError::Backend(e) if e.code() == Some(&SqlState::TOO_MANY_CONNECTIONS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use deadpool_postgres::TimeoutType;

    fn refusal() -> PoolError {
        PoolError::Timeout(TimeoutType::Create)
    }

    #[test]
    fn a_refusal_pauses_connecting_and_one_operation_probes_after() {
        let crowded = Crowded::default();
        assert!(matches!(crowded.gate(), Gate::Open));
        crowded.refused(refusal());
        assert!(matches!(crowded.gate(), Gate::Shared { probe: false, .. }));
        std::thread::sleep(FIRST);
        assert!(matches!(crowded.gate(), Gate::Shared { probe: true, .. }));
        assert!(
            matches!(crowded.gate(), Gate::Shared { probe: false, .. }),
            "one probe at a time"
        );
        crowded.made();
        assert!(matches!(crowded.gate(), Gate::Open));
    }

    /// While paused, a waiter hears of a connection that came back, and of
    /// the pause ending, whenever it began to wait before them.
    #[tokio::test]
    async fn a_waiter_hears_of_a_returned_connection_and_of_the_pause_ending() {
        let crowded = Crowded::default();
        crowded.refused(refusal());
        let returned = crowded.returned();
        crowded.came_back();
        let heard = tokio::time::timeout(Duration::from_secs(1), returned).await;
        assert!(heard.is_ok(), "a connection came back");
        let ended = crowded.returned();
        crowded.made();
        let heard = tokio::time::timeout(Duration::from_secs(1), ended).await;
        assert!(heard.is_ok(), "the pause ended");
        assert!(!crowded.paused());
    }

    #[test]
    fn refusals_that_go_on_double_the_pause_up_to_the_longest() {
        let crowded = Crowded::default();
        for _ in 0..10 {
            crowded.refused(refusal());
        }
        assert_eq!(crowded.state().pause, LONGEST);
    }
}
