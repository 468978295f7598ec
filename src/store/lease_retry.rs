//! A write the store must not give up on while its lease holds (a
//! completion: the request has run; a release: the key should be free),
//! tried again after a pause that doubles up to a bound, and never past the
//! lease: after it, the key is free to a takeover anyway.

use std::time::{Duration, SystemTime};

use super::Lease;

pub struct LeaseRetry {
    pause: Duration,
    max: Duration,
}

impl LeaseRetry {
    pub fn new(first: Duration, max: Duration) -> Self {
        Self { pause: first, max }
    }

    /// The pause before the next try, or `None` when `lease` would run out
    /// during it.
    pub fn pause_within(&self, lease: &Lease) -> Option<Duration> {
        self.pause_before(lease.expires_at)
    }

    /// `pause_within` for a lease known only by its end.
    pub fn pause_before(&self, end: SystemTime) -> Option<Duration> {
        let left = end.duration_since(SystemTime::now()).unwrap_or_default();
        (left > self.pause).then_some(self.pause)
    }

    /// Waits the pause, and doubles the next one (up to the bound).
    pub async fn sleep(&mut self) {
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(self.max);
    }
}
