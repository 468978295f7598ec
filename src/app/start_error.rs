//! Why `serve` could not start: each cause kept as a value until `main`
//! prints it, the one line on stderr, and maps it to the exit code.

use std::net::SocketAddr;

use crate::config::ConfigErrors;
use crate::gateway::RuntimeError;
use crate::store::StoreError;
use crate::tls::TlsError;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The file is invalid.
    #[error("{0}")]
    Config(#[from] ConfigErrors),
    /// A file the config names (a listener's, an upstream's or a region's
    /// certificate, key or CA) or a store setting (its URLs, their TLS
    /// parameters and CA files) cannot be used; located in the file, on one
    /// line.
    #[error("{}", .0.one_line())]
    Unusable(ConfigErrors),
    /// The metrics registry refused a series.
    #[error("metrics registry: {0}")]
    Metrics(#[source] prometheus::Error),
    /// The store cannot be opened (unreachable, or a file it refuses).
    #[error("cannot open the store: {0}")]
    Store(#[source] StoreError),
    /// A listener's certificate, key or client CA cannot be used.
    #[error("{0}")]
    Tls(#[source] TlsError),
    /// The routes and their upstreams' clients cannot be built.
    #[error("{0}")]
    Runtime(#[source] RuntimeError),
    /// A listen address cannot be bound; `field` is the one under `[server]`
    /// that names it.
    #[error("cannot listen on {addr} (server.{field}): {source}")]
    Bind {
        addr: SocketAddr,
        field: &'static str,
        source: std::io::Error,
    },
}
