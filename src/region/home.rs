//! A key's home region: rendezvous (highest random weight) hashing.
//!
//! Each region's weight for a record is the first 8 bytes (big-endian) of
//! SHA-256 over a length-prefixed tuple:
//!
//! ```text
//! "idemgate-home-v1" ‖ len(route) ‖ route ‖ len(scope) ‖ scope ‖ len(key) ‖ key ‖ len(region) ‖ region
//! ```
//!
//! (each `len` an 8-byte big-endian byte count, the scope as its hex hash).
//! The home is the region of the highest weight, ties going to the smaller
//! name. A region's weight depends on the record and its own name only, so
//! adding a region moves just the keys it now outweighs, and removing one
//! moves just its own keys (docs/multi-region.md).

use sha2::{Digest, Sha256};

const DOMAIN: &[u8] = b"idemgate-home-v1";

fn field(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_be_bytes());
    hasher.update(bytes);
}

/// The record's part of every region's weight, hashed once per request.
fn prefix(route: &str, scope: &str, key: &str) -> Sha256 {
    let mut hasher = Sha256::new();
    hasher.update(DOMAIN);
    field(&mut hasher, route.as_bytes());
    field(&mut hasher, scope.as_bytes());
    field(&mut hasher, key.as_bytes());
    hasher
}

fn weight(prefix: &Sha256, region: &str) -> u64 {
    let mut hasher = prefix.clone();
    field(&mut hasher, region.as_bytes());
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The index in `regions` of the record's home; `None` when there is none.
pub fn home<S: AsRef<str>>(regions: &[S], route: &str, scope: &str, key: &str) -> Option<usize> {
    let prefix = prefix(route, scope, key);
    regions
        .iter()
        .enumerate()
        .map(|(i, name)| (weight(&prefix, name.as_ref()), i))
        // The highest weight; on a tie (2^-64), the smaller name.
        .max_by(|(wa, a), (wb, b)| {
            wa.cmp(wb)
                .then_with(|| regions[*b].as_ref().cmp(regions[*a].as_ref()))
        })
        .map(|(_, i)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home_of<'a>(regions: &[&'a str], key: &str) -> &'a str {
        regions[home(regions, "charges", "scope", key).unwrap()]
    }

    #[test]
    fn the_weight_is_pinned() {
        // Any change to the hash moves every key of a running deployment:
        // this value must never change.
        let prefix = prefix("charges", "", "k1");
        let mut hasher = Sha256::new();
        hasher.update(b"idemgate-home-v1");
        for part in [&b"charges"[..], b"", b"k1", b"eu"] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
        let digest = hasher.finalize();
        let expected = u64::from_be_bytes(digest[..8].try_into().unwrap());
        assert_eq!(weight(&prefix, "eu"), expected);
        assert_eq!(
            hex::encode(expected.to_be_bytes()),
            "1c5f4a31dfa81c8f",
            "the pinned weight of (charges, \"\", k1) in eu"
        );
    }

    #[test]
    fn fields_are_length_prefixed() {
        // ("ab", "c") and ("a", "bc") are different records.
        let a = prefix("ab", "c", "k");
        let b = prefix("a", "bc", "k");
        assert_ne!(weight(&a, "eu"), weight(&b, "eu"));
    }

    #[test]
    fn the_order_regions_are_listed_in_does_not_matter() {
        for i in 0..200 {
            let key = format!("key-{i}");
            assert_eq!(
                home_of(&["eu", "us", "ap"], &key),
                home_of(&["ap", "eu", "us"], &key)
            );
        }
    }

    #[test]
    fn no_region_no_home() {
        assert_eq!(home::<&str>(&[], "r", "s", "k"), None);
    }

    #[test]
    fn keys_spread_over_the_regions() {
        let regions = ["eu", "us", "ap"];
        let mut counts = [0usize; 3];
        for i in 0..3000 {
            counts[home(&regions, "charges", "s", &format!("k{i}")).unwrap()] += 1;
        }
        for count in counts {
            assert!((800..1200).contains(&count), "{counts:?}");
        }
    }

    #[test]
    fn adding_a_region_moves_only_the_keys_it_takes() {
        let three = ["eu", "us", "ap"];
        let four = ["eu", "us", "ap", "sa"];
        let total = 4000;
        let mut moved = 0;
        for i in 0..total {
            let key = format!("k{i}");
            let before = home_of(&three, &key);
            let after = home_of(&four, &key);
            if before != after {
                assert_eq!(after, "sa", "{key} moved from {before} to {after}");
                moved += 1;
            }
        }
        // About a quarter move, all of them to the new region.
        assert!(
            (total * 20 / 100..total * 30 / 100).contains(&moved),
            "{moved} of {total}"
        );
    }

    #[test]
    fn removing_a_region_moves_only_its_own_keys() {
        let three = ["eu", "us", "ap"];
        let two = ["eu", "us"];
        for i in 0..2000 {
            let key = format!("k{i}");
            let before = home_of(&three, &key);
            if before != "ap" {
                assert_eq!(home_of(&two, &key), before, "{key}");
            }
        }
    }
}
