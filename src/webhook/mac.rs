//! HMAC-SHA256 (RustCrypto `hmac` + `sha2`), compared in constant time.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Whether any of `signatures` is the HMAC-SHA256 of `parts` (concatenated)
/// under any of `keys`. Each comparison is constant-time (`verify_slice`);
/// which candidate matched may show in the timing, never a byte of the MAC.
pub fn any_matches<'a>(
    keys: &[Vec<u8>],
    parts: &[&[u8]],
    signatures: impl Iterator<Item = &'a [u8]> + Clone,
) -> bool {
    keys.iter().any(|key| {
        // HMAC takes a key of any length.
        let Ok(mut mac) = HmacSha256::new_from_slice(key) else {
            return false;
        };
        for part in parts {
            mac.update(part);
        }
        signatures
            .clone()
            .any(|signature| mac.clone().verify_slice(signature).is_ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231 test case 2.
    #[test]
    fn matches_the_rfc_4231_vector_and_nothing_else() {
        let expected =
            hex::decode("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
                .unwrap();
        let keys = vec![b"wrong".to_vec(), b"Jefe".to_vec()];
        let parts: [&[u8]; 2] = [b"what do ya want ", b"for nothing?"];
        assert!(any_matches(&keys, &parts, [&expected[..]].into_iter()));
        assert!(!any_matches(
            &keys[..1],
            &parts,
            [&expected[..]].into_iter()
        ));
        let short = &expected[..31];
        assert!(!any_matches(&keys, &parts, [short].into_iter()));
        assert!(!any_matches(&keys, &parts, std::iter::empty()));
    }
}
