//! `[server] problem_base`: where the documentation of each problem code
//! lives. Problems are made in places that hold no config (the HTTP/1
//! server refusing a head before any route is known, the admin plane), so
//! the loaded value is kept here, process-wide, and swapped on reload.

use arc_swap::ArcSwapOption;
use http::HeaderValue;

static BASE: ArcSwapOption<String> = ArcSwapOption::const_empty();

/// Sets the base every problem made from now on uses (`None`: `type` is the code).
pub fn set(base: Option<&str>) {
    BASE.store(base.map(|b| std::sync::Arc::new(b.to_owned())));
}

/// The `type` of a problem with this code, and the `Link` field naming it
/// (`None` without a base).
pub fn problem_type(code: &'static str) -> (std::borrow::Cow<'static, str>, Option<HeaderValue>) {
    let base = BASE.load();
    typed(base.as_deref().map(String::as_str), code)
}

pub(super) fn typed(
    base: Option<&str>,
    code: &'static str,
) -> (std::borrow::Cow<'static, str>, Option<HeaderValue>) {
    match base {
        None => (std::borrow::Cow::Borrowed(code), None),
        Some(base) => {
            let uri = format!("{base}{code}");
            // The base was checked to be a plain absolute URI.
            let link = HeaderValue::from_str(&format!("<{uri}>; rel=\"describedby\"")).ok();
            (std::borrow::Cow::Owned(uri), link)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_and_link_from_the_base() {
        let (kind, link) = typed(None, "invalid-key");
        assert_eq!(kind, "invalid-key");
        assert_eq!(link, None);
        let (kind, link) = typed(Some("https://docs.example.com/errors/"), "invalid-key");
        assert_eq!(kind, "https://docs.example.com/errors/invalid-key");
        assert_eq!(
            link.unwrap(),
            "<https://docs.example.com/errors/invalid-key>; rel=\"describedby\""
        );
    }
}
