//! The store's time. What it writes to the file (leases, completions,
//! expiries) is wall-clock time, which steps: NTP corrects an offset at once,
//! a paused VM resumes hours later. A lease this process holds is also timed
//! by the monotonic clock, which no step moves (`live_leases`), so that a
//! forward step cannot end the lease of a request still running here.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// A wall clock of its own (tests of expiry and retention).
pub type WallClock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

#[derive(Clone)]
pub struct Clock {
    wall: WallClock,
    /// Whether leases held here are also timed by the monotonic clock.
    steady: bool,
}

impl Clock {
    /// The system's clocks: what `serve` and every command run on.
    pub fn system() -> Clock {
        Clock {
            wall: Arc::new(SystemTime::now),
            steady: true,
        }
    }

    /// `wall` as the only time (tests of expiry and retention): a lease ends
    /// when `wall` says so, whether or not that time has passed.
    pub fn manual(wall: WallClock) -> Clock {
        Clock {
            wall,
            steady: false,
        }
    }

    /// `wall` as the wall clock beside the real monotonic clock: a wall
    /// clock that steps.
    #[cfg(test)]
    pub(super) fn stepping(wall: WallClock) -> Clock {
        Clock { wall, steady: true }
    }

    pub fn now(&self) -> SystemTime {
        (self.wall)()
    }

    /// The monotonic clock's now, when leases are timed by it.
    pub(super) fn steady_now(&self) -> Option<Instant> {
        self.steady.then(Instant::now)
    }
}
