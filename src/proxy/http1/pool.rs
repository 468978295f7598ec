//! Connections to one HTTP/1 upstream, reused newest first.
//!
//! Not hyper-util's pool, for two measured reasons (docs/adr/0002-upstream-pool.md):
//! while a request waits for an idle connection it also opens a new one and
//! keeps both (about 1.3 upstream connections per client connection at 1,000
//! clients), and it hands each connection back through a task of its own.
//! Here a request takes an idle connection or opens one, never both, and the
//! connection goes back when its answer's body has been read to the end.
//!
//! An idle connection the upstream closes just as a request takes it fails
//! that request's first write. When not all of the head had left, the
//! upstream never had the request, so it goes once more on a new connection
//! (if it was read whole, as bodies up to 16 KiB are); otherwise the caller
//! hears `NotSent`. Once the whole head has left, a failure is `Broken`:
//! the upstream may be running it, and nothing is sent again; except that
//! a request of an idempotent method (GET, HEAD, PUT, DELETE, OPTIONS,
//! TRACE) whose reused connection ends before a byte of an answer goes once
//! more on a new connection, as RFC 9112 section 9.3.1 allows and nginx does:
//! that is how an upstream's keep-alive close crossing our request looks.
//! Either second try ends by the first one's deadline. An idle connection is
//! not taken within a second of the idle timeout its upstream announced
//! (`Keep-Alive: timeout=N`), so that such crossings are rare to begin with.

use std::pin::pin;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::request::Parts;
use http::uri::Authority;
use http::{Request, Response};
use tokio::sync::Semaphore;

use super::body::AnswerBody;
use super::connection::{Connection, Encoded, NoAnswer, WriteError, Written};
use super::idle::{IdleConnections, Lease};
use super::response_head::AnswerHead;
use super::stream::Dialer;
use crate::body::Body;
use crate::deadline::TimedOut;
use crate::proxy::error::{Cause, UpstreamError};
use crate::proxy::handover::Handover;
use crate::proxy::progress::{Progress, Wait, within};
use tokio::time::Instant as TokioInstant;

/// Limits of one pool.
#[derive(Debug, Clone, Copy)]
pub struct PoolLimits {
    /// Most connections open at once; a request beyond waits for one.
    pub max_connections: usize,
    /// Longest wait for a free connection, and for a new one to be made
    /// (TCP, and TLS for https).
    pub connect_timeout: Duration,
    /// How long an unused connection is kept open.
    pub idle_timeout: Duration,
    /// Whether a connection serves more than one request. Without, each
    /// request says `Connection: close` and its connection ends with its
    /// answer: for an upstream that sends answers no request asked for,
    /// which on a reused connection are taken for the next request's
    /// (docs/http1.md).
    pub keep_alive: bool,
}

pub struct Http1Pool {
    dialer: Dialer,
    host: Option<HeaderValue>,
    idle: Arc<IdleConnections>,
    /// One permit per request holding a connection. Every open connection is
    /// either held or idle, and one is opened only when none is idle, so
    /// this also bounds the open connections.
    permits: Arc<Semaphore>,
    limits: PoolLimits,
}

impl std::fmt::Debug for Http1Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http1Pool")
            .field("dialer", &self.dialer)
            .field("idle", &self.idle.count())
            .finish()
    }
}

impl Http1Pool {
    pub fn new(dialer: Dialer, authority: &Authority, limits: PoolLimits) -> Arc<Self> {
        let pool = Arc::new(Self {
            dialer,
            host: HeaderValue::from_str(authority.as_str()).ok(),
            idle: Arc::new(IdleConnections::new(limits.idle_timeout)),
            permits: Arc::new(Semaphore::new(limits.max_connections)),
            limits,
        });
        spawn_reaper(Arc::downgrade(&pool.idle), limits.idle_timeout);
        pool
    }

    /// Sends `request` (its path and query are what the upstream gets) and
    /// waits for the answer head; `timeout` counts from this call, waiting
    /// for a free or a new connection included (as over HTTP/2). On an
    /// idempotent route the whole execution must end within it: the lease
    /// (`lock_timeout`) is only checked to exceed `timeout`, and a live
    /// gateway still waiting past its lease would let a retry run the
    /// request a second time. A pass-through's streamed body (`Wait::Restarting`)
    /// gets `timeout` again after each piece written: an upload that keeps
    /// flowing is not cut off. The body brings the connection back when read.
    /// `handover` says when the request is about to be written, and may
    /// stop it before.
    pub async fn send(
        self: &Arc<Self>,
        request: Request<Body>,
        timeout: Duration,
        wait: Wait,
        handover: &Handover,
    ) -> Result<Response<AnswerBody>, UpstreamError> {
        // When this request started to wait: only measured when it does
        // wait (a free slot and an idle connection cost no clock read).
        let mut waiting: Option<Instant> = None;
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                waiting = Some(Instant::now());
                match tokio::time::timeout(
                    self.limits.connect_timeout,
                    self.permits.clone().acquire_owned(),
                )
                .await
                {
                    Ok(Ok(permit)) => permit,
                    Ok(Err(_)) | Err(_) => {
                        return Err(UpstreamError::NotSent(Cause::Busy {
                            connections: self.limits.max_connections,
                            waited: self.limits.connect_timeout,
                        }));
                    }
                }
            }
        };
        let (mut parts, body) = request.into_parts();
        // HTTP/1 sends the path and query; the authority travels in `Host`.
        if !parts.headers.contains_key(header::HOST)
            && let Some(host) = &self.host
        {
            parts.headers.insert(header::HOST, host.clone());
        }
        if !self.limits.keep_alive {
            parts
                .headers
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        let (mut connection, reused) = match self.idle.take() {
            Some(connection) => (connection, true),
            // Boxed: opening a connection is rare, and its future would
            // otherwise make every request's future (moved, copied) larger.
            None => {
                waiting.get_or_insert_with(Instant::now);
                (Box::pin(self.connect()).await?, false)
            }
        };
        let left = match waiting {
            Some(since) => timeout.saturating_sub(since.elapsed()),
            None => timeout,
        };
        if left.is_zero() {
            return Err(UpstreamError::NotSent(Cause::NoTimeLeft));
        }
        // Watched, each piece gets the whole `timeout`; the first counted,
        // as `left` is, from when this request started to wait.
        let progress = wait.watches(&body).then(|| {
            Progress::since(waiting.map_or_else(TokioInstant::now, TokioInstant::from_std))
        });
        let due = TokioInstant::now() + left;
        // Waiting for a connection, or connecting, sent nothing; writing
        // may send part of the request even when cut short.
        handover.hand_over()?;
        let answered = match progress.as_ref() {
            Some(progress) => within(
                timeout,
                Some(progress),
                exchange(&mut connection, &parts, body, Some(progress)),
            )
            .await
            .map_err(|_| TimedOut),
            // The usual request: on the connection's own timer (`Deadline`).
            None => {
                let mut deadline = connection.take_deadline();
                let answered = {
                    let work = pin!(exchange(&mut connection, &parts, body, None));
                    deadline.run(due, work).await
                };
                connection.keep_deadline(deadline);
                answered
            }
        };
        let (head, complete) = match answered {
            Err(_) => return Err(UpstreamError::Timeout),
            Ok(Ok(answered)) => answered,
            // A pooled connection failed before the upstream had the whole
            // head (it closed it as we took it), or an idempotent request's
            // ended without a byte of an answer: the request goes again,
            // once, on a new connection. Boxed: rare, like `connect`.
            Ok(Err(Unanswered {
                resend: Some(request),
                error,
            })) if reused => {
                let sent_before = !matches!(error, UpstreamError::NotSent(_));
                let (fresh, head, whole) =
                    Box::pin(self.resend(&parts, &request, due, sent_before)).await?;
                connection = fresh;
                (head, whole)
            }
            Ok(Err(unanswered)) => return Err(unanswered.error),
        };
        let lease = Lease::new(Arc::downgrade(&self.idle), connection, permit);
        let reuse = self.limits.keep_alive && head.keep_alive && complete;
        let body = AnswerBody::new(lease, head.framing, reuse);
        Ok(Response::from_parts(head.parts, body))
    }

    /// The second and last try of a request on a new connection, by the
    /// first try's deadline: the whole exchange ends within `timeout`, as
    /// the lease of a keyed request is only known to outlast that.
    /// `sent_before`: the first try may have reached the upstream. A
    /// failure now is the upstream's.
    async fn resend(
        &self,
        parts: &Parts,
        request: &Encoded,
        due: TokioInstant,
        sent_before: bool,
    ) -> Result<(Connection, AnswerHead, bool), UpstreamError> {
        let Ok(connected) = tokio::time::timeout_at(due, self.connect()).await else {
            return Err(if sent_before {
                UpstreamError::Timeout
            } else {
                UpstreamError::NotSent(Cause::NoTimeLeft)
            });
        };
        let mut connection = connected?;
        let answered = tokio::time::timeout_at(due, async {
            let written = connection.write_encoded(request).await.map(|()| Written {
                whole: true,
                again: None,
            });
            answer(&mut connection, parts, written).await
        })
        .await;
        match answered {
            Err(_) => Err(UpstreamError::Timeout),
            Ok(Ok((head, whole))) => Ok((connection, head, whole)),
            Ok(Err(unanswered)) => Err(unanswered.error),
        }
    }

    async fn connect(&self) -> Result<Connection, UpstreamError> {
        let deadline = TokioInstant::now() + self.limits.connect_timeout;
        match tokio::time::timeout_at(deadline, self.dialer.dial(deadline)).await {
            Ok(Ok(stream)) => Ok(Connection::new(stream)),
            Ok(Err(err)) => Err(UpstreamError::NotSent(Cause::Connect(err))),
            Err(_) => Err(UpstreamError::NotSent(Cause::ConnectTimeout(
                self.limits.connect_timeout,
            ))),
        }
    }
}

/// Why one connection gave no answer head, and the request's bytes when
/// they can go again as they are: they never reached the upstream, or the
/// request is idempotent and no byte of an answer came.
struct Unanswered {
    error: UpstreamError,
    resend: Option<Encoded>,
}

/// Writes the request on `connection` and reads the answer head; with it,
/// whether the whole request went out.
async fn exchange(
    connection: &mut Connection,
    parts: &Parts,
    body: Body,
    progress: Option<&Progress>,
) -> Result<(AnswerHead, bool), Unanswered> {
    let written = connection.write_request(parts, body, progress).await;
    answer(connection, parts, written).await
}

/// The answer head to a request once it was written, or failed to be.
async fn answer(
    connection: &mut Connection,
    parts: &Parts,
    written: Result<Written, WriteError>,
) -> Result<(AnswerHead, bool), Unanswered> {
    let broken = |cause| Unanswered {
        error: UpstreamError::Broken(cause),
        resend: None,
    };
    // Not sent, but not to be sent again either: another connection would
    // be refused the same way.
    let refused = |cause| Unanswered {
        error: UpstreamError::NotSent(cause),
        resend: None,
    };
    match written {
        // Nothing of the upstream's to wait for: it has at most part of a
        // request, and would wait for the rest until our timeout.
        Err(write) if write.client_body => Err(Unanswered {
            error: UpstreamError::RequestBody(write.cause),
            resend: None,
        }),
        Ok(written) => match connection.read_head(&parts.method).await {
            Ok(head) => Ok((head, written.whole)),
            Err(NoAnswer::Refused(cause)) => Err(refused(cause)),
            Err(NoAnswer::Silent(cause)) => Err(Unanswered {
                error: UpstreamError::Broken(cause),
                resend: written.again,
            }),
            Err(NoAnswer::Broken(cause)) => Err(broken(cause)),
        },
        // The upstream may have answered (413, say) and closed
        // before taking the whole body: that answer is the one to relay.
        Err(write) if write.head_sent => match connection.read_head(&parts.method).await {
            Ok(head) => Ok((head, false)),
            Err(NoAnswer::Refused(cause)) => Err(refused(cause)),
            Err(NoAnswer::Broken(_) | NoAnswer::Silent(_)) => Err(broken(write.cause)),
        },
        Err(write) => Err(Unanswered {
            error: UpstreamError::NotSent(write.cause),
            resend: write.resend,
        }),
    }
}

/// Closes idle connections that no request comes to take, and those the
/// upstream closed; ends with the pool.
fn spawn_reaper(idle: Weak<IdleConnections>, idle_timeout: Duration) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(idle_timeout / 2);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(idle) = idle.upgrade() else { return };
            idle.reap();
        }
    });
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http_body::Frame;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;
    use crate::proxy::http1::stream::UpstreamStream;

    /// A pool for `listener`, holding one idle connection that fails on the
    /// first byte written, as one the upstream reset just after our look at
    /// it does; with the upstream's end of that connection.
    async fn pool_with_a_dead_connection(listener: &TcpListener) -> (Arc<Http1Pool>, TcpStream) {
        let address = listener.local_addr().unwrap();
        let authority: Authority = address.to_string().parse().unwrap();
        let dialer = Dialer::new(
            &http::uri::Scheme::HTTP,
            &authority,
            crate::tls::client_config("test", None).unwrap(),
        )
        .unwrap();
        let limits = PoolLimits {
            max_connections: 4,
            connect_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(60),
            keep_alive: true,
        };
        let pool = Http1Pool::new(dialer, &authority, limits);
        let ours = TcpStream::connect(address).await.unwrap();
        let (theirs, _) = listener.accept().await.unwrap();
        let ours = ours.into_std().unwrap();
        ours.shutdown(std::net::Shutdown::Write).unwrap();
        let ours = TcpStream::from_std(ours).unwrap();
        let permit = pool.permits.clone().try_acquire_owned().unwrap();
        (pool.idle).put_back(Connection::new(UpstreamStream::Plain(ours)), permit);
        (pool, theirs)
    }

    async fn received(mut stream: TcpStream) -> Vec<u8> {
        let mut bytes = Vec::new();
        stream.read_to_end(&mut bytes).await.unwrap();
        bytes
    }

    /// The upstream never had the request, so it goes again on a new
    /// connection, and the upstream sees it exactly once.
    #[tokio::test]
    async fn a_request_that_never_left_a_pooled_connection_goes_once_on_a_new_one() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (pool, dead) = pool_with_a_dead_connection(&listener).await;
        let upstream = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            while !request.ends_with(b"\r\n\r\n{}") {
                let mut chunk = [0u8; 1024];
                let n = stream.read(&mut chunk).await.unwrap();
                assert!(n > 0, "the request ended early: {request:?}");
                request.extend_from_slice(&chunk[..n]);
            }
            stream
                .write_all(b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok")
                .await
                .unwrap();
            (request, listener)
        });

        let request = Request::post("/v1/charges")
            .body(crate::body::full("{}"))
            .unwrap();
        let answer = pool
            .send(
                request,
                Duration::from_secs(2),
                Wait::Whole,
                &Handover::default(),
            )
            .await
            .unwrap();
        assert_eq!(answer.status(), 201);
        let (request, listener) = upstream.await.unwrap();
        assert!(
            request.starts_with(b"POST /v1/charges HTTP/1.1\r\n"),
            "{request:?}"
        );
        assert_eq!(
            received(dead).await,
            b"",
            "the dead connection carried nothing"
        );
        let another = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
        assert!(another.is_err(), "a third connection was opened");
    }

    /// A streamed body cannot be written again (it is read from the client
    /// as it goes): the caller hears "not sent", so the key is freed rather
    /// than stored as "outcome unknown".
    #[tokio::test]
    async fn a_streamed_request_that_never_left_is_not_sent_not_broken() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (pool, dead) = pool_with_a_dead_connection(&listener).await;
        let frames = futures_util::stream::iter([Ok::<_, std::io::Error>(Frame::data(
            Bytes::from_static(b"{}"),
        ))]);
        let body = crate::body::stream(http_body_util::StreamBody::new(frames));
        let request = Request::post("/v1/charges").body(body).unwrap();
        let sent = pool
            .send(
                request,
                Duration::from_secs(2),
                Wait::Whole,
                &Handover::default(),
            )
            .await;
        assert!(
            matches!(sent, Err(UpstreamError::NotSent(_))),
            "{:?}",
            sent.err()
        );
        assert_eq!(received(dead).await, b"");
        let another = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
        assert!(
            another.is_err(),
            "the request was tried on a new connection"
        );
    }
}
