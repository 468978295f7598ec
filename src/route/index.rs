//! The first route in file order that takes a request, found without trying
//! every route before it: only the routes whose path matches (its exact path,
//! the prefixes it starts with, the routes of any path) are tried, and of
//! those the earliest whose methods match wins.

use crate::config::{PathIndex, RouteMatch};

/// Up to this many routes, trying each in turn costs less than a look-up
/// (hashing the path, searching the prefixes) unless nearly every request
/// takes the last routes: a look-up costs about what trying 20 routes does
/// (docs/configuration.md, "Large configs").
const SCAN_UP_TO: usize = 32;

#[derive(Debug)]
pub struct RouteIndex {
    paths: PathIndex,
}

impl RouteIndex {
    /// `None` when the routes are few enough to be tried in turn.
    pub fn worth_building<'a>(
        matchers: impl ExactSizeIterator<Item = &'a RouteMatch>,
    ) -> Option<Self> {
        (matchers.len() > SCAN_UP_TO).then(|| Self::new(matchers))
    }

    pub fn new<'a>(matchers: impl IntoIterator<Item = &'a RouteMatch>) -> Self {
        Self {
            paths: PathIndex::new(matchers),
        }
    }

    /// The first route in file order whose path matches `path` and for which
    /// `takes` (given its index) holds.
    pub fn first(&self, path: &str, takes: impl Fn(usize) -> bool) -> Option<usize> {
        let mut first: Option<usize> = None;
        for candidates in self.paths.matching(path) {
            // Each list is in file order: past the best so far, none can win.
            let before = first.unwrap_or(usize::MAX);
            if let Some(&i) = (candidates.iter())
                .take_while(|&&i| i < before)
                .find(|&&i| takes(i))
            {
                first = Some(i);
            }
        }
        first
    }
}
