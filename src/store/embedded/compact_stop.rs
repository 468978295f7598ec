//! Stopping `idemgate compact` midway: another thread (the command's
//! signal handling) asks, and the rewrite under way is interrupted. It is
//! one transaction, so it is rolled back and the file stays as it was.

use std::sync::{Mutex, PoisonError};

/// Shared between the compaction and whoever may stop it.
#[derive(Default)]
pub struct CompactStop(Mutex<State>);

#[derive(Default)]
struct State {
    requested: bool,
    /// The rewrite's connection while the rewrite runs.
    running: Option<rusqlite::InterruptHandle>,
}

impl CompactStop {
    /// Stops the rewrite if it runs, and keeps one from starting.
    /// Once the rewrite has ended it has no effect: the compaction ends as
    /// it would have.
    pub fn stop(&self) {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        state.requested = true;
        if let Some(running) = &state.running {
            running.interrupt();
        }
    }

    /// The rewrite on `connection` starts: `false` when a stop came first
    /// (it must not start).
    pub(super) fn arm(&self, connection: &rusqlite::Connection) -> bool {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if state.requested {
            return false;
        }
        state.running = Some(connection.get_interrupt_handle());
        true
    }

    /// The rewrite has ended; whether a stop was asked meanwhile.
    pub(super) fn disarm(&self) -> bool {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        state.running = None;
        state.requested
    }
}
