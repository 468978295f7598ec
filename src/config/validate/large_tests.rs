//! Files the size platform teams write (tens of thousands of routes): each
//! check costs time in proportion to the file, not to its square. The files
//! are made here, not kept in the repository.

use std::fmt::Write;
use std::time::{Duration, Instant};

use super::test_support::{errors, ok};

/// Far above what these files take when every check is linear (well under a
/// second in a debug build), far below what a check comparing every route
/// with every other, or locating each warning from the top of the file, takes
/// on them.
const BUDGET: Duration = Duration::from_secs(8);

const HEAD: &str = "[upstreams.api]\nurl = \"http://127.0.0.1:3000\"\n";

fn route(text: &mut String, name: &str, matcher: &str) {
    write!(
        text,
        "[[routes]]\nname = \"{name}\"\nupstream = \"api\"\nmatch = {matcher}\n"
    )
    .unwrap();
}

/// `n` services, each an exact path, a prefix taking some methods and a
/// webhook route, none shadowing another.
fn services(n: usize) -> String {
    let mut text = HEAD.to_owned();
    for i in 0..n {
        route(
            &mut text,
            &format!("s{i}-capture"),
            &format!("{{ path = \"/v1/s{i}/charges/capture\", methods = [\"POST\"] }}"),
        );
        route(
            &mut text,
            &format!("s{i}-read"),
            &format!("{{ path_prefix = \"/v1/s{i}/\", methods = [\"GET\"] }}"),
        );
        text.push_str("idempotency = false\n");
        route(
            &mut text,
            &format!("s{i}-hook"),
            &format!("{{ path = \"/hooks/s{i}\" }}"),
        );
        text.push_str("webhook = { scheme = \"github\", secrets_env = \"WHSEC\" }\n");
    }
    text
}

#[test]
fn a_file_of_many_routes_none_shadowed_is_checked_in_linear_time() {
    let text = services(7_000);
    let env = |name: &str| (name == "WHSEC").then(|| "a-webhook-secret".to_owned());
    let started = Instant::now();
    let config = super::test_support::ok_with(&text, &env);
    let took = started.elapsed();
    assert_eq!(config.routes.len(), 21_000);
    assert!(config.warnings.is_empty(), "{:?}", &config.warnings[..1]);
    assert!(took < BUDGET, "21,000 routes took {took:?}");
}

#[test]
fn a_warning_on_every_route_of_a_large_file_is_located_in_linear_time() {
    let mut text = HEAD.to_owned();
    route(&mut text, "all", "{ path_prefix = \"/\" }");
    for i in 0..20_000 {
        route(
            &mut text,
            &format!("r{i}"),
            &format!("{{ path_prefix = \"/v1/r{i}/\" }}"),
        );
    }
    let started = Instant::now();
    let config = ok(&text);
    let took = started.elapsed();
    assert_eq!(config.warnings.len(), 20_000);
    // The last route starts at line 3 + 4 * 20,000.
    assert!(
        config.warnings[19_999].starts_with("t.toml:80003:1: routes[20000]: "),
        "{}",
        config.warnings[19_999]
    );
    assert!(took < BUDGET, "20,000 warnings took {took:?}");
}

/// In a file of thousands of routes an index is hard to count to: both
/// places of a repeated name are given by line.
#[test]
fn a_duplicate_route_name_far_from_the_first_names_both_lines() {
    let mut text = HEAD.to_owned();
    for i in 0..5_000 {
        let name = if i == 4_321 {
            "r10".to_owned()
        } else {
            format!("r{i}")
        };
        route(&mut text, &name, &format!("{{ path = \"/r{i}\" }}"));
    }
    assert_eq!(
        errors(&text),
        [
            "t.toml:17288:8: routes[4321].name: duplicate route name \"r10\" \
          (first at routes[10], line 44)"
        ]
    );
}
