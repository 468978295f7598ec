//! What an HTTP/2 connection's requests are doing, for its timeouts: whether
//! any started, any is still in progress, and whether an answer waits on a
//! client that takes none of it.
//!
//! hyper asks an answer's body for more only once the client's flow-control
//! window has room (RFC 9113 §5.2), so a body that gave something and is
//! not asked again waits on the client. One that keeps its window shut
//! would hold its stream, its upstream request and a `max_connections` slot
//! for good; an HTTP/1 client that reads nothing is cut off the same way
//! (`stall.rs`).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Frame;

use crate::body::{Body, BoxError};

#[derive(Default)]
pub(super) struct Activity {
    /// Requests started on the connection so far.
    started: AtomicUsize,
    /// Requests whose handler has not finished (or been dropped).
    busy: AtomicUsize,
    /// Answer bodies not asked for more since they last gave something (or
    /// were made): each waits on the client.
    held: AtomicUsize,
    /// Times an answer body was made or asked for more.
    moves: AtomicUsize,
}

impl Activity {
    pub(super) fn started(&self) -> usize {
        self.started.load(Ordering::Relaxed)
    }

    pub(super) fn busy(&self) -> usize {
        self.busy.load(Ordering::Relaxed)
    }

    /// How many times answers moved so far, and whether one waits on the
    /// client now: the same count at two looks, with an answer waiting at
    /// both, means the client took nothing in between.
    pub(super) fn answers(&self) -> (usize, bool) {
        (
            self.moves.load(Ordering::Relaxed),
            self.held.load(Ordering::Relaxed) > 0,
        )
    }
}

/// One request being handled; counted until dropped.
pub(super) struct Busy(Arc<Activity>);

impl Busy {
    pub(super) fn new(activity: Arc<Activity>) -> Self {
        activity.started.fetch_add(1, Ordering::Relaxed);
        activity.busy.fetch_add(1, Ordering::Relaxed);
        Self(activity)
    }
}

/// Work in progress that is no request of its own: a body read on after
/// its early answer (`body::Lingering`).
impl crate::body::InProgress for Activity {
    fn begin(&self) {
        self.busy.fetch_add(1, Ordering::Relaxed);
    }

    fn end(&self) {
        self.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An HTTP/2 answer's body, holding its request's [`Busy`] until hyper
/// drops it (sent whole, or the stream reset), and counted as held while
/// hyper has not asked it for more since it last gave something.
pub(super) struct Tracked {
    body: Body,
    held: bool,
    busy: Busy,
}

impl Tracked {
    pub(super) fn new(body: Body, busy: Busy) -> Self {
        let mut tracked = Self {
            body,
            held: false,
            busy,
        };
        tracked.moved(true);
        tracked
    }

    fn moved(&mut self, held: bool) {
        let activity = &self.busy.0;
        activity.moves.fetch_add(1, Ordering::Relaxed);
        match (self.held, held) {
            (false, true) => activity.held.fetch_add(1, Ordering::Relaxed),
            (true, false) => activity.held.fetch_sub(1, Ordering::Relaxed),
            _ => 0,
        };
        self.held = held;
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if self.held {
            self.busy.0.held.fetch_sub(1, Ordering::Relaxed);
        }
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
