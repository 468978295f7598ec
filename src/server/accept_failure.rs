//! A failed accept: out of file descriptors (EMFILE, ENFILE) or memory for
//! a socket. The listener tries again every [`RETRY`] for as long as it
//! lasts, so the line is said at once and then once per interval per
//! listener, with the count (crate::log_limit): a shortage of minutes is a
//! few lines, not twenty a second.

use std::time::Duration;

use crate::log_limit::LogLimit;

/// How long the accept loop waits after a failed accept before it tries
/// again: connections meanwhile wait in the listen backlog.
pub const RETRY: Duration = Duration::from_millis(50);

pub fn log_accept_failure(listener: &'static str, err: &std::io::Error) {
    static LIMIT: LogLimit = LogLimit::uncounted();
    if let Some(left_out) = LIMIT.admit(listener) {
        tracing::warn!(listener, error = %err, retry_ms = RETRY.as_millis(),
            not_logged = left_out.count(), "accept failed{left_out}");
    }
}
