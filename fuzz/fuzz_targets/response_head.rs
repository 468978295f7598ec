//! An upstream's answer head: never a panic; what is accepted frames a
//! body one way, and passes no framing field it did not frame by.
#![no_main]

use idemgate::wire::framing::BodyKind;
use idemgate::http1_probe as probe;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (head, rest) = match data.split_first() {
        Some((first, rest)) => (first & 1 == 1, rest),
        None => return,
    };
    let method = if head { http::Method::HEAD } else { http::Method::GET };
    let Ok(Some(view)) = probe::response(rest, &method) else {
        return;
    };
    assert!(view.consumed <= rest.len());
    assert!(view.status >= 200, "an interim answer came out: {}", view.status);
    assert_ne!(view.framing, BodyKind::None);
    if view.framing == BodyKind::UntilClose {
        assert!(!view.keep_alive);
    }
    for (name, _) in &view.fields {
        assert_ne!(name, "transfer-encoding");
        if view.framing == BodyKind::Chunked {
            assert_ne!(name, "content-length");
        }
        // A name a peer folding `_` into `-` (and runs of them into one)
        // reads as a framing field is never passed on.
        let mut folded = String::new();
        for c in name.chars().map(|c| if c == '_' { '-' } else { c }) {
            if !(c == '-' && folded.ends_with('-')) {
                folded.push(c);
            }
        }
        assert!(
            !(folded == "transfer-encoding" || folded == "content-length") || folded == *name,
            "{name} passed on"
        );
    }
});
