//! The asterisk-form target (`*`), which asks about the server itself
//! rather than a resource (RFC 9110 §9.3.7): no route has it, and the
//! server answers it on either protocol (docs/behaviour.md).

use http::{Method, Response};

use crate::body::{self, Body};
use crate::error::GatewayError;

/// The answer to `{method} *`: for OPTIONS, 200 with no body and no
/// `Allow`, since which methods a resource takes is each upstream's to say;
/// for any other method, 400 (RFC 9112 §3.2.4: the form is only for
/// OPTIONS; the HTTP/1 parser refuses those before they get here).
pub fn answer(method: &Method) -> Response<Body> {
    if method == Method::OPTIONS {
        Response::new(body::empty())
    } else {
        NOT_OPTIONS.to_response()
    }
}

pub const NOT_OPTIONS: GatewayError =
    GatewayError::BadRequest("the request target '*' is only for OPTIONS");
