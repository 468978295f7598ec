//! A route name given on the command line, as the commands' messages say
//! it back. Any name is looked up: a route renamed or removed keeps its
//! records until they expire, and records stored under a name longer than
//! a route may have now (an older build took such names) are reached as the
//! admin API reaches them. Output names no route, so no bound is needed.

use std::fmt;

use crate::config::{NAME_MAX_BYTES, quoted};

/// `route` for a message: quoted whole when a route could be named so,
/// else by its start and its length (a paste gone wrong says a MiB once
/// per message otherwise).
pub(super) fn shown(route: &str) -> Shown<'_> {
    Shown(route)
}

pub(super) struct Shown<'a>(&'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let route = self.0;
        if route.len() <= NAME_MAX_BYTES {
            write!(f, "{route:?}")
        } else {
            write!(f, "{}", quoted(route))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn a_name_is_said_whole_up_to_the_longest_a_route_may_have() {
        let longest = "r".repeat(128);
        assert_eq!(shown(&longest).to_string(), format!("\"{longest}\""));
        assert_eq!(shown("a\nb").to_string(), "\"a\\nb\"");
        assert_eq!(
            shown(&"r".repeat(129)).to_string(),
            format!("\"{}\"… (129 bytes)", "r".repeat(64))
        );
    }
}
