//! What an HTTP/2 upstream's connections are doing, as far as a request
//! that timed out needs to know: they are opened apart from the requests
//! that wait for them (mod.rs), and a request that waited the
//! whole `timeout` for one was never sent (502, key freed); it is not one
//! that went out and got no answer (504 `outcome-unknown`).
//!
//! A connection counts as open while a request could still be handed it:
//! until hyper drops it, or until the holder lets go of it (worn out,
//! idle, closing) though streams still run on it. A request that comes
//! after the holder let go of the old one waits for the new one as it
//! would for the first.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};

/// Connections opened and still open.
#[derive(Debug, Default)]
pub struct Http2Connections {
    /// Opened so far (a connect that succeeded).
    opened: AtomicU64,
    /// Opened, and neither dropped by hyper nor let go of by the holder.
    open: AtomicUsize,
}

/// What a request saw of the connections when it was handed over.
pub struct Before {
    opened: u64,
    none_open: bool,
}

impl Http2Connections {
    pub fn before(&self) -> Before {
        Before {
            opened: self.opened.load(Ordering::SeqCst),
            none_open: self.open.load(Ordering::SeqCst) == 0,
        }
    }

    /// Whether a request handed over at `before` cannot have been sent: no
    /// connection was open then, and none has been opened since. (One open
    /// then, even closing, may have carried it; one the holder had let go
    /// of could no longer be handed it.)
    pub fn never_connected_since(&self, before: &Before) -> bool {
        before.none_open && self.opened.load(Ordering::SeqCst) == before.opened
    }

    /// Counts a connection just opened, for as long as hyper keeps it.
    pub fn track<S>(self: &Arc<Self>, stream: S) -> Tracked<S> {
        // `open` first: a request that sees the new `opened` sees it open.
        self.open.fetch_add(1, Ordering::SeqCst);
        self.opened.fetch_add(1, Ordering::SeqCst);
        Tracked {
            stream,
            counted: Arc::new(Counted {
                connections: self.clone(),
                open: AtomicBool::new(true),
                heard: AtomicU64::new(0),
            }),
        }
    }
}

/// One connection's place in `open`, given up once, and what it has read.
struct Counted {
    connections: Arc<Http2Connections>,
    open: AtomicBool,
    /// Reads that brought something (bytes, or the end): whether the
    /// upstream has said anything at all since a moment (silence.rs).
    heard: AtomicU64,
}

impl Counted {
    fn close(&self) {
        if self.open.swap(false, Ordering::SeqCst) {
            self.connections.open.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// An upstream connection counted in [`Http2Connections`] until dropped
/// (or its [`Offered`] is).
pub struct Tracked<S> {
    stream: S,
    counted: Arc<Counted>,
}

impl<S> Tracked<S> {
    /// What the holder keeps while it may hand the connection to a
    /// request: once dropped, the connection no longer counts as open. To
    /// be dropped only once nothing can hand it out any more.
    pub fn offered(&self) -> Offered {
        Offered(self.counted.clone())
    }
}

impl<S> Drop for Tracked<S> {
    fn drop(&mut self) {
        self.counted.close();
    }
}

/// See [`Tracked::offered`].
pub struct Offered(Arc<Counted>);

impl Offered {
    /// The reads so far that brought something: unchanged between two
    /// looks, the upstream sent nothing on the connection in between.
    pub fn heard(&self) -> u64 {
        self.0.heard.load(Ordering::Relaxed)
    }
}

impl Drop for Offered {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl<S: Connection> Connection for Tracked<S> {
    fn connected(&self) -> Connected {
        self.stream.connected()
    }
}

impl<S: Read + Unpin> Read for Tracked<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) {
            this.counted.heard.fetch_add(1, Ordering::Relaxed);
        }
        read
    }
}

impl<S: Write + Unpin> Write for Tracked<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_unsent_only_while_no_connection_was_open_or_opened() {
        let connections = Arc::new(Http2Connections::default());
        let first = connections.before();
        assert!(connections.never_connected_since(&first));
        let open = connections.track(());
        assert!(!connections.never_connected_since(&first), "opened since");
        let second = connections.before();
        drop(open);
        assert!(
            !connections.never_connected_since(&second),
            "one was open when it was handed over"
        );
        assert!(connections.never_connected_since(&connections.before()));
    }

    /// A connection the holder let go of (worn out, say) while a stream
    /// still runs on it can take no request that comes after.
    #[test]
    fn a_connection_let_go_of_no_longer_counts_as_open() {
        let connections = Arc::new(Http2Connections::default());
        let open = connections.track(());
        let offered = open.offered();
        let held = connections.before();
        drop(offered);
        let after = connections.before();
        assert!(!connections.never_connected_since(&held));
        assert!(connections.never_connected_since(&after));
        drop(open);
        assert!(connections.never_connected_since(&after), "counted once");
        let next = connections.track(());
        assert!(!connections.never_connected_since(&after), "opened since");
        drop(next.offered());
        drop(next);
        assert!(connections.never_connected_since(&connections.before()));
    }
}
