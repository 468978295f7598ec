//! One timer kept for many successive deadlines (a connection's requests),
//! re-registered only when it would fire too late.
//!
//! A fresh `tokio::time::timeout` per request registers a timer entry and
//! removes it again (a lock on the timer wheel each way). Each deadline here
//! is later than the one before, so the timer is left where it is and, when
//! it fires before the current deadline, moved on to it: re-registered about
//! once per timeout's length on a busy connection, not once per request. The
//! same lazy timer nginx keeps (docs/adr/0007-hot-path-costs.md).

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
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

    /// Completes once `due` has passed (for `run`; a client connection
    /// waits on a `TaskDeadline`).
    async fn reached(&mut self, due: Instant) {
        self.move_back_to(due);
        poll_fn(|cx| self.poll_reached(cx, due, None)).await;
    }

    fn move_back_to(&mut self, due: Instant) -> bool {
        let later = self.sleep.deadline() > due;
        if later {
            self.sleep.as_mut().reset(due);
        }
        later
    }

    /// With `armed_for`, the waker the timer was last polled with (and will
    /// wake when it fires): polled again with it before then, the timer is
    /// not asked, as it would only register the same waker again.
    fn poll_reached(
        &mut self,
        cx: &mut Context<'_>,
        due: Instant,
        mut armed_for: Option<&mut Option<Waker>>,
    ) -> Poll<()> {
        loop {
            let armed = armed_for
                .as_deref()
                .and_then(Option::as_ref)
                .is_some_and(|waker| waker.will_wake(cx.waker()));
            if armed && !self.sleep.is_elapsed() {
                return Poll::Pending;
            }
            if self.sleep.as_mut().poll(cx).is_pending() {
                if let Some(slot) = armed_for.as_deref_mut().filter(|_| !armed) {
                    *slot = Some(cx.waker().clone());
                }
                return Poll::Pending;
            }
            if Instant::now() >= due {
                return Poll::Ready(());
            }
            // Set for an earlier deadline, and fired before this one.
            self.sleep.as_mut().reset(due);
            if let Some(slot) = armed_for.as_deref_mut() {
                // Moved in the timer wheel: polled afresh before trusted again.
                *slot = None;
            }
        }
    }

    /// Runs `work` until `due`. Pinned by the caller: the work (an upstream
    /// exchange, a kilobyte or more) stays where it was made instead of being
    /// copied into this future and again into a pinned place (docs/adr/0007-hot-path-costs.md).
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

/// A `Deadline` only one task ever awaits (a client connection's, for its
/// next head), which remembers the waker its timer holds: every wait for a
/// head polls the timer once, and all it would do is take the same waker
/// again (docs/adr/0007-hot-path-costs.md). An upstream connection's `Deadline` goes from
/// task to task, and its answer body carries it: it stays the plain one.
#[derive(Debug, Default)]
pub struct TaskDeadline {
    deadline: Deadline,
    armed_for: Option<Waker>,
}

impl TaskDeadline {
    /// Completes once `due` has passed.
    pub async fn reached(&mut self, due: Instant) {
        if self.deadline.move_back_to(due) {
            self.armed_for = None;
        }
        poll_fn(|cx| {
            self.deadline
                .poll_reached(cx, due, Some(&mut self.armed_for))
        })
        .await;
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

    #[tokio::test(start_paused = true)]
    async fn work_that_wakes_often_is_still_cut_at_its_deadline() {
        // Every wake-up of the work polls the deadline again, with the same
        // waker: the timer is not asked again, and still ends the work.
        let mut deadline = TaskDeadline::default();
        let due = Instant::now() + Duration::from_millis(1000);
        let ticks = std::cell::Cell::new(0u32);
        let work = async {
            loop {
                tokio::time::sleep(Duration::from_millis(70)).await;
                ticks.set(ticks.get() + 1);
            }
        };
        tokio::select! {
            biased;
            () = work => unreachable!("the work never ends"),
            () = deadline.reached(due) => {}
        }
        assert_eq!(Instant::now(), due);
        assert_eq!(ticks.get(), 14);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_handed_to_another_task_wakes_that_task() {
        // An upstream connection's timer goes from request to request, and
        // so from one client's task to another's.
        let mut deadline = Deadline::new();
        let first = Instant::now() + Duration::from_secs(60);
        let yielded = deadline.run(first, pin!(tokio::task::yield_now())).await;
        assert_eq!(yielded, Ok(()));
        let due = Instant::now() + Duration::from_secs(1);
        let other =
            tokio::spawn(
                async move { deadline.run(due, pin!(std::future::pending::<()>())).await },
            );
        assert_eq!(other.await.expect("task"), Err(TimedOut));
        assert_eq!(Instant::now(), due);
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_deadline_moved_earlier_or_to_another_task_still_fires() {
        let mut deadline = TaskDeadline::default();
        let long = Instant::now() + Duration::from_secs(60);
        tokio::select! {
            biased;
            () = tokio::task::yield_now() => {}
            () = deadline.reached(long) => unreachable!("not yet"),
        }
        // Earlier than the timer: moved back, and polled afresh.
        let short = Instant::now() + Duration::from_secs(1);
        deadline.reached(short).await;
        assert_eq!(Instant::now(), short);
        let due = Instant::now() + Duration::from_secs(1);
        let other = tokio::spawn(async move { deadline.reached(due).await });
        other.await.expect("task");
        assert_eq!(Instant::now(), due);
    }
}
