//! One accept loop for both planes: HTTP/1.1 through the gateway's own
//! connection (http1/), HTTP/2 through hyper's (h2c with prior knowledge in
//! clear, ALPN over TLS), a bound on open connections (at which a newcomer
//! takes the place of a connection with no request in progress:
//! `idle_connections`), and graceful
//! shutdown that lets requests in flight finish within a grace period; a
//! keyed request still at its upstream when the grace ends is recorded as
//! outcome-unknown (504) before the process exits (docs/operating.md).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::future::Either;
use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError, watch};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::accept_failure;
use super::asterisk;
use super::http1;
use super::http2_activity::{Activity, Busy, Tracked};
use super::idle_connections::{IdleConnections, OnEviction, Place};
use super::prefixed::Prefixed;
use super::tls_refusal::{OnTlsRefusal, TlsRefusal};
use crate::body::{self, Body, ClientBody, Http2Body, Lingering, StreamWatch, Watched};
use crate::client_info::ClientInfo;
use crate::tls::TlsSettings;
use http1::OnRefusal;

#[derive(Clone)]
pub struct Limits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub max_header_bytes: u64,
    pub max_headers: usize,
    /// Fields the HTTP/1 parser admits beyond `max_headers`, for a handler
    /// that holds each head to `max_headers` itself (the data plane, so a
    /// forwarding region's own fields are not refused).
    pub extra_fields: usize,
    pub shutdown_grace: Duration,
    /// Cancelled to end the grace before its time (a second SIGTERM).
    pub abandon: CancellationToken,
    pub tls: Option<TlsSettings>,
    /// Work detached from the requests that started it (keyed executions):
    /// waited for, within the grace, after the connections closed.
    pub detached: TaskTracker,
    /// Cancelled once the grace is over (or ended by a second signal): the
    /// detached work still running then stops and records what it knows,
    /// waited for [`CUT_OFF_WAIT`] at most.
    pub cut_off: CancellationToken,
    /// `None`: refusals are answered and not told (the admin plane).
    pub on_refusal: Option<OnRefusal>,
    /// Told each connection a TLS listener closes unserved (both planes).
    pub on_tls_refusal: Option<OnTlsRefusal>,
    /// Told each connection closed for a newcomer at `max_connections`.
    pub on_eviction: Option<OnEviction>,
}

/// How long, once the grace is over, the listener waits for the detached
/// work it cut off to record itself (a store write: milliseconds, unless the
/// store is away) before the process ends anyway.
pub const CUT_OFF_WAIT: Duration = Duration::from_secs(2);

/// How often a draining HTTP/2 connection is looked at: one idle from one
/// look to the next is closed. Ample for a live client's PING answer.
const DRAIN_LOOK: Duration = Duration::from_secs(1);

/// How long answers made at the cut-off get to reach their clients.
const CUT_OFF_ANSWERS: Duration = Duration::from_millis(200);

/// Streams an HTTP/2 client may have open at once on one connection.
const HTTP2_MAX_STREAMS: u32 = 200;
/// The bytes of request bodies an HTTP/2 client may send ahead of the
/// gateway's reads, on one stream and on the whole connection (hyper's own
/// defaults, written out): what a connection's unread bodies can hold in
/// memory, and what one stalled upload can take from the connection's
/// other bodies (docs/behaviour.md, "Memory").
const HTTP2_WINDOW: u32 = 1024 * 1024;
/// Streams a client reset before they were accepted, pending at once, past
/// which the connection is closed (h2's own default).
const HTTP2_MAX_PENDING_RESETS: usize = 20;
/// Streams the gateway reset for a client's protocol errors, past which the
/// connection is closed (hyper's own default).
const HTTP2_MAX_ERROR_RESETS: usize = 1024;

/// What opens an HTTP/2 connection (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The client's address as the upstream (`X-Forwarded-For`) and the log are
/// told it: an IPv4 client of a dual-stack `[::]` listener is accepted with
/// an IPv4-mapped address (`::ffff:192.0.2.1`), and is the IPv4 client it
/// would be on `0.0.0.0` (docs/configuration.md#server).
fn client_address(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// Serves `handler` on `listener` until `shutdown` is cancelled, then waits up
/// to the grace period for open connections and detached keyed executions
/// to finish; past it, cuts those executions off (`cut_off`) and waits
/// [`CUT_OFF_WAIT`] at most for them to record an outcome-unknown answer
/// (or, one not yet sent, to free its key).
pub async fn serve<H, F>(
    name: &'static str,
    listener: TcpListener,
    limits: Limits,
    handler: H,
    shutdown: CancellationToken,
) where
    H: Fn(Request<ClientBody>, Arc<ClientInfo>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    // Every connection holds a receiver: told to close, and counted by it.
    let (closing, closing_seen) = watch::channel(false);
    // At the limit, a newcomer takes the place of the connection idle
    // longest; with none idle, it waits for a slot, and the connections
    // after it in the kernel's backlog.
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let idle = Arc::new(IdleConnections::default());
    let settings = http1::Settings {
        header_read_timeout: limits.header_read_timeout,
        max_headers: limits.max_headers,
        parsed_headers: limits.max_headers.saturating_add(limits.extra_fields),
        max_head_bytes: head_buffer(&limits),
        max_header_bytes: limits.max_header_bytes,
    };

    loop {
        let (stream, addr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    accept_failure::log_accept_failure(name, &err);
                    tokio::time::sleep(accept_failure::RETRY).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let addr = client_address(addr);
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(TryAcquireError::NoPermits) => {
                match take_a_place(name, &permits, &idle, &limits, &shutdown).await {
                    Some(permit) => permit,
                    None => break,
                }
            }
            Err(TryAcquireError::Closed) => break,
        };
        let _ = stream.set_nodelay(true);
        // The head (and, over TLS, the handshake before it) is due by then.
        let due = tokio::time::Instant::now() + limits.header_read_timeout;
        let connection = Connection {
            name,
            settings,
            closing: closing_seen.clone(),
            shutdown: shutdown.clone(),
            handler: handler.clone(),
            on_refusal: limits.on_refusal.clone(),
            on_tls_refusal: limits.on_tls_refusal.clone(),
            place: idle.open(),
            due,
        };
        let tls = limits.tls.as_ref().map(|tls| tls.load_full());
        tokio::spawn(async move {
            match tls {
                None => {
                    let client = Arc::new(ClientInfo::new(addr, "http", None));
                    connection.serve_stream(stream, client, false).await;
                }
                Some(config) => connection.serve_tls(stream, addr, config).await,
            }
            drop(permit);
        });
    }
    drop(listener);
    drop(closing_seen);
    let open = closing.receiver_count();
    if open > 0 {
        tracing::info!(listener = name, open, "draining connections");
    }
    let _ = closing.send(true);
    limits.detached.close();
    // A client that reset its stream or closed its connection has left its
    // keyed execution running: the process stays until it is recorded.
    let finished = async {
        closing.closed().await;
        limits.detached.wait().await;
    };
    let over = tokio::select! {
        () = finished => false,
        () = tokio::time::sleep(limits.shutdown_grace) => {
            tracing::warn!(listener = name, "shutdown grace elapsed; closing the remaining connections");
            true
        }
        () = limits.abandon.cancelled() => true,
    };
    if over && !limits.detached.is_empty() {
        let cut = limits.detached.len();
        tracing::warn!(
            listener = name,
            executions = cut,
            "keyed requests still running are cut off: those sent are recorded as outcome-unknown, those not yet sent free their keys"
        );
        limits.cut_off.cancel();
        if tokio::time::timeout(CUT_OFF_WAIT, limits.detached.wait())
            .await
            .is_err()
        {
            tracing::error!(
                listener = name,
                left = limits.detached.len(),
                "shutdown: keyed requests could not be recorded in time; their keys stay in flight until their leases expire"
            );
        }
        // Their clients, where still connected, get those answers.
        let _ = tokio::time::timeout(CUT_OFF_ANSWERS, closing.closed()).await;
    }
}

/// A slot for a connection accepted at the limit: the one the connection
/// idle longest gives back once told to close, or, none being idle, the
/// first one given back (told of each connection that becomes idle
/// meanwhile, to take its place). `None` once the listener is closing.
async fn take_a_place(
    name: &'static str,
    permits: &Arc<Semaphore>,
    idle: &IdleConnections,
    limits: &Limits,
    shutdown: &CancellationToken,
) -> Option<OwnedSemaphorePermit> {
    loop {
        let idle_one = idle.idle_one();
        if idle.evict_oldest() {
            tracing::debug!(
                listener = name,
                "at max_connections: closed the connection idle longest"
            );
            if let Some(count) = &limits.on_eviction {
                count(name);
            }
            // Its task ends at once, giving its slot back.
            return tokio::select! {
                permit = permits.clone().acquire_owned() => permit.ok(),
                () = shutdown.cancelled() => None,
            };
        }
        tokio::select! {
            permit = permits.clone().acquire_owned() => return permit.ok(),
            () = idle_one => {}
            () = shutdown.cancelled() => return None,
        }
    }
}

/// The largest head a connection buffers: twice the configured limit, so a
/// head a little over it still reaches the gateway, which answers it with a
/// problem document; far over, the connection answers a bare 431.
fn head_buffer(limits: &Limits) -> usize {
    usize::try_from(limits.max_header_bytes.saturating_mul(2))
        .unwrap_or(usize::MAX)
        .max(8192)
}

/// A HEAD answer is its head only, over HTTP/2 as over HTTP/1 (RFC 9110
/// §9.3.2; RFC 9113 §8.1.1 makes one with content malformed, and clients
/// reset it): hyper sends whatever body it is given, and the gateway's own
/// answers (problems, probes, `/metrics`) are built as for GET. Their
/// `Content-Length`, where the handler gave one, stays: an ended body makes
/// hyper add none of its own.
fn leave_out_body(response: &mut Response<Body>) {
    if !http_body::Body::is_end_stream(response.body()) {
        *response.body_mut() = body::empty();
    }
}

/// A request in clear on a TLS listener: a 400 its client can read, over
/// HTTP/1, or as HTTP/2 when it opens with the HTTP/2 preface (prior
/// knowledge: an HTTP/1 answer is no answer to that client), then the
/// connection is closed. Telling the two apart, and an HTTP/2 connection,
/// end by `deadline`.
async fn refuse_plain_on_tls(
    mut stream: TcpStream,
    deadline: tokio::time::Instant,
    closing: watch::Receiver<bool>,
) {
    let mut read = BytesMut::with_capacity(H2_PREFACE.len());
    while read.len() < H2_PREFACE.len() && H2_PREFACE.starts_with(&read) {
        match tokio::time::timeout_at(deadline, stream.read_buf(&mut read)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => break,
        }
    }
    if !read.starts_with(H2_PREFACE) {
        http1::refuse_plain_on_tls(stream, closing).await;
        return;
    }
    let stream = Prefixed::new(read.freeze(), stream);
    // Each request gets the 400 until the client closes or `deadline`;
    // then the connection is dropped. No GOAWAY: a graceful one comes with
    // a PING, which some clients (python-h2) fail the connection on, the
    // answer with it.
    let refuse = async {
        // Small bounds: nothing of these requests is read but their heads.
        let handshake = h2::server::Builder::new()
            .max_concurrent_streams(8)
            .max_header_list_size(64 * 1024)
            .handshake(stream);
        let Ok(mut connection) = handshake.await else {
            return;
        };
        while let Some(Ok((_, mut respond))) = connection.accept().await {
            let (parts, body) = http1::PLAIN_ON_TLS.to_response().into_parts();
            let Ok(body) = http_body_util::BodyExt::collect(body).await else {
                return;
            };
            if let Ok(mut send) = respond.send_response(Response::from_parts(parts, ()), false) {
                let _ = send.send_data(body.to_bytes(), true);
            }
        }
    };
    let _ = tokio::time::timeout_at(deadline, refuse).await;
}

/// The largest header list HTTP/2 decodes (hyper's bound; past it hyper
/// answers a bare 431 of its own, which the gateway never sees or counts):
/// four times the configured limit, at least 64 KiB, so that a head a
/// client sent over the limit by mistake still reaches the gateway and gets
/// its problem document. Not more: hyper decodes a whole list before the
/// gateway refuses it, up to this much for each of a connection's streams.
fn http2_header_list(max_header_bytes: u64) -> u32 {
    u32::try_from(max_header_bytes.saturating_mul(4))
        .unwrap_or(u32::MAX)
        .max(64 * 1024)
}

struct Connection<H> {
    name: &'static str,
    settings: http1::Settings,
    closing: watch::Receiver<bool>,
    /// Cancelled when the listener starts closing: an HTTP/2 body read on
    /// after its early answer heeds it (`body::Lingering`).
    shutdown: CancellationToken,
    handler: H,
    on_refusal: Option<OnRefusal>,
    on_tls_refusal: Option<OnTlsRefusal>,
    /// Idle (evictable) while no request is in progress.
    place: Arc<Place>,
    /// `header_read_timeout` from the accept: the TLS handshake and the
    /// first head share it.
    due: tokio::time::Instant,
}

impl<H, F> Connection<H>
where
    H: Fn(Request<ClientBody>, Arc<ClientInfo>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    async fn serve_tls(
        self,
        stream: TcpStream,
        addr: SocketAddr,
        config: Arc<rustls::ServerConfig>,
    ) {
        let deadline = self.due;
        let refused = |refusal: TlsRefusal| {
            refusal.report(self.name, addr, self.on_tls_refusal.as_ref());
        };
        // A TLS connection opens with a handshake record (0x16); an HTTP
        // request opens with its method's letters.
        let mut first = [0u8; 1];
        let peek = tokio::time::timeout_at(deadline, stream.peek(&mut first));
        let peeked = tokio::select! {
            peeked = peek => peeked,
            () = self.place.evicted() => return,
        };
        match peeked {
            Ok(Ok(0) | Err(_)) => {
                tracing::debug!(listener = self.name, %addr, "closed before its first byte");
                return;
            }
            Err(_) => {
                refused(TlsRefusal::Silent);
                return;
            }
            Ok(Ok(_)) if first[0].is_ascii_uppercase() => {
                refused(TlsRefusal::PlainHttp);
                tokio::select! {
                    () = refuse_plain_on_tls(stream, deadline, self.closing.clone()) => {}
                    () = self.place.evicted() => {}
                }
                return;
            }
            Ok(Ok(_)) => {}
        }
        let handshake = TlsAcceptor::from(config).accept(stream);
        let handshake = tokio::select! {
            handshake = tokio::time::timeout_at(deadline, handshake) => handshake,
            () = self.place.evicted() => return,
        };
        let stream = match handshake {
            Ok(Ok(stream)) => stream,
            Ok(Err(err)) => {
                refused(TlsRefusal::of_handshake(err));
                return;
            }
            Err(_) => {
                refused(TlsRefusal::Timeout);
                return;
            }
        };
        let session = stream.get_ref().1;
        let cert_subject = session
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|cert| crate::tls::certificate_subject(cert));
        let h2 = session.alpn_protocol() == Some(b"h2");
        let client = Arc::new(ClientInfo::new(addr, "https", cert_subject));
        self.serve_stream(stream, client, h2).await;
    }

    /// HTTP/2 when ALPN chose it or the client opens with its preface;
    /// HTTP/1 otherwise.
    async fn serve_stream<S>(self, mut stream: S, client: Arc<ClientInfo>, h2: bool)
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let mut read = BytesMut::with_capacity(8192);
        if !h2 {
            // Read until the bytes are, or cannot be, the HTTP/2 preface. A
            // connection that sends nothing (or a bare "P") in time is closed.
            while read.len() < H2_PREFACE.len() && H2_PREFACE.starts_with(&read) {
                let more = tokio::select! {
                    more = tokio::time::timeout_at(self.due, stream.read_buf(&mut read)) => more,
                    () = self.place.evicted() => return,
                };
                match more {
                    Ok(Ok(n)) if n > 0 => {}
                    _ => {
                        tracing::debug!(listener = self.name, "no request head in time; closing");
                        return;
                    }
                }
            }
        }
        if h2 || read.starts_with(H2_PREFACE) {
            let stream = Prefixed::new(read.freeze(), stream);
            self.serve_h2(TokioIo::new(stream), client).await;
        } else {
            let (settings, handler, closing) = (self.settings, self.handler, self.closing);
            let connection = http1::Connection {
                client,
                settings,
                shutdown: closing,
                on_refusal: self.on_refusal,
                place: self.place,
                first_head_due: self.due,
            };
            http1::serve(stream, read, connection, handler).await;
        }
    }

    async fn serve_h2<I>(self, io: I, client: Arc<ClientInfo>)
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let handler = self.handler;
        let activity = Arc::new(Activity::new(self.place.clone()));
        let seen = activity.clone();
        let lingering = Lingering {
            closing: self.shutdown,
            connection: activity.clone(),
        };
        let service = service_fn(move |request: Request<Incoming>| {
            let busy = Busy::new(seen.clone());
            let head = request.method() == Method::HEAD;
            let response = if request.uri().path() == "*" {
                // As over HTTP/1: the server's own answer, no route's.
                Either::Right(std::future::ready(asterisk::answer(request.method())))
            } else {
                let watch =
                    Http2Body::needs_watch(request.body()).then(Arc::<StreamWatch>::default);
                // Read on after an early answer: work in progress on this
                // connection, which the idle check below does not close.
                let request = request.map(|body| {
                    ClientBody::Http2(
                        Http2Body::new(body, watch.clone()).lingering(lingering.clone()),
                    )
                });
                // Boxed: the handler's future is kilobytes.
                Either::Left(Watched::new(
                    Box::pin(handler(request, client.clone())),
                    watch,
                ))
            };
            async move {
                // Counted until hyper is done with the answer's body too.
                let mut response = response.await;
                if head {
                    leave_out_body(&mut response);
                }
                let response = response.map(|body| Tracked::new(body, busy));
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        builder
            .timer(TokioTimer::new())
            .max_header_list_size(http2_header_list(self.settings.max_header_bytes))
            // Written out, not left to hyper's and h2's defaults (which they
            // may change): the stream limit and windows a client sees
            // (docs/behaviour.md), and the bounds on resets that close a connection flooding
            // them (rapid reset, CVE-2023-44487).
            .max_concurrent_streams(HTTP2_MAX_STREAMS)
            .initial_stream_window_size(HTTP2_WINDOW)
            .initial_connection_window_size(HTTP2_WINDOW)
            .max_pending_accept_reset_streams(HTTP2_MAX_PENDING_RESETS)
            .max_local_error_reset_streams(HTTP2_MAX_ERROR_RESETS);
        let connection = builder.serve_connection(io, service);
        tokio::pin!(connection);
        let mut closing = self.closing;
        // A connection with no request by the header read timeout (from
        // the accept, the TLS handshake included) is closed. So is one idle
        // (no request started, none in progress) from one check to the
        // next, as HTTP/1 closes an idle keep-alive connection: else
        // `max_connections` clients that each sent one request would hold
        // every slot for good.
        let idle_limit = self.settings.header_read_timeout;
        let idle = tokio::time::sleep_until(self.due);
        tokio::pin!(idle);
        let mut started_before = 0;
        let mut idle_closing = false;
        let mut evicted = false;
        // Once the listener closes: what had started by the last look
        // (`DRAIN_LOOK`), and when to look again.
        let mut draining: Option<usize> = None;
        let drain_look = tokio::time::sleep(DRAIN_LOOK);
        tokio::pin!(drain_look);
        loop {
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(err) = result
                        && !super::h2_flood::log_if_h2_flood(self.name, &err)
                    {
                        tracing::debug!(listener = self.name, error = %err, "connection ended with an error");
                    }
                    return;
                }
                () = idle.as_mut() => {
                    let started = activity.started();
                    if started == 0 {
                        tracing::debug!(listener = self.name, "no request in time; closing");
                        return;
                    }
                    // An answer waited on the client a whole period, and it
                    // took nothing of it: closed, as HTTP/1 closes a
                    // connection whose answer makes no progress.
                    if activity.stalled() {
                        tracing::debug!(listener = self.name, "HTTP/2 client took nothing of an answer; closing");
                        return;
                    }
                    let idle_now = started == started_before && activity.busy() == 0;
                    if idle_now && idle_closing {
                        // A client that acknowledges no GOAWAY (hyper waits
                        // for its PING back) is not waited on for ever.
                        tracing::debug!(listener = self.name, "idle HTTP/2 connection did not close; dropping it");
                        return;
                    }
                    if idle_now {
                        tracing::debug!(listener = self.name, "idle HTTP/2 connection; closing");
                        connection.as_mut().graceful_shutdown();
                        idle_closing = true;
                    }
                    started_before = started;
                    idle.as_mut().reset(tokio::time::Instant::now() + idle_limit);
                }
                // A client that answers the GOAWAY's PING is let go by
                // hyper once its streams end; one that answers nothing (a
                // peer gone, a client that reads only while it waits for
                // an answer) would hold the drain for the whole grace.
                // With nothing in progress and nothing new started since
                // the last look, it is closed, as an idle HTTP/1
                // connection is at once.
                () = drain_look.as_mut(), if draining.is_some() => {
                    let started = activity.started();
                    if draining == Some(started) && activity.busy() == 0 {
                        tracing::debug!(listener = self.name, "HTTP/2 client did not close after the shutdown's GOAWAY; dropping it");
                        return;
                    }
                    draining = Some(started);
                    drain_look.as_mut().reset(tokio::time::Instant::now() + DRAIN_LOOK);
                }
                // Closed for a newcomer, with no stream open (streams start
                // only while this task polls the connection, so none can
                // between the check and the drop). One started just before
                // the eviction finishes: the connection then ends as at
                // a shutdown.
                () = self.place.evicted(), if !evicted => {
                    if activity.busy() == 0 {
                        tracing::debug!(listener = self.name, "idle HTTP/2 connection closed for a newcomer");
                        return;
                    }
                    evicted = true;
                    connection.as_mut().graceful_shutdown();
                }
                changed = closing.changed() => {
                    connection.as_mut().graceful_shutdown();
                    if changed.is_err() {
                        // The listener is gone; the connection ends as it will.
                        let _ = connection.as_mut().await;
                        return;
                    }
                    draining = Some(activity.started());
                    drain_look.as_mut().reset(tokio::time::Instant::now() + DRAIN_LOOK);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Connections that send nothing (or an unfinished HTTP/2 preface) are
    /// timed out: else `max_connections` of them lock the listener out
    /// (tests/bad_input.rs).
    #[tokio::test]
    async fn silent_connections_are_closed_after_header_read_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let limits = Limits {
            max_connections: 1,
            header_read_timeout: Duration::from_millis(200),
            max_header_bytes: 8192,
            max_headers: 100,
            extra_fields: 0,
            shutdown_grace: Duration::from_millis(100),
            abandon: CancellationToken::new(),
            tls: None,
            detached: TaskTracker::new(),
            cut_off: CancellationToken::new(),
            on_refusal: None,
            on_tls_refusal: None,
            on_eviction: None,
        };
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve(
            "test",
            listener,
            limits,
            |_request, _client| async { Response::new(crate::body::empty()) },
            shutdown.clone(),
        ));
        // With one slot, each connection is served only once the one before
        // it was closed.
        for sent in [&b""[..], b"P", b"PRI * HTTP/2.0\r\n"] {
            let mut stream = TcpStream::connect(addr).await.expect("connect");
            stream.write_all(sent).await.expect("write");
            let mut buf = [0u8; 64];
            let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await;
            assert!(
                matches!(read, Ok(Ok(0)) | Ok(Err(_))),
                "{sent:?}: not closed: {read:?}"
            );
        }
        shutdown.cancel();
        let _ = server.await;
    }
}
