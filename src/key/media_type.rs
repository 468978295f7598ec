//! `Content-Type` values (RFC 9110 §8.3.1): the media type, its parameters,
//! and the canonical form two values are compared by. Type, subtype and
//! parameter names are case-insensitive, a parameter value means the same
//! quoted or not, and whitespace around `;` and `=` carries nothing.

/// The media type of a `Content-Type` value, without parameters or spaces.
pub fn media_type(content_type: &[u8]) -> &[u8] {
    let end = memchr::memchr(b';', content_type).unwrap_or(content_type.len());
    content_type[..end].trim_ascii()
}

/// The value of the parameter `wanted` when `params` names it exactly once
/// (case-insensitive); `None` when it is absent or named twice, where readers
/// differ on which value counts.
pub fn sole_parameter(params: &[u8], wanted: &[u8]) -> Option<Vec<u8>> {
    let mut found = Parameters::new(params).filter(|(name, _)| name.eq_ignore_ascii_case(wanted));
    let (_, value) = found.next()?;
    found.next().is_none().then_some(value)
}

/// Every parameter of `params` (what follows a header value's first `;`), in
/// order, names lowercased and values unquoted; `None` when a piece is not a
/// `token=value` parameter (then readers differ on what the value says).
pub fn parameters(params: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut parsed = Parameters::new(params);
    let mut all = Vec::new();
    for (name, value) in parsed.by_ref() {
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return None;
        }
        all.push((name.to_ascii_lowercase(), value));
    }
    (!parsed.malformed).then_some(all)
}

/// `value` in the form that compares equal whatever the sender's spelling:
/// `type/subtype` lowercased, then each parameter in order as `;name=value`
/// with a lowercased name, the value quoted only when it is not a token, and
/// `charset`'s value lowercased (RFC 2046 §4.1.2: charset names are
/// case-insensitive). A value whose parameters do not parse stays as sent,
/// trimmed: it then matches only itself.
pub fn canonical(value: &[u8]) -> Vec<u8> {
    let value = value.trim_ascii();
    let mut out = media_type(value).to_ascii_lowercase();
    let Some(semicolon) = memchr::memchr(b';', value) else {
        return out;
    };
    let mut params = Parameters::new(&value[semicolon + 1..]);
    for (name, mut param) in params.by_ref() {
        let name = name.to_ascii_lowercase();
        if name == b"charset" {
            param.make_ascii_lowercase();
        }
        out.push(b';');
        out.extend_from_slice(&name);
        out.push(b'=');
        if !param.is_empty() && param.iter().all(|&b| is_tchar(b)) {
            out.extend_from_slice(&param);
        } else {
            out.push(b'"');
            for b in param {
                if matches!(b, b'"' | b'\\') {
                    out.push(b'\\');
                }
                out.push(b);
            }
            out.push(b'"');
        }
    }
    if params.malformed {
        return value.to_vec();
    }
    out
}

/// RFC 9110 §5.6.2 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The `name=value` parameters of a header value's tail, in order, values
/// unquoted (`\x` is `x`, RFC 9110 §5.6.4). Stops at the first piece that is
/// not a parameter, and says so in `malformed`.
struct Parameters<'a> {
    rest: &'a [u8],
    malformed: bool,
}

impl<'a> Parameters<'a> {
    fn new(params: &'a [u8]) -> Self {
        Self {
            rest: params,
            malformed: false,
        }
    }

    fn next_parameter(&mut self) -> Option<(&'a [u8], Vec<u8>)> {
        let rest = self.rest;
        let eq = memchr::memchr(b'=', rest)?;
        let name = rest[..eq].trim_ascii();
        let rest = rest[eq + 1..].trim_ascii_start();
        if let Some(quoted) = rest.strip_prefix(b"\"") {
            let mut value = Vec::new();
            let mut i = 0;
            loop {
                match quoted.get(i)? {
                    b'\\' => {
                        value.push(*quoted.get(i + 1)?);
                        i += 2;
                    }
                    b'"' => break,
                    &b => {
                        value.push(b);
                        i += 1;
                    }
                }
            }
            let after = quoted[i + 1..].trim_ascii_start();
            self.rest = after.strip_prefix(b";").unwrap_or(after);
            Some((name, value))
        } else {
            let end = memchr::memchr(b';', rest).unwrap_or(rest.len());
            self.rest = rest.get(end + 1..).unwrap_or_default();
            Some((name, rest[..end].trim_ascii().to_vec()))
        }
    }
}

impl<'a> Iterator for Parameters<'a> {
    type Item = (&'a [u8], Vec<u8>);

    fn next(&mut self) -> Option<Self::Item> {
        self.rest = self.rest.trim_ascii_start();
        // Empty pieces (`a=1;;b=2`, a trailing `;`) are skipped.
        while let Some(after) = self.rest.strip_prefix(b";") {
            self.rest = after.trim_ascii_start();
        }
        if self.rest.is_empty() || self.malformed {
            return None;
        }
        let parameter = self.next_parameter();
        if parameter.is_none() {
            self.malformed = true;
        }
        parameter
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(value: &str) -> String {
        String::from_utf8(canonical(value.as_bytes())).unwrap()
    }

    #[test]
    fn type_subtype_and_names_ignore_case() {
        assert_eq!(canon("TEXT/PLAIN"), "text/plain");
        assert_eq!(canon(" Text/Plain "), "text/plain");
        assert_eq!(
            canon("Text/Plain; CharSet=UTF-8"),
            canon("text/plain;charset=utf-8")
        );
    }

    #[test]
    fn quoting_and_spaces_do_not_count() {
        assert_eq!(
            canon("application/x-y ; Format = \"flowed\" ;q=1"),
            "application/x-y;format=flowed;q=1"
        );
        assert_eq!(canon("a/b; x=\"1 2\""), "a/b;x=\"1 2\"");
        assert_eq!(canon("a/b; x=\"q\\\"\""), "a/b;x=\"q\\\"\"");
        assert_eq!(canon("a/b;"), "a/b");
    }

    #[test]
    fn only_charset_values_fold_case() {
        assert_ne!(canon("a/b; name=X"), canon("a/b; name=x"));
        assert_eq!(
            canon("a/b; Charset=\"ISO-8859-1\""),
            "a/b;charset=iso-8859-1"
        );
    }

    #[test]
    fn a_quoted_semicolon_is_not_a_separator() {
        assert_ne!(canon("a/b; x=\"1;y=2\""), canon("a/b; x=1; y=2"));
    }

    #[test]
    fn unparsable_parameters_stay_as_sent() {
        assert_eq!(canon(" A/B; x=\"open "), "A/B; x=\"open");
        assert_eq!(canon("a/b; junk"), "a/b; junk");
    }

    #[test]
    fn finds_one_parameter() {
        assert_eq!(
            sole_parameter(b" charset=x; Boundary=\"a b\"", b"boundary").as_deref(),
            Some(&b"a b"[..])
        );
        assert_eq!(sole_parameter(b"a=1", b"b"), None);
        assert_eq!(sole_parameter(b"b=1; B=1", b"b"), None);
    }
}
