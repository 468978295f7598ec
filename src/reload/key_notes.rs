//! What a reload that changes a route's key or fingerprint options means for
//! the records stored before it. The new options apply to new requests at
//! once; these notes say what older keys then meet.

use crate::config::Policy;

pub fn notes(route: &str, old: &Policy, now: &Policy) -> Vec<String> {
    let mut notes = Vec::new();
    let mut note = |changed: bool, text: &str| {
        if changed {
            notes.push(format!("route {route:?}: {text}"));
        }
    };
    note(
        old.key != now.key,
        "key source changed: a retry finds its record only if the new source yields the \
         same key (a derived key differs from the key a client sent)",
    );
    note(
        old.key_pattern != now.key_pattern,
        "key_pattern changed: keys of the old form are now refused with 400 invalid-key, \
         their stored answers no longer reached",
    );
    note(
        old.fingerprint_body != now.fingerprint_body || old.canonical_form != now.canonical_form,
        "fingerprint_body or canonical_form changed: retries of keys stored before compare \
         differently and get 422 fingerprint-mismatch",
    );
    note(
        old.replay_headers != now.replay_headers,
        "replay_headers changed: replays of older answers keep only the headers both lists \
         allow (a header not stored before cannot come back)",
    );
    note(
        old.replay_header != now.replay_header || old.replay_values != now.replay_values,
        "replay marker changed: every answer, of older records too, carries the new one",
    );
    notes
}
