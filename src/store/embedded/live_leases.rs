//! The leases this process holds, each with its end by the monotonic clock.
//!
//! A lease's end on file is wall-clock time, and a record whose lease has
//! ended there is taken over by the next request with its fingerprint (its
//! holder died). Only
//! one gateway serves a file (`serve_lock`), so a lease this process took
//! and has not yet completed or released is a request still running here,
//! whatever the wall clock says: a forward step of it (an NTP correction, a
//! VM resumed) must not let a retry run that request a second time, nor the
//! sweeper delete its record. Such a lease counts as held until its end by
//! the monotonic clock. A holder that never comes back (its task gone)
//! lets go at that end, as a dead process's lease does.
//!
//! Changes are made per batch and kept only when it commits: a rolled-back
//! reservation holds nothing, and a rolled-back completion still holds.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Entries past their end are dropped when the map has doubled since the
/// last time, so held ends stay bounded by the leases taken within one lease
/// time, not by the process's life.
const PRUNE_FROM: usize = 1024;

pub(super) struct LiveLeases {
    /// Token -> the lease's end by the monotonic clock.
    held: HashMap<i64, Instant>,
    /// The current batch's changes.
    batch: Vec<(i64, Option<Instant>)>,
    prune_at: usize,
}

impl Default for LiveLeases {
    fn default() -> Self {
        LiveLeases {
            held: HashMap::new(),
            batch: Vec::new(),
            prune_at: PRUNE_FROM,
        }
    }
}

impl LiveLeases {
    /// `token`'s lease, taken in the current batch, ends at `until`.
    pub(super) fn hold(&mut self, token: i64, until: Instant) {
        self.batch.push((token, Some(until)));
    }

    /// `token`'s lease ends with the current batch (completed, released, or
    /// no longer the record's).
    pub(super) fn end(&mut self, token: i64) {
        self.batch.push((token, None));
    }

    /// How long `token`'s lease is still held here at `now`, if it is.
    pub(super) fn left(&self, token: i64, now: Instant) -> Option<Duration> {
        let until = self.held.get(&token)?;
        let left = until.saturating_duration_since(now);
        (!left.is_zero()).then_some(left)
    }

    /// Keeps the batch's changes: it committed.
    pub(super) fn commit(&mut self, now: Instant) {
        for (token, until) in self.batch.drain(..) {
            match until {
                Some(until) => self.held.insert(token, until),
                None => self.held.remove(&token),
            };
        }
        if self.held.len() >= self.prune_at {
            self.held.retain(|_, until| *until > now);
            self.prune_at = (self.held.len() * 2).max(PRUNE_FROM);
        }
    }

    /// Drops the batch's changes: it rolled back.
    pub(super) fn discard(&mut self) {
        self.batch.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_held_once_its_batch_commits_and_until_its_end_or_its_completion() {
        let mut live = LiveLeases::default();
        let now = Instant::now();
        live.hold(1, now + Duration::from_secs(30));
        assert_eq!(live.left(1, now), None, "not before the commit");
        live.commit(now);
        assert_eq!(live.left(1, now), Some(Duration::from_secs(30)));
        assert_eq!(live.left(1, now + Duration::from_secs(30)), None);

        live.end(1);
        live.discard();
        assert!(live.left(1, now).is_some(), "a rolled-back completion");
        live.end(1);
        live.commit(now);
        assert_eq!(live.left(1, now), None);

        live.hold(2, now + Duration::from_secs(30));
        live.discard();
        live.commit(now);
        assert_eq!(live.left(2, now), None, "a rolled-back reservation");
    }

    #[test]
    fn ended_leases_never_completed_are_pruned() {
        let mut live = LiveLeases::default();
        let now = Instant::now();
        for token in 0..(PRUNE_FROM as i64 * 4) {
            live.hold(token, now + Duration::from_millis(1));
            live.commit(now + Duration::from_secs(1));
        }
        assert!(live.held.len() < PRUNE_FROM, "{} held", live.held.len());
    }
}
