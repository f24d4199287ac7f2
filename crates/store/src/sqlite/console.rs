//! [`ConsoleStore`](respgw_store_api::ConsoleStore) on SQLite: the shared reads
//! (`crate::console`) on a reader connection, each statement on one snapshot of the file.

use super::retrieval::Lite;
use super::{SqliteStore, run_now};
use crate::console::console_store;

/// Runs a read of `crate::console` on a reader's blocking thread (its arguments moved there).
macro_rules! on_sqlite_reader {
    ($self:ident, |$db:ident| $read:expr) => {
        $self
            .read(move |connection| {
                let $db = &mut Lite(connection);
                run_now($read)
            })
            .await
    };
}

console_store!(SqliteStore, on_sqlite_reader);
