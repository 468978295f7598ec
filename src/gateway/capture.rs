//! Reading an upstream answer into what the store keeps, without holding more
//! than `max_stored_response` bytes of it in memory.

use bytes::Bytes;
use futures_util::StreamExt;
use http::header::{self, HeaderName};
use http::response::Parts;
use http::{HeaderMap, Response};
use http_body::Frame;
use http_body_util::{BodyExt, BodyStream, StreamBody};

use crate::body::{self, Body, BoxError};
use crate::proxy::UpstreamBody;
use crate::store::StoredResponse;

pub enum Captured {
    /// The whole answer, within the limit.
    Whole { parts: Parts, body: Bytes },
    /// Over the limit: what was read so far and the rest, still streaming.
    Oversized {
        parts: Parts,
        prefix: Vec<Bytes>,
        rest: UpstreamBody,
    },
}

/// Reads the upstream's body up to `limit` bytes. Trailers are not kept.
pub async fn capture(response: Response<UpstreamBody>, limit: u64) -> Result<Captured, BoxError> {
    let (parts, mut incoming) = response.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Ok(Captured::Oversized {
            parts,
            prefix: Vec::new(),
            rest: incoming,
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
                rest: incoming,
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
    let read = futures_util::stream::iter(
        prefix
            .into_iter()
            .map(|chunk| Ok::<_, BoxError>(Frame::data(chunk))),
    );
    let rest = BodyStream::new(rest);
    body::stream(StreamBody::new(read.chain(rest)))
}

/// What is kept of an answer: status and end-to-end headers, minus `Date`
/// (a replay gets a fresh one) and the route's excluded headers.
pub fn stored(
    parts: &Parts,
    body: Bytes,
    body_omitted: bool,
    exclude: &[HeaderName],
) -> StoredResponse {
    StoredResponse {
        status: parts.status.as_u16(),
        headers: kept_headers(&parts.headers, exclude).into(),
        body,
        body_omitted,
    }
}

fn kept_headers(headers: &HeaderMap, exclude: &[HeaderName]) -> Vec<(String, Bytes)> {
    headers
        .iter()
        .filter(|(name, _)| **name != header::DATE && !exclude.contains(name))
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                Bytes::copy_from_slice(value.as_bytes()),
            )
        })
        .collect()
}
