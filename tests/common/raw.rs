//! Raw TCP exchanges, for requests a well-behaved HTTP client cannot produce.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What came back on a raw connection.
#[derive(Debug, Clone)]
pub struct RawReply {
    /// Status of the first answer, if one arrived.
    pub status: Option<u16>,
    /// Everything read, lossily decoded.
    pub text: String,
    /// The peer closed the connection (or reset it) before `within` ran out.
    pub closed: bool,
}

impl RawReply {
    /// The value of the first answer's header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<String> {
        let head = self.text.split("\r\n\r\n").next()?;
        head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }

    /// The first answer's body (what follows its head).
    pub fn body(&self) -> &str {
        let body = self.text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let length = self
            .header("content-length")
            .and_then(|v| v.parse::<usize>().ok());
        match length {
            Some(n) => body.get(..n).unwrap_or(body),
            None => body,
        }
    }

    /// A 4xx answer, or the connection closed without any answer.
    pub fn is_refusal(&self) -> bool {
        match self.status {
            Some(status) => (400..500).contains(&status),
            None => self.closed,
        }
    }
}

/// Opens a connection, writes `bytes`, and reads until the first answer is
/// complete, the peer closes, or `within` passes.
pub async fn exchange(addr: SocketAddr, bytes: &[u8], within: Duration) -> RawReply {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    // The peer may close early (e.g. on a head it refuses): a failed write is
    // not the test's concern, the answer read below is.
    let _ = stream.write_all(bytes).await;
    read_reply(&mut stream, within).await
}

/// Reads until one answer is complete (by its Content-Length, or chunked end),
/// the peer closes, or `within` passes.
pub async fn read_reply(stream: &mut TcpStream, within: Duration) -> RawReply {
    let deadline = Instant::now() + within;
    let mut read = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let mut closed = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || complete(&read) {
            break;
        }
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed = true;
                break;
            }
            Ok(Ok(n)) => read.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&read).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| text.strip_prefix("HTTP/1.0 "))
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok());
    RawReply {
        status,
        text,
        closed,
    }
}

/// Waits for the peer to close the connection, discarding what it sends;
/// `true` when it closed within `within`.
pub async fn wait_closed(stream: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = vec![0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

fn complete(read: &[u8]) -> bool {
    let Some(end) = read.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&read[..end]).to_ascii_lowercase();
    let body = &read[end + 4..];
    if let Some(length) = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        return body.len() >= length;
    }
    if head.contains("transfer-encoding: chunked") {
        return body.ends_with(b"0\r\n\r\n");
    }
    // No framing: the body ends with the connection.
    false
}
