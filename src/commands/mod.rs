//! The one-shot commands (`check`, `migrate`, `sweep`, `compact`, `keys`): each returns
//! the process exit code and prints for a person at a terminal.

mod check;
mod keys;
mod output;
mod route_arg;
mod stop_signal;
mod store_failure;
mod store_file;
mod store_upkeep;

pub use check::check;
pub use keys::{keys, list_keys};
pub use output::{EXIT_FAILURE, EXIT_OK};
pub use store_upkeep::{compact, migrate, sweep};
