//! The read side of a client connection, shared by the connection (heads)
//! and the request body being read (body bytes): the handler reads a large
//! or chunked body as it forwards it, in the connection's own task.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker, ready};

use bytes::{Bytes, BytesMut};
use http_body::{Frame, SizeHint};
use tokio::io::AsyncRead;

use crate::body::BoxError;
use crate::wire::chunked::{ChunkedDecoder, Step};

/// Room made in the buffer before each read.
const READ_CHUNK: usize = 8 * 1024;

pub type SharedReader = Arc<Mutex<Reader>>;

pub struct Reader {
    io: Box<dyn AsyncRead + Send + Unpin>,
    /// Read and not yet taken: the rest of a head, body bytes, the next head.
    pub buf: BytesMut,
    /// Where the current request's body stands.
    pub body: Progress,
    /// `Expect: 100-continue` and where its go-ahead stands.
    pub go_ahead: GoAhead,
}

/// The `100 Continue` a client that sent `Expect: 100-continue` waits for.
/// It is sent when the handler first wants body bytes that are not there,
/// not before: an answer the gateway gives without the body (400 without a
/// key, 413 on the declared length) then reaches a client that has not sent
/// it, as RFC 9110 §10.1.1 intends.
pub enum GoAhead {
    /// Not asked for, sent already, or no longer useful.
    None,
    /// Owed once the body is wanted; the connection's task to wake then
    /// (the body may be read from another task).
    Owed(Option<Waker>),
    /// The body is wanted: the connection's task writes the go-ahead.
    Wanted,
}

pub enum Progress {
    /// Read to its end (or there was none): the next bytes are a head.
    Done,
    Length(u64),
    Chunked(ChunkedDecoder),
    /// Broken off (malformed, or the client left): the connection cannot go on.
    Failed,
}

impl Reader {
    pub fn shared(io: Box<dyn AsyncRead + Send + Unpin>, buf: BytesMut) -> SharedReader {
        Arc::new(Mutex::new(Self {
            io,
            buf,
            body: Progress::Done,
            go_ahead: GoAhead::None,
        }))
    }

    /// Reads more into the buffer; `Ok(0)` when the client closed.
    pub fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 4 {
            self.buf.reserve(READ_CHUNK);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.buf)
    }

    /// The body is wanted and its bytes are not there: a go-ahead owed is
    /// now due.
    fn want_body(&mut self) {
        if let GoAhead::Owed(waker) = std::mem::replace(&mut self.go_ahead, GoAhead::None) {
            self.go_ahead = GoAhead::Wanted;
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }

    pub fn body_done(&self) -> bool {
        matches!(self.body, Progress::Done)
    }

    /// Drops what of the body is already buffered, without reading more:
    /// for a body its handler left unread (it answered without it).
    pub fn skip_buffered_body(&mut self) {
        match &mut self.body {
            Progress::Length(remaining) => {
                let take = usize::try_from(*remaining)
                    .unwrap_or(usize::MAX)
                    .min(self.buf.len());
                let _ = self.buf.split_to(take);
                *remaining -= take as u64;
                if *remaining == 0 {
                    self.body = Progress::Done;
                }
            }
            Progress::Chunked(decoder) => loop {
                match decoder.decode(&mut self.buf) {
                    Ok(Step::Data(_)) => {}
                    Ok(Step::End) => {
                        self.body = Progress::Done;
                        break;
                    }
                    Ok(Step::More) => break,
                    Err(_) => {
                        self.body = Progress::Failed;
                        break;
                    }
                }
            },
            Progress::Done | Progress::Failed => {}
        }
    }
}

pub fn lock(reader: &SharedReader) -> MutexGuard<'_, Reader> {
    reader
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("the client closed the connection before the end of the body")]
    Truncated,
    #[error("{0}")]
    Chunked(#[from] crate::wire::chunked::ChunkedError),
}

/// A request body read from the connection as the handler asks for it.
pub struct StreamingBody {
    reader: SharedReader,
    ended: bool,
}

impl StreamingBody {
    pub fn new(reader: SharedReader) -> Self {
        Self {
            reader,
            ended: false,
        }
    }
}

impl http_body::Body for StreamingBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let mut guard = lock(&this.reader);
        let reader = &mut *guard;
        loop {
            match &mut reader.body {
                Progress::Done => {
                    this.ended = true;
                    return Poll::Ready(None);
                }
                Progress::Failed => return Poll::Ready(Some(Err(BodyError::Truncated.into()))),
                Progress::Length(remaining) => {
                    if !reader.buf.is_empty() {
                        let take = usize::try_from(*remaining)
                            .unwrap_or(usize::MAX)
                            .min(reader.buf.len());
                        let data = reader.buf.split_to(take).freeze();
                        *remaining -= take as u64;
                        if *remaining == 0 {
                            reader.body = Progress::Done;
                            this.ended = true;
                        }
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
                Progress::Chunked(decoder) => match decoder.decode(&mut reader.buf) {
                    Ok(Step::Data(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Ok(Step::End) => {
                        reader.body = Progress::Done;
                        this.ended = true;
                        return Poll::Ready(None);
                    }
                    Ok(Step::More) => {}
                    Err(err) => {
                        reader.body = Progress::Failed;
                        return Poll::Ready(Some(Err(BodyError::from(err).into())));
                    }
                },
            }
            reader.want_body();
            match ready!(reader.poll_fill(cx)) {
                Ok(0) => {
                    reader.body = Progress::Failed;
                    return Poll::Ready(Some(Err(BodyError::Truncated.into())));
                }
                Ok(_) => {}
                Err(err) => {
                    reader.body = Progress::Failed;
                    return Poll::Ready(Some(Err(err.into())));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }

    fn size_hint(&self) -> SizeHint {
        match lock(&self.reader).body {
            Progress::Length(remaining) => SizeHint::with_exact(remaining),
            Progress::Done => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}
