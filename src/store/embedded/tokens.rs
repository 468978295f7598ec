//! Fencing tokens for one batch transaction.
//!
//! Tokens come from one store-wide counter (`meta.last_token`). Bumping it
//! with an `UPDATE` per reservation would be one more statement per new key; here
//! a batch reads it at its first reservation, hands tokens out in memory and
//! writes the last one back once, before its commit. The batch holds the
//! file's write lock from its first statement to its commit, so no other
//! process (`idemgate keys purge`, a second gateway by mistake) can read the
//! counter in between and hand out the same tokens; a batch that rolls back
//! drops its tokens with its rows.

use super::cause::EmbeddedCause;
use super::db_error::db;
use super::statements::Statements;
use crate::store::StoreError;

#[derive(Default)]
pub(super) struct Tokens {
    /// The counter as read at the batch's first reservation, and the last
    /// token handed out since; `None` until a job asks for one.
    counter: Option<(i64, i64)>,
}

impl Tokens {
    /// The token the next reservation gets. It stays unspent (the next call
    /// returns it again) until `spend`: a reservation that finds its key
    /// taken writes nothing, and a batch of those leaves the counter alone.
    pub(super) fn peek(&mut self, statements: &mut Statements<'_>) -> Result<i64, StoreError> {
        let (_, last) = match self.counter {
            Some(counter) => counter,
            None => {
                let read = statements
                    .get("SELECT value FROM meta WHERE name = 'last_token'")
                    .and_then(|mut stmt| stmt.query_row([], |row| row.get::<_, i64>(0)))
                    .map_err(db)?;
                *self.counter.insert((read, read))
            }
        };
        last.checked_add(1)
            .ok_or_else(|| EmbeddedCause::TokensExhausted.into())
    }

    /// Marks `token` (from `peek`) as written to a record.
    pub(super) fn spend(&mut self, token: i64) {
        if let Some((_, last)) = &mut self.counter {
            *last = token;
        }
    }

    /// Writes the last token handed out back to the counter; part of the
    /// batch's transaction, so it commits with the rows that carry the tokens.
    pub(super) fn save(&self, statements: &mut Statements<'_>) -> rusqlite::Result<()> {
        if let Some((read, last)) = self.counter
            && last != read
        {
            statements
                .get("UPDATE meta SET value = ?1 WHERE name = 'last_token'")?
                .execute([last])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::*;

    fn counter(conn: &Connection) -> i64 {
        conn.query_row(
            "SELECT value FROM meta WHERE name = 'last_token'",
            [],
            |row| row.get(0),
        )
        .unwrap()
    }

    #[test]
    fn tokens_continue_the_stored_counter_and_are_written_back_once() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
             INSERT INTO meta VALUES ('last_token', 41);",
        )
        .unwrap();
        let mut statements = Statements::new(&conn);
        let mut tokens = Tokens::default();
        tokens.save(&mut statements).unwrap();
        assert_eq!(counter(&conn), 41, "a batch without reservations leaves it");
        assert_eq!(tokens.peek(&mut statements).unwrap(), 42);
        assert_eq!(tokens.peek(&mut statements).unwrap(), 42, "not spent yet");
        tokens.save(&mut statements).unwrap();
        assert_eq!(counter(&conn), 41, "nothing spent, nothing written");
        tokens.spend(42);
        assert_eq!(tokens.peek(&mut statements).unwrap(), 43);
        tokens.spend(43);
        assert_eq!(counter(&conn), 41, "not written before save");
        tokens.save(&mut statements).unwrap();
        assert_eq!(counter(&conn), 43);

        let mut next_batch = Tokens::default();
        assert_eq!(next_batch.peek(&mut statements).unwrap(), 44);
    }
}
