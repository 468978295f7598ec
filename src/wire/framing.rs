//! How an HTTP/1 message's body is delimited (RFC 9112 §6), read one way
//! for both engines: a client's request (server/http1/), an upstream's
//! answer and the request sent to it (proxy/http1/), and the answer written
//! to a client. A rule fixed here is fixed on both sides.

use http::HeaderName;

/// How a body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// No body and no framing field (a GET and the like; a HEAD answer).
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// The chunked transfer coding.
    Chunked,
    /// At the end of the connection, which then cannot be reused.
    UntilClose,
}

/// Whether a `Content-Length` value may be a list of one repeated number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lists {
    /// `5, 5` is one length, as RFC 9110 §8.6 lets a recipient read it.
    Allowed,
    /// One number per field: a client has no reason to send a list, and
    /// refusing it is the other choice §8.6 gives.
    Refused,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LengthError {
    /// Not `1*DIGIT` (`+5`, `0x5`, ` `, a list where none is allowed).
    #[error("Content-Length is not a decimal number")]
    NotANumber,
    /// Two values that differ (`5, 6`, or two fields).
    #[error("Content-Length values differ")]
    Differ,
}

/// The length `Content-Length` declares, read from each of its field values
/// in turn: `None` before any, the one length after; every value must
/// declare the same. Only digits: `+5` or `0x5` could be read another way
/// by the next parser, and overflow is refused as not a number.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ContentLength(Option<u64>);

impl ContentLength {
    pub fn note(&mut self, value: &[u8], lists: Lists) -> Result<(), LengthError> {
        if lists == Lists::Refused || !value.contains(&b',') {
            return self.one(value);
        }
        for item in value.split(|&b| b == b',') {
            self.one(item.trim_ascii())?;
        }
        Ok(())
    }

    fn one(&mut self, digits: &[u8]) -> Result<(), LengthError> {
        let length = decimal(digits).ok_or(LengthError::NotANumber)?;
        match self.0 {
            Some(seen) if seen != length => Err(LengthError::Differ),
            _ => {
                self.0 = Some(length);
                Ok(())
            }
        }
    }

    pub fn get(self) -> Option<u64> {
        self.0
    }
}

/// `1*DIGIT` as a `u64`; `None` for anything else, overflow included.
pub fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |sum, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        sum.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CodingError {
    /// A value that is not text, or a coding that is not a token.
    #[error("Transfer-Encoding is not a list of codings")]
    Syntax,
    /// A coding after `chunked`, or `chunked` twice: RFC 9112 §6.1 has it
    /// applied once, last.
    #[error("chunked is not the final transfer coding, or is applied twice")]
    ChunkedNotLast,
}

/// What the `Transfer-Encoding` fields of a message say, read field by
/// field in order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TransferEncoding {
    /// A field was present.
    pub present: bool,
    /// The final coding is `chunked` (then it is the only `chunked`).
    pub chunked: bool,
    /// Codings other than `chunked` and `identity`, in order, as written
    /// (`gzip` of `gzip, chunked`).
    pub others: Vec<String>,
    /// `identity` codings seen (RFC 2616's "no coding", still sent by old
    /// servers).
    pub identities: usize,
    /// Empty list items seen (`chunked,` or an empty field).
    pub empty_items: usize,
}

impl TransferEncoding {
    pub fn note(&mut self, value: &[u8]) -> Result<(), CodingError> {
        let value = std::str::from_utf8(value).map_err(|_| CodingError::Syntax)?;
        self.present = true;
        let mut items = 0;
        for coding in value.split(',').map(str::trim) {
            if coding.is_empty() {
                self.empty_items += 1;
                continue;
            }
            items += 1;
            if self.chunked {
                return Err(CodingError::ChunkedNotLast);
            }
            // `transfer-coding = token *( OWS ";" OWS transfer-parameter )`:
            // the name must be a token, whatever parameters follow.
            let name = coding.split(';').next().unwrap_or("").trim_end();
            if !is_token(name.as_bytes()) {
                return Err(CodingError::Syntax);
            }
            if coding.eq_ignore_ascii_case("chunked") {
                self.chunked = true;
            } else if coding.eq_ignore_ascii_case("identity") {
                self.identities += 1;
            } else {
                self.others.push(coding.to_owned());
            }
        }
        if items == 0 {
            self.empty_items += 1;
        }
        Ok(())
    }

    /// The value is exactly one `chunked`, the one form the gateway reads
    /// on a request (it forwards the body re-framed, so no other coding
    /// would survive the trip).
    pub fn is_just_chunked(&self) -> bool {
        self.chunked && self.others.is_empty() && self.identities == 0 && self.empty_items == 0
    }
}

/// `tchar` of RFC 9110 §5.6.2.
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `token = 1*tchar`.
pub fn is_token(bytes: &[u8]) -> bool {
    !bytes.is_empty() && bytes.iter().all(|&b| is_tchar(b))
}

/// The framing field a name would become for a peer that folds `_` into
/// `-` and runs of separators into one (as several servers and CGI-style
/// gateways do), when it is not that field already: `Transfer_Encoding`,
/// `transfer--encoding`, `Content_-Length`. Such a peer would read a
/// second framing that this one never saw.
pub fn framing_look_alike(name: &HeaderName) -> bool {
    let name = name.as_str().as_bytes();
    if !name.contains(&b'_') && !name.windows(2).any(|w| w == b"--") {
        return false;
    }
    // Exactly the fields' lengths after folding; anything longer is not.
    let mut folded = [0u8; 17];
    let mut len = 0;
    let mut previous_separator = false;
    for &b in name {
        let separator = b == b'-' || b == b'_';
        if separator && previous_separator {
            continue;
        }
        previous_separator = separator;
        if len == folded.len() {
            return false;
        }
        folded[len] = if separator { b'-' } else { b };
        len += 1;
    }
    let folded = &folded[..len];
    folded == b"transfer-encoding" || folded == b"content-length"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn length(values: &[&str], lists: Lists) -> Result<Option<u64>, LengthError> {
        let mut length = ContentLength::default();
        for value in values {
            length.note(value.as_bytes(), lists)?;
        }
        Ok(length.get())
    }

    #[test]
    fn content_length_is_digits_and_one_number() {
        for lists in [Lists::Allowed, Lists::Refused] {
            assert_eq!(length(&[], lists), Ok(None));
            assert_eq!(length(&["0"], lists), Ok(Some(0)));
            assert_eq!(length(&["5", "5"], lists), Ok(Some(5)));
            assert_eq!(length(&["18446744073709551615"], lists), Ok(Some(u64::MAX)));
            for bad in [
                "+5",
                "-5",
                "0x5",
                "5 ",
                " 5",
                "",
                "5a",
                "18446744073709551616",
                "5;",
            ] {
                assert_eq!(
                    length(&[bad], lists),
                    Err(LengthError::NotANumber),
                    "{bad:?}"
                );
            }
            assert_eq!(length(&["5", "6"], lists), Err(LengthError::Differ));
        }
        assert_eq!(length(&["5, 5"], Lists::Allowed), Ok(Some(5)));
        assert_eq!(length(&["5,5", "5"], Lists::Allowed), Ok(Some(5)));
        assert_eq!(length(&["5, 6"], Lists::Allowed), Err(LengthError::Differ));
        assert_eq!(
            length(&["5,"], Lists::Allowed),
            Err(LengthError::NotANumber)
        );
        assert_eq!(
            length(&["+5, 5"], Lists::Allowed),
            Err(LengthError::NotANumber)
        );
        assert_eq!(
            length(&["5, 5"], Lists::Refused),
            Err(LengthError::NotANumber)
        );
    }

    fn codings(values: &[&str]) -> Result<TransferEncoding, CodingError> {
        let mut te = TransferEncoding::default();
        for value in values {
            te.note(value.as_bytes())?;
        }
        Ok(te)
    }

    #[test]
    fn transfer_encoding_has_chunked_once_and_last() {
        let te = codings(&["Chunked"]).unwrap();
        assert!(te.chunked && te.is_just_chunked());
        let te = codings(&["gzip, chunked"]).unwrap();
        assert!(te.chunked && !te.is_just_chunked());
        assert_eq!(te.others, ["gzip"]);
        let te = codings(&["gzip", "chunked"]).unwrap();
        assert!(te.chunked && !te.is_just_chunked());
        let te = codings(&["identity"]).unwrap();
        assert!(te.present && !te.chunked && te.others.is_empty());
        let te = codings(&[""]).unwrap();
        assert!(te.present && !te.chunked && !te.is_just_chunked());
        assert!(!codings(&["chunked,"]).unwrap().is_just_chunked());
        assert!(codings(&["gzip;q=1, chunked"]).unwrap().chunked);
        for bad in [
            &["chunked, gzip"][..],
            &["chunked", "chunked"],
            &["chunked, chunked"],
        ] {
            assert_eq!(codings(bad), Err(CodingError::ChunkedNotLast), "{bad:?}");
        }
        for bad in ["chu nked", "\"chunked\"", "a@b, chunked"] {
            assert_eq!(codings(&[bad]), Err(CodingError::Syntax), "{bad:?}");
        }
        assert_eq!(
            TransferEncoding::default().note(&[0xff]),
            Err(CodingError::Syntax)
        );
    }

    #[test]
    fn look_alikes_of_framing_fields_are_caught_and_nothing_else() {
        for name in [
            "transfer_encoding",
            "Transfer_Encoding",
            "transfer--encoding",
            "transfer---encoding",
            "transfer___encoding",
            "transfer-_encoding",
            "content_length",
            "Content__Length",
        ] {
            let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
            assert!(framing_look_alike(&name), "{name}");
        }
        for name in [
            "transfer-encoding",
            "content-length",
            "x_api_key",
            "content_type",
            "transfer_encodings",
            "x-transfer_encoding",
            "te",
            "a--b",
        ] {
            let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
            assert!(!framing_look_alike(&name), "{name}");
        }
    }

    #[test]
    fn tokens() {
        assert!(is_token(b"X-Api_Key!#$%&'*+.^`|~09"));
        for bad in [&b""[..], b"a b", b"a:b", b"a\"", b"(", b"\x80", b"a/b"] {
            assert!(!is_token(bad), "{bad:?}");
        }
    }
}
