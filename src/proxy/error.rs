//! How an upstream call fails, and the causes as an operator reads them.

/// How an upstream call failed, in the terms that decide a key's fate.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The upstream cannot have the request (refused, unreachable, connect
    /// timeout, or the connection failed before the whole head went out):
    /// safe to retry.
    #[error("request not sent: {0}")]
    NotSent(String),
    /// Sent, and no answer head within the upstream's `timeout`.
    #[error("no answer within the timeout")]
    Timeout,
    /// Sent, and the connection failed before a complete answer.
    #[error("connection broke: {0}")]
    Broken(String),
    /// The client's body failed before it was all sent (cut short, or the
    /// client left): the upstream has none or part of a request, and its
    /// connection is dropped. The client's fault, not the upstream's.
    #[error("the request body failed: {0}")]
    RequestBody(String),
}

/// The error and its sources on one line: hyper's top-level messages alone
/// ("client error (Connect)") say too little to an operator.
pub(super) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
