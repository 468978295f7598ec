//! `multipart/form-data` bodies (RFC 7578, RFC 2046 §5.1) read as their
//! parts, so that the fingerprint does not depend on the boundary a client
//! picked for one attempt.

use memchr::memmem;

use super::media_type::{self, parameters, sole_parameter};

/// One part, as the fingerprint sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part<'a> {
    pub name: Option<Vec<u8>>,
    pub filename: Option<Vec<u8>>,
    /// `filename*` (RFC 8187), as sent: some clients give a non-ASCII file
    /// name only this way (RFC 7578 §4.2 advises against it).
    pub filename_ext: Option<Vec<u8>>,
    /// In its canonical form (`media_type::canonical`), so that a retry
    /// spelling it in another case compares equal; `text/plain` when the part
    /// has none (RFC 7578 §4.4).
    pub content_type: Vec<u8>,
    pub content: &'a [u8],
}

/// Most header fields one part may carry; a part with more makes the body
/// unreadable as multipart (it is then compared by its bytes).
const MAX_PART_HEADERS: usize = 16;

/// The boundary of a `multipart/form-data` Content-Type value, or `None`
/// for any other media type.
pub fn boundary(content_type: &[u8]) -> Option<Vec<u8>> {
    let media = media_type::media_type(content_type);
    if !media.eq_ignore_ascii_case(b"multipart/form-data") {
        return None;
    }
    let params = &content_type[memchr::memchr(b';', content_type)? + 1..];
    let boundary = sole_parameter(params, b"boundary")?;
    // RFC 2046 §5.1.1: 1 to 70 characters.
    (!boundary.is_empty() && boundary.len() <= 70).then_some(boundary)
}

/// The parts of a body, in order, or `None` when it is not well-formed
/// multipart with this boundary.
pub fn parts<'a>(body: &'a [u8], boundary: &[u8]) -> Option<Vec<Part<'a>>> {
    let mut delimiter = b"--".to_vec();
    delimiter.extend_from_slice(boundary);
    // The first delimiter opens the body or ends a line of the preamble.
    let mut rest = if body.starts_with(&delimiter) {
        &body[delimiter.len()..]
    } else {
        let mut with_crlf = b"\r\n".to_vec();
        with_crlf.extend_from_slice(&delimiter);
        let at = memmem::find(body, &with_crlf)?;
        &body[at + with_crlf.len()..]
    };
    let mut next_delimiter = b"\r\n".to_vec();
    next_delimiter.extend_from_slice(&delimiter);
    let finder = memmem::Finder::new(&next_delimiter);
    let mut parts = Vec::new();
    loop {
        if rest.starts_with(b"--") {
            // The close delimiter; the epilogue after it is ignored.
            return Some(parts);
        }
        // Transport padding, then the line break ending the delimiter line.
        let padding = rest
            .iter()
            .take_while(|b| matches!(b, b' ' | b'\t'))
            .count();
        rest = rest[padding..].strip_prefix(b"\r\n")?;
        let end = finder.find(rest)?;
        parts.push(part(&rest[..end])?);
        rest = &rest[end + next_delimiter.len()..];
    }
}

fn part(raw: &[u8]) -> Option<Part<'_>> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_PART_HEADERS];
    let (head_len, fields) = match httparse::parse_headers(raw, &mut fields).ok()? {
        httparse::Status::Complete(done) => done,
        httparse::Status::Partial => return None,
    };
    let mut part = Part {
        name: None,
        filename: None,
        filename_ext: None,
        content_type: b"text/plain".to_vec(),
        content: &raw[head_len..],
    };
    // A field or a disposition parameter sent twice, or parameters that do
    // not parse, leave it to each reader which value counts: such a part is
    // not read (the body compares by its bytes), never taken for one of them.
    let mut seen_disposition = false;
    let mut seen_type = false;
    for field in fields.iter() {
        if field.name.eq_ignore_ascii_case("content-disposition") {
            if std::mem::replace(&mut seen_disposition, true) {
                return None;
            }
            let value = field.value;
            let params = memchr::memchr(b';', value).map_or(&b""[..], |at| &value[at + 1..]);
            for (name, value) in parameters(params)? {
                let slot = match name.as_slice() {
                    b"name" => &mut part.name,
                    b"filename" => &mut part.filename,
                    b"filename*" => &mut part.filename_ext,
                    _ => continue,
                };
                if slot.replace(value).is_some() {
                    return None;
                }
            }
        } else if field.name.eq_ignore_ascii_case("content-type") {
            if std::mem::replace(&mut seen_type, true) {
                return None;
            }
            part.content_type = media_type::canonical(field.value);
        }
    }
    Some(part)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(boundary: &str, file: &str) -> Vec<u8> {
        format!(
            "preamble\r\n--{boundary}\r\n\
             Content-Disposition: form-data; name=\"amount\"\r\n\r\n\
             100\r\n--{boundary}  \r\n\
             Content-Disposition: form-data; name=\"doc\"; filename=\"a \\\"b\\\".txt\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n\
             {file}\r\n--{boundary}--\r\nepilogue"
        )
        .into_bytes()
    }

    #[test]
    fn boundary_of_content_type() {
        assert_eq!(
            boundary(b"multipart/form-data; boundary=abc").as_deref(),
            Some(&b"abc"[..])
        );
        assert_eq!(
            boundary(b"Multipart/Form-Data; charset=x; boundary=\"a b\"").as_deref(),
            Some(&b"a b"[..])
        );
        assert_eq!(boundary(b"multipart/form-data"), None);
        // Readers differ on which of two boundaries counts.
        assert_eq!(
            boundary(b"multipart/form-data; boundary=a; Boundary=\"b\""),
            None
        );
        assert_eq!(boundary(b"multipart/mixed; boundary=abc"), None);
        assert_eq!(boundary(b"application/json"), None);
    }

    #[test]
    fn reads_parts_in_order() {
        let raw = body("XyZ", "line1\r\nline2");
        let parts = parts(&raw, b"XyZ").unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].name.as_deref(), Some(&b"amount"[..]));
        assert_eq!(parts[0].filename, None);
        assert_eq!(parts[0].content_type, b"text/plain");
        assert_eq!(parts[0].content, b"100");
        assert_eq!(parts[1].name.as_deref(), Some(&b"doc"[..]));
        assert_eq!(parts[1].filename.as_deref(), Some(&b"a \"b\".txt"[..]));
        assert_eq!(parts[1].content_type, b"application/octet-stream");
        assert_eq!(parts[1].content, b"line1\r\nline2");
    }

    #[test]
    fn an_extended_file_name_is_read() {
        let raw = b"--b\r\nContent-Disposition: form-data; name=\"f\"; \
                    filename*=UTF-8''%C3%A9.txt\r\n\r\nx\r\n--b--";
        let parts = parts(raw, b"b").unwrap();
        assert_eq!(parts[0].filename, None);
        assert_eq!(
            parts[0].filename_ext.as_deref(),
            Some(&b"UTF-8''%C3%A9.txt"[..])
        );
    }

    #[test]
    fn another_boundary_reads_the_same() {
        let a = body("first", "x");
        let b = body("second-boundary", "x");
        assert_eq!(parts(&a, b"first"), parts(&b, b"second-boundary"));
    }

    #[test]
    fn content_type_compares_case_insensitively() {
        let with = |content_type: &str| {
            format!(
                "--b\r\nContent-Disposition: form-data; name=\"n\"\r\n\
                 {content_type}\r\nx\r\n--b--"
            )
            .into_bytes()
        };
        let none = with("");
        let upper = with("Content-Type: TEXT/PLAIN\r\n");
        let mixed = with("content-type:  Text/Plain ; CharSet=\"UTF-8\"\r\n");
        let lower = with("Content-Type: text/plain; charset=utf-8\r\n");
        assert_eq!(parts(&none, b"b"), parts(&upper, b"b"));
        assert_eq!(parts(&mixed, b"b"), parts(&lower, b"b"));
        assert_ne!(parts(&none, b"b"), parts(&lower, b"b"));
    }

    fn one_part(head: &str) -> Vec<u8> {
        format!("--b\r\n{head}\r\n\r\nx\r\n--b--").into_bytes()
    }

    #[test]
    fn a_field_twice_in_a_part_is_unreadable() {
        for head in [
            "Content-Disposition: form-data; name=\"a\"\r\n\
             Content-Disposition: form-data; name=\"b\"",
            "Content-Disposition: form-data; name=\"a\"\r\n\
             Content-Type: text/plain\r\ncontent-type: image/png",
        ] {
            assert_eq!(parts(&one_part(head), b"b"), None, "{head}");
        }
    }

    #[test]
    fn a_disposition_parameter_twice_is_unreadable() {
        for head in [
            "Content-Disposition: form-data; name=\"a\"; name=\"b\"",
            "Content-Disposition: form-data; name=a; filename=x; FILENAME=y",
            "Content-Disposition: form-data; name=a; filename*=UTF-8''x; filename*=UTF-8''y",
        ] {
            assert_eq!(parts(&one_part(head), b"b"), None, "{head}");
        }
    }

    #[test]
    fn unparsable_disposition_parameters_are_unreadable() {
        for head in [
            "Content-Disposition: form-data; name=\"a\"; filename=\"open",
            "Content-Disposition: form-data; name=\"a\"; junk",
        ] {
            assert_eq!(parts(&one_part(head), b"b"), None, "{head}");
        }
        // Other parameters and empty pieces are no twins.
        let fine = one_part("Content-Disposition: form-data; name=\"a\";; filename=\"f\"; x=1");
        let read = parts(&fine, b"b").unwrap();
        assert_eq!(read[0].name.as_deref(), Some(&b"a"[..]));
        assert_eq!(read[0].filename.as_deref(), Some(&b"f"[..]));
    }

    #[test]
    fn malformed_is_none() {
        assert_eq!(parts(b"no delimiter here", b"abc"), None);
        assert_eq!(parts(b"--abc\r\n\r\nunterminated", b"abc"), None);
        assert_eq!(parts(b"--abcjunk\r\n\r\nx\r\n--abc--", b"abc"), None);
        assert_eq!(parts(b"--abc--", b"abc"), Some(Vec::new()));
    }
}
