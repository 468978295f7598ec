//! Lengths the file may write: names (metric labels), paths (a request
//! head must carry them), header names; and a long value refused is quoted
//! shortened, never whole.

use super::test_support::{errors, ok, single};

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
    let env_name = format!("{long}=");
    let shown_env_name = format!("\"{}\"… (1048577 bytes)", "é".repeat(64));
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
        (
            format!("[admin]\ntoken_env = \"{env_name}\"\n"),
            &shown_env_name,
        ),
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
