//! A bound on how long a client may take nothing of its answer: a write to
//! it that makes no progress for the limit fails the connection, as a head
//! or a keyed body that stops arriving does. Without it a client that never
//! reads (or reads a byte now and then) would hold its connection, and the
//! upstream connection streaming to it, for good.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

pub struct WriteStall<S> {
    inner: S,
    limit: Duration,
    /// Made on the first stall only: a client that keeps up costs nothing.
    timer: Option<Pin<Box<Sleep>>>,
    /// The timer runs for the current stall.
    armed: bool,
}

impl<S> WriteStall<S> {
    pub fn new(inner: S, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            timer: None,
            armed: false,
        }
    }

    /// The write is pending: starts the stall's clock, or fails once it ran out.
    fn poll_stalled(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let deadline = Instant::now() + self.limit;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if !self.armed {
            timer.as_mut().reset(deadline);
            self.armed = true;
        }
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took nothing of its answer for header_read_timeout",
            )),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progress<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match poll {
            Poll::Pending => match self.poll_stalled(cx) {
                Poll::Ready(err) => Poll::Ready(Err(err)),
                Poll::Pending => Poll::Pending,
            },
            ready => {
                self.armed = false;
                ready
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteStall<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.progress(cx, poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.progress(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_flush(cx);
        this.progress(cx, poll)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.progress(cx, poll)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteStall<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_write_that_makes_no_progress_fails_after_the_limit() {
        let (near, far) = tokio::io::duplex(16);
        let mut stalled = WriteStall::new(near, Duration::from_millis(200));
        let started = std::time::Instant::now();
        let result = stalled.write_all(&[b'x'; 64]).await;
        assert_eq!(
            result.map_err(|err| err.kind()),
            Err(io::ErrorKind::TimedOut)
        );
        assert!(started.elapsed() >= Duration::from_millis(200));
        // A reader that keeps taking bytes, however slowly, is not cut off.
        let (near, mut far2) = tokio::io::duplex(16);
        let mut slow = WriteStall::new(near, Duration::from_millis(200));
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 16];
            let mut total = 0;
            while total < 64 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                total += far2.read(&mut buf).await.expect("read");
            }
        });
        slow.write_all(&[b'x'; 64])
            .await
            .expect("a slow reader is served");
        reader.await.expect("reader");
        drop(far);
    }
}
