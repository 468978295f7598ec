//! Properties of the HTTP/1 framing core over generated heads and bodies:
//! a head read in any split is read as whole; what the gateway writes it
//! reads back the same; and where hyper's own HTTP/1 server and the
//! gateway's both accept a head, they frame its body the same. Where one
//! refuses what the other accepts, the head has one of the features that
//! docs/http1.md lists and justifies; any other disagreement fails.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use http_body::Body as _;
use proptest::prelude::*;

use crate::server::http1::request_head;
use crate::wire::framing::BodyKind;
use crate::wire::names::FieldNames;

/// A piece of a generated head, with what makes it special.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feature {
    Plain,
    /// `Transfer_Encoding`, `content__length`: a framing look-alike.
    LookAlike,
    /// Transfer-Encoding other than one `chunked`.
    OtherCoding,
    /// No Host, or two, in HTTP/1.1.
    HostCount,
    /// `*` with a method other than OPTIONS.
    Asterisk,
    /// A method longer than 32 bytes.
    LongMethod,
    /// `HTTP/1.2`.
    HigherMinor,
    /// Both Content-Length and Transfer-Encoding.
    BothFramings,
    /// Bytes outside ASCII in the target.
    NonAsciiTarget,
}

#[derive(Debug, Clone)]
struct Head {
    method: &'static str,
    target: &'static [u8],
    version: &'static str,
    fields: Vec<&'static str>,
}

const FIELDS: &[&str] = &[
    "Host: h",
    "Host: h",
    "Content-Length: 0",
    "Content-Length: 5",
    "Content-Length: 5",
    "Content-Length: 5, 5",
    "Content-Length: +5",
    "Content-Length: 05",
    "Content-Length: 5 ",
    "Transfer-Encoding: chunked",
    "Transfer-Encoding: Chunked",
    "Transfer-Encoding: gzip, chunked",
    "Transfer-Encoding: chunked, chunked",
    "Transfer-Encoding: chunked, gzip",
    "Transfer-Encoding: identity",
    "Transfer_Encoding: chunked",
    "Transfer---Encoding: chunked",
    "Content_Length: 5",
    "X_Api_Key: k",
    "X-A: 1",
    "Connection: close",
    "Connection: keep-alive",
    "Expect: 100-continue",
];

fn head_strategy() -> impl Strategy<Value = Head> {
    let long: &'static str = "MMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMM";
    (
        prop::sample::select(vec!["GET", "POST", "PUT", "OPTIONS", "DELETE", long]),
        prop::sample::select(vec![
            &b"/"[..],
            b"/a?b=c",
            b"*",
            b"http://h/x",
            b"/caf\xc3\xa9",
        ]),
        prop::sample::select(vec!["HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/1.2"]),
        prop::collection::vec(prop::sample::select(FIELDS.to_vec()), 0..6),
    )
        .prop_map(|(method, target, version, fields)| Head {
            method,
            target,
            version,
            fields,
        })
}

impl Head {
    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(self.method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.target);
        out.push(b' ');
        out.extend_from_slice(self.version.as_bytes());
        out.extend_from_slice(b"\r\n");
        for field in &self.fields {
            out.extend_from_slice(field.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out
    }

    fn features(&self) -> Vec<Feature> {
        let mut features = vec![Feature::Plain];
        let named = |prefix: &str| self.fields.iter().filter(|f| f.starts_with(prefix)).count();
        let te: Vec<&&str> = self
            .fields
            .iter()
            .filter(|f| f.starts_with("Transfer-Encoding"))
            .collect();
        if self
            .fields
            .iter()
            .any(|f| (f.contains('_') || f.contains("--")) && !f.starts_with("X_"))
        {
            features.push(Feature::LookAlike);
        }
        if te.len() > 1
            || te
                .iter()
                .any(|f| !f.eq_ignore_ascii_case("Transfer-Encoding: chunked"))
        {
            features.push(Feature::OtherCoding);
        }
        if self.version != "HTTP/1.0" && named("Host") != 1 || named("Host") > 1 {
            features.push(Feature::HostCount);
        }
        if self.target == b"*" && self.method != "OPTIONS" {
            features.push(Feature::Asterisk);
        }
        if self.method.len() > request_head::MAX_METHOD {
            features.push(Feature::LongMethod);
        }
        if self.version == "HTTP/1.2" {
            features.push(Feature::HigherMinor);
        }
        if !te.is_empty() && named("Content-Length") > 0 {
            features.push(Feature::BothFramings);
        }
        if !self.target.is_ascii() {
            features.push(Feature::NonAsciiTarget);
        }
        features
    }
}

/// The gateway's reading: the framing, or `None` when refused.
fn ours(bytes: &[u8]) -> Option<BodyKind> {
    let mut buf = BytesMut::from(bytes);
    match request_head::parse(&mut buf, 100, 64 * 1024, &mut FieldNames::default()) {
        Ok(Some(head)) => Some(head.framing),
        Ok(None) => panic!("a whole head read as incomplete: {bytes:?}"),
        Err(_) => None,
    }
}

/// hyper's HTTP/1 server's reading of the same head, served over an
/// in-memory pipe: the framing its request body has, or `None` when it
/// never handed the request on.
async fn hypers(bytes: &[u8]) -> Option<BodyKind> {
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let seen: Arc<Mutex<Option<BodyKind>>> = Arc::default();
    let record = seen.clone();
    let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
        let hint = request.body().size_hint();
        let kind = match hint.exact() {
            Some(length) => BodyKind::Length(length),
            None => BodyKind::Chunked,
        };
        *record.lock().unwrap() = Some(kind);
        async {
            Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Empty::<
                bytes::Bytes,
            >::new()))
        }
    });
    let serving = tokio::spawn(async move {
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(server), service)
            .await;
    });
    let _ = client.write_all(bytes).await;
    let _ = client.shutdown().await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), client.read_to_end(&mut answer)).await;
    serving.abort();
    *seen.lock().unwrap()
}

/// Features under which the gateway refuses what hyper accepts, and the
/// reverse (docs/http1.md, "Compared with hyper").
const WE_REFUSE: &[Feature] = &[
    Feature::LookAlike,
    Feature::OtherCoding,
    Feature::HostCount,
    Feature::Asterisk,
    Feature::LongMethod,
    Feature::BothFramings,
    Feature::NonAsciiTarget,
];
const HYPER_REFUSES: &[Feature] = &[Feature::HigherMinor];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A head that arrives in two pieces, at any byte, is read as the whole
    /// is (the field names remembered from the first try included), and
    /// the first piece alone never reads as a whole head.
    #[test]
    fn a_head_in_any_split_reads_as_whole(head in head_strategy(), at in any::<prop::sample::Index>()) {
        let bytes = head.bytes();
        let at = at.index(bytes.len());
        let whole = {
            let mut buf = BytesMut::from(&bytes[..]);
            request_head::parse(&mut buf, 100, 64 * 1024, &mut FieldNames::default())
                .map(|head| head.map(|h| (h.parts.method, h.parts.uri, h.parts.headers, h.framing)))
        };
        let mut names = FieldNames::default();
        let mut buf = BytesMut::from(&bytes[..at]);
        let first = request_head::parse(&mut buf, 100, 64 * 1024, &mut names);
        match first {
            Ok(None) => {
                buf.extend_from_slice(&bytes[at..]);
                let split = request_head::parse(&mut buf, 100, 64 * 1024, &mut names)
                    .map(|head| head.map(|h| (h.parts.method, h.parts.uri, h.parts.headers, h.framing)));
                prop_assert_eq!(split, whole);
            }
            // Refused early: only what is refused whole.
            Err(refusal) => prop_assert!(whole.is_err(), "{:?} on a prefix of an accepted head", refusal),
            Ok(Some(_)) => prop_assert!(false, "a prefix read as a whole head"),
        }
    }

    /// What the gateway writes to an upstream (request head, chunked body)
    /// its own readers read back the same.
    #[test]
    fn encode_then_parse_is_the_identity(
        method in prop::sample::select(vec!["GET", "POST", "PUT", "PATCH", "DELETE", "REPORT"]),
        path in "/[a-z0-9/._~%-]{0,20}(\\?[a-z0-9=&]{0,10})?",
        fields in prop::collection::vec(("x-[a-z0-9_]{1,10}", "[ -~]{0,20}"), 0..6),
        framing in prop_oneof![
            Just(BodyKind::None),
            any::<u32>().prop_map(|n| BodyKind::Length(u64::from(n))),
            Just(BodyKind::Chunked),
        ],
        chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..40), 0..6),
        step in 1usize..12,
    ) {
        let mut builder = http::Request::builder().method(method).uri(&path).header("host", "up");
        for (name, value) in &fields {
            builder = builder.header(name.as_str(), value.trim());
        }
        let (parts, ()) = builder.body(()).expect("valid request").into_parts();
        let mut out = Vec::new();
        crate::proxy::http1::request_head::encode(&parts, framing, &mut out);
        let mut buf = BytesMut::from(&out[..]);
        let read = request_head::parse(&mut buf, 100, 64 * 1024, &mut FieldNames::default())
            .expect("accepted")
            .expect("whole");
        prop_assert!(buf.is_empty());
        prop_assert_eq!(&read.parts.method, &parts.method);
        prop_assert_eq!(&read.parts.uri, &parts.uri);
        // The framing fields are the writer's own, and read as `framing`.
        let mut headers = read.parts.headers.clone();
        headers.remove(http::header::CONTENT_LENGTH);
        headers.remove(http::header::TRANSFER_ENCODING);
        prop_assert_eq!(&headers, &parts.headers);
        let expected = match framing {
            BodyKind::None => BodyKind::Length(0),
            other => other,
        };
        prop_assert_eq!(read.framing, expected);

        // A chunked body as the engines write it (hex size, CRLF, data,
        // CRLF; a zero chunk last), read in pieces of `step`.
        let mut body = Vec::new();
        for chunk in &chunks {
            crate::wire::push_hex(&mut body, chunk.len() as u64);
            body.extend_from_slice(b"\r\n");
            body.extend_from_slice(chunk);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(b"0\r\n\r\n");
        let decoded = super::chunked(&body, step).expect("valid").expect("ended");
        prop_assert_eq!(decoded.0, chunks.concat());
        prop_assert_eq!(decoded.1, body.len());
    }
}

/// The differential test: generated heads served to hyper's HTTP/1 server
/// and read by the gateway's parser.
#[test]
fn hyper_and_the_gateway_frame_alike_or_disagree_for_a_listed_reason() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(300));
    runner
        .run(&head_strategy(), |head| {
            let bytes = head.bytes();
            let features = head.features();
            let ours = ours(&bytes);
            let hypers = runtime.block_on(hypers(&bytes));
            match (ours, hypers) {
                (Some(a), Some(b)) => prop_assert_eq!(a, b, "{:?}", head),
                (None, Some(_)) => prop_assert!(
                    features.iter().any(|f| WE_REFUSE.contains(f)),
                    "refused by the gateway only, for no listed reason: {:?}",
                    head
                ),
                (Some(_), None) => prop_assert!(
                    features.iter().any(|f| HYPER_REFUSES.contains(f)),
                    "refused by hyper only, for no listed reason: {:?}",
                    head
                ),
                (None, None) => {}
            }
            Ok(())
        })
        .expect("hyper and the gateway agree");
}

/// Each class of disagreement, shown on one head: what the gateway and
/// hyper make of it (docs/http1.md, "Compared with hyper").
#[test]
fn each_listed_disagreement_on_one_head() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let chunked = Some(BodyKind::Chunked);
    let five = Some(BodyKind::Length(5));
    let none = Some(BodyKind::Length(0));
    let mut wrong = Vec::new();
    for (head, gateway, hyper) in [
        (&b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"[..], none, none),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", chunked, chunked),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n", five, five),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", five, five),
        // Refused by the gateway only.
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer_Encoding: chunked\r\n\r\n", None, five),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", None, chunked),
        (b"GET / HTTP/1.1\r\n\r\n", None, none),
        (b"GET * HTTP/1.1\r\nHost: h\r\n\r\n", None, none),
        (b"MMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMM / HTTP/1.1\r\nHost: h\r\n\r\n", None, none),
        (b"GET /caf\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n", None, none),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", None, chunked),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", None, chunked),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", None, none),
        // Refused by hyper only.
        (b"GET / HTTP/1.2\r\nHost: h\r\n\r\n", none, None),
        // Refused by both.
        (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", None, None),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\n\r\n", None, None),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +5\r\n\r\n", None, None),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", None, None),
    ] {
        let text = String::from_utf8_lossy(head);
        let seen = (ours(head), runtime.block_on(hypers(head)));
        if seen != (gateway, hyper) {
            wrong.push(format!("{text:?}: gateway, hyper {seen:?}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
