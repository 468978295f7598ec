//! Percent-escapes compared without regard to the case of their hex digits
//! (RFC 3986 §6.2.2.1: `/caf%c3%a9` and `/caf%C3%A9` are one path), by
//! upper-casing those digits on both sides: routes' paths once, when the
//! config is read, and a request's path as its route is looked for.

use std::borrow::Cow;

/// `path` with the hex digits of its percent-escapes upper-cased; borrowed,
/// and found with one `memchr`, when it has no `%` (the usual request) or
/// its escapes are upper-case already.
///
/// A digit is upper-cased by what comes before it alone (a `%`, or a `%`
/// and a hex digit), so a prefix's digits change as a longer path's do: a
/// route prefix ending in the middle of an escape (`/p%c`) still begins
/// every path it began (`/p%c3`), and `%` followed by anything but hex
/// digits is left as it is.
pub fn upper_escapes(path: &str) -> Cow<'_, str> {
    let bytes = path.as_bytes();
    let Some(first) = memchr::memchr(b'%', bytes) else {
        return Cow::Borrowed(path);
    };
    let Some(lower) = (first..bytes.len()).find(|&at| lowered(bytes, at)) else {
        return Cow::Borrowed(path);
    };
    let mut out = bytes.to_vec();
    for (at, byte) in out.iter_mut().enumerate().skip(lower) {
        // Looks back at `bytes`: the digits before are unchanged in kind.
        if lowered(bytes, at) {
            byte.make_ascii_uppercase();
        }
    }
    // Only ASCII letters changed, so the bytes are still UTF-8.
    Cow::Owned(String::from_utf8(out).expect("ASCII letters upper-cased in UTF-8"))
}

/// Whether the byte at `at` is a lower-case hex digit of a percent-escape.
fn lowered(bytes: &[u8], at: usize) -> bool {
    matches!(bytes[at], b'a'..=b'f')
        && match at {
            0 => false,
            1 => bytes[0] == b'%',
            _ => {
                bytes[at - 1] == b'%'
                    || (bytes[at - 2] == b'%' && bytes[at - 1].is_ascii_hexdigit())
            }
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_upper_cased_and_nothing_else() {
        for (path, upper) in [
            ("/caf%c3%a9", "/caf%C3%A9"),
            ("/caf%C3%a9/menu", "/caf%C3%A9/menu"),
            ("/x%2fy", "/x%2Fy"),
            ("/p%c", "/p%C"),
            ("%ab", "%AB"),
            ("/%%ab", "/%%AB"),
            ("/%zz/%fg/%gf", "/%zz/%Fg/%gf"),
            ("/abc%3a%", "/abc%3A%"),
            ("/%3aab", "/%3Aab"),
        ] {
            assert_eq!(upper_escapes(path), upper, "{path}");
            assert!(matches!(upper_escapes(path), Cow::Owned(_)), "{path}");
        }
        for path in [
            "/",
            "/v1/charges",
            "/caf%C3%A9",
            "/a%",
            "/é%",
            "/%zz",
            "/abcdef",
        ] {
            assert!(
                matches!(upper_escapes(path), Cow::Borrowed(p) if p == path),
                "{path}"
            );
        }
    }

    /// A prefix of a path upper-cases to a prefix of the path upper-cased,
    /// so prefix matching keeps every match it had.
    #[test]
    fn a_prefix_stays_a_prefix() {
        let path = "/%c3%a9/%2f%%a/%";
        let upper = upper_escapes(path);
        for end in 0..=path.len() {
            assert!(upper.starts_with(&*upper_escapes(&path[..end])), "{end}");
        }
    }
}
