//! The Redis client for `redis://` and `rediss://` URLs. Over TLS the server
//! is verified against the platform's roots, or only against `[store.redis]
//! ca` when given (a private CA), and always by host name.

use std::path::Path;
use std::sync::Arc;

use redis::{Client, ConnectionAddr, TlsCertificates};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::cause::RedisCause;
use crate::store::setting::{Setting, SettingError};
use crate::tls::PemProblem;

/// Reads the URL and the CA file (its certificates parsed); connects to
/// nothing.
pub fn client(url: &str, ca: Option<&Path>) -> Result<Client, SettingError> {
    // The URL may carry a password: errors name the faulty part, or keep the
    // client's kind only, never its text.
    if let Some(problem) = super::url::problem(url) {
        return Err(SettingError::new(
            Setting::RedisUrl,
            RedisCause::BadUrl(problem),
        ));
    }
    let client = Client::open(url)
        .map_err(|e| SettingError::new(Setting::RedisUrl, RedisCause::InvalidUrl(e.kind())))?;
    // `#insecure` asks for a session whose certificate is not verified. The
    // client is built without that, so it would refuse every connection and
    // Redis would be down for good; idemgate never uses one anyway.
    if matches!(
        client.get_connection_info().addr(),
        ConnectionAddr::TcpTls { insecure: true, .. }
    ) {
        return Err(SettingError::new(Setting::RedisUrl, RedisCause::Unverified));
    }
    let Some(ca) = ca else {
        return Ok(client);
    };
    let refused = |cause: RedisCause| SettingError::new(Setting::RedisCa, cause);
    let pem = std::fs::read(ca).map_err(|e| {
        refused(RedisCause::CaUnreadable {
            path: ca.to_owned(),
            source: Arc::new(e),
        })
    })?;
    // The client takes a file without a certificate (empty, or not PEM) as
    // a CA that trusts nothing: Redis would be down for good, and silently
    // so. A malformed one it refuses with no more than "I/O error".
    let parsed = CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>();
    let certificates = parsed.map_err(|error| {
        refused(RedisCause::CaNotPem {
            path: ca.to_owned(),
            problem: Arc::new(PemProblem(error)),
        })
    })?;
    if certificates.is_empty() {
        let path = ca.to_owned();
        return Err(refused(match crate::tls::is_der(&pem) {
            true => RedisCause::CaDer { path },
            false => RedisCause::CaHoldsNoCertificate { path },
        }));
    }
    let certificates = TlsCertificates {
        client_tls: None,
        root_cert: Some(pem),
    };
    Client::build_with_tls(url, certificates).map_err(|e| {
        refused(RedisCause::CaRefused {
            path: ca.to_owned(),
            kind: e.kind(),
        })
    })
}
