//! An answer as HTTP/1.1 puts it on the wire to the client.

use std::io;

use futures_util::FutureExt;
use http::{HeaderValue, Response, StatusCode, Version, header};
use http_body::Body as _;
use http_body_util::BodyExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::date;
use crate::body::Body;
use crate::wire;
use crate::wire::fields::TransferCodings;
// `UntilClose`: an HTTP/1.0 client, length unknown.
use crate::wire::framing::BodyKind as Framing;

/// Bytes gathered before a write: a small answer leaves in one.
const GATHER: usize = 64 * 1024;

/// What of the request decides how its answer is written.
#[derive(Debug, Clone, Copy)]
pub struct Facts {
    /// The request was HEAD: the head says what a GET would get, no body follows.
    pub head: bool,
    pub version: Version,
    /// The connection may carry another request after this answer.
    pub keep_alive: bool,
}

/// Writes `response`; `Ok(true)` when the connection can carry another request.
pub async fn write<W: AsyncWrite + Unpin>(
    io: &mut W,
    out: &mut Vec<u8>,
    response: Response<Body>,
    facts: Facts,
) -> io::Result<bool> {
    let (parts, mut body) = response.into_parts();
    let status = parts.status;
    let mut keep_alive = facts.keep_alive;
    let bodiless = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    // Codings an upstream applied besides chunked: the body is still coded,
    // and only chunked framing can follow them (RFC 9112 §6.1). The gateway
    // answers any client but HTTP/1.1 with a 502 instead (docs/http1.md).
    let codings = parts
        .extensions
        .get::<TransferCodings>()
        .filter(|_| facts.version == Version::HTTP_11);
    let framing = if bodiless || facts.head {
        Framing::None
    } else if codings.is_some() {
        Framing::Chunked
    } else if body.is_end_stream() {
        Framing::Length(0)
    } else {
        match body.size_hint().exact() {
            Some(length) => Framing::Length(length),
            None if facts.version == Version::HTTP_11 => Framing::Chunked,
            None => {
                keep_alive = false;
                Framing::UntilClose
            }
        }
    };
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    // A HEAD or 304 answer's Content-Length is the handler's to say; in any
    // other, the framing below is the only one.
    let own_length = !(facts.head || status == StatusCode::NOT_MODIFIED);
    // What the handler's `Connection` and `Date` say is read in this one
    // pass over the fields, not looked up by name before and after it.
    let mut has_date = false;
    for (name, value) in &parts.headers {
        if *name == header::CONNECTION {
            keep_alive &= !says_close(value);
            continue;
        }
        if *name == header::TRANSFER_ENCODING || (*name == header::CONTENT_LENGTH && own_length) {
            continue;
        }
        has_date |= *name == header::DATE;
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !has_date {
        out.extend_from_slice(b"date: ");
        date::append(out);
        out.extend_from_slice(b"\r\n");
    }
    match framing {
        Framing::Length(length) => {
            out.extend_from_slice(b"content-length: ");
            wire::push_decimal(out, length);
            out.extend_from_slice(b"\r\n");
        }
        Framing::Chunked => {
            out.extend_from_slice(b"transfer-encoding: ");
            if let Some(TransferCodings(codings)) = codings {
                out.extend_from_slice(codings.as_bytes());
                out.extend_from_slice(b", ");
            }
            out.extend_from_slice(b"chunked\r\n");
        }
        Framing::None | Framing::UntilClose => {}
    }
    if !keep_alive {
        out.extend_from_slice(b"connection: close\r\n");
    } else if facts.version == Version::HTTP_10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");

    if !matches!(framing, Framing::None) {
        let chunked = matches!(framing, Framing::Chunked);
        let mut written: u64 = 0;
        loop {
            // Gather what is ready; write before waiting for more, so a
            // trickling body reaches the client as it comes.
            let next = match body.frame().now_or_never() {
                Some(next) => next,
                None => {
                    flush(io, out).await?;
                    body.frame().await
                }
            };
            let Some(frame) = next else { break };
            let frame = match frame {
                Ok(frame) => frame,
                Err(err) => {
                    // The head and the bytes gathered so far still go out:
                    // the client sees the answer cut short (the connection
                    // closes), rather than a connection closed on nothing.
                    let _ = flush(io, out).await;
                    return Err(io::Error::other(err));
                }
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if data.is_empty() {
                continue;
            }
            written += data.len() as u64;
            if chunked {
                wire::push_hex(out, data.len() as u64);
                out.extend_from_slice(b"\r\n");
            }
            if out.len() + data.len() > GATHER {
                flush(io, out).await?;
                io.write_all(&data).await?;
            } else {
                out.extend_from_slice(&data);
            }
            if chunked {
                out.extend_from_slice(b"\r\n");
            }
            if out.len() >= GATHER {
                flush(io, out).await?;
            }
        }
        if let Framing::Length(length) = framing
            && written != length
        {
            let _ = flush(io, out).await;
            return Err(io::Error::other(format!(
                "the answer body had {written} bytes, not the {length} declared"
            )));
        }
        if chunked {
            out.extend_from_slice(b"0\r\n\r\n");
        }
    }
    flush(io, out).await?;
    io.flush().await?;
    Ok(keep_alive)
}

async fn flush<W: AsyncWrite + Unpin>(io: &mut W, out: &mut Vec<u8>) -> io::Result<()> {
    if !out.is_empty() {
        io.write_all(out).await?;
        out.clear();
    }
    Ok(())
}

/// Whether a `Connection` field's value lists `close`.
fn says_close(value: &HeaderValue) -> bool {
    value.to_str().is_ok_and(|value| {
        value
            .split(',')
            .any(|token| token.trim().eq_ignore_ascii_case("close"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body;

    async fn written(response: Response<Body>, facts: Facts) -> (String, bool) {
        let mut wire = Vec::new();
        let mut out = Vec::new();
        let keep = write(&mut wire, &mut out, response, facts)
            .await
            .expect("written");
        (String::from_utf8_lossy(&wire).to_string(), keep)
    }

    const KEEP: Facts = Facts {
        head: false,
        version: Version::HTTP_11,
        keep_alive: true,
    };

    #[tokio::test]
    async fn a_small_answer_is_one_block_with_its_length_and_date() {
        let mut response = Response::new(body::full("{}"));
        *response.status_mut() = StatusCode::CREATED;
        response
            .headers_mut()
            .insert("content-length", "99".parse().expect("valid"));
        let (wire, keep) = written(response, KEEP).await;
        assert!(wire.starts_with("HTTP/1.1 201 Created\r\n"), "{wire}");
        assert!(wire.contains("\r\ncontent-length: 2\r\n"), "{wire}");
        assert!(!wire.contains("99"), "{wire}");
        assert!(wire.contains("\r\ndate: "), "{wire}");
        assert!(wire.ends_with("\r\n\r\n{}"), "{wire}");
        assert!(keep);
    }

    #[tokio::test]
    async fn unknown_lengths_are_chunked_or_end_with_the_connection() {
        let stream = || {
            body::stream(http_body_util::StreamBody::new(futures_util::stream::iter(
                [Ok::<_, io::Error>(http_body::Frame::data(
                    bytes::Bytes::from("abc"),
                ))],
            )))
        };
        let (wire, keep) = written(Response::new(stream()), KEEP).await;
        assert!(wire.contains("transfer-encoding: chunked\r\n"), "{wire}");
        assert!(wire.ends_with("\r\n\r\n3\r\nabc\r\n0\r\n\r\n"), "{wire}");
        assert!(keep);
        let old = Facts {
            version: Version::HTTP_10,
            ..KEEP
        };
        let (wire, keep) = written(Response::new(stream()), old).await;
        assert!(wire.contains("connection: close\r\n"), "{wire}");
        assert!(wire.ends_with("\r\n\r\nabc"), "{wire}");
        assert!(!keep);
    }

    /// A handler's `Connection: close` (on any of its lines, in any case)
    /// closes the connection after the answer and is written once; a
    /// handler's own `Date` is kept and not written twice.
    #[tokio::test]
    async fn the_handlers_connection_and_date_fields_are_heeded() {
        let mut response = Response::new(body::full("{}"));
        let headers = response.headers_mut();
        headers.append(header::CONNECTION, HeaderValue::from_static("x-hop"));
        headers.append(header::CONNECTION, HeaderValue::from_static("x-a, Close"));
        headers.insert(
            header::DATE,
            HeaderValue::from_static("Tue, 01 Dec 2026 00:00:00 GMT"),
        );
        let (wire, keep) = written(response, KEEP).await;
        assert!(!keep);
        assert_eq!(wire.matches("connection: close\r\n").count(), 1, "{wire}");
        assert!(!wire.contains("x-hop"), "{wire}");
        assert_eq!(wire.matches("date: ").count(), 1, "{wire}");
        assert!(
            wire.contains("date: Tue, 01 Dec 2026 00:00:00 GMT\r\n"),
            "{wire}"
        );

        let (wire, keep) = written(Response::new(body::full("{}")), KEEP).await;
        assert!(keep);
        assert_eq!(wire.matches("date: ").count(), 1, "{wire}");
        assert!(!wire.contains("connection:"), "{wire}");
    }

    /// An upstream body that breaks after its first bytes (the error ready
    /// at once, as when the upstream closed mid-body): the head and those
    /// bytes still reach the client before the connection is dropped.
    #[tokio::test]
    async fn a_body_that_breaks_still_sends_what_it_had() {
        let frames = [
            Ok::<_, io::Error>(http_body::Frame::data(bytes::Bytes::from("partial"))),
            Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "upstream closed",
            )),
        ];
        let response = Response::new(body::stream(http_body_util::StreamBody::new(
            futures_util::stream::iter(frames),
        )));
        let mut wire = Vec::new();
        let mut out = Vec::new();
        let result = write(&mut wire, &mut out, response, KEEP).await;
        assert!(result.is_err(), "a broken body is an error");
        let wire = String::from_utf8_lossy(&wire);
        assert!(wire.starts_with("HTTP/1.1 200 OK\r\n"), "{wire}");
        assert!(wire.ends_with("\r\n7\r\npartial\r\n"), "{wire}");
    }

    /// An upstream's `Transfer-Encoding: gzip, chunked`: the client is
    /// told the gzip its body still carries, even when the body was read
    /// whole (its length known).
    #[tokio::test]
    async fn codings_besides_chunked_are_written_before_it() {
        let mut response = Response::new(body::full("GZ"));
        response
            .extensions_mut()
            .insert(TransferCodings(http::HeaderValue::from_static("gzip")));
        let (wire, keep) = written(response, KEEP).await;
        assert!(
            wire.contains("\r\ntransfer-encoding: gzip, chunked\r\n"),
            "{wire}"
        );
        assert!(!wire.contains("content-length"), "{wire}");
        assert!(wire.ends_with("\r\n\r\n2\r\nGZ\r\n0\r\n\r\n"), "{wire}");
        assert!(keep);
    }

    #[tokio::test]
    async fn head_and_bodiless_answers_carry_no_body() {
        let mut response = Response::new(body::empty());
        response
            .headers_mut()
            .insert("content-length", "42".parse().expect("valid"));
        let head = Facts { head: true, ..KEEP };
        let (wire, _) = written(response, head).await;
        assert!(wire.contains("content-length: 42\r\n"), "{wire}");
        assert!(wire.ends_with("\r\n\r\n"), "{wire}");
        let mut no_content = Response::new(body::empty());
        *no_content.status_mut() = StatusCode::NO_CONTENT;
        let (wire, _) = written(no_content, KEEP).await;
        assert!(!wire.contains("content-length"), "{wire}");
    }
}
