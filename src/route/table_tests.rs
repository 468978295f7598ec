//! A request finds the route trying every route in file order would find,
//! whether the table tries them in turn or looks it up: over random tables of
//! overlapping prefixes, exact paths (repeated, with other methods), routes of
//! any path and routes of some methods, and random requests.
//! `PROPTEST_CASES=100000 cargo test --release route::table_tests` runs it
//! longer.

use std::sync::Arc;

use http::Method;
use proptest::prelude::*;
use proptest::test_runner::Config;

use super::index::RouteIndex;
use super::table::{Route, RouteTable, route};
use crate::config::RouteMatch;
use crate::wire::percent_case::upper_escapes;

const METHODS: [Method; 4] = [Method::GET, Method::POST, Method::PUT, Method::DELETE];

/// Few letters, so that paths and prefixes overlap often; "é" and "è" share
/// their first byte, so a path and a prefix can share part of a character;
/// `%` and hex digits of either case make escapes, whole or cut short.
fn path(parts: std::ops::Range<usize>) -> impl Strategy<Value = String> {
    let part = prop_oneof!["/", "a", "b", "é", "è", "%", "c", "C", "3"];
    proptest::collection::vec(part, parts).prop_map(|parts| parts.concat())
}

/// A route's path as the config keeps it: escapes upper-cased.
fn kept(path: String) -> String {
    upper_escapes(&path).into_owned()
}

/// `None` (any method) or a set of methods, maybe empty (matches nothing).
fn methods() -> impl Strategy<Value = Option<Vec<Method>>> {
    proptest::option::of(proptest::sample::subsequence(METHODS.to_vec(), 0..=3))
}

fn matcher() -> impl Strategy<Value = RouteMatch> {
    let paths = prop_oneof![
        3 => path(0..4).prop_map(|p| (Some(p), None)),
        4 => path(0..4).prop_map(|p| (None, Some(p))),
        1 => Just((None, None)),
        // Both written: the exact path alone decides.
        1 => (path(0..4), path(0..4)).prop_map(|(p, q)| (Some(p), Some(q))),
    ];
    (paths, methods()).prop_map(|((path, path_prefix), methods)| RouteMatch {
        path: path.map(kept),
        path_prefix: path_prefix.map(kept),
        methods,
    })
}

fn request() -> impl Strategy<Value = (Method, String)> {
    (proptest::sample::select(METHODS.to_vec()), path(0..6))
}

fn config() -> Config {
    let mut config = Config {
        failure_persistence: None,
        ..Config::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 1_000;
    }
    config
}

proptest! {
    #![proptest_config(config())]

    /// Tables from empty to well past the size where the index takes over.
    #[test]
    fn the_first_match_in_file_order_is_found(
        matchers in proptest::collection::vec(matcher(), 0..48),
        requests in proptest::collection::vec(request(), 1..24),
    ) {
        let routes: Vec<Arc<Route>> = (matchers.iter().enumerate())
            .map(|(i, matcher)| Arc::new(route(&format!("r{i}"), matcher.clone())))
            .collect();
        let index = RouteIndex::new(&matchers);
        let table = RouteTable::of(routes.clone());
        // Beside the random requests, each route's own paths, one longer,
        // and each with its escapes lower-cased (as curl sends them).
        let written = (matchers.iter())
            .flat_map(|matcher| [matcher.path.clone(), matcher.path_prefix.clone()])
            .flatten()
            .flat_map(|path| [format!("{path}a"), path.to_lowercase(), path]);
        let own = written.flat_map(|path| METHODS.map(|method| (method, path.clone())));
        for (method, path) in requests.into_iter().chain(own) {
            let (method, path) = (&method, path.as_str());
            // Trying every route, on the path with its escapes upper-cased.
            let upper = &*upper_escapes(path);
            let expected = routes.iter().position(|route| route.matches(method, upper));
            let takes = |at: usize| routes[at].matches(method, upper);
            prop_assert_eq!(index.first(upper, takes), expected, "{} {:?}", method, path);
            prop_assert_eq!(table.position(method, path), expected, "{} {:?}", method, path);
            let found = table.find(method, path).map(|route| route.name.clone());
            let name = expected.map(|at| routes[at].name.clone());
            prop_assert_eq!(found, name);
        }
    }
}
