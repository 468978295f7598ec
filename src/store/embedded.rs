//! The embedded, durable single-file store (SQLite). Implemented by the store work.
