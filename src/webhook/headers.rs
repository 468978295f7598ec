//! Reading a signature scheme's header fields.

use http::HeaderMap;

use super::Rejection;

/// The one value of `name` (lower case), as visible ASCII text. Absent,
/// repeated (which line would be the signed one?) or not text: refused.
pub fn single<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, Rejection> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (None, _) => Err(Rejection::MissingHeader(name)),
        (Some(_), Some(_)) => Err(Rejection::RepeatedHeader(name)),
        (Some(value), None) => value
            .to_str()
            .map(str::trim)
            .ok()
            .filter(|value| !value.is_empty())
            .ok_or(Rejection::Malformed(name)),
    }
}
