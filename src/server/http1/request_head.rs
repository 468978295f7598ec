//! A client's request head, parsed from the connection's read buffer, and
//! how its body is framed (RFC 9112 §6). What two parsers could read two
//! ways (request smuggling) is refused here, before anything is forwarded.

use std::mem::MaybeUninit;

use bytes::BytesMut;
use http::header::{self, HeaderName};
use http::request::Parts;
use http::{Method, Request, Uri, Version};

use super::control_chars;
use crate::wire::framing::{self, BodyKind, ContentLength, Lists, TransferEncoding};
use crate::wire::names::FieldNames;
use crate::wire::{fields, host};

/// Most header slots kept on the stack; a larger `max_headers` uses the heap.
const STACK_HEADERS: usize = 128;

/// The longest method read: the longest registered one (`UPDATEREDIRECTREF`)
/// is 17 bytes; a longer one is refused (400, [`Refusal::LongMethod`]), not
/// counted against the head's size limits.
pub const MAX_METHOD: usize = 32;

#[derive(Debug)]
pub struct RequestHead {
    pub parts: Parts,
    /// `Length` or `Chunked`: a request without a body is `Length(0)`.
    pub framing: BodyKind,
    /// The client lets the connection carry another request after this one.
    pub keep_alive: bool,
    /// `Expect: 100-continue`: the client waits for a go-ahead before its body.
    pub expect_continue: bool,
}

/// Why a head is refused; each closes the connection after its answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not HTTP/1 as RFC 9112 writes it (400).
    Malformed,
    /// More bytes than the buffer (431).
    TooLarge,
    /// More fields than the parser takes (`Settings::parsed_headers`:
    /// `max_headers` and a forwarding region's own fields) (431).
    TooManyHeaders,
    /// Both `Content-Length` and `Transfer-Encoding` (400).
    Ambiguous,
    /// A `Content-Length` that is not one decimal number (400).
    InvalidLength,
    /// No `Host` in HTTP/1.1, or more than one (400).
    Host,
    /// A `Host` that is not `uri-host [ ":" port ]` (400, RFC 9112 §3.2).
    InvalidHost,
    /// A transfer coding besides one final `chunked` (400): the gateway
    /// decodes no other, and forwards the body re-framed without the field.
    Coding,
    /// `Transfer-Encoding` in an HTTP/1.0 request (400, RFC 9112 §6.1).
    Http10Coding,
    /// A field value with control characters that the head could not be
    /// read without (400).
    ControlCharacters,
    /// A field name that folds to `Transfer-Encoding` or `Content-Length`
    /// for a peer that reads `_` as `-` (`Transfer_Encoding`) (400).
    FramingLookAlike,
    /// The asterisk-form target (`*`) with a method other than OPTIONS
    /// (400, RFC 9112 §3.2.4).
    Asterisk,
    /// A method longer than [`MAX_METHOD`] (400).
    LongMethod,
    /// A request target with bytes outside visible ASCII (400, RFC 3986).
    NonAsciiTarget,
    /// An HTTP version other than 1.x (400).
    Version,
}

/// Takes a complete request head off the front of `buf`; `None` while more
/// bytes are needed.
pub fn parse(
    buf: &mut BytesMut,
    max_headers: usize,
    max_head_bytes: usize,
    names: &mut FieldNames,
) -> Result<Option<RequestHead>, Refusal> {
    // Blank lines before a request line are allowed (RFC 9112 §2.2).
    let blank = buf
        .iter()
        .take_while(|b| matches!(b, b'\r' | b'\n'))
        .count();
    if blank > 0 {
        let _ = buf.split_to(blank);
    }
    let scanned = match scan_slots(buf, max_headers, names) {
        // RFC 9110 §2.5: a higher minor version is read as the highest the
        // server speaks. httparse knows 1.0 and 1.1 only, so the line says
        // 1.1 before it is read again (the gateway forwards 1.1 anyway).
        Err(Refusal::Version) if as_http_11(buf) => scan_slots(buf, max_headers, names),
        // Not known until the line is whole (`HTTP/1.2` arriving as `HTTP/1.` `2\r\n`).
        Err(Refusal::Version) if memchr::memchr(b'\n', buf).is_none() => Ok(None),
        scanned => scanned,
    }?;
    let Some(scanned) = scanned else {
        return if buf.len() > max_head_bytes {
            Err(Refusal::TooLarge)
        } else {
            Ok(None)
        };
    };
    // The same bound whether the head arrived in one read or in several.
    if scanned.length > max_head_bytes {
        return Err(Refusal::TooLarge);
    }
    // Values are shared with the frozen head rather than copied one by one.
    let head = buf.split_to(scanned.length).freeze();
    let uri = Uri::from_maybe_shared(head.slice(scanned.target.0..scanned.target.1))
        .map_err(|_| Refusal::Malformed)?;
    // Room for what forwarding adds (X-Forwarded-*, X-Request-Id, Host), so
    // the map is not grown and rehashed on the way to the upstream.
    let headers =
        fields::shared_map(&head, scanned.positions, 6).map_err(|_| Refusal::Malformed)?;
    let fields = scanned.fields;
    let version = scanned.version;
    let te = &fields.transfer_encoding;
    let framing = match (te.present, fields.length.get()) {
        (true, Some(_)) => return Err(Refusal::Ambiguous),
        // RFC 9112 §6.1: its framing is faulty, whatever it says.
        (true, None) if version == Version::HTTP_10 => return Err(Refusal::Http10Coding),
        (true, None) if te.chunked && !te.is_just_chunked() => return Err(Refusal::Coding),
        (true, None) if te.chunked => BodyKind::Chunked,
        // Chunked must be the final coding; anything else cannot be delimited.
        (true, None) => return Err(Refusal::Malformed),
        (false, length) => BodyKind::Length(length.unwrap_or(0)),
    };
    // RFC 9112 §3.2: an HTTP/1.1 request names its host exactly once (1.0
    // may leave it out). Two could be read two ways; none leaves the
    // upstream's `Host` and `X-Forwarded-Host` to guesswork.
    match fields.hosts {
        0 if version == Version::HTTP_11 => return Err(Refusal::Host),
        0 | 1 => {}
        _ => return Err(Refusal::Host),
    }
    // RFC 9112 §9.3: `close` wins in any version, `keep-alive` among others.
    let keep_alive = !fields.close && (version != Version::HTTP_10 || fields.keep_alive);
    let mut request = Request::new(());
    *request.method_mut() = scanned.method;
    *request.uri_mut() = uri;
    *request.version_mut() = version;
    *request.headers_mut() = headers;
    if !scanned.unreadable.is_empty() {
        request
            .extensions_mut()
            .insert(fields::UnreadableFields(scanned.unreadable));
    }
    let (parts, ()) = request.into_parts();
    Ok(Some(RequestHead {
        parts,
        framing,
        keep_alive,
        expect_continue: fields.expect_continue && version == Version::HTTP_11,
    }))
}

fn scan_slots(
    buf: &[u8],
    max_headers: usize,
    names: &mut FieldNames,
) -> Result<Option<Scanned>, Refusal> {
    if max_headers <= STACK_HEADERS {
        let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADERS];
        scan_or_skip_unreadable(buf, &mut slots[..max_headers], names)
    } else {
        let mut slots = vec![MaybeUninit::<httparse::Header<'_>>::uninit(); max_headers];
        scan_or_skip_unreadable(buf, &mut slots, names)
    }
}

/// Rewrites a complete request line's `HTTP/1.2` to `HTTP/1.9` as
/// `HTTP/1.1`; whether it did.
fn as_http_11(buf: &mut BytesMut) -> bool {
    let Some(end) = memchr::memchr(b'\n', buf) else {
        return false;
    };
    let line = buf[..end].strip_suffix(b"\r").unwrap_or(&buf[..end]);
    let Some(prefix) = line.len().checked_sub(b" HTTP/1.x".len()) else {
        return false;
    };
    let version = &line[prefix..];
    if !(version.starts_with(b" HTTP/1.") && matches!(version[8], b'2'..=b'9')) {
        return false;
    }
    buf[prefix + 8] = b'1';
    true
}

/// A complete head, located in the buffer: positions, not borrows, so the
/// buffer can be split once the parser is done with it.
struct Scanned {
    length: usize,
    method: Method,
    version: Version,
    target: (usize, usize),
    positions: Vec<fields::FieldAt>,
    fields: Framing,
    /// Fields left out for control characters in their values.
    unreadable: Vec<HeaderName>,
}

/// `scan`, and when a field value holds control characters, `scan` again
/// with those fields left out, their names noted (`control_chars`).
fn scan_or_skip_unreadable<'b>(
    bytes: &'b [u8],
    slots: &mut [MaybeUninit<httparse::Header<'b>>],
    names: &mut FieldNames,
) -> Result<Option<Scanned>, Refusal> {
    match scan(bytes, slots, &httparse::ParserConfig::default(), names) {
        Err(Refusal::ControlCharacters) => {}
        scanned => return scanned,
    }
    let lines = control_chars::read(bytes).ok_or(Refusal::Malformed)?;
    let mut lenient = httparse::ParserConfig::default();
    lenient.ignore_invalid_headers_in_requests(true);
    let Some(mut scanned) = scan(bytes, slots, &lenient, names)? else {
        return Ok(None);
    };
    // httparse must have left out exactly the lines read as unreadable.
    if lines.unreadable.is_empty()
        || scanned.positions.len() + lines.unreadable.len() != lines.fields
    {
        return Err(Refusal::Malformed);
    }
    scanned.unreadable = lines.unreadable;
    Ok(Some(scanned))
}

fn scan<'b>(
    bytes: &'b [u8],
    slots: &mut [MaybeUninit<httparse::Header<'b>>],
    config: &httparse::ParserConfig,
    names: &mut FieldNames,
) -> Result<Option<Scanned>, Refusal> {
    let mut parsed = httparse::Request::new(&mut []);
    let length = match config.parse_request_with_uninit_headers(&mut parsed, bytes, slots) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(Refusal::TooManyHeaders),
        Err(httparse::Error::HeaderValue) => return Err(Refusal::ControlCharacters),
        Err(httparse::Error::Version) => return Err(Refusal::Version),
        Err(_) => return Err(Refusal::Malformed),
    };
    let method = parsed.method.ok_or(Refusal::Malformed)?;
    if method.len() > MAX_METHOD {
        return Err(Refusal::LongMethod);
    }
    let method = Method::from_bytes(method.as_bytes()).map_err(|_| Refusal::Malformed)?;
    let version = match parsed.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    let base = bytes.as_ptr() as usize;
    let target = parsed.path.ok_or(Refusal::Malformed)?;
    // httparse lets obs-text through in a target; a URI has none (RFC
    // 3986), and the upstream would read it as it likes.
    if !target.is_ascii() {
        return Err(Refusal::NonAsciiTarget);
    }
    // RFC 9112 §3.2.4: the asterisk form is only for a server-wide OPTIONS.
    if target == "*" && method != Method::OPTIONS {
        return Err(Refusal::Asterisk);
    }
    let target_start = target.as_ptr() as usize - base;
    let mut fields = Framing::default();
    let mut positions = Vec::with_capacity(parsed.headers.len());
    for (at, field) in parsed.headers.iter().enumerate() {
        let name = names
            .name(at, field.name.as_bytes())
            .map_err(|_| Refusal::Malformed)?;
        fields.note(&name, field.value)?;
        let start = field.value.as_ptr() as usize - base;
        positions.push((name, start, start + field.value.len()));
    }
    Ok(Some(Scanned {
        length,
        method,
        version,
        target: (target_start, target_start + target.len()),
        positions,
        fields,
        unreadable: Vec::new(),
    }))
}

/// What the framing and connection fields of a head say.
#[derive(Default)]
struct Framing {
    transfer_encoding: TransferEncoding,
    length: ContentLength,
    close: bool,
    keep_alive: bool,
    expect_continue: bool,
    /// `Host` lines seen.
    hosts: usize,
}

impl Framing {
    fn note(&mut self, name: &HeaderName, value: &[u8]) -> Result<(), Refusal> {
        if *name == header::CONTENT_LENGTH {
            // Repeated fields of one number are one length; a list is refused.
            self.length
                .note(value, Lists::Refused)
                .map_err(|_| Refusal::InvalidLength)?;
        } else if *name == header::TRANSFER_ENCODING {
            self.transfer_encoding
                .note(value)
                .map_err(|err| match err {
                    framing::CodingError::ChunkedNotLast => Refusal::Coding,
                    framing::CodingError::Syntax => Refusal::Malformed,
                })?;
        } else if framing::framing_look_alike(name) {
            return Err(Refusal::FramingLookAlike);
        } else if *name == header::CONNECTION {
            for token in fields::connection_tokens(value).ok_or(Refusal::Malformed)? {
                if token.eq_ignore_ascii_case("close") {
                    self.close = true;
                } else if token.eq_ignore_ascii_case("keep-alive") {
                    self.keep_alive = true;
                }
            }
        } else if *name == header::HOST {
            if !host::is_valid(value.trim_ascii()) {
                return Err(Refusal::InvalidHost);
            }
            self.hosts += 1;
        } else if *name == header::EXPECT {
            self.expect_continue = value.eq_ignore_ascii_case(b"100-continue");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<Option<RequestHead>, Refusal> {
        let mut buf = BytesMut::from(text.as_bytes());
        parse(&mut buf, 100, 64 * 1024, &mut FieldNames::default())
    }

    fn head(text: &str) -> RequestHead {
        parse_str(text).expect("valid").expect("complete")
    }

    #[test]
    fn parses_the_request_and_leaves_the_body() {
        let mut buf = BytesMut::from(
            &b"\r\nPOST /v1/charges?x=1 HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\nX-A: 1\r\nX-A: 2\r\n\r\n{}"[..],
        );
        let head = parse(&mut buf, 100, 8192, &mut FieldNames::default())
            .expect("valid")
            .expect("complete");
        assert_eq!(head.parts.method, Method::POST);
        assert_eq!(head.parts.uri, "/v1/charges?x=1");
        assert_eq!(head.parts.headers["host"], "gw");
        assert_eq!(head.parts.headers.get_all("x-a").iter().count(), 2);
        assert_eq!(head.framing, BodyKind::Length(2));
        assert!(head.keep_alive);
        assert_eq!(&buf[..], b"{}");
    }

    #[test]
    fn framing_and_connection_follow_rfc_9112() {
        let chunked = head("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n\r\n");
        assert_eq!(chunked.framing, BodyKind::Chunked);
        assert_eq!(
            head("GET / HTTP/1.1\r\nHost: h\r\n\r\n").framing,
            BodyKind::Length(0)
        );
        assert!(!head("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n").keep_alive);
        assert!(!head("GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(head("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive);
        // RFC 9112 §9.3: `close` ends the connection whatever else is listed.
        assert!(!head("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n").keep_alive);
        assert!(
            !head("GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n")
                .keep_alive
        );
        assert!(
            head("POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n")
                .expect_continue
        );
        assert_eq!(
            head("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n")
                .framing,
            BodyKind::Length(5)
        );
    }

    #[test]
    fn smuggling_shapes_are_refused() {
        for (text, refusal) in [
            (
                "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
                Refusal::Ambiguous,
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
                Refusal::Coding,
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n",
                Refusal::Malformed,
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding : chunked\r\n\r\n",
                Refusal::Malformed,
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n",
                Refusal::InvalidLength,
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0, 5\r\n\r\n",
                Refusal::InvalidLength,
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +0\r\n\r\n",
                Refusal::InvalidLength,
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x0\r\n\r\n",
                Refusal::InvalidLength,
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nTransfer-Encoding:\r\n chunked\r\n\r\n",
                Refusal::Malformed,
            ),
            ("GARBAGE\r\n\r\n", Refusal::Malformed),
            // The gateway would forward the body without its coding.
            (
                "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                Refusal::Coding,
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
                Refusal::Coding,
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
                Refusal::Coding,
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
                Refusal::Coding,
            ),
            (
                "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
                Refusal::Http10Coding,
            ),
        ] {
            assert_eq!(parse_str(text).err(), Some(refusal), "{text:?}");
        }
    }

    #[test]
    fn framing_look_alikes_are_refused_and_other_underscores_pass() {
        for name in [
            "Transfer_Encoding",
            "transfer---encoding",
            "Transfer___Encoding",
            "Content_Length",
            "CONTENT__LENGTH",
        ] {
            let text = format!("POST / HTTP/1.1\r\nHost: h\r\n{name}: chunked\r\n\r\n");
            assert_eq!(
                parse_str(&text).err(),
                Some(Refusal::FramingLookAlike),
                "{name}"
            );
        }
        let passed = head("GET / HTTP/1.1\r\nHost: h\r\nX_Api_Key: 1\r\nContent_Type: a\r\n\r\n");
        assert_eq!(passed.parts.headers["x_api_key"], "1");
        assert_eq!(passed.parts.headers["content_type"], "a");
        for bad in ["X(Y)", "X Y", "X\"Y", "X/Y", "X@Y", "{X}"] {
            let text = format!("GET / HTTP/1.1\r\nHost: h\r\n{bad}: 1\r\n\r\n");
            assert_eq!(parse_str(&text).err(), Some(Refusal::Malformed), "{bad}");
        }
    }

    #[test]
    fn request_lines_rfc_9110_and_9112_decide() {
        // A higher minor version is read as 1.1, also when it comes in pieces.
        let mut buf = BytesMut::from(&b"GET / HTTP/1."[..]);
        let mut names = FieldNames::default();
        assert!(
            parse(&mut buf, 100, 8192, &mut names)
                .expect("so far")
                .is_none()
        );
        buf.extend_from_slice(b"2\r\nHost: h\r\n\r\n");
        let pieced = parse(&mut buf, 100, 8192, &mut names)
            .expect("valid")
            .expect("whole");
        assert_eq!(pieced.parts.version, Version::HTTP_11);
        assert!(pieced.keep_alive);
        assert_eq!(
            head("GET / HTTP/1.9\r\nHost: h\r\n\r\n").parts.version,
            Version::HTTP_11
        );
        for text in [
            "GET / HTTP/2.0\r\nHost: h\r\n\r\n",
            "GET / HTTP/1.x\r\nHost: h\r\n\r\n",
        ] {
            assert_eq!(parse_str(text).err(), Some(Refusal::Version), "{text:?}");
        }
        // Asterisk form: OPTIONS only.
        assert_eq!(head("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n").parts.uri, "*");
        for method in ["GET", "POST", "HEAD", "DELETE"] {
            let text = format!("{method} * HTTP/1.1\r\nHost: h\r\n\r\n");
            assert_eq!(parse_str(&text).err(), Some(Refusal::Asterisk), "{text:?}");
        }
        // Methods: registered ones pass, very long ones are refused as such.
        assert!(parse_str("UPDATEREDIRECTREF / HTTP/1.1\r\nHost: h\r\n\r\n").is_ok());
        let long = format!("{} / HTTP/1.1\r\nHost: h\r\n\r\n", "M".repeat(2000));
        assert_eq!(parse_str(&long).err(), Some(Refusal::LongMethod));
        // Raw bytes outside ASCII in the target.
        let mut raw = BytesMut::from(&b"GET /caf\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n"[..]);
        assert_eq!(
            parse(&mut raw, 100, 8192, &mut FieldNames::default()).err(),
            Some(Refusal::NonAsciiTarget)
        );
        assert_eq!(
            head("GET /caf%C3%A9 HTTP/1.1\r\nHost: h\r\n\r\n").parts.uri,
            "/caf%C3%A9"
        );
    }

    #[test]
    fn host_is_named_once_in_http_1_1() {
        assert_eq!(
            parse_str("GET / HTTP/1.1\r\n\r\n").err(),
            Some(Refusal::Host)
        );
        assert_eq!(
            parse_str("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n").err(),
            Some(Refusal::Host)
        );
        assert_eq!(
            parse_str("GET / HTTP/1.0\r\nHost: a\r\nhost: a\r\n\r\n").err(),
            Some(Refusal::Host)
        );
        assert!(head("GET / HTTP/1.0\r\n\r\n").parts.headers.is_empty());
    }

    /// `Host: a b`, `user@evil`, `x/y` and an empty `Host` are refused:
    /// forwarded as they are, the upstream could read them as another site
    /// than the one the gateway logged.
    #[test]
    fn an_invalid_host_is_refused() {
        for value in ["a b", "user@evil", "x/y", "", "a:b", "[::1"] {
            for version in ["1.1", "1.0"] {
                let text = format!("GET / HTTP/{version}\r\nHost: {value}\r\n\r\n");
                assert_eq!(
                    parse_str(&text).err(),
                    Some(Refusal::InvalidHost),
                    "{text:?}"
                );
            }
        }
        for value in ["gw", "gw:8080", "[::1]:8443", "127.0.0.1", "[v1.x]"] {
            let text = format!("GET / HTTP/1.1\r\nHost: {value} \r\n\r\n");
            assert_eq!(head(&text).parts.headers["host"], value, "{text:?}");
        }
    }

    #[test]
    fn limits_are_431() {
        let many: String = (0..101).map(|i| format!("X-{i}: 1\r\n")).collect();
        assert_eq!(
            parse_str(&format!("GET / HTTP/1.1\r\nHost: h\r\n{many}\r\n")).err(),
            Some(Refusal::TooManyHeaders)
        );
        let mut endless = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: h\r\nX-Long: "[..]);
        endless.extend_from_slice(&[b'a'; 9000]);
        assert_eq!(
            parse(&mut endless, 100, 8192, &mut FieldNames::default()).err(),
            Some(Refusal::TooLarge)
        );
        assert!(
            parse_str("GET / HTTP/1.1\r\nHost: g")
                .expect("valid so far")
                .is_none()
        );
        // A head over the buffer is refused even when it arrived whole in
        // one read, as it is when it arrives in pieces.
        let mut whole = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: h\r\nX-Long: "[..]);
        whole.extend_from_slice(&[b'a'; 9000]);
        whole.extend_from_slice(b"\r\n\r\n");
        assert_eq!(
            parse(&mut whole, 100, 8192, &mut FieldNames::default()).err(),
            Some(Refusal::TooLarge)
        );
    }
}
