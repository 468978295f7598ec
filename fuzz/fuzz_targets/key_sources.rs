//! The key sources and the body readers on arbitrary requests: never a
//! panic; a key found by a header, a query or a form field is 1–255
//! printable ASCII and comes back the same sent again as an RFC 8941
//! string; a derived key is a UUID; multipart parts are read out of the
//! body itself; a fingerprint is 64 hex digits.
//!
//! Input: `Idempotency-Key` value, `Content-Type` value and query, one per
//! line, then the body.
#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue, header};
use idemgate::key::{
    BodyRules, Derive, DerivePart, FingerprintBody, FingerprintInput, FingerprintPart, KeySource,
    RequestView, fingerprint_with, from_header_value, multipart, validate_printable,
};
use libfuzzer_sys::fuzz_target;

const KEY: HeaderName = HeaderName::from_static("idempotency-key");

fuzz_target!(|data: &[u8]| {
    let mut lines = data.splitn(4, |&b| b == b'\n');
    let key_line = lines.next().unwrap_or_default();
    let content_type = lines.next().unwrap_or_default();
    let query = std::str::from_utf8(lines.next().unwrap_or_default()).ok();
    let body = lines.next().unwrap_or_default();

    let mut headers = HeaderMap::new();
    if let Ok(value) = HeaderValue::from_bytes(key_line) {
        headers.insert(KEY, value);
    }
    if let Ok(value) = HeaderValue::from_bytes(content_type) {
        headers.insert(header::CONTENT_TYPE, value);
    }
    let view = RequestView::new(&headers, query, Some(body));
    for source in [
        KeySource::Header(KEY),
        KeySource::Query("k".into()),
        KeySource::FormField("k".into()),
        KeySource::JsonPointer("/k".into()),
    ] {
        let Ok(found) = view.key(std::slice::from_ref(&source)) else {
            continue;
        };
        assert!(!found.derived);
        assert_eq!(validate_printable(&found.key), Ok(()), "{source:?}");
        // Sent again as an sf-string, by any of these sources: the same key.
        let mut quoted = String::from("\"");
        for c in found.key.chars() {
            if matches!(c, '"' | '\\') {
                quoted.push('\\');
            }
            quoted.push(c);
        }
        quoted.push('"');
        assert_eq!(
            from_header_value(quoted.as_bytes()).as_ref(),
            Ok(&found.key),
            "{source:?} {quoted:?}"
        );
        let encoded: String = quoted.bytes().map(|b| format!("%{b:02X}")).collect();
        let again = RequestView::new(&headers, Some(&format!("k={encoded}")), None)
            .key(&[KeySource::Query("k".into())]);
        assert_eq!(again.map(|found| found.key).as_ref(), Ok(&found.key));
    }
    let derive = KeySource::Derive(Derive {
        parts: ["form:k", "query:k", "header:idempotency-key", "/k"]
            .into_iter()
            .map(|part| DerivePart::parse(part).expect("a derive part"))
            .collect(),
        namespace: Default::default(),
    });
    if let Ok(found) = view.key(&[derive]) {
        assert!(found.derived);
        let dashes: Vec<usize> = found.key.match_indices('-').map(|(at, _)| at).collect();
        assert_eq!(
            (found.key.len(), dashes),
            (36, vec![8, 13, 18, 23]),
            "{}",
            found.key
        );
    }

    if let Some(boundary) = multipart::boundary(content_type)
        && let Some(parts) = multipart::parts(body, &boundary)
    {
        let within = body.as_ptr_range();
        for part in &parts {
            let range = part.content.as_ptr_range();
            assert!(within.start <= range.start && range.end <= within.end);
        }
    }
    let fingerprint = |json: bool, form: bool| {
        let none = |_: &str| None;
        let input = FingerprintInput {
            method: "POST",
            path: "/",
            query,
            body,
            header: &none,
        };
        let rules = BodyRules {
            canonical_json: json,
            fingerprint_body: &FingerprintBody::Whole,
            canonical_form: form,
            content_type: Some(content_type),
        };
        fingerprint_with(
            &[FingerprintPart::Body, FingerprintPart::Query],
            &input,
            &rules,
        )
    };
    let read = fingerprint(true, true);
    assert_eq!(read.len(), 64);
    assert!(read.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(fingerprint(true, true), read, "one body, two fingerprints");
    let _ = fingerprint(false, false);
});
