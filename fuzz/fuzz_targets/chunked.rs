//! The chunked decoder: never a panic; the same body and end whatever the
//! pieces the bytes arrive in.
#![no_main]

use idemgate::http1_probe as probe;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (step, rest) = match data.split_first() {
        Some((first, rest)) => (usize::from(*first % 16) + 1, rest),
        None => return,
    };
    let whole = probe::chunked(rest, rest.len().max(1));
    let pieces = probe::chunked(rest, step);
    match (&whole, &pieces) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(_), Err(_)) => {}
        _ => panic!("whole {whole:?}, in pieces of {step}: {pieces:?}"),
    }
    if let Ok(Some((body, consumed))) = whole {
        assert!(body.len() <= consumed && consumed <= rest.len());
    }
});
