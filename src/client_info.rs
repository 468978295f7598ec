//! What the gateway knows of a client's connection: made by the listener
//! that accepted it, read by the gateway (scopes) and the upstream hop
//! (`X-Forwarded-*`).

use std::net::SocketAddr;

use http::HeaderValue;

/// What the gateway knows of the client's connection.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    pub addr: SocketAddr,
    /// `http` or `https`, for `X-Forwarded-Proto`.
    pub proto: &'static str,
    /// Subject of the verified TLS client certificate, when mTLS is on.
    pub cert_subject: Option<String>,
    /// The client's address as `X-Forwarded-For` carries it, made once per
    /// connection rather than formatted for every request.
    forwarded_ip: Option<HeaderValue>,
}

impl ClientInfo {
    pub fn new(addr: SocketAddr, proto: &'static str, cert_subject: Option<String>) -> Self {
        Self {
            addr,
            proto,
            cert_subject,
            forwarded_ip: HeaderValue::try_from(addr.ip().to_string()).ok(),
        }
    }

    /// The client's address as a value of `X-Forwarded-For`.
    pub fn forwarded_for(&self) -> Option<&HeaderValue> {
        self.forwarded_ip.as_ref()
    }
}
