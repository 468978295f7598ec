//! Which routes match every path another route matches (methods aside), found
//! without comparing every route with every other: a file of tens of
//! thousands of routes is checked in time with its size.
//!
//! A route with an exact `path` matches every path of a route with that same
//! exact `path`; a route with a `path_prefix` every path of a route whose
//! `path` or `path_prefix` starts with it (`shadow::covers`).

use crate::config::{PathIndex, RouteMatch};

pub struct Covering {
    paths: PathIndex,
}

impl Covering {
    pub fn new<'a>(matchers: impl Iterator<Item = &'a RouteMatch>) -> Self {
        Self {
            paths: PathIndex::new(matchers),
        }
    }

    /// The routes whose paths take every path `matcher` matches, each list
    /// in file order (the lists in no order).
    pub fn of(&self, matcher: &RouteMatch) -> impl Iterator<Item = &[usize]> {
        let exact = (matcher.path.as_deref()).map(|path| self.paths.exact(path));
        let path = (matcher.path.as_deref()).or(matcher.path_prefix.as_deref());
        let prefixes = path.into_iter().flat_map(|path| self.paths.prefixed(path));
        exact.into_iter().chain(prefixes)
    }
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

    fn covering(index: &Covering, matcher: &RouteMatch) -> Vec<usize> {
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
