//! Compact encodings for what SQLite keeps: header lists and instants.
//!
//! Headers use a length-prefixed binary layout rather than JSON because values
//! are raw bytes (not necessarily UTF-8) and must come back byte-identical:
//! `u32 count`, then per pair `u32 name_len, name, u32 value_len, value`, all
//! big-endian.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::store::{Damaged, StoreError};

pub(crate) fn encode_headers(headers: &[(String, Bytes)]) -> Vec<u8> {
    let size = headers
        .iter()
        .map(|(n, v)| 8 + n.len() + v.len())
        .sum::<usize>();
    let mut out = Vec::with_capacity(4 + size);
    put_len(&mut out, headers.len());
    for (name, value) in headers {
        put_len(&mut out, name.len());
        out.extend_from_slice(name.as_bytes());
        put_len(&mut out, value.len());
        out.extend_from_slice(value);
    }
    out
}

pub(crate) fn decode_headers(mut buf: &[u8]) -> Result<Vec<(String, Bytes)>, StoreError> {
    let count = take_len(&mut buf)?;
    // Each pair needs at least 8 bytes: cap the allocation against corrupt counts.
    let mut headers = Vec::with_capacity(count.min(buf.len() / 8));
    for _ in 0..count {
        let name = take_bytes(&mut buf)?;
        let name = String::from_utf8(name.to_vec()).map_err(|_| corrupt())?;
        let value = Bytes::copy_from_slice(take_bytes(&mut buf)?);
        headers.push((name, value));
    }
    if !buf.is_empty() {
        return Err(corrupt());
    }
    Ok(headers)
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    // Header lists and values are far below 4 GiB; saturate rather than wrap.
    let len = u32::try_from(len).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
}

fn take_len(buf: &mut &[u8]) -> Result<usize, StoreError> {
    let (head, rest) = buf.split_first_chunk::<4>().ok_or_else(corrupt)?;
    *buf = rest;
    usize::try_from(u32::from_be_bytes(*head)).map_err(|_| corrupt())
}

fn take_bytes<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], StoreError> {
    let len = take_len(buf)?;
    if buf.len() < len {
        return Err(corrupt());
    }
    let (bytes, rest) = buf.split_at(len);
    *buf = rest;
    Ok(bytes)
}

fn corrupt() -> StoreError {
    Damaged { part: "headers" }.into()
}

/// Unix milliseconds; instants before the epoch clamp to 0.
pub(super) fn to_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).map(duration_ms).unwrap_or(0)
}

pub(super) fn from_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// A duration in whole milliseconds, saturating (an absurd retention must not wrap).
pub(super) fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_byte_identical() {
        let headers: Vec<(String, Bytes)> = vec![
            (
                "content-type".into(),
                Bytes::from_static(b"application/json"),
            ),
            ("x-bin".into(), Bytes::from(vec![0, 255, 10, 13])),
            ("empty".into(), Bytes::new()),
            ("x-bin".into(), Bytes::from_static(b"second")),
        ];
        let decoded = decode_headers(&encode_headers(&headers)).unwrap();
        assert_eq!(decoded, headers);
        assert_eq!(decode_headers(&encode_headers(&[])).unwrap(), vec![]);
    }

    #[test]
    fn corrupt_headers_are_an_error_not_a_panic() {
        let mut buf = encode_headers(&[("a".into(), Bytes::from_static(b"b"))]);
        buf.pop();
        assert!(decode_headers(&buf).is_err());
        assert!(decode_headers(&[0, 0]).is_err());
        assert!(decode_headers(&[255, 255, 255, 255]).is_err());
        let mut trailing = encode_headers(&[]);
        trailing.push(1);
        assert!(decode_headers(&trailing).is_err());
    }

    #[test]
    fn instants_round_trip_at_millisecond_precision() {
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(from_ms(to_ms(t)), t);
        assert_eq!(to_ms(UNIX_EPOCH - Duration::from_secs(1)), 0);
        assert_eq!(duration_ms(Duration::MAX), i64::MAX);
    }
}
