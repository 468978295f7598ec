//! The body of an upstream's answer. On a pooled HTTP/1 connection it holds
//! the connection until the body has been read to its end, and then gives it
//! back to the pool; a body dropped before its end closes the connection
//! (hyper cannot reuse a connection with unread bytes on it).

use std::pin::Pin;
use std::sync::Weak;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use tokio::sync::OwnedSemaphorePermit;

use super::pool::Http1Pool;
use crate::body::Body;

/// A pooled connection lent to one answer.
pub struct Lease {
    pool: Weak<Http1Pool>,
    sender: SendRequest<Body>,
    permit: OwnedSemaphorePermit,
}

impl Lease {
    pub(super) fn new(
        pool: Weak<Http1Pool>,
        sender: SendRequest<Body>,
        permit: OwnedSemaphorePermit,
    ) -> Self {
        Self {
            pool,
            sender,
            permit,
        }
    }

    fn give_back(self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.put_back(self.sender, self.permit);
        }
    }
}

pub struct UpstreamBody {
    incoming: Incoming,
    lease: Option<Lease>,
    /// The body has been read to its end (or had none).
    ended: bool,
}

impl UpstreamBody {
    pub(super) fn pooled(incoming: Incoming, lease: Lease) -> Self {
        let ended = incoming.is_end_stream();
        Self {
            incoming,
            lease: Some(lease),
            ended,
        }
    }

    /// An answer on a connection the pool does not manage (HTTP/2).
    pub(super) fn unpooled(incoming: Incoming) -> Self {
        let ended = incoming.is_end_stream();
        Self {
            incoming,
            lease: None,
            ended,
        }
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        if self.ended
            && let Some(lease) = self.lease.take()
        {
            lease.give_back();
        }
    }
}

impl HttpBody for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.incoming).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => this.ended = true,
            Poll::Ready(Some(Ok(_))) if this.incoming.is_end_stream() => this.ended = true,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}
