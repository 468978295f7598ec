//! Why Redis failed, as values: one call (`CacheError`, which only turns a
//! hit into a miss), and what makes the store itself unavailable
//! (`RedisCause`). The Redis URL may carry a password: setup errors keep
//! the client's error kind only, never its text.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use redis::{ErrorKind, RedisError};

use super::url::UrlProblem;
use crate::tls::PemProblem;

/// One Redis call that failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CacheError {
    /// Skipped: Redis failed within the last pause (`conn`).
    #[error("redis paused after a recent failure")]
    Paused,
    /// Redis answered this command with an error reply (`OOM` under
    /// `noeviction`, `READONLY` from a replica after a failover, `NOAUTH`):
    /// it is up, and refuses the command.
    #[error("redis refused: {0}")]
    Refused(#[source] RedisError),
    /// The connection failed (the host did not resolve, refused, a
    /// certificate not trusted); `target` is the URL's host and port.
    #[error("redis at {target}: {source}")]
    Failed {
        target: Arc<str>,
        #[source]
        source: RedisError,
    },
    /// No answer within the call's deadline.
    #[error("redis at {target}: no answer within {after:?}")]
    NoAnswer { target: Arc<str>, after: Duration },
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum RedisCause {
    /// `store.redis.url` is not one the client accepts, and why.
    #[error("invalid URL: {0}")]
    BadUrl(UrlProblem),
    /// `store.redis.url` is refused by the client for a reason not told
    /// apart above; only its kind is kept.
    #[error("invalid URL ({0:?})")]
    InvalidUrl(ErrorKind),
    /// `store.redis.url` ends in `#insecure`: TLS without verification.
    #[error(
        "#insecure (TLS without verifying the server) is not supported: \
         give the server's CA as store.redis.ca instead"
    )]
    Unverified,
    /// `store.redis.ca` cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    CaUnreadable {
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
    /// `store.redis.ca` holds no PEM certificate (empty, or not PEM).
    #[error("no certificate in {}", path.display())]
    CaHoldsNoCertificate { path: PathBuf },
    /// `store.redis.ca` is a binary DER certificate: said with the
    /// conversion, as the listener and upstream files are.
    #[error(
        "{} is DER (binary), not PEM; convert it: openssl x509 -inform der -in FILE -out FILE.pem",
        path.display()
    )]
    CaDer { path: PathBuf },
    /// `store.redis.ca` is not valid PEM (cut short, damaged).
    #[error("{} is not valid PEM: {problem}", path.display())]
    CaNotPem {
        path: PathBuf,
        #[source]
        problem: Arc<PemProblem>,
    },
    /// `store.redis.ca` was read but the client refuses it.
    #[error("{} cannot be used as a CA ({kind:?})", path.display())]
    CaRefused { path: PathBuf, kind: ErrorKind },
    /// The connection manager could not be made.
    #[error("store.redis: {0:?}")]
    Client(ErrorKind),
    /// A purge found Redis down before deleting any record.
    #[error(
        "cannot delete the cached answers ({0}); nothing was purged, \
         retry once redis is reachable"
    )]
    NothingPurged(#[source] CacheError),
    /// A purge deleted the records but not the copies written meanwhile.
    #[error(
        "purged {records} records, but not the cached answers written meanwhile ({source}); \
         one may replay until its retention ends"
    )]
    CopiesLeft {
        records: usize,
        #[source]
        source: CacheError,
    },
}
