//! Connections to one HTTP/1 upstream, reused newest first.
//!
//! Not hyper-util's pool, for two measured reasons (bench/README.md (p)):
//! while a request waits for an idle connection it also opens a new one and
//! keeps both (about 1.3 upstream connections per client connection at 1,000
//! clients), and it hands each connection back through a task of its own.
//! Here a request takes an idle connection or opens one, never both, and the
//! connection goes back when its answer's body has been read to the end.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::uri::Authority;
use http::{Request, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::body::AnswerBody;
use super::connection::Connection;
use super::stream::Dialer;
use crate::body::Body;
use crate::proxy::upstream::UpstreamError;

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
}

pub struct Http1Pool {
    dialer: Dialer,
    host: Option<HeaderValue>,
    /// Idle connections; the newest at the back (taken first), the oldest at
    /// the front (closed first when they have idled `idle_timeout`).
    idle: Mutex<VecDeque<Idle>>,
    /// One permit per request holding a connection. Every open connection is
    /// either held or idle, and one is opened only when none is idle, so
    /// this also bounds the open connections.
    permits: Arc<Semaphore>,
    limits: PoolLimits,
}

struct Idle {
    connection: Connection,
    since: Instant,
}

impl std::fmt::Debug for Http1Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http1Pool")
            .field("dialer", &self.dialer)
            .field("idle", &self.idle_count())
            .finish()
    }
}

/// A connection lent to one request and its answer, with the permit that
/// counts it.
pub struct Lease {
    pool: Weak<Http1Pool>,
    connection: Connection,
    permit: OwnedSemaphorePermit,
}

impl Lease {
    pub(super) fn connection(&mut self) -> &mut Connection {
        &mut self.connection
    }

    pub(super) fn give_back(self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.put_back(self.connection, self.permit);
        }
    }
}

impl Http1Pool {
    pub fn new(dialer: Dialer, authority: &Authority, limits: PoolLimits) -> Arc<Self> {
        let pool = Arc::new(Self {
            dialer,
            host: HeaderValue::from_str(authority.as_str()).ok(),
            idle: Mutex::new(VecDeque::new()),
            permits: Arc::new(Semaphore::new(limits.max_connections)),
            limits,
        });
        spawn_reaper(Arc::downgrade(&pool), limits.idle_timeout);
        pool
    }

    /// Sends `request` (its path and query are what the upstream gets) and
    /// waits for the answer head at most `timeout` once a connection is had;
    /// the body brings the connection back when read.
    pub async fn send(
        self: &Arc<Self>,
        request: Request<Body>,
        timeout: Duration,
    ) -> Result<Response<AnswerBody>, UpstreamError> {
        let permit = match tokio::time::timeout(
            self.limits.connect_timeout,
            self.permits.clone().acquire_owned(),
        )
        .await
        {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) | Err(_) => {
                return Err(UpstreamError::NotSent(format!(
                    "all {} connections stayed busy for {:?}",
                    self.limits.max_connections, self.limits.connect_timeout
                )));
            }
        };
        let (mut parts, body) = request.into_parts();
        // HTTP/1 sends the path and query; the authority travels in `Host`.
        if !parts.headers.contains_key(header::HOST)
            && let Some(host) = &self.host
        {
            parts.headers.insert(header::HOST, host.clone());
        }
        let mut connection = match self.take_idle() {
            Some(connection) => connection,
            // Boxed: opening a connection is rare, and its future would
            // otherwise make every request's future (moved, copied) larger.
            None => Box::pin(self.connect()).await?,
        };
        let exchange = async {
            match connection.write_request(&parts, body).await {
                Ok(whole) => connection
                    .read_head(&parts.method)
                    .await
                    .map(|head| (head, whole))
                    .map_err(UpstreamError::Broken),
                // The upstream may have answered (413, say) and closed
                // before taking the whole body: that answer is the one to relay.
                Err(write) if write.head_sent => match connection.read_head(&parts.method).await {
                    Ok(head) => Ok((head, false)),
                    Err(_) => Err(UpstreamError::Broken(write.detail)),
                },
                // Typically a pooled connection the upstream reset between
                // our look at it and the write: it never had the request.
                Err(write) => Err(UpstreamError::NotSent(write.detail)),
            }
        };
        let (head, complete) = match tokio::time::timeout(timeout, exchange).await {
            Err(_) => return Err(UpstreamError::Timeout),
            Ok(Err(failed)) => return Err(failed),
            Ok(Ok(answered)) => answered,
        };
        let lease = Lease {
            pool: Arc::downgrade(self),
            connection,
            permit,
        };
        let body = AnswerBody::new(lease, head.framing, head.keep_alive && complete);
        Ok(Response::from_parts(head.parts, body))
    }

    /// The newest idle connection the upstream has not closed meanwhile.
    fn take_idle(&self) -> Option<Connection> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(mut entry) = idle.pop_back() {
            if entry.connection.is_open() {
                return Some(entry.connection);
            }
        }
        None
    }

    async fn connect(&self) -> Result<Connection, UpstreamError> {
        match tokio::time::timeout(self.limits.connect_timeout, self.dialer.dial()).await {
            Ok(Ok(stream)) => Ok(Connection::new(stream)),
            Ok(Err(err)) => Err(UpstreamError::NotSent(crate::proxy::upstream::error_chain(
                &err,
            ))),
            Err(_) => Err(UpstreamError::NotSent(format!(
                "no connection within {:?}",
                self.limits.connect_timeout
            ))),
        }
    }

    /// Takes back a connection whose answer was read to the end; its
    /// request's permit is given back once it is idle.
    fn put_back(&self, connection: Connection, permit: OwnedSemaphorePermit) {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.push_back(Idle {
            connection,
            since: now,
        });
        self.close_expired(&mut idle, now);
        drop(idle);
        drop(permit);
    }

    /// Closes connections idle longer than `idle_timeout`.
    fn close_expired(&self, idle: &mut VecDeque<Idle>, now: Instant) {
        while idle
            .front()
            .is_some_and(|entry| now.duration_since(entry.since) >= self.limits.idle_timeout)
        {
            idle.pop_front();
        }
    }

    fn idle_count(&self) -> usize {
        self.idle.lock().map(|idle| idle.len()).unwrap_or(0)
    }
}

/// Closes idle connections that no request comes to take, and those the
/// upstream closed; ends with the pool.
fn spawn_reaper(pool: Weak<Http1Pool>, idle_timeout: Duration) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(idle_timeout / 2);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(pool) = pool.upgrade() else { return };
            let mut idle = pool.idle.lock().unwrap_or_else(|e| e.into_inner());
            idle.retain_mut(|entry| entry.connection.is_open());
            pool.close_expired(&mut idle, Instant::now());
        }
    });
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    use super::*;
    use crate::proxy::http1::stream::UpstreamStream;

    fn limits() -> PoolLimits {
        PoolLimits {
            max_connections: 4,
            connect_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(60),
        }
    }

    /// A pooled connection that fails on the first byte written (as one the
    /// upstream reset just after our look at it does): the upstream never
    /// had the request, so the caller must hear "not sent" (the key is
    /// freed), not "broken" (outcome unknown, stored and replayed).
    #[tokio::test]
    async fn a_request_that_never_left_is_not_sent_not_broken() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let authority: Authority = listener.local_addr().unwrap().to_string().parse().unwrap();
        let dialer = Dialer::new(
            &http::uri::Scheme::HTTP,
            &authority,
            crate::tls::client_config("test", None).unwrap(),
        )
        .unwrap();
        let pool = Http1Pool::new(dialer, &authority, limits());

        let ours = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (mut theirs, _) = listener.accept().await.unwrap();
        let ours = ours.into_std().unwrap();
        ours.shutdown(std::net::Shutdown::Write).unwrap();
        let ours = TcpStream::from_std(ours).unwrap();
        pool.idle.lock().unwrap().push_back(Idle {
            connection: Connection::new(UpstreamStream::Plain(ours)),
            since: Instant::now(),
        });

        let request = Request::post("/v1/charges")
            .body(crate::body::full("{}"))
            .unwrap();
        let sent = pool.send(request, Duration::from_secs(2)).await;
        assert!(
            matches!(sent, Err(UpstreamError::NotSent(_))),
            "{:?}",
            sent.err()
        );
        let mut received = Vec::new();
        theirs.read_to_end(&mut received).await.unwrap();
        assert!(received.is_empty(), "the upstream got {received:?}");
    }
}
