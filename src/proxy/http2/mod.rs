//! An HTTP/2 upstream's one multiplexed connection, dialed to the
//! configured upstream and nowhere else.
//!
//! hyper-util's client dials and pools by each request's URI authority, so
//! the `:authority` it sends must be the upstream's own: the client's host
//! there would choose where to connect. Here the connection is chosen by
//! configuration alone, and a request's URI says only what the upstream is
//! told (`:scheme`, `:authority`, path): the client's host, with
//! `preserve_host`, as an HTTP/1 upstream gets it in `Host`.
//!
//! A connection takes new requests until it has carried
//! [`MAX_REQUESTS`] or been open [`MAX_AGE`] (src/proxy/connection_reuse.rs); the
//! next request opens a new one, and the old one closes (GOAWAY) once the
//! streams still on it are done.
//!
//! Its parts: the streams in flight counted against the upstream's limit
//! (streams.rs), the connections counted for a request that timed out
//! (connections.rs), a connection let go of once it went silent
//! (silence.rs), and how a connection is dialed (dialer.rs).

mod connections;
mod dialer;
mod silence;
mod streams;

use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use http::{Request, Response, Uri};
use http_body::Body as _;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::Instant;
use tower_service::Service;

use super::connection_reuse::{MAX_AGE, MAX_REQUESTS};
use super::error::{Cause, UpstreamError, error_chain};
use super::handover::Handover;
use crate::body::{Body, COALESCE_LIMIT};
use crate::log_limit::LogLimit;
use connections::Offered;
use dialer::{H2Connector, RequireH2};
use streams::{Holding, Http2Streams, INITIAL_LIMIT};

pub use connections::Http2Connections;
pub use dialer::dialer;
pub use silence::Handed;
pub use streams::{AnswerPlace, StreamPlace};

/// The largest answer head read, as HTTP/2 counts it (each field's name
/// and value plus 32 bytes): the HTTP/1 client's limit.
const ANSWER_HEAD_LIST: u32 = super::http1::response_head::MAX_HEAD_BYTES as u32;

/// Holds the connection, opens it when there is none, and drops it when it
/// closed, has gone unused for the idle timeout, or is worn out. A clone
/// shares it.
#[derive(Debug, Clone)]
pub struct Http2Upstream {
    holder: Arc<Holder>,
}

#[derive(Debug)]
struct Holder {
    dialer: RequireH2<H2Connector>,
    /// The upstream's own URL: the only address ever dialed.
    target: Uri,
    idle_timeout: Duration,
    /// The longest wait for a place among the streams the upstream allows,
    /// as for a connection.
    connect_timeout: Duration,
    reuse: Reuse,
    connections: Arc<Http2Connections>,
    streams: Arc<Http2Streams>,
    slot: Mutex<Slot>,
}

/// How long a connection takes new requests: [`MAX_REQUESTS`] and
/// [`MAX_AGE`] (shorter only in tests).
#[derive(Debug, Clone, Copy)]
struct Reuse {
    requests: u32,
    age: Duration,
}

/// A connect every request waiting for a connection shares: one at a time,
/// and its failure is each waiter's.
type Connecting = Shared<BoxFuture<'static, Result<Opened, ConnectError>>>;

/// hyper's side of a connection, driven by a task of its own, behind a lock
/// so that a request about to take a stream can ask it the limit h2 goes
/// by: h2 reads the upstream's SETTINGS in another task, and nothing tells
/// when it has (streams.rs).
type Driven = Arc<Mutex<Pin<Box<H2Connection>>>>;

type H2Connection =
    http2::Connection<<RequireH2<H2Connector> as Service<Uri>>::Response, Body, TokioExecutor>;

fn lock(connection: &Driven) -> std::sync::MutexGuard<'_, Pin<Box<H2Connection>>> {
    // A panic in hyper's poll leaves the connection as it was: it is still
    // asked and polled, and ends with an error if it cannot go on.
    connection.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A connection just opened: what sends on it, what tells its limit, and
/// what counts it as one a request may be handed (connections.rs),
/// for as long as the slot or a request waiting for it holds a clone.
#[derive(Clone)]
struct Opened {
    sender: SendRequest<Body>,
    connection: Driven,
    offered: Arc<Offered>,
}

/// Why a connection did not open, as every request that waited for it
/// hears it.
type ConnectError = Arc<dyn std::error::Error + Send + Sync>;

/// The task opening a connection ended without its result (it panicked).
#[derive(Debug, thiserror::Error)]
#[error("the connect task failed: {0}")]
struct ConnectTaskFailed(tokio::task::JoinError);

enum Slot {
    Closed,
    Connecting {
        id: u64,
        connecting: Connecting,
        /// Requests waiting for it: the first ones it carries.
        handed: u32,
    },
    Open {
        id: u64,
        sender: SendRequest<Body>,
        connection: Driven,
        last_used: Instant,
        opened_at: Instant,
        /// Requests handed it so far.
        handed: u32,
        /// Counts it as a connection a request may be handed, and tells
        /// what was read on it (silence.rs).
        offered: Arc<Offered>,
    },
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Closed => f.write_str("Closed"),
            Self::Connecting { id, .. } => write!(f, "Connecting({id})"),
            Self::Open { id, .. } => write!(f, "Open({id})"),
        }
    }
}

impl Http2Upstream {
    pub fn new(
        dialer: RequireH2<H2Connector>,
        target: Uri,
        idle_timeout: Duration,
        connect_timeout: Duration,
        connections: Arc<Http2Connections>,
    ) -> Self {
        let reuse = Reuse {
            requests: MAX_REQUESTS,
            age: MAX_AGE,
        };
        Self::reused(
            dialer,
            target,
            idle_timeout,
            connect_timeout,
            reuse,
            connections,
        )
    }

    /// [`Self::new`], with a connection taking new requests as `reuse` says.
    fn reused(
        dialer: RequireH2<H2Connector>,
        target: Uri,
        idle_timeout: Duration,
        connect_timeout: Duration,
        reuse: Reuse,
        connections: Arc<Http2Connections>,
    ) -> Self {
        Self {
            holder: Arc::new(Holder {
                dialer,
                target,
                idle_timeout,
                connect_timeout,
                reuse,
                connections,
                streams: Arc::new(Http2Streams::default()),
                slot: Mutex::new(Slot::Closed),
            }),
        }
    }

    pub fn connections(&self) -> &Http2Connections {
        &self.holder.connections
    }

    /// A place for one more stream, waited for at most `connect_timeout`
    /// and `timeout`, whichever is shorter (as an HTTP/1 request waits for
    /// a connection); past that the request was never sent. With it, when
    /// the wait began if there was one.
    pub async fn place(
        &self,
        timeout: Duration,
    ) -> Result<(StreamPlace, Option<Instant>), UpstreamError> {
        self.holder.look_at_limit();
        let wait = self.holder.connect_timeout.min(timeout);
        self.holder.streams.take(wait).await
    }

    /// Sends `request` as it is (its URI's authority is the `:authority`,
    /// never where to connect) in `place`, and waits for the answer head;
    /// `handed` tells [`Self::timed_out`] which connection it went on;
    /// `handover` says when hyper is given the request, and may stop it
    /// before.
    pub async fn send(
        &self,
        request: Request<Body>,
        place: &StreamPlace,
        handed: &Handed,
        handover: &Handover,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let (request, mut again) = Resend::keep(request).await?;
        let mut request = holding(request, place);
        // A request the connection gives back was never sent: one that was
        // closing when it was taken (the upstream's GOAWAY not yet read) is
        // retried on a fresh one; a fresh one that gives it back is the end.
        // One the upstream left unprocessed goes once more (`again`).
        for _ in 0..3 {
            let (mut sender, fresh, id, offered) = (self.sender().await)
                .map_err(|error| UpstreamError::NotSent(Cause::Http2Connect(error)))?;
            handed.to(id, offered);
            // hyper queues it for its connection's task at once: from
            // here it may go out even if this call is given up.
            handover.hand_over()?;
            match sender.try_send_request(request).await {
                Ok(response) => {
                    self.holder.streams.answered(id);
                    return Ok(response);
                }
                Err(mut failed) => match failed.take_message() {
                    Some(unsent) if !fresh => request = unsent,
                    Some(_) => {
                        return Err(UpstreamError::NotSent(Cause::Http2(failed.into_error())));
                    }
                    None => match unprocessed(failed.error()) {
                        // The connection is going away and never began on
                        // it: once more on a new one, as an HTTP/1 request
                        // whose head never left a closed connection.
                        Some(Unprocessed::GoAway) if let Some(kept) = again.take() => {
                            self.holder.closed(id);
                            request = holding(kept.request(), place);
                        }
                        // Refused at the upstream's limit: the limit was read
                        // before the reset (an upstream's SETTINGS come first
                        // on a connection), so h2 now holds this one more try
                        // on the same connection until the limit lets it open.
                        // A burst meeting a new connection finds only that.
                        Some(Unprocessed::Refused) if let Some(kept) = again.take() => {
                            self.holder.streams.answered(id);
                            self.holder.look_at_limit();
                            request = holding(kept.request(), place);
                        }
                        Some(_) => {
                            return Err(UpstreamError::NotSent(Cause::Http2(failed.into_error())));
                        }
                        None => {
                            return Err(UpstreamError::Broken(Cause::Http2(failed.into_error())));
                        }
                    },
                },
            }
        }
        Err(UpstreamError::NotSent(Cause::ConnectionsClosed))
    }

    /// A request [`Self::send`] handed over got no answer head within its
    /// `timeout`: when the upstream sent nothing at all on its connection
    /// meanwhile, the next request goes on a new one (silence.rs).
    pub fn timed_out(&self, handed: &Handed) {
        let Some(id) = handed.silent() else {
            return;
        };
        if !self.holder.closed(id) {
            return;
        }
        // Once per connection, but an upstream that keeps going silent
        // does so on each new one.
        static LIMIT: LogLimit = LogLimit::uncounted();
        let upstream = self.holder.target.to_string();
        if let Some(left_out) = LIMIT.admit(&upstream) {
            tracing::warn!(
                upstream,
                not_logged = left_out.count(),
                "the upstream sent nothing on its HTTP/2 connection for a request's whole timeout; the next request opens a new connection{left_out}"
            );
        }
    }

    /// The open connection, or the one being opened (`true`: opened for
    /// this request, or while it waited), its id, and what tells what was
    /// read on it.
    async fn sender(&self) -> Result<(SendRequest<Body>, bool, u64, Arc<Offered>), ConnectError> {
        let (id, connecting) = {
            let mut slot = self.holder.lock();
            match &mut *slot {
                Slot::Open {
                    id,
                    sender,
                    last_used,
                    handed,
                    offered,
                    ..
                } if !sender.is_closed() => {
                    *last_used = Instant::now();
                    *handed += 1;
                    let taken = (sender.clone(), false, *id, offered.clone());
                    if *handed >= self.holder.reuse.requests {
                        // Its last: let go of here, it closes once the
                        // streams on it are done (`drive`).
                        *slot = Slot::Closed;
                    }
                    return Ok(taken);
                }
                Slot::Connecting {
                    id,
                    connecting,
                    handed,
                } => {
                    *handed = handed.saturating_add(1);
                    (*id, connecting.clone())
                }
                _ => {
                    let (id, connecting) = self.holder.connect();
                    *slot = Slot::Connecting {
                        id,
                        connecting: connecting.clone(),
                        handed: 1,
                    };
                    (id, connecting)
                }
            }
        };
        connecting
            .await
            .map(|opened| (opened.sender, true, id, opened.offered))
    }
}

/// `request` with a body that holds `place` for as long as hyper has it:
/// its stream stays open until the body is sent. A body that is already
/// at its end is let go of as its stream opens, so it needs none.
fn holding(request: Request<Body>, place: &StreamPlace) -> Request<Body> {
    if request.body().is_end_stream() {
        return request;
    }
    request.map(|body| Holding::new(body, place.clone()).boxed_unsync())
}

/// How an upstream said that it did no processing of a stream, so that
/// the request was, in effect, never sent (RFC 9113 §8.1.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unprocessed {
    /// Reset with `REFUSED_STREAM` (§8.7): a server at its limit, which a
    /// new connection would not change; the same one, once its limit is
    /// known, may take it.
    Refused,
    /// Above the last stream its GOAWAY names (§6.8), or opened after the
    /// GOAWAY was read: the connection is closing, and another may take it.
    GoAway,
}

/// Whether the stream failed in a way that says it was never processed.
/// Any other reset (`CANCEL`, `INTERNAL_ERROR`), or a connection that broke
/// under a stream the upstream had taken, leaves its outcome unknown. h2
/// gives a stream the peer's GOAWAY as its error only when that stream is
/// above the GOAWAY's last stream, or opens after it; a stream the upstream
/// had taken gets the connection's end (a broken pipe) instead.
fn unprocessed(error: &hyper::Error) -> Option<Unprocessed> {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(h2) = cause.downcast_ref::<h2::Error>() {
            if !h2.is_remote() {
                return None;
            }
            if h2.is_go_away() {
                return Some(Unprocessed::GoAway);
            }
            return (h2.is_reset() && h2.reason() == Some(h2::Reason::REFUSED_STREAM))
                .then_some(Unprocessed::Refused);
        }
        source = cause.source();
    }
    None
}

/// A request whose body is small enough to be kept whole (read whole
/// already), so that it can go once more when an upstream's GOAWAY leaves
/// it unprocessed; a longer body streams and cannot be sent twice.
struct Resend {
    method: http::Method,
    uri: Uri,
    version: http::Version,
    headers: http::HeaderMap,
    body: Bytes,
}

impl Resend {
    /// `request` as it is sent now, and a copy to send again when its body
    /// is none or at most [`COALESCE_LIMIT`] bytes.
    async fn keep(request: Request<Body>) -> Result<(Request<Body>, Option<Self>), UpstreamError> {
        let body = request.body();
        let small = body.is_end_stream()
            || body
                .size_hint()
                .exact()
                .is_some_and(|length| length <= COALESCE_LIMIT);
        if !small {
            return Ok((request, None));
        }
        let (parts, body) = request.into_parts();
        // Such a body was read whole before it came here (`body::coalesce`,
        // a keyed request's buffer): its one frame is taken, not waited for.
        let body = body
            .collect()
            .await
            .map_err(|err| UpstreamError::RequestBody(Cause::Body(err)))?
            .to_bytes();
        let kept = Self {
            method: parts.method.clone(),
            uri: parts.uri.clone(),
            version: parts.version,
            headers: parts.headers.clone(),
            body: body.clone(),
        };
        Ok((
            Request::from_parts(parts, crate::body::full(body)),
            Some(kept),
        ))
    }

    fn request(self) -> Request<Body> {
        let mut request = Request::new(crate::body::full(self.body));
        *request.method_mut() = self.method;
        *request.uri_mut() = self.uri;
        *request.version_mut() = self.version;
        *request.headers_mut() = self.headers;
        request
    }
}

impl Holder {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        // The slot is only ever replaced whole: a panic elsewhere cannot
        // have left it half-written.
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a connect in a task of its own, so that it goes on (and ends
    /// in the slot) when every request waiting for it has given up.
    fn connect(self: &Arc<Self>) -> (u64, Connecting) {
        // Tells a connection's task whether the slot still holds it.
        static IDS: AtomicU64 = AtomicU64::new(0);
        let id = IDS.fetch_add(1, Ordering::Relaxed);
        let holder = Arc::downgrade(self);
        let dialer = self.dialer.clone();
        let target = self.target.clone();
        let first_look = self.idle_timeout.min(self.reuse.age);
        let streams = self.streams.clone();
        let task = tokio::spawn(async move {
            let opened = open(dialer, target, holder.clone(), id, first_look, streams).await;
            if let Some(holder) = holder.upgrade() {
                let mut slot = holder.lock();
                if let Slot::Connecting {
                    id: current,
                    handed,
                    ..
                } = &*slot
                    && *current == id
                {
                    *slot = match &opened {
                        // Worn out by the requests that waited for it alone.
                        Ok(_) if *handed >= holder.reuse.requests => Slot::Closed,
                        Ok(opened) => {
                            let now = Instant::now();
                            Slot::Open {
                                id,
                                sender: opened.sender.clone(),
                                connection: opened.connection.clone(),
                                last_used: now,
                                opened_at: now,
                                handed: *handed,
                                offered: opened.offered.clone(),
                            }
                        }
                        // Not kept: the next request tries again.
                        Err(_) => Slot::Closed,
                    };
                }
            }
            opened
        });
        let connecting = async move {
            task.await
                .unwrap_or_else(|err| Err(Arc::new(ConnectTaskFailed(err)) as ConnectError))
        }
        .boxed()
        .shared();
        (id, connecting)
    }

    /// Tells `streams` the limit the open connection goes by now.
    fn look_at_limit(&self) {
        let (id, connection) = match &*self.lock() {
            Slot::Open { id, connection, .. } => (*id, connection.clone()),
            _ => return,
        };
        let limit = lock(&connection).current_max_send_streams();
        self.streams.announced(id, limit);
    }

    /// Forgets connection `id` if it is still the one held and has not been
    /// used for the idle timeout, or has been open for the longest a
    /// connection takes requests; else when to look again.
    fn close_if_idle_or_old(&self, id: u64) -> Option<Instant> {
        let mut slot = self.lock();
        let Slot::Open {
            id: current,
            last_used,
            opened_at,
            ..
        } = &*slot
        else {
            return None;
        };
        if *current != id {
            return None;
        }
        let deadline = (*last_used + self.idle_timeout).min(*opened_at + self.reuse.age);
        if deadline > Instant::now() {
            return Some(deadline);
        }
        *slot = Slot::Closed;
        None
    }

    /// Forgets connection `id`, closed, going away or silent, if it is
    /// still the one held; whether it was.
    fn closed(&self, id: u64) -> bool {
        let mut slot = self.lock();
        let held = matches!(&*slot, Slot::Open { id: current, .. } if *current == id);
        if held {
            *slot = Slot::Closed;
        }
        held
    }
}

/// Dials the upstream (bounded by `connect_timeout`, `h2` by ALPN over TLS:
/// [`RequireH2`]), shakes hands, and drives the connection in a task (which
/// first looks whether to let go of it after `first_look`); from now on
/// `streams` goes by this connection's limit.
async fn open(
    mut dialer: RequireH2<H2Connector>,
    target: Uri,
    holder: Weak<Holder>,
    id: u64,
    first_look: Duration,
    streams: Arc<Http2Streams>,
) -> Result<Opened, ConnectError> {
    std::future::poll_fn(|cx| dialer.poll_ready(cx))
        .await
        .map_err(ConnectError::from)?;
    let io = dialer.call(target).await.map_err(ConnectError::from)?;
    let offered = Arc::new(io.offered());
    let (sender, connection) = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        // Stated, not left to hyper's default: `streams` starts from it.
        .initial_max_send_streams(INITIAL_LIMIT)
        // The answer heads an HTTP/1 upstream may send (hyper's HTTP/1
        // client limit), not hyper's HTTP/2 default of 16 KiB: an answer
        // with a large head (cookies, a long policy) is read, not taken for
        // a broken exchange and stored as outcome-unknown.
        .max_header_list_size(ANSWER_HEAD_LIST)
        .handshake(io)
        .await
        .map_err(|err| Arc::new(err) as ConnectError)?;
    streams.announced(id, connection.current_max_send_streams());
    let connection: Driven = Arc::new(Mutex::new(Box::pin(connection)));
    tokio::spawn(drive(connection.clone(), holder, id, first_look));
    Ok(Opened {
        sender,
        connection,
        offered,
    })
}

/// Runs the connection until it ends, dropping it from the holder when it
/// has been idle for the timeout or open for the longest it takes
/// requests: without a sender, hyper closes it (GOAWAY) as soon as the
/// streams still on it are done.
async fn drive(connection: Driven, holder: Weak<Holder>, id: u64, first_look: Duration) {
    let connection = std::future::poll_fn(|cx| lock(&connection).as_mut().poll(cx));
    let mut connection = pin!(connection);
    // Not at once: the slot holds this connection only once `open` is done.
    let mut look_at = Instant::now() + first_look;
    loop {
        tokio::select! {
            ended = &mut connection => {
                if let Err(err) = ended {
                    tracing::debug!(error = %error_chain(&err), "upstream HTTP/2 connection ended");
                }
                if let Some(holder) = holder.upgrade() {
                    holder.closed(id);
                }
                return;
            }
            () = tokio::time::sleep_until(look_at) => {
                match holder.upgrade().and_then(|holder| holder.close_if_idle_or_old(id)) {
                    Some(next) => look_at = next,
                    None => break,
                }
            }
        }
    }
    let _ = connection.await;
}

#[cfg(test)]
mod tests;
