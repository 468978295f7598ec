//! The routes' paths indexed: the routes of an exact path, those of every
//! prefix a path starts with, and those matching any path. A look-up costs
//! with the path's length and the logarithm of the number of prefixes, not
//! with the number of routes, so a file of tens of thousands of routes is
//! checked in time with its size and a request finds its route in time
//! independent of the routes written before it.

use foldhash::HashMap;

use super::RouteMatch;

/// Route indices by path; every list holds its routes in file order.
#[derive(Debug)]
pub struct PathIndex {
    /// foldhash: looked up on every request. Only the config adds keys, so
    /// a client cannot crowd one bucket.
    exact: HashMap<Box<str>, Vec<usize>>,
    prefixes: Prefixes,
    /// Routes with neither `path` nor `path_prefix`.
    any: Vec<usize>,
}

impl PathIndex {
    /// A route with an exact `path` is indexed by it alone, as the matcher
    /// compares only that when both are set.
    pub fn new<'a>(matchers: impl IntoIterator<Item = &'a RouteMatch>) -> Self {
        let mut exact: HashMap<Box<str>, Vec<usize>> = HashMap::default();
        let mut prefixed = Vec::new();
        let mut any = Vec::new();
        for (i, matcher) in matchers.into_iter().enumerate() {
            match (&matcher.path, &matcher.path_prefix) {
                (Some(path), _) => exact.entry(path.as_str().into()).or_default().push(i),
                (None, Some(prefix)) => prefixed.push((prefix.as_str(), i)),
                (None, None) => any.push(i),
            }
        }
        Self {
            exact,
            prefixes: Prefixes::new(prefixed),
            any,
        }
    }

    /// The routes whose exact path is `path`.
    pub fn exact(&self, path: &str) -> &[usize] {
        self.exact.get(path).map_or(&[], Vec::as_slice)
    }

    /// The routes of each prefix `path` starts with, one list a prefix (the
    /// lists in no order).
    pub fn prefixed(&self, path: &str) -> impl Iterator<Item = &[usize]> {
        self.prefixes.of(path)
    }

    /// The routes whose path matches `path`, methods aside: those of its
    /// exact path, of the prefixes it starts with, and of any path.
    pub fn matching(&self, path: &str) -> impl Iterator<Item = &[usize]> {
        std::iter::once(self.exact(path))
            .chain(self.prefixed(path))
            .chain(std::iter::once(self.any.as_slice()))
    }
}

/// The distinct prefixes in sorted order, each with the longest other one that
/// is a prefix of it: the prefixes of a path are then one chain, walked from
/// the greatest prefix not above the path.
#[derive(Debug)]
struct Prefixes {
    sorted: Vec<Box<str>>,
    parent: Vec<Option<usize>>,
    routes: Vec<Vec<usize>>,
}

impl Prefixes {
    fn new(mut written: Vec<(&str, usize)>) -> Self {
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
            if prefixes.sorted.last().map(|last| &**last) == Some(prefix) {
                prefixes
                    .routes
                    .last_mut()
                    .expect("one per prefix")
                    .push(route);
                continue;
            }
            while let Some(&top) = chain.last()
                && !prefix.starts_with(&*prefixes.sorted[top])
            {
                chain.pop();
            }
            prefixes.parent.push(chain.last().copied());
            chain.push(prefixes.sorted.len());
            prefixes.sorted.push(prefix.into());
            prefixes.routes.push(vec![route]);
        }
        prefixes
    }

    /// The routes of every prefix `path` starts with.
    fn of(&self, path: &str) -> impl Iterator<Item = &[usize]> {
        // The greatest prefix not above `path`: every prefix of `path` is a
        // prefix of it, so on its chain; those on it no longer than what it
        // shares with `path` are the ones `path` starts with.
        let below = self.sorted.partition_point(|prefix| **prefix <= *path);
        let first = below.checked_sub(1);
        let shared = first.map_or(0, |at| common_len(&self.sorted[at], path));
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
