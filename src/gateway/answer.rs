use http::Response;

use crate::body::Body;
use crate::error::GatewayError;
use crate::metrics::Outcome;

/// What a request ended with: the response, how it counts, and the short key
/// hash for the log line.
pub struct Answer {
    pub response: Response<Body>,
    pub outcome: Option<Outcome>,
    pub key_hash: Option<String>,
}

impl Answer {
    pub fn new(response: Response<Body>, outcome: Outcome) -> Self {
        Self {
            response,
            outcome: Some(outcome),
            key_hash: None,
        }
    }

    pub fn error(error: GatewayError) -> Self {
        Self {
            response: error.to_response(),
            outcome: error.outcome(),
            key_hash: None,
        }
    }

    pub fn with_key_hash(mut self, key_hash: String) -> Self {
        self.key_hash = Some(key_hash);
        self
    }
}

impl From<GatewayError> for Answer {
    fn from(error: GatewayError) -> Self {
        Answer::error(error)
    }
}
