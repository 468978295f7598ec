//! Field values that hold control characters. RFC 9110 §5.5 does not allow
//! them and httparse refuses such a head whole; but when the field is a
//! route's idempotency key, the client is owed the `invalid-key` problem
//! that docs/behaviour.md names for control characters, which only the gateway,
//! knowing the route, can give. So such a head is parsed again without
//! those fields, and their names travel with the request
//! ([`crate::wire::fields::UnreadableFields`]); the gateway refuses it either
//! way, and never forwards it.

use http::header::{self, HeaderName};

/// What a head's field lines hold, read line by line.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct FieldLines {
    /// Complete field lines seen.
    pub fields: usize,
    /// Names of the fields whose values hold control characters.
    pub unreadable: Vec<HeaderName>,
}

/// Reads the complete field lines after the request line; `None` when a
/// line is wrong in any other way (a bad name, obs-fold, NUL or a bare CR,
/// which RFC 9110 §5.5 says to refuse), or when a field that frames the
/// message or names the host is among the unreadable ones: the head is
/// then refused as malformed, as httparse refused it.
pub(super) fn read(head: &[u8]) -> Option<FieldLines> {
    let mut lines = head.split_inclusive(|&b| b == b'\n');
    lines.next()?;
    let mut read = FieldLines {
        fields: 0,
        unreadable: Vec::new(),
    };
    for line in lines {
        let Some(line) = line.strip_suffix(b"\n") else {
            break; // not complete yet
        };
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            break; // the end of the head
        }
        let colon = line.iter().position(|&b| b == b':')?;
        let name = HeaderName::from_bytes(&line[..colon]).ok()?;
        let value = &line[colon + 1..];
        read.fields += 1;
        if value.iter().any(|&b| b == 0 || b == b'\r') {
            return None;
        }
        if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            if frames_the_message(&name) {
                return None;
            }
            read.unreadable.push(name);
        }
    }
    Some(read)
}

/// Fields the connection itself reads: left out, they would be misread.
fn frames_the_message(name: &HeaderName) -> bool {
    [
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
        header::HOST,
        header::CONNECTION,
        header::EXPECT,
    ]
    .contains(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_fields_with_control_characters() {
        let read = read(b"POST / HTTP/1.1\r\nHost: h\r\nIdempotency-Key: a\x01b\r\nX-A: \x7f\r\nX-T: a\tb\r\n\r\nbody")
            .expect("readable");
        assert_eq!(read.fields, 4);
        assert_eq!(read.unreadable, ["idempotency-key", "x-a"]);
    }

    #[test]
    fn other_faults_stay_malformed() {
        for head in [
            &b"POST / HTTP/1.1\r\nHost: h\r\nX-A: a\x00b\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nHost: h\r\nX-A: a\rb\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: h\r\nX A: \x01\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: h\r\n folded\x01\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: h\x01\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\x01\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\x01\r\n\r\n",
        ] {
            assert_eq!(read(head), None, "{head:?}");
        }
    }

    #[test]
    fn an_incomplete_line_is_not_read_yet() {
        let read = read(b"POST / HTTP/1.1\r\nX-A: \x01\r\nX-B: partial\x01").expect("so far");
        assert_eq!(read.fields, 1);
        assert_eq!(read.unreadable, ["x-a"]);
    }
}
