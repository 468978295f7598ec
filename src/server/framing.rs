//! Finds HTTP/1 requests whose framing two parsers could read differently —
//! both `Content-Length` and `Transfer-Encoding` — before hyper parses them.
//!
//! hyper reads such a request by `Transfer-Encoding` and silently drops
//! `Content-Length`, so the handler cannot tell. This wrapper watches the bytes
//! as they are read, follows request boundaries (heads, fixed-length and
//! chunked bodies) and records which request of the connection was ambiguous;
//! the listener then answers it 400 without forwarding anything (SPEC §3).
//! When the stream stops looking like plain HTTP/1 (the HTTP/2 preface, a
//! malformed head or chunk) it stops watching and leaves the verdict to hyper.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A head larger than this is hyper's to refuse (431); watching stops.
const MAX_HEAD: usize = 256 * 1024;

/// Shared between the stream wrapper and the connection's service.
#[derive(Debug, Default)]
pub struct Verdicts {
    /// 1-based index of the first ambiguous request on this connection (0: none).
    ambiguous: AtomicU64,
    /// Requests the service has been handed so far.
    served: AtomicU64,
}

impl Verdicts {
    /// Called by the service once per request, in order: is this one ambiguous?
    pub fn next_is_ambiguous(&self) -> bool {
        let index = self.served.fetch_add(1, Ordering::SeqCst) + 1;
        self.ambiguous.load(Ordering::SeqCst) == index
    }
}

#[derive(Debug, Clone, Copy)]
enum State {
    Head,
    Body(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkEnd(u8),
    Trailers,
    Stopped,
}

/// The scanning state machine, separate from I/O so it can be tested on bytes.
#[derive(Debug)]
pub struct Scanner {
    state: State,
    /// The head, chunk-size line or trailer line being read; reused.
    line: Vec<u8>,
    heads: u64,
    verdicts: Arc<Verdicts>,
}

impl Scanner {
    pub fn new(verdicts: Arc<Verdicts>) -> Self {
        Self {
            state: State::Head,
            line: Vec::new(),
            heads: 0,
            verdicts,
        }
    }

    fn enter(&mut self, state: State) {
        self.line.clear();
        self.state = state;
    }

    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let used = match &mut self.state {
                State::Stopped => return,
                State::Head if self.line.is_empty() => {
                    // The usual case: the whole head in one read, parsed
                    // where it lies.
                    match memchr::memmem::find(bytes, b"\r\n\r\n") {
                        Some(at) => {
                            let next = self.after_head(&bytes[..at + 4]);
                            self.enter(next);
                            at + 4
                        }
                        None => {
                            self.line.extend_from_slice(bytes);
                            bytes.len()
                        }
                    }
                }
                State::Head => {
                    let (used, done) = take_until(&mut self.line, bytes, b"\r\n\r\n");
                    if done {
                        let head = std::mem::take(&mut self.line);
                        let next = self.after_head(&head);
                        self.line = head;
                        self.enter(next);
                    } else if self.line.len() > MAX_HEAD {
                        self.enter(State::Stopped);
                    }
                    used
                }
                State::Body(left) => {
                    let used = bytes
                        .len()
                        .min(usize::try_from(*left).unwrap_or(usize::MAX));
                    *left -= used as u64;
                    if *left == 0 {
                        self.enter(State::Head);
                    }
                    used
                }
                State::ChunkSize => {
                    let (used, done) = take_until(&mut self.line, bytes, b"\r\n");
                    if done {
                        let next = match chunk_size(&self.line) {
                            Some(0) => State::Trailers,
                            Some(size) => State::ChunkData(size),
                            None => State::Stopped,
                        };
                        self.enter(next);
                    } else if self.line.len() > 1024 {
                        self.enter(State::Stopped);
                    }
                    used
                }
                State::ChunkData(left) => {
                    let used = bytes
                        .len()
                        .min(usize::try_from(*left).unwrap_or(usize::MAX));
                    *left -= used as u64;
                    if *left == 0 {
                        self.state = State::ChunkEnd(2);
                    }
                    used
                }
                State::ChunkEnd(left) => {
                    *left -= 1;
                    if *left == 0 {
                        self.enter(State::ChunkSize);
                    }
                    1
                }
                State::Trailers => {
                    let (used, done) = take_until(&mut self.line, bytes, b"\r\n");
                    if done {
                        // An empty line ends the trailers (and the request).
                        let next = if self.line.len() == 2 {
                            State::Head
                        } else {
                            State::Trailers
                        };
                        self.enter(next);
                    } else if self.line.len() > MAX_HEAD {
                        self.enter(State::Stopped);
                    }
                    used
                }
            };
            bytes = &bytes[used..];
        }
    }

    fn after_head(&mut self, head: &[u8]) -> State {
        // Blank lines between requests are allowed before a request line.
        let start = head.iter().position(|b| *b != b'\r' && *b != b'\n');
        let Some(start) = start else {
            return State::Head;
        };
        let head = &head[start..];
        if head.starts_with(b"PRI * HTTP/2.0") {
            return State::Stopped;
        }
        let Some((length, transfer)) = framing_headers(head) else {
            return State::Stopped;
        };
        self.heads += 1;
        match (transfer, length) {
            (Some(_), Some(_)) => {
                // Record the first one only; hyper closes the connection after it.
                let _ = self.verdicts.ambiguous.compare_exchange(
                    0,
                    self.heads,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
                State::Stopped
            }
            (Some(coding), None) if ends_with_chunked(coding) => State::ChunkSize,
            (Some(_), None) => State::Stopped,
            (None, Some(u64::MAX)) => State::Stopped,
            (None, Some(0)) | (None, None) => State::Head,
            (None, Some(length)) => State::Body(length),
        }
    }
}

/// Appends bytes up to and including `end` to `buf`; returns how many were
/// used and whether `buf` now ends with `end`. `end` may straddle what `buf`
/// holds and what arrived.
fn take_until(buf: &mut Vec<u8>, bytes: &[u8], end: &[u8]) -> (usize, bool) {
    // A match that starts in `buf` ends earlier than one inside `bytes`; the
    // more of it `buf` holds, the earlier.
    for held in (1..end.len()).rev() {
        let rest = &end[held..];
        if buf.ends_with(&end[..held]) && bytes.starts_with(rest) {
            buf.extend_from_slice(rest);
            return (rest.len(), true);
        }
    }
    match memchr::memmem::find(bytes, end) {
        Some(at) => {
            buf.extend_from_slice(&bytes[..at + end.len()]);
            (at + end.len(), true)
        }
        None => {
            buf.extend_from_slice(bytes);
            (bytes.len(), false)
        }
    }
}

/// `Content-Length` (`u64::MAX` when unreadable) and `Transfer-Encoding` of a
/// head that ends with its empty line, or `None` for a head that is not plain
/// HTTP/1: hyper refuses that one and closes the connection, so watching stops.
///
/// A scan of the lines rather than a full parse (httparse): it runs on every
/// request, before hyper parses the same head, and only these two headers
/// decide where the next request starts. Where it is laxer than httparse (a
/// value's bytes, the target's), hyper refuses the head and the connection
/// ends, so no later boundary depends on it.
fn framing_headers(head: &[u8]) -> Option<(Option<u64>, Option<&[u8]>)> {
    let (request_line, mut rest) = next_line(head)?;
    if !is_request_line(request_line) {
        return None;
    }
    let mut length = None;
    let mut transfer = None;
    while let Some((line, after)) = next_line(rest) {
        rest = after;
        if line.is_empty() {
            break;
        }
        let colon = memchr::memchr(b':', line)?;
        let name = &line[..colon];
        if name.is_empty() || !name.iter().all(|b| is_token(*b)) {
            return None;
        }
        let value = line[colon + 1..].trim_ascii();
        if name.eq_ignore_ascii_case(b"content-length") {
            length = Some(
                std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(u64::MAX),
            );
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            transfer = Some(value);
        }
    }
    Some((length, transfer))
}

/// The line up to `\n` (without it, and without a `\r` before it) and what
/// follows; `None` when no line ends in `bytes`.
fn next_line(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = memchr::memchr(b'\n', bytes)?;
    let line = &bytes[..end];
    Some((line.strip_suffix(b"\r").unwrap_or(line), &bytes[end + 1..]))
}

/// `METHOD SP target SP HTTP/1.x`, the method a token.
fn is_request_line(line: &[u8]) -> bool {
    let Some(space) = memchr::memchr(b' ', line) else {
        return false;
    };
    space > 0
        && line[..space].iter().all(|b| is_token(*b))
        && (line.ends_with(b" HTTP/1.1") || line.ends_with(b" HTTP/1.0"))
        && line.len() > space + " HTTP/1.1".len()
}

/// RFC 9110 §5.6.2 `tchar`.
fn is_token(b: u8) -> bool {
    TOKEN[usize::from(b)]
}

/// A table, not a search of the punctuation: it runs for every byte of every
/// header name.
const TOKEN: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric();
        b += 1;
    }
    let punctuation = b"!#$%&'*+-.^_`|~";
    let mut i = 0;
    while i < punctuation.len() {
        table[punctuation[i] as usize] = true;
        i += 1;
    }
    table
};

fn chunk_size(line: &[u8]) -> Option<u64> {
    let line = line.strip_suffix(b"\r\n")?;
    let digits = line.split(|b| *b == b';').next()?;
    let digits = std::str::from_utf8(digits).ok()?.trim();
    u64::from_str_radix(digits, 16).ok()
}

fn ends_with_chunked(value: &[u8]) -> bool {
    std::str::from_utf8(value)
        .ok()
        .and_then(|v| v.rsplit(',').next())
        .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"))
}

/// A stream whose incoming bytes pass through a [`Scanner`].
pub struct Watched<IO> {
    inner: IO,
    scanner: Scanner,
}

impl<IO> Watched<IO> {
    pub fn new(inner: IO, verdicts: Arc<Verdicts>) -> Self {
        Self {
            inner,
            scanner: Scanner::new(verdicts),
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &polled {
            this.scanner.feed(&buf.filled()[before..]);
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ambiguous_index(chunks: &[&[u8]]) -> u64 {
        let verdicts = Arc::new(Verdicts::default());
        let mut scanner = Scanner::new(verdicts.clone());
        for chunk in chunks {
            scanner.feed(chunk);
        }
        verdicts.ambiguous.load(Ordering::SeqCst)
    }

    #[test]
    fn flags_both_framings_and_only_that_request() {
        let ambiguous: &[u8] =
            b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
        assert_eq!(ambiguous_index(&[ambiguous]), 1);
        let fixed: &[u8] = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
        let chunked: &[u8] =
            b"POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\n";
        let get: &[u8] = b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(ambiguous_index(&[fixed, chunked, get]), 0);
        // Pipelined after three clean requests, split across reads anywhere,
        // or read one byte at a time.
        let all = [fixed, chunked, get, ambiguous].concat();
        let bytes: Vec<&[u8]> = all.chunks(1).collect();
        assert_eq!(ambiguous_index(&bytes), 4, "byte by byte");
        for split in 0..all.len() {
            assert_eq!(
                ambiguous_index(&[&all[..split], &all[split..]]),
                4,
                "split at {split}"
            );
        }
    }

    #[test]
    fn a_body_that_looks_like_a_head_is_not_a_head() {
        let body = b"GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
        let request = [
            format!(
                "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
            body,
        ]
        .concat();
        assert_eq!(ambiguous_index(&[&request]), 0);
    }

    #[test]
    fn stops_watching_what_is_not_plain_http1() {
        assert_eq!(ambiguous_index(&[b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"]), 0);
        assert_eq!(ambiguous_index(&[b"garbage\r\n\r\nPOST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"]), 0);
    }

    #[test]
    fn reads_framing_headers_as_httparse_does() {
        let head = b"POST /a?b=c HTTP/1.1\r\nHost: x\r\ncontent-LENGTH:\t 12 \r\nX-A: b: c\r\n\r\n";
        assert_eq!(framing_headers(head), Some((Some(12), None)));
        let head = b"POST /a HTTP/1.0\nTransfer-Encoding: gzip, chunked\n\n";
        assert_eq!(
            framing_headers(head),
            Some((None, Some(&b"gzip, chunked"[..])))
        );
        let head = b"POST /a HTTP/1.1\r\nContent-Length: 1x\r\n\r\n";
        assert_eq!(framing_headers(head), Some((Some(u64::MAX), None)));
        // What httparse refuses (and so hyper) stops the watch.
        for head in [
            &b"POST /a HTTP/1.1\r\nContent-Length : 5\r\n\r\n"[..],
            b"POST /a HTTP/1.1\r\nno colon\r\n\r\n",
            b"POST /a HTTP/2.0\r\n\r\n",
            b"POST HTTP/1.1\r\n\r\n",
            b" /a HTTP/1.1\r\n\r\n",
            b"P(ST /a HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(
                framing_headers(head),
                None,
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn service_side_counts_requests_in_order() {
        let verdicts = Verdicts::default();
        verdicts.ambiguous.store(2, Ordering::SeqCst);
        assert!(!verdicts.next_is_ambiguous());
        assert!(verdicts.next_is_ambiguous());
        assert!(!verdicts.next_is_ambiguous());
    }
}
