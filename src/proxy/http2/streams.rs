//! The streams in flight to one HTTP/2 upstream, counted here so that
//! hyper is never handed a request it would hold back.
//!
//! Past the upstream's `SETTINGS_MAX_CONCURRENT_STREAMS`, h2 keeps a request
//! inside the connection, unopened, and nothing tells when it opens: one
//! still there when its `timeout` ends could only be answered "outcome
//! unknown" (it may open and go out a moment later). A request waiting here
//! instead was never handed over, so giving up on it is certain: nothing
//! was sent (docs/configuration.md, `http2`).
//!
//! The limit is the one h2 itself goes by: what the newest connection's
//! upstream announced, asked of the connection as each request is about to
//! take a place (mod.rs), and [`INITIAL_LIMIT`] until it has.
//! A connection that replaced another starts from the lower of that and
//! what the upstream said on the one before, until its first answer (which
//! comes after the upstream's SETTINGS): an upstream that allows fewer
//! would otherwise refuse the streams past its limit each time the
//! connection is replaced (src/proxy/connection_reuse.rs). A place is held from the moment it is
//! taken until hyper has let go of the request's body and the answer's body
//! is done or dropped, so that it is never counted free while h2 still
//! counts its stream.
//!
//! Once the answer is over, what is left of the request body is not sent on
//! ([`Holding`]): hyper would otherwise wait on it for as long as the client
//! keeps its connection, or for ever once the gateway has stopped reading
//! that connection, and the place with it.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::body::BoxError;
use crate::proxy::error::{Cause, UpstreamError};

/// Streams allowed at once before the upstream announces its limit: what
/// hyper's h2 client assumes (and is set to assume, `open` in mod.rs),
/// the least RFC 9113 §6.5.2 recommends a server allow.
pub const INITIAL_LIMIT: usize = 100;

#[derive(Debug)]
pub struct Http2Streams {
    permits: Arc<Semaphore>,
    limit: Mutex<Limit>,
    /// One past the newest connection that has answered (0: none has; ids
    /// start at 0): its upstream's SETTINGS came before the answer, so h2's
    /// limit for it is the upstream's own.
    answered_past: AtomicU64,
}

#[derive(Debug)]
struct Limit {
    /// The connection whose upstream's limit this is: an older one's
    /// announcement no longer counts.
    connection: u64,
    /// Places in all: free permits, plus those held, less `owed`.
    allowed: usize,
    /// Permits to take out of use as they come back: the limit went down
    /// while more were held than it now allows.
    owed: usize,
    /// The limit the upstream itself said, on the newest connection that
    /// had answered when it was asked.
    said: Option<usize>,
}

impl Default for Http2Streams {
    fn default() -> Self {
        Self {
            permits: Arc::new(Semaphore::new(INITIAL_LIMIT)),
            limit: Mutex::new(Limit {
                connection: 0,
                allowed: INITIAL_LIMIT,
                owed: 0,
                said: None,
            }),
            answered_past: AtomicU64::new(0),
        }
    }
}

impl Http2Streams {
    fn lock(&self) -> std::sync::MutexGuard<'_, Limit> {
        // Each change is made whole under the lock, and nothing in it panics.
        self.limit.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The streams connection `connection`'s upstream allows at once now
    /// (h2's `usize::MAX` when it announced none).
    pub fn announced(&self, connection: u64, streams: usize) {
        let streams = streams.min(Semaphore::MAX_PERMITS);
        let settled = self.answered_past.load(Ordering::Acquire) > connection;
        let mut limit = self.lock();
        if connection < limit.connection {
            return;
        }
        limit.connection = connection;
        let target = match limit.said {
            _ if settled => {
                limit.said = Some(streams);
                streams
            }
            Some(said) => said.min(streams),
            None => streams,
        };
        if target < limit.allowed {
            let fewer = limit.allowed - target;
            let taken = self.permits.forget_permits(fewer);
            limit.owed += fewer - taken;
        } else if target > limit.allowed {
            let more = target - limit.allowed;
            let forgiven = more.min(limit.owed);
            limit.owed -= forgiven;
            self.permits.add_permits(more - forgiven);
        }
        limit.allowed = target;
    }

    /// Connection `connection` has answered a request: from now on the
    /// limit h2 tells for it is its upstream's.
    pub fn answered(&self, connection: u64) {
        // Once per connection: the load is all an answer costs after that.
        let past = connection.saturating_add(1);
        if self.answered_past.load(Ordering::Relaxed) < past {
            self.answered_past.fetch_max(past, Ordering::Release);
        }
    }

    /// A place for one stream, waiting at most `wait` for one to come free
    /// (past that the request was never sent), and when the wait began if
    /// there was one: a free place costs no clock read.
    pub async fn take(
        self: &Arc<Self>,
        wait: Duration,
    ) -> Result<(StreamPlace, Option<Instant>), UpstreamError> {
        let mut waited = None;
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                waited = Some(Instant::now());
                match tokio::time::timeout(wait, self.permits.clone().acquire_owned()).await {
                    Ok(Ok(permit)) => permit,
                    // The semaphore is never closed: counted as a wait that ran out.
                    Ok(Err(_)) | Err(_) => {
                        return Err(UpstreamError::NotSent(Cause::StreamsBusy {
                            streams: self.lock().allowed,
                            waited: wait,
                        }));
                    }
                }
            }
        };
        let place = StreamPlace {
            held: Arc::new(Held {
                permit: Some(permit),
                streams: self.clone(),
                answered: AtomicBool::new(false),
                sending: AtomicWaker::new(),
            }),
        };
        Ok((place, waited))
    }
}

/// One stream's place, held while any clone of it lives: the request's
/// sender, the body hyper sends, the answer's body ([`AnswerPlace`]).
#[derive(Debug, Clone)]
pub struct StreamPlace {
    held: Arc<Held>,
}

impl StreamPlace {
    /// The answer's hold on the place: the exchange is over when it goes.
    pub fn for_answer(self) -> AnswerPlace {
        AnswerPlace(self)
    }
}

/// The place as the answer's body holds it. Dropped (the body read to its
/// end, or given up), it ends the request body hyper may still be sending.
#[derive(Debug)]
pub struct AnswerPlace(StreamPlace);

impl Drop for AnswerPlace {
    fn drop(&mut self) {
        let held = &self.0.held;
        held.answered.store(true, Ordering::Release);
        held.sending.wake();
    }
}

#[derive(Debug)]
struct Held {
    permit: Option<OwnedSemaphorePermit>,
    streams: Arc<Http2Streams>,
    /// The answer is over: its body was read to the end or dropped.
    answered: AtomicBool,
    /// hyper's task sending the request body, woken when `answered` is set.
    sending: AtomicWaker,
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        // Under the lock, so that `announced` sees every permit either held
        // or back.
        let mut limit = self.streams.lock();
        if limit.owed > 0 {
            limit.owed -= 1;
            permit.forget();
        } else {
            drop(permit);
        }
    }
}

/// A request body that holds its stream's place until hyper lets go of it
/// (sent to the end, or the stream reset), and that ends, failing with
/// `CANCEL`, once the answer is over.
///
/// hyper sends a request body in a task of its own until the body ends or
/// the upstream resets the stream, whatever became of the answer. An
/// upstream that answers early (401, 413) and then reads and drops the rest
/// of the body does not reset it; a client that stops sending
/// would then hold the place for as long as it kept its connection, and an
/// HTTP/1 client's for good: once the gateway has answered it and stopped
/// reading its connection, nothing wakes hyper's task again. An HTTP/1
/// upstream stops taking the body once it answers; here the stream is
/// reset (hyper resets it with the reason the body fails with).
pub struct Holding<B> {
    inner: B,
    place: StreamPlace,
}

impl<B> Holding<B> {
    pub fn new(inner: B, place: StreamPlace) -> Self {
        Self { inner, place }
    }
}

impl<B> HttpBody for Holding<B>
where
    B: HttpBody<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let held = &this.place.held;
        // Registered first: an answer that ends after the check wakes it.
        held.sending.register(cx.waker());
        if held.answered.load(Ordering::Acquire) {
            return Poll::Ready(Some(Err(Box::new(h2::Error::from(h2::Reason::CANCEL)))));
        }
        Pin::new(&mut this.inner).poll_frame(cx)
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

    const NOW: Duration = Duration::ZERO;

    async fn take(streams: &Arc<Http2Streams>) -> Option<StreamPlace> {
        streams.take(NOW).await.ok().map(|(place, _)| place)
    }

    #[tokio::test]
    async fn a_lower_limit_waits_for_the_places_held_past_it() {
        let streams = Arc::new(Http2Streams::default());
        let held: Vec<_> = futures_util::future::join_all((0..3).map(|_| take(&streams))).await;
        streams.announced(1, 2);
        assert!(take(&streams).await.is_none(), "3 held, 2 allowed");
        let mut held: Vec<_> = held.into_iter().map(Option::unwrap).collect();
        held.pop();
        assert!(take(&streams).await.is_none(), "2 held, 2 allowed");
        held.pop();
        let third = take(&streams).await;
        assert!(third.is_some(), "1 held, 2 allowed");
        assert!(take(&streams).await.is_none());
        drop((held, third));
        let two: Vec<_> = futures_util::future::join_all((0..3).map(|_| take(&streams))).await;
        assert_eq!(two.iter().filter(|place| place.is_some()).count(), 2);
    }

    #[tokio::test]
    async fn a_higher_limit_first_pays_what_is_owed() {
        let streams = Arc::new(Http2Streams::default());
        streams.announced(1, 2);
        let held: Vec<_> = futures_util::future::join_all((0..2).map(|_| take(&streams))).await;
        streams.announced(1, 0);
        streams.announced(1, 3);
        let more = take(&streams).await;
        assert!(more.is_some(), "2 held, 3 allowed");
        assert!(take(&streams).await.is_none(), "3 held, 3 allowed");
        drop((held, more));
    }

    #[tokio::test]
    async fn an_older_connection_no_longer_sets_the_limit() {
        let streams = Arc::new(Http2Streams::default());
        streams.announced(2, 1);
        streams.announced(1, 50);
        let first = take(&streams).await;
        assert!(first.is_some());
        assert!(take(&streams).await.is_none());
        // A new connection starts from h2's own assumption.
        streams.announced(3, INITIAL_LIMIT);
        assert!(take(&streams).await.is_some());
    }

    #[tokio::test]
    async fn a_new_connection_keeps_the_limit_said_until_it_answers() {
        let streams = Arc::new(Http2Streams::default());
        // Connection 0 (the first id) has not answered: what it tells is
        // not kept for the next.
        streams.announced(0, 2);
        streams.announced(1, INITIAL_LIMIT);
        let first = (
            take(&streams).await,
            take(&streams).await,
            take(&streams).await,
        );
        assert!(first.2.is_some(), "h2's 100, nothing said before");
        drop(first);
        streams.answered(1);
        streams.announced(1, 2);
        // Connection 2, before its upstream's SETTINGS: h2 assumes 100.
        streams.announced(2, INITIAL_LIMIT);
        let held = (take(&streams).await, take(&streams).await);
        assert!(held.0.is_some() && held.1.is_some());
        assert!(take(&streams).await.is_none(), "2, as said on connection 1");
        // Its first answer came after its SETTINGS: h2's limit is the
        // upstream's now, even where it is h2's assumption.
        streams.answered(2);
        streams.announced(2, INITIAL_LIMIT);
        assert!(take(&streams).await.is_some());
        // What a connection said before it answered is not kept.
        streams.announced(3, 1);
        streams.announced(4, INITIAL_LIMIT);
        assert!(take(&streams).await.is_some(), "100 said on connection 2");
        drop(held);
    }

    /// Every holder must let go before the place is free: the sender, the
    /// body hyper sends, the answer's body.
    #[tokio::test]
    async fn a_place_is_free_once_every_holder_let_go() {
        let streams = Arc::new(Http2Streams::default());
        streams.announced(1, 1);
        let place = take(&streams).await.unwrap();
        let body = Holding::new(crate::body::empty(), place.clone());
        drop(place);
        assert!(take(&streams).await.is_none());
        drop(body);
        assert!(take(&streams).await.is_some());
    }

    /// hyper sends a request body until it ends or the stream is reset:
    /// one the client stopped sending must end once the answer is over,
    /// and wake the task waiting on it.
    #[tokio::test]
    async fn a_request_body_still_coming_ends_once_the_answer_is_over() {
        use http_body_util::BodyExt;
        let streams = Arc::new(Http2Streams::default());
        streams.announced(1, 1);
        let place = take(&streams).await.unwrap();
        let silent = http_body_util::StreamBody::new(futures_util::stream::pending::<
            Result<Frame<Bytes>, BoxError>,
        >());
        let mut body = Holding::new(silent, place.clone());
        let answer = place.for_answer();
        let sending = tokio::spawn(async move { body.frame().await.map(|frame| frame.err()) });
        tokio::task::yield_now().await;
        assert!(!sending.is_finished(), "the client sends nothing");
        drop(answer);
        let ended = tokio::time::timeout(Duration::from_secs(1), sending)
            .await
            .expect("woken")
            .unwrap();
        let error = ended.flatten().expect("an error, not an end");
        let reason = error
            .downcast_ref::<h2::Error>()
            .and_then(h2::Error::reason);
        assert_eq!(reason, Some(h2::Reason::CANCEL));
        assert!(take(&streams).await.is_some(), "every holder let go");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_for_a_place_ends_as_not_sent() {
        let streams = Arc::new(Http2Streams::default());
        streams.announced(1, 0);
        let started = Instant::now();
        let waited = streams.take(Duration::from_secs(2)).await;
        assert!(
            matches!(
                waited,
                Err(UpstreamError::NotSent(Cause::StreamsBusy {
                    streams: 0,
                    ..
                }))
            ),
            "{waited:?}"
        );
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }
}
