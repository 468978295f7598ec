//! HTTP/1 wire pieces both sides use: the server's connection to clients
//! (server/http1/) and the client's connections to upstreams (proxy/http1/);
//! and the URI path's dot segments and percent-escapes, which routing and
//! config validation read alike.

pub mod chunked;
pub mod dot_segment;
pub mod fields;
pub mod framing;
pub mod host;
pub mod names;
pub mod percent_case;

/// Appends `value` in decimal, as `Content-Length` carries it (no `fmt`
/// machinery on every message).
pub fn push_decimal(out: &mut Vec<u8>, value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = value;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Appends `value` in hexadecimal, as a chunk size is written.
pub fn push_hex(out: &mut Vec<u8>, value: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut at = digits.len();
    let mut rest = value;
    loop {
        at -= 1;
        digits[at] = HEX[(rest & 0xf) as usize];
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_http_reads_them() {
        for value in [0, 7, 10, 255, 1_000_000, u64::MAX] {
            let mut decimal = Vec::new();
            push_decimal(&mut decimal, value);
            assert_eq!(decimal, value.to_string().as_bytes());
            let mut hex = Vec::new();
            push_hex(&mut hex, value);
            assert_eq!(hex, format!("{value:x}").as_bytes());
        }
    }
}
