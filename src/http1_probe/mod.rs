//! The HTTP/1 parsers as plain functions over bytes, for what exercises
//! them from outside the crate: the coverage-guided fuzz targets (fuzz/)
//! and the property and differential tests. Not used by the gateway; the
//! limits are the defaults a gateway runs with. Above both sides, since it
//! reads with the server's parser and the upstream client's.

#[cfg(test)]
mod props;

use bytes::BytesMut;
use http::Method;

use crate::wire::chunked::{ChunkedDecoder, Step};
use crate::wire::framing::BodyKind;
use crate::wire::names::FieldNames;

/// Why a probe refused its input: the parser's own typed cause, as text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// What the request head parser made of a head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestView {
    pub method: String,
    pub target: String,
    /// `true` for HTTP/1.0.
    pub http10: bool,
    pub framing: BodyKind,
    pub keep_alive: bool,
    /// Bytes the head took (blank lines before it included).
    pub consumed: usize,
    pub fields: Vec<(String, Vec<u8>)>,
}

/// Parses a request head at the start of `bytes` as a client connection
/// does (100 fields, 64 KiB); `None` while more bytes are needed.
pub fn request(bytes: &[u8]) -> Result<Option<RequestView>, Refused> {
    let mut buf = BytesMut::from(bytes);
    let parsed = crate::server::http1::request_head::parse(
        &mut buf,
        100,
        64 * 1024,
        &mut FieldNames::default(),
    )
    .map_err(|refusal| Refused(format!("{refusal:?}")))?;
    Ok(parsed.map(|head| RequestView {
        method: head.parts.method.to_string(),
        target: head.parts.uri.to_string(),
        http10: head.parts.version == http::Version::HTTP_10,
        framing: head.framing,
        keep_alive: head.keep_alive,
        consumed: bytes.len() - buf.len(),
        fields: fields(&head.parts.headers),
    }))
}

/// What the answer head parser made of a head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseView {
    pub status: u16,
    pub framing: BodyKind,
    pub keep_alive: bool,
    pub consumed: usize,
    pub fields: Vec<(String, Vec<u8>)>,
}

/// Parses an upstream's answer to a request of `method` at the start of
/// `bytes`, interim answers skipped; `None` while more bytes are needed.
pub fn response(bytes: &[u8], method: &Method) -> Result<Option<ResponseView>, Refused> {
    let mut buf = BytesMut::from(bytes);
    let parsed = crate::proxy::http1::response_head::parse(
        &mut buf,
        method,
        &mut FieldNames::default(),
        &mut 0,
    )
    .map_err(|err| Refused(format!("{err:?}")))?;
    Ok(parsed.map(|head| ResponseView {
        status: head.parts.status.as_u16(),
        framing: head.framing,
        keep_alive: head.keep_alive,
        consumed: bytes.len() - buf.len(),
        fields: fields(&head.parts.headers),
    }))
}

/// Decodes a chunked body at the start of `bytes`, fed in pieces of
/// `step` bytes (at least 1): the body and the bytes it took; `None` when
/// it has not ended.
pub fn chunked(bytes: &[u8], step: usize) -> Result<Option<(Vec<u8>, usize)>, Refused> {
    let mut decoder = ChunkedDecoder::new();
    let mut buf = BytesMut::new();
    let mut body = Vec::new();
    let mut fed = 0;
    loop {
        match decoder
            .decode(&mut buf)
            .map_err(|err| Refused(err.to_string()))?
        {
            Step::Data(data) => body.extend_from_slice(&data),
            Step::End => return Ok(Some((body, fed - buf.len()))),
            Step::More if fed == bytes.len() => return Ok(None),
            Step::More => {
                let end = (fed + step.max(1)).min(bytes.len());
                buf.extend_from_slice(&bytes[fed..end]);
                fed = end;
            }
        }
    }
}

/// The fields in the order the map holds them, as owned text and bytes.
fn fields(headers: &http::HeaderMap) -> Vec<(String, Vec<u8>)> {
    headers
        .iter()
        .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
        .collect()
}
