//! A request's fingerprint: the hash of the parts its route names (method,
//! path, query, headers, body), which tells a retry from another request
//! sent with the same key.

use std::borrow::Cow;

use sha2::{Digest, Sha256};

use super::body::BodyRules;
use super::scope::{update_len_prefixed, update_optional};

/// One part of a request that its fingerprint covers (a route's `fingerprint`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FingerprintPart {
    Method,
    Path,
    Query,
    Body,
    /// `header:NAME`
    Header(http::HeaderName),
}

/// As the file writes it, the name in lower case (`header:x-region`).
impl std::fmt::Display for FingerprintPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FingerprintPart::Method => f.write_str("method"),
            FingerprintPart::Path => f.write_str("path"),
            FingerprintPart::Query => f.write_str("query"),
            FingerprintPart::Body => f.write_str("body"),
            FingerprintPart::Header(name) => write!(f, "header:{name}"),
        }
    }
}

/// What a request offers to the fingerprint.
pub struct FingerprintInput<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub body: &'a [u8],
    /// Lower-case header name → its field value, for the `header:NAME` parts
    /// (owned when several lines had to be joined into one).
    pub header: &'a dyn Fn(&str) -> Option<Cow<'a, [u8]>>,
}

// One tag byte per field kind, so a value of one part can never be read as
// another's. The body has a tag per way of reading it (`super::body`), so a
// non-JSON body can never collide with some JSON body's canonical form.
const TAG_METHOD: u8 = b'M';
const TAG_PATH: u8 = b'P';
const TAG_QUERY: u8 = b'Q';
const TAG_HEADER: u8 = b'H';

/// Hex hash of the configured parts of a request. With `canonical_json`, a body
/// that parses as JSON is hashed by value (object keys sorted, insignificant
/// whitespace dropped, numbers by exact value); a body that does not parse, or
/// has no canonical form (a member name twice in one object, a number out of a
/// double's range), is hashed by bytes.
///
/// Full SHA-256 as 64 lower-case hex characters. Each part, in configured
/// order, is a tag byte then length-prefixed fields (u64 BE); optional values
/// (query, header) carry a presence byte, so absent differs from empty.
/// See [`super::canonical_json`] for what counts as the same JSON (e.g. `1` and
/// `1.0` are equal).
pub fn fingerprint(
    parts: &[FingerprintPart],
    input: &FingerprintInput<'_>,
    canonical_json: bool,
) -> String {
    fingerprint_with(parts, input, &BodyRules::plain(canonical_json))
}

/// [`fingerprint`] with the route's body rules (`fingerprint_body`,
/// `canonical_form`) and the request's `Content-Type`, which decides whether
/// a body is read as multipart or as a form (see [`super::body`]).
pub fn fingerprint_with(
    parts: &[FingerprintPart],
    input: &FingerprintInput<'_>,
    rules: &BodyRules<'_>,
) -> String {
    let mut h = Sha256::new();
    for part in parts {
        match part {
            FingerprintPart::Method => {
                h.update([TAG_METHOD]);
                update_len_prefixed(&mut h, input.method.as_bytes());
            }
            FingerprintPart::Path => {
                h.update([TAG_PATH]);
                update_len_prefixed(&mut h, input.path.as_bytes());
            }
            FingerprintPart::Query => {
                h.update([TAG_QUERY]);
                update_optional(&mut h, input.query.map(str::as_bytes));
            }
            FingerprintPart::Body => super::body::update(&mut h, input.body, rules),
            FingerprintPart::Header(name) => {
                h.update([TAG_HEADER]);
                update_len_prefixed(&mut h, name.as_str().as_bytes());
                update_optional(&mut h, (input.header)(name.as_str()).as_deref());
            }
        }
    }
    super::hex_lower(&h.finalize())
}

#[cfg(test)]
mod tests {
    use http::HeaderName;

    use super::*;

    fn no_headers<'a>(_: &str) -> Option<Cow<'a, [u8]>> {
        None
    }

    fn base<'a>() -> FingerprintInput<'a> {
        FingerprintInput {
            method: "POST",
            path: "/orders",
            query: Some("a=1"),
            body: br#"{"a":1,"b":2}"#,
            header: &no_headers,
        }
    }

    fn all_parts() -> Vec<FingerprintPart> {
        vec![
            FingerprintPart::Method,
            FingerprintPart::Path,
            FingerprintPart::Query,
            FingerprintPart::Body,
            FingerprintPart::Header(HeaderName::from_static("x-tenant")),
        ]
    }

    #[test]
    fn stable_and_hex() {
        let a = fingerprint(&all_parts(), &base(), false);
        assert_eq!(a.len(), 64);
        assert!(
            a.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_eq!(a, fingerprint(&all_parts(), &base(), false));
    }

    #[test]
    fn each_part_changes_the_hash() {
        let parts = all_parts();
        let h0 = fingerprint(&parts, &base(), false);
        let variants = [
            FingerprintInput {
                method: "PUT",
                ..base()
            },
            FingerprintInput {
                path: "/orders/1",
                ..base()
            },
            FingerprintInput {
                query: Some("a=2"),
                ..base()
            },
            FingerprintInput {
                body: b"{}",
                ..base()
            },
            FingerprintInput {
                header: &|n: &str| (n == "x-tenant").then_some(Cow::Borrowed(&b"t1"[..])),
                ..base()
            },
        ];
        for v in &variants {
            assert_ne!(fingerprint(&parts, v, false), h0);
            assert_ne!(
                fingerprint(&parts, v, true),
                fingerprint(&parts, &base(), true)
            );
        }
    }

    #[test]
    fn unconfigured_parts_do_not_matter() {
        let parts = [FingerprintPart::Body];
        let other = FingerprintInput {
            method: "PUT",
            path: "/x",
            query: None,
            ..base()
        };
        assert_eq!(
            fingerprint(&parts, &base(), false),
            fingerprint(&parts, &other, false)
        );
    }

    #[test]
    fn order_matters() {
        let ab = [FingerprintPart::Method, FingerprintPart::Path];
        let ba = [FingerprintPart::Path, FingerprintPart::Method];
        assert_ne!(
            fingerprint(&ab, &base(), false),
            fingerprint(&ba, &base(), false)
        );
    }

    #[test]
    fn query_none_differs_from_empty() {
        let parts = [FingerprintPart::Query];
        let none = FingerprintInput {
            query: None,
            ..base()
        };
        let empty = FingerprintInput {
            query: Some(""),
            ..base()
        };
        assert_ne!(
            fingerprint(&parts, &none, false),
            fingerprint(&parts, &empty, false)
        );
    }

    #[test]
    fn header_absent_differs_from_empty() {
        let parts = [FingerprintPart::Header(HeaderName::from_static("x-tenant"))];
        let empty = FingerprintInput {
            header: &|_: &str| Some(Cow::Borrowed(&b""[..])),
            ..base()
        };
        assert_ne!(
            fingerprint(&parts, &base(), false),
            fingerprint(&parts, &empty, false)
        );
        // The header name is part of the hash too.
        let other = [FingerprintPart::Header(HeaderName::from_static("x-other"))];
        assert_ne!(
            fingerprint(&parts, &base(), false),
            fingerprint(&other, &base(), false)
        );
    }

    #[test]
    fn adjacent_fields_are_unambiguous() {
        let parts = [FingerprintPart::Method, FingerprintPart::Path];
        let a = FingerprintInput {
            method: "PO",
            path: "ST/x",
            ..base()
        };
        let b = FingerprintInput {
            method: "POST",
            path: "/x",
            ..base()
        };
        assert_ne!(
            fingerprint(&parts, &a, false),
            fingerprint(&parts, &b, false)
        );
    }

    #[test]
    fn canonical_json_compares_by_value() {
        let parts = [FingerprintPart::Body];
        let a = FingerprintInput {
            body: br#"{"a":1,"b":2}"#,
            ..base()
        };
        let b = FingerprintInput {
            body: br#"{ "b": 2, "a": 1 }"#,
            ..base()
        };
        assert_eq!(fingerprint(&parts, &a, true), fingerprint(&parts, &b, true));
        assert_ne!(
            fingerprint(&parts, &a, false),
            fingerprint(&parts, &b, false)
        );

        let c = FingerprintInput {
            body: br#"{"a":1.0,"b":"\u0032"}"#,
            ..base()
        };
        let d = FingerprintInput {
            body: br#"{"a":1,"b":"2"}"#,
            ..base()
        };
        assert_eq!(fingerprint(&parts, &c, true), fingerprint(&parts, &d, true));
        let e = FingerprintInput {
            body: br#"{"a":1,"b":2}"#,
            ..base()
        };
        assert_ne!(fingerprint(&parts, &d, true), fingerprint(&parts, &e, true));
    }

    fn body_fingerprint(body: &str, canonical_json: bool) -> String {
        let input = FingerprintInput {
            body: body.as_bytes(),
            ..base()
        };
        fingerprint(&[FingerprintPart::Body], &input, canonical_json)
    }

    #[test]
    fn canonical_fingerprints_of_exact_numbers_are_unchanged() {
        // As earlier versions, which read numbers as doubles, computed them:
        // records they stored still match their retries.
        for (body, recorded) in [
            (
                r#"{"amount":12.34,"currency":"EUR","n":[1,2.5,1e300,-0]}"#,
                "79a0c796fcdc235405cd3b05b1506dde2dc2f5ce796ee6e248e260fadc66e150",
            ),
            (
                r#"{"a":{"b":[0.1,true,null,"x\u0041"]}}"#,
                "ac03451611424a801b11e3d8605f5eb89dcca01b180eccc0980e764dffe00c66",
            ),
            // Out of a double's range: refused by earlier versions too, so bytes.
            (
                "1e400",
                "724614af30ffa7f086c560d42c9d70b77f4ac9fc65358d44832c6aca63f3b7bb",
            ),
        ] {
            assert_eq!(body_fingerprint(body, true), recorded, "{body}");
        }
        assert_eq!(
            body_fingerprint(
                r#"{"n":[1.0,2.50,10e299,-0],"currency":"EUR","amount":1234e-2}"#,
                true
            ),
            "79a0c796fcdc235405cd3b05b1506dde2dc2f5ce796ee6e248e260fadc66e150"
        );
    }

    #[test]
    fn canonical_json_numbers_by_exact_value() {
        let fp = |body: &str| body_fingerprint(body, true);
        assert_ne!(
            fp(r#"{"a":12345678901234567890123}"#),
            fp(r#"{"a":12345678901234567890124}"#)
        );
        assert_ne!(fp(r#"{"a":0.1000000000000000001}"#), fp(r#"{"a":0.1}"#));
        // Earlier versions gave both this (the first rounded to the second).
        assert_ne!(
            fp(r#"{"id":12345678901234567890123}"#),
            "a695360109501d05c24693e62b7fe5f0f627d8fe914f798b9f17ecf696139036"
        );
        assert_eq!(
            fp(r#"{"id":1.2345678901234568e22}"#),
            "a695360109501d05c24693e62b7fe5f0f627d8fe914f798b9f17ecf696139036"
        );
        for same in [
            r#"{"a":1}"#,
            r#"{"a":1.0}"#,
            r#"{"a":1e0}"#,
            r#"{"a":10e-1}"#,
        ] {
            assert_eq!(fp(same), fp(r#"{"a":1}"#), "{same}");
        }
        assert_eq!(fp(r#"[-0]"#), fp(r#"[0]"#));
        assert_eq!(
            fp(r#"{"a":12345678901234567890123}"#),
            fp(r#"{"a":1.2345678901234567890123e22}"#)
        );
    }

    #[test]
    fn canonical_json_duplicate_names_hash_by_bytes() {
        for body in [r#"{"a":1,"a":2}"#, r#"{"x":[{"a":2,"\u0061":2}]}"#] {
            assert_eq!(
                body_fingerprint(body, true),
                body_fingerprint(body, false),
                "{body}"
            );
        }
        // Earlier versions gave the first the second's (the last member won).
        assert_ne!(
            body_fingerprint(r#"{"a":1,"a":2}"#, true),
            body_fingerprint(r#"{"a":2}"#, true)
        );
        assert_ne!(
            body_fingerprint(r#"{"a":1,"a":2}"#, true),
            "217afc67f98b618ba4c4c294d334d506dfe9a4b095134ae060eab7c4ce89a861"
        );
        assert_ne!(
            body_fingerprint(r#"{"x":[{"a":2,"\u0061":2}]}"#, true),
            body_fingerprint(r#"{"x":[{"a":2}]}"#, true)
        );
    }

    #[test]
    fn canonical_json_with_non_json_body() {
        let parts = [FingerprintPart::Body];
        let a = FingerprintInput {
            body: b"not json",
            ..base()
        };
        let b = FingerprintInput {
            body: b"not json!",
            ..base()
        };
        let ha = fingerprint(&parts, &a, true);
        assert_eq!(ha, fingerprint(&parts, &a, true));
        assert_ne!(ha, fingerprint(&parts, &b, true));
        // Raw bytes hash the same whichever the mode, when the body is not JSON.
        assert_eq!(ha, fingerprint(&parts, &a, false));
        // Empty body is not JSON either.
        let empty = FingerprintInput {
            body: b"",
            ..base()
        };
        assert_eq!(
            fingerprint(&parts, &empty, true),
            fingerprint(&parts, &empty, false)
        );
    }

    #[test]
    fn canonical_and_raw_tags_do_not_collide() {
        // A JSON body already in canonical form hashes differently in the two
        // modes (different tags), so raw bytes can never pose as canonical JSON.
        let parts = [FingerprintPart::Body];
        let a = FingerprintInput {
            body: br#"{"a":1}"#,
            ..base()
        };
        assert_ne!(
            fingerprint(&parts, &a, true),
            fingerprint(&parts, &a, false)
        );
    }

    #[test]
    fn deep_json_body_is_hashed_as_bytes() {
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let parts = [FingerprintPart::Body];
        let a = FingerprintInput {
            body: deep.as_bytes(),
            ..base()
        };
        assert_eq!(
            fingerprint(&parts, &a, true),
            fingerprint(&parts, &a, false)
        );
    }

    #[test]
    fn no_parts_is_hash_of_nothing() {
        assert_eq!(
            fingerprint(&[], &base(), true),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
