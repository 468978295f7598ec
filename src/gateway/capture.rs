//! Reading an upstream answer into what the store keeps, without holding more
//! than `max_stored_response` bytes of it in memory.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
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
    let mut gathered = Gathered::new(declared.unwrap_or(0).min(limit));
    while let Some(frame) = incoming.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        gathered.push(data);
        if gathered.len() > limit {
            return Ok(Captured::Oversized {
                parts,
                prefix: gathered.into_pieces(),
                rest: Box::new(incoming),
            });
        }
    }
    Ok(Captured::Whole {
        parts,
        body: gathered.into_bytes(),
    })
}

/// An answer's pieces made one buffer as they arrive: the pieces kept until
/// the end and joined then would hold the answer twice at that moment
/// (docs/behaviour.md, "Memory"). A body of one piece stays that piece.
struct Gathered {
    /// The declared length, or 0: room taken at the second piece.
    expected: u64,
    first: Option<Bytes>,
    joined: Option<BytesMut>,
    len: u64,
}

impl Gathered {
    fn new(expected: u64) -> Self {
        Gathered {
            expected,
            first: None,
            joined: None,
            len: 0,
        }
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn push(&mut self, piece: Bytes) {
        self.len += piece.len() as u64;
        if let Some(joined) = &mut self.joined {
            joined.extend_from_slice(&piece);
            return;
        }
        let Some(first) = self.first.take() else {
            self.first = Some(piece);
            return;
        };
        let room = usize::try_from(self.expected.max(self.len)).unwrap_or(usize::MAX);
        let mut joined = BytesMut::with_capacity(room);
        joined.extend_from_slice(&first);
        joined.extend_from_slice(&piece);
        self.joined = Some(joined);
    }

    fn into_bytes(self) -> Bytes {
        match (self.joined, self.first) {
            (Some(joined), _) => joined.freeze(),
            (None, Some(first)) => first,
            (None, None) => Bytes::new(),
        }
    }

    fn into_pieces(self) -> Vec<Bytes> {
        match self.len {
            0 => Vec::new(),
            _ => vec![self.into_bytes()],
        }
    }
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A piece whose memory is counted as given back when its last
    /// reference goes.
    fn piece(text: &'static [u8], freed: &Arc<AtomicUsize>) -> Bytes {
        struct Owner(&'static [u8], Arc<AtomicUsize>);
        impl AsRef<[u8]> for Owner {
            fn as_ref(&self) -> &[u8] {
                self.0
            }
        }
        impl Drop for Owner {
            fn drop(&mut self) {
                self.1.fetch_add(1, Ordering::SeqCst);
            }
        }
        Bytes::from_owner(Owner(text, freed.clone()))
    }

    #[test]
    fn pieces_are_joined_as_they_arrive_and_not_kept() {
        let freed = Arc::new(AtomicUsize::new(0));
        let mut gathered = Gathered::new(9);
        gathered.push(piece(b"abc", &freed));
        assert_eq!(
            freed.load(Ordering::SeqCst),
            0,
            "one piece is kept as it is"
        );
        gathered.push(piece(b"def", &freed));
        gathered.push(piece(b"ghi", &freed));
        assert_eq!(
            freed.load(Ordering::SeqCst),
            3,
            "every piece given back once copied"
        );
        assert_eq!(gathered.len(), 9);
        assert_eq!(gathered.into_bytes(), Bytes::from_static(b"abcdefghi"));
    }

    #[test]
    fn one_piece_is_the_body_and_none_is_empty() {
        let freed = Arc::new(AtomicUsize::new(0));
        let mut gathered = Gathered::new(3);
        gathered.push(piece(b"abc", &freed));
        assert_eq!(gathered.into_pieces(), vec![Bytes::from_static(b"abc")]);
        assert_eq!(Gathered::new(0).into_bytes(), Bytes::new());
        assert!(Gathered::new(0).into_pieces().is_empty());
        // Without a declared length the buffer grows as pieces come.
        let mut chunked = Gathered::new(0);
        chunked.push(Bytes::from_static(b"ab"));
        chunked.push(Bytes::from_static(b"cd"));
        chunked.push(Bytes::from_static(b"e"));
        assert_eq!(chunked.into_pieces(), vec![Bytes::from_static(b"abcde")]);
    }
}
