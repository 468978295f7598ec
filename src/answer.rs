//! What a request ended with, as the gateway and the region hop both return
//! it: the response and how it counts.

use std::sync::Arc;

use http::Response;

use crate::body::Body;
use crate::error::GatewayError;
use crate::metrics::Outcome;

/// What a request ended with: the response, how it counts, and its key for
/// the log line (which shows only the key's short hash, computed when the
/// line is actually written).
pub struct Answer {
    pub response: Response<Body>,
    pub outcome: Option<Outcome>,
    pub key: Option<Arc<str>>,
    /// The key's home region when the request was forwarded there.
    pub home: Option<Arc<str>>,
}

impl Answer {
    pub fn new(response: Response<Body>, outcome: Outcome) -> Self {
        Self {
            response,
            outcome: Some(outcome),
            key: None,
            home: None,
        }
    }

    pub fn error(error: GatewayError) -> Self {
        Self {
            response: error.to_response(),
            outcome: error.outcome(),
            key: None,
            home: None,
        }
    }

    pub fn with_key(mut self, key: Arc<str>) -> Self {
        self.key = Some(key);
        self
    }

    pub fn with_home(mut self, home: Arc<str>) -> Self {
        self.home = Some(home);
        self
    }
}

impl From<GatewayError> for Answer {
    fn from(error: GatewayError) -> Self {
        Answer::error(error)
    }
}
