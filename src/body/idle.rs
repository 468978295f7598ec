//! A body whose sender may not go quiet: when no frame comes for `limit`,
//! the body fails with [`Stalled`]. What bounds a stalled upstream's answer
//! body and a stalled client's request body, neither of which a deadline on
//! the head covers. A client's body read whole may also be given a limit for
//! all of it ([`IdleLimit::within`], failing with [`Unfinished`]): a client
//! that trickles a byte now and then is never quiet for `limit`, and would
//! hold what it sent, and its connection, for as long as it likes.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::BoxError;

/// The error of a body whose sender sent nothing for the limit.
#[derive(Debug, thiserror::Error)]
#[error("nothing received for {0:?}")]
pub struct Stalled(pub Duration);

/// The error of a body that was not all in within its limit for the whole,
/// however steadily it came.
#[derive(Debug, thiserror::Error)]
#[error("not complete within {0:?}")]
pub struct Unfinished(pub Duration);

/// Whether `error` (a body's, boxed) is a [`Stalled`].
pub fn is_stalled(error: &BoxError) -> bool {
    error.is::<Stalled>()
}

/// Why a client's body read whole was given up on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowBody {
    /// Nothing came for this long.
    Stalled(Duration),
    /// Not all of it came within this long.
    Unfinished(Duration),
}

impl SlowBody {
    /// The cause, when `error` (a body's, boxed) is one of [`IdleLimit`]'s.
    pub fn of(error: &BoxError) -> Option<Self> {
        if let Some(Stalled(limit)) = error.downcast_ref() {
            Some(Self::Stalled(*limit))
        } else if let Some(Unfinished(limit)) = error.downcast_ref() {
            Some(Self::Unfinished(*limit))
        } else {
            None
        }
    }
}

/// How long a client's body read whole may take: `idle` for each next
/// piece, `whole` for all of it.
#[derive(Debug, Clone, Copy)]
pub struct ReadLimits {
    pub idle: Duration,
    pub whole: Duration,
}

pub struct IdleLimit<B> {
    inner: B,
    limit: Duration,
    /// Armed at the first wait only: a body whose bytes are already there
    /// (the usual small answer) never registers a timer.
    timer: Option<Pin<Box<Sleep>>>,
    /// A frame came since the timer was last set.
    moved: bool,
    stalled: bool,
    /// The limit for the whole body, and its deadline once the first wait
    /// set it (a body already there never reads the clock).
    whole: Option<Duration>,
    whole_due: Option<Instant>,
}

impl<B> IdleLimit<B> {
    pub fn new(inner: B, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            timer: None,
            moved: false,
            stalled: false,
            whole: None,
            whole_due: None,
        }
    }

    /// A client's body read whole, bounded by `limits`. Its whole is timed
    /// from the first wait: up to then its bytes were already there.
    pub fn within(inner: B, limits: ReadLimits) -> Self {
        Self {
            whole: Some(limits.whole),
            ..Self::new(inner, limits.idle)
        }
    }

    /// When the next piece is due: `limit` from now, and never past the
    /// whole body's deadline.
    fn next_due(&mut self) -> Instant {
        let now = Instant::now();
        if let Some(whole) = self.whole {
            let whole_due = *self.whole_due.get_or_insert(now + whole);
            return (now + self.limit).min(whole_due);
        }
        now + self.limit
    }

    /// The error for a wait that ran out at `due`.
    fn ran_out(&self, due: Instant) -> BoxError {
        match (self.whole, self.whole_due) {
            (Some(whole), Some(whole_due)) if due >= whole_due => Unfinished(whole).into(),
            _ => Stalled(self.limit).into(),
        }
    }
}

impl<B> HttpBody for IdleLimit<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.stalled {
            return Poll::Ready(None);
        }
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.moved = true;
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        // The clock is read only when the deadline moves: at the first wait,
        // and at the first wait after a frame.
        let moved = std::mem::take(&mut this.moved);
        let due = (this.timer.is_none() || moved).then(|| this.next_due());
        let timer = match (&mut this.timer, due) {
            (Some(timer), Some(due)) => {
                timer.as_mut().reset(due);
                timer
            }
            (Some(timer), None) => timer,
            (timer @ None, due) => timer.insert(Box::pin(tokio::time::sleep_until(
                due.unwrap_or_else(Instant::now),
            ))),
        };
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                let due = timer.deadline();
                this.stalled = true;
                Poll::Ready(Some(Err(this.ran_out(due))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.stalled || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    fn slow_body(
        gaps: &'static [u64],
    ) -> impl HttpBody<Data = Bytes, Error = std::io::Error> + Unpin {
        let stream = futures_util::stream::unfold(0usize, move |at| async move {
            let gap = *gaps.get(at)?;
            tokio::time::sleep(Duration::from_millis(gap)).await;
            Some((Ok(Frame::data(Bytes::from_static(b"x"))), at + 1))
        });
        StreamBody::new(Box::pin(stream))
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_keeps_coming_is_not_cut_however_long_it_takes() {
        // Five gaps just under the limit: 2.4 s in all against a 0.5 s limit.
        let body = IdleLimit::new(
            slow_body(&[490, 490, 490, 490, 490]),
            Duration::from_millis(500),
        );
        let bytes = body.collect().await.expect("not stalled").to_bytes();
        assert_eq!(&bytes[..], b"xxxxx");
    }

    #[tokio::test(start_paused = true)]
    async fn a_gap_longer_than_the_limit_fails_the_body() {
        let body = IdleLimit::new(slow_body(&[10, 10, 900, 10]), Duration::from_millis(500));
        let error = body.collect().await.expect_err("stalled");
        assert!(is_stalled(&error), "{error}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_never_quiet_for_the_limit_is_cut_at_the_limit_for_the_whole() {
        let limits = ReadLimits {
            idle: Duration::from_millis(500),
            whole: Duration::from_millis(1200),
        };
        let started = Instant::now();
        let body = IdleLimit::within(slow_body(&[400, 400, 400, 400, 400]), limits);
        let error = body.collect().await.expect_err("unfinished");
        assert_eq!(
            SlowBody::of(&error),
            Some(SlowBody::Unfinished(limits.whole)),
            "{error}"
        );
        assert!(!is_stalled(&error));
        assert_eq!(started.elapsed(), limits.whole);
        // All in within the whole: read as it came.
        let body = IdleLimit::within(slow_body(&[400, 400]), limits);
        assert_eq!(
            &body.collect().await.expect("in time").to_bytes()[..],
            b"xx"
        );
        // Quiet for `idle` before the whole is up: stalled, as without it.
        let body = IdleLimit::within(slow_body(&[100, 700]), limits);
        let error = body.collect().await.expect_err("stalled");
        assert_eq!(
            SlowBody::of(&error),
            Some(SlowBody::Stalled(limits.idle)),
            "{error}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_already_there_arms_no_timer() {
        let mut body = IdleLimit::new(
            http_body_util::Full::new(Bytes::from_static(b"whole")),
            Duration::from_millis(1),
        );
        let frame = body.frame().await.expect("a frame").expect("data");
        assert_eq!(frame.into_data().ok().as_deref(), Some(&b"whole"[..]));
        assert!(body.frame().await.is_none());
        assert!(body.timer.is_none());
    }
}
