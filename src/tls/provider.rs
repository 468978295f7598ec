//! The one crypto provider every TLS configuration is built with: `ring`,
//! so building needs no cmake.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
