//! Why a TLS configuration cannot be built: the field of the file it
//! concerns, and the cause as a value. Its text is `field: cause`.

use std::path::PathBuf;

use pki_types::pem;

use super::pem_problem::PemProblem;

#[derive(Debug, thiserror::Error)]
#[error("{field}: {cause}")]
pub struct TlsError {
    /// The setting, as the file spells it (`server.tls.key`).
    pub field: String,
    pub cause: TlsCause,
}

impl TlsError {
    pub fn new(field: impl Into<String>, cause: TlsCause) -> Self {
        Self {
            field: field.into(),
            cause,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsCause {
    #[error("cannot read {}: {error}", path.display())]
    Unreadable { path: PathBuf, error: pem::Error },
    #[error("{} is not valid PEM: {error}", path.display())]
    NotPem { path: PathBuf, error: PemProblem },
    #[error("no certificate in {}", path.display())]
    NoCertificate { path: PathBuf },
    /// Binary DER where PEM is read: said with the conversion, as "no
    /// certificate" would send the operator looking at the wrong file.
    #[error(
        "{} is DER (binary), not PEM; convert it: openssl {tool} -inform der -in FILE -out FILE.pem",
        path.display()
    )]
    Der { path: PathBuf, tool: &'static str },
    /// Said with the mend: idemgate takes no passphrase.
    #[error(
        "the private key in {} is encrypted, and idemgate takes no passphrase; decrypt it \
         (openssl pkey -in KEY -out KEY.plain) and keep the file readable by idemgate only",
        path.display()
    )]
    EncryptedKey { path: PathBuf },
    #[error("no usable private key in {}: {error}", path.display())]
    NoKey { path: PathBuf, error: PemProblem },
    /// A CA file's certificate that rustls refuses as a trust root.
    #[error("{}: {error}", path.display())]
    BadRoot { path: PathBuf, error: rustls::Error },
    /// The two files hold halves of different pairs: said in words, as
    /// rustls's own text ("keys may not be consistent") does not.
    #[error(
        "the private key in {} is not the one of the certificate in {}: they come from different key pairs",
        key.display(),
        cert.display()
    )]
    KeyMismatch { key: PathBuf, cert: PathBuf },
    /// The key's certificate is in the chain, but not first: said as such,
    /// as "different key pairs" would send the operator to the key.
    #[error(
        "the certificates in {} are out of order: the certificate of the key in {} is number \
         {position} of {count}, and must come first (the leaf, then each certificate that \
         signed the one before it)",
        cert.display(),
        key.display()
    )]
    ChainOrder {
        cert: PathBuf,
        key: PathBuf,
        position: usize,
        count: usize,
    },
    #[error("cannot be used with the certificate in {}: {error}", cert.display())]
    KeyRefused { cert: PathBuf, error: rustls::Error },
    #[error("{0}")]
    Rustls(rustls::Error),
    #[error("{0}")]
    ClientVerifier(rustls::server::VerifierBuilderError),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `check`, a refused reload and a failed start print these lines.
    #[test]
    fn each_error_reads_field_then_cause() {
        let path = PathBuf::from("/etc/idemgate/key.pem");
        let encrypted = TlsError::new("server.tls.key", TlsCause::EncryptedKey { path });
        assert_eq!(
            encrypted.to_string(),
            "server.tls.key: the private key in /etc/idemgate/key.pem is encrypted, and \
             idemgate takes no passphrase; decrypt it (openssl pkey -in KEY -out KEY.plain) \
             and keep the file readable by idemgate only"
        );
        let mismatch = TlsError::new(
            "admin.tls.key",
            TlsCause::KeyMismatch {
                key: "key.pem".into(),
                cert: "cert.pem".into(),
            },
        );
        assert_eq!(
            mismatch.to_string(),
            "admin.tls.key: the private key in key.pem is not the one of the certificate in \
             cert.pem: they come from different key pairs"
        );
        let path = PathBuf::from("ca.pem");
        let empty = TlsError::new("upstreams.api.tls.ca", TlsCause::NoCertificate { path });
        assert_eq!(
            empty.to_string(),
            "upstreams.api.tls.ca: no certificate in ca.pem"
        );
    }
}
