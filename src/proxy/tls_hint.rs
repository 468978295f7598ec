//! What an operator should look at when the TLS handshake with an upstream
//! failed in a way rustls words for a TLS implementer: bytes that are not
//! TLS ("received corrupt message of type InvalidContentType") are an
//! upstream that answers in clear, an `https://` url for an `http://`
//! service; an unknown issuer is a private CA the gateway was not given.

use std::io;

/// The hint for the first rustls error in `err`'s chain, if it has one.
pub(super) fn tls_hint(err: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    let mut next = Some(err);
    while let Some(error) = next {
        if let Some(tls) = rustls_error(error) {
            return hint(tls);
        }
        next = error.source();
    }
    None
}

/// An io::Error's `source` skips the error it wraps (and the HTTP/2
/// connector wraps tokio-rustls's io::Error in another): looked into.
fn rustls_error<'a>(mut error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    loop {
        if let Some(tls) = error.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        let wrapped: &(dyn std::error::Error + 'static) =
            error.downcast_ref::<io::Error>()?.get_ref()?;
        error = wrapped;
    }
}

fn hint(error: &rustls::Error) -> Option<&'static str> {
    match error {
        rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType) => {
            Some("the upstream does not speak TLS on this port: is its url http://, not https://?")
        }
        rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer) => Some(
            "the upstream's certificate is signed by a CA the gateway does not trust: a private \
             CA is named in upstreams.NAME.tls.ca",
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrapped_rustls_error_gets_its_hint() {
        let clear = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType),
        );
        assert!(tls_hint(&clear).is_some_and(|hint| hint.contains("does not speak TLS")));
        let twice = io::Error::other(clear);
        assert!(tls_hint(&twice).is_some_and(|hint| hint.contains("does not speak TLS")));
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert_eq!(tls_hint(&refused), None);
    }
}
