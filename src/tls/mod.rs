//! rustls configurations, built from PEM files named in the config: the
//! listener's (certificate, key, optional client CA for mTLS) and each https
//! upstream's (the system's roots, or the compiled-in Mozilla set where it has
//! none, plus an optional CA; an optional client certificate).

mod error;
mod pair;
mod pem;
mod pem_problem;
mod provider;

use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;

use crate::config::{Config, TlsConfig, UpstreamTlsConfig};

pub use error::{TlsCause, TlsError};
use pair::Pair;
pub use pem::{is_der, load_certs, load_key};
pub use pem_problem::PemProblem;
use provider::provider;

/// A listener's TLS configuration, swapped on reload so new certificates
/// apply to new connections while open ones keep theirs.
pub type TlsSettings = Arc<ArcSwap<rustls::ServerConfig>>;

/// The listener's configuration, ALPN `h2` then `http/1.1`.
pub fn server_config(tls: &TlsConfig) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    listener_config(tls, "server.tls")
}

/// The admin plane's (`[admin.tls]`), built as the data plane's.
pub fn admin_config(tls: &TlsConfig) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    listener_config(tls, "admin.tls")
}

/// A listener's configuration from `[table]`; errors name `table.FIELD`.
fn listener_config(tls: &TlsConfig, table: &str) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let field = |name: &str| format!("{table}.{name}");
    let pair = Pair::read(&tls.cert, &tls.key, field("cert"), field("key"))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::new(table, TlsCause::Rustls(e)))?;
    let builder = match &tls.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = root_store(ca, &field("client_ca"), RootCertStore::empty())?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| TlsError::new(field("client_ca"), TlsCause::ClientVerifier(e)))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = (builder.with_single_cert(pair.certs.clone(), pair.key.clone_key()))
        .map_err(|error| pair.refused(error))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// An https upstream's configuration. Roots are the system's trust store
/// (docs/configuration.md#tls), read again at every load and reload;
/// where the system has none (a minimal image), the Mozilla set compiled
/// into the binary (webpki-roots). `tls.ca` adds a private CA to either.
pub fn client_config(
    upstream: &str,
    tls: Option<&UpstreamTlsConfig>,
) -> Result<rustls::ClientConfig, TlsError> {
    client_config_read(upstream, tls).map(|(config, _)| config)
}

/// What a client config was made of: every root it trusts, and the
/// certificate and key it presents, as read. Two reads that find the same
/// bytes are equal, so a reload can tell that an https upstream's trust is
/// unchanged and keep its connections (src/proxy/upstream.rs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustRead([u8; 32]);

/// `client_config`, with what it was made of.
pub fn client_config_read(
    upstream: &str,
    tls: Option<&UpstreamTlsConfig>,
) -> Result<(rustls::ClientConfig, TrustRead), TlsError> {
    use sha2::Digest;
    let field = |name: &str| format!("upstreams.{upstream}.tls.{name}");
    let mut roots = system_roots();
    if roots.is_empty() {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    if let Some(ca) = tls.and_then(|t| t.ca.as_ref()) {
        roots = root_store(ca, &field("ca"), roots)?;
    }
    let mut read = sha2::Sha256::new();
    let mut take = |bytes: &[u8]| {
        read.update((bytes.len() as u64).to_be_bytes());
        read.update(bytes);
    };
    for root in &roots.roots {
        take(root.subject.as_ref());
        take(root.subject_public_key_info.as_ref());
        take(root.name_constraints.as_deref().unwrap_or_default());
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::new(field("ca"), TlsCause::Rustls(e)))?
        .with_root_certificates(roots);
    // ALPN is set by the user of the config: `http/1.1` by the HTTP/1 dialer,
    // `h2` by hyper-rustls for HTTP/2 upstreams.
    let config = match tls.and_then(|t| t.cert.as_ref().zip(t.key.as_ref())) {
        Some((cert, key)) => {
            let pair = Pair::read(cert, key, field("cert"), field("key"))?;
            for cert in &pair.certs {
                take(cert.as_ref());
            }
            take(pair.key.secret_der());
            builder
                .with_client_auth_cert(pair.certs.clone(), pair.key.clone_key())
                .map_err(|error| pair.refused(error))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok((config, TrustRead(read.finalize().into())))
}

/// The system's trust store as OpenSSL finds it (`SSL_CERT_FILE` and
/// `SSL_CERT_DIR` included); certificates it cannot parse are skipped, as
/// OpenSSL skips them.
fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    let loaded = rustls_native_certs::load_native_certs();
    let _ = roots.add_parsable_certificates(loaded.certs);
    roots
}

fn root_store(
    path: &Path,
    field: &str,
    mut roots: RootCertStore,
) -> Result<RootCertStore, TlsError> {
    for cert in load_certs(path, field)? {
        roots.add(cert).map_err(|error| {
            let path = path.to_path_buf();
            TlsError::new(field, TlsCause::BadRoot { path, error })
        })?;
    }
    Ok(roots)
}

/// The certificates the gateway presents (`server.tls.cert`, each
/// `upstreams.NAME.tls.cert`) that are not valid now, one `field: ...` line
/// each. A warning, not an error: a gateway restarted with a lapsed
/// certificate still serves its admin plane and the clients that do not
/// verify, and refusing to start would not bring the certificate back; but
/// every verifying peer now refuses it, and the operator must hear why.
pub fn validity_warnings(config: &Config) -> Vec<String> {
    let mut presented: Vec<(String, &Path)> = Vec::new();
    if let Some(tls) = &config.server.tls {
        presented.push(("server.tls.cert".to_string(), &tls.cert));
    }
    if let Some(tls) = &config.admin.tls {
        presented.push(("admin.tls.cert".to_string(), &tls.cert));
    }
    for upstream in config.upstreams.values() {
        if let Some(cert) = upstream.tls.as_ref().and_then(|tls| tls.cert.as_ref()) {
            presented.push((format!("upstreams.{}.tls.cert", upstream.name), cert));
        }
    }
    presented.sort();
    let now = x509_parser::time::ASN1Time::now();
    presented
        .into_iter()
        .filter_map(|(field, path)| {
            // An unreadable file is an error reported by `server_config` or
            // `client_config`; only the leaf (the first) is the one presented.
            let certs = load_certs(path, &field).ok()?;
            let (_, cert) = x509_parser::parse_x509_certificate(certs.first()?).ok()?;
            let validity = cert.validity();
            if now > validity.not_after {
                Some(format!(
                    "{field}: the certificate in {} expired on {}; peers that verify it refuse it",
                    path.display(),
                    validity.not_after
                ))
            } else if now < validity.not_before {
                Some(format!(
                    "{field}: the certificate in {} is not valid before {}; peers that verify it \
                     refuse it",
                    path.display(),
                    validity.not_before
                ))
            } else {
                None
            }
        })
        .collect()
}

/// The subject of a verified client certificate, e.g. `CN=tenant-a, O=Acme`.
pub fn certificate_subject(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(cert.subject().to_string())
}
