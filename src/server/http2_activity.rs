//! What an HTTP/2 connection's requests are doing, for its timeouts: whether
//! any started, any is still in progress, and whether an answer waits on a
//! client that takes none of it.
//!
//! hyper asks an answer's body for more only once what the body last gave
//! found room in the client's flow-control window (RFC 9113 §5.2), so a body
//! that gave something and is not asked again waits on the client. One that
//! keeps its window shut would hold its stream, its upstream request and a
//! `max_connections` slot for good; an HTTP/1 client that reads nothing is
//! cut off the same way (`stall.rs`). Each answer is judged on its own:
//! a client could otherwise keep one answer moving (or reset a stalled
//! stream and open another now and then) and hold its other streams for
//! good.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Frame;

use super::idle_connections::Place;
use crate::body::{Body, BoxError};

pub(super) struct Activity {
    /// Idle (evictable at `max_connections`) while `busy` is 0.
    place: Arc<Place>,
    /// Requests started on the connection so far.
    started: AtomicUsize,
    /// Requests whose handler has not finished (or been dropped).
    busy: AtomicUsize,
    /// Periods of the connection's check so far ([`Activity::stalled`]).
    period: AtomicUsize,
    /// Answer bodies not asked for more since they last gave something (or
    /// were made), by the period that began at (modulo 3: the check ends a
    /// connection with one older than the last period, so at most two
    /// periods are held at once, and the third is the next one's, empty).
    held: [AtomicUsize; 3],
}

impl Activity {
    pub(super) fn new(place: Arc<Place>) -> Self {
        Self {
            place,
            started: AtomicUsize::new(0),
            busy: AtomicUsize::new(0),
            period: AtomicUsize::new(0),
            held: Default::default(),
        }
    }

    /// Work began (`true`) or ended: the connection is idle again when
    /// nothing is in progress. Only a change to or from 0 takes the lock.
    fn work(&self, began: bool) {
        let crossed = if began {
            self.busy.fetch_add(1, Ordering::Relaxed) == 0
        } else {
            self.busy.fetch_sub(1, Ordering::Relaxed) == 1
        };
        if crossed {
            // Evicted meanwhile: the connection's task sees to it.
            let _ = self.place.track(|| self.busy.load(Ordering::Relaxed) == 0);
        }
    }

    pub(super) fn started(&self) -> usize {
        self.started.load(Ordering::Relaxed)
    }

    pub(super) fn busy(&self) -> usize {
        self.busy.load(Ordering::Relaxed)
    }

    /// Ends a period of the connection's check: whether an answer has waited
    /// on the client since before the period before it, a whole period at
    /// least, with nothing of it taken.
    pub(super) fn stalled(&self) -> bool {
        let ended = self.period.fetch_add(1, Ordering::Relaxed);
        // The period before `ended` (none before the first: its slot is
        // still empty then).
        let before = (ended % 3 + 2) % 3;
        self.held[before].load(Ordering::Relaxed) > 0
    }
}

/// One request being handled; counted until dropped.
pub(super) struct Busy(Arc<Activity>);

impl Busy {
    pub(super) fn new(activity: Arc<Activity>) -> Self {
        activity.started.fetch_add(1, Ordering::Relaxed);
        activity.work(true);
        Self(activity)
    }
}

/// Work in progress that is no request of its own: a body read on after
/// its early answer (`body::Lingering`).
impl crate::body::InProgress for Activity {
    fn begin(&self) {
        self.work(true);
    }

    fn end(&self) {
        self.work(false);
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.work(false);
    }
}

/// An HTTP/2 answer's body, holding its request's [`Busy`] until hyper
/// drops it (sent whole, or the stream reset), and counted as held while
/// hyper has not asked it for more since it last gave something.
pub(super) struct Tracked {
    body: Body,
    /// The slot of [`Activity::held`] this answer is counted in, while held.
    held: Option<usize>,
    busy: Busy,
}

impl Tracked {
    pub(super) fn new(body: Body, busy: Busy) -> Self {
        let mut tracked = Self {
            body,
            held: None,
            busy,
        };
        tracked.moved(true);
        tracked
    }

    /// Asked for more (or made): held afresh, from this period, when it gave
    /// something.
    fn moved(&mut self, held: bool) {
        self.release();
        if held {
            let activity = &self.busy.0;
            let slot = activity.period.load(Ordering::Relaxed) % 3;
            activity.held[slot].fetch_add(1, Ordering::Relaxed);
            self.held = Some(slot);
        }
    }

    fn release(&mut self) {
        if let Some(slot) = self.held.take() {
            self.busy.0.held[slot].fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.release();
    }
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        // Pending waits on the upstream, not on the client.
        this.moved(matches!(polled, Poll::Ready(Some(Ok(_)))));
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
