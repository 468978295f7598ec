//! What both kinds of head (requests from clients, answers from upstreams)
//! are read for the same way: the connection's tokens and a header map
//! sharing the head's bytes (framing fields: framing.rs).

use bytes::Bytes;
use http::HeaderMap;
use http::header::{HeaderName, HeaderValue, InvalidHeaderValue};

/// A field noted while parsing: its name, and where its value lies in the head.
pub type FieldAt = (HeaderName, usize, usize);

/// A request extension: the fields of the client's head whose values held
/// control characters, left out of its header map. The gateway answers
/// such a request with a problem and never forwards it.
#[derive(Debug, Clone)]
pub struct UnreadableFields(pub Vec<HeaderName>);

/// A response extension: the transfer codings an upstream applied to the
/// body besides chunked (`gzip` of `Transfer-Encoding: gzip, chunked`), in
/// order. The gateway decodes none of them and relays the body still coded,
/// so an HTTP/1.1 client is told them in the `Transfer-Encoding` it gets;
/// no other client, nor the store, can be (docs/http1.md, "Transfer codings").
#[derive(Debug, Clone)]
pub struct TransferCodings(pub HeaderValue);

/// The tokens of a `Connection` value; `None` when it is not text.
pub fn connection_tokens(value: &[u8]) -> Option<impl Iterator<Item = &str>> {
    let value = std::str::from_utf8(value).ok()?;
    Some(
        value
            .split(',')
            .map(str::trim)
            .filter(|token| !token.is_empty()),
    )
}

/// Removes every field `unwanted` picks. Most heads have none, and a look at
/// each of their few names (a comparison) costs less than a removal by name,
/// which hashes the name and probes to find nothing (docs/adr/0007-hot-path-costs.md).
pub fn remove_where(headers: &mut HeaderMap, unwanted: impl Fn(&HeaderName) -> bool) {
    if !headers.keys().any(&unwanted) {
        return;
    }
    let doomed: Vec<HeaderName> = headers
        .keys()
        .filter(|name| unwanted(name))
        .cloned()
        .collect();
    for name in doomed {
        headers.remove(name);
    }
}

/// The header map of a frozen head: each value a slice of `head`, not a
/// copy. `room` is capacity kept for fields added later.
pub fn shared_map(
    head: &Bytes,
    fields: Vec<FieldAt>,
    room: usize,
) -> Result<HeaderMap, InvalidHeaderValue> {
    let mut headers = HeaderMap::with_capacity(fields.len() + room);
    for (name, start, end) in fields {
        headers.append(
            name,
            HeaderValue::from_maybe_shared(head.slice(start..end))?,
        );
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_connection_tokens() {
        let tokens: Vec<&str> = connection_tokens(b" close , ,X-Hop")
            .expect("text")
            .collect();
        assert_eq!(tokens, ["close", "X-Hop"]);
    }

    #[test]
    fn values_are_slices_of_the_head() {
        let head = Bytes::from_static(b"x-a: 1\r\nx-b: 22\r\n");
        let fields = vec![
            (HeaderName::from_static("x-a"), 5, 6),
            (HeaderName::from_static("x-b"), 13, 15),
        ];
        let map = shared_map(&head, fields, 4).expect("valid");
        assert_eq!(map["x-a"], "1");
        assert_eq!(map["x-b"], "22");
        assert!(map.capacity() >= 6);
    }
}
