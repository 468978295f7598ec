//! clap's refusal of an argument, said back bounded: clap repeats a value
//! it refuses whole, and a pasted MiB would be a MiB of stderr. Each value
//! the refusal names is shortened to its start and its length and its
//! control characters escaped, as the configuration's messages quote a
//! value (docs/operating.md#command-line).

use clap::error::{ContextValue, Error};

use crate::config::shortened;

/// A tip longer than this repeats the argument refused (clap's "to pass
/// '--…' as a value, use '-- --…'"): it is left out.
const TIP_MAX_BYTES: usize = 200;

/// `error` with every value it names bounded ([`shortened`]).
pub fn bounded(mut error: Error) -> Error {
    let kinds: Vec<_> = error.context().map(|(kind, _)| kind).collect();
    for kind in kinds {
        let bounded = match error.get(kind) {
            Some(ContextValue::String(value)) => ContextValue::String(shortened(value).to_string()),
            Some(ContextValue::Strings(values)) => ContextValue::Strings(
                values
                    .iter()
                    .map(|value| shortened(value).to_string())
                    .collect(),
            ),
            Some(ContextValue::StyledStrs(tips)) => ContextValue::StyledStrs(
                tips.iter()
                    .filter(|tip| {
                        let tip = tip.to_string();
                        tip.len() <= TIP_MAX_BYTES && !tip.contains(char::is_control)
                    })
                    .cloned()
                    .collect(),
            ),
            _ => continue,
        };
        error.insert(kind, bounded);
    }
    error
}
