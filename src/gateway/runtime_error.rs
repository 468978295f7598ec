//! Why a loaded config cannot become a `Runtime`, the cause as a value:
//! `serve` says it and exits, a reload is refused with it.

use std::sync::Arc;

use crate::proxy::UpstreamSetupError;
use crate::region::RegionsError;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// An upstream's client cannot be built.
    #[error("{0}")]
    Upstream(#[source] UpstreamSetupError),
    /// `[region]` cannot be built.
    #[error("{0}")]
    Regions(#[source] RegionsError),
    /// A route names an upstream the config lacks: validation refuses
    /// that, so this is a bug, said rather than panicked on.
    #[error("route {route:?} names upstream {upstream:?}, which is not configured")]
    UnknownUpstream { route: Arc<str>, upstream: String },
}
