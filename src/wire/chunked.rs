//! The chunked transfer coding (RFC 9112 §7.1), decoded from a connection's
//! read buffer as bytes arrive: request bodies from clients, answer bodies
//! from upstreams. Extensions and trailer fields are read past and dropped:
//! the gateway forwards neither.

use bytes::{Bytes, BytesMut};

/// Longest chunk-size line (size, extensions, CRLF) and all trailer lines
/// together: past these the upstream is not speaking HTTP.
const MAX_SIZE_LINE: usize = 4096;
const MAX_TRAILERS: usize = 16 * 1024;

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
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    pub fn new() -> Self {
        Self { state: State::Size }
    }

    /// Takes the next piece of the body out of `buf`.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Step, ChunkedError> {
        loop {
            match self.state {
                State::Size => {
                    let Some(line) = take_line(buf, MAX_SIZE_LINE)? else {
                        return Ok(Step::More);
                    };
                    let size = chunk_size(&line)?;
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

/// The size at the start of a chunk-size line; extensions are ignored.
fn chunk_size(line: &[u8]) -> Result<u64, ChunkedError> {
    let line = &line[..line.len() - 2];
    let digits = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    if digits == 0 {
        return Err(ChunkedError("chunk size missing"));
    }
    if digits > 16 {
        return Err(ChunkedError("chunk size too large"));
    }
    let rest = &line[digits..];
    // After the size: optional whitespace, then nothing or `;extension`.
    let rest = rest.trim_ascii_start();
    if !(rest.is_empty() || rest[0] == b';') {
        return Err(ChunkedError("invalid character in chunk size"));
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
    Ok(size)
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
            b"5\r\nhello\r\n1;name=value\r\n \r\nA \r\n0123456789\r\n0\r\nX-Sum: 1\r\n\r\nNEXT";
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
        ] {
            assert!(
                decode_in_pieces(input, 4).is_err(),
                "accepted {:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn bounds_a_size_line_that_never_ends() {
        let endless = vec![b'0'; MAX_SIZE_LINE + 1];
        let mut buf = BytesMut::from(&endless[..]);
        assert!(ChunkedDecoder::new().decode(&mut buf).is_err());
    }
}
