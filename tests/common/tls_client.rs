//! An HTTPS client that trusts the test's CA and, when given one, presents a
//! client certificate; and one request through it to a gateway on localhost.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Version};
use http_body_util::{BodyExt, Full};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::certs::Identity;

pub type TlsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// HTTP/2 only when `h2`, else HTTP/1.1 only.
pub fn tls_client(ca_pem: &str, identity: Option<&Identity>, h2: bool) -> TlsClient {
    let config = client_config(ca_pem, identity);
    let connector = HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only();
    let connector = if h2 {
        connector.enable_http2().build()
    } else {
        connector.enable_http1().build()
    };
    Client::builder(TokioExecutor::new()).build(connector)
}

/// A rustls client configuration that trusts `ca_pem` and, when given one,
/// presents `identity`; no ALPN.
pub fn client_config(ca_pem: &str, identity: Option<&Identity>) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    match identity {
        Some(id) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(id.cert_pem.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap(),
                PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    }
}

/// An answer over TLS.
pub struct TlsReply {
    pub status: u16,
    pub version: Version,
    pub body: Bytes,
}

/// `method https://localhost:{port}{path}` with `headers` and `body`: the
/// answer, or the error as text (a refused handshake, a dropped connection).
pub async fn send(
    client: &TlsClient,
    method: &str,
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
    body: &'static [u8],
) -> Result<TlsReply, String> {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("https://localhost:{port}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(Bytes::from_static(body))).unwrap();
    let response = client
        .request(request)
        .await
        .map_err(|e| format!("{e:?}"))?;
    let status = response.status().as_u16();
    let version = response.version();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok(TlsReply {
        status,
        version,
        body,
    })
}
