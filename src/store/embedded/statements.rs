//! The writer's statements, each prepared once for the thread's life.
//!
//! rusqlite's `prepare_cached` finds a statement by hashing its SQL text,
//! once to take it out of the cache and again to put it back: ~2.9k
//! instructions per new key on the embedded store, a statement's text being
//! a few hundred bytes (docs/adr/0004-embedded-store.md). Every statement the writer runs
//! is a `&'static str` of this crate, so here it is found by its address
//! instead: a comparison per statement held, of which there are a dozen.

use std::ops::{Deref, DerefMut};

use rusqlite::{Connection, Statement};

pub(super) struct Statements<'c> {
    conn: &'c Connection,
    prepared: Vec<(&'static str, Statement<'c>)>,
}

impl<'c> Statements<'c> {
    pub(super) fn new(conn: &'c Connection) -> Self {
        Statements {
            conn,
            prepared: Vec::new(),
        }
    }

    /// The rowid of the last row this connection inserted.
    pub(super) fn last_insert_rowid(&self) -> i64 {
        self.conn.last_insert_rowid()
    }

    /// `sql`, prepared the first time it is asked for. A statement that
    /// fails to prepare is not kept, and is tried again next time.
    pub(super) fn get(&mut self, sql: &'static str) -> rusqlite::Result<Held<'_, 'c>> {
        // The same address and length is the same text; the same text at
        // another address (a literal repeated) is only a second entry.
        let at = match self
            .prepared
            .iter()
            .position(|(known, _)| std::ptr::eq(*known, sql))
        {
            Some(at) => at,
            None => {
                let statement = self.conn.prepare(sql)?;
                self.prepared.push((sql, statement));
                self.prepared.len() - 1
            }
        };
        Ok(Held(&mut self.prepared[at].1))
    }
}

/// A held statement while it is used. Its parameters are cleared when it
/// is put down, as rusqlite's cache does, so that the last completion's
/// body (SQLite keeps a copy of a bound blob) is not kept until the next.
pub(super) struct Held<'s, 'c>(&'s mut Statement<'c>);

impl<'c> Deref for Held<'_, 'c> {
    type Target = Statement<'c>;

    fn deref(&self) -> &Statement<'c> {
        self.0
    }
}

impl<'c> DerefMut for Held<'_, 'c> {
    fn deref_mut(&mut self) -> &mut Statement<'c> {
        self.0
    }
}

impl Drop for Held<'_, '_> {
    fn drop(&mut self) {
        self.0.clear_bindings();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COUNT: &str = "SELECT count(*) FROM t WHERE v = ?1";

    #[test]
    fn a_statement_is_prepared_once_and_its_parameters_cleared_after_use() {
        let conn = Connection::open_in_memory().expect("open");
        conn.execute_batch("CREATE TABLE t (v INTEGER); INSERT INTO t VALUES (1), (1), (2);")
            .expect("schema");
        let mut statements = Statements::new(&conn);
        let count = |statements: &mut Statements<'_>, v: i64| -> i64 {
            statements
                .get(COUNT)
                .and_then(|mut stmt| stmt.query_row([v], |row| row.get(0)))
                .expect("count")
        };
        assert_eq!(count(&mut statements, 1), 2);
        assert_eq!(count(&mut statements, 2), 1);
        assert_eq!(statements.prepared.len(), 1, "prepared once");

        // Bound and put down unrun: the binding does not outlive the use.
        {
            let mut held = statements.get(COUNT).expect("held");
            held.raw_bind_parameter(1, 1).expect("bind");
        }
        let mut held = statements.get(COUNT).expect("held");
        let mut rows = held.raw_query();
        let row = rows.next().expect("step").expect("a row");
        let matched: i64 = row.get(0).expect("count");
        assert_eq!(matched, 0, "a cleared (NULL) parameter matches nothing");
    }

    #[test]
    fn a_statement_that_fails_to_prepare_is_not_kept() {
        let conn = Connection::open_in_memory().expect("open");
        let mut statements = Statements::new(&conn);
        const LATER: &str = "SELECT v FROM later";
        assert!(statements.get(LATER).is_err(), "no such table yet");
        assert!(statements.prepared.is_empty());
        conn.execute_batch("CREATE TABLE later (v INTEGER)")
            .expect("schema");
        assert!(statements.get(LATER).is_ok(), "prepared once it can be");
    }
}
