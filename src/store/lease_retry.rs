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

    /// The pause before the next try, or `None` once `lease` has run out.
    pub fn pause_within(&self, lease: &Lease) -> Option<Duration> {
        self.pause_before(lease.expires_here)
    }

    /// `pause_within` for a lease known only by its end. A pause that would
    /// outlast the lease is cut short, so the last try is made at its end:
    /// the store coming back within that pause still takes the write.
    pub fn pause_before(&self, end: SystemTime) -> Option<Duration> {
        let left = end.duration_since(SystemTime::now()).unwrap_or_default();
        (!left.is_zero()).then_some(self.pause.min(left))
    }

    /// Waits `pause` (as `pause_within` gave it), and doubles the next one
    /// (up to the bound).
    pub async fn sleep(&mut self, pause: Duration) {
        tokio::time::sleep(pause).await;
        self.pause = (self.pause * 2).min(self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_pause_ends_with_the_lease() {
        let retry = LeaseRetry::new(Duration::from_millis(500), Duration::from_millis(500));
        let end = SystemTime::now() + Duration::from_millis(200);
        let pause = retry.pause_before(end).expect("the lease still holds");
        assert!(pause <= Duration::from_millis(200), "{pause:?}");
        assert!(pause > Duration::from_millis(100), "{pause:?}");
        let far = SystemTime::now() + Duration::from_secs(10);
        assert_eq!(retry.pause_before(far), Some(Duration::from_millis(500)));
        assert_eq!(
            retry.pause_before(SystemTime::now() - Duration::from_millis(1)),
            None
        );
    }
}
