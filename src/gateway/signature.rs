//! Phase "signature", on a webhook route only, before every other phase:
//! the body is read whole (bounded by `max_request_body`), the sender's
//! signature checked against it, and the request handed on with the body
//! as read. A refusal forwards and stores nothing.

use std::time::SystemTime;

use http::Request;

use super::request_key::{Reading, read_whole};
use crate::answer::Answer;
use crate::body::ClientBody;
use crate::error::GatewayError;
use crate::webhook::Verifier;

pub async fn check(
    verifier: &Verifier,
    request: Request<ClientBody>,
    reading: Reading<'_>,
) -> Result<Request<ClientBody>, Answer> {
    let (parts, incoming) = request.into_parts();
    let body = match read_whole(verifier.max_body, &parts, incoming, reading).await {
        Ok(body) => body,
        // A body left unread closes an HTTP/1 connection, and its answer
        // says so (server::http1).
        Err(error) => return Err(Answer::error(error)),
    };
    if let Err(invalid) = verifier.verify(&parts.headers, &body, SystemTime::now()) {
        // Forged deliveries may come in floods; the access log line already
        // counts each one (`outcome=invalid_signature`).
        tracing::debug!(scheme = invalid.scheme.as_str(), reason = %invalid.rejection, "webhook signature refused");
        return Err(Answer::error(GatewayError::InvalidSignature(invalid)));
    }
    let body = if body.is_empty() {
        ClientBody::empty()
    } else {
        ClientBody::Held(Some(body))
    };
    Ok(Request::from_parts(parts, body))
}
