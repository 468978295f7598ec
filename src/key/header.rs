use super::KeyError;

/// The key carried by a header value: an RFC 8941 sf-string (`"abc"`, with `\"`
/// and `\\` escapes) is unwrapped to its content, anything else is taken as is;
/// then [`super::validate`]d.
pub fn from_header_value(value: &[u8]) -> Result<String, KeyError> {
    let _ = value;
    todo!("header key")
}
