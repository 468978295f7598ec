//! An HTTP/2 request body that is still read for a moment after it is
//! dropped unfinished.
//!
//! A gateway often answers before the body is in: 400 for a missing key,
//! 413 for a declared length over the limit, 404 for no route. Over HTTP/1
//! the connection then lingers (server/http1). Over HTTP/2, dropping the
//! body makes the stream reset right behind the answer (RST_STREAM with
//! NO_ERROR, which RFC 9113 §8.1 allows), and some clients (curl 7.88 with
//! nghttp2) then lose the answer itself. So the rest of the body is read and
//! dropped in the background, while it keeps coming, for at most
//! [`LINGER`]: the answer goes out first, and the client is told to stop
//! only after it has had the time to read it.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::{BoxError, poll_http2};

/// How long an abandoned body is still read: HTTP/1's linger after an early
/// answer, as long.
const LINGER: Duration = Duration::from_millis(500);

pub struct Http2Body {
    /// `None` only once dropped.
    incoming: Option<Incoming>,
}

impl Http2Body {
    pub fn new(incoming: Incoming) -> Self {
        Self {
            incoming: Some(incoming),
        }
    }
}

impl HttpBody for Http2Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match &mut self.get_mut().incoming {
            Some(incoming) => poll_http2(incoming, cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

impl Drop for Http2Body {
    fn drop(&mut self) {
        let Some(incoming) = self.incoming.take() else {
            return;
        };
        if incoming.is_end_stream() {
            return;
        }
        // Outside a runtime (a test dropping a request) there is no one to
        // read it: the stream is reset at once, as before.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(drain(incoming));
        }
    }
}

async fn drain(mut incoming: Incoming) {
    let read_rest = async { while let Some(Ok(_)) = incoming.frame().await {} };
    let _ = tokio::time::timeout(LINGER, read_rest).await;
}
