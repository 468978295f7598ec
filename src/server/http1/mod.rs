//! The gateway's own HTTP/1.1 server connection: reads a head, hands the
//! request to the handler in the connection's task, writes the answer, and
//! goes on with the next request (pipelined ones included) while both ends
//! keep the connection.
//!
//! Not hyper's server connection, for a measured reason (docs/adr/0001-own-http1.md):
//! its dispatcher, buffers and per-head timer cost ~15k of a pass-through's
//! 36.5k instructions; with hyper's client half, hyper's HTTP/1 took more
//! than nginx spends on a whole request.

mod control_chars;
mod date;
mod reader;
pub(crate) mod request_head;
mod response;

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::BytesMut;
use http::{Method, Request, Response};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Instant;

use reader::{GoAhead, Progress, Reader, SharedReader, StreamingBody, lock};
use request_head::{Refusal, RequestHead};
use response::Facts;

use super::asterisk;
use super::idle_connections::Place;
use super::stall::WriteStall;
use crate::body::linger::{Linger, QUIET};
use crate::body::{self, Body, ClientBody};
use crate::client_info::ClientInfo;
use crate::deadline::TaskDeadline;
use crate::error::{CONTROL_CHARACTERS, GatewayError, INVALID_HOST, NON_ASCII_TARGET};
use crate::wire::chunked::ChunkedDecoder;
use crate::wire::framing::BodyKind;
use crate::wire::names::FieldNames;

/// Told of every request head a connection refuses before the handler
/// sees it (the parser's 400s and 431s), so the data plane counts and logs
/// it as it does its own refusals.
pub type OnRefusal = Arc<dyn Fn(&GatewayError, &ClientInfo) + Send + Sync>;

/// The limits of one connection.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Longest wait for a whole head, idle time before it included.
    pub header_read_timeout: Duration,
    /// `server.max_headers`, as a 431 names it.
    pub max_headers: usize,
    /// Most fields the parser takes; more: 431 and the connection closed.
    pub parsed_headers: usize,
    /// A head not complete within this many bytes is refused (431).
    pub max_head_bytes: usize,
    /// `server.max_header_bytes`, as a 431 names it.
    pub max_header_bytes: u64,
}

/// What one connection is served with, beside its stream and handler.
pub(in crate::server) struct Connection {
    pub client: Arc<ClientInfo>,
    pub settings: Settings,
    /// Turns true when the listener closes.
    pub shutdown: watch::Receiver<bool>,
    /// Told of each head refused before it is a request.
    pub on_refusal: Option<OnRefusal>,
    /// Idle (evictable at `max_connections`) while it waits for a head.
    pub place: Arc<Place>,
    /// When the first head is due: `header_read_timeout` from the accept,
    /// a TLS handshake included.
    pub first_head_due: Instant,
}

/// Serves HTTP/1 requests on `stream` until either end closes it, or
/// `shutdown` turns true (then after the answer in progress), or it is
/// closed for a newcomer while it waits for a head. `read` holds bytes
/// already read from the stream. A head refused before it is a request is
/// told to `on_refusal` before its answer is written.
pub(in crate::server) async fn serve<S, H, F>(
    stream: S,
    read: BytesMut,
    connection: Connection,
    handler: H,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    H: Fn(Request<ClientBody>, Arc<ClientInfo>) -> F,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let Connection {
        client,
        settings,
        mut shutdown,
        on_refusal,
        place,
        first_head_due,
    } = connection;
    let mut due = Some(first_head_due);
    let (read_half, write) = tokio::io::split(stream);
    // A client that takes nothing of its answer for as long as it may take
    // to send its head is cut off too.
    let mut write = WriteStall::new(write, settings.header_read_timeout);
    let reader = Reader::shared(Box::new(read_half), read);
    let mut out = Vec::with_capacity(1024);
    let mut deadline = TaskDeadline::default();
    let mut names = FieldNames::default();
    loop {
        let waiting = Waiting {
            place: &place,
            due: due.take(),
            shutdown: &mut shutdown,
        };
        let head = match next_head(&reader, settings, &mut deadline, &mut names, waiting).await {
            Next::Head(head) => head,
            Next::Closed => return,
            Next::Refused(refusal) => {
                let error = refusal_error(refusal, settings);
                if let Some(told) = &on_refusal {
                    told(&error, &client);
                }
                let _ = refuse(&mut write, &mut out, error).await;
                linger(&reader, write, &mut shutdown).await;
                return;
            }
        };
        let RequestHead {
            parts,
            framing,
            keep_alive,
            expect_continue,
        } = head;
        let facts = Facts {
            head: parts.method == Method::HEAD,
            version: parts.version,
            keep_alive,
        };
        if parts.uri == "*" {
            // `OPTIONS *` asks about the server itself, not a resource: no
            // route has it, and the gateway answers it (docs/http1.md). A
            // body it does not read closes the connection after.
            let facts = Facts {
                keep_alive: keep_alive && framing == BodyKind::Length(0) && !*shutdown.borrow(),
                ..facts
            };
            let answer = asterisk::answer(&Method::OPTIONS);
            match response::write(&mut write, &mut out, answer, facts).await {
                Ok(true) => continue,
                _ => {
                    linger(&reader, write, &mut shutdown).await;
                    return;
                }
            }
        }
        let body = request_body(&reader, framing, expect_continue);
        // Pinned in place, not boxed: no allocation, and no copy of the
        // handler's future (kilobytes) into one per request.
        let handling = std::pin::pin!(handler(Request::from_parts(parts, body), client.clone()));
        let Some(response) =
            until_client_leaves(handling, &reader, &mut write, settings.max_head_bytes).await
        else {
            return;
        };
        // A body not read to its end by now (the answer came without it: no
        // route, a refused key, an upstream that answered early) is not
        // read after it: the connection closes, and the answer says so
        // (RFC 9112 §9.6), rather than a client sending its next request
        // into a closing connection.
        let facts = Facts {
            keep_alive: facts.keep_alive && !*shutdown.borrow() && body_done(&reader),
            ..facts
        };
        match response::write(&mut write, &mut out, response, facts).await {
            Ok(true) if lock(&reader).body_done() => {}
            Ok(_) => {
                linger(&reader, write, &mut shutdown).await;
                return;
            }
            Err(err) => {
                tracing::debug!(error = %err, "answer not written whole; connection closed");
                return;
            }
        }
    }
}

/// Whether the request's body is read to its end. Once no one holds the
/// body any more (the handler answered without it), what of it is already
/// buffered is dropped: a small body that came whole with its head does
/// not cost the connection. One still held (an upstream still sending it
/// while its answer streams back) is left to its reader.
fn body_done(reader: &SharedReader) -> bool {
    let unheld = Arc::strong_count(reader) == 1;
    let mut guard = lock(reader);
    if unheld {
        guard.skip_buffered_body();
    }
    guard.body_done()
}

// Made once per request and moved straight out: boxing the head would cost
// an allocation per request to save a copy.
#[allow(clippy::large_enum_variant)]
enum Next {
    Head(RequestHead),
    Refused(Refusal),
    /// The client closed, sent nothing in time, or the listener is closing.
    Closed,
}

/// What the wait for a head heeds besides the stream.
struct Waiting<'a> {
    place: &'a Place,
    /// When the head is due, if before `header_read_timeout` from the wait.
    due: Option<Instant>,
    shutdown: &'a mut watch::Receiver<bool>,
}

/// The next request head: from what is buffered, or read within the
/// header read timeout. While it has to be waited for, the connection is
/// idle: closed for a newcomer at `max_connections` (then, as when the
/// newcomer took it just as a head came, `Closed`). A refused head is
/// no longer idle: its answer is not cut.
async fn next_head(
    reader: &SharedReader,
    settings: Settings,
    deadline: &mut TaskDeadline,
    names: &mut FieldNames,
    waiting: Waiting<'_>,
) -> Next {
    let Waiting {
        place,
        due: mut due_at,
        shutdown,
    } = waiting;
    loop {
        {
            let mut guard = lock(reader);
            if !guard.buf.is_empty() {
                match request_head::parse(
                    &mut guard.buf,
                    settings.parsed_headers,
                    settings.max_head_bytes,
                    names,
                ) {
                    Ok(Some(head)) if place.busy() => return Next::Head(head),
                    Ok(Some(_)) => return Next::Closed,
                    Ok(None) => {}
                    Err(refusal) if place.busy() => return Next::Refused(refusal),
                    Err(_) => return Next::Closed,
                }
            }
        }
        if *shutdown.borrow() {
            return Next::Closed;
        }
        // When the head must have come: from when it was first waited for.
        let due = *due_at.get_or_insert_with(|| Instant::now() + settings.header_read_timeout);
        place.idle();
        let read = poll_fn(|cx| lock(reader).poll_fill(cx));
        tokio::select! {
            biased;
            read = read => match read {
                Ok(0) | Err(_) => return Next::Closed,
                Ok(_) => {}
            },
            () = deadline.reached(due) => {
                tracing::debug!("no request head within header_read_timeout; closing");
                return Next::Closed;
            }
            _ = shutdown.changed() => return Next::Closed,
            () = place.evicted() => {
                tracing::debug!("closed for a newcomer at max_connections while waiting for a head");
                return Next::Closed;
            }
        }
    }
}

/// The request's body: whole when it arrived with its head (the usual small
/// request), else read from the connection as the handler asks (with a
/// go-ahead first, when the client waits for one).
fn request_body(reader: &SharedReader, framing: BodyKind, expect_continue: bool) -> ClientBody {
    let mut guard = lock(reader);
    guard.go_ahead = if expect_continue && !matches!(framing, BodyKind::Length(0)) {
        GoAhead::Owed(None)
    } else {
        GoAhead::None
    };
    match framing {
        // A request is never framed to the close (RFC 9112 §6.3).
        BodyKind::None | BodyKind::UntilClose | BodyKind::Length(0) => ClientBody::empty(),
        BodyKind::Length(length) if guard.buf.len() as u64 >= length => {
            let whole = guard.buf.split_to(length as usize).freeze();
            ClientBody::Full(Some(whole))
        }
        BodyKind::Length(length) => {
            guard.body = Progress::Length(length);
            ClientBody::Streamed(body::stream(StreamingBody::new(reader.clone())))
        }
        BodyKind::Chunked => {
            guard.body = Progress::Chunked(ChunkedDecoder::new());
            ClientBody::Streamed(body::stream(StreamingBody::new(reader.clone())))
        }
    }
}

/// Runs the handler; `None` when the client's connection broke first (its
/// answer would have nowhere to go). A client that only closed its sending
/// side (a half-close: FIN after its request) still waits for its answer,
/// as HAProxy and Envoy assume; the connection closes after it, when the
/// next read finds the end. Writes the go-ahead when the
/// handler wants a body the client waits to send. Once the request's body
/// is read, what the client sends next (a pipelined request) is kept for
/// later.
async fn until_client_leaves<F, W>(
    mut handling: Pin<&mut F>,
    reader: &SharedReader,
    write: &mut W,
    max_buffered: usize,
) -> Option<Response<Body>>
where
    F: Future<Output = Response<Body>>,
    W: AsyncWrite + Unpin,
{
    let mut go_ahead_sent = 0;
    let mut half_closed = false;
    poll_fn(|cx| {
        if let Poll::Ready(response) = handling.as_mut().poll(cx) {
            return Poll::Ready(Some(response));
        }
        let mut guard = lock(reader);
        match &mut guard.go_ahead {
            GoAhead::None => {}
            GoAhead::Owed(waker) => {
                if !waker
                    .as_ref()
                    .is_some_and(|known| known.will_wake(cx.waker()))
                {
                    *waker = Some(cx.waker().clone());
                }
            }
            GoAhead::Wanted => match poll_go_ahead(write, &mut go_ahead_sent, cx) {
                Poll::Ready(Ok(())) => guard.go_ahead = GoAhead::None,
                Poll::Ready(Err(_)) => return Poll::Ready(None),
                Poll::Pending => {}
            },
        }
        // While the body is unread it is the handler's to read.
        if !guard.body_done() || half_closed {
            return Poll::Pending;
        }
        while guard.buf.len() < max_buffered {
            match guard.poll_fill(cx) {
                Poll::Ready(Ok(0)) => {
                    half_closed = true;
                    return Poll::Pending;
                }
                Poll::Ready(Err(_)) => return Poll::Ready(None),
                Poll::Ready(Ok(_)) => {}
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Pending
    })
    .await
}

const GO_AHEAD: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Writes what is left of the go-ahead, then flushes it (TLS buffers).
fn poll_go_ahead<W: AsyncWrite + Unpin>(
    write: &mut W,
    sent: &mut usize,
    cx: &mut Context<'_>,
) -> Poll<std::io::Result<()>> {
    while *sent < GO_AHEAD.len() {
        let written = ready!(Pin::new(&mut *write).poll_write(cx, &GO_AHEAD[*sent..]))?;
        if written == 0 {
            return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
        }
        *sent += written;
    }
    Pin::new(write).poll_flush(cx)
}

/// A problem like every other error, though the head never reached the
/// gateway: clients branch on its `code`.
fn refusal_error(refusal: Refusal, settings: Settings) -> GatewayError {
    tracing::debug!(?refusal, "refused a request head");
    match refusal {
        Refusal::Malformed => GatewayError::BadRequest("the request is not valid HTTP/1.1"),
        Refusal::TooLarge => GatewayError::HeaderTooLarge {
            limit: settings.max_header_bytes,
        },
        Refusal::TooManyHeaders => GatewayError::TooManyHeaders {
            limit: settings.max_headers,
        },
        Refusal::Ambiguous => GatewayError::BadRequest(
            "a request may not carry both Content-Length and Transfer-Encoding",
        ),
        Refusal::InvalidLength => GatewayError::BadRequest("invalid Content-Length"),
        Refusal::Host => {
            GatewayError::BadRequest("an HTTP/1.1 request must carry exactly one Host header field")
        }
        Refusal::InvalidHost => INVALID_HOST,
        Refusal::Coding => GatewayError::BadRequest(
            "Transfer-Encoding may only be chunked; no other transfer coding is supported",
        ),
        Refusal::Http10Coding => {
            GatewayError::BadRequest("an HTTP/1.0 request may not carry Transfer-Encoding")
        }
        Refusal::ControlCharacters => CONTROL_CHARACTERS,
        Refusal::FramingLookAlike => GatewayError::BadRequest(
            "a field name that reads as Transfer-Encoding or Content-Length with '_' for '-' is not accepted",
        ),
        Refusal::Asterisk => asterisk::NOT_OPTIONS,
        Refusal::LongMethod => GatewayError::BadRequest("the request method is too long"),
        Refusal::NonAsciiTarget => NON_ASCII_TARGET,
        Refusal::Version => GatewayError::BadRequest("only HTTP/1.x is spoken on this port"),
    }
}

async fn refuse<W: AsyncWrite + Unpin>(
    write: &mut W,
    out: &mut Vec<u8>,
    error: GatewayError,
) -> std::io::Result<()> {
    let facts = Facts {
        head: false,
        version: http::Version::HTTP_11,
        keep_alive: false,
    };
    response::write(write, out, error.to_response(), facts).await?;
    Ok(())
}

/// What a request in clear on a TLS listener is answered, over HTTP/1 or
/// HTTP/2 (server::listener).
pub const PLAIN_ON_TLS: GatewayError =
    GatewayError::BadRequest("this port speaks HTTPS; send the request over TLS");

/// A plain HTTP/1 request on a TLS listener: a 400 problem it can read, in
/// clear, rather than a TLS alert its client would show as garbage; then
/// the connection is closed (reading on as [`linger`] does, `shutdown`
/// likewise).
pub async fn refuse_plain_on_tls<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    mut shutdown: watch::Receiver<bool>,
) {
    let error = PLAIN_ON_TLS;
    let facts = Facts {
        head: false,
        version: http::Version::HTTP_11,
        keep_alive: false,
    };
    let mut out = Vec::new();
    if response::write(&mut stream, &mut out, error.to_response(), facts)
        .await
        .is_err()
    {
        return;
    }
    let _ = stream.shutdown().await;
    // The unread request is drained while it comes, or the kernel could
    // reset the connection before the client read the answer.
    let mut sink = [0u8; 4096];
    let linger = Linger::start();
    let reading = async {
        while linger
            .read(async {
                matches!(tokio::io::AsyncReadExt::read(&mut stream, &mut sink).await, Ok(n) if n > 0)
            })
            .await
        {}
    };
    read_on(reading, &mut shutdown).await;
}

/// Closes the connection after its last answer: the write side first, then
/// whatever the client still sends is read and dropped while it comes
/// (`body::linger`), so that unread bytes do not make the kernel reset the
/// connection before the client has read the answer. Once the listener is
/// closing, for [`QUIET`] more at most: the answer is given, and a client
/// still sending does not hold the process's exit for its grace.
async fn linger<W: AsyncWrite + Unpin>(
    reader: &SharedReader,
    mut write: W,
    shutdown: &mut watch::Receiver<bool>,
) {
    let _ = write.shutdown().await;
    let linger = Linger::start();
    let one_read = || {
        poll_fn(|cx| {
            let mut guard = lock(reader);
            guard.buf.clear();
            match guard.poll_fill(cx) {
                Poll::Ready(Ok(0) | Err(_)) => Poll::Ready(false),
                Poll::Ready(Ok(_)) => Poll::Ready(true),
                Poll::Pending => Poll::Pending,
            }
        })
    };
    read_on(async { while linger.read(one_read()).await {} }, shutdown).await;
}

/// Runs `reading` (a connection's reading on after its last answer) to its
/// end, or once the listener is closing, for [`QUIET`] more at most.
async fn read_on(reading: impl Future<Output = ()>, shutdown: &mut watch::Receiver<bool>) {
    tokio::pin!(reading);
    tokio::select! {
        () = &mut reading => return,
        // The sender gone is a listener gone: closing too.
        _ = shutdown.wait_for(|closing| *closing) => {}
    }
    let _ = tokio::time::timeout(QUIET, reading).await;
}
