//! TLS to PostgreSQL with rustls, as the URL's `sslmode` and `sslrootcert`
//! ask.
//!
//! - `sslmode=require`: the server must speak TLS and its certificate is
//!   verified against the platform's roots (or `SSL_CERT_FILE` /
//!   `SSL_CERT_DIR` when set) and the host name — stricter than libpq's
//!   `require`, which encrypts without verifying: an unverified channel would
//!   hand the database password to anyone in the path.
//! - `sslmode=verify-full`: the same, as libpq names it; with
//!   `sslrootcert=FILE` the server's certificate must chain to the CAs of that
//!   PEM file alone (a private CA), and the host name is still checked.
//!   `sslrootcert=system` is the platform's roots, as in libpq 16.
//! - Any other mode (`disable`, or `prefer`, the default) connects without
//!   TLS, as a plain local database expects; idemgate never negotiates an
//!   unverified TLS session. `sslrootcert` with them is refused: it says the
//!   operator expected a verified channel.
//!
//! The driver knows `disable`, `prefer` and `require` only and no
//! `sslrootcert`: both are read here and taken out of the URL it parses.

use std::path::PathBuf;
use std::sync::Arc;

use percent_encoding::percent_decode_str;
use rustls::ClientConfig;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::cause::{PostgresCause, RootCertProblem};
use crate::tls::PemProblem;

/// The URL for the driver, and the TLS connector when the URL asks for TLS.
pub fn prepare(url: &str) -> Result<(String, Option<MakeRustlsConnect>), PostgresCause> {
    let (driver_url, asked) = split(url)?;
    let connector = match asked {
        Asked::Plain => None,
        Asked::Verified(roots) => Some(connector(roots)?),
    };
    Ok((driver_url, connector))
}

#[derive(Debug, PartialEq)]
enum Asked {
    Plain,
    /// `None`: the platform's roots.
    Verified(Option<PathBuf>),
}

/// Reads `sslmode` and `sslrootcert` off the URL's query; `verify-full`
/// reaches the driver as `require`, `sslrootcert` not at all.
fn split(url: &str) -> Result<(String, Asked), PostgresCause> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), Asked::Plain));
    };
    let (mut mode, mut mode_pair, mut root) = (None, None, None);
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "sslmode" => (mode, mode_pair) = (Some(value), Some(pair)),
            "sslrootcert" => {
                root = Some(percent_decode_str(value).decode_utf8_lossy().into_owned())
            }
            _ => kept.push(pair),
        }
    }
    let verified = match mode {
        Some("verify-full") => {
            kept.push("sslmode=require");
            true
        }
        Some("require") => {
            kept.push("sslmode=require");
            true
        }
        Some("verify-ca") => {
            return Err(refused(
                "sslmode=verify-ca is not supported: use verify-full (the host name is always checked)",
            ));
        }
        Some(_) => {
            // disable, prefer, or a value the driver refuses with its own words.
            kept.extend(mode_pair);
            false
        }
        None => false,
    };
    let root = match root.as_deref() {
        None | Some("system") => None,
        Some("") => return Err(refused("sslrootcert is empty")),
        Some(path) => Some(PathBuf::from(path)),
    };
    if !verified && (root.is_some() || query.contains("sslrootcert=")) {
        return Err(refused(
            "sslrootcert needs sslmode=verify-full (or require): without it the connection is not verified",
        ));
    }
    let driver_url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((
        driver_url,
        if verified {
            Asked::Verified(root)
        } else {
            Asked::Plain
        },
    ))
}

fn refused(why: &'static str) -> PostgresCause {
    PostgresCause::UrlRefused(why)
}

fn connector(root_file: Option<PathBuf>) -> Result<MakeRustlsConnect, PostgresCause> {
    let mut roots = rustls::RootCertStore::empty();
    match root_file {
        Some(path) => {
            let read = |problem| PostgresCause::RootCert {
                path: path.clone(),
                problem,
            };
            let pem =
                std::fs::read(&path).map_err(|e| read(RootCertProblem::Unreadable(Arc::new(e))))?;
            let certs = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| read(RootCertProblem::NotPem(Arc::new(PemProblem(e)))))?;
            if certs.is_empty() && crate::tls::is_der(&pem) {
                return Err(read(RootCertProblem::Der));
            }
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(read(RootCertProblem::NoCa));
            }
        }
        None => {
            let loaded = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(loaded.certs);
            if added == 0 {
                return Err(PostgresCause::NoTrustedRoots);
            }
        }
    }
    // An explicit provider: no process-wide default has to be installed first.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(PostgresCause::TlsSetup)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(tls))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_full_reaches_the_driver_as_require_without_sslrootcert() {
        let (url, asked) =
            split("postgres://u@db.internal/app?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x")
                .unwrap();
        assert_eq!(
            url,
            "postgres://u@db.internal/app?application_name=x&sslmode=require"
        );
        assert_eq!(asked, Asked::Verified(Some("/etc/ca.pem".into())));
        let (_, system) = split("postgres://h/d?sslmode=verify-full&sslrootcert=system").unwrap();
        assert_eq!(system, Asked::Verified(None));
        let (url, asked) = split("postgres://h/d?sslmode=require").unwrap();
        assert_eq!(
            (url.as_str(), asked),
            ("postgres://h/d?sslmode=require", Asked::Verified(None))
        );
    }

    #[test]
    fn plain_modes_stay_plain_and_refuse_a_root_certificate() {
        for url in [
            "postgres://h/d",
            "postgres://h/d?sslmode=disable",
            "postgres://h/d?sslmode=prefer",
        ] {
            assert_eq!(split(url).unwrap(), (url.to_owned(), Asked::Plain));
        }
        assert!(split("postgres://h/d?sslrootcert=/ca.pem").is_err());
        assert!(split("postgres://h/d?sslmode=prefer&sslrootcert=/ca.pem").is_err());
        assert!(split("postgres://h/d?sslmode=verify-full&sslrootcert=").is_err());
        assert!(split("postgres://h/d?sslmode=verify-ca").is_err());
    }

    #[test]
    fn a_missing_root_file_is_a_clear_error() {
        let Err(error @ PostgresCause::RootCert { .. }) =
            prepare("postgres://h/d?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem")
        else {
            panic!("expected an unreadable root certificate file");
        };
        let text = error.to_string();
        assert!(text.contains("/nonexistent/ca.pem"), "{text}");
    }
}
