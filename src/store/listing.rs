//! Listing and counting a route's records, for operators: which keys are in
//! flight, completed, or of unknown outcome (and so waiting to be reconciled
//! with the upstream), oldest first, a page at a time.
//!
//! A page ends at a cursor: the last record's (created_at, key, scope), the
//! order every backend lists in, so the next page starts strictly after it
//! through the same index, whatever was added or removed meanwhile. Its text
//! is opaque to clients (hex of a small versioned layout), and names the
//! listing it was given out for (route and state filter): used on another,
//! it would start there at this one's position and skip older records
//! unseen.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use super::RecordState;

/// Records per page when the caller does not say.
pub const DEFAULT_LIMIT: u32 = 100;
/// Most records one page may hold.
pub const MAX_LIMIT: u32 = 1000;

/// One page's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    pub route: String,
    /// Only records in this state (`None`: every state).
    pub state: Option<RecordState>,
    /// 1..=`MAX_LIMIT`.
    pub limit: u32,
    /// Start after this record (`None`: from the oldest).
    pub after: Option<Cursor>,
}

/// One record as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub key: String,
    pub scope: String,
    pub state: RecordState,
    pub status: Option<u16>,
    pub created_at: SystemTime,
    pub completed_at: Option<SystemTime>,
    pub expires_at: Option<SystemTime>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Page {
    pub records: Vec<Listed>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<Cursor>,
}

impl Page {
    /// The page from up to `limit + 1` rows read in order: the extra row
    /// only tells that there is a next page.
    pub fn from_rows(mut rows: Vec<Listed>, limit: u32) -> Page {
        let limit = limit as usize;
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next = if more {
            rows.last().map(Cursor::after)
        } else {
            None
        };
        Page {
            records: rows,
            next,
        }
    }
}

/// Unexpired records of one route in one state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Count {
    pub route: String,
    pub state: RecordState,
    pub records: u64,
}

/// Where a page ended: the last record's position in the listing order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// Microseconds since the Unix epoch (the finest any backend keeps).
    pub created_at_us: i64,
    pub key: String,
    pub scope: String,
}

/// Why a cursor's text was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the cursor is not one this gateway gave out for this listing (the same route and state)")]
pub struct BadCursor;

/// Version 2 names its listing; version 1 (earlier releases) did not, and
/// is still read, unchecked, so that a listing paged across an upgrade
/// goes on.
const CURSOR_VERSION: u8 = 2;
const UNTAGGED_VERSION: u8 = 1;

/// Which listing a cursor belongs to: 4 bytes of a hash of the route and
/// the state filter, enough to tell a cursor used on the wrong listing by
/// mistake (it is no secret and guards nothing else).
fn listing_tag(route: &str, state: Option<RecordState>) -> [u8; 4] {
    let mut hash = Sha256::new();
    hash.update(route.as_bytes());
    hash.update([0]);
    hash.update(state.map_or("", RecordState::as_str).as_bytes());
    let digest = hash.finalize();
    [digest[0], digest[1], digest[2], digest[3]]
}

impl Cursor {
    pub fn after(record: &Listed) -> Cursor {
        Cursor {
            created_at_us: micros(record.created_at),
            key: record.key.clone(),
            scope: record.scope.clone(),
        }
    }

    pub fn created_at(&self) -> SystemTime {
        from_micros(self.created_at_us)
    }

    /// The opaque text given to clients, for the listing of `route` in
    /// `state` (`None`: every state).
    pub fn encode(&self, route: &str, state: Option<RecordState>) -> String {
        let mut out = Vec::with_capacity(17 + self.key.len() + self.scope.len());
        out.push(CURSOR_VERSION);
        out.extend_from_slice(&listing_tag(route, state));
        out.extend_from_slice(&self.created_at_us.to_be_bytes());
        let key_len = u32::try_from(self.key.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&key_len.to_be_bytes());
        out.extend_from_slice(self.key.as_bytes());
        out.extend_from_slice(self.scope.as_bytes());
        hex::encode(out)
    }

    /// The cursor `text` names, refused unless it was given out for the
    /// listing of `route` in `state`.
    pub fn decode(
        text: &str,
        route: &str,
        state: Option<RecordState>,
    ) -> Result<Cursor, BadCursor> {
        let bytes = hex::decode(text).map_err(|_| BadCursor)?;
        let (&version, rest) = bytes.split_first().ok_or(BadCursor)?;
        let rest = match version {
            CURSOR_VERSION => {
                let (tag, rest) = rest.split_first_chunk::<4>().ok_or(BadCursor)?;
                if *tag != listing_tag(route, state) {
                    return Err(BadCursor);
                }
                rest
            }
            UNTAGGED_VERSION => rest,
            _ => return Err(BadCursor),
        };
        let (at, rest) = rest.split_first_chunk::<8>().ok_or(BadCursor)?;
        let (len, rest) = rest.split_first_chunk::<4>().ok_or(BadCursor)?;
        let len = usize::try_from(u32::from_be_bytes(*len)).map_err(|_| BadCursor)?;
        if rest.len() < len {
            return Err(BadCursor);
        }
        let (key, scope) = rest.split_at(len);
        let created_at_us = i64::from_be_bytes(*at);
        // No record's key or scope holds a NUL (and Postgres text cannot):
        // such a cursor was edited, and is the caller's mistake, not a
        // query for the store to fail on.
        if created_at_us < 0 || key.contains(&0) || scope.contains(&0) {
            return Err(BadCursor);
        }
        Ok(Cursor {
            created_at_us,
            key: String::from_utf8(key.to_vec()).map_err(|_| BadCursor)?,
            scope: String::from_utf8(scope.to_vec()).map_err(|_| BadCursor)?,
        })
    }
}

/// Microseconds since the epoch; instants before it clamp to 0.
pub fn micros(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

pub fn from_micros(us: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(n: i64) -> Listed {
        Listed {
            key: format!("k{n}"),
            scope: "s".into(),
            state: RecordState::Completed,
            status: Some(201),
            created_at: from_micros(1_700_000_000_000_000 + n),
            completed_at: None,
            expires_at: None,
        }
    }

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let cursor = Cursor {
            created_at_us: 1_700_000_000_123_456,
            key: "k-é:1".into(),
            scope: "abc".into(),
        };
        let decode = |text: &str| Cursor::decode(text, "r", None);
        let text = cursor.encode("r", None);
        assert_eq!(decode(&text), Ok(cursor.clone()));
        assert_eq!(cursor.created_at(), from_micros(1_700_000_000_123_456));
        let tag = hex::encode(listing_tag("r", None));
        let nul_key = format!("02{tag}{:016x}{:08x}00", 1, 1);
        let nul_scope = format!("02{tag}{:016x}{:08x}6b00", 1, 1);
        for bad in [
            "",
            "zz",
            "00",
            "02",
            &text[..28],
            "03000000",
            &nul_key,
            &nul_scope,
        ] {
            assert_eq!(decode(bad), Err(BadCursor), "{bad:?}");
        }
        let mut long_key = hex::decode(&text).unwrap();
        long_key[13..17].copy_from_slice(&1000u32.to_be_bytes());
        assert_eq!(decode(&hex::encode(long_key)), Err(BadCursor));
    }

    /// Used on another route or state filter, a cursor would start that
    /// listing at this one's position and skip its older records unseen.
    #[test]
    fn a_cursor_is_refused_on_another_listing() {
        let cursor = Cursor {
            created_at_us: 5,
            key: "k".into(),
            scope: "s".into(),
        };
        let completed = Some(RecordState::Completed);
        let text = cursor.encode("charges", completed);
        assert_eq!(
            Cursor::decode(&text, "charges", completed),
            Ok(cursor.clone())
        );
        for (route, state) in [
            ("charges", None),
            ("charges", Some(RecordState::OutcomeUnknown)),
            ("refunds", completed),
            ("charge", completed),
        ] {
            assert_eq!(
                Cursor::decode(&text, route, state),
                Err(BadCursor),
                "{route} {state:?}"
            );
        }
        // An earlier release's cursor names no listing: read as it was.
        let untagged = format!("01{:016x}{:08x}6b73", 5, 1);
        assert_eq!(Cursor::decode(&untagged, "refunds", None), Ok(cursor));
    }

    #[test]
    fn a_page_has_a_next_cursor_only_when_a_row_is_left_over() {
        let page = Page::from_rows((0..3).map(listed).collect(), 2);
        assert_eq!(page.records.len(), 2);
        assert_eq!(page.next, Some(Cursor::after(&listed(1))));
        let last = Page::from_rows((0..2).map(listed).collect(), 2);
        assert_eq!((last.records.len(), last.next), (2, None));
    }

    #[test]
    fn state_names_round_trip() {
        for state in RecordState::ALL {
            assert_eq!(RecordState::parse(state.as_str()), Some(state));
        }
        assert_eq!(RecordState::parse("done"), None);
    }
}
