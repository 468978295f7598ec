//! Dot segments of a URI path (RFC 3986 §3.3): `.` and `..`, as routing
//! resolves them and config validation refuses them in a match path.

/// `.` or `..`, either dot possibly written `%2e`: a segment routing resolves
/// and config validation refuses in a route's match path.
pub fn is_dot_segment(segment: &str) -> bool {
    dots(segment).is_some()
}

/// 1 for `.`, 2 for `..` (either dot may be written `%2e` or `%2E`).
pub fn dots(segment: &str) -> Option<u8> {
    let mut rest = segment.as_bytes();
    let mut count = 0;
    while !rest.is_empty() {
        rest = if let Some(after) = rest.strip_prefix(b".") {
            after
        } else if rest.len() >= 3 && rest[..3].eq_ignore_ascii_case(b"%2e") {
            &rest[3..]
        } else {
            return None;
        };
        count += 1;
    }
    matches!(count, 1 | 2).then_some(count)
}
