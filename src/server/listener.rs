//! One accept loop for both planes: HTTP/1.1 and HTTP/2 through hyper-util's
//! auto builder (h2c with prior knowledge in clear, ALPN over TLS), a bound on
//! open connections, and graceful shutdown that lets requests in flight finish
//! within a grace period.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::rt::{Read, Write};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::framing::{Verdicts, Watched};
use crate::body::Body;
use crate::error::GatewayError;
use crate::proxy::ClientInfo;

/// The listener's TLS configuration, swapped on reload so new certificates
/// apply to new connections while open ones keep theirs.
pub type TlsSettings = Arc<ArcSwap<rustls::ServerConfig>>;

#[derive(Clone)]
pub struct Limits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub max_header_bytes: u64,
    pub max_headers: usize,
    pub shutdown_grace: Duration,
    pub tls: Option<TlsSettings>,
}

/// Serves `handler` on `listener` until `shutdown` is cancelled, then waits up
/// to the grace period for open connections to finish their requests.
pub async fn serve<H, F>(
    name: &'static str,
    listener: TcpListener,
    limits: Limits,
    handler: H,
    shutdown: CancellationToken,
) where
    H: Fn(Request<Incoming>, ClientInfo) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let builder = Arc::new(connection_builder(&limits));
    let graceful = GracefulShutdown::new();
    // Past the limit, further connections wait in the kernel's backlog.
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));

    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = shutdown.cancelled() => break,
        };
        let (stream, addr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(listener = name, error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            name,
            builder: builder.clone(),
            watcher: graceful.watcher(),
            handler: handler.clone(),
            first_request_timeout: limits.header_read_timeout,
        };
        let tls = limits.tls.as_ref().map(|tls| tls.load_full());
        let handshake_timeout = limits.header_read_timeout;
        tokio::spawn(async move {
            match tls {
                None => connection.serve_plain(stream, addr).await,
                Some(config) => {
                    connection
                        .serve_tls(stream, addr, config, handshake_timeout)
                        .await
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    let open = graceful.count();
    if open > 0 {
        tracing::info!(listener = name, open, "draining connections");
    }
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(limits.shutdown_grace) => {
            tracing::warn!(listener = name, "shutdown grace elapsed; closing the remaining connections");
        }
    }
}

fn connection_builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // hyper answers a head larger than its buffer with a bare 431; a smaller
    // excess reaches the gateway, which answers with a problem document.
    let buffer = usize::try_from(limits.max_header_bytes.saturating_mul(2))
        .unwrap_or(usize::MAX)
        .max(8192);
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_headers(limits.max_headers)
        .max_buf_size(buffer);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(buffer).unwrap_or(u32::MAX));
    builder
}

struct Connection<H> {
    name: &'static str,
    builder: Arc<auto::Builder<TokioExecutor>>,
    watcher: Watcher,
    handler: H,
    /// A connection with no complete request head by then is closed.
    first_request_timeout: Duration,
}

impl<H, F> Connection<H>
where
    H: Fn(Request<Incoming>, ClientInfo) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    async fn serve_plain(self, stream: TcpStream, addr: SocketAddr) {
        let client = ClientInfo::new(addr, "http", None);
        let verdicts = Arc::new(Verdicts::default());
        let stream = Watched::new(stream, verdicts.clone());
        self.serve(TokioIo::new(stream), client, verdicts).await;
    }

    async fn serve_tls(
        self,
        stream: TcpStream,
        addr: SocketAddr,
        config: Arc<rustls::ServerConfig>,
        handshake_timeout: Duration,
    ) {
        let handshake = TlsAcceptor::from(config).accept(stream);
        let stream = match tokio::time::timeout(handshake_timeout, handshake).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(err)) => {
                tracing::debug!(listener = self.name, %addr, error = %err, "TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(listener = self.name, %addr, "TLS handshake timed out");
                return;
            }
        };
        let cert_subject = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|cert| crate::tls::certificate_subject(cert));
        let client = ClientInfo::new(addr, "https", cert_subject);
        let verdicts = Arc::new(Verdicts::default());
        let stream = Watched::new(stream, verdicts.clone());
        self.serve(TokioIo::new(stream), client, verdicts).await;
    }

    async fn serve<I>(self, io: I, client: ClientInfo, verdicts: Arc<Verdicts>)
    where
        I: Read + Write + Unpin + Send + 'static,
    {
        let handler = self.handler;
        let started = Arc::new(AtomicBool::new(false));
        let seen = started.clone();
        let service = service_fn(move |request: Request<Incoming>| {
            seen.store(true, Ordering::Relaxed);
            // Decided before the handler runs, so nothing of it is forwarded.
            let refused = verdicts.next_is_ambiguous().then(ambiguous_framing);
            // Boxed: the handler's future is kilobytes; inline, hyper would
            // copy it on every move and every idle connection would carry it.
            let response = refused
                .is_none()
                .then(|| Box::pin(handler(request, client.clone())));
            async move {
                Ok::<_, Infallible>(match (refused, response) {
                    (Some(refused), _) => refused,
                    (None, Some(response)) => response.await,
                    (None, None) => GatewayError::BadRequest("request not handled").to_response(),
                })
            }
        });
        let connection = self.builder.serve_connection(io, service);
        let connection = self.watcher.watch(connection);
        tokio::pin!(connection);
        // hyper's header_read_timeout starts only once the auto builder has
        // seen enough bytes to choose HTTP/1 or HTTP/2: a connection that sends
        // nothing (or a bare "P") would hold its slot forever, and
        // max_connections of them would lock the listener out. Until the first
        // request head is complete, the same timeout applies here.
        let result = tokio::select! {
            result = &mut connection => result,
            () = tokio::time::sleep(self.first_request_timeout) => {
                if !started.load(Ordering::Relaxed) {
                    tracing::debug!(listener = self.name, "no request head in time; closing");
                    return;
                }
                connection.await
            }
        };
        if let Err(err) = result {
            tracing::debug!(listener = self.name, error = %err, "connection ended with an error");
        }
    }
}

/// 400 for a request with both `Content-Length` and `Transfer-Encoding`; the
/// connection closes after it (hyper does so for such a request anyway).
fn ambiguous_framing() -> Response<Body> {
    tracing::debug!("refused a request with both Content-Length and Transfer-Encoding");
    let mut response = GatewayError::BadRequest(
        "a request may not carry both Content-Length and Transfer-Encoding",
    )
    .to_response();
    response.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Found by tests/bad_input.rs: connections that sent nothing (or an
    /// unfinished HTTP/2 preface) were never timed out, so `max_connections`
    /// of them locked the listener out.
    #[tokio::test]
    async fn silent_connections_are_closed_after_header_read_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let limits = Limits {
            max_connections: 1,
            header_read_timeout: Duration::from_millis(200),
            max_header_bytes: 8192,
            max_headers: 100,
            shutdown_grace: Duration::from_millis(100),
            tls: None,
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
