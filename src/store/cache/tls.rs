//! The Redis client for `redis://` and `rediss://` URLs. Over TLS the server
//! is verified against the platform's roots, or only against `[store.redis]
//! ca` when given (a private CA), and always by host name.

use std::path::Path;
use std::sync::Arc;

use redis::{Client, TlsCertificates};

use super::cause::RedisCause;

pub fn client(url: &str, ca: Option<&Path>) -> Result<Client, RedisCause> {
    // The URL may carry a password: errors keep the problem's kind only.
    let invalid = |e: redis::RedisError| RedisCause::InvalidUrl(e.kind());
    let Some(ca) = ca else {
        return Client::open(url).map_err(invalid);
    };
    let pem = std::fs::read(ca).map_err(|e| RedisCause::CaUnreadable {
        path: ca.to_owned(),
        source: Arc::new(e),
    })?;
    let certificates = TlsCertificates {
        client_tls: None,
        root_cert: Some(pem),
    };
    Client::build_with_tls(url, certificates).map_err(|e| RedisCause::CaRefused {
        path: ca.to_owned(),
        kind: e.kind(),
    })
}
