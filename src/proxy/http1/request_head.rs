//! A request as HTTP/1.1 puts it on the wire: the head, and how the body is
//! framed after it.

use http::header;
use http::request::Parts;
use http::{HeaderMap, Method};
use http_body::Body as _;

use crate::body::Body;
use crate::wire::framing::BodyKind;

/// The framing of `body`: its length when known, chunked otherwise (never
/// `UntilClose`: a request cannot end at the close). An empty
/// body is said to be empty (`Content-Length: 0`) where a body is expected
/// or the client declared one.
pub fn body_framing(method: &Method, headers: &HeaderMap, body: &Body) -> BodyKind {
    if body.is_end_stream() {
        let expected = matches!(*method, Method::POST | Method::PUT | Method::PATCH);
        return if expected || headers.contains_key(header::CONTENT_LENGTH) {
            BodyKind::Length(0)
        } else {
            BodyKind::None
        };
    }
    match body.size_hint().exact() {
        Some(length) => BodyKind::Length(length),
        None => BodyKind::Chunked,
    }
}

/// Writes the request line and header fields; the framing fields are the
/// gateway's own, whatever the map says.
pub fn encode(parts: &Parts, framing: BodyKind, out: &mut Vec<u8>) {
    let target = parts
        .uri
        .path_and_query()
        .map_or("/", |target| target.as_str());
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in &parts.headers {
        if name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    match framing {
        // `body_framing` never says `UntilClose`.
        BodyKind::None | BodyKind::UntilClose => {}
        BodyKind::Length(length) => {
            out.extend_from_slice(b"content-length: ");
            crate::wire::push_decimal(out, length);
            out.extend_from_slice(b"\r\n");
        }
        BodyKind::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body;

    fn parts(method: &str, uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut builder = http::Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).expect("valid request").into_parts().0
    }

    #[test]
    fn writes_the_origin_form_and_the_gateways_own_framing() {
        let head = parts(
            "POST",
            "/v1/charges?x=1",
            &[("host", "up"), ("content-length", "99"), ("x-a", "1")],
        );
        let mut out = Vec::new();
        encode(&head, BodyKind::Length(2), &mut out);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "POST /v1/charges?x=1 HTTP/1.1\r\nhost: up\r\nx-a: 1\r\ncontent-length: 2\r\n\r\n"
        );
    }

    #[test]
    fn framing_follows_the_body_and_the_method() {
        let none = HeaderMap::new();
        assert_eq!(
            body_framing(&Method::GET, &none, &body::empty()),
            BodyKind::None
        );
        assert_eq!(
            body_framing(&Method::POST, &none, &body::empty()),
            BodyKind::Length(0)
        );
        assert_eq!(
            body_framing(&Method::PUT, &none, &body::full("abc")),
            BodyKind::Length(3)
        );
        let streamed = body::stream(http_body_util::StreamBody::new(futures_util::stream::iter(
            [Ok::<_, std::io::Error>(http_body::Frame::data(
                bytes::Bytes::from("a"),
            ))],
        )));
        assert_eq!(
            body_framing(&Method::POST, &none, &streamed),
            BodyKind::Chunked
        );
        let mut declared = HeaderMap::new();
        declared.insert(header::CONTENT_LENGTH, http::HeaderValue::from_static("0"));
        assert_eq!(
            body_framing(&Method::DELETE, &declared, &body::empty()),
            BodyKind::Length(0)
        );
    }
}
