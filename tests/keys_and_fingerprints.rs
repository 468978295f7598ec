//! Keys and fingerprints for real clients (docs/keys-and-fingerprints.md),
//! against the real binary on the embedded store (and, for the expiry an
//! answer tells, on Postgres and Redis too), with a counting upstream.

mod common;
mod pg_support;

use std::time::{Duration, SystemTime};

use common::config::{Config, Route, Store, Upstream, raw};
use common::{GatewayProcess, MockUpstream, Reply, TestDir};
use pg_support::switch::Switch;
use pg_support::{RedisPrefix, TestSchema, redis_flush_prefix, redis_url};

/// The namespace of the derived keys below.
const NS: &str = "9f1c3e0a-5b7d-4c2e-8a61-3d4f5e6a7b8c";

fn config() -> Config {
    let derive = |pointers: &str| raw(&format!("{{ derive = {pointers}, namespace = \"{NS}\" }}"));
    let route = |name: &str, prefix: &str| Route::api(name, prefix);
    Config::new()
        .server("problem_base", "https://docs.example.com/errors/")
        .admin_token_env(common::admin::TOKEN_ENV)
        .upstream(Upstream::api().timeout("1s"))
        .defaults("lock_timeout", "5s")
        .defaults("retention", "1h")
        .route(route("excl", "/v1/excl").set(
            "fingerprint_body",
            raw(r#"{ exclude = ["/sent_at", "/nonce"] }"#),
        ))
        .route(route("items", "/v1/items").set(
            "fingerprint_body",
            raw(r#"{ exclude = ["/items/0", "/items/1"] }"#),
        ))
        .route(route("incl", "/v1/incl").set(
            "fingerprint_body",
            raw(r#"{ include = ["/amount", "/currency"] }"#),
        ))
        .route(route("form", "/v1/form").set("canonical_form", true))
        .route(route("multi", "/v1/multi"))
        .route(
            route("derived", "/v1/derived")
                .set("key", derive(r#"["/order_id", "header:X-Customer"]"#))
                .set("required", true),
        )
        .route(
            route("by_host", "/v1/by-host")
                .set("key", derive(r#"["/order_id", "header:Host"]"#))
                .set("required", true),
        )
        .route(
            route("by_cookie", "/v1/by-cookie")
                .set("key", derive(r#"["/order_id", "header:Cookie"]"#))
                .set("required", true),
        )
        .route(
            route("alts", "/v1/alts")
                .set(
                    "key",
                    raw(&format!(
                        r#"[{{ header = "Idempotency-Key" }}, {{ derive = ["/order_id"], namespace = "{NS}" }}]"#
                    )),
                )
                .set("required", true),
        )
        .route(
            route("quiet", "/v1/quiet")
                .set("key", derive(r#"["/order_id"]"#))
                .set("forward_key", false),
        )
        .route(
            route("query", "/v1/query")
                .set("key", raw(r#"{ query = "idem" }"#))
                .set("required", true),
        )
        .route(
            route("formkey", "/v1/fields")
                .set("key", raw(r#"{ form_field = "idem" }"#))
                .set("required", true),
        )
        .route(route("uuid", "/v1/uuid").set("key_pattern", "uuid"))
        .route(route("uuid_caps", "/v1/caps-uuid").set("key_pattern", "UUID"))
        .route(route("release", "/v1/release").set("release_statuses", ["5xx"]))
        .route(route("expiry", "/v1/expiry").set("expiry_header", "Idempotency-Expires"))
        .route(
            route("values", "/v1/values")
                .set("replay_header", "Idempotency-Result")
                .set("replay_values", ["new", "cached"])
                .set("replay_headers", ["Location"]),
        )
        .route(route("charges", "/v1/charges"))
}

const TOKEN: &str = "keys-token";

async fn setup(name: &str) -> (TestDir, MockUpstream, GatewayProcess) {
    common::admin::start_with_token(name, &config(), TOKEN).await
}

async fn post(gateway: &GatewayProcess, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    gateway
        .client()
        .send("POST", path, headers, body.to_string())
        .await
}

fn json_key(key: &str) -> Vec<(&'static str, String)> {
    vec![
        ("content-type", "application/json".to_owned()),
        ("idempotency-key", key.to_owned()),
    ]
}

fn refs<'a>(headers: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    headers.iter().map(|(n, v)| (*n, v.as_str())).collect()
}

fn assert_replayed(reply: &Reply) {
    assert_eq!(
        reply.header("idempotent-replayed"),
        Some("true"),
        "{reply:?}"
    );
}

fn assert_code(reply: &Reply, status: u16, code: &str) {
    assert_eq!(reply.status, status, "{}", reply.text());
    assert_eq!(reply.json()["code"], code, "{}", reply.text());
}

#[tokio::test]
async fn excluded_members_may_change_included_ones_may_not() {
    let (_dir, upstream, gateway) = setup("kf-members").await;
    let key = json_key("ex-1");
    let first = post(
        &gateway,
        "/v1/excl",
        &refs(&key),
        r#"{"amount":5,"sent_at":"t1","nonce":1}"#,
    )
    .await;
    assert_eq!(first.status, 201);
    // A retry stamped with a new sent_at and nonce, members in another order.
    let retry = post(
        &gateway,
        "/v1/excl",
        &refs(&key),
        r#"{"nonce":2,"amount":5,"sent_at":"t2"}"#,
    )
    .await;
    assert_eq!(retry.status, 201);
    assert_replayed(&retry);
    assert_eq!(retry.body, first.body);
    let changed = post(
        &gateway,
        "/v1/excl",
        &refs(&key),
        r#"{"amount":6,"sent_at":"t1","nonce":1}"#,
    )
    .await;
    assert_code(&changed, 422, "fingerprint-mismatch");
    assert_eq!(upstream.executions("ex-1"), 1);

    let key = json_key("in-1");
    let body = r#"{"amount":5,"currency":"EUR","note":"first"}"#;
    assert_eq!(
        post(&gateway, "/v1/incl", &refs(&key), body).await.status,
        201
    );
    let other_note = post(
        &gateway,
        "/v1/incl",
        &refs(&key),
        r#"{"currency":"EUR","amount":5,"note":"retry"}"#,
    )
    .await;
    assert_replayed(&other_note);
    let other_currency = post(
        &gateway,
        "/v1/incl",
        &refs(&key),
        r#"{"amount":5,"currency":"USD","note":"first"}"#,
    )
    .await;
    assert_code(&other_currency, 422, "fingerprint-mismatch");
    // Not JSON: compared whole, never an error.
    let key = json_key("in-2");
    assert_eq!(
        post(&gateway, "/v1/incl", &refs(&key), "not json")
            .await
            .status,
        201
    );
    assert_replayed(&post(&gateway, "/v1/incl", &refs(&key), "not json").await);
    assert_code(
        &post(&gateway, "/v1/incl", &refs(&key), "not json!").await,
        422,
        "fingerprint-mismatch",
    );
    assert_eq!(upstream.executions("in-1") + upstream.executions("in-2"), 2);
}

#[tokio::test]
async fn excluded_array_elements_are_those_the_client_sent() {
    let (_dir, upstream, gateway) = setup("kf-items").await;
    let key = json_key("items-1");
    let first = post(
        &gateway,
        "/v1/items",
        &refs(&key),
        r#"{"items":["a","b","c"]}"#,
    )
    .await;
    assert_eq!(first.status, 201);
    // The first two elements do not count; the third does.
    let same = post(
        &gateway,
        "/v1/items",
        &refs(&key),
        r#"{"items":["x","y","c"]}"#,
    )
    .await;
    assert_replayed(&same);
    let third = post(
        &gateway,
        "/v1/items",
        &refs(&key),
        r#"{"items":["a","b","d"]}"#,
    )
    .await;
    assert_code(&third, 422, "fingerprint-mismatch");
    assert_eq!(upstream.executions("items-1"), 1);
}

#[tokio::test]
async fn an_included_member_sent_twice_is_not_taken_for_absent() {
    let (_dir, upstream, gateway) = setup("kf-twice").await;
    // The upstream may read the last twin: this is a charge of 2, not one
    // without an amount.
    let key = json_key("twice-1");
    let first = post(&gateway, "/v1/incl", &refs(&key), r#"{"currency":"EUR"}"#).await;
    assert_eq!(first.status, 201);
    let twice = r#"{"amount":1,"amount":2,"currency":"EUR"}"#;
    let retry = post(&gateway, "/v1/incl", &refs(&key), twice).await;
    assert_code(&retry, 422, "fingerprint-mismatch");
    // The other way round.
    let key = json_key("twice-2");
    assert_eq!(
        post(&gateway, "/v1/incl", &refs(&key), twice).await.status,
        201
    );
    assert_replayed(&post(&gateway, "/v1/incl", &refs(&key), twice).await);
    assert_code(
        &post(&gateway, "/v1/incl", &refs(&key), r#"{"currency":"EUR"}"#).await,
        422,
        "fingerprint-mismatch",
    );
    assert_eq!(
        upstream.executions("twice-1") + upstream.executions("twice-2"),
        2
    );
}

#[tokio::test]
async fn form_fields_in_another_order_replay() {
    let (_dir, upstream, gateway) = setup("kf-form").await;
    let headers = [
        ("content-type", "application/x-www-form-urlencoded"),
        ("idempotency-key", "form-1"),
    ];
    assert_eq!(
        post(
            &gateway,
            "/v1/form",
            &headers,
            "amount=5&currency=EUR&tag=a&tag=b"
        )
        .await
        .status,
        201
    );
    let reordered = post(
        &gateway,
        "/v1/form",
        &headers,
        "tag=a&currency=EUR&amount=5&tag=b",
    )
    .await;
    assert_replayed(&reordered);
    let values_swapped = post(
        &gateway,
        "/v1/form",
        &headers,
        "tag=b&currency=EUR&amount=5&tag=a",
    )
    .await;
    assert_code(&values_swapped, 422, "fingerprint-mismatch");
    assert_eq!(upstream.executions("form-1"), 1);
    // Without canonical_form, the bytes count.
    let plain = [
        ("content-type", "application/x-www-form-urlencoded"),
        ("idempotency-key", "form-2"),
    ];
    assert_eq!(
        post(&gateway, "/v1/charges", &plain, "a=1&b=2")
            .await
            .status,
        201
    );
    assert_code(
        &post(&gateway, "/v1/charges", &plain, "b=2&a=1").await,
        422,
        "fingerprint-mismatch",
    );
}

fn multipart(boundary: &str, amount: &str) -> String {
    format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"amount\"\r\n\r\n{amount}\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"receipt\"; filename=\"r.txt\"\r\n\
         Content-Type: text/plain\r\n\r\nthanks\r\n--{boundary}--\r\n"
    )
}

#[tokio::test]
async fn multipart_retry_with_a_new_boundary_replays() {
    let (_dir, upstream, gateway) = setup("kf-multipart").await;
    let send = |boundary: &'static str, amount: &'static str| {
        let content_type = format!("multipart/form-data; boundary={boundary}");
        let gateway = &gateway;
        async move {
            post(
                gateway,
                "/v1/multi",
                &[("content-type", &content_type), ("idempotency-key", "mp-1")],
                &multipart(boundary, amount),
            )
            .await
        }
    };
    assert_eq!(send("----first7MA4YWxk", "100").await.status, 201);
    assert_replayed(&send("----retryTrZu0gW", "100").await);
    assert_code(
        &send("----third9Qz", "101").await,
        422,
        "fingerprint-mismatch",
    );
    assert_eq!(upstream.executions("mp-1"), 1);
}

/// Some clients name a non-ASCII file only by `filename*` (RFC 8187): a
/// retry with another file name there is another request.
#[tokio::test]
async fn multipart_extended_file_names_count() {
    let (_dir, upstream, gateway) = setup("kf-multipart-ext").await;
    let send = |file_name: &'static str| {
        let gateway = &gateway;
        async move {
            let body = format!(
                "--b\r\nContent-Disposition: form-data; name=\"doc\"; \
                 filename*=UTF-8''{file_name}\r\n\r\nsame bytes\r\n--b--\r\n"
            );
            post(
                gateway,
                "/v1/multi",
                &[
                    ("content-type", "multipart/form-data; boundary=b"),
                    ("idempotency-key", "mp-ext"),
                ],
                &body,
            )
            .await
        }
    };
    assert_eq!(send("%C3%A9t%C3%A9.txt").await.status, 201);
    assert_replayed(&send("%C3%A9t%C3%A9.txt").await);
    assert_code(&send("hiver.txt").await, 422, "fingerprint-mismatch");
    assert_eq!(upstream.executions("mp-ext"), 1);
}

/// A part that names itself twice (or carries two Content-Type fields) says
/// different things to different readers: it is never taken for a part that
/// says one of them, so its body compares by its bytes.
#[tokio::test]
async fn multipart_part_with_twin_fields_is_not_taken_for_one() {
    let (_dir, upstream, gateway) = setup("kf-multipart-twins").await;
    let send = |key: &'static str, boundary: &'static str, head: &'static str| {
        let content_type = format!("multipart/form-data; boundary={boundary}");
        let body = format!("--{boundary}\r\n{head}\r\n\r\n100\r\n--{boundary}--\r\n");
        let gateway = &gateway;
        async move {
            post(
                gateway,
                "/v1/multi",
                &[("content-type", &content_type), ("idempotency-key", key)],
                &body,
            )
            .await
        }
    };
    let twin_names = "Content-Disposition: form-data; name=\"amount\"; name=\"refund\"";
    assert_eq!(send("mp-twin", "b1", twin_names).await.status, 201);
    assert_replayed(&send("mp-twin", "b1", twin_names).await);
    for other in [
        "Content-Disposition: form-data; name=\"amount\"",
        "Content-Disposition: form-data; name=\"refund\"",
    ] {
        assert_code(
            &send("mp-twin", "b2", other).await,
            422,
            "fingerprint-mismatch",
        );
    }
    let twin_types = "Content-Disposition: form-data; name=\"a\"\r\n\
                      Content-Type: text/plain\r\nContent-Type: image/png";
    assert_eq!(send("mp-types", "b1", twin_types).await.status, 201);
    assert_code(
        &send(
            "mp-types",
            "b2",
            "Content-Disposition: form-data; name=\"a\"\r\nContent-Type: image/png",
        )
        .await,
        422,
        "fingerprint-mismatch",
    );
    assert_eq!(upstream.executions("mp-twin"), 1);
    assert_eq!(upstream.executions("mp-types"), 1);
}

/// A part's media type is case-insensitive, and a part without one is
/// `text/plain`: a retry that spells it another way is the same request.
#[tokio::test]
async fn multipart_part_media_type_compares_case_insensitively() {
    let (_dir, upstream, gateway) = setup("kf-multipart-type").await;
    let send = |part_type: &'static str, text: &'static str| {
        let body = format!(
            "--b1\r\nContent-Disposition: form-data; name=\"note\"\r\n{part_type}\r\n\
             {text}\r\n--b1--\r\n"
        );
        let gateway = &gateway;
        async move {
            post(
                gateway,
                "/v1/multi",
                &[
                    ("content-type", "multipart/form-data; boundary=b1"),
                    ("idempotency-key", "mp-type"),
                ],
                &body,
            )
            .await
        }
    };
    assert_eq!(send("Content-Type: TEXT/PLAIN\r\n", "hi").await.status, 201);
    assert_replayed(&send("", "hi").await);
    assert_replayed(&send("Content-Type: text/plain\r\n", "hi").await);
    assert_code(
        &send("Content-Type: text/html\r\n", "hi").await,
        422,
        "fingerprint-mismatch",
    );
    assert_eq!(upstream.executions("mp-type"), 1);
}

#[tokio::test]
async fn derived_key_is_python_uuid5_told_and_forwarded() {
    let (_dir, upstream, gateway) = setup("kf-derive").await;
    // Python: uuid.uuid5(UUID(NS), "10:ordé_10015:cus_9")
    let expected = "58c23847-b0de-5f7b-b9ee-8e2efc581c4d";
    let headers = [
        ("content-type", "application/json"),
        ("x-customer", "cus_9"),
    ];
    let first = post(
        &gateway,
        "/v1/derived",
        &headers,
        r#"{"order_id":"ordé_1001","amount":5}"#,
    )
    .await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert_eq!(first.header("idempotency-key"), Some(expected));
    // The derived key is what the upstream is given.
    assert_eq!(upstream.executions(expected), 1);
    let again = post(
        &gateway,
        "/v1/derived",
        &headers,
        r#"{"order_id":"ordé_1001","amount":5}"#,
    )
    .await;
    assert_replayed(&again);
    assert_eq!(again.header("idempotency-key"), Some(expected));
    // Same business ids, another request: 422, still told the key.
    let other = post(
        &gateway,
        "/v1/derived",
        &headers,
        r#"{"order_id":"ordé_1001","amount":6}"#,
    )
    .await;
    assert_code(&other, 422, "fingerprint-mismatch");
    assert_eq!(other.header("idempotency-key"), Some(expected));
    assert_eq!(upstream.total(), 1);
    // Another customer is another key.
    let other_customer = [
        ("content-type", "application/json"),
        ("x-customer", "cus_8"),
    ];
    let reply = post(
        &gateway,
        "/v1/derived",
        &other_customer,
        r#"{"order_id":"ordé_1001","amount":5}"#,
    )
    .await;
    assert_eq!(reply.status, 201);
    assert_ne!(reply.header("idempotency-key"), Some(expected));
    // A part missing: no key, and the route requires one.
    let missing = post(
        &gateway,
        "/v1/derived",
        &[("content-type", "application/json")],
        r#"{"order_id":"ordé_1001"}"#,
    )
    .await;
    assert_code(&missing, 400, "missing-key");
    assert_eq!(missing.header("idempotency-key"), None);

    // The operator finds the record under the derived key.
    let shown = gateway
        .admin_client()
        .send(
            "GET",
            &format!("/admin/keys/derived/{expected}"),
            &[("authorization", &format!("Bearer {TOKEN}"))],
            "",
        )
        .await;
    assert_eq!(shown.status, 200, "{}", shown.text());
}

#[tokio::test]
async fn a_host_part_is_the_same_over_http2() {
    let (_dir, upstream, gateway) = setup("kf-host").await;
    let json = [("content-type", "application/json")];
    let body = r#"{"order_id":"ord_h"}"#;
    let h1 = post(&gateway, "/v1/by-host", &json, body).await;
    assert_eq!(h1.status, 201, "{}", h1.text());
    let key = h1
        .header("idempotency-key")
        .expect("derived key")
        .to_owned();
    // HTTP/2 sends the host as `:authority`, with no Host field.
    let h2 = common::Client::h2c(gateway.addr)
        .send("POST", "/v1/by-host", &json, body.to_string())
        .await;
    assert_eq!(h2.status, 201, "{}", h2.text());
    assert_replayed(&h2);
    assert_eq!(h2.header("idempotency-key"), Some(key.as_str()));
    assert_eq!(upstream.total(), 1);
}

#[tokio::test]
async fn a_cookie_part_is_the_same_on_one_line_or_several() {
    let (_dir, upstream, gateway) = setup("kf-cookie").await;
    let body = r#"{"order_id":"ord_c"}"#;
    let one = [
        ("content-type", "application/json"),
        ("cookie", "sid=s1; theme=dark"),
    ];
    let h1 = post(&gateway, "/v1/by-cookie", &one, body).await;
    assert_eq!(h1.status, 201, "{}", h1.text());
    let key = h1
        .header("idempotency-key")
        .expect("derived key")
        .to_owned();
    // An HTTP/2 client may send each cookie on a line of its own.
    let several = [
        ("content-type", "application/json"),
        ("cookie", "sid=s1"),
        ("cookie", "theme=dark"),
    ];
    let h2 = common::Client::h2c(gateway.addr)
        .send("POST", "/v1/by-cookie", &several, body.to_string())
        .await;
    assert_eq!(h2.status, 201, "{}", h2.text());
    assert_replayed(&h2);
    assert_eq!(h2.header("idempotency-key"), Some(key.as_str()));
    assert_eq!(upstream.total(), 1);
}

#[tokio::test]
async fn alternatives_take_the_header_else_derive() {
    let (_dir, upstream, gateway) = setup("kf-alts").await;
    // Python: uuid.uuid5(UUID(NS), "2:42"); 42.0 is 42 in RFC 8785 form.
    let derived = "a59861a3-0365-5163-b8be-d19cea93c249";
    let json = [("content-type", "application/json")];
    let first = post(&gateway, "/v1/alts", &json, r#"{"order_id":42}"#).await;
    assert_eq!(first.status, 201);
    assert_eq!(first.header("idempotency-key"), Some(derived));
    let same = post(&gateway, "/v1/alts", &json, r#"{"order_id":42.0}"#).await;
    assert_code(&same, 422, "fingerprint-mismatch");
    assert_eq!(same.header("idempotency-key"), Some(derived));
    // With a header key, the header wins and nothing is derived.
    let keyed = [
        ("content-type", "application/json"),
        ("idempotency-key", "client-key"),
    ];
    let by_header = post(&gateway, "/v1/alts", &keyed, r#"{"order_id":42}"#).await;
    assert_eq!(by_header.status, 201);
    assert_eq!(by_header.header("idempotency-key"), None);
    assert_eq!(upstream.executions("client-key"), 1);
    assert_eq!(upstream.executions(derived), 1);
    // A present but invalid header key stops the list.
    let bad = [
        ("content-type", "application/json"),
        ("idempotency-key", "\"open"),
    ];
    assert_code(
        &post(&gateway, "/v1/alts", &bad, r#"{"order_id":42}"#).await,
        400,
        "invalid-key",
    );
    assert_eq!(upstream.total(), 2);
}

#[tokio::test]
async fn a_derived_key_is_not_forwarded_when_forward_key_is_false() {
    let (_dir, upstream, gateway) = setup("kf-quiet").await;
    // Python: uuid.uuid5(UUID(NS), "2:42")
    let derived = "a59861a3-0365-5163-b8be-d19cea93c249";
    let json = [("content-type", "application/json")];
    let first = post(&gateway, "/v1/quiet", &json, r#"{"order_id":42}"#).await;
    assert_eq!(first.status, 201);
    assert_eq!(first.header("idempotency-key"), Some(derived));
    assert_eq!(upstream.executions(""), 1, "the upstream got no key");
    assert_replayed(&post(&gateway, "/v1/quiet", &json, r#"{"order_id":42}"#).await);
    // Without the business id there is no key: forwarded untouched.
    let unkeyed = post(&gateway, "/v1/quiet", &json, r#"{"other":1}"#).await;
    assert_eq!(unkeyed.status, 201);
    assert_eq!(unkeyed.header("idempotent-replayed"), None);
    assert_eq!(unkeyed.header("idempotency-key"), None);
    assert_eq!(upstream.total(), 2);
}

#[tokio::test]
async fn query_and_form_keys() {
    let (_dir, upstream, gateway) = setup("kf-query-form").await;
    let json = [("content-type", "application/json")];
    assert_eq!(
        post(&gateway, "/v1/query?idem=q%2D1&x=1", &json, "{}")
            .await
            .status,
        201
    );
    assert_replayed(&post(&gateway, "/v1/query?idem=q%2D1&x=1", &json, "{}").await);
    // The key is the decoded value.
    let shown = gateway
        .admin_client()
        .send(
            "GET",
            "/admin/keys/query/q-1",
            &[("authorization", &format!("Bearer {TOKEN}"))],
            "",
        )
        .await;
    assert_eq!(shown.status, 200, "{}", shown.text());
    // A repeated name takes its first value.
    assert_code(
        &post(&gateway, "/v1/query?idem=q-1&idem=q-2&x=1", &json, "{}").await,
        422,
        "fingerprint-mismatch",
    );
    assert_code(
        &post(&gateway, "/v1/query?x=1", &json, "{}").await,
        400,
        "missing-key",
    );
    // `+` is a space, `%20` too: a decoded value may hold spaces, as a
    // quoted header key may, and is the same key however it was encoded.
    assert_eq!(
        post(&gateway, "/v1/query?idem=a+b&x=2", &json, "{}")
            .await
            .status,
        201
    );
    assert_replayed(&post(&gateway, "/v1/query?idem=a+b&x=2", &json, "{}").await);
    assert_code(
        &post(&gateway, "/v1/query?idem=a%20b&x=3", &json, "{}").await,
        422,
        "fingerprint-mismatch",
    );
    // The admin API finds it as the listing shows it (as stored); the
    // quoted spelling names the key `"a b"`, which no record has.
    for (named, status) in [("a%20b", 200), ("%22a%20b%22", 404)] {
        let shown = gateway
            .admin_client()
            .send(
                "GET",
                &format!("/admin/keys/query/{named}"),
                &[("authorization", &format!("Bearer {TOKEN}"))],
                "",
            )
            .await;
        assert_eq!(shown.status, status, "{named}: {}", shown.text());
    }
    // A value that starts with a quote is an sf-string, as in a header:
    // `"a b"` is the key above (another query string: another request),
    // `"a b` no key at all.
    assert_code(
        &post(&gateway, "/v1/query?idem=%22a+b%22&x=2", &json, "{}").await,
        422,
        "fingerprint-mismatch",
    );
    // Other characters outside printable ASCII, or a quote left open, are not a key.
    for tab_line_feed_or_utf8 in ["a%09b", "a%0Ab", "cl%C3%A9", "%22a+b"] {
        assert_code(
            &post(
                &gateway,
                &format!("/v1/query?idem={tab_line_feed_or_utf8}"),
                &json,
                "{}",
            )
            .await,
            400,
            "invalid-key",
        );
    }

    let form = [("content-type", "application/x-www-form-urlencoded")];
    assert_eq!(
        post(&gateway, "/v1/fields", &form, "amount=5&idem=f-1")
            .await
            .status,
        201
    );
    assert_replayed(&post(&gateway, "/v1/fields", &form, "amount=5&idem=f-1").await);
    // Not a form: no form field, so no key.
    assert_code(
        &post(&gateway, "/v1/fields", &json, "amount=5&idem=f-1").await,
        400,
        "missing-key",
    );
    assert_eq!(upstream.total(), 3);
}

#[tokio::test]
async fn sf_string_keys_in_full() {
    let (_dir, upstream, gateway) = setup("kf-sf").await;
    let auth = format!("Bearer {TOKEN}");
    for (sent, same) in [
        ("\"a b\"", "\"a b\";v=2"),
        (r#""say \"hi\"""#, r#""say \"hi\"""#),
        ("\"k1\";v=2;final", "k1"),
    ] {
        let first = post(&gateway, "/v1/charges", &refs(&json_key(sent)), "{}").await;
        assert_eq!(first.status, 201, "{sent}: {}", first.text());
        let retry = post(&gateway, "/v1/charges", &refs(&json_key(same)), "{}").await;
        assert_replayed(&retry);
    }
    assert_eq!(upstream.total(), 3);
    // The admin API names a key as stored: the header `"a b"` gave `a b`.
    let shown = gateway
        .admin_client()
        .send(
            "GET",
            "/admin/keys/charges/a%20b",
            &[("authorization", &auth)],
            "",
        )
        .await;
    assert_eq!(shown.status, 200, "{}", shown.text());
    for bad in ["\"\"", "\"abc", "\"k1\"x", "a b"] {
        let reply = post(&gateway, "/v1/charges", &refs(&json_key(bad)), "{}").await;
        assert_code(&reply, 400, "invalid-key");
    }
    assert_eq!(upstream.total(), 3);
}

#[tokio::test]
async fn key_pattern_uuid() {
    let (_dir, upstream, gateway) = setup("kf-pattern").await;
    let upper = "8E03978E-40D5-43E8-BC93-6894A57F9324";
    assert_eq!(
        post(&gateway, "/v1/uuid", &refs(&json_key(upper)), "{}")
            .await
            .status,
        201
    );
    for bad in [
        "order-17",
        "8e03978e40d543e8bc936894a57f9324",
        "\"8e03978e-40d5-43e8-bc93-6894a57f9324 \"",
    ] {
        let reply = post(&gateway, "/v1/uuid", &refs(&json_key(bad)), "{}").await;
        assert_code(&reply, 400, "invalid-key");
    }
    assert_eq!(upstream.total(), 1);
}

#[tokio::test]
async fn key_pattern_uuid_in_capitals_is_the_uuid_form() {
    let (_dir, upstream, gateway) = setup("kf-uuid-caps").await;
    let key = "8e03978e-40d5-43e8-bc93-6894a57f9324";
    let reply = post(&gateway, "/v1/caps-uuid", &refs(&json_key(key)), "{}").await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let word = post(&gateway, "/v1/caps-uuid", &refs(&json_key("UUID")), "{}").await;
    assert_code(&word, 400, "invalid-key");
    assert_eq!(upstream.total(), 1);
}

#[tokio::test]
async fn five_xx_releases_but_a_timeout_stays_unknown() {
    let (_dir, upstream, gateway) = setup("kf-release").await;
    let key = json_key("rel-1");
    for _ in 0..2 {
        let reply = post(&gateway, "/v1/release?status=500", &refs(&key), "{}").await;
        assert_eq!(reply.status, 500);
        assert_eq!(reply.header("idempotent-replayed"), Some("false"));
    }
    assert_eq!(upstream.executions("rel-1"), 2, "a 500 frees the key");
    // Past 599 a status is invalid, and read as a 5xx (RFC 9110 §15).
    for (n, status) in [599u16, 600, 999].into_iter().enumerate() {
        let name = format!("rel-past-{n}");
        let path = format!("/v1/release?status={status}");
        for _ in 0..2 {
            let reply = post(&gateway, &path, &refs(&json_key(&name)), "{}").await;
            assert_eq!(reply.status, status);
            assert_eq!(reply.header("idempotent-replayed"), Some("false"));
        }
        assert_eq!(upstream.executions(&name), 2, "a {status} frees the key");
    }
    let key = json_key("rel-2");
    let first = post(&gateway, "/v1/release?delay_ms=1500", &refs(&key), "{}").await;
    assert_code(&first, 504, "outcome-unknown");
    let retry = post(&gateway, "/v1/release?delay_ms=1500", &refs(&key), "{}").await;
    assert_code(&retry, 504, "outcome-unknown");
    assert_replayed(&retry);
    assert_eq!(
        upstream.executions("rel-2"),
        1,
        "the gateway's own 504 is never released"
    );
}

#[tokio::test]
async fn expiry_header_agrees_with_the_admin_api() {
    let (_dir, _upstream, gateway) = setup("kf-expiry").await;
    let key = json_key("exp-1");
    let fresh = post(&gateway, "/v1/expiry", &refs(&key), "{}").await;
    assert_eq!(fresh.status, 201);
    let replay = post(&gateway, "/v1/expiry", &refs(&key), "{}").await;
    assert_replayed(&replay);
    // The first replay leaves a copy in memory for a few seconds; the
    // next is answered from it, and tells the record's expiry too.
    let from_copy = post(&gateway, "/v1/expiry", &refs(&key), "{}").await;
    assert_replayed(&from_copy);
    let shown = gateway
        .admin_client()
        .send(
            "GET",
            "/admin/keys/expiry/exp-1",
            &[("authorization", &format!("Bearer {TOKEN}"))],
            "",
        )
        .await;
    let expires_at = shown.json()[0]["expires_at"].as_str().unwrap().to_owned();
    let expires_at = humantime::parse_rfc3339(&expires_at).unwrap();
    for reply in [&fresh, &replay, &from_copy] {
        let header = reply.header("idempotency-expires").expect("expiry header");
        let at = httpdate::parse_http_date(header).unwrap();
        let apart = at
            .duration_since(expires_at)
            .or_else(|_| expires_at.duration_since(at))
            .unwrap();
        assert!(
            apart <= Duration::from_secs(1),
            "{header} vs {expires_at:?}"
        );
        // Retention is 1h.
        let ahead = at.duration_since(SystemTime::now()).unwrap();
        assert!(ahead > Duration::from_secs(3500), "{ahead:?}");
    }
    // Not on rejections.
    let mismatch = post(&gateway, "/v1/expiry", &refs(&key), "{\"x\":1}").await;
    assert_eq!(mismatch.status, 422);
    assert_eq!(mismatch.header("idempotency-expires"), None);
}

/// A gateway whose only route tells the expiry, on `store`.
fn expiry_config(store: Store) -> Config {
    Config::new()
        .admin_token_env(common::admin::TOKEN_ENV)
        .store(store)
        .upstream(Upstream::api().timeout("5s"))
        .defaults("lock_timeout", "30s")
        .defaults("retention", "1h")
        .route(Route::api("expiry", "/v1/expiry").set("expiry_header", "Idempotency-Expires"))
}

/// The record's expiry as the admin API shows it, as an HTTP-date.
async fn shown_expiry(gateway: &GatewayProcess, key: &str) -> String {
    let shown = gateway
        .admin_client()
        .send(
            "GET",
            &format!("/admin/keys/expiry/{key}"),
            &[("authorization", &format!("Bearer {TOKEN}"))],
            "",
        )
        .await;
    assert_eq!(shown.status, 200, "{}", shown.text());
    let at = shown.json()[0]["expires_at"].as_str().unwrap().to_owned();
    httpdate::fmt_http_date(humantime::parse_rfc3339(&at).unwrap())
}

fn told(reply: &Reply) -> String {
    reply
        .header("idempotency-expires")
        .unwrap_or_else(|| panic!("no expiry told: {reply:?}"))
        .to_owned()
}

/// Sends `key` fresh to `first`, then again to each of `replayers` in
/// turn (after deleting the Redis copies under `flush_before`, when given
/// as (prefix, at which replay)); every answer must tell the expiry the
/// admin API shows, to the letter.
async fn assert_one_expiry(
    first: &GatewayProcess,
    replayers: &[&GatewayProcess],
    key: &str,
    flush_before: Option<(&str, usize)>,
) {
    let headers = json_key(key);
    let fresh = post(first, "/v1/expiry", &refs(&headers), "{}").await;
    assert_eq!(fresh.status, 201, "{}", fresh.text());
    let stored = shown_expiry(first, key).await;
    assert_eq!(told(&fresh), stored, "{key}: the first answer");
    for (n, gateway) in replayers.iter().enumerate() {
        if let Some((prefix, at)) = flush_before
            && at == n
        {
            redis_flush_prefix(prefix).await;
        }
        let replay = post(gateway, "/v1/expiry", &refs(&headers), "{}").await;
        assert_replayed(&replay);
        assert_eq!(told(&replay), stored, "{key}: replay {n}");
    }
}

const EXPIRY_KEYS: usize = 30;

/// The first answer tells the expiry the store wrote, as every replay does:
/// from the store, from the in-memory copy the first replay leaves, and on
/// Redis from the copy the completion wrote and, once Redis lost it, from
/// Postgres through another replica. (Computed apart, the first answer's
/// could be a second off its replays' when the write crossed a second.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_answer_and_its_replays_tell_one_expiry_on_every_backend() {
    let upstream = MockUpstream::start().await;
    let token = [(common::admin::TOKEN_ENV, TOKEN)];
    let start = |dir: &TestDir, config: &Config| {
        GatewayProcess::start_with_env(dir, &upstream.url(), config, &token)
    };

    let dir = TestDir::new("kf-one-expiry-embedded");
    let embedded = start(&dir, &expiry_config(Store::embedded()));
    for n in 0..EXPIRY_KEYS {
        let key = format!("emb-{n}");
        assert_one_expiry(&embedded, &[&embedded, &embedded], &key, None).await;
    }

    let schema = TestSchema::create().await;
    let dir = TestDir::new("kf-one-expiry-postgres");
    let postgres = start(&dir, &expiry_config(Store::postgres(&schema.url())));
    for n in 0..EXPIRY_KEYS {
        let key = format!("pg-{n}");
        assert_one_expiry(&postgres, &[&postgres, &postgres], &key, None).await;
    }

    let schema = TestSchema::create().await;
    let prefix = RedisPrefix::new("kf-expiry");
    let config = expiry_config(Store::postgres(&schema.url()).redis(&redis_url(), &prefix.0));
    let (dir_a, dir_b) = (
        TestDir::new("kf-one-expiry-a"),
        TestDir::new("kf-one-expiry-b"),
    );
    let (a, b) = (start(&dir_a, &config), start(&dir_b, &config));
    for n in 0..EXPIRY_KEYS {
        let key = format!("redis-{n}");
        // A: Redis, then its copy; B, once Redis lost the key: Postgres.
        let flush = Some((prefix.0.as_str(), 2));
        assert_one_expiry(&a, &[&a, &a, &b], &key, flush).await;
    }
}

/// A database whose replies arrive a second late: the first answer still
/// tells the expiry the database wrote, not one counted from when the
/// gateway heard of the write, and so do its replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_database_does_not_move_the_first_answers_expiry() {
    let schema = TestSchema::create().await;
    let relay = Switch::start(pg_support::server_addr()).await;
    let url = pg_support::via(&schema.url(), relay.addr);
    let (_dir, _upstream, gateway) = common::admin::start_with_token(
        "kf-slow-expiry",
        &expiry_config(Store::postgres(&url).set("statement_timeout", "10s")),
        TOKEN,
    )
    .await;
    relay.delay_replies(Duration::from_millis(1200));
    let tasks: Vec<_> = (0..3)
        .map(|n| {
            let gateway = &gateway;
            async move {
                assert_one_expiry(gateway, &[gateway, gateway], &format!("slow-{n}"), None).await;
            }
        })
        .collect();
    futures_util::future::join_all(tasks).await;
}

#[tokio::test]
async fn a_released_answer_tells_no_expiry_even_one_the_upstream_sent() {
    let (_dir, upstream, gateway) = setup("kf-expiry-released").await;
    let key = json_key("exp-rel");
    let path = "/v1/expiry?status=503&expires=upstream-says";
    for _ in 0..2 {
        let released = post(&gateway, path, &refs(&key), "{}").await;
        assert_eq!(released.status, 503);
        assert_eq!(released.header("idempotent-replayed"), Some("false"));
        // No record was kept: no expiry to tell, whoever wrote the field.
        assert_eq!(released.header("idempotency-expires"), None);
    }
    assert_eq!(upstream.executions("exp-rel"), 2);
    // Nor does a key-less answer on the route: it has no record either.
    let json = [("content-type", "application/json")];
    let keyless = post(&gateway, "/v1/expiry?expires=upstream-says", &json, "{}").await;
    assert_eq!(keyless.status, 201);
    assert_eq!(keyless.header("idempotency-expires"), None);
    // A stored answer tells the record's expiry, not the upstream's.
    let key = json_key("exp-kept");
    let path = "/v1/expiry?expires=upstream-says";
    for _ in 0..2 {
        let kept = post(&gateway, path, &refs(&key), "{}").await;
        assert_eq!(kept.status, 201);
        let header = kept.header("idempotency-expires").expect("expiry header");
        let at = httpdate::parse_http_date(header).unwrap();
        let ahead = at.duration_since(SystemTime::now()).unwrap();
        assert!(ahead < Duration::from_secs(3700), "{header}");
    }
}

#[tokio::test]
async fn replay_values_and_replay_headers() {
    let (_dir, _upstream, gateway) = setup("kf-values").await;
    let key = json_key("val-1");
    let fresh = post(&gateway, "/v1/values", &refs(&key), "{}").await;
    assert_eq!(fresh.header("idempotency-result"), Some("new"));
    assert!(fresh.header("x-execution").is_some());
    let replay = post(&gateway, "/v1/values", &refs(&key), "{}").await;
    assert_eq!(replay.header("idempotency-result"), Some("cached"));
    assert_eq!(replay.body, fresh.body);
    // Only Location (and Content-Type, always) are kept.
    assert_eq!(replay.header("location"), fresh.header("location"));
    assert_eq!(replay.header("content-type"), Some("application/json"));
    assert_eq!(replay.header("x-execution"), None);
    // Content-Encoding too: without it the replayed bytes cannot be read.
    let key = json_key("val-2");
    let encoded = "/v1/values?encoding=identity";
    let fresh = post(&gateway, encoded, &refs(&key), "{}").await;
    assert_eq!(fresh.header("content-encoding"), Some("identity"));
    let replay = post(&gateway, encoded, &refs(&key), "{}").await;
    assert_eq!(replay.header("idempotency-result"), Some("cached"));
    assert_eq!(replay.header("content-encoding"), Some("identity"));
    assert_eq!(replay.body, fresh.body);
}

#[tokio::test]
async fn problem_base_types_and_links_every_problem() {
    let (_dir, _upstream, gateway) = setup("kf-problems").await;
    let check = |reply: &Reply, status: u16, code: &str| {
        assert_code(reply, status, code);
        let uri = format!("https://docs.example.com/errors/{code}");
        assert_eq!(reply.json()["type"], uri.as_str());
        assert_eq!(
            reply.header("link"),
            Some(format!("<{uri}>; rel=\"describedby\"").as_str())
        );
    };
    let invalid = post(&gateway, "/v1/charges", &refs(&json_key("\"\"")), "{}").await;
    check(&invalid, 400, "invalid-key");

    let key = json_key("pb-1");
    let slow = {
        let gateway_client = gateway.client();
        let key = key.clone();
        tokio::spawn(async move {
            gateway_client
                .send("POST", "/v1/charges?delay_ms=800", &refs(&key), "{}")
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let conflict = post(&gateway, "/v1/charges?delay_ms=800", &refs(&key), "{}").await;
    check(&conflict, 409, "key-in-flight");
    assert_eq!(slow.await.unwrap().status, 201);
    let mismatch = post(
        &gateway,
        "/v1/charges?delay_ms=800",
        &refs(&key),
        "{\"x\":1}",
    )
    .await;
    check(&mismatch, 422, "fingerprint-mismatch");
    // An outcome-unknown problem replays with its Link, even on a route that
    // keeps only some of the upstream's headers (`replay_headers`).
    let key = json_key("pb-2");
    let timed_out = post(&gateway, "/v1/values?delay_ms=1500", &refs(&key), "{}").await;
    check(&timed_out, 504, "outcome-unknown");
    let replay = post(&gateway, "/v1/values?delay_ms=1500", &refs(&key), "{}").await;
    check(&replay, 504, "outcome-unknown");
    assert_eq!(replay.header("idempotency-result"), Some("cached"));
    // The admin plane's problems too.
    let unauthorized = gateway.admin_client().get("/admin/keys/charges/x").await;
    check(&unauthorized, 401, "unauthorized");
}

#[test]
fn check_names_file_line_and_field_of_bad_key_options() {
    let dir = TestDir::new("kf-check");
    let path = dir.path("bad.toml");
    std::fs::write(
        &path,
        r#"
[upstreams.api]
url = "http://127.0.0.1:3000"

[defaults]
key = [{ header = "Idempotency-Key" }, { derive = ["/a", "cookie:x"], namespace = "nope" }]
key_pattern = "ord_[0-9"

[[routes]]
name = "all"
upstream = "api"
match = { path_prefix = "/" }
key_pattern = "a)|(b"
expiry_header = "Link"
"#,
    )
    .unwrap();
    let stderr = refused_by_check(&path);
    for expected in [
        "bad.toml:6:58: defaults.key[1].derive[1]:",
        "bad.toml:6:83: defaults.key[1].namespace:",
        // One line, about the pattern as written.
        "bad.toml:7:15: defaults.key_pattern: \"ord_[0-9\" is not a valid regex: unclosed character class\n",
        // It would escape the anchors that make a pattern match whole keys.
        "bad.toml:13:15: routes[0].key_pattern: \"a)|(b\" is not a valid regex: unopened group\n",
        // The problems' Link (problem_base) would be replaced by the expiry.
        "bad.toml:14:17: routes[0].expiry_header: \"Link\" is a field answers carry",
    ] {
        assert!(stderr.contains(expected), "{expected} not in:\n{stderr}");
    }
    // A misspelt field of one alternative (toml stops at it, so alone).
    std::fs::write(
        &path,
        r#"
[upstreams.api]
url = "http://127.0.0.1:3000"

[[routes]]
name = "all"
upstream = "api"
match = { path_prefix = "/" }
key = [{ header = "A" }, { hedaer = "B" }]
"#,
    )
    .unwrap();
    let stderr = refused_by_check(&path);
    assert!(
        stderr.contains("bad.toml:9:28: routes[0].key[1].hedaer: unknown field `hedaer`"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_reload_applies_to_new_requests_and_says_what_older_records_meet() {
    let (_dir, upstream, gateway) = setup("kf-reload").await;
    let key = json_key("rl-1");
    let stored = post(&gateway, "/v1/charges", &refs(&key), r#"{"a":1,"nonce":1}"#).await;
    assert_eq!(stored.status, 201);
    let original = std::fs::read_to_string(gateway.config_path()).unwrap();
    gateway.write_config(&config().with_route("charges", |r| {
        r.set("fingerprint_body", raw(r#"{ exclude = ["/nonce"] }"#))
            .set("key_pattern", "rl-[0-9]+")
    }));
    let changed = std::fs::read_to_string(gateway.config_path()).unwrap();
    assert_ne!(changed, original);
    let reply = gateway
        .admin_client()
        .send(
            "POST",
            "/admin/reload",
            &[("authorization", &format!("Bearer {TOKEN}"))],
            "",
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    for part in [
        "fingerprint_body or canonical_form changed",
        "key_pattern changed",
    ] {
        assert!(reply.text().contains(part), "{part}: {}", reply.text());
    }
    // The record stored before compares by its old fingerprint.
    let old = post(&gateway, "/v1/charges", &refs(&key), r#"{"a":1,"nonce":1}"#).await;
    assert_code(&old, 422, "fingerprint-mismatch");
    // A new key is compared without the nonce, and must have the new form.
    let key = json_key("rl-2");
    assert_eq!(
        post(&gateway, "/v1/charges", &refs(&key), r#"{"a":1,"nonce":1}"#)
            .await
            .status,
        201
    );
    assert_replayed(&post(&gateway, "/v1/charges", &refs(&key), r#"{"nonce":2,"a":1}"#).await);
    assert_code(
        &post(&gateway, "/v1/charges", &refs(&json_key("other")), "{}").await,
        400,
        "invalid-key",
    );
    assert_eq!(upstream.total(), 2);
}

/// `idemgate check -c path`, which must refuse the file: its stderr.
fn refused_by_check(path: &std::path::Path) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["check", "-c"])
        .arg(path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    String::from_utf8_lossy(&out.stderr).into_owned()
}
