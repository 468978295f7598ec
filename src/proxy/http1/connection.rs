//! One connection to an HTTP/1 upstream: writes a request, reads the answer
//! head, and keeps what was read past it for the body.

use std::io;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use http::Method;
use http::request::Parts;
use http_body::Body as _;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};

use super::request_head;
use super::response_head::{self, AnswerHead};
use super::stream::UpstreamStream;
use crate::body::Body;
use crate::deadline::Deadline;
use crate::proxy::connection_reuse::{MAX_AGE, MAX_REQUESTS};
use crate::proxy::error::Cause;
use crate::proxy::progress::Progress;
use crate::wire::framing::BodyKind;
use crate::wire::names::FieldNames;

/// Bodies up to this size leave in the same write as the head (a copy of a
/// few KiB costs less than a second packet).
const INLINE_BODY: u64 = 16 * 1024;
/// Room made in the read buffer before each read.
const READ_CHUNK: usize = 8 * 1024;

pub struct Connection {
    stream: UpstreamStream,
    /// Bytes read and not yet consumed: the rest of a head, or body bytes.
    buf: BytesMut,
    /// An answer head has come on this connection, so its TLS handshake
    /// was accepted (every answer starts with a head read here).
    received: bool,
    /// The timer each request's upstream timeout runs on, kept with the
    /// connection; out of it while a request is on the way.
    deadline: Option<Deadline>,
    /// The last answer's field names, which the next one mostly repeats.
    names: FieldNames,
    /// Interim answers read for the request in progress.
    interim: usize,
    /// Seconds the upstream keeps this connection open while idle, as its
    /// last answer said (0 is kept as 1, which is not kept either). Seconds
    /// in four bytes, not a `Duration`: every answer body holds its
    /// connection, and is moved.
    idle_timeout: Option<NonZeroU32>,
    /// Answers read to the end on it, and when it was opened.
    served: u32,
    opened_at: Instant,
}

/// Why no answer head came.
#[derive(Debug)]
pub enum NoAnswer {
    /// The upstream's TLS refused the connection (our client certificate,
    /// or the handshake) before it sent a byte. Under TLS 1.3 the client
    /// finishes its side of the handshake and writes the request before the
    /// server has judged its certificate, so the refusal comes where an
    /// answer was awaited; but a server that refused the handshake never
    /// took the request.
    Refused(Cause),
    /// The connection failed or the answer was not HTTP: the request may
    /// have run.
    Broken(Cause),
    /// The connection ended (closed or reset) before a byte of an answer:
    /// as `Broken`, but on a reused connection also what an upstream's
    /// keep-alive close crossing our request looks like.
    Silent(Cause),
}

/// A request written.
#[derive(Debug)]
pub struct Written {
    /// All of it went out; `false`: the upstream began answering before it
    /// had the whole body, and sending stopped there.
    pub whole: bool,
    /// Its bytes, when its method is idempotent and it was encoded whole:
    /// it may go again if a reused connection ends without an answer.
    pub again: Option<Encoded>,
}

/// How writing a request failed.
#[derive(Debug)]
pub struct WriteError {
    /// The whole head went out, so the upstream may already be answering.
    /// `false`: the upstream cannot have taken the request (a head it did
    /// not get in full is not a request).
    pub head_sent: bool,
    /// The client's body failed (cut short, or the client left), not the
    /// connection: the upstream has at most part of a request, and no
    /// answer to wait for.
    pub client_body: bool,
    pub cause: Cause,
    /// With `head_sent: false`, the request as encoded when it can be
    /// written again as is on another connection (a head and a body of at
    /// most `INLINE_BODY`, both already read from the client).
    pub resend: Option<Encoded>,
}

impl WriteError {
    fn new(head_sent: bool, cause: Cause) -> Self {
        Self {
            head_sent,
            client_body: false,
            cause,
            resend: None,
        }
    }

    fn client_body(head_sent: bool, cause: Cause) -> Self {
        Self {
            client_body: true,
            ..Self::new(head_sent, cause)
        }
    }
}

/// What came first while a streamed body was forwarded.
enum Piece {
    Frame(Result<http_body::Frame<bytes::Bytes>, crate::body::BoxError>),
    End,
    /// The upstream's final answer began.
    Answered,
}

/// A request's bytes as they go on the wire: its head, then its body.
#[derive(Debug)]
pub struct Encoded {
    pub bytes: Vec<u8>,
    pub head_len: usize,
}

impl Connection {
    pub fn new(stream: UpstreamStream) -> Self {
        Self {
            stream,
            buf: BytesMut::new(),
            received: false,
            deadline: None,
            names: FieldNames::default(),
            interim: 0,
            idle_timeout: None,
            served: 0,
            opened_at: Instant::now(),
        }
    }

    /// Counts an answer read to the end; whether the connection may carry
    /// another request (`MAX_REQUESTS`, `MAX_AGE`).
    pub fn served_one(&mut self, now: Instant) -> bool {
        self.served += 1;
        self.served < MAX_REQUESTS && now.saturating_duration_since(self.opened_at) < MAX_AGE
    }

    /// How long the upstream keeps this connection open while idle
    /// (`Keep-Alive: timeout=N` on its last answer), if it said.
    pub fn idle_timeout(&self) -> Option<Duration> {
        self.idle_timeout
            .map(|seconds| Duration::from_secs(seconds.get().into()))
    }

    /// The connection's timer, for the request about to go out on it.
    pub fn take_deadline(&mut self) -> Deadline {
        self.deadline.take().unwrap_or_default()
    }

    /// Gives the timer back for the next request.
    pub fn keep_deadline(&mut self, deadline: Deadline) {
        self.deadline = Some(deadline);
    }

    /// Whether an idle connection can carry a request: the upstream has
    /// neither closed it nor sent anything unasked. Looks without waiting
    /// (and without a system call when nothing has arrived since the last
    /// read).
    pub fn is_open(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let mut cx = Context::from_waker(Waker::noop());
        let mut probe = [0u8; 1];
        let mut probe = ReadBuf::new(&mut probe);
        matches!(
            Pin::new(&mut self.stream).poll_read(&mut cx, &mut probe),
            Poll::Pending
        )
    }

    /// Writes the request's head and body. Each piece of a streamed body
    /// written marks `progress`.
    pub async fn write_request(
        &mut self,
        parts: &Parts,
        mut body: Body,
        progress: Option<&Progress>,
    ) -> Result<Written, WriteError> {
        let streamed = |whole| Written { whole, again: None };
        let framing = request_head::body_framing(&parts.method, &parts.headers, &body);
        let mut out = Vec::with_capacity(512);
        request_head::encode(parts, framing, &mut out);
        let head_len = out.len();
        let unsent = |cause| WriteError::new(false, cause);
        let sent = |cause| WriteError::new(true, cause);
        let body_failed = |head_sent, cause| WriteError::client_body(head_sent, cause);
        match framing {
            BodyKind::None | BodyKind::UntilClose | BodyKind::Length(0) => {}
            BodyKind::Length(length) if length <= INLINE_BODY => {
                let start = out.len();
                while let Some(frame) = body.frame().await {
                    let frame = frame.map_err(|err| body_failed(false, Cause::Body(err)))?;
                    if let Ok(data) = frame.into_data() {
                        out.extend_from_slice(&data);
                    }
                }
                check_length((out.len() - start) as u64, length)
                    .map_err(|cause| body_failed(false, cause))?;
            }
            BodyKind::Length(_) | BodyKind::Chunked => {
                let chunked = framing == BodyKind::Chunked;
                if self.send_piece(&mut &out[..]).await.map_err(unsent)? {
                    return Ok(streamed(false));
                }
                let mut written: u64 = 0;
                loop {
                    // All of a declared length sent, the upstream has the
                    // request whole: an answer now is no early one.
                    let watch = !matches!(framing, BodyKind::Length(length) if written >= length);
                    let piece = self.next_piece(&mut body, watch).await.map_err(sent)?;
                    let frame = match piece {
                        Piece::Answered => return Ok(streamed(false)),
                        Piece::End => break,
                        Piece::Frame(frame) => frame,
                    };
                    let frame = frame.map_err(|err| body_failed(true, Cause::Body(err)))?;
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    if data.is_empty() {
                        continue;
                    }
                    written += data.len() as u64;
                    let answered = if chunked {
                        let mut size = Vec::with_capacity(18);
                        crate::wire::push_hex(&mut size, data.len() as u64);
                        size.extend_from_slice(b"\r\n");
                        let mut chunk = Buf::chain(Buf::chain(&size[..], data), &b"\r\n"[..]);
                        self.send_piece(&mut chunk).await
                    } else {
                        self.send_piece(&mut { data }).await
                    };
                    if answered.map_err(sent)? {
                        return Ok(streamed(false));
                    }
                    if let Some(progress) = progress {
                        progress.mark();
                    }
                }
                if let BodyKind::Length(length) = framing {
                    check_length(written, length).map_err(|cause| body_failed(true, cause))?;
                } else if self
                    .send_piece(&mut &b"0\r\n\r\n"[..])
                    .await
                    .map_err(sent)?
                {
                    return Ok(streamed(false));
                }
                self.flush().await.map_err(sent)?;
                return Ok(streamed(true));
            }
        }
        let request = Encoded {
            bytes: out,
            head_len,
        };
        match self.write_encoded(&request).await {
            Ok(()) => Ok(Written {
                whole: true,
                again: parts.method.is_idempotent().then_some(request),
            }),
            Err(mut failed) => {
                if !failed.head_sent {
                    failed.resend = Some(request);
                }
                Err(failed)
            }
        }
    }

    /// Writes a request encoded whole (head and body) in one go.
    pub async fn write_encoded(&mut self, request: &Encoded) -> Result<(), WriteError> {
        let out = &request.bytes;
        // Written by hand, not `write_all`: a failure is "not sent" only
        // while part of the head is still here, so progress must be known.
        let mut written = 0;
        while written < out.len() {
            let cause = match self.stream.write(&out[written..]).await {
                Ok(0) => Cause::StoppedTaking,
                Ok(n) => {
                    written += n;
                    continue;
                }
                Err(err) => Cause::Write(err),
            };
            return Err(WriteError::new(written >= request.head_len, cause));
        }
        self.flush()
            .await
            .map_err(|cause| WriteError::new(true, cause))
    }

    /// Writes `piece` unless the upstream starts answering first (`Ok(true)`):
    /// an upstream may refuse a large body (413, say) before reading it, and
    /// waiting for it to take the rest would wait for ever.
    async fn send_piece(&mut self, piece: &mut impl Buf) -> Result<bool, Cause> {
        std::future::poll_fn(|cx| {
            loop {
                if !piece.has_remaining() {
                    return Poll::Ready(Ok(false));
                }
                match tokio_util::io::poll_write_buf(Pin::new(&mut self.stream), cx, piece) {
                    Poll::Ready(Ok(0)) => {
                        return Poll::Ready(Err(Cause::StoppedTaking));
                    }
                    Poll::Ready(Ok(_)) => continue,
                    Poll::Ready(Err(err)) => return Poll::Ready(Err(Cause::Write(err))),
                    Poll::Pending => {}
                }
                return match self.poll_answer_began(cx) {
                    Poll::Ready(Ok(true)) => Poll::Ready(Ok(true)),
                    Poll::Ready(Ok(false)) => Poll::Ready(Err(Cause::ClosedWhileSending)),
                    Poll::Ready(Err(err)) => Poll::Ready(Err(Cause::Write(err))),
                    Poll::Pending => Poll::Pending,
                };
            }
        })
        .await
    }

    /// The client's next piece of body, unless the upstream starts answering
    /// first: an answer that comes while a slow client is still sending
    /// (a 413, a 401) is relayed then, not when the client has finished, nor
    /// as a timeout if it pauses. Only a write that waits for room looked
    /// for it before, and a slow upload's pieces all fit in the buffers.
    async fn next_piece(&mut self, body: &mut Body, watch: bool) -> Result<Piece, Cause> {
        std::future::poll_fn(|cx| {
            if let Poll::Ready(frame) = Pin::new(&mut *body).poll_frame(cx) {
                return Poll::Ready(Ok(frame.map_or(Piece::End, Piece::Frame)));
            }
            if !watch {
                return Poll::Pending;
            }
            match self.poll_answer_began(cx) {
                Poll::Ready(Ok(true)) => Poll::Ready(Ok(Piece::Answered)),
                Poll::Ready(Ok(false)) => Poll::Ready(Err(Cause::ClosedWhileSending)),
                Poll::Ready(Err(err)) => Poll::Ready(Err(Cause::Read(err))),
                Poll::Pending => Poll::Pending,
            }
        })
        .await
    }

    /// Reads what the upstream sends while the request is still going out:
    /// `true` once its final answer has begun, `false` when it closed. A
    /// `100 Continue` (some upstreams send one unasked) is no answer: the
    /// upstream waits for the rest of the body.
    fn poll_answer_began(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        loop {
            return match self.poll_fill(cx) {
                Poll::Ready(Ok(0)) => Poll::Ready(Ok(false)),
                Poll::Ready(Ok(_))
                    if !response_head::final_answer_started(&mut self.buf, &mut self.interim) =>
                {
                    continue;
                }
                Poll::Ready(Ok(_)) => Poll::Ready(Ok(true)),
                Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
                Poll::Pending => Poll::Pending,
            };
        }
    }

    async fn flush(&mut self) -> Result<(), Cause> {
        self.stream.flush().await.map_err(Cause::Write)
    }

    /// Reads until a final answer head is complete (interim 1xx answers are
    /// read past).
    pub async fn read_head(&mut self, method: &Method) -> Result<AnswerHead, NoAnswer> {
        loop {
            if !self.buf.is_empty()
                && let Some(head) =
                    response_head::parse(&mut self.buf, method, &mut self.names, &mut self.interim)
                        .map_err(|err| NoAnswer::Broken(Cause::Head(err)))?
            {
                self.interim = 0;
                self.idle_timeout = head.idle_timeout.map(|timeout| {
                    let seconds = u32::try_from(timeout.as_secs()).unwrap_or(u32::MAX);
                    NonZeroU32::new(seconds).unwrap_or(NonZeroU32::MIN)
                });
                return Ok(head);
            }
            self.buf.reserve(READ_CHUNK);
            let silent = self.buf.is_empty() && self.interim == 0;
            match self.stream.read_buf(&mut self.buf).await {
                Ok(0) if silent => return Err(NoAnswer::Silent(Cause::ClosedBeforeAnswer)),
                Ok(0) => return Err(NoAnswer::Broken(Cause::ClosedBeforeAnswer)),
                Ok(_) => self.received = true,
                Err(err) if !self.received && refused_handshake(&err) => {
                    return Err(NoAnswer::Refused(Cause::TlsRefused(err)));
                }
                Err(err) if silent && err.kind() == io::ErrorKind::ConnectionReset => {
                    return Err(NoAnswer::Silent(Cause::Read(err)));
                }
                Err(err) => return Err(NoAnswer::Broken(Cause::Read(err))),
            }
        }
    }

    /// The bytes read past the head, for the body to take from.
    pub fn buffered(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// Reads more of the body into the buffer; `Ok(0)` at the end of the connection.
    pub fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 4 {
            self.buf.reserve(READ_CHUNK);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.stream), cx, &mut self.buf)
    }
}

/// A fatal TLS alert by which a server refuses the handshake: it says
/// nothing of a request, which the server never read.
fn refused_handshake(err: &io::Error) -> bool {
    use rustls::AlertDescription as Alert;
    let Some(rustls::Error::AlertReceived(alert)) = err
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return false;
    };
    matches!(
        alert,
        Alert::CertificateRequired
            | Alert::BadCertificate
            | Alert::UnsupportedCertificate
            | Alert::CertificateRevoked
            | Alert::CertificateExpired
            | Alert::CertificateUnknown
            | Alert::UnknownCA
            | Alert::AccessDenied
            | Alert::HandshakeFailure
    )
}

fn check_length(written: u64, declared: u64) -> Result<(), Cause> {
    if written == declared {
        Ok(())
    } else {
        Err(Cause::BodyLength { written, declared })
    }
}
