//! A `multipart/form-data` body's fingerprint is its parts' (names, file
//! names, media types, contents), whatever the boundary, preamble, transport
//! padding, epilogue or header spelling a client picks for one attempt; and
//! any change to a part's content is another request.

use idemgate::config::FingerprintPart;
use idemgate::key::{self, BodyRules, FingerprintBody, FingerprintInput};
use proptest::prelude::*;

use super::config;

#[derive(Debug, Clone)]
struct Part {
    name: String,
    filename: Option<String>,
    content_type: Option<&'static str>,
    content: Vec<u8>,
}

/// How one attempt writes the same parts.
#[derive(Debug, Clone)]
struct Framing {
    boundary: String,
    quoted: bool,
    preamble: String,
    padding: Vec<&'static str>,
    epilogue: String,
    upper: bool,
}

fn part() -> impl Strategy<Value = Part> {
    (
        "[a-z0-9_]{1,12}",
        prop::option::of("[a-z0-9_.-]{1,16}"),
        prop::option::of(prop::sample::select(vec![
            "text/csv",
            "TEXT/CSV",
            "application/octet-stream",
            "image/png",
            "text/plain; charset=utf-8",
        ])),
        prop::collection::vec(any::<u8>(), 0..200),
    )
        .prop_map(|(name, filename, content_type, content)| Part {
            name,
            filename,
            content_type,
            content,
        })
}

fn framing() -> impl Strategy<Value = Framing> {
    (
        // RFC 2046 bchars, long enough not to turn up in random contents.
        "[0-9A-Za-z'()+_,./:=?-]{24,70}",
        any::<bool>(),
        prop_oneof![Just(String::new()), "[a-zA-Z ]{1,30}\r\n"],
        prop::collection::vec(prop::sample::select(vec!["", " ", "\t", " \t "]), 8),
        prop_oneof![Just(String::new()), "[a-zA-Z \r\n]{1,30}"],
        any::<bool>(),
    )
        .prop_map(
            |(boundary, quoted, preamble, padding, epilogue, upper)| Framing {
                boundary,
                quoted,
                preamble,
                padding,
                epilogue,
                upper,
            },
        )
}

fn content_type(framing: &Framing) -> String {
    if framing.quoted {
        format!("multipart/form-data; boundary=\"{}\"", framing.boundary)
    } else {
        format!("multipart/form-data; boundary={}", framing.boundary)
    }
}

fn render(parts: &[Part], framing: &Framing) -> Vec<u8> {
    let (disposition, ctype) = if framing.upper {
        ("CONTENT-DISPOSITION", "CONTENT-TYPE")
    } else {
        ("Content-Disposition", "content-type")
    };
    let mut body = framing.preamble.clone().into_bytes();
    for (i, part) in parts.iter().enumerate() {
        let padding = framing.padding[i % framing.padding.len()];
        let mut head = format!(
            "--{}{padding}\r\n{disposition}: form-data; name=\"{}\"",
            framing.boundary, part.name
        );
        if let Some(filename) = &part.filename {
            head.push_str(&format!("; filename=\"{filename}\""));
        }
        head.push_str("\r\n");
        if let Some(media) = part.content_type {
            head.push_str(&format!("{ctype}: {media}\r\n"));
        }
        head.push_str("\r\n");
        body.extend_from_slice(head.as_bytes());
        body.extend_from_slice(&part.content);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{}--", framing.boundary).as_bytes());
    body.extend_from_slice(framing.epilogue.as_bytes());
    body
}

fn fingerprint(body: &[u8], content_type: &str) -> String {
    let no_headers = |_: &str| None;
    let input = FingerprintInput {
        method: "POST",
        path: "/v1/uploads",
        query: None,
        body,
        header: &no_headers,
    };
    let rules = BodyRules {
        content_type: Some(content_type.as_bytes()),
        fingerprint_body: &FingerprintBody::Whole,
        ..BodyRules::plain(true)
    };
    key::fingerprint_with(&[FingerprintPart::Body], &input, &rules)
}

/// Whether a content could end its part early under this boundary.
fn delimits(parts: &[Part], framing: &Framing) -> bool {
    let delimiter = format!("\r\n--{}", framing.boundary).into_bytes();
    parts.iter().any(|part| {
        let mut content = b"\r\n".to_vec();
        content.extend_from_slice(&part.content);
        content.extend_from_slice(b"\r\n");
        content
            .windows(delimiter.len())
            .any(|window| window == delimiter.as_slice())
    })
}

/// The fingerprint of the same parts read whole, as bytes: what a body that
/// did not parse as multipart would get.
fn as_bytes(body: &[u8]) -> String {
    fingerprint(body, "application/octet-stream")
}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn multipart_fingerprint_does_not_depend_on_the_framing(
        parts in prop::collection::vec(part(), 1..5),
        a in framing(),
        b in framing(),
    ) {
        prop_assume!(!delimits(&parts, &a) && !delimits(&parts, &b));
        let (first, second) = (render(&parts, &a), render(&parts, &b));
        let one = fingerprint(&first, &content_type(&a));
        prop_assert_ne!(&one, &as_bytes(&first), "not read as multipart: {:?}", a);
        prop_assert_eq!(one, fingerprint(&second, &content_type(&b)));
    }

    #[test]
    fn a_changed_part_is_another_request(
        parts in prop::collection::vec(part(), 1..5),
        framing in framing(),
        which in any::<prop::sample::Index>(),
        change in 0u8..4,
        byte in any::<u8>(),
    ) {
        let mut other = parts.clone();
        let part = &mut other[which.index(parts.len())];
        match change {
            0 => part.content.push(byte),
            1 => part.name.push('x'),
            2 => part.filename = Some(part.filename.take().unwrap_or_default() + "x"),
            _ => part.content_type = Some(match part.content_type {
                Some("image/png") => "image/gif",
                _ => "image/png",
            }),
        }
        prop_assume!(!delimits(&parts, &framing) && !delimits(&other, &framing));
        let ct = content_type(&framing);
        prop_assert_ne!(
            fingerprint(&render(&parts, &framing), &ct),
            fingerprint(&render(&other, &framing), &ct)
        );
    }

    #[test]
    fn multipart_reading_never_panics(
        body in prop::collection::vec(any::<u8>(), 0..400),
        boundary in "[0-9A-Za-z'()+_,./:=?-]{1,70}",
    ) {
        let _ = fingerprint(&body, &format!("multipart/form-data; boundary={boundary}"));
    }
}
