//! TLS to PostgreSQL with rustls, when the URL says `sslmode=require`.
//!
//! Then the server must speak TLS and its certificate is verified against the
//! platform's roots (or `SSL_CERT_FILE` / `SSL_CERT_DIR` when set) and the
//! host name — stricter than libpq's `require`, which encrypts without
//! verifying: an unverified channel would hand the database password to
//! anyone in the path. Any other mode (`disable`, or `prefer`, the default)
//! connects without TLS, as a plain local database expects; idemgate never
//! negotiates an unverified TLS session.

use std::sync::Arc;

use rustls::ClientConfig;
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::store::StoreError;

/// Whether the URL asks for TLS.
pub fn required(config: &tokio_postgres::Config) -> bool {
    config.get_ssl_mode() == SslMode::Require
}

pub fn connector() -> Result<MakeRustlsConnect, StoreError> {
    let loaded = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(loaded.certs);
    if added == 0 {
        return Err(StoreError::Unavailable(
            "sslmode=require but no trusted CA certificates were found \
             (install ca-certificates or set SSL_CERT_FILE)"
                .into(),
        ));
    }
    // An explicit provider: no process-wide default has to be installed first.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Unavailable(format!("postgres TLS setup: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(tls))
}
