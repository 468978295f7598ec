//! A store that answered and refused, or a pool whose connections all
//! stayed busy, told apart from a store that cannot be reached: the answer
//! to the client names what the operator must mend (room on the disk, for
//! connections, a server that takes writes, a privilege to grant, a pool
//! too small for the load), not a network to look at.

use std::time::Duration;

/// Why a store that answers refuses the operation, or could not be asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its disk is full (PostgreSQL SQLSTATE 53100, SQLite `SQLITE_FULL`):
    /// reads go on, new records are refused.
    DiskFull,
    /// The server is at its connection limit (SQLSTATE 53300) and the
    /// pool holds no connection to share, or none of those it holds came
    /// back within the wait for one.
    NoRoomForConnections,
    /// It takes no writes: a standby, a read-only database or file.
    ReadOnly,
    /// The gateway's database role lacks a privilege on the store's
    /// objects (PostgreSQL SQLSTATE 42501): a grant missing or revoked.
    NotPermitted,
    /// Every connection of the gateway's pool stayed busy for `waited`
    /// (its longest wait for one) with other operations: more at once than
    /// the pool holds, or statements slow to answer.
    PoolBusy { waited: Duration },
}
