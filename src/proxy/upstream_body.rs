//! The body of an upstream's answer: read by the gateway's own HTTP/1
//! client from a pooled connection, or by hyper's HTTP/2 client.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;

use super::http1::AnswerBody;
use crate::body::BoxError;

pub enum UpstreamBody {
    Http1(AnswerBody),
    Http2(Incoming),
}

impl UpstreamBody {
    pub(super) fn http1(body: AnswerBody) -> Self {
        Self::Http1(body)
    }

    pub(super) fn http2(body: Incoming) -> Self {
        Self::Http2(body)
    }
}

impl HttpBody for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            Self::Http1(body) => Pin::new(body).poll_frame(cx),
            Self::Http2(body) => crate::body::poll_http2(body, cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Http1(body) => body.is_end_stream(),
            Self::Http2(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Http1(body) => body.size_hint(),
            Self::Http2(body) => body.size_hint(),
        }
    }
}
