//! How a request body enters its fingerprint: by its parts when it is
//! multipart, by JSON value through `fingerprint_body`, by its decoded
//! fields with `canonical_form`, by JSON value with `canonical_json`, else
//! by its bytes. A body that is not what an option expects is compared by
//! its bytes, never refused.

use sha2::{Digest, Sha256};

use super::canonical_json::{self, Filter};
use super::scope::{update_len_prefixed, update_optional};
use super::{form, multipart};

/// `fingerprint_body`: which members of a JSON body count.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum FingerprintBody {
    /// The whole body (the default).
    #[default]
    Whole,
    /// `{ exclude = [...] }`: the body without these members.
    Exclude(Pointers),
    /// `{ include = [...] }`: only these members.
    Include(Pointers),
}

/// Checked JSON pointers, as written and split into their tokens once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointers {
    written: Vec<String>,
    tokens: Vec<Vec<String>>,
}

impl Pointers {
    /// `pointers` are checked ([`super::pointer::check`]) by the config.
    pub fn new(pointers: Vec<String>) -> Self {
        let tokens = pointers.iter().map(|p| super::pointer::tokens(p)).collect();
        Self {
            written: pointers,
            tokens,
        }
    }

    pub fn as_written(&self) -> &[String] {
        &self.written
    }
}

/// The route's rules for bodies, and the request's `Content-Type`.
#[derive(Debug, Clone, Copy)]
pub struct BodyRules<'a> {
    pub canonical_json: bool,
    pub fingerprint_body: &'a FingerprintBody,
    pub canonical_form: bool,
    pub content_type: Option<&'a [u8]>,
}

impl BodyRules<'_> {
    /// Bytes, or canonical JSON: the fingerprint without the body options.
    pub fn plain(canonical_json: bool) -> BodyRules<'static> {
        BodyRules {
            canonical_json,
            fingerprint_body: &FingerprintBody::Whole,
            canonical_form: false,
            content_type: None,
        }
    }
}

// One tag per way of reading a body, so that no reading of one body can
// equal another reading of a different one.
const TAG_BODY_RAW: u8 = b'B';
const TAG_BODY_JSON: u8 = b'J';
const TAG_BODY_JSON_FILTERED: u8 = b'K';
const TAG_BODY_FORM: u8 = b'F';
const TAG_BODY_MULTIPART: u8 = b'U';

pub(super) fn update(h: &mut Sha256, body: &[u8], rules: &BodyRules<'_>) {
    if let Some(content_type) = rules.content_type {
        if let Some(boundary) = multipart::boundary(content_type)
            && let Some(parts) = multipart::parts(body, &boundary)
        {
            h.update([TAG_BODY_MULTIPART]);
            h.update((parts.len() as u64).to_be_bytes());
            for part in &parts {
                update_optional(h, part.name.as_deref());
                filename(h, part.filename.as_deref(), part.filename_ext.as_deref());
                update_len_prefixed(h, &part.content_type);
                update_len_prefixed(h, part.content);
            }
            return;
        }
        if rules.canonical_form && form::is_form_urlencoded(content_type) {
            let mut fields: Vec<_> = form::pairs(body).collect();
            // Stable: values of a repeated name keep their order.
            fields.sort_by(|a, b| a.0.cmp(&b.0));
            h.update([TAG_BODY_FORM]);
            h.update((fields.len() as u64).to_be_bytes());
            for (name, value) in &fields {
                update_len_prefixed(h, name);
                update_len_prefixed(h, value);
            }
            return;
        }
    }
    let filter = match rules.fingerprint_body {
        FingerprintBody::Whole => None,
        FingerprintBody::Exclude(pointers) => Some(Filter::Exclude(&pointers.tokens)),
        FingerprintBody::Include(pointers) => Some(Filter::Include(&pointers.tokens)),
    };
    if let Some(filter) = filter
        && let Some(canon) = canonical_json::canonical_filtered(body, filter)
    {
        h.update([TAG_BODY_JSON_FILTERED]);
        update_len_prefixed(h, &canon);
        return;
    }
    if rules.canonical_json
        && let Some(canon) = canonical_json::canonical(body)
    {
        h.update([TAG_BODY_JSON]);
        update_len_prefixed(h, &canon);
        return;
    }
    h.update([TAG_BODY_RAW]);
    update_len_prefixed(h, body);
}

/// A part's file name. Without `filename*`, as [`update_optional`] (so such parts
/// keep the fingerprints earlier versions stored); with it, a presence byte
/// of its own, then both.
fn filename(h: &mut Sha256, plain: Option<&[u8]>, extended: Option<&[u8]>) {
    match extended {
        None => update_optional(h, plain),
        Some(extended) => {
            h.update([2u8]);
            update_optional(h, plain);
            update_len_prefixed(h, extended);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use proptest::prelude::*;

    use super::*;
    use crate::key::FingerprintPart;
    use crate::key::{FingerprintInput, fingerprint_with};

    fn no_headers<'a>(_: &str) -> Option<Cow<'a, [u8]>> {
        None
    }

    fn hash(body: &[u8], rules: &BodyRules<'_>) -> String {
        let input = FingerprintInput {
            method: "POST",
            path: "/",
            query: None,
            body,
            header: &no_headers,
        };
        fingerprint_with(&[FingerprintPart::Body], &input, rules)
    }

    fn rules<'a>(body: &'a FingerprintBody, content_type: &'a str) -> BodyRules<'a> {
        BodyRules {
            canonical_json: false,
            fingerprint_body: body,
            canonical_form: true,
            content_type: Some(content_type.as_bytes()),
        }
    }

    fn exclude(pointers: &[&str]) -> FingerprintBody {
        FingerprintBody::Exclude(Pointers::new(
            pointers.iter().map(|p| (*p).to_owned()).collect(),
        ))
    }

    fn include(pointers: &[&str]) -> FingerprintBody {
        FingerprintBody::Include(Pointers::new(
            pointers.iter().map(|p| (*p).to_owned()).collect(),
        ))
    }

    const JSON: &str = "application/json";
    const FORM: &str = "application/x-www-form-urlencoded";

    #[test]
    fn excluded_members_do_not_count() {
        let body = exclude(&["/sent_at", "/meta/nonce"]);
        let r = rules(&body, JSON);
        let a = hash(
            br#"{"amount":1,"sent_at":"t1","meta":{"nonce":1,"k":2}}"#,
            &r,
        );
        let b = hash(
            br#"{"meta":{"k":2,"nonce":9},"sent_at":"t2","amount":1}"#,
            &r,
        );
        let c = hash(
            br#"{"amount":2,"sent_at":"t1","meta":{"nonce":1,"k":2}}"#,
            &r,
        );
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn excluded_elements_are_those_of_the_body_as_sent() {
        // Each index names an element of the body as sent, whatever the
        // order of the pointers or an element excluded before it.
        for pointers in [["/items/0", "/items/1"], ["/items/1", "/items/0"]] {
            let body = exclude(&pointers);
            let r = rules(&body, JSON);
            let sent = hash(br#"{"items":["a","b","c"]}"#, &r);
            assert_eq!(sent, hash(br#"{"items":["x","y","c"]}"#, &r));
            assert_ne!(sent, hash(br#"{"items":["a","b","d"]}"#, &r));
        }
        let twice = exclude(&["/items/1", "/items/1"]);
        let r = rules(&twice, JSON);
        assert_ne!(
            hash(br#"{"items":[1,2,3]}"#, &r),
            hash(br#"{"items":[1,2,4]}"#, &r)
        );
        // A pointer into an excluded value finds nothing more to exclude.
        let nested = exclude(&["/a", "/a/b"]);
        let r = rules(&nested, JSON);
        assert_eq!(hash(br#"{"a":{"b":1},"c":1}"#, &r), hash(br#"{"c":1}"#, &r));
    }

    #[test]
    fn only_included_members_count() {
        let body = include(&["/amount", "/currency"]);
        let r = rules(&body, JSON);
        let a = hash(br#"{"amount":1,"currency":"EUR","note":"x"}"#, &r);
        let b = hash(br#"{"currency":"EUR","amount":1.0,"note":"y"}"#, &r);
        let c = hash(br#"{"amount":1,"currency":"USD","note":"x"}"#, &r);
        let absent = hash(br#"{"amount":1}"#, &r);
        let null = hash(br#"{"amount":1,"currency":null}"#, &r);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(absent, null);
        // A twin of an included member, or of an object on its way, is no
        // absent member: the body is compared by its bytes.
        let no_amount = hash(br#"{"currency":"EUR"}"#, &r);
        let twice = br#"{"amount":1,"amount":2,"currency":"EUR"}"#;
        assert_ne!(hash(twice, &r), no_amount);
        assert_eq!(hash(twice, &r), hash(twice, &BodyRules::plain(false)));
        let nested = include(&["/a/b"]);
        let n = rules(&nested, JSON);
        assert_ne!(
            hash(br#"{"a":{"b":1},"a":{"c":2}}"#, &n),
            hash(br#"{"x":1}"#, &n)
        );
    }

    #[test]
    fn a_body_of_another_kind_is_compared_whole() {
        let body = exclude(&["/nonce"]);
        let r = rules(&body, JSON);
        assert_eq!(
            hash(b"not json", &r),
            hash(b"not json", &BodyRules::plain(false))
        );
        assert_ne!(hash(b"not json", &r), hash(b"not json!", &r));
        // A form body on a route without canonical_form: its bytes.
        let plain = FingerprintBody::Whole;
        let no_form = BodyRules {
            canonical_form: false,
            ..rules(&plain, FORM)
        };
        assert_ne!(hash(b"a=1&b=2", &no_form), hash(b"b=2&a=1", &no_form));
    }

    #[test]
    fn form_fields_by_name_stable_for_repeats() {
        let plain = FingerprintBody::Whole;
        let r = rules(&plain, FORM);
        assert_eq!(hash(b"a=1&b=2", &r), hash(b"b=2&a=1", &r));
        assert_eq!(hash(b"a=x+y&b=%41", &r), hash(b"b=A&a=x%20y", &r));
        assert_ne!(hash(b"a=1&a=2", &r), hash(b"a=2&a=1", &r));
        assert_ne!(hash(b"a=1&b=2", &r), hash(b"a=1&b=3", &r));
        // Not a form by its Content-Type: its bytes.
        let json = rules(&plain, JSON);
        assert_ne!(hash(b"a=1&b=2", &json), hash(b"b=2&a=1", &json));
    }

    // The bytes real clients send for one request (docs/keys-and-fingerprints.md,
    // "Client libraries"): they differ, and the canonical readings make them one.
    #[test]
    fn the_serialisations_of_common_clients() {
        let requests = br#"{"amount": 1000, "s": "caf\u00e9 \ud83d\ude00", "rate": 1.0, "small": 1e-07, "f": 1e+16, "z": -0.0}"#;
        let httpx = r#"{"amount":1000,"s":"café 😀","rate":1.0,"small":1e-07,"f":1e+16,"z":-0.0}"#;
        let javascript =
            r#"{"amount":1000,"s":"café 😀","rate":1,"small":1e-7,"f":10000000000000000,"z":0}"#;
        for canonical in [false, true] {
            let r = BodyRules::plain(canonical);
            let a = hash(requests, &r);
            assert_eq!(a == hash(httpx.as_bytes(), &r), canonical);
            assert_eq!(a == hash(javascript.as_bytes(), &r), canonical);
        }
        // fetch's URLSearchParams (with its charset) and a hand-built body.
        let plain = FingerprintBody::Whole;
        let fetch = rules(&plain, "application/x-www-form-urlencoded;charset=UTF-8");
        let by_hand = rules(&plain, FORM);
        assert_eq!(
            hash(b"name=Jane+Doe&city=S%C3%A3o+Paulo&tag=x%7Ey", &fetch),
            hash(b"city=S%C3%A3o%20Paulo&tag=x~y&name=Jane%20Doe", &by_hand)
        );
    }

    fn multipart(boundary: &str, amount: &str) -> Vec<u8> {
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"amount\"\r\n\r\n{amount}\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a.txt\"\r\n\
             Content-Type: text/csv\r\n\r\nx,y\r\n--{boundary}--\r\n"
        )
        .into_bytes()
    }

    #[test]
    fn multipart_by_parts_whatever_the_options() {
        let plain = FingerprintBody::Whole;
        let off = BodyRules {
            canonical_form: false,
            ..BodyRules::plain(false)
        };
        let with = |boundary: &'static str| BodyRules {
            content_type: Some(
                Box::leak(format!("multipart/form-data; boundary={boundary}").into_boxed_str())
                    .as_bytes(),
            ),
            fingerprint_body: &plain,
            ..off
        };
        let a = hash(&multipart("b1", "100"), &with("b1"));
        let b = hash(&multipart("other-b2", "100"), &with("other-b2"));
        let c = hash(&multipart("b1", "101"), &with("b1"));
        assert_eq!(a, b);
        assert_ne!(a, c);
        // Not parseable with its boundary: compared by bytes.
        assert_eq!(
            hash(b"garbage", &with("b1")),
            hash(b"garbage", &BodyRules::plain(false))
        );
    }

    #[test]
    fn an_extended_file_name_counts_and_parts_without_one_hash_as_before() {
        let rules = BodyRules {
            content_type: Some(b"multipart/form-data; boundary=b"),
            ..BodyRules::plain(false)
        };
        let with = |disposition: &str| {
            format!(
                "--b\r\nContent-Disposition: form-data; name=\"f\"{disposition}\r\n\r\nx\r\n--b--"
            )
            .into_bytes()
        };
        let e_acute = hash(&with("; filename*=UTF-8''%C3%A9.txt"), &rules);
        let e_grave = hash(&with("; filename*=UTF-8''%C3%A8.txt"), &rules);
        let none = hash(&with(""), &rules);
        assert_ne!(e_acute, e_grave);
        assert_ne!(e_acute, none);
        assert_eq!(
            e_acute,
            hash(&with("; filename*=UTF-8''%C3%A9.txt"), &rules)
        );
        // A part with only `filename`: the layout fingerprints had before.
        let plain = hash(&with("; filename=\"a.txt\""), &rules);
        let mut old = Sha256::new();
        old.update([TAG_BODY_MULTIPART]);
        old.update(1u64.to_be_bytes());
        update_optional(&mut old, Some(b"f"));
        update_optional(&mut old, Some(b"a.txt"));
        update_len_prefixed(&mut old, b"text/plain");
        update_len_prefixed(&mut old, b"x");
        assert_eq!(plain, crate::key::hex_lower(&old.finalize()));
    }

    fn shuffled<T: Clone>(items: &[T], seed: u64) -> Vec<T> {
        let mut items = items.to_vec();
        let mut state = seed | 1;
        for i in (1..items.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            items.swap(i, (state % (i as u64 + 1)) as usize);
        }
        items
    }

    fn json_object(members: &[(String, i64)]) -> Vec<u8> {
        let map: Vec<String> = members
            .iter()
            .map(|(name, value)| format!("{}:{value}", serde_json::to_string(name).unwrap()))
            .collect();
        format!("{{{}}}", map.join(",")).into_bytes()
    }

    proptest! {
        #[test]
        fn any_permutation_of_form_fields_is_the_same(
            fields in proptest::collection::btree_map("[a-z]{1,4}", "[a-zA-Z0-9 ]{0,6}", 1..8),
            seed in any::<u64>(),
        ) {
            let plain = FingerprintBody::Whole;
            let r = rules(&plain, FORM);
            let pairs: Vec<(String, String)> = fields.into_iter().collect();
            let encode = |pairs: &[(String, String)]| {
                form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs).finish()
            };
            let permuted = shuffled(&pairs, seed);
            prop_assert_eq!(hash(encode(&pairs).as_bytes(), &r), hash(encode(&permuted).as_bytes(), &r));
        }

        #[test]
        fn any_permutation_of_json_members_is_the_same(
            members in proptest::collection::btree_map("[a-z]{1,4}", any::<i64>(), 1..8),
            seed in any::<u64>(),
        ) {
            let members: Vec<(String, i64)> = members.into_iter().collect();
            let permuted = shuffled(&members, seed);
            let names: Vec<String> = members.iter().map(|(n, _)| format!("/{n}")).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            for body in [exclude(&["/nonce"]), include(&names)] {
                let r = rules(&body, JSON);
                prop_assert_eq!(hash(&json_object(&members), &r), hash(&json_object(&permuted), &r));
            }
        }

        #[test]
        fn any_change_to_an_included_member_changes_it(
            members in proptest::collection::btree_map("[a-z]{1,4}", any::<i64>(), 1..8),
            pick in any::<prop::sample::Index>(),
            delta in 1..1000i64,
        ) {
            let members: Vec<(String, i64)> = members.into_iter().collect();
            let names: Vec<String> = members.iter().map(|(n, _)| format!("/{n}")).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let body = include(&names);
            let r = rules(&body, JSON);
            let mut changed = members.clone();
            let i = pick.index(changed.len());
            changed[i].1 = changed[i].1.wrapping_add(delta);
            prop_assert_ne!(hash(&json_object(&members), &r), hash(&json_object(&changed), &r));
        }
    }
}
