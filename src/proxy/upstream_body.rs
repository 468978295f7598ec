//! The body of an upstream's answer: read by the gateway's own HTTP/1
//! client from a pooled connection, or by hyper's HTTP/2 client. An
//! upstream that goes quiet mid-body for its `timeout` fails it
//! ([`crate::body::Stalled`]): the deadline on the head alone would leave
//! the client waiting for ever.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;

use super::http1::AnswerBody;
use super::http2_streams::{AnswerPlace, StreamPlace};
use crate::body::{BoxError, IdleLimit};

pub struct UpstreamBody(IdleLimit<Source>);

enum Source {
    Http1(AnswerBody),
    /// With its stream's place, given back when the body is dropped; the
    /// request body still being sent, if any, ends then.
    Http2 {
        body: Incoming,
        _place: AnswerPlace,
    },
}

impl UpstreamBody {
    pub(super) fn http1(body: AnswerBody, idle: Duration) -> Self {
        Self(IdleLimit::new(Source::Http1(body), idle))
    }

    pub(super) fn http2(body: Incoming, idle: Duration, place: StreamPlace) -> Self {
        Self(IdleLimit::new(
            Source::Http2 {
                body,
                _place: place.for_answer(),
            },
            idle,
        ))
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
            Self::Http2 { body, .. } => crate::body::poll_http2(body, cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Http1(body) => body.is_end_stream(),
            Self::Http2 { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Http1(body) => body.size_hint(),
            Self::Http2 { body, .. } => body.size_hint(),
        }
    }
}
