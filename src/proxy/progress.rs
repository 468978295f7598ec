//! The upstream's `timeout` on a pass-through: a wait that starts again with
//! each piece of a streamed request body sent, so an upload that keeps
//! flowing is not cut off by the time it takes, as a download that keeps
//! flowing is not. A keyed execution keeps one deadline for the whole
//! exchange: its lease must outlast it.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::Instant;

use crate::body::{BoxError, COALESCE_LIMIT};

/// What an upstream's `timeout` bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Everything from the send (a wait for a connection or a stream
    /// included) to the answer head.
    Whole,
    /// Each next piece of the request body, then the answer head after the last.
    Restarting,
}

impl Wait {
    /// Whether sending `body` under this wait needs its progress watched:
    /// only a body still to come from the client does (one read whole goes
    /// out at once), so a plain request pays for nothing here.
    pub fn watches(self, body: &impl HttpBody) -> bool {
        self == Wait::Restarting
            && !body.is_end_stream()
            && body
                .size_hint()
                .exact()
                .is_none_or(|length| length > COALESCE_LIMIT)
    }
}

/// When a request last made headway.
#[derive(Debug)]
pub struct Progress {
    start: Instant,
    /// Nanoseconds from `start` to the last mark.
    since_start: AtomicU64,
}

impl Progress {
    /// Progress as of `start`: the first wait counts from it.
    pub fn since(start: Instant) -> Self {
        Self {
            start,
            since_start: AtomicU64::new(0),
        }
    }

    /// Another piece of the request went out.
    pub fn mark(&self) {
        let nanos = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.since_start.store(nanos, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_nanos(self.since_start.load(Ordering::Relaxed))
    }
}

/// Runs `work` until it has gone `timeout` without a mark on `progress`
/// (`None`: `timeout` from now, whatever happens).
pub async fn within<F: Future>(
    timeout: Duration,
    progress: Option<&Progress>,
    work: F,
) -> Result<F::Output, tokio::time::error::Elapsed> {
    let Some(progress) = progress else {
        return tokio::time::timeout(timeout, work).await;
    };
    let mut work = std::pin::pin!(work);
    loop {
        match tokio::time::timeout_at(progress.last() + timeout, &mut work).await {
            Ok(output) => return Ok(output),
            Err(elapsed) if progress.last() + timeout <= Instant::now() => return Err(elapsed),
            // A piece went out while the timer ran: wait from that one.
            Err(_) => {}
        }
    }
}

/// A request body that marks `progress` with each frame taken from it (by
/// a client that sends it on in a task of its own, as hyper's does).
pub struct Marking<B> {
    inner: B,
    progress: std::sync::Arc<Progress>,
}

impl<B> Marking<B> {
    pub fn new(inner: B, progress: std::sync::Arc<Progress>) -> Self {
        Self { inner, progress }
    }
}

impl<B> HttpBody for Marking<B>
where
    B: HttpBody<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &polled {
            self.progress.mark();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_wait_with_progress_restarts_with_each_mark() {
        let progress = Progress::since(Instant::now());
        let work = async {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(600)).await;
                progress.mark();
            }
            "done"
        };
        // 3 s in all, never 1 s without a mark.
        let done = within(Duration::from_secs(1), Some(&progress), work).await;
        assert_eq!(done, Ok("done"));

        let progress = Progress::since(Instant::now());
        let stalled = async {
            progress.mark();
            std::future::pending::<()>().await;
        };
        let started = Instant::now();
        assert!(
            within(Duration::from_secs(1), Some(&progress), stalled)
                .await
                .is_err()
        );
        assert_eq!(started.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_whole_wait_ignores_progress() {
        let progress = Progress::since(Instant::now());
        let work = async {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(600)).await;
                progress.mark();
            }
        };
        assert!(within(Duration::from_secs(1), None, work).await.is_err());
    }
}
