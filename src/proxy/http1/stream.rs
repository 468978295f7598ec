//! The byte stream to an HTTP/1 upstream: plain TCP, or TLS over it.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::uri::{Authority, Scheme};
use pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

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

    /// TCP (with Nagle off: a request head must not wait for an ACK), then
    /// TLS when the upstream is https. The caller bounds the time.
    pub async fn dial(&self) -> io::Result<UpstreamStream> {
        let tcp = TcpStream::connect((self.host.as_str(), self.port)).await?;
        tcp.set_nodelay(true)?;
        match &self.tls {
            None => Ok(UpstreamStream::Plain(tcp)),
            Some((connector, name)) => {
                let tls = connector.connect(name.clone(), tcp).await?;
                Ok(UpstreamStream::Tls(Box::new(tls)))
            }
        }
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
