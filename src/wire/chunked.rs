//! The chunked transfer coding (RFC 9112 §7.1), decoded from a connection's
//! read buffer as bytes arrive: request bodies from clients, answer bodies
//! from upstreams. Extensions and trailer fields are checked against the
//! grammar, then dropped: the gateway forwards neither.

use bytes::{Bytes, BytesMut};

use super::framing::is_tchar;

/// Longest chunk-size line (size, extensions, CRLF) and all trailer lines
/// together: past these the upstream is not speaking HTTP.
const MAX_SIZE_LINE: usize = 4096;
const MAX_TRAILERS: usize = 16 * 1024;
/// Extension bytes in one body, all chunks together (hyper's bound too):
/// a body of one-byte chunks each with a long extension would otherwise
/// cost far more to read than it carries.
pub const MAX_EXTENSION_BYTES: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk, this many bytes still to come.
    Data(u64),
    /// After a chunk's data, expecting its CRLF.
    DataEnd,
    /// After the last (zero) chunk: trailer lines until an empty one.
    Trailers {
        read: usize,
    },
    Done,
}

/// What one decoding step found.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    Data(Bytes),
    /// The buffer holds no complete next piece: read more.
    More,
    /// The body ended; what follows in the buffer belongs to the connection.
    End,
}

#[derive(Debug, thiserror::Error)]
#[error("invalid chunked body: {0}")]
pub struct ChunkedError(&'static str);

#[derive(Debug)]
pub struct ChunkedDecoder {
    state: State,
    /// Extension bytes read so far in this body.
    extension_bytes: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    pub fn new() -> Self {
        Self {
            state: State::Size,
            extension_bytes: 0,
        }
    }

    /// Takes the next piece of the body out of `buf`.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Step, ChunkedError> {
        loop {
            match self.state {
                State::Size => {
                    let Some(line) = take_line(buf, MAX_SIZE_LINE)? else {
                        return Ok(Step::More);
                    };
                    let (size, extensions) = size_line(&line)?;
                    self.extension_bytes += extensions;
                    if self.extension_bytes > MAX_EXTENSION_BYTES {
                        return Err(ChunkedError("chunk extensions too large"));
                    }
                    self.state = if size == 0 {
                        State::Trailers { read: 0 }
                    } else {
                        State::Data(size)
                    };
                }
                State::Data(remaining) => {
                    if buf.is_empty() {
                        return Ok(Step::More);
                    }
                    let take = usize::try_from(remaining)
                        .unwrap_or(usize::MAX)
                        .min(buf.len());
                    let left = remaining - take as u64;
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data(left)
                    };
                    return Ok(Step::Data(buf.split_to(take).freeze()));
                }
                State::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(Step::More);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(ChunkedError("chunk data not followed by CRLF"));
                    }
                    let _ = buf.split_to(2);
                    self.state = State::Size;
                }
                State::Trailers { read } => {
                    let Some(line) = take_line(buf, MAX_TRAILERS - read)? else {
                        return Ok(Step::More);
                    };
                    self.state = if line.len() == 2 {
                        State::Done
                    } else {
                        check_trailer(&line)?;
                        State::Trailers {
                            read: read + line.len(),
                        }
                    };
                }
                State::Done => return Ok(Step::End),
            }
        }
    }
}

/// Takes one CRLF-terminated line (CRLF included) off `buf`, if whole.
fn take_line(buf: &mut BytesMut, limit: usize) -> Result<Option<BytesMut>, ChunkedError> {
    match memchr::memchr(b'\n', buf) {
        Some(end) if end + 1 > limit => Err(ChunkedError("line too long")),
        Some(end) if end == 0 || buf[end - 1] != b'\r' => {
            Err(ChunkedError("line not terminated by CRLF"))
        }
        Some(end) => Ok(Some(buf.split_to(end + 1))),
        None if buf.len() >= limit => Err(ChunkedError("line too long")),
        None => Ok(None),
    }
}

/// The size of a chunk-size line (CRLF included) and how many bytes its
/// extensions took. RFC 9112 §7.1.1:
///
/// ```text
/// chunk-size CRLF, chunk-size = 1*HEXDIG,
/// chunk-ext = *( BWS ";" BWS ext-name [ BWS "=" BWS ext-val ] )
/// ext-name = token, ext-val = token / quoted-string
/// ```
///
/// Whitespace is read only where that grammar has BWS (before `;` and
/// around `=`): `5 \r\n` has none to stand for and is refused, as are a
/// lone `;`, a bare CR, a NUL or anything else outside the grammar. A
/// reader in front of the gateway that skips such bytes would frame the
/// body another way.
fn size_line(line: &[u8]) -> Result<(u64, usize), ChunkedError> {
    let line = &line[..line.len() - 2];
    let digits = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    if digits == 0 {
        return Err(ChunkedError("chunk size missing"));
    }
    // Past 2^64 (and, simply, past 16 digits, leading zeros included).
    if digits > 16 {
        return Err(ChunkedError("chunk size too large"));
    }
    let mut size: u64 = 0;
    for &digit in &line[..digits] {
        let value = match digit {
            b'0'..=b'9' => digit - b'0',
            b'a'..=b'f' => digit - b'a' + 10,
            _ => digit - b'A' + 10,
        };
        size = (size << 4) | u64::from(value);
    }
    let extensions = &line[digits..];
    check_extensions(extensions)?;
    Ok((size, extensions.len()))
}

fn skip_bws(bytes: &[u8], mut at: usize) -> usize {
    while at < bytes.len() && matches!(bytes[at], b' ' | b'\t') {
        at += 1;
    }
    at
}

fn skip_token(bytes: &[u8], at: usize) -> usize {
    at + bytes[at..].iter().take_while(|&&b| is_tchar(b)).count()
}

/// `chunk-ext`, whole.
fn check_extensions(ext: &[u8]) -> Result<(), ChunkedError> {
    const INVALID: ChunkedError = ChunkedError("invalid chunk extension");
    let mut at = 0;
    while at < ext.len() {
        at = skip_bws(ext, at);
        if ext.get(at) != Some(&b';') {
            return Err(INVALID);
        }
        at = skip_bws(ext, at + 1);
        let name_end = skip_token(ext, at);
        if name_end == at {
            return Err(INVALID);
        }
        at = name_end;
        let after_name = skip_bws(ext, at);
        if ext.get(after_name) != Some(&b'=') {
            continue;
        }
        at = skip_bws(ext, after_name + 1);
        at = if ext.get(at) == Some(&b'"') {
            quoted_string_end(ext, at).ok_or(INVALID)?
        } else {
            let end = skip_token(ext, at);
            if end == at {
                return Err(INVALID);
            }
            end
        };
    }
    Ok(())
}

/// Where a `quoted-string` starting at `at` (its opening quote) ends.
fn quoted_string_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => return Some(i + 1),
            // quoted-pair = "\" ( HTAB / SP / VCHAR / obs-text )
            b'\\' => {
                let next = *bytes.get(i + 1)?;
                if !(next == b'\t' || next >= 0x20) || next == 0x7f {
                    return None;
                }
                i += 2;
            }
            // qdtext = HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text
            b'\t' | b' ' | 0x21 | 0x23..=0x5b | 0x5d..=0x7e | 0x80..=0xff => i += 1,
            _ => return None,
        }
    }
    None
}

/// A trailer line (CRLF included, not the empty last one) is a
/// `field-line`: a token name, a colon, a value without control
/// characters. No obs-fold: RFC 9112 §5.2 lets a recipient refuse it.
fn check_trailer(line: &[u8]) -> Result<(), ChunkedError> {
    const INVALID: ChunkedError = ChunkedError("invalid trailer field");
    let line = &line[..line.len() - 2];
    let name_end = skip_token(line, 0);
    if name_end == 0 || line.get(name_end) != Some(&b':') {
        return Err(INVALID);
    }
    let value_ok = line[name_end + 1..]
        .iter()
        .all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f));
    if !value_ok {
        return Err(INVALID);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed in pieces of `step` bytes; the body and what is left.
    fn decode_in_pieces(input: &[u8], step: usize) -> Result<(Vec<u8>, Vec<u8>), ChunkedError> {
        let mut decoder = ChunkedDecoder::new();
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        let mut pieces = input.chunks(step);
        loop {
            match decoder.decode(&mut buf)? {
                Step::Data(data) => body.extend_from_slice(&data),
                Step::End => {
                    // What the connection received after the body.
                    pieces.for_each(|piece| buf.extend_from_slice(piece));
                    return Ok((body, buf.to_vec()));
                }
                Step::More => match pieces.next() {
                    Some(piece) => buf.extend_from_slice(piece),
                    None => return Err(ChunkedError("input ended")),
                },
            }
        }
    }

    #[test]
    fn decodes_chunks_extensions_and_trailers_whatever_the_pieces() {
        let input =
            b"5\r\nhello\r\n1;name=value\r\n \r\nA ; a = \"q\\\"\" ;b;c=d\r\n0123456789\r\n0\r\nX-Sum: 1\r\n\r\nNEXT";
        for step in [1, 2, 3, 7, input.len()] {
            let (body, rest) = decode_in_pieces(input, step).expect("valid");
            assert_eq!(body, b"hello 0123456789", "pieces of {step}");
            assert_eq!(rest, b"NEXT", "pieces of {step}");
        }
    }

    #[test]
    fn refuses_malformed_framing() {
        for input in [
            &b"zz\r\nhello\r\n0\r\n\r\n"[..],
            b"\r\n",
            b"5\r\nhelloXX0\r\n\r\n",
            b"5\nhello\r\n0\r\n\r\n",
            b"5 x\r\nhello\r\n0\r\n\r\n",
            b"11111111111111111\r\n",
            // RFC 9112 §7.1.1: what a lenient reader skips, and this one refuses.
            b"5 \r\nhello\r\n0\r\n\r\n",
            b"5\t\r\nhello\r\n0\r\n\r\n",
            b"5;\r\nhello\r\n0\r\n\r\n",
            b"5;a\rb\r\nhello\r\n0\r\n\r\n",
            b"5;a\x00\r\nhello\r\n0\r\n\r\n",
            b"5;a=\r\nhello\r\n0\r\n\r\n",
            b"5;a b\r\nhello\r\n0\r\n\r\n",
            b"5;a=b c\r\nhello\r\n0\r\n\r\n",
            b"5;a=\"open\r\nhello\r\n0\r\n\r\n",
            b"5;a=\"\x01\"\r\nhello\r\n0\r\n\r\n",
            b"5;@\r\nhello\r\n0\r\n\r\n",
            b"5;;a\r\nhello\r\n0\r\n\r\n",
            b"5 5\r\nhello\r\n0\r\n\r\n",
            b"0x5\r\nhello\r\n0\r\n\r\n",
            b"+5\r\nhello\r\n0\r\n\r\n",
            b" 5\r\nhello\r\n0\r\n\r\n",
            // Trailers are field lines.
            b"0\r\nno colon\r\n\r\n",
            b"0\r\n: nameless\r\n\r\n",
            b"0\r\nX-A: 1\r\n folded\r\n\r\n",
            b"0\r\nX-A: a\x00b\r\n\r\n",
            b"0\r\nX A: 1\r\n\r\n",
        ] {
            assert!(
                decode_in_pieces(input, 4).is_err(),
                "accepted {:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn extensions_are_bounded_per_body() {
        let ext = format!(";n={}", "v".repeat(1000));
        let mut body = Vec::new();
        for _ in 0..(MAX_EXTENSION_BYTES / ext.len()) {
            body.extend_from_slice(format!("1{ext}\r\nx\r\n").as_bytes());
        }
        let mut within = body.clone();
        within.extend_from_slice(b"0\r\n\r\n");
        assert!(decode_in_pieces(&within, 4096).is_ok());
        body.extend_from_slice(format!("1{ext}\r\nx\r\n0\r\n\r\n").as_bytes());
        assert!(decode_in_pieces(&body, 4096).is_err());
    }

    #[test]
    fn bounds_a_size_line_that_never_ends() {
        let endless = vec![b'0'; MAX_SIZE_LINE + 1];
        let mut buf = BytesMut::from(&endless[..]);
        assert!(ChunkedDecoder::new().decode(&mut buf).is_err());
    }
}
