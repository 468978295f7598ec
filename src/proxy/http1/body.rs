//! The body of an answer read from a pooled connection. The connection goes
//! back to the pool the moment the body's last byte is read; a body dropped
//! before its end closes it (unread bytes would be taken for the next answer).

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};

use super::idle::Lease;
use crate::body::BoxError;
use crate::wire::chunked::{ChunkedDecoder, Step};
use crate::wire::framing::BodyKind;

pub struct AnswerBody {
    /// The connection, until the body has ended (or failed).
    lease: Option<Lease>,
    state: State,
    /// The connection may carry another request once this body is read.
    reusable: bool,
}

enum State {
    Length(u64),
    Chunked(ChunkedDecoder),
    UntilClose,
}

#[derive(Debug, thiserror::Error)]
#[error("the upstream closed the connection before the end of the body")]
struct Truncated;

impl AnswerBody {
    pub(super) fn new(lease: Lease, framing: BodyKind, reusable: bool) -> Self {
        let state = match framing {
            BodyKind::None => State::Length(0),
            BodyKind::Length(length) => State::Length(length),
            BodyKind::Chunked => State::Chunked(ChunkedDecoder::new()),
            BodyKind::UntilClose => State::UntilClose,
        };
        let mut body = Self {
            lease: Some(lease),
            state,
            reusable,
        };
        if matches!(body.state, State::Length(0)) {
            body.finish();
        }
        body
    }

    /// The body is complete: the connection goes back to the pool if it can
    /// carry another request, and is closed otherwise.
    fn finish(&mut self) {
        if let Some(mut lease) = self.lease.take()
            && self.reusable
            && lease.connection().buffered().is_empty()
        {
            lease.give_back();
        }
    }

    fn fail(&mut self, err: BoxError) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.lease = None;
        Poll::Ready(Some(Err(err)))
    }
}

impl HttpBody for AnswerBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            let Some(lease) = this.lease.as_mut() else {
                return Poll::Ready(None);
            };
            let buf = lease.connection().buffered();
            match &mut this.state {
                State::Length(remaining) => {
                    if !buf.is_empty() {
                        let take = usize::try_from(*remaining)
                            .unwrap_or(usize::MAX)
                            .min(buf.len());
                        let data = buf.split_to(take).freeze();
                        *remaining -= take as u64;
                        if *remaining == 0 {
                            this.finish();
                        }
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
                State::Chunked(decoder) => match decoder.decode(buf) {
                    Ok(Step::Data(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Ok(Step::End) => {
                        this.finish();
                        return Poll::Ready(None);
                    }
                    Ok(Step::More) => {}
                    Err(err) => return this.fail(err.into()),
                },
                State::UntilClose => {
                    if !buf.is_empty() {
                        let data = buf.split().freeze();
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
            }
            match ready!(lease.connection().poll_fill(cx)) {
                Ok(0) if matches!(this.state, State::UntilClose) => {
                    this.lease = None;
                    return Poll::Ready(None);
                }
                Ok(0) => return this.fail(Truncated.into()),
                Ok(_) => {}
                Err(err) => return this.fail(err.into()),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        // The lease is given up the moment the body ends (at once for none).
        self.lease.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            State::Length(remaining) => SizeHint::with_exact(remaining),
            _ => SizeHint::default(),
        }
    }
}
