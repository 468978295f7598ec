//! A client's request head: never a panic; a head accepted is accepted
//! the same whatever follows it and from its own bytes alone.
#![no_main]

use idemgate::wire::framing::BodyKind;
use idemgate::http1_probe as probe;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(Some(view)) = probe::request(data) else {
        return;
    };
    assert!(view.consumed <= data.len());
    assert!(!matches!(view.framing, BodyKind::UntilClose | BodyKind::None));
    // The head alone parses to the same; a prefix of it asks for more.
    let alone = probe::request(&data[..view.consumed]);
    assert_eq!(alone, Ok(Some(view.clone())));
    if view.consumed > 1 {
        let short = probe::request(&data[..view.consumed - 1]);
        assert!(!matches!(short, Ok(Some(_))), "a head shorter by a byte: {short:?}");
    }
});
