use std::sync::Arc;

use crate::config::Config;
use crate::proxy::Upstreams;
use crate::route::RouteTable;

/// Everything derived from one loaded config. Swapped whole on reload; a
/// request holds the `Arc` it started with until it ends.
pub struct Runtime {
    pub config: Arc<Config>,
    pub routes: RouteTable,
    pub upstreams: Upstreams,
    pub max_header_bytes: u64,
    pub max_headers: usize,
    pub max_stored_response: u64,
}

impl Runtime {
    pub fn new(config: Arc<Config>) -> Result<Self, String> {
        Ok(Self {
            routes: RouteTable::new(&config),
            upstreams: Upstreams::new(&config)?,
            max_header_bytes: config.server.max_header_bytes,
            max_headers: config.server.max_headers,
            max_stored_response: config.server.max_stored_response,
            config,
        })
    }
}
