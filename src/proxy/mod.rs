//! The upstream hop: pooled clients per upstream, the request sent to them,
//! and the header rules of a correct reverse proxy. Knows nothing of keys or
//! of the store.

mod connection_reuse;
mod error;
mod handover;
mod hop_by_hop;
pub(crate) mod http1;
mod http2;
mod progress;
mod resolve;
mod setup_error;
mod tls_hint;
mod upstream;
mod upstream_body;
mod upstream_request;

pub use error::UpstreamError;
pub use handover::Handover;
pub use hop_by_hop::{strip_answer_hop_by_hop, strip_hop_by_hop};
pub use progress::Wait;
pub use setup_error::UpstreamSetupError;
pub use upstream::{Upstream, Upstreams};
pub use upstream_body::UpstreamBody;
pub use upstream_request::prepare_request;
