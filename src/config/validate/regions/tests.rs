//! `[region]` and `[regions.*]`: what `check` accepts and how it refuses.

use std::path::Path;
use std::time::Duration;

use crate::config::{Config, ConfigErrors, parse};

const ROUTES: &str = crate::config::ONE_ROUTE;

const TOKEN: &str = "0123456789abcdef0123";

fn env(name: &str) -> Option<String> {
    match name {
        "REGION_TOKEN" => Some(format!("{TOKEN}\n")),
        "EMPTY" => Some("  ".into()),
        "SHORT_TOKEN" => Some("region-pass".into()),
        _ => None,
    }
}

fn with_routes(regions: &str) -> String {
    format!("{ROUTES}\n{regions}")
}

fn ok(regions: &str) -> Config {
    match parse(&with_routes(regions), Path::new("t.toml"), &env) {
        Ok(config) => config,
        Err(errors) => panic!("unexpected errors:\n{errors}"),
    }
}

fn errors(regions: &str) -> Vec<String> {
    match parse(&with_routes(regions), Path::new("t.toml"), &env) {
        Ok(_) => panic!("accepted:\n{regions}"),
        Err(ConfigErrors(errors)) => errors.iter().map(ToString::to_string).collect(),
    }
}

/// Exactly one error, at `line` of the whole file, naming `field` and saying `part`.
fn single(regions: &str, line: usize, field: &str, part: &str) {
    let errors = errors(regions);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let located = format!("t.toml:{line}:");
    assert!(errors[0].starts_with(&located), "{}", errors[0]);
    assert!(errors[0].contains(&format!(": {field}: ")), "{}", errors[0]);
    assert!(errors[0].contains(part), "{}", errors[0]);
    assert!(
        !errors[0].contains(TOKEN),
        "the token is never quoted: {}",
        errors[0]
    );
}

/// The line of the file (ROUTES first) on which the regions' text has `needle`.
fn line_of(regions: &str, needle: &str) -> usize {
    let text = with_routes(regions);
    let offset = text.find(needle).expect("needle in the text");
    text[..offset].matches('\n').count() + 1
}

const TWO: &str = r#"
[region]
name = "eu"
token_env = "REGION_TOKEN"

[regions.eu]
gateway = "https://idemgate.eu.internal:8443"

[regions.us]
gateway = "http://10.0.0.2:8080"
connect_timeout = "500ms"
timeout = "45s"
"#;

#[test]
fn without_region_nothing_changes() {
    assert_eq!(ok("").region, None);
}

#[test]
fn regions_resolve_with_defaults_and_the_trimmed_token() {
    let region = ok(TWO).region.expect("regions configured");
    assert_eq!(region.name, "eu");
    assert_eq!(region.token_env, "REGION_TOKEN");
    assert_eq!(region.token, TOKEN);
    let eu = &region.peers["eu"];
    assert_eq!(eu.gateway, "https://idemgate.eu.internal:8443");
    assert_eq!(eu.connect_timeout, Duration::from_secs(2));
    assert_eq!(eu.timeout, Duration::from_secs(30));
    assert_eq!(eu.ca, None);
    let us = &region.peers["us"];
    assert_eq!(us.connect_timeout, Duration::from_millis(500));
    assert_eq!(us.timeout, Duration::from_secs(45));
}

#[test]
fn this_region_must_be_among_the_regions() {
    let text = TWO.replace("name = \"eu\"", "name = \"ap\"");
    single(
        &text,
        line_of(&text, "\"ap\""),
        "region.name",
        "not one of the regions (eu, us)",
    );
    let alone = "[region]\nname = \"eu\"\ntoken_env = \"REGION_TOKEN\"\n";
    single(
        alone,
        line_of(alone, "\"eu\""),
        "region.name",
        "no [regions.NAME]",
    );
    let nameless = TWO.replace("name = \"eu\"\n", "");
    single(
        &nameless,
        line_of(&nameless, "[region]"),
        "region.name",
        "name is required",
    );
}

#[test]
fn regions_need_region() {
    let text = TWO.replace(
        "[region]\nname = \"eu\"\ntoken_env = \"REGION_TOKEN\"\n",
        "",
    );
    single(
        &text,
        line_of(&text, "[regions.eu]"),
        "regions.eu",
        "needs [region]",
    );
}

#[test]
fn region_names_are_unique() {
    let text = format!("{TWO}\n[regions.eu]\ngateway = \"http://10.0.0.9:8080\"\n");
    let errors = errors(&text);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].contains("duplicate"), "{}", errors[0]);
    let line = text
        .rfind("[regions.eu]")
        .map(|at| with_routes(&text[..at]).matches('\n').count() + 1);
    assert!(
        errors[0].starts_with(&format!("t.toml:{}:", line.unwrap())),
        "{}",
        errors[0]
    );
}

#[test]
fn gateways_are_http_or_https_urls() {
    for bad in [
        "ftp://10.0.0.2",
        "10.0.0.2:8080",
        "http://u:p@h",
        "http://h/base",
        "http://10.0.0.2:0",
        "http://10.0.0.2:+80",
    ] {
        let text = TWO.replace("http://10.0.0.2:8080", bad);
        single(&text, line_of(&text, bad), "regions.us.gateway", "");
    }
    let missing = TWO.replace("gateway = \"http://10.0.0.2:8080\"\n", "");
    single(
        &missing,
        line_of(&missing, "[regions.us]"),
        "regions.us.gateway",
        "required",
    );
    let ca = TWO.replace("timeout = \"45s\"", "timeout = \"45s\"\nca = \"ca.pem\"");
    single(
        &ca,
        line_of(&ca, "ca.pem"),
        "regions.us.ca",
        "only applies to an https://",
    );
    let bad_name = format!("{TWO}\n[regions.\"a b\"]\ngateway = \"http://h\"\n");
    single(
        &bad_name,
        line_of(&bad_name, "[regions.\"a b\"]"),
        "regions.a b",
        "not a valid name",
    );
}

/// docs/multi-region.md: each region has gateways of its own.
#[test]
fn two_regions_cannot_share_a_gateway() {
    for same in [
        "https://idemgate.eu.internal:8443",
        "https://IDEMGATE.eu.internal:8443/",
    ] {
        let text = TWO.replace("http://10.0.0.2:8080", same);
        single(
            &text,
            line_of(&text, "[regions.us]") + 1,
            "regions.us.gateway",
            "regions.eu.gateway has the same address",
        );
    }
    let text = TWO
        .replace("https://idemgate.eu.internal:8443", "https://eu.internal")
        .replace("http://10.0.0.2:8080", "https://eu.internal:443");
    single(
        &text,
        line_of(&text, "https://eu.internal:443"),
        "regions.us.gateway",
        "keys homed in us run in eu",
    );
    // Another port or scheme is another gateway.
    ok(&TWO.replace("http://10.0.0.2:8080", "https://idemgate.eu.internal:9443"));
    ok(&TWO.replace("http://10.0.0.2:8080", "http://idemgate.eu.internal:8443"));
}

#[test]
fn timeouts_are_positive_durations() {
    let text = TWO.replace("\"500ms\"", "\"0s\"");
    single(
        &text,
        line_of(&text, "\"0s\""),
        "regions.us.connect_timeout",
        "",
    );
    let text = TWO.replace("\"45s\"", "\"soon\"");
    let errors = errors(&text);
    assert!(errors[0].contains("regions.us.timeout"), "{errors:#?}");
}

#[test]
fn the_token_variable_must_be_set_and_not_empty() {
    let unset = TWO.replace("REGION_TOKEN", "NOT_SET");
    single(
        &unset,
        line_of(&unset, "\"NOT_SET\""),
        "region.token_env",
        "NOT_SET is not set or is empty",
    );
    let empty = TWO.replace("REGION_TOKEN", "EMPTY");
    single(
        &empty,
        line_of(&empty, "\"EMPTY\""),
        "region.token_env",
        "not set or is empty",
    );
    let missing = TWO.replace("token_env = \"REGION_TOKEN\"\n", "");
    single(
        &missing,
        line_of(&missing, "[region]"),
        "region.token_env",
        "required",
    );
}

#[test]
fn unknown_region_fields_are_errors() {
    let text = TWO.replace("timeout = \"45s\"", "timeout = \"45s\"\nweight = 2");
    let found = errors(&text);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("weight"), "{}", found[0]);
    let text = TWO.replace("token_env", "token = \"inline\"\ntoken_env");
    assert!(errors(&text)[0].contains("unknown field `token`"));
}

#[test]
fn client_cert_scopes_cannot_cross_regions() {
    let text = format!(
        "[server.tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\nclient_ca = \"ca.pem\"\n\
         [defaults]\nscope = [\"client_cert\"]\n{TWO}"
    );
    let found = errors(&text);
    assert_eq!(found.len(), 2, "{found:#?}");
    let region = format!("t.toml:{}:", line_of(&text, "[region]"));
    assert!(
        found.iter().any(|e| e.starts_with(&region)
            && e.contains(": region: ")
            && e.contains("\"client_cert\"")),
        "{found:#?}"
    );
}

/// Forwards carry no client certificate: a listener that requires one
/// would refuse every forward to its region.
#[test]
fn a_listener_requiring_client_certificates_cannot_take_forwards() {
    let text =
        format!("[server.tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\nclient_ca = \"ca.pem\"\n{TWO}");
    single(
        &text,
        line_of(&text, "client_ca"),
        "server.tls.client_ca",
        "every forward to this region would be refused",
    );
    ok(TWO);
}

#[test]
fn check_describes_the_regions_without_the_token() {
    let text = crate::config::describe(&ok(TWO));
    assert!(
        text.contains("region eu (token from REGION_TOKEN)"),
        "{text}"
    );
    assert!(
        text.contains("  eu        https://idemgate.eu.internal:8443 connect_timeout 2s, timeout 30s, this region"),
        "{text}"
    );
    assert!(
        text.contains("  us        http://10.0.0.2:8080 connect_timeout 500ms, timeout 45s\n"),
        "{text}"
    );
    assert!(!text.contains(TOKEN), "{text}");
}

#[test]
fn a_forward_timeout_not_longer_than_the_upstreams_is_warned_about() {
    let config = ok(&TWO.replace("\"45s\"", "\"30s\""));
    let line = line_of(TWO, "\"45s\"");
    assert_eq!(config.warnings.len(), 1, "{:#?}", config.warnings);
    let warning = &config.warnings[0];
    assert!(warning.starts_with(&format!("t.toml:{line}:")), "{warning}");
    assert!(
        warning.contains(
            "regions.us.timeout: 30s is not longer than the timeout 30s of upstream \"api\""
        ),
        "{warning}"
    );
    assert!(ok(TWO).warnings.is_empty(), "45s > 30s");
}

/// A retry the home region holds waiting (`on_in_flight = "wait"`) is
/// answered after up to `wait_timeout`: a forward that gives up sooner says
/// 503 for a request the home answers.
#[test]
fn a_forward_timeout_not_longer_than_a_wait_is_warned_about() {
    let waiting = format!("{TWO}\n[defaults]\non_in_flight = \"wait\"\nwait_timeout = \"50s\"\n");
    let config = ok(&waiting);
    let line = line_of(&waiting, "\"45s\"");
    assert_eq!(config.warnings.len(), 1, "{:#?}", config.warnings);
    let warning = &config.warnings[0];
    assert!(warning.starts_with(&format!("t.toml:{line}:")), "{warning}");
    assert!(
        warning.contains(
            "regions.us.timeout: 45s is not longer than the wait_timeout 50s of route \"all\""
        ),
        "{warning}"
    );
    assert!(
        ok(&waiting.replace("\"50s\"", "\"40s\""))
            .warnings
            .is_empty(),
        "45s > 40s, 30s"
    );
    // A route that answers conflicts at once does not wait.
    assert!(
        ok(&waiting.replace("\"wait\"", "\"conflict\""))
            .warnings
            .is_empty()
    );
}

#[test]
fn an_unreadable_region_ca_fails_check_naming_the_field() {
    let text = TWO
        .replace("http://10.0.0.2:8080", "https://10.0.0.2:8443")
        .replace(
            "timeout = \"45s\"",
            "timeout = \"45s\"\nca = \"/nonexistent/ca.pem\"",
        );
    let errors: Vec<String> = crate::region::tls_errors(&ok(&text))
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].contains("regions.us.ca"), "{}", errors[0]);
    assert!(errors[0].contains("/nonexistent/ca.pem"), "{}", errors[0]);
}

#[test]
fn a_short_token_is_warned_about_without_quoting_it() {
    let text = TWO.replace(
        "token_env = \"REGION_TOKEN\"",
        "token_env = \"SHORT_TOKEN\"",
    );
    let config = ok(&text);
    assert_eq!(config.warnings.len(), 1, "{:#?}", config.warnings);
    let warning = &config.warnings[0];
    assert!(warning.contains("region.token_env"), "{warning}");
    assert!(warning.contains("11 characters long"), "{warning}");
    assert!(!warning.contains("region-pass"), "{warning}");
    assert!(ok(TWO).warnings.is_empty());
}

/// What a route reads that a forward rewrites says what goes wrong. The
/// home is chosen by route, scope and key, so a scope or key read from
/// such a field files the key apart from where its retries look: one may
/// run it again. The fingerprint is only computed at the home: a retry that
/// reaches it without the hop is compared with the field as the hop left it
/// and refused 422, never run again.
#[test]
fn a_field_a_forward_rewrites_is_refused_for_what_it_would_do() {
    let text = format!("[defaults]\nscope = [\"header:X-Forwarded-For\"]\n{TWO}");
    let found = errors(&text);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("in its scope"), "{}", found[0]);
    assert!(found[0].contains("run it again"), "{}", found[0]);

    let text = format!(
        "[defaults]\nfingerprint = [\"method\", \"path\", \"body\", \"header:Via\"]\n{TWO}"
    );
    let found = errors(&text);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("in its fingerprint"), "{}", found[0]);
    assert!(found[0].contains("422"), "{}", found[0]);
    assert!(!found[0].contains("run it again"), "{}", found[0]);
}

/// A route refused for its name, or written without one, is named by its
/// place in the file in what else is said of it, never as route "".
#[test]
fn a_route_without_a_valid_name_is_named_by_its_place() {
    let routes = |name: &str| {
        format!(
            "[upstreams.api]\nurl = \"http://127.0.0.1:3000\"\n\
             [[routes]]\nname = \"ok\"\nupstream = \"api\"\nmatch = {{ path = \"/a\" }}\n\
             [[routes]]\n{name}upstream = \"api\"\nmatch = {{ path = \"/b\" }}\n\
             scope = [\"header:Via\"]\n{TWO}"
        )
    };
    for (name, refused) in [
        (
            "name = \"a b\"\n",
            "routes[1].name: \"a b\" is not a valid name",
        ),
        (
            &format!("name = \"{}\"\n", "n".repeat(200)),
            "routes[1].name: the name is 200 bytes long",
        ),
        ("", "routes[1].name: name is required"),
    ] {
        let found = match parse(&routes(name), Path::new("t.toml"), &env) {
            Ok(_) => panic!("accepted: {name}"),
            Err(ConfigErrors(errors)) => errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        };
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(found.iter().any(|e| e.contains(refused)), "{found:#?}");
        let region = found
            .iter()
            .find(|e| e.contains(": region: "))
            .expect("a region error");
        assert!(
            region.contains(": region: routes[1] reads \"header:via\" in its scope"),
            "{region}"
        );
        assert!(!region.contains("\"\""), "{region}");
    }
}
