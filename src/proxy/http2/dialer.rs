//! How an HTTP/2 upstream is dialed: TCP (and TLS for https) by hyper's
//! connectors, the whole of it bounded by `connect_timeout`, `h2` required
//! by ALPN over TLS, each connection counted in [`Http2Connections`].

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use http::uri::Scheme;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::{Connection, HttpConnector};

use super::connections::{Http2Connections, Tracked};
use crate::body::BoxError;
use crate::proxy::resolve::NameResolver;

pub type H2Connector = HttpsConnector<HttpConnector<NameResolver>>;

/// The dialer of an upstream with `http2 = true`.
pub fn dialer(
    tls: rustls::ClientConfig,
    connect_timeout: Duration,
    connections: Arc<Http2Connections>,
) -> RequireH2<H2Connector> {
    // Resolves the name for each new connection; hyper's connector splits
    // `connect_timeout` among its addresses (tried in turn, IPv6 and IPv4
    // raced after 300 ms), as the HTTP/1 dialer shares it out.
    let mut http = HttpConnector::new_with_resolver(NameResolver);
    http.set_connect_timeout(Some(connect_timeout));
    http.set_nodelay(true);
    // The TLS layer decides by scheme; it needs the inner connector to accept https.
    http.enforce_http(false);
    let connector = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http2()
        .wrap_connector(http);
    RequireH2 {
        inner: connector,
        connect_timeout,
        connections,
    }
}

/// An HTTP/2 upstream over TLS must agree to `h2` by ALPN. One that speaks
/// HTTP/1 only (and ignores ALPN, as many do) would otherwise get the
/// HTTP/2 preface, refuse it, and every keyed request would be stored as
/// `outcome-unknown` though none ran. Refused at connect instead, where
/// nothing was sent: 502 `upstream-unreachable`, key freed.
///
/// The whole connect (TCP, the TLS handshake, the ALPN check) is bounded by
/// `connect_timeout`, as the HTTP/1 dialer's is: hyper's connector bounds
/// the TCP connect only, and a handshake the upstream never finishes would
/// run into the request's `timeout`, a keyed request then stored as
/// `outcome-unknown` though nothing of it was sent.
#[derive(Debug, Clone)]
pub struct RequireH2<C> {
    inner: C,
    connect_timeout: Duration,
    connections: Arc<Http2Connections>,
}

impl<C> tower_service::Service<Uri> for RequireH2<C>
where
    C: tower_service::Service<Uri>,
    C::Response: Connection + Send + 'static,
    C::Error: Into<BoxError>,
    C::Future: Send + 'static,
{
    type Response = Tracked<C::Response>;
    type Error = BoxError;
    // Boxed: a connection is opened rarely.
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let tls = uri.scheme() == Some(&Scheme::HTTPS);
        let target = target(&uri);
        let connecting = self.inner.call(uri);
        let connect_timeout = self.connect_timeout;
        let connections = self.connections.clone();
        Box::pin(async move {
            let stream = match tokio::time::timeout(connect_timeout, connecting).await {
                Ok(connected) => connected.map_err(|source| ConnectFailure {
                    target,
                    source: source.into(),
                })?,
                Err(_) => {
                    let late =
                        format!("connecting to {target}: no connection within {connect_timeout:?}");
                    return Err(late.into());
                }
            };
            if tls && !stream.connected().is_negotiated_h2() {
                return Err(
                    "the upstream did not agree to HTTP/2 (ALPN h2); if it speaks \
                            HTTP/1.1 only, set http2 = false"
                        .into(),
                );
            }
            Ok(connections.track(stream))
        })
    }
}

/// Opening a connection to `target` (`host:port`) failed: hyper's words
/// ("dns error", "tcp connect error") say how, not to where.
#[derive(Debug, thiserror::Error)]
#[error("connecting to {target}")]
struct ConnectFailure {
    target: String,
    #[source]
    source: BoxError,
}

/// The url's host and port, the port its scheme's when it has none.
fn target(uri: &Uri) -> String {
    let host = uri.host().unwrap_or_default();
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme() == Some(&Scheme::HTTPS) {
            443
        } else {
            80
        });
    format!("{host}:{port}")
}
