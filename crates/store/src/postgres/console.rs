//! [`ConsoleStore`](respgw_store_api::ConsoleStore) on PostgreSQL: the shared reads
//! (`crate::console`) on a pooled connection.

use super::PostgresStore;
use crate::console::console_store;

/// Runs a read of `crate::console` on a pooled connection.
macro_rules! on_postgres_reader {
    ($self:ident, |$db:ident| $read:expr) => {{
        let $db = &mut $self.reader().await?;
        $read.await
    }};
}

console_store!(PostgresStore, on_postgres_reader);
