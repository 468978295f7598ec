//! Routes match in file order, first match wins: a route whose every request an
//! earlier route already takes can never match. Found here, reported as a warning.

use std::ops::Range;

use super::context::Ctx;
use crate::config::{RouteConfig, RouteMatch};

pub fn warn_shadowed(ctx: &mut Ctx<'_>, routes: &[(RouteConfig, Range<usize>)]) {
    for (later, (route, span)) in routes.iter().enumerate() {
        let shadow = routes[..later]
            .iter()
            .enumerate()
            .find(|(_, (earlier, _))| covers(&earlier.matcher, &route.matcher));
        if let Some((earlier, (by, _))) = shadow {
            ctx.warn(
                Some(span.clone()),
                format!("routes[{later}]"),
                format!(
                    "route {:?} is shadowed by route {:?} (routes[{earlier}]) and will never match",
                    route.name, by.name
                ),
            );
        }
    }
}

/// Whether every request `later` matches is matched by `earlier`. Prefixes are
/// plain string prefixes, as the matcher applies them.
pub fn covers(earlier: &RouteMatch, later: &RouteMatch) -> bool {
    let later_path = later.path.as_deref().or(later.path_prefix.as_deref());
    let paths = match (&earlier.path, &earlier.path_prefix, later_path) {
        (Some(exact), None, Some(_)) => later.path.as_ref() == Some(exact),
        (None, Some(prefix), Some(path)) => path.starts_with(prefix.as_str()),
        _ => false,
    };
    let methods = match (&earlier.methods, &later.methods) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(taken), Some(wanted)) => wanted.iter().all(|m| taken.contains(m)),
    };
    paths && methods
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(p: &str, methods: Option<&[&str]>) -> RouteMatch {
        RouteMatch {
            path: None,
            path_prefix: Some(p.into()),
            methods: methods.map(|m| m.iter().map(|s| s.parse().unwrap()).collect()),
        }
    }

    fn exact(p: &str) -> RouteMatch {
        RouteMatch {
            path: Some(p.into()),
            ..RouteMatch::default()
        }
    }

    #[test]
    fn shorter_prefix_covers_longer() {
        assert!(covers(&prefix("/", None), &prefix("/v1", None)));
        assert!(covers(&prefix("/v1", None), &exact("/v1/charges")));
        assert!(!covers(&prefix("/v1/charges", None), &prefix("/v1", None)));
        assert!(!covers(&exact("/v1"), &prefix("/v1", None)));
        assert!(covers(&exact("/v1"), &exact("/v1")));
    }

    #[test]
    fn methods_must_be_a_superset() {
        assert!(covers(
            &prefix("/", Some(&["POST", "PUT"])),
            &prefix("/a", Some(&["POST"]))
        ));
        assert!(!covers(&prefix("/", Some(&["POST"])), &prefix("/a", None)));
        assert!(!covers(
            &prefix("/", Some(&["POST"])),
            &prefix("/a", Some(&["PUT"]))
        ));
        assert!(covers(&prefix("/", None), &prefix("/a", Some(&["PUT"]))));
    }
}
