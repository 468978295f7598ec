//! Why a TLS listener closed a connection without serving it a request,
//! as a value: counted by its reason (`idemgate_tls_refused_total`), and
//! said naming the peer and the cause at once, then once per interval for
//! each listener and reason, with the count (crate::log_limit). A client
//! that speaks plain HTTP to the port, one refused for its certificate, or
//! one that refuses the gateway's is an operator's to hear about; the
//! internet's scanners, at one line each, would fill the log.
//! A connection closed before it sent a byte (a load balancer's TCP check)
//! is no refusal.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use rustls::AlertDescription;

use crate::log_limit::LogLimit;
use crate::metrics::TLS_REFUSED;

/// Told each refusal, with the listener's name: counts it.
pub type OnTlsRefusal = Arc<dyn Fn(&'static str, RefusalReason) + Send + Sync>;

/// The `reason` label of `idemgate_tls_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalReason {
    PlainHttp,
    Timeout,
    Silent,
    ClientCertificate,
    GatewayCertificate,
    Protocol,
}

impl RefusalReason {
    pub const ALL: [RefusalReason; 6] = [
        RefusalReason::PlainHttp,
        RefusalReason::Timeout,
        RefusalReason::Silent,
        RefusalReason::ClientCertificate,
        RefusalReason::GatewayCertificate,
        RefusalReason::Protocol,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RefusalReason::PlainHttp => "plain_http",
            RefusalReason::Timeout => "timeout",
            RefusalReason::Silent => "silent",
            RefusalReason::ClientCertificate => "client_certificate",
            RefusalReason::GatewayCertificate => "gateway_certificate",
            RefusalReason::Protocol => "protocol",
        }
    }
}

#[derive(Debug)]
pub enum TlsRefusal {
    /// A request in clear, answered 400.
    PlainHttp,
    /// A handshake begun and not finished within `header_read_timeout`
    /// of the accept.
    Timeout,
    /// Not one byte within `header_read_timeout` of the accept: an idle
    /// pool's connection, a port scan, or a client stuck before it starts.
    Silent,
    /// mTLS: the client presented no certificate, or one the client CA
    /// does not vouch for (another CA, expired, not for client use).
    ClientCertificate(rustls::Error),
    /// The client ended the handshake with an alert about the gateway's
    /// certificate: it does not trust it (an incomplete chain, a CA it
    /// lacks, a lapsed certificate).
    GatewayCertificate(AlertDescription),
    /// Any other failed handshake: no shared version, suite or ALPN
    /// protocol, bytes that are not TLS, a client gone mid-way.
    Protocol(io::Error),
}

impl TlsRefusal {
    /// What a failed handshake (tokio-rustls's error) was.
    pub fn of_handshake(error: io::Error) -> Self {
        let tls = error
            .get_ref()
            .and_then(|e| e.downcast_ref::<rustls::Error>());
        match tls {
            Some(
                e @ (rustls::Error::NoCertificatesPresented | rustls::Error::InvalidCertificate(_)),
            ) => TlsRefusal::ClientCertificate(e.clone()),
            Some(rustls::Error::AlertReceived(alert)) if about_a_certificate(*alert) => {
                TlsRefusal::GatewayCertificate(*alert)
            }
            _ => TlsRefusal::Protocol(error),
        }
    }

    pub fn reason(&self) -> RefusalReason {
        match self {
            TlsRefusal::PlainHttp => RefusalReason::PlainHttp,
            TlsRefusal::Timeout => RefusalReason::Timeout,
            TlsRefusal::Silent => RefusalReason::Silent,
            TlsRefusal::ClientCertificate(_) => RefusalReason::ClientCertificate,
            TlsRefusal::GatewayCertificate(_) => RefusalReason::GatewayCertificate,
            TlsRefusal::Protocol(_) => RefusalReason::Protocol,
        }
    }

    /// Counts the refusal, and logs it unless a line for the same listener
    /// and reason was written within the interval.
    pub fn report(&self, listener: &'static str, peer: SocketAddr, count: Option<&OnTlsRefusal>) {
        let reason = self.reason();
        self.log(listener, peer, reason);
        // Counted after the line: whoever sees the count finds the line.
        if let Some(count) = count {
            count(listener, reason);
        }
    }

    fn log(&self, listener: &'static str, peer: SocketAddr, reason: RefusalReason) {
        static LIMIT: LogLimit = LogLimit::new(TLS_REFUSED);
        let place = format!("{listener} {}", reason.as_str());
        let Some(left_out) = LIMIT.admit(&place) else {
            return;
        };
        let not_logged = left_out.count();
        match self {
            // The client's to mend, or the gateway's certificate to fix.
            TlsRefusal::PlainHttp
            | TlsRefusal::ClientCertificate(_)
            | TlsRefusal::GatewayCertificate(_) => {
                tracing::warn!(listener, %peer, not_logged, "{self}{left_out}");
            }
            // Scanners and clients gone away, mostly.
            TlsRefusal::Timeout | TlsRefusal::Silent | TlsRefusal::Protocol(_) => {
                tracing::info!(listener, %peer, not_logged, "{self}{left_out}");
            }
        }
    }
}

impl std::fmt::Display for TlsRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TlsRefusal::PlainHttp => f.write_str(
                "plain HTTP on the TLS listener; answered 400 (the client must use https://)",
            ),
            TlsRefusal::Timeout => f.write_str(
                "TLS handshake not finished within header_read_timeout; connection closed",
            ),
            TlsRefusal::Silent => {
                f.write_str("the client sent no byte within header_read_timeout; connection closed")
            }
            TlsRefusal::ClientCertificate(rustls::Error::NoCertificatesPresented) => {
                f.write_str("client certificate refused: the client presented none")
            }
            TlsRefusal::ClientCertificate(error) => {
                write!(f, "client certificate refused: {error}")
            }
            TlsRefusal::GatewayCertificate(alert) => write!(
                f,
                "the client refused the gateway's certificate (TLS alert {alert:?}): is the \
                 chain in the cert file complete, leaf first, and does the client trust its CA?"
            ),
            TlsRefusal::Protocol(error) => match tls_error(error) {
                Some(rustls::Error::NoApplicationProtocol) => f.write_str(
                    "TLS handshake failed: the client offered no ALPN protocol the gateway \
                     speaks (h2, http/1.1)",
                ),
                _ => write!(f, "TLS handshake failed: {error}"),
            },
        }
    }
}

fn tls_error(error: &io::Error) -> Option<&rustls::Error> {
    error.get_ref()?.downcast_ref::<rustls::Error>()
}

/// The alerts a client sends when it does not accept the server's
/// certificate (RFC 8446 §6.2).
fn about_a_certificate(alert: AlertDescription) -> bool {
    matches!(
        alert,
        AlertDescription::BadCertificate
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handshake_error(error: rustls::Error) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, error)
    }

    #[test]
    fn each_handshake_failure_has_its_reason_and_words() {
        let none =
            TlsRefusal::of_handshake(handshake_error(rustls::Error::NoCertificatesPresented));
        assert_eq!(none.reason(), RefusalReason::ClientCertificate);
        assert_eq!(
            none.to_string(),
            "client certificate refused: the client presented none"
        );
        let unknown = TlsRefusal::of_handshake(handshake_error(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer,
        )));
        assert_eq!(unknown.reason(), RefusalReason::ClientCertificate);
        let alert = TlsRefusal::of_handshake(handshake_error(rustls::Error::AlertReceived(
            AlertDescription::UnknownCA,
        )));
        assert_eq!(alert.reason(), RefusalReason::GatewayCertificate);
        assert!(alert.to_string().contains("UnknownCA"), "{alert}");
        let alpn = TlsRefusal::of_handshake(handshake_error(rustls::Error::NoApplicationProtocol));
        assert_eq!(alpn.reason(), RefusalReason::Protocol);
        assert!(alpn.to_string().contains("ALPN"), "{alpn}");
        let other = TlsRefusal::of_handshake(handshake_error(rustls::Error::AlertReceived(
            AlertDescription::ProtocolVersion,
        )));
        assert_eq!(other.reason(), RefusalReason::Protocol);
        let eof = TlsRefusal::of_handshake(io::Error::from(io::ErrorKind::UnexpectedEof));
        assert_eq!(eof.reason(), RefusalReason::Protocol);
    }
}
