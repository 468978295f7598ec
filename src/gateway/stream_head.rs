//! An HTTP/2 request's head counts against the body budget
//! (`server.max_buffered_bodies`) while its request is handled. One
//! connection may have 200 streams in progress, each holding a head of up
//! to `max_header_bytes`, about twice over in memory (measured in
//! docs/behaviour.md, "Memory"), and no per-connection bound covers them. An
//! HTTP/1 connection holds one head at a time, in its own buffer.

use http::Request;

use crate::body::{BodyBudget, Exhausted, Share};

/// What a head holds in memory for each byte of it as HTTP/2 counts it.
const COPIES: usize = 2;

/// The share of the budget an HTTP/2 request's head holds until dropped;
/// none for another version.
pub(super) fn hold<B>(
    budget: &BodyBudget,
    request: &Request<B>,
) -> Result<Option<Share>, Exhausted> {
    if request.version() != http::Version::HTTP_2 {
        return Ok(None);
    }
    let mut share = budget.share();
    share.take(COPIES.saturating_mul(list_size(request)))?;
    Ok(Some(share))
}

/// The head's size as HTTP/2 counts a header list (RFC 9113 §6.5.2): each
/// field's name and value and 32 bytes, pseudo-header fields included.
fn list_size<B>(request: &Request<B>) -> usize {
    const FIELD: usize = 32;
    let uri = request.uri();
    let pseudo = [
        (":method".len(), request.method().as_str().len()),
        (
            ":path".len(),
            uri.path_and_query().map_or(0, |pq| pq.as_str().len()),
        ),
        (":scheme".len(), uri.scheme_str().map_or(0, str::len)),
        (
            ":authority".len(),
            uri.authority().map_or(0, |a| a.as_str().len()),
        ),
    ];
    let pseudo: usize = pseudo
        .iter()
        .map(|(name, value)| name + value + FIELD)
        .sum();
    let fields: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + FIELD)
        .sum();
    pseudo + fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http2_head_holds_twice_its_list_size_until_dropped() {
        let budget = BodyBudget::new(10_000);
        let request = Request::post("https://gw.example/v1/charges")
            .version(http::Version::HTTP_2)
            .header("idempotency-key", "k-1")
            .body(())
            .expect("request");
        let size = (7 + 4 + 32) + (5 + 11 + 32) + (7 + 5 + 32) + (10 + 10 + 32) + (15 + 3 + 32);
        let share = hold(&budget, &request).expect("room").expect("HTTP/2");
        assert_eq!(budget.held(), 2 * size);
        drop(share);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn a_head_past_the_room_left_is_refused_and_takes_nothing() {
        let budget = BodyBudget::new(300);
        let request = Request::get("/")
            .version(http::Version::HTTP_2)
            .header("x-pad", "p".repeat(200))
            .body(())
            .expect("request");
        assert!(hold(&budget, &request).is_err());
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn an_http1_head_takes_nothing() {
        let budget = BodyBudget::new(1);
        let request = Request::get("/")
            .header("x-pad", "p".repeat(200))
            .body(())
            .expect("request");
        assert!(hold(&budget, &request).expect("no share").is_none());
        assert_eq!(budget.held(), 0);
    }
}
