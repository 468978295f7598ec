use std::path::Path;

use pki_types::pem::PemObject;
use pki_types::{CertificateDer, PrivateKeyDer};

/// Every certificate in a PEM file; an empty file is an error.
pub fn load_certs(path: &Path, field: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{field}: cannot read {}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{field}: {} is not valid PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{field}: no certificate in {}", path.display()));
    }
    Ok(certs)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) in a PEM file.
pub fn load_key(path: &Path, field: &str) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| format!("{field}: no usable private key in {}: {e}", path.display()))
}
