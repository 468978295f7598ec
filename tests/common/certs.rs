//! A throw-away PKI made at test time: one CA, server and client certificates.

use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use super::TestDir;

pub struct Pki {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// PEM files of one certificate and its key.
pub struct Identity {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub cert_pem: String,
    pub key_pem: String,
}

impl Pki {
    pub fn new(common_name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Pki { issuer }
    }

    pub fn ca_pem(&self) -> String {
        self.issuer.pem()
    }

    pub fn write_ca(&self, dir: &TestDir, name: &str) -> PathBuf {
        let path = dir.path(name);
        std::fs::write(&path, self.ca_pem()).unwrap();
        path
    }

    /// The CA certificate as binary DER, as a Windows export gives it.
    pub fn write_ca_der(&self, dir: &TestDir, name: &str) -> PathBuf {
        let path = dir.path(name);
        std::fs::write(&path, self.issuer.der()).unwrap();
        path
    }

    /// A server certificate for `localhost`, 127.0.0.1 and ::1.
    pub fn server(&self, dir: &TestDir, name: &str) -> Identity {
        self.server_for(dir, name, &["localhost", "127.0.0.1", "::1"])
    }

    /// A server certificate for `names`: host names, and IP addresses
    /// (written as such, they become IP address names).
    pub fn server_for(&self, dir: &TestDir, name: &str, names: &[&str]) -> Identity {
        let names = names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let mut params = CertificateParams::new(names).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(dir, name, params)
    }

    /// A server certificate like [`Pki::server`]'s whose validity ended in 2020.
    pub fn expired_server(&self, dir: &TestDir, name: &str) -> Identity {
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2020, 2, 1);
        self.issue(dir, name, params)
    }

    /// A client certificate whose subject is `CN=<common_name>`.
    pub fn client(&self, dir: &TestDir, common_name: &str) -> Identity {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(dir, common_name, params)
    }

    /// A client certificate like [`Pki::client`]'s whose validity ended in 2020.
    pub fn expired_client(&self, dir: &TestDir, common_name: &str) -> Identity {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2020, 2, 1);
        self.issue(dir, common_name, params)
    }

    fn issue(&self, dir: &TestDir, name: &str, params: CertificateParams) -> Identity {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let identity = Identity {
            cert: dir.path(&format!("{name}.crt")),
            key: dir.path(&format!("{name}.key")),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        };
        std::fs::write(&identity.cert, &identity.cert_pem).unwrap();
        std::fs::write(&identity.key, &identity.key_pem).unwrap();
        identity
    }
}

/// A rustls server configuration for a test upstream.
pub fn server_config(identity: &Identity) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(identity.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes()).unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}
