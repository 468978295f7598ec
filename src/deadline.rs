//! One timer kept for many successive deadlines (a connection's requests),
//! re-registered only when it would fire too late.
//!
//! A fresh `tokio::time::timeout` per request registers a timer entry and
//! removes it again (a lock on the timer wheel each way). Each deadline here
//! is later than the one before, so the timer is left where it is and, when
//! it fires before the current deadline, moved on to it: re-registered about
//! once per timeout's length on a busy connection, not once per request. The
//! same lazy timer nginx keeps (bench/README (bk)).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// The work did not finish before its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedOut;

/// A timer reused across deadlines; unarmed until the first one.
#[derive(Debug)]
pub struct Deadline {
    sleep: Pin<Box<Sleep>>,
}

impl Default for Deadline {
    fn default() -> Self {
        Self::new()
    }
}

impl Deadline {
    pub fn new() -> Self {
        // Far enough never to fire first; no timer entry is registered
        // until it is polled.
        let never = Instant::now() + Duration::from_secs(86_400 * 365);
        Self {
            sleep: Box::pin(tokio::time::sleep_until(never)),
        }
    }

    /// Completes once `due` has passed.
    pub async fn reached(&mut self, due: Instant) {
        if self.sleep.deadline() > due {
            self.sleep.as_mut().reset(due);
        }
        loop {
            self.sleep.as_mut().await;
            if Instant::now() >= due {
                return;
            }
            // Set for an earlier deadline, and fired before this one.
            self.sleep.as_mut().reset(due);
        }
    }

    /// Runs `work` until `due`. Pinned by the caller: the work (an upstream
    /// exchange, a kilobyte or more) stays where it was made instead of being
    /// copied into this future and again into a pinned place (bench/README (bo)).
    pub async fn run<F: Future>(
        &mut self,
        due: Instant,
        work: Pin<&mut F>,
    ) -> Result<F::Output, TimedOut> {
        tokio::select! {
            biased;
            output = work => Ok(output),
            () = self.reached(due) => Err(TimedOut),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::pin;

    #[tokio::test(start_paused = true)]
    async fn each_deadline_is_kept_though_the_timer_is_not_moved() {
        let mut deadline = Deadline::new();
        let start = Instant::now();
        let done = deadline
            .run(start + Duration::from_secs(10), pin!(async { 1 }))
            .await;
        assert_eq!(done, Ok(1));
        // A later deadline: the timer, still at the first, fires early and
        // is moved on; the work is cut off at its own deadline, not before.
        tokio::time::advance(Duration::from_secs(5)).await;
        let due = Instant::now() + Duration::from_secs(10);
        let cut = deadline.run(due, pin!(std::future::pending::<()>())).await;
        assert_eq!(cut, Err(TimedOut));
        assert_eq!(Instant::now(), due);
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_deadline_moves_the_timer_back() {
        let mut deadline = Deadline::new();
        let long = Instant::now() + Duration::from_secs(60);
        assert_eq!(deadline.run(long, pin!(async {})).await, Ok(()));
        let short = Instant::now() + Duration::from_secs(1);
        let cut = deadline
            .run(short, pin!(std::future::pending::<()>()))
            .await;
        assert_eq!(cut, Err(TimedOut));
        assert_eq!(Instant::now(), short);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_long_past_when_polled_ends_the_work_at_once() {
        let mut deadline = Deadline::new();
        let due = Instant::now() + Duration::from_secs(1);
        tokio::time::advance(Duration::from_secs(2)).await;
        let cut = deadline.run(due, pin!(std::future::pending::<()>())).await;
        assert_eq!(cut, Err(TimedOut));
    }
}
