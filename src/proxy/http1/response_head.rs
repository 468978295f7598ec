//! An upstream's answer head, parsed from the connection's read buffer, and
//! how its body is framed (RFC 9112 §6.3).

use std::mem::MaybeUninit;
use std::time::Duration;

use bytes::BytesMut;
use http::header::{self, HeaderName, HeaderValue};
use http::response::Parts;
use http::{HeaderMap, Method, Response, StatusCode, Version};

use crate::proxy::hop_by_hop::is_connection_scoped;
use crate::wire::fields::{self, TransferCodings};
use crate::wire::framing::{self, BodyKind, ContentLength, Lists, TransferEncoding};
use crate::wire::names::FieldNames;

/// Most header fields an answer may carry, and its largest head: hyper's
/// client defaults, so that an answer hyper's client reads is read here too.
const MAX_HEADERS: usize = 100;
pub const MAX_HEAD_BYTES: usize = 8192 + 4096 * 100;
/// Interim (1xx) answers read before a final one: an upstream that sends
/// more is flooding, not answering (a real one sends one or two).
pub const MAX_INTERIM: usize = 32;

#[derive(Debug)]
pub struct AnswerHead {
    pub parts: Parts,
    /// `Length` (zero for no body at all), `Chunked` or `UntilClose`.
    pub framing: BodyKind,
    /// The upstream lets the connection carry another request after this one.
    pub keep_alive: bool,
    /// How long the upstream keeps the connection open while idle, as its
    /// `Keep-Alive: timeout=N` says (RFC 2068 §19.7.1.1).
    pub idle_timeout: Option<Duration>,
}

#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    #[error("invalid answer head: {0}")]
    Syntax(httparse::Error),
    #[error("invalid answer header: {0}")]
    Header(&'static str),
    #[error("answer head larger than {MAX_HEAD_BYTES} bytes")]
    TooLarge,
    #[error("the upstream switched protocols, which the gateway does not relay")]
    SwitchingProtocols,
    #[error("more than {MAX_INTERIM} interim answers")]
    InterimFlood,
}

/// Takes a complete final answer head off the front of `buf`, skipping
/// interim (1xx) answers; `None` while more bytes are needed.
/// `interim` counts the interim answers read for this request so far.
pub fn parse(
    buf: &mut BytesMut,
    method: &Method,
    names: &mut FieldNames,
    interim: &mut usize,
) -> Result<Option<AnswerHead>, HeadError> {
    loop {
        let Some(head) = parse_one(buf, method, names)? else {
            if buf.len() > MAX_HEAD_BYTES {
                return Err(HeadError::TooLarge);
            }
            return Ok(None);
        };
        match head.parts.status.as_u16() {
            101 => return Err(HeadError::SwitchingProtocols),
            100..=199 => {
                *interim += 1;
                if *interim > MAX_INTERIM {
                    return Err(HeadError::InterimFlood);
                }
            }
            _ => return Ok(Some(head)),
        }
    }
}

/// Takes complete interim answers (`100 Continue`, `103 Early Hints`) off
/// the front of `buf`, which an upstream may send while it still reads the
/// request; whether what is left can be the start of the final answer (or
/// of a malformed one). A 1xx head not yet complete is not: it is waited for.
/// Past [`MAX_INTERIM`] of them (`seen` counts), the rest is left for
/// [`parse`] to refuse.
pub fn final_answer_started(buf: &mut BytesMut, seen: &mut usize) -> bool {
    loop {
        if buf.is_empty() {
            return false;
        }
        as_http_11(buf);
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Response::new(&mut headers);
        let status = parsed.parse(buf);
        let interim =
            matches!(parsed.code, Some(code) if (100..200).contains(&code) && code != 101);
        match status {
            // Left for `parse` to refuse.
            Ok(httparse::Status::Complete(length))
                if interim && (*seen >= MAX_INTERIM || length > MAX_HEAD_BYTES) =>
            {
                return true;
            }
            Ok(httparse::Status::Complete(length)) if interim => {
                *seen += 1;
                let _ = buf.split_to(length);
            }
            Ok(httparse::Status::Partial) if interim => return false,
            Ok(httparse::Status::Partial) if parsed.code.is_none() => {
                return !could_be_interim(buf);
            }
            _ => return true,
        }
    }
}

/// Whether `buf`, a status line not yet complete, can still turn out to be
/// that of an interim answer.
fn could_be_interim(buf: &[u8]) -> bool {
    const PREFIX: &[u8] = b"HTTP/1.x 1";
    buf.iter()
        .zip(PREFIX)
        .all(|(byte, expected)| *expected == b'x' || byte == expected)
}

/// Rewrites a status line's `HTTP/1.2` to `HTTP/1.9` as `HTTP/1.1`: RFC
/// 9110 §2.5 has a higher minor version read as the highest the recipient
/// speaks, and httparse knows 1.0 and 1.1 only (the request side does the
/// same, `server::http1::request_head`). Another major version stays
/// unread. A line cut after the digit is rewritten too: what follows
/// (`HTTP/1.23`) is still refused.
fn as_http_11(buf: &mut [u8]) {
    if let [
        b'H',
        b'T',
        b'T',
        b'P',
        b'/',
        b'1',
        b'.',
        minor @ b'2'..=b'9',
        rest @ ..,
    ] = buf
        && matches!(rest.first(), None | Some(b' '))
    {
        *minor = b'1';
    }
}

fn parse_one(
    buf: &mut BytesMut,
    method: &Method,
    names: &mut FieldNames,
) -> Result<Option<AnswerHead>, HeadError> {
    as_http_11(buf);
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut []);
    let length = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut parsed,
        buf,
        &mut slots,
    ) {
        // Whole or not: a head that came in one read is held to the same
        // limit as one that came piece by piece.
        Ok(httparse::Status::Complete(length)) if length > MAX_HEAD_BYTES => {
            return Err(HeadError::TooLarge);
        }
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(err) => return Err(HeadError::Syntax(err)),
    };
    let status = parsed
        .code
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or(HeadError::Header("status code"))?;
    let version = if parsed.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    // Names are parsed once per connection while they repeat (`FieldNames`);
    // values are noted by position and then
    // shared with the frozen head rather than copied one by one. Fields that
    // describe this connection are read here and not passed on: the caller
    // never sees the connection (and would only strip them again).
    let base = buf.as_ptr() as usize;
    let mut connection = ConnectionFields::default();
    let mut lengths = LengthFields::default();
    // A look-alike framing name: whoever sent it may frame by it.
    let mut suspect = false;
    let mut fields: Vec<fields::FieldAt> = Vec::with_capacity(parsed.headers.len());
    for (at, field) in parsed.headers.iter().enumerate() {
        let name = names
            .name(at, field.name.as_bytes())
            .map_err(|_| HeadError::Header("field name"))?;
        if is_connection_scoped(&name) {
            connection.note(&name, field.value)?;
            continue;
        }
        // `Transfer_Encoding` and the like: a client in front of the
        // gateway that folds `_` into `-` would read a second framing.
        if framing::framing_look_alike(&name) {
            suspect = true;
            continue;
        }
        if name == header::CONTENT_LENGTH {
            lengths.note(field.value);
        }
        let start = field.value.as_ptr() as usize - base;
        fields.push((name, start, start + field.value.len()));
    }
    let head = buf.split_to(length).freeze();
    let mut headers =
        fields::shared_map(&head, fields, 0).map_err(|_| HeadError::Header("field value"))?;
    // Framed before the fields `Connection` names are dropped: naming
    // `Content-Length` there does not make the body run to the close.
    let framing = framing(
        method,
        status,
        &headers,
        connection.transfer_encoding(),
        lengths.plain,
    )?;
    for listed in &connection.listed {
        headers.remove(listed.as_str());
    }
    let transfer_encoding = connection.transfer_encoding.present;
    settle_length(
        &mut headers,
        status,
        connection.transfer_encoding().is_some(),
        &lengths,
    );
    // An HTTP/1.0 answer with `Transfer-Encoding` is faultily framed: the
    // connection closes after it (RFC 9112 §6.1), whatever it says.
    let keep_alive = connection.keeps_alive(version)
        && framing != BodyKind::UntilClose
        && !(version == Version::HTTP_10 && transfer_encoding)
        // Both framings (RFC 9112 §6.3 item 3 reads it as chunked but calls
        // it a likely smuggling attempt), or a look-alike: the upstream's
        // idea of where this answer ends may not be ours.
        && !(transfer_encoding && lengths.count > 0)
        && !suspect
        && !framed_without_body(status, transfer_encoding, &lengths);
    let mut response = Response::new(());
    *response.status_mut() = status;
    *response.version_mut() = version;
    *response.headers_mut() = headers;
    // A body (none to HEAD, 204, 304) still coded: the client must be told.
    if let Some(codings) = connection.codings()
        && framing != BodyKind::Length(0)
    {
        let codings =
            HeaderValue::try_from(codings).map_err(|_| HeadError::Header("Transfer-Encoding"))?;
        response.extensions_mut().insert(TransferCodings(codings));
    }
    let (parts, ()) = response.into_parts();
    Ok(Some(AnswerHead {
        parts,
        framing,
        keep_alive,
        idle_timeout: connection.idle_timeout.map(Duration::from_secs),
    }))
}

/// A 204 framed as if it had a body (a length other than 0, or chunked), or
/// a chunked 304 (its length is the GET's, and allowed): whether the
/// upstream sends those bytes is its guess, and they would be read as the
/// next answer. The connection is not reused after it.
fn framed_without_body(status: StatusCode, chunked: bool, lengths: &LengthFields) -> bool {
    match status {
        StatusCode::NO_CONTENT => chunked || (lengths.count > 0 && lengths.plain != Some(0)),
        StatusCode::NOT_MODIFIED => chunked,
        _ => false,
    }
}

fn framing(
    method: &Method,
    status: StatusCode,
    headers: &HeaderMap,
    transfer_encoding: Option<bool>,
    plain_length: Option<u64>,
) -> Result<BodyKind, HeadError> {
    if *method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok(BodyKind::Length(0));
    }
    // Chunked only when it is the final coding; otherwise the body runs to
    // the close. A Content-Length beside it is ignored (RFC 9112 §6.3 item 3).
    match transfer_encoding {
        Some(true) => return Ok(BodyKind::Chunked),
        Some(false) => return Ok(BodyKind::UntilClose),
        None => {}
    }
    if let Some(length) = plain_length {
        return Ok(BodyKind::Length(length));
    }
    Ok(declared_length(headers)?.map_or(BodyKind::UntilClose, BodyKind::Length))
}

/// The one length the `Content-Length` fields declare: `5, 5` and repeated
/// fields are one length (RFC 9110 §8.6 lets a recipient read them so, and
/// upstreams send them); differing or non-digit ones are an error.
fn declared_length(headers: &HeaderMap) -> Result<Option<u64>, HeadError> {
    let mut length = ContentLength::default();
    for value in headers.get_all(header::CONTENT_LENGTH) {
        length
            .note(value.as_bytes(), Lists::Allowed)
            .map_err(|_| HeadError::Header("Content-Length"))?;
    }
    Ok(length.get())
}

/// The `Content-Length` passed on is one the client reads as the body's:
/// none beside `Transfer-Encoding`, which overrides it and whose sender
/// must remove it before forwarding (RFC 9112 §6.3), nor on a 204 (RFC 9110
/// §8.6: a server must not send one); one number for `7, 7` or a repeated
/// field. An HTTP/2 client refuses any of those (PROTOCOL_ERROR), the
/// HTTP/1 writer aside, which frames bodies itself; a stored answer is
/// replayed to both.
fn settle_length(
    headers: &mut HeaderMap,
    status: StatusCode,
    transfer_encoding: bool,
    lengths: &LengthFields,
) {
    if lengths.count == 0 {
        return;
    }
    if transfer_encoding || status == StatusCode::NO_CONTENT {
        headers.remove(header::CONTENT_LENGTH);
        return;
    }
    if lengths.plain.is_some() {
        return;
    }
    let mut values = headers.get_all(header::CONTENT_LENGTH).iter();
    let Some(first) = values.next() else {
        return;
    };
    let plain = !first.is_empty() && first.as_bytes().iter().all(u8::is_ascii_digit);
    if plain && values.next().is_none() {
        return;
    }
    // Only a HEAD, 204 or 304 answer gets here with lengths that differ
    // (the others were refused): they frame nothing, and are dropped.
    match declared_length(headers) {
        Ok(Some(length)) => {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
        }
        _ => {
            headers.remove(header::CONTENT_LENGTH);
        }
    }
}

/// The answer's `Content-Length` fields, seen while parsing, so that the
/// usual answer (one field, digits only, no `Transfer-Encoding`) is framed
/// and passed on without looking the field up again (docs/adr/0007-hot-path-costs.md).
#[derive(Default)]
struct LengthFields {
    count: usize,
    /// The length, when there is one field and it is nothing but digits.
    plain: Option<u64>,
}

impl LengthFields {
    fn note(&mut self, value: &[u8]) {
        self.count += 1;
        self.plain = if self.count == 1 {
            framing::decimal(value)
        } else {
            None
        };
    }
}

/// What the connection-scoped fields of an answer say.
#[derive(Default)]
struct ConnectionFields {
    transfer_encoding: TransferEncoding,
    close: bool,
    keep_alive: bool,
    /// Other names `Connection` lists: connection-scoped too (RFC 9110 §7.6.1).
    listed: Vec<String>,
    /// Seconds of `Keep-Alive: timeout=N`, the least when sent twice.
    idle_timeout: Option<u64>,
}

impl ConnectionFields {
    fn note(&mut self, name: &HeaderName, value: &[u8]) -> Result<(), HeadError> {
        if *name == header::TRANSFER_ENCODING {
            // Chunked is applied last and once (RFC 9112 §6.1): a coding
            // after it could not be relayed without chunking twice.
            // `identity` (RFC 2616's "no coding") is what old servers send
            // for none, and is not relayed.
            self.transfer_encoding
                .note(value)
                .map_err(|_| HeadError::Header("Transfer-Encoding"))?;
        } else if name.as_str() == "keep-alive" {
            // `timeout=5, max=100` (Apache, Node.js): a hint, so a value
            // that is not one is ignored rather than refused.
            let timeouts = std::str::from_utf8(value)
                .unwrap_or("")
                .split(',')
                .filter_map(|param| param.split_once('='))
                .filter(|(name, _)| name.trim().eq_ignore_ascii_case("timeout"))
                .filter_map(|(_, seconds)| framing::decimal(seconds.trim().as_bytes()));
            for seconds in timeouts {
                self.idle_timeout = Some(self.idle_timeout.map_or(seconds, |t| t.min(seconds)));
            }
        } else if *name == header::CONNECTION {
            let tokens = fields::connection_tokens(value).ok_or(HeadError::Header("Connection"))?;
            for token in tokens {
                if token.eq_ignore_ascii_case("close") {
                    self.close = true;
                } else if token.eq_ignore_ascii_case("keep-alive") {
                    self.keep_alive = true;
                } else {
                    self.listed.push(token.to_ascii_lowercase());
                }
            }
        }
        Ok(())
    }

    /// `Some(true)` when the body is chunked, `Some(false)` when it runs to
    /// the close, `None` without a transfer coding. A field that names none
    /// (empty, or only `identity`, RFC 2616's word for none, still sent by
    /// old servers beside a `Content-Length` that they frame by) counts as
    /// absent: read to the close, such an answer would hang until the
    /// upstream's timeout on a connection the upstream keeps open.
    fn transfer_encoding(&self) -> Option<bool> {
        let te = &self.transfer_encoding;
        (te.present && (te.chunked || !te.others.is_empty())).then_some(te.chunked)
    }

    /// The codings besides chunked, as the client is told them; `None` for
    /// the usual none.
    fn codings(&self) -> Option<String> {
        let others = &self.transfer_encoding.others;
        (!others.is_empty()).then(|| others.join(", "))
    }

    /// RFC 9112 §9.3: `close` wins in any version, `keep-alive` among others.
    fn keeps_alive(&self, version: Version) -> bool {
        !self.close && (version != Version::HTTP_10 || self.keep_alive)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str, method: Method) -> Result<Option<AnswerHead>, HeadError> {
        let mut buf = BytesMut::from(text.as_bytes());
        parse(&mut buf, &method, &mut FieldNames::default(), &mut 0)
    }

    fn head(text: &str) -> AnswerHead {
        parse_str(text, Method::POST)
            .expect("valid head")
            .expect("complete head")
    }

    #[test]
    fn parses_status_headers_and_leaves_the_body_in_the_buffer() {
        let mut buf = BytesMut::from(
            &b"HTTP/1.1 201 Created\r\nLocation: /v1/charges/1\r\nContent-Length: 2\r\nX-A: 1\r\nX-A: 2\r\n\r\n{}"[..],
        );
        let head = parse(&mut buf, &Method::POST, &mut FieldNames::default(), &mut 0)
            .expect("valid")
            .expect("complete");
        assert_eq!(head.parts.status, 201);
        assert_eq!(head.parts.headers["location"], "/v1/charges/1");
        let repeated: Vec<_> = head.parts.headers.get_all("x-a").iter().collect();
        assert_eq!(repeated, ["1", "2"]);
        assert_eq!(head.framing, BodyKind::Length(2));
        assert!(head.keep_alive);
        assert_eq!(&buf[..], b"{}");
    }

    #[test]
    fn an_incomplete_head_asks_for_more() {
        assert!(
            parse_str("HTTP/1.1 200 OK\r\nContent-Len", Method::GET)
                .expect("valid so far")
                .is_none()
        );
    }

    #[test]
    fn interim_answers_are_skipped() {
        let head =
            head("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(head.parts.status, 200);
        assert!(matches!(
            parse_str("HTTP/1.1 101 Switching Protocols\r\n\r\n", Method::GET),
            Err(HeadError::SwitchingProtocols)
        ));
    }

    #[test]
    fn a_higher_minor_version_is_read_as_http_11() {
        let answer = head("HTTP/1.2 200 OK\r\nContent-Length: 2\r\n\r\nok");
        assert_eq!(answer.parts.status, 200);
        assert_eq!(answer.parts.version, Version::HTTP_11);
        assert!(answer.keep_alive);
        let after_interim =
            head("HTTP/1.9 100 Continue\r\n\r\nHTTP/1.9 201 Created\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(after_interim.parts.status, 201);
        let mut buf = BytesMut::from(&b"HTTP/1.2 100 Continue\r\n\r\n"[..]);
        assert!(!final_answer_started(&mut buf, &mut 0));
        assert!(buf.is_empty());
        let mut cut = BytesMut::from(&b"HTTP/1.2"[..]);
        assert!(!final_answer_started(&mut cut, &mut 0));
        cut.extend_from_slice(b" 200 OK\r\nContent-Length: 0\r\n\r\n");
        assert!(final_answer_started(&mut cut, &mut 0));
        let mut cut = BytesMut::from(&b"HTTP/1.2"[..]);
        assert!(parse(&mut cut, &Method::GET, &mut FieldNames::default(), &mut 0).is_ok());
        cut.extend_from_slice(b"3 200 OK\r\n\r\n");
        assert!(parse(&mut cut, &Method::GET, &mut FieldNames::default(), &mut 0).is_err());
        // Another major version (or none) is not HTTP/1.
        for other in [
            "HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n",
            "HTTP/0.9 200 OK\r\nContent-Length: 0\r\n\r\n",
            "HTTP/1.12 200 OK\r\nContent-Length: 0\r\n\r\n",
            "HTTP/1.a 200 OK\r\nContent-Length: 0\r\n\r\n",
        ] {
            assert!(parse_str(other, Method::GET).is_err(), "{other:?}");
        }
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let cases = [
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                BodyKind::Chunked,
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 3\r\n\r\n",
                BodyKind::Chunked,
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
                BodyKind::UntilClose,
            ),
            ("HTTP/1.1 200 OK\r\n\r\n", BodyKind::UntilClose),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\n\r\n",
                BodyKind::Length(7),
            ),
            (
                "HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n",
                BodyKind::Length(0),
            ),
            (
                "HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n",
                BodyKind::Length(0),
            ),
            // A field that names no coding frames nothing: the length does.
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\nContent-Length: 2\r\n\r\n",
                BodyKind::Length(2),
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\nContent-Length: 2\r\n\r\n",
                BodyKind::Length(2),
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\n",
                BodyKind::UntilClose,
            ),
        ];
        for (text, framing) in cases {
            assert_eq!(head(text).framing, framing, "{text:?}");
        }
        // Still two framing fields: the connection is not used again.
        let identity =
            head("HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\nContent-Length: 2\r\n\r\n");
        assert!(!identity.keep_alive);
        assert_eq!(identity.parts.headers["content-length"], "2");
        let to_head = parse_str("HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n", Method::HEAD)
            .expect("valid")
            .expect("complete");
        assert_eq!(to_head.framing, BodyKind::Length(0));
    }

    /// `Transfer-Encoding: chunked` beside `Content-Length: 3` does not
    /// pass the 3 on with an 11-byte body, nor a 204 its `Content-Length`:
    /// an HTTP/2 client resets such a stream (and a stored answer would
    /// keep the length for every replay).
    #[test]
    fn the_length_passed_on_is_the_one_the_body_has() {
        let length = |text: &str, method: Method| {
            let head = parse_str(text, method).expect("valid").expect("complete");
            let lengths: Vec<String> = head
                .parts
                .headers
                .get_all("content-length")
                .iter()
                .map(|v| v.to_str().expect("text").to_owned())
                .collect();
            lengths
        };
        for (text, method, expected) in [
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
                Method::GET,
                &[][..],
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: gzip\r\n\r\n",
                Method::GET,
                &[],
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\n\r\n",
                Method::GET,
                &["7"],
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nContent-Length: 7\r\n\r\n",
                Method::GET,
                &["7"],
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n",
                Method::GET,
                &["7"],
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n",
                Method::HEAD,
                &["7"],
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 7, 8\r\n\r\n",
                Method::HEAD,
                &[],
            ),
            (
                "HTTP/1.1 304 Not Modified\r\nContent-Length: 7, 7\r\n\r\n",
                Method::GET,
                &["7"],
            ),
            (
                "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
                Method::GET,
                &[],
            ),
        ] {
            assert_eq!(length(text, method.clone()), expected, "{method} {text:?}");
        }
    }

    /// `gzip, chunked` is read as chunked with the `gzip` kept for the
    /// client: dropped with the field, it would leave gzip bytes labelled
    /// as nothing.
    #[test]
    fn codings_besides_chunked_are_kept_for_the_client() {
        let codings = |text: &str, method: Method| {
            parse_str(text, method)
                .expect("valid")
                .expect("complete")
                .parts
                .extensions
                .get::<TransferCodings>()
                .map(|codings| codings.0.to_str().expect("text").to_owned())
        };
        for (text, expected) in [
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                Some("gzip"),
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: br,chunked\r\n\r\n",
                Some("gzip, br"),
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
                Some("gzip"),
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                None,
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: Identity\r\n\r\n",
                None,
            ),
            ("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", None),
            (
                "HTTP/1.1 204 No Content\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                None,
            ),
        ] {
            assert_eq!(codings(text, Method::GET).as_deref(), expected, "{text:?}");
        }
        assert_eq!(
            codings(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                Method::HEAD
            ),
            None
        );
        // Chunked applied before another coding, or twice, cannot be relayed.
        for text in [
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            assert!(parse_str(text, Method::GET).is_err(), "accepted {text:?}");
        }
    }

    #[test]
    fn conflicting_or_invalid_lengths_are_refused() {
        for text in [
            "HTTP/1.1 200 OK\r\nContent-Length: 7, 8\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nContent-Length: 8\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            "HTTP/1.1 2000 OK\r\n\r\n",
            "NOT HTTP\r\n\r\n",
        ] {
            assert!(parse_str(text, Method::GET).is_err(), "accepted {text:?}");
        }
    }

    #[test]
    fn connection_reuse_follows_version_and_connection_header() {
        assert!(
            !head("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").keep_alive
        );
        assert!(!head("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").keep_alive);
        assert!(
            head("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n")
                .keep_alive
        );
        assert!(
            !head("HTTP/1.1 200 OK\r\n\r\n").keep_alive,
            "a body to the close"
        );
        assert!(
            !head(
                "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            .keep_alive,
            "HTTP/1.0 has no transfer codings"
        );
        // RFC 9112 §9.3: `close` ends the connection whatever else is listed,
        // in HTTP/1.0 as in 1.1 (else the next request would meet the close).
        for connection in [
            "Connection: keep-alive, close\r\n",
            "Connection: keep-alive\r\nConnection: close\r\n",
        ] {
            let text = format!("HTTP/1.0 200 OK\r\n{connection}Content-Length: 0\r\n\r\n");
            assert!(!head(&text).keep_alive, "{connection:?}");
        }
    }

    #[test]
    fn connection_scoped_fields_are_read_and_not_passed_on() {
        let head = head(
            "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nProxy-Authenticate: x\r\nTransfer-Encoding: chunked\r\nX-End: 2\r\n\r\n",
        );
        let mut names: Vec<&str> = head.parts.headers.keys().map(|n| n.as_str()).collect();
        names.sort_unstable();
        // A proxy's challenge is end-to-end (RFC 9110 §11.7.1).
        assert_eq!(names, ["proxy-authenticate", "x-end"]);
        assert_eq!(head.framing, BodyKind::Chunked);
        assert!(head.keep_alive);
    }

    #[test]
    fn the_upstreams_keep_alive_timeout_is_read() {
        for (field, expected) in [
            ("Keep-Alive: timeout=5, max=100\r\n", Some(5)),
            ("Keep-Alive: max=100,Timeout = 2\r\n", Some(2)),
            (
                "Keep-Alive: timeout=9\r\nKeep-Alive: timeout=3\r\n",
                Some(3),
            ),
            ("Keep-Alive: timeout=soon\r\n", None),
            ("Keep-Alive: timeout=-1\r\n", None),
            ("", None),
        ] {
            let head = head(&format!(
                "HTTP/1.1 200 OK\r\n{field}Content-Length: 0\r\n\r\n"
            ));
            assert_eq!(
                head.idle_timeout,
                expected.map(Duration::from_secs),
                "{field:?}"
            );
            assert!(!head.parts.headers.contains_key("keep-alive"));
        }
    }

    #[test]
    fn framing_look_alikes_are_dropped_and_do_not_frame() {
        let head = head(
            "HTTP/1.1 200 OK\r\nTransfer_Encoding: chunked\r\nContent__Length: 0\r\ntransfer---encoding: chunked\r\nX_Api_Key: k\r\nContent-Length: 2\r\n\r\nok",
        );
        let names: Vec<&str> = head.parts.headers.keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["x_api_key", "content-length"]);
        assert_eq!(head.framing, BodyKind::Length(2));
        assert!(!head.keep_alive, "reused after a look-alike");
    }

    #[test]
    fn both_framings_frame_by_chunked_and_end_the_connection() {
        let both =
            head("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n");
        assert_eq!(both.framing, BodyKind::Chunked);
        assert!(!both.keep_alive);
        assert!(!both.parts.headers.contains_key(header::CONTENT_LENGTH));
    }

    #[test]
    fn an_interim_flood_is_refused() {
        let mut text = "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n".repeat(MAX_INTERIM);
        text.push_str("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(
            parse_str(&text, Method::GET)
                .expect("within")
                .expect("whole")
                .parts
                .status,
            200
        );
        let flood = "HTTP/1.1 100 Continue\r\n\r\n".repeat(MAX_INTERIM + 1);
        assert!(matches!(
            parse_str(&flood, Method::GET),
            Err(HeadError::InterimFlood)
        ));
        // Counted across reads, and across what the request's sending took off.
        let mut seen = 0;
        let mut buf = BytesMut::from(flood.as_bytes());
        assert!(final_answer_started(&mut buf, &mut seen));
        assert_eq!(seen, MAX_INTERIM);
        let mut names = FieldNames::default();
        assert!(matches!(
            parse(&mut buf, &Method::GET, &mut names, &mut seen),
            Err(HeadError::InterimFlood)
        ));
    }

    #[test]
    fn a_length_named_in_connection_still_frames_the_body() {
        let head =
            head("HTTP/1.1 200 OK\r\nConnection: Content-Length\r\nContent-Length: 2\r\n\r\nok");
        assert_eq!(head.framing, BodyKind::Length(2));
        assert!(head.keep_alive);
    }

    /// A head over the limit that arrived whole in one read was taken:
    /// the limit was checked only while the head was incomplete, so whether
    /// it held depended on how the bytes were split.
    #[test]
    fn a_head_over_the_limit_is_refused_however_it_arrives() {
        let big = format!(
            "HTTP/1.1 200 OK\r\nX-Big: {}\r\nContent-Length: 2\r\n\r\nok",
            "a".repeat(MAX_HEAD_BYTES)
        );
        assert!(matches!(
            parse_str(&big, Method::GET),
            Err(HeadError::TooLarge)
        ));
        let interim = format!(
            "HTTP/1.1 103 Early Hints\r\nLink: {}\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            "a".repeat(MAX_HEAD_BYTES)
        );
        assert!(matches!(
            parse_str(&interim, Method::GET),
            Err(HeadError::TooLarge)
        ));
        let mut buf = BytesMut::from(interim.as_bytes());
        assert!(final_answer_started(&mut buf, &mut 0), "skipped");
        assert_eq!(buf.len(), interim.len());
        // At the limit, it is read.
        let filler =
            MAX_HEAD_BYTES - "HTTP/1.1 200 OK\r\nX-Big: \r\nContent-Length: 2\r\n\r\n".len();
        let at = format!(
            "HTTP/1.1 200 OK\r\nX-Big: {}\r\nContent-Length: 2\r\n\r\nok",
            "a".repeat(filler)
        );
        assert_eq!(
            parse_str(&at, Method::GET)
                .expect("within")
                .expect("whole")
                .parts
                .status,
            200
        );
    }

    #[test]
    fn a_head_that_never_ends_is_bounded() {
        let mut text = String::from("HTTP/1.1 200 OK\r\n");
        while text.len() <= MAX_HEAD_BYTES {
            text.push_str("X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        assert!(parse_str(&text, Method::GET).is_err());
    }

    #[test]
    fn interim_answers_sent_mid_request_are_taken_off_and_finals_are_not() {
        let started = |text: &str| {
            let mut buf = BytesMut::from(text.as_bytes());
            (final_answer_started(&mut buf, &mut 0), buf)
        };
        for waiting in [
            "",
            "HTTP/1.1 100 Continue\r\n\r\n",
            "HTTP/1.1 1",
            "HTTP/1.1 100 Cont",
            "HT",
        ] {
            assert!(!started(waiting).0, "{waiting:?}");
        }
        let (begun, left) = started("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 413 Too Large\r\n");
        assert!(begun);
        assert_eq!(&left[..], b"HTTP/1.1 413 Too Large\r\n");
        for answer in [
            "HTTP/1.1 4",
            "HTTP/1.1 200 OK\r\n\r\n",
            "HTTP/1.1 101 Switching\r\n\r\n",
            "garbage",
        ] {
            assert!(started(answer).0, "{answer:?}");
        }
        // Left whole for the head parser, which skips it again: nothing lost.
        assert_eq!(started("HTTP/1.1 103 Early").1.len(), 18);
    }
}
