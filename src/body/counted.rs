//! A small request body read whole before it is passed on
//! ([`super::COALESCE_LIMIT`]), its bytes counted against the body budget
//! while it is held: over HTTP/2 a connection may have 200 of them waiting
//! for a free upstream connection at once, and over HTTP/1 one may have
//! come read ahead behind another request. The share goes back when the
//! body is dropped, once sent on (or its request ended first).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

use super::BoxError;
use super::budget::Share;

/// One data frame, and the share of the budget its bytes hold. Boxed as
/// [`super::Body`], one allocation, as [`super::full`] takes: no owner
/// wrapped around the bytes.
pub struct Counted {
    data: Option<Bytes>,
    _share: Share,
}

impl Counted {
    pub fn new(data: Bytes, share: Share) -> Self {
        Self {
            data: (!data.is_empty()).then_some(data),
            _share: share,
        }
    }
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(self.get_mut().data.take().map(|data| Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |data| data.len() as u64))
    }
}
