//! The request path a route is matched on, with its dot segments resolved.
//!
//! An upstream that resolves `/public/../v1/charges` itself would otherwise
//! run a request the gateway routed as `/public/...`: a way around a route
//! that requires a key. So the gateway resolves dot segments (RFC 3986
//! §5.2.4, `%2e` read as `.`) before matching, and forwards the path it
//! matched. Nothing else is rewritten: `//` and other escapes go on as sent.

use http::Uri;
use http::uri::{self, PathAndQuery};

use crate::wire::dot_segment::{dots, is_dot_segment};

/// `uri` with its path's dot segments resolved; `None` when it has none
/// (the usual request: one pass over the path, no allocation).
pub fn resolve_dot_segments(uri: &Uri) -> Option<Result<Uri, http::Error>> {
    let path = uri.path();
    // Most paths have no `.` or `%` at all: one byte scan, no segment split
    // (`split` cost ~300 instructions, 1.7% of a pass-through; docs/adr/0007-hot-path-costs.md).
    let maybe = path.bytes().any(|b| b == b'.' || b == b'%');
    if !maybe || !path.split('/').any(is_dot_segment) {
        return None;
    }
    let resolved = resolved_path(path);
    let target = match uri.query() {
        Some(query) => format!("{resolved}?{query}"),
        None => resolved,
    };
    Some(rebuild(uri, &target))
}

fn rebuild(uri: &Uri, target: &str) -> Result<Uri, http::Error> {
    let mut parts = uri::Parts::default();
    parts.scheme = uri.scheme().cloned();
    parts.authority = uri.authority().cloned();
    parts.path_and_query = Some(PathAndQuery::try_from(target)?);
    Ok(Uri::from_parts(parts)?)
}

/// RFC 3986 §5.2.4 on an origin-form path: `.` goes, `..` takes the segment
/// before it (never above the root), and a path ending in either ends in `/`.
fn resolved_path(path: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    let mut segments = path.split('/').skip(1).peekable();
    let mut trailing_slash = false;
    while let Some(segment) = segments.next() {
        let last = segments.peek().is_none();
        match dots(segment) {
            Some(1) => trailing_slash = last,
            Some(_) => {
                kept.pop();
                trailing_slash = last;
            }
            None => {
                kept.push(segment);
                trailing_slash = false;
            }
        }
    }
    let mut out = String::with_capacity(path.len());
    for segment in &kept {
        out.push('/');
        out.push_str(segment);
    }
    if trailing_slash || out.is_empty() {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(target: &str) -> Option<String> {
        let uri: Uri = target.parse().expect("a valid target");
        resolve_dot_segments(&uri).map(|uri| uri.expect("rebuilt").to_string())
    }

    #[test]
    fn paths_without_dot_segments_are_left_alone() {
        for target in [
            "/",
            "/v1/charges",
            "/a.b/..c/...",
            "/a//b",
            "/.well-known/x",
        ] {
            assert_eq!(resolve(target), None, "{target}");
        }
    }

    #[test]
    fn dot_segments_resolve_as_rfc_3986_says() {
        let cases = [
            ("/public/../v1/charges", "/v1/charges"),
            ("/a/./b", "/a/b"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/../../etc", "/etc"),
            ("/..", "/"),
            ("/a/%2e%2E/v1/charges?x=1", "/v1/charges?x=1"),
            ("/a/.%2e/b", "/b"),
            ("/a//../b", "/a/b"),
            ("http://gw/x/../v1/charges", "http://gw/v1/charges"),
        ];
        for (target, resolved) in cases {
            assert_eq!(resolve(target).as_deref(), Some(resolved), "{target}");
        }
    }
}
