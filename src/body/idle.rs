//! A body whose sender may not go quiet: when no frame comes for `limit`,
//! the body fails with [`Stalled`]. What bounds a stalled upstream's answer
//! body and a stalled client's request body, neither of which a deadline on
//! the head covers.

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

/// Whether `error` (a body's, boxed) is a [`Stalled`].
pub fn is_stalled(error: &BoxError) -> bool {
    error.is::<Stalled>()
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
}

impl<B> IdleLimit<B> {
    pub fn new(inner: B, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            timer: None,
            moved: false,
            stalled: false,
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
        let timer = match &mut this.timer {
            Some(timer) => {
                if moved {
                    timer.as_mut().reset(Instant::now() + this.limit);
                }
                timer
            }
            None => this.timer.insert(Box::pin(tokio::time::sleep(this.limit))),
        };
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                this.stalled = true;
                Poll::Ready(Some(Err(Stalled(this.limit).into())))
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
