//! The one body type that flows through the gateway in both directions, so a
//! streamed upstream body, a buffered request and a stored replay look alike.

pub mod budget;
mod counted;
mod http2;
mod idle;
pub mod linger;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full, combinators::UnsyncBoxBody};

pub use budget::{BodyBudget, Exhausted, Share};
pub use http2::{Http2Body, InProgress, Lingering, StreamReset, StreamWatch, Watched};
pub use idle::{IdleLimit, ReadLimits, SlowBody, Stalled, is_stalled};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub type Body = UnsyncBoxBody<Bytes, BoxError>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// Wraps any body whose errors convert into [`BoxError`] (e.g. `hyper::body::Incoming`).
pub fn stream<B>(body: B) -> Body
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

/// Bodies that declare at most this many bytes are read whole before being
/// passed on, so head and body leave in one write instead of two (what nginx's
/// proxy buffering achieves). Larger bodies, and bodies of unknown length, stream.
pub const COALESCE_LIMIT: u64 = 16 * 1024;

/// The declared `Content-Length`, when its first value is a valid one
/// (digits only: `+5` is none).
pub fn declared_length(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| crate::wire::framing::decimal(v.as_bytes()))
}

/// A small body read whole, or the body as a stream (see [`COALESCE_LIMIT`]).
/// The body's exact size is its declared length: each reader (ours for
/// HTTP/1, hyper's for HTTP/2) frames it by the `Content-Length` it checked,
/// and one of unknown length (chunked, or to the close) has none. Asking the
/// body spares a lookup and a parse of the field per body (docs/adr/0007-hot-path-costs.md).
pub async fn coalesce<B>(incoming: B) -> Result<Body, B::Error>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    if incoming.is_end_stream() {
        return Ok(empty());
    }
    match incoming.size_hint().exact() {
        Some(length) if length <= COALESCE_LIMIT => {
            Ok(full(read_whole(incoming, |_| Ok(())).await?))
        }
        _ => Ok(stream(incoming)),
    }
}

/// [`coalesce`] for a client's request body: a small one is read whole
/// within `limits` (a client that stops sending it, or sends it too slowly,
/// fails with [`SlowBody`]: nothing else bounds this read, as the upstream's
/// `timeout` starts only once the request is handed over), its bytes taken
/// from `budget` as they arrive and held until the body is dropped (past
/// the room left it fails with [`Exhausted`]); a larger one streams as it
/// comes, its pace the upstream's `timeout` to bound. A body read whole
/// before ([`ClientBody::Held`]) holds its share already.
pub async fn coalesce_request(
    incoming: ClientBody,
    limits: ReadLimits,
    budget: &BodyBudget,
) -> Result<Body, BoxError> {
    use http_body::Body as _;
    if incoming.is_end_stream() {
        return Ok(empty());
    }
    if let ClientBody::Held(Some(whole)) = incoming {
        return Ok(full(whole));
    }
    match incoming.size_hint().exact() {
        Some(length) if length <= COALESCE_LIMIT => {
            let mut share = budget.share();
            let whole = read_whole(IdleLimit::within(incoming, limits), |bytes| {
                share.take(bytes).map_err(BoxError::from)
            })
            .await?;
            Ok(counted::Counted::new(whole, share).boxed_unsync())
        }
        _ => Ok(stream(incoming)),
    }
}

/// A small body's bytes: its one data frame as it came (the usual case: no
/// copy, no list of frames as `collect` keeps), or its frames joined.
/// Trailers are dropped, as `collect().to_bytes()` drops them. `arrived` is
/// told each data frame's length before it is kept, and may refuse it.
async fn read_whole<B>(
    body: B,
    mut arrived: impl FnMut(usize) -> Result<(), B::Error>,
) -> Result<Bytes, B::Error>
where
    B: http_body::Body<Data = Bytes>,
{
    let mut body = std::pin::pin!(body);
    let mut first = Bytes::new();
    let mut joined = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        arrived(data.len())?;
        if first.is_empty() {
            first = data;
        } else {
            if joined.is_empty() {
                joined.extend_from_slice(&first);
            }
            joined.extend_from_slice(&data);
        }
    }
    Ok(if joined.is_empty() {
        first
    } else {
        joined.freeze()
    })
}

/// A request's body as the listener hands it to a handler: already read
/// whole (the usual small request, its bytes arrived with its head), read
/// from the connection as the handler asks (large or chunked HTTP/1
/// bodies), or an HTTP/2 stream; or, once a phase has read it whole, held
/// with its share of the body budget (a webhook's, read for its
/// signature), which no later read counts again.
pub enum ClientBody {
    Full(Option<Bytes>),
    Streamed(Body),
    Http2(Http2Body),
    Held(Option<Bytes>),
}

impl ClientBody {
    pub fn empty() -> Self {
        Self::Full(None)
    }
}

impl http_body::Body for ClientBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        use std::task::Poll;
        match self.get_mut() {
            Self::Full(bytes) | Self::Held(bytes) => {
                Poll::Ready(bytes.take().map(|b| Ok(http_body::Frame::data(b))))
            }
            Self::Streamed(body) => std::pin::Pin::new(body).poll_frame(cx),
            Self::Http2(body) => std::pin::Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Full(bytes) | Self::Held(bytes) => bytes.is_none(),
            Self::Streamed(body) => body.is_end_stream(),
            Self::Http2(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            Self::Full(bytes) | Self::Held(bytes) => {
                http_body::SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            Self::Streamed(body) => body.size_hint(),
            Self::Http2(body) => body.size_hint(),
        }
    }
}

/// A frame of an HTTP/2 stream's body (either direction), its error boxed.
pub fn poll_http2(
    body: &mut hyper::body::Incoming,
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
    use http_body::Body as _;
    std::pin::Pin::new(body)
        .poll_frame(cx)
        .map(|frame| frame.map(|frame| frame.map_err(BoxError::from)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Frame;
    use http_body_util::StreamBody;

    fn frames(parts: Vec<Frame<Bytes>>) -> impl http_body::Body<Data = Bytes, Error = BoxError> {
        StreamBody::new(futures_util::stream::iter(
            parts.into_iter().map(Ok::<_, BoxError>),
        ))
    }

    #[tokio::test]
    async fn a_small_body_is_read_whole_its_one_frame_uncopied() {
        let one = Bytes::from_static(b"{\"id\":1}");
        let read = read_whole(frames(vec![Frame::data(one.clone())]), |_| Ok(()))
            .await
            .expect("read");
        assert_eq!(read, one);
        assert_eq!(read.as_ptr(), one.as_ptr(), "the frame itself, not a copy");

        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-sum", http::HeaderValue::from_static("1"));
        let parts = vec![
            Frame::data(Bytes::new()),
            Frame::data(Bytes::from_static(b"ab")),
            Frame::data(Bytes::from_static(b"")),
            Frame::data(Bytes::from_static(b"cd")),
            Frame::data(Bytes::from_static(b"e")),
            Frame::trailers(trailers),
        ];
        assert_eq!(
            read_whole(frames(parts), |_| Ok(())).await.expect("read"),
            "abcde"
        );
        assert_eq!(
            read_whole(frames(vec![]), |_| Ok(())).await.expect("read"),
            ""
        );
    }

    /// A body of one frame and the given exact size (what a reader framing
    /// it by its `Content-Length` says) or none; `read` is set once its frame
    /// has been taken.
    struct Sized {
        data: Option<Bytes>,
        size: Option<u64>,
        read: std::sync::Arc<std::sync::atomic::AtomicBool>,
    }

    impl http_body::Body for Sized {
        type Data = Bytes;
        type Error = BoxError;

        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            self.read.store(true, std::sync::atomic::Ordering::SeqCst);
            std::task::Poll::Ready(self.data.take().map(|data| Ok(Frame::data(data))))
        }

        fn is_end_stream(&self) -> bool {
            self.data.is_none()
        }

        fn size_hint(&self) -> http_body::SizeHint {
            self.size.map_or_else(
                http_body::SizeHint::default,
                http_body::SizeHint::with_exact,
            )
        }
    }

    /// Whether `coalesce` read a body of this size whole before returning.
    async fn read_ahead(size: Option<u64>) -> bool {
        let read = std::sync::Arc::default();
        let body = Sized {
            data: Some(Bytes::from_static(b"{}")),
            size,
            read: std::sync::Arc::clone(&read),
        };
        let body = coalesce(body).await.expect("read");
        let ahead = read.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(body.collect().await.expect("body").to_bytes(), "{}");
        ahead
    }

    #[tokio::test]
    async fn a_body_is_read_whole_only_when_its_known_size_is_small() {
        assert!(read_ahead(Some(2)).await);
        assert!(read_ahead(Some(COALESCE_LIMIT)).await);
        assert!(!read_ahead(None).await, "chunked or to the close: streamed");
        assert!(!read_ahead(Some(COALESCE_LIMIT + 1)).await);
    }
}
