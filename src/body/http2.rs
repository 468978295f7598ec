//! An HTTP/2 request body that is still read for a moment after it is
//! dropped unfinished.
//!
//! A gateway often answers before the body is in: 400 for a missing key,
//! 413 for a declared length over the limit, 404 for no route. Over HTTP/1
//! the connection then lingers (server/http1). Over HTTP/2, dropping the
//! body makes the stream reset right behind the answer (RST_STREAM with
//! NO_ERROR, which RFC 9113 §8.1 allows), and some clients (curl 7.88 with
//! nghttp2) then lose the answer itself. So the rest of the body is read and
//! dropped in the background while it keeps coming, on the terms of
//! [`super::linger`]: the answer goes out first, and the client is told to
//! stop only after it has had the time to read it. That reading on counts
//! as work in progress on its connection, which does not close it as idle,
//! and ends, 0.5 s of quiet at most later, once the listener shuts down
//! ([`Lingering`]).
//!
//! A body whose stream the client resets is not complete, whatever the
//! reset's code: hyper ends the body cleanly on `RST_STREAM(NO_ERROR)` (for
//! a client told to stop sending after an early answer), so a server that
//! takes that end for the real one forwards a cut body as a whole request
//! (chunked to an HTTP/1 upstream, its last chunk written). Envoy resets a
//! stream with `NO_ERROR` when its own client goes away. With a declared
//! `Content-Length` a short body is a reset (h2 checks the length on
//! `END_STREAM`); without one, the end is given only once hyper has looked
//! for a reset after it ([`StreamWatch`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use tokio_util::sync::CancellationToken;

use super::linger::{Linger, QUIET};
use super::{BoxError, poll_http2};

/// The client reset its HTTP/2 stream before the end of its request body.
#[derive(Debug, thiserror::Error)]
#[error("the client reset its stream before the end of the request body")]
pub struct StreamReset;

/// What the reading on of an abandoned body tells, and heeds: its
/// `connection` counts it as work in progress while it lasts, and
/// `closing`, once cancelled (the listener shuts down), ends it after
/// [`QUIET`] more at most.
#[derive(Clone)]
pub struct Lingering {
    pub closing: CancellationToken,
    pub connection: Arc<dyn InProgress>,
}

/// A connection's count of work in progress (server::http2_activity).
pub trait InProgress: Send + Sync {
    fn begin(&self);
    fn end(&self);
}

/// One reading on, counted by its connection from its start to its end.
struct ReadingOn(Arc<dyn InProgress>);

impl ReadingOn {
    fn begin(connection: Arc<dyn InProgress>) -> Self {
        connection.begin();
        Self(connection)
    }
}

impl Drop for ReadingOn {
    fn drop(&mut self) {
        self.0.end();
    }
}

pub struct Http2Body {
    /// `None` only once dropped.
    incoming: Option<Incoming>,
    /// Given to the reading on after an early answer.
    lingering: Option<Lingering>,
    /// The declared `Content-Length`, and the bytes read so far.
    declared: Option<u64>,
    read: u64,
    /// For a body of no declared length: its request's handler.
    watch: Option<Arc<StreamWatch>>,
    /// hyper ended the body when the handler had been polled this many times.
    ended_at: Option<u64>,
}

impl Http2Body {
    /// `watch` is needed for a body of no declared length only
    /// ([`Http2Body::needs_watch`]).
    pub fn new(incoming: Incoming, watch: Option<Arc<StreamWatch>>) -> Self {
        Self {
            declared: incoming.size_hint().exact(),
            incoming: Some(incoming),
            lingering: None,
            read: 0,
            watch,
            ended_at: None,
        }
    }

    /// What its reading on after an early answer holds and heeds.
    pub fn lingering(mut self, lingering: Lingering) -> Self {
        self.lingering = Some(lingering);
        self
    }

    /// Whether the body's end can be told from a reset only by watching its
    /// handler: it has no declared length.
    pub fn needs_watch(incoming: &Incoming) -> bool {
        incoming.size_hint().exact().is_none()
    }

    /// hyper ended the body: a real end, or a reset it takes for one.
    fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(declared) = self.declared {
            return Poll::Ready((self.read < declared).then(|| Err(StreamReset.into())));
        }
        let Some(watch) = &self.watch else {
            return Poll::Ready(None);
        };
        let ended_at = *self.ended_at.get_or_insert_with(|| watch.polls());
        match watch.state() {
            Handler::Dropped => return Poll::Ready(Some(Err(StreamReset.into()))),
            // hyper no longer looks for a reset in its stead; see
            // docs/http1.md.
            Handler::Answered => return Poll::Ready(None),
            Handler::Running => {}
        }
        // hyper looks for a reset after each poll of the handler that leaves
        // it waiting, and drops it on one: a poll that began after the end
        // was seen, then one more, prove that the look after it found none.
        if watch.polls() >= ended_at + 2 {
            return Poll::Ready(None);
        }
        watch.body.register(cx.waker());
        watch.handler.wake();
        Poll::Pending
    }
}

impl HttpBody for Http2Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.ended_at.is_some() {
            return this.poll_end(cx);
        }
        let Some(incoming) = &mut this.incoming else {
            return Poll::Ready(None);
        };
        match poll_http2(incoming, cx) {
            Poll::Ready(None) => this.poll_end(cx),
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.read += data.len() as u64;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        // A body still to be proven whole is not at its end.
        self.ended_at.is_none() && self.incoming.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

impl Drop for Http2Body {
    fn drop(&mut self) {
        let Some(incoming) = self.incoming.take() else {
            return;
        };
        if incoming.is_end_stream() {
            return;
        }
        // Outside a runtime (a test dropping a request) there is no one to
        // read it: the stream is reset at once, as before.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            // Counted from now, while the request's own count may end.
            let lingering = self
                .lingering
                .take()
                .map(|lingering| (lingering.closing, ReadingOn::begin(lingering.connection)));
            runtime.spawn(drain(incoming, lingering));
        }
    }
}

/// What an HTTP/2 request's handler is doing, for its body
/// ([`Http2Body::poll_end`]).
#[derive(Default)]
pub struct StreamWatch {
    /// Times the handler was polled.
    polls: AtomicU64,
    /// A [`Handler`].
    state: AtomicU8,
    handler: AtomicWaker,
    body: AtomicWaker,
}

#[derive(PartialEq)]
enum Handler {
    Running,
    Answered,
    /// Before its answer: hyper drops a handler whose stream was reset.
    Dropped,
}

impl StreamWatch {
    fn polls(&self) -> u64 {
        self.polls.load(Ordering::Acquire)
    }

    fn state(&self) -> Handler {
        match self.state.load(Ordering::Acquire) {
            0 => Handler::Running,
            1 => Handler::Answered,
            _ => Handler::Dropped,
        }
    }

    fn set(&self, state: Handler) {
        let state = match state {
            Handler::Running => 0,
            Handler::Answered => 1,
            Handler::Dropped => 2,
        };
        self.state.store(state, Ordering::Release);
        self.body.wake();
    }
}

/// An HTTP/2 request's handler, counted by its [`StreamWatch`].
pub struct Watched<F> {
    handler: F,
    watch: Option<Arc<StreamWatch>>,
}

impl<F> Watched<F> {
    pub fn new(handler: F, watch: Option<Arc<StreamWatch>>) -> Self {
        Self { handler, watch }
    }
}

impl<F: Future + Unpin> Future for Watched<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        if let Some(watch) = &this.watch {
            watch.polls.fetch_add(1, Ordering::AcqRel);
            watch.handler.register(cx.waker());
            watch.body.wake();
        }
        let answer = std::task::ready!(Pin::new(&mut this.handler).poll(cx));
        if let Some(watch) = this.watch.take() {
            watch.set(Handler::Answered);
        }
        Poll::Ready(answer)
    }
}

impl<F> Drop for Watched<F> {
    fn drop(&mut self) {
        if let Some(watch) = self.watch.take() {
            watch.set(Handler::Dropped);
        }
    }
}

async fn drain(mut incoming: Incoming, lingering: Option<(CancellationToken, ReadingOn)>) {
    let linger = Linger::start();
    let reading = async {
        while linger
            .read(async { matches!(incoming.frame().await, Some(Ok(_))) })
            .await
        {}
    };
    let Some((closing, counted)) = lingering else {
        return reading.await;
    };
    tokio::pin!(reading);
    tokio::select! {
        () = &mut reading => {}
        () = closing.cancelled() => {
            let _ = tokio::time::timeout(QUIET, reading).await;
        }
    }
    drop(counted);
}
