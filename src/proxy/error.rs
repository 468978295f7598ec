//! How an upstream call fails, and why: the cause is kept as a value and
//! becomes text (its `Display`, sources included) only where it is logged.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use super::http1::DialFailure;
use super::http1::response_head::HeadError;
use super::tls_hint::tls_hint;
use crate::body::BoxError;

/// How an upstream call failed, in the terms that decide a key's fate.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The upstream cannot have the request (refused, unreachable, connect
    /// timeout, or the connection failed before the whole head went out):
    /// safe to retry.
    #[error("request not sent: {0}")]
    NotSent(Cause),
    /// Sent, and no answer head within the upstream's `timeout`.
    #[error("no answer within the timeout")]
    Timeout,
    /// Sent, and the connection failed before a complete answer.
    #[error("connection broke: {0}")]
    Broken(Cause),
    /// The client's body failed before it was all sent (cut short, or the
    /// client left): the upstream has none or part of a request, and its
    /// connection is dropped. The client's fault, not the upstream's.
    #[error("the request body failed: {0}")]
    RequestBody(Cause),
    /// The caller gave up (its `Handover`'s signal) before the request was
    /// handed over, or before it went again after the upstream left it
    /// unprocessed (an HTTP/2 stream refused, or above a GOAWAY's last):
    /// the upstream has nothing of it to run.
    #[error("given up before the request was sent")]
    GivenUp,
}

/// Why a request did not get its answer head.
#[derive(Debug, thiserror::Error)]
pub enum Cause {
    /// Dialling an HTTP/1 upstream failed (resolving its name, TCP, or
    /// its TLS handshake).
    #[error("{}", error_chain(.0))]
    Connect(DialFailure),
    /// Opening an HTTP/2 connection failed; shared by the requests that
    /// waited for it.
    #[error("{}", error_chain(&**.0))]
    Http2Connect(Arc<dyn std::error::Error + Send + Sync>),
    /// No connection within `connect_timeout`.
    #[error("no connection within {0:?}")]
    ConnectTimeout(Duration),
    /// Every connection of the pool stayed busy for `connect_timeout`.
    #[error("all {connections} connections stayed busy for {waited:?}")]
    Busy {
        connections: usize,
        waited: Duration,
    },
    /// Every stream an HTTP/2 upstream allows at once stayed busy for
    /// `connect_timeout`, or for what was left of `timeout`.
    #[error("all {streams} streams the upstream allows at once stayed busy for {waited:?}")]
    StreamsBusy { streams: usize, waited: Duration },
    /// Waiting for a connection took all of the upstream's `timeout`.
    #[error("getting a connection took the whole upstream timeout")]
    NoTimeLeft,
    /// The first HTTP/2 connection did not open within the upstream's `timeout`.
    #[error("no connection within the upstream timeout")]
    NoConnectionInTime,
    /// Each HTTP/2 connection tried closed before taking the request.
    #[error("every connection closed before the request was sent")]
    ConnectionsClosed,
    /// Writing the request failed.
    #[error("writing the request: {0}")]
    Write(#[source] io::Error),
    /// The upstream took no more of the request (a write of nothing).
    #[error("the upstream stopped taking the request")]
    StoppedTaking,
    /// The upstream closed the connection while the request was written.
    #[error("the upstream closed the connection while the request was sent")]
    ClosedWhileSending,
    /// The upstream's TLS refused the handshake (see `NoAnswer::Refused`).
    #[error("TLS handshake refused: {0}")]
    TlsRefused(#[source] io::Error),
    /// Reading the answer failed.
    #[error("reading the answer: {0}")]
    Read(#[source] io::Error),
    /// The upstream closed the connection instead of answering.
    #[error("the upstream closed the connection before answering")]
    ClosedBeforeAnswer,
    /// The answer head is not HTTP the gateway relays.
    #[error("{0}")]
    Head(#[source] HeadError),
    /// HTTP/2: the stream or the connection failed (hyper's error).
    #[error("{}", error_chain(.0))]
    Http2(hyper::Error),
    /// The client's body failed while it was read to be sent.
    #[error("reading the request body: {}", error_chain(&**.0))]
    Body(BoxError),
    /// The client's body ended at another length than it declared.
    #[error("the request body had {written} bytes, not the {declared} declared")]
    BodyLength { written: u64, declared: u64 },
}

/// The error and its sources on one line: hyper's top-level messages alone
/// ("client error (Connect)") say too little to an operator. A TLS failure
/// rustls words for an implementer ends with what to look at.
pub(super) fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    if let Some(hint) = tls_hint(err) {
        text.push_str(" (");
        text.push_str(hint);
        text.push(')');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The log shows a cause by its text: each reads as an operator knows it.
    #[test]
    fn causes_read_as_the_log_shows_them() {
        let io = || io::Error::new(io::ErrorKind::ConnectionReset, "reset by peer");
        let busy = Cause::Busy {
            connections: 4,
            waited: Duration::from_secs(2),
        };
        let cases = [
            (busy, "all 4 connections stayed busy for 2s"),
            (
                Cause::StreamsBusy {
                    streams: 100,
                    waited: Duration::from_secs(2),
                },
                "all 100 streams the upstream allows at once stayed busy for 2s",
            ),
            (
                Cause::ConnectTimeout(Duration::from_millis(500)),
                "no connection within 500ms",
            ),
            (Cause::Write(io()), "writing the request: reset by peer"),
            (Cause::Read(io()), "reading the answer: reset by peer"),
            (
                Cause::BodyLength {
                    written: 3,
                    declared: 5,
                },
                "the request body had 3 bytes, not the 5 declared",
            ),
            (
                Cause::Body(Box::new(io())),
                "reading the request body: reset by peer",
            ),
        ];
        for (cause, text) in cases {
            assert_eq!(cause.to_string(), text);
        }
        let sent = UpstreamError::NotSent(Cause::ClosedBeforeAnswer);
        assert_eq!(
            sent.to_string(),
            "request not sent: the upstream closed the connection before answering"
        );
    }
}
