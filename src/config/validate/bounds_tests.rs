//! Lengths the file may write: names (metric labels), paths (a request
//! head must carry them), header names; and a long value refused is quoted
//! shortened, never whole.

use super::test_support::{errors, errors_with, ok, single};

/// A route named `name`, matching `matcher`, after `head`.
fn file(head: &str, name: &str, matcher: &str) -> String {
    format!(
        "{head}[upstreams.api]\nurl = \"http://127.0.0.1:3000\"\n\
         [[routes]]\nname = \"{name}\"\nupstream = \"api\"\nmatch = {matcher}\n"
    )
}

/// The start of an error too long to print whole.
fn head(error: &str) -> String {
    error.chars().take(300).collect()
}

const ANY: &str = "{ path_prefix = \"/\" }";

#[test]
fn a_name_is_at_most_128_bytes() {
    let longest = "n".repeat(128);
    assert_eq!(ok(&file("", &longest, ANY)).routes[0].name, longest);
    let long = "n".repeat(129);
    single(
        &file("", &long, ANY),
        "t.toml:4:8: routes[0].name: ",
        "the name is 129 bytes long: at most 128 bytes (letters, digits, '-', '_' or '.'), \
         as it labels metrics and log lines",
    );
    // Upstream names label metrics and log lines too.
    let text = format!(
        "[upstreams.{long}]\nurl = \"http://127.0.0.1:3000\"\n\
         [[routes]]\nname = \"r\"\nupstream = \"{long}\"\nmatch = {ANY}\n"
    );
    let found = errors(&text);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("at most 128 bytes"), "{}", found[0]);
}

#[test]
fn a_path_longer_than_a_request_head_can_be_is_refused() {
    let head = "[server]\nmax_header_bytes = \"1KiB\"\n";
    for field in ["path", "path_prefix"] {
        let fits = format!("/{}", "p".repeat(1023));
        let matcher = format!("{{ {field} = \"{fits}\" }}");
        let config = ok(&file(head, "r", &matcher));
        let matched = &config.routes[0].matcher;
        assert_eq!(
            matched.path.as_ref().or(matched.path_prefix.as_ref()),
            Some(&fits)
        );

        let over = format!("/{}", "p".repeat(1024));
        let matcher = format!("{{ {field} = \"{over}\" }}");
        let found = errors(&file(head, "r", &matcher));
        assert_eq!(found.len(), 1, "{found:#?}");
        let error = &found[0];
        assert!(
            error.starts_with(&format!(
                "t.toml:8:{}: routes[0].match.{field}: ",
                14 + field.len()
            )),
            "{error}"
        );
        assert!(
            error.contains(
                "the path is 1025 bytes long, more than server.max_header_bytes (1024 bytes) lets a request \
                 head carry: no request could match it"
            ),
            "{error}"
        );
        assert!(error.len() < 400, "{error}");
    }
    // The default head limit (32KiB) bounds a path too.
    let over = format!("/{}", "p".repeat(32 << 10));
    let found = errors(&file("", "r", &format!("{{ path = \"{over}\" }}")));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].contains("server.max_header_bytes (32768 bytes)"),
        "{}",
        found[0]
    );
}

#[test]
fn a_header_name_is_at_most_256_bytes() {
    let fits = "x".repeat(256);
    let over = "x".repeat(257);
    let fields = |name: &str| {
        [
            format!("key = [{{ header = \"{name}\" }}]"),
            format!("scope = [\"header:{name}\"]"),
            format!("fingerprint = [\"header:{name}\"]"),
            format!("replay_header = \"{name}\""),
            format!("expiry_header = \"{name}\""),
            format!("replay_exclude_headers = [\"{name}\"]"),
            format!("replay_headers = [\"{name}\"]"),
        ]
    };
    for written in fields(&fits) {
        ok(&file(&format!("[defaults]\n{written}\n"), "r", ANY));
    }
    for written in fields(&over) {
        let found = errors(&file(&format!("[defaults]\n{written}\n"), "r", ANY));
        assert_eq!(found.len(), 1, "{written}: {found:#?}");
        assert!(found[0].starts_with("t.toml:2:"), "{}", found[0]);
        assert!(
            found[0].contains("the header name is 257 bytes long: at most 256 bytes"),
            "{}",
            found[0]
        );
    }
}

/// A value of a MiB refused is quoted by its first 64 characters and its
/// length: the error goes to terminals, logs and reload answers.
#[test]
fn a_long_value_refused_is_quoted_shortened() {
    let long = "é".repeat(1 << 19);
    let shown = format!("\"{}\"… (1048576 bytes)", "é".repeat(64));
    for (written, shown) in [
        (format!("[server]\nlisten = \"{long}\"\n"), &shown),
        (format!("[server]\nmax_header_bytes = \"{long}\"\n"), &shown),
        (format!("[defaults]\nretention = \"{long}\"\n"), &shown),
        (format!("[defaults]\non_in_flight = \"{long}\"\n"), &shown),
        (format!("[defaults]\nmethods = [\"{long}\"]\n"), &shown),
        (format!("[defaults]\nscope = [\"{long}\"]\n"), &shown),
        (format!("[defaults]\nfingerprint = [\"{long}\"]\n"), &shown),
        (
            format!("[defaults]\nreplay_values = [\"{long}\", \"true\"]\n"),
            &shown,
        ),
        (format!("[store]\nbackend = \"{long}\"\n"), &shown),
    ] {
        let found = errors(&file(&written, "r", ANY));
        let error = &found[0];
        assert!(error.len() < 500, "{}", head(error));
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(error.contains(shown.as_str()), "{error}");
    }
    // Past a length bound the length alone is said; a path is checked
    // for its length before its form.
    let short_path = format!("x{}", "é".repeat(1000));
    for (name, matcher, said) in [
        (
            long.as_str(),
            ANY.to_owned(),
            "the name is 1048576 bytes long",
        ),
        (
            "r",
            format!("{{ path = \"x{long}\" }}"),
            "the path is 1048577 bytes long",
        ),
        ("r", format!("{{ path = \"{short_path}\" }}"), "\"xééé"),
        (
            "r",
            format!("{ANY}\n[admin]\ntoken_env = \"{long}=\""),
            "the environment variable name is 1048577 bytes long",
        ),
        (
            "r",
            format!("{{ path_prefix = \"/\", methods = [\"{long}\"] }}"),
            &shown,
        ),
    ] {
        let found = errors(&file("", name, &matcher));
        assert_eq!(found.len(), 1, "{}", head(&found[0]));
        assert!(found[0].len() < 500, "{}", head(&found[0]));
        assert!(found[0].contains(said), "{}", found[0]);
    }
    assert!(
        errors(&file("", "r", &format!("{{ path = \"{short_path}\" }}")))[0]
            .contains("… (2001 bytes) must start with \"/\""),
    );
}

#[test]
fn a_short_value_is_quoted_whole() {
    single(
        &file("[defaults]\non_in_flight = \"queue\"\n", "r", ANY),
        "t.toml:2:16: defaults.on_in_flight: ",
        "\"queue\" is not \"conflict\" or \"wait\"",
    );
}

/// Every error is short, whatever the length of what it is about.
fn all_short(found: &[String]) {
    for error in found {
        assert!(error.len() < 1500, "{}", head(error));
    }
}

/// A table key is a field's path in every message about it: past the
/// length a name may have, its first 128 characters are shown.
#[test]
fn a_long_table_key_is_shortened_in_the_field_path() {
    let long = "u".repeat(100_000);
    let shown = format!("{}…", "u".repeat(128));
    let text = file(
        &format!("[upstreams.{long}]\nurl = \"ftp://x\"\n"),
        "r",
        ANY,
    );
    let found = errors(&text);
    all_short(&found);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found[0].starts_with(&format!(
            "t.toml:1:1: upstreams.{shown}: the name is 100000 bytes long"
        )),
        "{}",
        found[0]
    );
    assert!(
        found[1].starts_with(&format!("t.toml:2:7: upstreams.{shown}.url: \"ftp://x\"")),
        "{}",
        found[1]
    );

    // Two regions of one address name each other in the message too.
    let regions = format!(
        "[region]\nname = \"{long}a\"\ntoken_env = \"T\"\n\
         [regions.{long}a]\ngateway = \"http://10.0.0.1\"\n\
         [regions.{long}b]\ngateway = \"http://10.0.0.1\"\n"
    );
    let found = errors_with(&file(&regions, "r", ANY), &|_| Some("t".repeat(40)));
    all_short(&found);
    assert!(
        found.iter().any(|e| e.contains(&format!(
            "regions.{shown}.gateway: regions.{shown}.gateway has the same address"
        ))),
        "{found:#?}"
    );
}

/// toml says which field it does not know by its key: a long one is
/// shortened in the message and in the field's path.
#[test]
fn a_long_unknown_field_is_shortened() {
    let long = "k".repeat(100_000);
    let said = format!(
        "unknown field `{}`… (100000 bytes), expected",
        "k".repeat(64)
    );
    for (written, path) in [
        (format!("[server]\n{long} = 1\n"), "server."),
        (format!("{long} = 1\n"), ""),
        (format!("[defaults]\n\"{long}\" = 1\n"), "defaults."),
    ] {
        let found = errors(&file(&written, "r", ANY));
        all_short(&found);
        assert_eq!(found.len(), 1, "{}", head(&found[0]));
        let field = format!("{path}{}…: ", "k".repeat(128));
        assert!(found[0].contains(&field), "{}", found[0]);
        assert!(found[0].contains(&said), "{}", found[0]);
    }
    // A short one is said whole, with the field it most likely meant.
    single(
        &file("[defaults]\nretentoin = \"1h\"\n", "r", ANY),
        "t.toml:2:1: defaults.retentoin: ",
        "unknown field `retentoin` (did you mean `retention`?), expected",
    );
}

/// The names a `*_env` field lists, a Redis key prefix, the parameter and
/// field names and JSON pointers a key is read from: each has a length
/// bound, said with where it is written.
#[test]
fn names_and_pointers_a_key_is_read_by_are_bounded() {
    let env = |name: &str| {
        [
            (
                format!("[admin]\ntoken_env = \"{name}\"\n"),
                "t.toml:2:13: admin.token_env: ",
            ),
            (
                format!("[admin]\ntoken_env = [\"A\", \"{name}\"]\n"),
                "t.toml:2:19: admin.token_env[1]: ",
            ),
            (
                format!("[store]\nbackend = \"postgres\"\nurl_env = \"{name}\"\n"),
                "t.toml:3:11: store.url_env: ",
            ),
            (
                format!("[store.encryption]\nkeys_env = [\"{name}\"]\n"),
                "t.toml:2:13: store.encryption.keys_env[0]: ",
            ),
            (
                format!(
                    "[region]\nname = \"eu\"\ntoken_env = \"{name}\"\n[regions.eu]\ngateway = \"http://e\"\n"
                ),
                "t.toml:3:13: region.token_env: ",
            ),
        ]
    };
    let over = "E".repeat(257);
    for (written, at) in env(&over) {
        let found = errors(&file(&written, "r", ANY));
        let refused: Vec<_> = found.iter().filter(|e| e.contains("bytes long")).collect();
        assert_eq!(refused.len(), 1, "{found:#?}");
        assert!(refused[0].starts_with(at), "{}", refused[0]);
        assert!(
            refused[0]
                .contains("the environment variable name is 257 bytes long: at most 256 bytes"),
            "{}",
            refused[0]
        );
    }
    let fits = "E".repeat(256);
    for (written, _) in env(&fits) {
        if let Err(found) = crate::config::parse(
            &file(&written, "r", ANY),
            std::path::Path::new("t.toml"),
            &|_| None,
        ) {
            assert!(!found.to_string().contains("bytes long"), "{found}");
        }
    }
    // A name listed twice is said once shortened, never whole.
    let long = "E".repeat(100_000);
    let found = errors(&file(
        &format!("[admin]\ntoken_env = [\"{long}\", \"{long}\"]\n"),
        "r",
        ANY,
    ));
    all_short(&found);
    assert_eq!(found.len(), 2, "{found:#?}");

    let webhook = |name: &str| {
        format!(
            "[upstreams.api]\nurl = \"http://127.0.0.1:3000\"\n[[routes]]\nname = \"r\"\n\
             upstream = \"api\"\nmatch = {ANY}\n\
             webhook = {{ scheme = \"stripe\", secrets_env = \"{name}\" }}\n"
        )
    };
    let found = errors(&webhook(&over));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].starts_with("t.toml:7:")
            && found[0].contains(
                "routes[0].webhook.secrets_env: the environment variable name is 257 bytes long"
            ),
        "{}",
        found[0]
    );

    let prefix = |p: &str| {
        format!(
            "[store]\nbackend = \"postgres\"\nurl = \"postgres://h/db\"\n\
             [store.redis]\nurl = \"redis://h\"\nkey_prefix = \"{p}\"\n"
        )
    };
    let fits = "p".repeat(256);
    let config = ok(&file(&prefix(&fits), "r", ANY));
    let crate::config::StoreConfig::Postgres(pg) = config.store else {
        panic!("not postgres")
    };
    assert_eq!(pg.redis.expect("redis").key_prefix, fits);
    single(
        &file(&prefix(&"p".repeat(257)), "r", ANY),
        "t.toml:6:14: store.redis.key_prefix: ",
        "the key prefix is 257 bytes long: at most 256 bytes",
    );

    let ns = "6ba7b811-9dad-11d1-80b4-00c04fd430c8";
    let name_fits = "n".repeat(256);
    let name_over = "n".repeat(257);
    let pointer_fits = format!("/{}", "p".repeat(1023));
    let pointer_over = format!("/{}", "p".repeat(1024));
    let source = |source: &str| format!("[defaults]\nkey = [{{ {source} }}]\n");
    for (fits, over, field, said) in [
        (
            source(&format!("query = \"{name_fits}\"")),
            source(&format!("query = \"{name_over}\"")),
            "t.toml:2:18: defaults.key[0].query: ",
            "the query parameter name is 257 bytes long: at most 256 bytes",
        ),
        (
            source(&format!("form_field = \"{name_fits}\"")),
            source(&format!("form_field = \"{name_over}\"")),
            "t.toml:2:23: defaults.key[0].form_field: ",
            "the form field name is 257 bytes long: at most 256 bytes",
        ),
        (
            source(&format!("json_pointer = \"{pointer_fits}\"")),
            source(&format!("json_pointer = \"{pointer_over}\"")),
            "t.toml:2:25: defaults.key[0].json_pointer: ",
            "the JSON pointer is 1025 bytes long: at most 1024 bytes",
        ),
        (
            source(&format!(
                "derive = [\"{pointer_fits}\"], namespace = \"{ns}\""
            )),
            source(&format!(
                "derive = [\"{pointer_over}\"], namespace = \"{ns}\""
            )),
            "t.toml:2:20: defaults.key[0].derive[0]: ",
            "the JSON pointer is 1025 bytes long: at most 1024 bytes",
        ),
        (
            source(&format!(
                "derive = [\"query:{name_fits}\"], namespace = \"{ns}\""
            )),
            source(&format!(
                "derive = [\"query:{name_over}\"], namespace = \"{ns}\""
            )),
            "t.toml:2:20: defaults.key[0].derive[0]: ",
            "the query parameter name is 257 bytes long: at most 256 bytes",
        ),
        (
            source(&format!(
                "derive = [\"form:{name_fits}\"], namespace = \"{ns}\""
            )),
            source(&format!(
                "derive = [\"form:{name_over}\"], namespace = \"{ns}\""
            )),
            "t.toml:2:20: defaults.key[0].derive[0]: ",
            "the form field name is 257 bytes long: at most 256 bytes",
        ),
        (
            source(&format!(
                "derive = [\"header:{}\"], namespace = \"{ns}\"",
                "h".repeat(256)
            )),
            source(&format!(
                "derive = [\"header:{}\"], namespace = \"{ns}\"",
                "h".repeat(257)
            )),
            "t.toml:2:20: defaults.key[0].derive[0]: ",
            "the header name is 257 bytes long: at most 256 bytes",
        ),
        (
            format!("[defaults]\nfingerprint_body = {{ include = [\"{pointer_fits}\"] }}\n"),
            format!("[defaults]\nfingerprint_body = {{ include = [\"{pointer_over}\"] }}\n"),
            "t.toml:2:33: defaults.fingerprint_body.include[0]: ",
            "the JSON pointer is 1025 bytes long: at most 1024 bytes",
        ),
        (
            format!("[defaults]\nfingerprint_body = {{ exclude = [\"{pointer_fits}\"] }}\n"),
            format!("[defaults]\nfingerprint_body = {{ exclude = [\"{pointer_over}\"] }}\n"),
            "t.toml:2:33: defaults.fingerprint_body.exclude[0]: ",
            "the JSON pointer is 1025 bytes long: at most 1024 bytes",
        ),
    ] {
        ok(&file(&fits, "r", ANY));
        single(&file(&over, "r", ANY), field, said);
    }

    // Refused for its form, a long one is quoted shortened.
    let long = "x".repeat(100_000);
    for written in [
        source(&format!("json_pointer = \"{long}\"")),
        source(&format!("derive = [\"{long}\"], namespace = \"{ns}\"")),
        source(&format!("derive = [\"/a\"], namespace = \"{long}\"")),
        format!("[defaults]\nfingerprint_body = {{ include = [\"{long}\"] }}\n"),
    ] {
        let found = errors(&file(&written, "r", ANY));
        assert_eq!(found.len(), 1, "{}", head(&found[0]));
        all_short(&found);
    }
}

/// Route and upstream names are quoted shortened in the messages that
/// name them, as every other value is.
#[test]
fn a_long_route_or_upstream_name_is_quoted_shortened() {
    // The longest name a file may have: said in warnings of a file taken.
    let name = "r".repeat(128);
    let shown = format!("\"{}\"… (128 bytes)", "r".repeat(64));
    let text = format!(
        "[server]\nshutdown_grace = \"1s\"\n\
         [upstreams.{name}]\nurl = \"http://127.0.0.1:3000\"\ntimeout = \"2s\"\n\
         [[routes]]\nname = \"{name}\"\nupstream = \"{name}\"\nmatch = {ANY}\n\
         [[routes]]\nname = \"b\"\nupstream = \"{name}\"\nmatch = {ANY}\n"
    );
    let warnings = ok(&text).warnings;
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    for said in [
        format!("upstream {shown}: a keyed request"),
        format!("route \"b\" is shadowed by route {shown} (routes[0])"),
    ] {
        assert!(warnings.iter().any(|w| w.contains(&said)), "{warnings:#?}");
    }

    // And in errors: a route that cannot cross regions.
    let text = format!(
        "[region]\nname = \"eu\"\ntoken_env = \"T\"\n[regions.eu]\ngateway = \"http://e\"\n\
         [upstreams.api]\nurl = \"http://127.0.0.1:3000\"\n\
         [[routes]]\nname = \"{name}\"\nupstream = \"api\"\nmatch = {ANY}\n\
         scope = [\"header:via\"]\n"
    );
    let found = errors_with(&text, &|_| Some("t".repeat(40)));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].contains(&format!("route {shown} reads \"header:via\" in its scope")),
        "{}",
        found[0]
    );
}
/// serde quotes a string of the wrong type whole: it is quoted as a
/// refused value is.
#[test]
fn a_long_string_of_the_wrong_type_is_quoted_shortened() {
    let long = "q".repeat(100_000);
    let shown = format!("\"{}\"… (100000 bytes)", "q".repeat(64));
    for (written, at) in [
        (
            format!("[defaults]\nfingerprint_body = \"{long}\"\n"),
            "t.toml:2:20: defaults.fingerprint_body: invalid type: string ",
        ),
        (
            format!("[defaults]\nkey = \"{long}\"\n"),
            "t.toml:2:7: defaults.key: invalid type: string ",
        ),
    ] {
        let found = errors(&file(&written, "r", ANY));
        all_short(&found);
        assert_eq!(found.len(), 1, "{}", head(&found[0]));
        assert!(
            found[0].starts_with(&format!("{at}{shown}, expected")),
            "{}",
            found[0]
        );
    }
}

/// What an upstream's or a gateway's URL holds between or after its
/// brackets is quoted as the URL is: shortened, never whole.
#[test]
fn a_long_bracketed_host_is_quoted_shortened() {
    let long = "x".repeat(1000);
    let url = |written: &str| file(&format!("[upstreams.b]\nurl = \"{written}\"\n"), "r", ANY);
    for (written, said) in [
        (
            format!("http://[{long}]:80"),
            format!(
                "is not a valid URL: \"[{}\"… (1002 bytes) is not an IPv6 address: brackets \
                 hold one; an IPv4 address or a name is written without them",
                "x".repeat(63)
            ),
        ),
        (
            format!("http://[::1]{long}"),
            format!(
                "is not a valid URL: \"{}\"… (1000 bytes) after the brackets is not a port \
                 (\":\" and digits)",
                "x".repeat(64)
            ),
        ),
    ] {
        let found = errors(&url(&written));
        assert_eq!(found.len(), 1, "{}", head(&found[0]));
        assert!(
            found[0].starts_with("t.toml:2:7: upstreams.b.url: \"http://["),
            "{}",
            head(&found[0])
        );
        assert!(found[0].ends_with(&said), "{}", head(&found[0]));
    }
    // Short, whole, a control character escaped.
    single(
        &url("http://[a\\u001b]"),
        "t.toml:2:7: upstreams.b.url: ",
        "\"[a\\u{1b}]\" is not an IPv6 address",
    );
}
