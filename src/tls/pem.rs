//! Certificates and private keys read from PEM files, with a cause an
//! operator can act on when a file is DER, holds an encrypted key, or holds
//! none.

use std::path::Path;

use pki_types::pem::PemObject;
use pki_types::{CertificateDer, PrivateKeyDer};

use super::error::{TlsCause, TlsError};
use super::pem_problem::PemProblem;

/// Every certificate in a PEM file; an empty file is an error.
pub fn load_certs(path: &Path, field: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let path_buf = || path.to_path_buf();
    let failed = |cause| TlsError::new(field, cause);
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|error| {
            failed(TlsCause::Unreadable {
                path: path_buf(),
                error,
            })
        })?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| {
            // The file is opened before it is read: a directory, or a read
            // that fails, shows only here, and is no fault of its PEM.
            let path = path_buf();
            failed(match error {
                pki_types::pem::Error::Io(_) => TlsCause::Unreadable { path, error },
                _ => TlsCause::NotPem {
                    path,
                    error: PemProblem(error),
                },
            })
        })?;
    if certs.is_empty() {
        let path = path_buf();
        return Err(failed(match std::fs::read(&path) {
            Ok(der) if is_der(&der) => TlsCause::Der { path, tool: "x509" },
            _ => TlsCause::NoCertificate { path },
        }));
    }
    Ok(certs)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) in a PEM file.
pub fn load_key(path: &Path, field: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|error| {
        let path = path.to_path_buf();
        // The parser reads past an encrypted key ("no items found") or
        // trips on its headers: say what is wrong and how to mend it.
        let cause = match (&error, std::fs::read(&path)) {
            (pki_types::pem::Error::Io(_), _) => TlsCause::Unreadable { path, error },
            (_, Ok(pem)) if is_encrypted(&pem) => TlsCause::EncryptedKey { path },
            (_, Ok(der)) if is_der(&der) => TlsCause::Der { path, tool: "pkey" },
            _ => TlsCause::NoKey {
                path,
                error: PemProblem(error),
            },
        };
        TlsError::new(field, cause)
    })
}

/// One ASN.1 SEQUENCE, as a DER certificate or key is: a long-form length
/// (a byte text never holds), or a short one that spans the whole file (a
/// small EC key). Also how the store's CA files are told apart.
pub fn is_der(bytes: &[u8]) -> bool {
    match bytes {
        [0x30, 0x81..=0x84, ..] => true,
        [0x30, short, rest @ ..] => usize::from(*short) == rest.len(),
        _ => false,
    }
}

/// A PKCS#8 `ENCRYPTED PRIVATE KEY`, or a traditional PEM key with
/// `Proc-Type: 4,ENCRYPTED`.
fn is_encrypted(pem: &[u8]) -> bool {
    [
        &b"-----BEGIN ENCRYPTED PRIVATE KEY-----"[..],
        b"Proc-Type: 4,ENCRYPTED",
    ]
    .iter()
    .any(|marker| pem.windows(marker.len()).any(|window| window == *marker))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An encrypted key is named as such: "no items found" would send the
    /// operator looking for a wrong path.
    #[test]
    fn an_encrypted_key_is_named_as_such() {
        let dir = std::env::temp_dir().join(format!("idemgate-pem-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pkcs8 = dir.join("pkcs8.key");
        std::fs::write(
            &pkcs8,
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\n\
             MIHsMFcGCSqGSIb3DQEFDTBKMCkGCSqGSIb3DQEFDDAcBAh524GXk12D9AICCAAw\n\
             DAYIKoZIhvcNAgkFADAdBglghkgBZQMEASoEEOYm5d21yVAQH0BEq7N5VtgEgZAe\n\
             nOU1G/XbytNb+MY54RR0q1pYfeX+bHN4qJ2hdkbzKBLphMLwH/QGgty6IZNbQMgQ\n\
             6ZiVLr1btCVlvhSd64yhUaQPoDhJ4LTnnN/HohWoOuLxQGO7M9TG4IAyuol0uhUN\n\
             hCR6CxrzEwE44UXAnvrQpraENupz0LCmkAEzI0iExQSPBGOT9n+Hrvs6e+JPGno=\n\
             -----END ENCRYPTED PRIVATE KEY-----\n",
        )
        .unwrap();
        let traditional = dir.join("traditional.key");
        std::fs::write(
            &traditional,
            "-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n\
             DEK-Info: AES-128-CBC,8DA9560A1BC2258A6B60A88BD8B8BA49\n\nAAAA\n\
             -----END EC PRIVATE KEY-----\n",
        )
        .unwrap();
        for path in [&pkcs8, &traditional] {
            let error = load_key(path, "server.tls.key").unwrap_err().to_string();
            assert!(error.starts_with("server.tls.key: "), "{error}");
            assert!(error.contains("is encrypted"), "{error}");
        }
        let missing =
            (load_key(&dir.join("missing.key"), "server.tls.key").unwrap_err()).to_string();
        assert!(!missing.contains("encrypted"), "{missing}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A DER certificate or key (a Windows export, `openssl ... -outform
    /// der`) is named as such, with the conversion.
    #[test]
    fn a_der_file_is_named_as_such() {
        let dir = std::env::temp_dir().join(format!("idemgate-der-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cert = dir.join("cert.der");
        let mut der = vec![0x30, 0x82, 0x01, 0x00];
        der.extend([0u8; 256]);
        std::fs::write(&cert, &der).unwrap();
        let key = dir.join("ec.der");
        let mut ec = vec![0x30, 0x77];
        ec.extend([0u8; 0x77]);
        std::fs::write(&key, &ec).unwrap();
        let error = load_certs(&cert, "server.tls.cert")
            .unwrap_err()
            .to_string();
        assert!(error.contains("is DER (binary), not PEM"), "{error}");
        assert!(error.contains("openssl x509 -inform der"), "{error}");
        let error = load_key(&key, "server.tls.key").unwrap_err().to_string();
        assert!(error.contains("openssl pkey -inform der"), "{error}");
        // Text that happens to start with "0" is not taken for DER.
        let text = dir.join("text.pem");
        std::fs::write(&text, "0w not a certificate\n").unwrap();
        let error = load_certs(&text, "server.tls.cert")
            .unwrap_err()
            .to_string();
        assert!(error.contains("no certificate in"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A directory named as a certificate cannot be read; it is not a
    /// file of bad PEM.
    #[test]
    fn a_directory_is_unreadable_not_bad_pem() {
        let dir = std::env::temp_dir();
        let error = load_certs(&dir, "admin.tls.cert").unwrap_err();
        assert!(
            matches!(error.cause, TlsCause::Unreadable { .. }),
            "{error}"
        );
        let text = error.to_string();
        assert!(
            text.starts_with(&format!("admin.tls.cert: cannot read {}", dir.display())),
            "{text}"
        );
    }
}
