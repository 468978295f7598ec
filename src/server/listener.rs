//! One accept loop for both planes: HTTP/1.1 and h2c (prior knowledge) through
//! hyper-util's auto builder, a bound on open connections, and graceful
//! shutdown that lets requests in flight finish within a grace period.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::body::Body;
use crate::proxy::ClientInfo;

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub max_header_bytes: u64,
    pub shutdown_grace: Duration,
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
        .max_buf_size(buffer);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(buffer).unwrap_or(u32::MAX));
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
        let client = ClientInfo {
            addr,
            proto: "http",
            cert_subject: None,
        };
        let handler = handler.clone();
        let service = service_fn(move |request| {
            let response = handler(request, client.clone());
            async move { Ok::<_, Infallible>(response.await) }
        });
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(listener = name, error = %err, "connection ended with an error");
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
