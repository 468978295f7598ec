//! The field a misspelt one most likely meant: serde lists every field a
//! table takes, which for a policy is over twenty names to read through.

/// The one candidate within a small edit of `written` (a letter left out,
/// added, changed, or two swapped), when exactly one is closest.
pub fn closest<'a>(written: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let length = written.chars().count();
    let limit = match length {
        0..=3 => 1,
        _ => 2,
    };
    let mut best: Option<(usize, &str)> = None;
    let mut tied = false;
    for &candidate in candidates {
        // Each edit changes the length by one at most: a name much longer
        // (a paste of a MiB) is no candidate's misspelling, and is not
        // compared letter by letter.
        if length.abs_diff(candidate.chars().count()) > limit {
            continue;
        }
        let distance = edits(written, candidate);
        if distance > limit {
            continue;
        }
        match best {
            Some((shortest, _)) if distance > shortest => {}
            Some((shortest, _)) if distance == shortest => tied = true,
            _ => (best, tied) = (Some((distance, candidate)), false),
        }
    }
    best.filter(|_| !tied).map(|(_, candidate)| candidate)
}

/// Optimal string alignment distance: Levenshtein plus a swap of two
/// neighbours as one edit ("retentoin").
fn edits(a: &str, b: &str) -> usize {
    strsim::osa_distance(a, b)
}

#[cfg(test)]
mod tests {
    use super::{closest, edits};

    #[test]
    fn one_or_two_edits_and_no_guess_on_a_tie() {
        assert_eq!(edits("retentoin", "retention"), 1);
        assert_eq!(edits("serer", "server"), 1);
        assert_eq!(edits("abc", "abc"), 0);
        let fields = ["retention", "required", "scope", "key"];
        assert_eq!(closest("retentoin", &fields), Some("retention"));
        assert_eq!(closest("requird", &fields), Some("required"));
        assert_eq!(closest("colour", &fields), None);
        assert_eq!(closest("kez", &fields), Some("key"));
        assert_eq!(closest("ab", &["ac", "ad"]), None);
    }
}
