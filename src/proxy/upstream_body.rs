//! The body of an upstream's answer: read by the gateway's own HTTP/1
//! client from a pooled connection, or by hyper's HTTP/2 client. An
//! upstream that goes quiet mid-body for its `timeout` fails it
//! ([`crate::body::Stalled`]): the deadline on the head alone would leave
//! the client waiting for ever.
//!
//! An HTTP/2 answer that ends short of its declared `Content-Length` fails
//! too ([`CutShort`]): hyper ends a body cleanly on `RST_STREAM(NO_ERROR)`,
//! which RFC 9113 §8.1 allows only after a whole answer, so an upstream
//! that cuts its answer with it would have the part taken for the whole
//! (and stored on a keyed route). h2 checks the length on `END_STREAM`, so
//! a short end is always such a reset. Without a declared length the two
//! ends look the same through hyper (docs/http1.md).
//!
//! An answer with no body by definition (to HEAD, a 204, a 304) is not read
//! at all: its head is the whole answer. An upstream that sends DATA after
//! it anyway (hyper's own HTTP/2 server does, to HEAD) would have h2 fail
//! the stream, and the client a 502 for a head it had.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;

use super::http1::AnswerBody;
use super::http2::{AnswerPlace, StreamPlace};
use crate::body::{BoxError, IdleLimit};

pub struct UpstreamBody(IdleLimit<Source>);

enum Source {
    Http1(AnswerBody),
    /// With its stream's place, given back when the body is dropped; the
    /// request body still being sent, if any, ends then.
    Http2 {
        body: Incoming,
        _place: AnswerPlace,
        /// What is still to come of the declared length, if one was.
        left: Option<u64>,
    },
    /// An answer with no body by definition; the stream and its place are
    /// given back when the body is dropped.
    Http2Bodiless {
        _stream: Incoming,
        _place: AnswerPlace,
    },
}

/// An HTTP/2 upstream's answer ended before its declared length.
#[derive(Debug, thiserror::Error)]
#[error("the upstream's HTTP/2 answer ended {left} bytes short of its Content-Length")]
pub struct CutShort {
    left: u64,
}

impl UpstreamBody {
    pub(super) fn http1(body: AnswerBody, idle: Duration) -> Self {
        Self(IdleLimit::new(Source::Http1(body), idle))
    }

    /// `bodiless`: an answer that has no body whatever its `Content-Length`
    /// says (to HEAD, a 204 or a 304).
    pub(super) fn http2(
        body: Incoming,
        bodiless: bool,
        idle: Duration,
        place: StreamPlace,
    ) -> Self {
        let source = if bodiless {
            Source::Http2Bodiless {
                _stream: body,
                _place: place.for_answer(),
            }
        } else {
            // hyper's hint is the answer's `Content-Length`.
            let left = body.size_hint().exact();
            Source::Http2 {
                body,
                _place: place.for_answer(),
                left,
            }
        };
        Self(IdleLimit::new(source, idle))
    }
}

impl HttpBody for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.get_mut().0).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.0.size_hint()
    }
}

impl HttpBody for Source {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            Self::Http1(body) => Pin::new(body).poll_frame(cx),
            Self::Http2 { body, left, .. } => match crate::body::poll_http2(body, cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let (Some(left), Some(data)) = (left.as_mut(), frame.data_ref()) {
                        *left = left.saturating_sub(data.len() as u64);
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
                Poll::Ready(None) => match *left {
                    Some(left) if left > 0 => Poll::Ready(Some(Err(CutShort { left }.into()))),
                    _ => Poll::Ready(None),
                },
                other => other,
            },
            Self::Http2Bodiless { .. } => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Http1(body) => body.is_end_stream(),
            // Not while some of the declared length is missing: a server
            // that sees the end would close the client's stream cleanly
            // without polling for the failure.
            Self::Http2 { body, left, .. } => {
                left.is_none_or(|left| left == 0) && body.is_end_stream()
            }
            Self::Http2Bodiless { .. } => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Http1(body) => body.size_hint(),
            Self::Http2 { body, .. } => body.size_hint(),
            Self::Http2Bodiless { .. } => SizeHint::with_exact(0),
        }
    }
}
