//! An HTTP/2 upstream's one multiplexed connection, dialed to the
//! configured upstream and nowhere else.
//!
//! hyper-util's client dials and pools by each request's URI authority, so
//! the `:authority` it sent had to be the upstream's own: the client's host
//! there would have chosen where to connect. Here the connection is chosen by
//! configuration alone, and a request's URI says only what the upstream is
//! told (`:scheme`, `:authority`, path): the client's host, with
//! `preserve_host`, as an HTTP/1 upstream gets it in `Host`.

use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::Instant;
use tower_service::Service;

use super::error::{Cause, UpstreamError, error_chain};
use super::http2_connections::Http2Connections;
use super::http2_dialer::{H2Connector, RequireH2};
use crate::body::Body;

/// Holds the connection, opens it when there is none, and drops it when it
/// closed or has gone unused for the idle timeout.
#[derive(Debug)]
pub struct Http2Upstream {
    holder: Arc<Holder>,
}

#[derive(Debug)]
struct Holder {
    dialer: RequireH2<H2Connector>,
    /// The upstream's own URL: the only address ever dialed.
    target: Uri,
    idle_timeout: Duration,
    connections: Arc<Http2Connections>,
    slot: Mutex<Slot>,
}

/// A connect every request waiting for a connection shares: one at a time,
/// and its failure is each waiter's.
type Connecting = Shared<BoxFuture<'static, Result<SendRequest<Body>, ConnectError>>>;

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
    },
    Open {
        id: u64,
        sender: SendRequest<Body>,
        last_used: Instant,
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
        connections: Arc<Http2Connections>,
    ) -> Self {
        Self {
            holder: Arc::new(Holder {
                dialer,
                target,
                idle_timeout,
                connections,
                slot: Mutex::new(Slot::Closed),
            }),
        }
    }

    pub fn connections(&self) -> &Http2Connections {
        &self.holder.connections
    }

    /// Sends `request` as it is (its URI's authority is the `:authority`,
    /// never where to connect) and waits for the answer head.
    pub async fn send(
        &self,
        mut request: Request<Body>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        // A request the connection gives back was never sent: one that was
        // closing when it was taken (the upstream's GOAWAY not yet read) is
        // retried on a fresh one; a fresh one that gives it back is the end.
        for _ in 0..3 {
            let (mut sender, fresh) = (self.sender().await)
                .map_err(|error| UpstreamError::NotSent(Cause::Http2Connect(error)))?;
            match sender.try_send_request(request).await {
                Ok(response) => return Ok(response),
                Err(mut failed) => match failed.take_message() {
                    Some(unsent) if !fresh => request = unsent,
                    Some(_) => {
                        return Err(UpstreamError::NotSent(Cause::Http2(failed.into_error())));
                    }
                    // Refused before any processing (RFC 9113 §8.7): as safe
                    // to retry as a connection never made.
                    None if refused_unprocessed(failed.error()) => {
                        return Err(UpstreamError::NotSent(Cause::Http2(failed.into_error())));
                    }
                    None => return Err(UpstreamError::Broken(Cause::Http2(failed.into_error()))),
                },
            }
        }
        Err(UpstreamError::NotSent(Cause::ConnectionsClosed))
    }

    /// The open connection, or the one being opened (`true`: opened for
    /// this request, or while it waited).
    async fn sender(&self) -> Result<(SendRequest<Body>, bool), ConnectError> {
        let connecting = {
            let mut slot = self.holder.lock();
            match &mut *slot {
                Slot::Open {
                    sender, last_used, ..
                } if !sender.is_closed() => {
                    *last_used = Instant::now();
                    return Ok((sender.clone(), false));
                }
                Slot::Connecting { connecting, .. } => connecting.clone(),
                _ => {
                    let (id, connecting) = self.holder.connect();
                    *slot = Slot::Connecting {
                        id,
                        connecting: connecting.clone(),
                    };
                    connecting
                }
            }
        };
        connecting.await.map(|sender| (sender, true))
    }
}

/// The upstream reset the stream with `REFUSED_STREAM`, which a server
/// sends only for a stream it did no processing of: the request was, in
/// effect, never sent. Any other reset (`CANCEL`, `INTERNAL_ERROR`), or a
/// GOAWAY that closed the stream, leaves its outcome unknown.
fn refused_unprocessed(error: &hyper::Error) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(h2) = cause.downcast_ref::<h2::Error>() {
            return h2.is_remote()
                && h2.is_reset()
                && h2.reason() == Some(h2::Reason::REFUSED_STREAM);
        }
        source = cause.source();
    }
    false
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
        let idle_timeout = self.idle_timeout;
        let task = tokio::spawn(async move {
            let opened = open(dialer, target, holder.clone(), id, idle_timeout).await;
            if let Some(holder) = holder.upgrade() {
                let mut slot = holder.lock();
                if matches!(&*slot, Slot::Connecting { id: current, .. } if *current == id) {
                    *slot = match &opened {
                        Ok(sender) => Slot::Open {
                            id,
                            sender: sender.clone(),
                            last_used: Instant::now(),
                        },
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

    /// Forgets connection `id` if it is still the one held and has not been
    /// used for the idle timeout; else when to look again.
    fn close_if_idle(&self, id: u64) -> Option<Instant> {
        let mut slot = self.lock();
        let Slot::Open {
            id: current,
            last_used,
            ..
        } = &*slot
        else {
            return None;
        };
        if *current != id {
            return None;
        }
        let deadline = *last_used + self.idle_timeout;
        if deadline > Instant::now() {
            return Some(deadline);
        }
        *slot = Slot::Closed;
        None
    }

    /// Forgets connection `id`, closed, if it is still the one held.
    fn closed(&self, id: u64) {
        let mut slot = self.lock();
        if matches!(&*slot, Slot::Open { id: current, .. } if *current == id) {
            *slot = Slot::Closed;
        }
    }
}

/// Dials the upstream (bounded by `connect_timeout`, `h2` by ALPN over TLS:
/// [`RequireH2`]), shakes hands, and drives the connection in a task.
async fn open(
    mut dialer: RequireH2<H2Connector>,
    target: Uri,
    holder: Weak<Holder>,
    id: u64,
    idle_timeout: Duration,
) -> Result<SendRequest<Body>, ConnectError> {
    std::future::poll_fn(|cx| dialer.poll_ready(cx))
        .await
        .map_err(ConnectError::from)?;
    let io = dialer.call(target).await.map_err(ConnectError::from)?;
    let (sender, connection) = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .handshake(io)
        .await
        .map_err(|err| Arc::new(err) as ConnectError)?;
    tokio::spawn(drive(connection, holder, id, idle_timeout));
    Ok(sender)
}

/// Runs the connection until it ends, dropping it from the holder when it
/// has been idle for the timeout: without a sender, hyper closes it as soon
/// as the streams still on it are done.
async fn drive<C>(connection: C, holder: Weak<Holder>, id: u64, idle_timeout: Duration)
where
    C: Future<Output = hyper::Result<()>>,
{
    let mut connection = pin!(connection);
    // Not at once: the slot holds this connection only once `open` is done.
    let mut look_at = Instant::now() + idle_timeout;
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
                match holder.upgrade().and_then(|holder| holder.close_if_idle(id)) {
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
