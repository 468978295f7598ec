//! Why an upstream's client cannot be built from its config, the cause as
//! a value: `serve` says it and exits, a reload is refused with it.

use super::http1::DialerError;
use crate::tls::TlsError;

#[derive(Debug, thiserror::Error)]
pub enum UpstreamSetupError {
    #[error("upstream {upstream}: invalid url: {source}")]
    InvalidUrl {
        upstream: String,
        #[source]
        source: http::uri::InvalidUri,
    },
    #[error("upstream {upstream}: url has no host")]
    NoHost { upstream: String },
    /// Its `tls` settings (the error names the field).
    #[error("{0}")]
    Tls(#[from] TlsError),
    #[error("upstream {upstream}: {source}")]
    Dialer {
        upstream: String,
        #[source]
        source: DialerError,
    },
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{UpstreamConfig, UpstreamTlsConfig};
    use crate::proxy::Upstream;

    fn built(url: &str, tls: Option<UpstreamTlsConfig>) -> UpstreamSetupError {
        Upstream::new(&UpstreamConfig {
            name: "api".into(),
            url: url.into(),
            connect_timeout: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            http2: false,
            keep_alive: true,
            max_connections: 4,
            tls,
        })
        .expect_err("refused")
    }

    /// What `serve` prints, or a reload answers, names the upstream and why.
    #[test]
    fn each_refusal_names_the_upstream_and_keeps_its_cause() {
        let error = built("http://exa mple", None);
        assert!(
            matches!(&error, UpstreamSetupError::InvalidUrl { upstream, .. } if upstream == "api")
        );
        assert!(
            error.to_string().starts_with("upstream api: invalid url: "),
            "{error}"
        );

        let error = built("/v1", None);
        assert!(
            matches!(&error, UpstreamSetupError::NoHost { .. }),
            "{error:?}"
        );
        assert_eq!(error.to_string(), "upstream api: url has no host");

        let error = built("ftp://example.com", None);
        assert!(
            matches!(
                &error,
                UpstreamSetupError::Dialer {
                    source: DialerError::Scheme(_),
                    ..
                }
            ),
            "{error:?}"
        );
        assert_eq!(error.to_string(), "upstream api: unsupported scheme ftp");

        let tls = UpstreamTlsConfig {
            ca: Some("/nonexistent/ca.pem".into()),
            cert: None,
            key: None,
        };
        let error = built("https://example.com", Some(tls));
        let UpstreamSetupError::Tls(tls) = &error else {
            panic!("{error:?}");
        };
        assert_eq!(tls.field, "upstreams.api.tls.ca");
        assert!(
            error.to_string().starts_with("upstreams.api.tls.ca: "),
            "{error}"
        );
        assert!(
            std::error::Error::source(&error).is_some(),
            "the cause is kept"
        );
    }
}
