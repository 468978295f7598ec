//! A certificate chain and its private key, read as one. A rotation that
//! replaces both files (a Kubernetes Secret's `..data` link flipped,
//! cert-manager writing the pair) can land between the two reads, which
//! then hold halves of different pairs: such a read is read once more
//! before it is refused, so a reload racing a rotation is not refused for
//! a mismatch that the files on disk do not have.

use std::path::{Path, PathBuf};

use pki_types::{CertificateDer, PrivateKeyDer};

use super::error::{TlsCause, TlsError};
use super::pem::{load_certs, load_key};
use super::provider::provider;

/// A chain and its key as read from their files, and the fields that name
/// them (`server.tls.cert`, `server.tls.key`).
pub struct Pair {
    pub certs: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    cert_path: PathBuf,
    key_path: PathBuf,
    cert_field: String,
    key_field: String,
}

impl Pair {
    /// Reads both files; a chain whose first certificate is not the key's is
    /// read again once (the second read stands, matched or not: rustls then
    /// says why it refuses it).
    pub fn read(
        cert: &Path,
        key: &Path,
        cert_field: String,
        key_field: String,
    ) -> Result<Pair, TlsError> {
        let read = || -> Result<Pair, TlsError> {
            Ok(Pair {
                certs: load_certs(cert, &cert_field)?,
                key: load_key(key, &key_field)?,
                cert_path: cert.to_owned(),
                key_path: key.to_owned(),
                cert_field: cert_field.clone(),
                key_field: key_field.clone(),
            })
        };
        let first = read()?;
        if first.matches() { Ok(first) } else { read() }
    }

    /// Whether the key is not the one of the chain's first certificate (a
    /// key rustls cannot load, or cannot compare, is not: reading it again
    /// would not mend it).
    fn matches(&self) -> bool {
        let Ok(signing) = provider()
            .key_provider
            .load_private_key(self.key.clone_key())
        else {
            return true;
        };
        let mismatch = rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch);
        rustls::sign::CertifiedKey::new(self.certs.clone(), signing).keys_match() != Err(mismatch)
    }

    /// Why rustls refused the chain with the key, naming the cert file's
    /// field when the key's certificate is in the chain but not first, and
    /// the key's otherwise.
    pub fn refused(&self, error: rustls::Error) -> TlsError {
        let (cert, key) = (self.cert_path.clone(), self.key_path.clone());
        match error {
            rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
                match self.position_of_key() {
                    Some(index) => TlsError::new(
                        &self.cert_field,
                        TlsCause::ChainOrder {
                            cert,
                            key,
                            position: index + 1,
                            count: self.certs.len(),
                        },
                    ),
                    None => TlsError::new(&self.key_field, TlsCause::KeyMismatch { key, cert }),
                }
            }
            error => TlsError::new(&self.key_field, TlsCause::KeyRefused { cert, error }),
        }
    }

    /// Where in the chain, past its first, the key's certificate is.
    fn position_of_key(&self) -> Option<usize> {
        let signing = provider()
            .key_provider
            .load_private_key(self.key.clone_key())
            .ok()?;
        self.certs
            .iter()
            .enumerate()
            .skip(1)
            .find_map(|(index, cert)| {
                let one = rustls::sign::CertifiedKey::new(vec![cert.clone()], signing.clone());
                one.keys_match().is_ok().then_some(index)
            })
    }
}
