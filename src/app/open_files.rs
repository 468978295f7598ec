//! The process's limit of open files (`ulimit -n`). Every client connection
//! holds a descriptor and every upstream connection another, so the soft
//! limit many hosts start services with (1024, systemd's default) would stop
//! the gateway at a few hundred connections, far below
//! `server.max_connections`. As Go's runtime and nginx's
//! `worker_rlimit_nofile` do, the soft limit is raised to the hard one at
//! start (docs/operating.md, "Open files"); the hard limit is the operator's.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Below this the async runtime, the store and both listeners cannot all
/// open: refused in words, before the runtime would panic on it.
pub const MINIMUM: u64 = 64;

/// Descriptors beyond the connections: the store's, the runtime's, logs.
const SPARE: u64 = 64;

/// The soft limit after [`raise`]; `None` when there is none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFiles(pub Option<u64>);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OpenFilesError {
    #[error(
        "the open files limit (ulimit -n) is {limit}, and its hard limit too; \
         idemgate needs at least {MINIMUM}"
    )]
    TooLow { limit: u64 },
}

/// Raises the soft limit to the hard one (where the system refuses, the
/// soft limit stays), and refuses a limit too low to run with.
pub fn raise() -> Result<OpenFiles, OpenFilesError> {
    let limit = getrlimit(Resource::Nofile);
    let soft = if below(limit.current, limit.maximum)
        && setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        )
        .is_ok()
    {
        limit.maximum
    } else {
        limit.current
    };
    match soft {
        Some(limit) if limit < MINIMUM => Err(OpenFilesError::TooLow { limit }),
        soft => Ok(OpenFiles(soft)),
    }
}

/// The soft limit now.
pub fn current() -> OpenFiles {
    OpenFiles(getrlimit(Resource::Nofile).current)
}

/// What the limit allows fewer of than the config asks for: `Some(needed)`
/// when `server.max_connections` clients and every upstream's
/// `max_connections` at once would run out of descriptors.
pub fn short_of(open: OpenFiles, clients: usize, upstreams: usize) -> Option<u64> {
    let needed = (clients as u64)
        .saturating_add(upstreams as u64)
        .saturating_add(SPARE);
    below(open.0, Some(needed)).then_some(needed)
}

/// `a < b` where `None` is no limit.
fn below(a: Option<u64>, b: Option<u64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a < b,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_below_what_the_connections_need_is_named() {
        assert_eq!(short_of(OpenFiles(Some(1024)), 10_000, 256), Some(10_320));
        assert_eq!(short_of(OpenFiles(Some(20_000)), 10_000, 256), None);
        assert_eq!(short_of(OpenFiles(None), usize::MAX, usize::MAX), None);
    }

    #[test]
    fn no_limit_is_above_every_limit() {
        assert!(below(Some(5), None));
        assert!(!below(None, Some(5)));
        assert!(!below(None, None));
        assert!(!below(Some(5), Some(5)));
    }
}
