use crate::config::FingerprintPart;

/// What a request offers to the fingerprint.
pub struct FingerprintInput<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub body: &'a [u8],
    /// Lower-case header name → its value, for the `header:NAME` parts.
    pub header: &'a dyn Fn(&str) -> Option<&'a [u8]>,
}

/// Hex hash of the configured parts of a request. With `canonical_json`, a body
/// that parses as JSON is hashed by value (object keys sorted, insignificant
/// whitespace dropped, numbers by value); a body that does not parse is hashed by bytes.
pub fn fingerprint(parts: &[FingerprintPart], input: &FingerprintInput<'_>, canonical_json: bool) -> String {
    let _ = (parts, input, canonical_json);
    todo!("fingerprint")
}
