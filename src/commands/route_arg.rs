//! A route name given on the command line, checked before any message
//! says it back.

use super::output::EXIT_FAILURE;
use crate::config::{NAME_MAX_BYTES, quoted};

/// `Ok` when some route could be named `route`. A longer name (a paste gone
/// wrong) names none: it is refused, quoted by its start and length, since
/// each message about the route would say it again whole. Any name within
/// the bound is looked up, as a route renamed or removed keeps its records.
pub(super) fn check(command: &str, route: &str) -> Result<(), i32> {
    if route.len() <= NAME_MAX_BYTES {
        return Ok(());
    }
    eprintln!(
        "idemgate {command}: the route name {} is longer than any route's \
         (at most {NAME_MAX_BYTES} bytes)",
        quoted(route)
    );
    Err(EXIT_FAILURE)
}
