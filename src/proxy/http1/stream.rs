//! The byte stream to an HTTP/1 upstream: plain TCP, or TLS over it.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::uri::{Authority, Scheme};
use pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::proxy::resolve::{self, ResolveError};

pub enum UpstreamStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// Why an upstream's URL cannot be dialed.
#[derive(Debug, thiserror::Error)]
pub enum DialerError {
    #[error("unsupported scheme {0}")]
    Scheme(Scheme),
    #[error("invalid TLS server name {host}: {source}")]
    ServerName {
        host: String,
        #[source]
        source: pki_types::InvalidDnsNameError,
    },
}

/// Where and how to connect: resolved once from the upstream's URL.
#[derive(Clone)]
pub struct Dialer {
    host: String,
    port: u16,
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Dialer {
    /// `tls` is used for `https` only; it is given HTTP/1.1 as its one ALPN protocol.
    pub fn new(
        scheme: &Scheme,
        authority: &Authority,
        tls: rustls::ClientConfig,
    ) -> Result<Self, DialerError> {
        let https = *scheme == Scheme::HTTPS;
        if !https && *scheme != Scheme::HTTP {
            return Err(DialerError::Scheme(scheme.clone()));
        }
        // `[::1]` in a URL, `::1` to resolve and to name a TLS server.
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tls = if https {
            let mut config = tls;
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            let name =
                ServerName::try_from(host.clone()).map_err(|source| DialerError::ServerName {
                    host: host.clone(),
                    source,
                })?;
            Some((TlsConnector::from(Arc::new(config)), name))
        } else {
            None
        };
        Ok(Self { host, port, tls })
    }

    /// Resolves the host (each new connection again), then TCP (with
    /// Nagle off: a request head must not wait for an ACK) to its addresses
    /// in turn, then TLS when the upstream is https. Resolving and TCP end
    /// by `deadline`; an address before the last gets an even share of the
    /// time left, so one that drops connections (a pod gone, its address
    /// still in DNS) leaves time for the others. The caller bounds the
    /// whole, TLS included.
    pub async fn dial(&self, deadline: Instant) -> Result<UpstreamStream, DialFailure> {
        let resolving = resolve::addresses(&self.host, self.port);
        let addresses = match tokio::time::timeout_at(deadline, resolving).await {
            Ok(found) => found?,
            Err(_) => {
                return Err(DialFailure::Resolve(ResolveError {
                    host: self.host.clone(),
                    source: io::Error::new(io::ErrorKind::TimedOut, "no answer in time"),
                }));
            }
        };
        let tcp = connect_any(&addresses, deadline)
            .await
            .map_err(|(addr, source)| DialFailure::Connect {
                target: self.target(),
                addr,
                addresses: addresses.len(),
                named: addr.ip().to_string() != self.host,
                source,
            })?;
        tcp.set_nodelay(true)
            .map_err(|source| DialFailure::Connect {
                target: self.target(),
                addr: tcp.peer_addr().unwrap_or(addresses[0]),
                addresses: 1,
                named: false,
                source,
            })?;
        match &self.tls {
            None => Ok(UpstreamStream::Plain(tcp)),
            Some((connector, name)) => {
                let tls = connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|source| DialFailure::Tls {
                        target: self.target(),
                        source,
                    })?;
                Ok(UpstreamStream::Tls(Box::new(tls)))
            }
        }
    }

    /// `host:port` as a URL writes it (`[::1]:8080`).
    fn target(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// A TCP connection to the first of `addresses` that takes one, in order,
/// by `deadline`: each before the last gets the time left divided by the
/// addresses left. Else the last address tried and its error.
async fn connect_any(
    addresses: &[SocketAddr],
    deadline: Instant,
) -> Result<TcpStream, (SocketAddr, io::Error)> {
    let mut failed = None;
    for (n, addr) in addresses.iter().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        let share = left / u32::try_from(addresses.len() - n).unwrap_or(u32::MAX);
        let until = Instant::now() + share;
        match tokio::time::timeout_at(until, TcpStream::connect(addr)).await {
            Ok(Ok(tcp)) => return Ok(tcp),
            Ok(Err(err)) => failed = Some((*addr, err)),
            Err(_) => {
                let err = io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no connection within {share:?}"),
                );
                failed = Some((*addr, err));
            }
        }
    }
    Err(failed.expect("at least one address"))
}

/// Why dialling an upstream failed: which step, and for which host.
#[derive(Debug, thiserror::Error)]
pub enum DialFailure {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// No address took a TCP connection: the last one tried, its error.
    #[error("{}", connect_text(target, addr, *addresses, *named))]
    Connect {
        target: String,
        addr: SocketAddr,
        addresses: usize,
        /// The url names the host by name, not by this address.
        named: bool,
        #[source]
        source: io::Error,
    },
    #[error("TLS handshake with {target}")]
    Tls {
        target: String,
        #[source]
        source: io::Error,
    },
}

fn connect_text(target: &str, addr: &SocketAddr, addresses: usize, named: bool) -> String {
    match (addresses, named) {
        (1, false) => format!("connecting to {target}"),
        (1, true) => format!("connecting to {target} at {addr}"),
        _ => format!("connecting to {target}: none of its {addresses} addresses; the last, {addr}"),
    }
}

impl AsyncRead for UpstreamStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Self::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpstreamStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Self::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Self::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(tcp) => tcp.is_write_vectored(),
            Self::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Self::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Self::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::net::{TcpListener, TcpSocket};

    use super::*;

    /// An address that takes no connection: a listener whose queue (of one)
    /// is full drops the next ones' SYNs, as a host gone from the network
    /// does. The listener and the connection that fills it are returned.
    async fn dropping() -> (SocketAddr, TcpListener, TcpStream) {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(0).unwrap();
        let addr = listener.local_addr().unwrap();
        let filler = TcpStream::connect(addr).await.unwrap();
        (addr, listener, filler)
    }

    /// A name with several addresses (a headless Service) whose first drops
    /// connections: the others are tried within the one `connect_timeout`,
    /// not after it; one that refuses is passed at once.
    #[tokio::test]
    async fn an_address_that_drops_connections_leaves_time_for_the_next() {
        let live = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let live_addr = live.local_addr().unwrap();
        let (gone, _listener, _filler) = dropping().await;
        let refusing = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let refused = refusing.local_addr().unwrap();
        drop(refusing);

        let connect_timeout = Duration::from_secs(2);
        let started = Instant::now();
        let tcp = connect_any(&[gone, refused, live_addr], started + connect_timeout)
            .await
            .expect("the live address is reached");
        assert_eq!(tcp.peer_addr().unwrap(), live_addr);
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(1500),
            "the dropping address took {took:?} of {connect_timeout:?}"
        );

        // None takes it: the last address tried, by the deadline.
        let (other, _listener2, _filler2) = dropping().await;
        let started = Instant::now();
        let (addr, err) = connect_any(&[gone, other], started + Duration::from_millis(400))
            .await
            .expect_err("no address takes a connection");
        assert_eq!(addr, other);
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        let took = started.elapsed();
        assert!(took < Duration::from_millis(700), "{took:?}");
    }
}
