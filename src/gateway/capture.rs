//! Reading an upstream answer into what the store keeps, without holding more
//! than `max_stored_response` bytes of it in memory.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header;
use http::response::Parts;
use http::{HeaderMap, Response};
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::BodyExt;

use crate::body::{self, Body, BoxError};
use crate::proxy::UpstreamBody;
use crate::store::StoredResponse;

pub enum Captured {
    /// The whole answer, within the limit.
    Whole { parts: Parts, body: Bytes },
    /// Over the limit: what was read so far and the rest, still streaming
    /// (boxed: the rare case, and the larger one by far).
    Oversized {
        parts: Parts,
        prefix: Vec<Bytes>,
        rest: Box<UpstreamBody>,
    },
}

/// Reads the upstream's body up to `limit` bytes. Trailers are not kept.
pub async fn capture(response: Response<UpstreamBody>, limit: u64) -> Result<Captured, BoxError> {
    let (parts, mut incoming) = response.into_parts();
    // A 304's or a HEAD's `Content-Length` is the representation's, not
    // this answer's: with no body to come, the whole answer is kept.
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if !incoming.is_end_stream() && declared.is_some_and(|length| length > limit) {
        return Ok(Captured::Oversized {
            parts,
            prefix: Vec::new(),
            rest: Box::new(incoming),
        });
    }
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut total: u64 = 0;
    while let Some(frame) = incoming.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        total += data.len() as u64;
        chunks.push(data);
        if total > limit {
            return Ok(Captured::Oversized {
                parts,
                prefix: chunks,
                rest: Box::new(incoming),
            });
        }
    }
    let body = match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.swap_remove(0),
        _ => {
            let mut joined = Vec::with_capacity(total as usize);
            for chunk in &chunks {
                joined.extend_from_slice(chunk);
            }
            Bytes::from(joined)
        }
    };
    Ok(Captured::Whole { parts, body })
}

/// The body of an oversized answer as the client gets it: what was read, then the rest.
pub fn resume(prefix: Vec<Bytes>, rest: UpstreamBody) -> Body {
    let prefix_left = prefix.iter().map(|chunk| chunk.len() as u64).sum();
    body::stream(Resumed {
        prefix: prefix.into_iter(),
        prefix_left,
        rest,
    })
}

/// What was read of an oversized answer, then the rest. Its length is
/// known when the upstream's was, so the client still gets
/// `Content-Length` (a chain of streams would say nothing, and go chunked).
struct Resumed {
    prefix: std::vec::IntoIter<Bytes>,
    /// Bytes left in `prefix`.
    prefix_left: u64,
    rest: UpstreamBody,
}

impl http_body::Body for Resumed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Some(chunk) = this.prefix.next() {
            this.prefix_left -= chunk.len() as u64;
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        Pin::new(&mut this.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.len() == 0 && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let rest = self.rest.size_hint();
        match rest.exact() {
            Some(rest) => SizeHint::with_exact(self.prefix_left + rest),
            None => {
                let mut hint = SizeHint::new();
                hint.set_lower(self.prefix_left + rest.lower());
                hint
            }
        }
    }
}

/// What is kept of an answer: status and end-to-end headers, minus `Date`
/// (a replay gets a fresh one) and those the route does not keep ([`Kept`](super::replay::Kept)).
pub fn stored(
    parts: &Parts,
    body: Bytes,
    body_omitted: bool,
    kept: super::replay::Kept<'_>,
) -> StoredResponse {
    StoredResponse {
        status: parts.status.as_u16(),
        headers: kept_headers(&parts.headers, kept).into(),
        body,
        body_omitted,
        outcome_unknown: false,
    }
}

fn kept_headers(headers: &HeaderMap, kept: super::replay::Kept<'_>) -> Vec<(String, Bytes)> {
    headers
        .iter()
        .filter(|(name, _)| **name != header::DATE && kept.keeps(name))
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                Bytes::copy_from_slice(value.as_bytes()),
            )
        })
        .collect()
}
