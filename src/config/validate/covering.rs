//! Which routes match every path another route matches (methods aside), found
//! without comparing every route with every other: a file of tens of
//! thousands of routes is checked in time with its size.
//!
//! A route with an exact `path` matches every path of a route with that same
//! exact `path`; a route with a `path_prefix` every path of a route whose
//! `path` or `path_prefix` starts with it (`shadow::covers`).

use std::collections::HashMap;

use crate::config::RouteMatch;

pub struct Covering<'a> {
    exact: HashMap<&'a str, Vec<usize>>,
    prefixes: Prefixes<'a>,
}

impl<'a> Covering<'a> {
    pub fn new(matchers: impl Iterator<Item = &'a RouteMatch>) -> Self {
        let mut exact: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut prefixed = Vec::new();
        for (i, matcher) in matchers.enumerate() {
            match (&matcher.path, &matcher.path_prefix) {
                (Some(path), _) => exact.entry(path.as_str()).or_default().push(i),
                (None, Some(prefix)) => prefixed.push((prefix.as_str(), i)),
                (None, None) => {}
            }
        }
        Self {
            exact,
            prefixes: Prefixes::new(prefixed),
        }
    }

    /// The routes whose paths take every path `matcher` matches, each list
    /// in file order (the lists in no order).
    pub fn of(&self, matcher: &RouteMatch) -> impl Iterator<Item = &[usize]> {
        let exact = (matcher.path.as_deref()).and_then(|path| self.exact.get(path));
        let path = (matcher.path.as_deref()).or(matcher.path_prefix.as_deref());
        let prefixes = path.into_iter().flat_map(|path| self.prefixes.of(path));
        exact.map(Vec::as_slice).into_iter().chain(prefixes)
    }
}

/// The distinct prefixes in sorted order, each with the longest other one that
/// is a prefix of it: the prefixes of a path are then one chain, walked from
/// the greatest prefix not above the path.
struct Prefixes<'a> {
    sorted: Vec<&'a str>,
    parent: Vec<Option<usize>>,
    routes: Vec<Vec<usize>>,
}

impl<'a> Prefixes<'a> {
    fn new(mut written: Vec<(&'a str, usize)>) -> Self {
        written.sort_unstable();
        let mut prefixes = Self {
            sorted: Vec::new(),
            parent: Vec::new(),
            routes: Vec::new(),
        };
        // The chain of the last prefix: in sorted order, every prefix of a
        // string comes before it and all between start with that prefix.
        let mut chain: Vec<usize> = Vec::new();
        for (prefix, route) in written {
            if prefixes.sorted.last() == Some(&prefix) {
                prefixes
                    .routes
                    .last_mut()
                    .expect("one per prefix")
                    .push(route);
                continue;
            }
            while let Some(&top) = chain.last()
                && !prefix.starts_with(prefixes.sorted[top])
            {
                chain.pop();
            }
            prefixes.parent.push(chain.last().copied());
            chain.push(prefixes.sorted.len());
            prefixes.sorted.push(prefix);
            prefixes.routes.push(vec![route]);
        }
        prefixes
    }

    /// The routes of every prefix `path` starts with.
    fn of(&self, path: &str) -> impl Iterator<Item = &[usize]> {
        // The greatest prefix not above `path`: every prefix of `path` is a
        // prefix of it, so on its chain; those on it no longer than what it
        // shares with `path` are the ones `path` starts with.
        let below = self.sorted.partition_point(|prefix| *prefix <= path);
        let first = below.checked_sub(1);
        let shared = first.map_or(0, |at| common_len(self.sorted[at], path));
        std::iter::successors(first, |&at| self.parent[at])
            .filter(move |&at| self.sorted[at].len() <= shared)
            .map(|at| self.routes[at].as_slice())
    }
}

fn common_len(a: &str, b: &str) -> usize {
    (a.bytes().zip(b.bytes()))
        .take_while(|(x, y)| x == y)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(p: &str) -> RouteMatch {
        RouteMatch {
            path_prefix: Some(p.into()),
            ..RouteMatch::default()
        }
    }

    fn exact(p: &str) -> RouteMatch {
        RouteMatch {
            path: Some(p.into()),
            ..RouteMatch::default()
        }
    }

    fn covering(index: &Covering<'_>, matcher: &RouteMatch) -> Vec<usize> {
        let mut found: Vec<usize> = index.of(matcher).flatten().copied().collect();
        found.sort_unstable();
        found
    }

    /// The index finds what comparing every pair with `shadow::covers`
    /// (methods aside) finds.
    #[test]
    fn finds_what_comparing_every_pair_finds() {
        let matchers = [
            prefix("/"),
            prefix("/v1/"),
            exact("/v1/charges"),
            prefix("/v1/charges"),
            prefix("/v1/chargesX"),
            prefix("/v1/c"),
            exact("/v1/charges"),
            prefix("/v2"),
            prefix("/v1/"),
            exact("/v1"),
            prefix("/v1/charges/"),
            prefix("/a"),
            prefix("/ab"),
            prefix("/abc"),
            prefix("/ac"),
            exact("/abd"),
            prefix("/é/"),
            exact("/é/x"),
        ];
        let index = Covering::new(matchers.iter());
        for later in &matchers {
            let expected: Vec<usize> = (matchers.iter().enumerate())
                .filter(|(_, earlier)| super::super::shadow::covers(earlier, later))
                .map(|(i, _)| i)
                .collect();
            assert_eq!(covering(&index, later), expected, "{later:?}");
        }
    }
}
