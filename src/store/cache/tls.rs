//! The Redis client for `redis://` and `rediss://` URLs. Over TLS the server
//! is verified against the platform's roots, or only against `[store.redis]
//! ca` when given (a private CA), and always by host name.

use std::path::Path;

use redis::{Client, TlsCertificates};

use crate::store::StoreError;

pub fn client(url: &str, ca: Option<&Path>) -> Result<Client, StoreError> {
    // The URL may carry a password: messages name the problem only.
    let invalid = |e: redis::RedisError| {
        StoreError::Unavailable(format!("store.redis: invalid URL ({:?})", e.kind()))
    };
    let Some(ca) = ca else {
        return Client::open(url).map_err(invalid);
    };
    let pem = std::fs::read(ca).map_err(|e| {
        StoreError::Unavailable(format!("store.redis.ca: cannot read {}: {e}", ca.display()))
    })?;
    let certificates = TlsCertificates {
        client_tls: None,
        root_cert: Some(pem),
    };
    Client::build_with_tls(url, certificates).map_err(|e| {
        StoreError::Unavailable(format!(
            "store.redis: {} cannot be used as a CA ({:?})",
            ca.display(),
            e.kind()
        ))
    })
}
