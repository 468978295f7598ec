//! An HTTP/2 client the connection was closed on for excessive load
//! (`ENHANCE_YOUR_CALM`): resetting too many streams (rapid reset,
//! CVE-2023-44487; the bounds are in `listener.rs`), and h2's other floods
//! of the same code, which the error it gives back does not tell apart (a
//! header block in too many CONTINUATION frames, CVE-2024-27316, or far
//! over its bound; empty DATA frames; streams it had to reset or refuse).
//! An attacker opens such connections as fast as it likes, so this is said
//! at once and then once per interval per listener, with the count
//! (crate::log_limit); h2's own warning for it is bounded the same way.

use crate::log_limit::LogLimit;

/// Logs `err` when it closed the connection for a flood; `false` for any
/// other connection error, left to the caller.
pub fn log_if_h2_flood(listener: &'static str, err: &hyper::Error) -> bool {
    let Some(h2) = h2_error(err) else {
        return false;
    };
    if !(h2.is_go_away() && h2.is_library() && h2.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM)) {
        return false;
    }
    static LIMIT: LogLimit = LogLimit::uncounted();
    if let Some(left_out) = LIMIT.admit(listener) {
        tracing::warn!(listener, error = %h2, not_logged = left_out.count(),
            "HTTP/2 connection closed for excessive load, one of: streams reset before they were \
             accepted (rapid reset); a header block in too many CONTINUATION frames or far over \
             max_header_bytes; empty DATA frames; stream errors{left_out}");
    }
    true
}

fn h2_error(err: &hyper::Error) -> Option<&h2::Error> {
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        if let Some(h2) = cause.downcast_ref::<h2::Error>() {
            return Some(h2);
        }
        source = cause.source();
    }
    None
}
