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
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, Uri};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower_service::Service;

use super::upstream::{UpstreamError, error_chain};
use super::upstream_body::{Lease, UpstreamBody};
use crate::body::Body;

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
    connector: HttpsConnector<HttpConnector>,
    /// What the connector dials: scheme and authority only.
    target: Uri,
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

/// How long a returned connection may take to become ready again.
const READY_WAIT: Duration = Duration::from_secs(1);

struct Idle {
    sender: SendRequest<Body>,
    since: Instant,
}

impl std::fmt::Debug for Http1Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http1Pool")
            .field("target", &self.target)
            .field("idle", &self.idle_count())
            .finish()
    }
}

impl Http1Pool {
    pub fn new(
        connector: HttpsConnector<HttpConnector>,
        scheme: Scheme,
        authority: Authority,
        limits: PoolLimits,
    ) -> Result<Arc<Self>, http::Error> {
        let host = HeaderValue::from_str(authority.as_str()).ok();
        let target = Uri::builder()
            .scheme(scheme)
            .authority(authority)
            .path_and_query("/")
            .build()?;
        let pool = Arc::new(Self {
            connector,
            target,
            host,
            idle: Mutex::new(VecDeque::new()),
            permits: Arc::new(Semaphore::new(limits.max_connections)),
            limits,
        });
        spawn_reaper(Arc::downgrade(&pool), limits.idle_timeout);
        Ok(pool)
    }

    /// Sends `request` (its URI already points at this upstream) and waits
    /// for the answer head at most `timeout` once sent; the body brings the
    /// connection back when read.
    pub async fn send(
        self: &Arc<Self>,
        request: Request<Body>,
        timeout: Duration,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        let permit = match tokio::time::timeout(
            self.limits.connect_timeout,
            self.permits.clone().acquire_owned(),
        )
        .await
        {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) | Err(_) => {
                return Err(UpstreamError::Connect(format!(
                    "all {} connections stayed busy for {:?}",
                    self.limits.max_connections, self.limits.connect_timeout
                )));
            }
        };
        let mut request = self.origin_form(request);
        // A reused connection the upstream closed while it was idle refuses
        // the request before writing any of it; then a fresh one is tried.
        loop {
            let (mut sender, reused) = match self.take_idle() {
                Some(sender) => (sender, true),
                // Boxed: opening a connection is rare, and its future would
                // otherwise make every request's future (moved, copied) larger.
                None => (Box::pin(self.connect()).await?, false),
            };
            let sent = match tokio::time::timeout(timeout, sender.try_send_request(request)).await {
                Ok(sent) => sent,
                Err(_) => return Err(UpstreamError::Timeout),
            };
            match sent {
                Ok(response) => {
                    let lease = Lease::new(Arc::downgrade(self), sender, permit);
                    return Ok(response.map(|incoming| UpstreamBody::pooled(incoming, lease)));
                }
                Err(mut refused) => match refused.take_message() {
                    Some(unsent) if reused => request = unsent,
                    Some(_) => {
                        return Err(UpstreamError::Connect(format!(
                            "the new connection refused the request: {}",
                            refused.into_error()
                        )));
                    }
                    None => {
                        return Err(UpstreamError::Broken(error_chain(&refused.into_error())));
                    }
                },
            }
        }
    }

    /// HTTP/1 sends the path and query; the authority travels in `Host`.
    fn origin_form(&self, request: Request<Body>) -> Request<Body> {
        let (mut parts, body) = request.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        parts.uri = Uri::from(path);
        if !parts.headers.contains_key(header::HOST)
            && let Some(host) = &self.host
        {
            parts.headers.insert(header::HOST, host.clone());
        }
        Request::from_parts(parts, body)
    }

    fn take_idle(&self) -> Option<SendRequest<Body>> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(entry) = idle.pop_back() {
            if entry.sender.is_ready() {
                return Some(entry.sender);
            }
        }
        None
    }

    async fn connect(&self) -> Result<SendRequest<Body>, UpstreamError> {
        let connecting = self.connector.clone().call(self.target.clone());
        let io = match tokio::time::timeout(self.limits.connect_timeout, connecting).await {
            Ok(Ok(io)) => io,
            Ok(Err(err)) => {
                return Err(UpstreamError::Connect(error_chain(err.as_ref())));
            }
            Err(_) => {
                return Err(UpstreamError::Connect(format!(
                    "no connection within {:?}",
                    self.limits.connect_timeout
                )));
            }
        };
        let (sender, connection) = http1::Builder::new()
            .handshake(io)
            .await
            .map_err(|err| UpstreamError::Connect(error_chain(&err)))?;
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(%err, "upstream connection ended");
            }
        });
        Ok(sender)
    }

    /// Takes back a connection whose answer was read to the end; its
    /// request's permit is given back once it is idle (or closed).
    pub(super) fn put_back(
        self: Arc<Self>,
        mut sender: SendRequest<Body>,
        permit: OwnedSemaphorePermit,
    ) {
        if sender.is_closed() {
            return;
        }
        if !sender.is_ready() {
            // The connection's task has not yet seen the end of the answer
            // it delivered (rare): wait for it off the request's path.
            tokio::spawn(async move {
                let ready = tokio::time::timeout(READY_WAIT, sender.ready()).await;
                if matches!(ready, Ok(Ok(()))) {
                    self.put_back(sender, permit);
                }
            });
            return;
        }
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.push_back(Idle { sender, since: now });
        self.close_expired(&mut idle, now);
        drop(idle);
        drop(permit);
    }

    /// Closes connections idle longer than `idle_timeout` (dropping the
    /// sender ends the connection's task, which closes the socket).
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

/// Closes idle connections that no request comes to take; ends with the pool.
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
            idle.retain(|entry| !entry.sender.is_closed());
            pool.close_expired(&mut idle, Instant::now());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_form_keeps_path_and_query_and_sets_host() {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .wrap_connector(HttpConnector::new());
        let pool = Http1Pool::new(
            connector,
            Scheme::HTTP,
            Authority::from_static("127.0.0.1:3000"),
            PoolLimits {
                max_connections: 4,
                connect_timeout: Duration::from_secs(1),
                idle_timeout: Duration::from_secs(60),
            },
        )
        .expect("valid target");
        let request = Request::builder()
            .uri("http://127.0.0.1:3000/v1/charges?x=1")
            .body(crate::body::empty())
            .expect("valid request");
        let sent = pool.origin_form(request);
        assert_eq!(sent.uri().to_string(), "/v1/charges?x=1");
        assert_eq!(sent.headers()[header::HOST], "127.0.0.1:3000");
    }
}
