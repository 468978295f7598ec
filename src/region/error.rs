//! Why the regions of a config cannot be built, the cause as a value:
//! `serve` says it and exits, a reload is refused with it.

use http::header::InvalidHeaderValue;

use crate::proxy::UpstreamSetupError;

#[derive(Debug, thiserror::Error)]
pub enum RegionsError {
    /// The shared token, read from `token_env`, cannot be sent as a header.
    #[error("{token_env}: the region token is not a header value")]
    Token {
        token_env: String,
        #[source]
        source: InvalidHeaderValue,
    },
    /// This region's name cannot be sent as `Idempotency-Forwarded-From`.
    #[error("region {name:?} is not a header value")]
    Name {
        name: String,
        #[source]
        source: InvalidHeaderValue,
    },
    /// Another region's gateways cannot be reached as an upstream is; a
    /// CA problem names `regions.NAME.ca`.
    #[error("{0}")]
    Peer(#[source] UpstreamSetupError),
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::config::{RegionPeerConfig, RegionsConfig};
    use crate::region::Regions;

    fn config(token: &str, us_ca: Option<&str>) -> RegionsConfig {
        let peer = |name: &str, ca: Option<&str>| RegionPeerConfig {
            name: name.into(),
            gateway: "https://127.0.0.1:9".into(),
            connect_timeout: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            ca: ca.map(Into::into),
            http2: false,
        };
        let mut peers = BTreeMap::new();
        peers.insert("eu".to_owned(), peer("eu", None));
        peers.insert("us".to_owned(), peer("us", us_ca));
        RegionsConfig {
            name: "eu".into(),
            token_env: "REGION_TOKEN".into(),
            token: token.into(),
            peers,
        }
    }

    #[test]
    fn a_token_that_is_no_header_value_names_its_variable_not_its_value() {
        let Err(error) = Regions::from_config(&config("bad\ntoken", None)) else {
            panic!("refused");
        };
        assert!(
            matches!(&error, RegionsError::Token { token_env, .. } if token_env == "REGION_TOKEN")
        );
        assert_eq!(
            error.to_string(),
            "REGION_TOKEN: the region token is not a header value"
        );
    }

    /// The operator wrote `regions.us.ca`, not the upstream client's name for it.
    #[test]
    fn an_unreadable_peer_ca_names_the_region_field() {
        let Err(error) = Regions::from_config(&config("t", Some("/nonexistent/ca.pem"))) else {
            panic!("refused");
        };
        let RegionsError::Peer(UpstreamSetupError::Tls(tls)) = &error else {
            panic!("{error:?}");
        };
        assert_eq!(tls.field, "regions.us.ca");
        assert!(error.to_string().contains("/nonexistent/ca.pem"), "{error}");
    }
}
