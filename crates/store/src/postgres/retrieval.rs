//! [`RetrievalStore`] on PostgreSQL: the shared operations (`crate::retrieval`) on a pooled
//! connection (reads, each one statement) or inside a transaction (writes), which locks the rows
//! it reads before changing them; claims pass over rows another claim holds (`SKIP LOCKED`).
//! Rows are streamed to the operations, so reading a vector store's embeddings never holds them
//! all as rows at once.

use std::borrow::Cow;
use std::ops::DerefMut;
use std::sync::LazyLock;

use futures::TryStreamExt;
use sqlx::Row as _;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgArguments, PgConnection, PgRow};
use sqlx::query::Query;
use sqlx::{Postgres, Transaction};

use super::{PostgresStore, map_err, sqlstate};
use crate::StoreError;
use crate::retrieval::carry::{Carry, Lend};
use crate::retrieval::{self, Arg, Db, Dialect, EachRow, Row, Statements, retrieval_store};

static STATEMENTS: LazyLock<Statements> = LazyLock::new(|| Statements::new(Dialect::Postgres));

/// A connection (pooled, or a transaction) as the shared operations use it.
pub(super) struct Pg<C>(C);

/// Text as a parameter. PostgreSQL `text` cannot hold NUL, so it becomes U+FFFD: an id still
/// names nothing (a plain "not found"), and a chunk's text keeps its length in characters.
fn text_arg(text: &str) -> Cow<'_, str> {
    if text.contains('\0') { text.replace('\0', "\u{FFFD}").into() } else { text.into() }
}

/// A statement with its parameters bound.
fn bind<'a>(sql: &'a str, args: &[Arg<'a>]) -> Query<'a, Postgres, PgArguments> {
    args.iter().fold(sqlx::query(sql), |query, arg| match *arg {
        Arg::Int(n) => query.bind(n),
        Arg::Text(text) => query.bind(text.map(text_arg)),
        Arg::Blob(bytes) => query.bind(bytes),
        Arg::Bool(b) => query.bind(b),
    })
}

impl Row for PgRow {
    fn int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        self.try_get(i).map_err(map_err)
    }

    fn real(&self, i: usize) -> Result<f64, StoreError> {
        self.try_get(i).map_err(map_err)
    }

    fn text(&self, i: usize) -> Result<Option<&str>, StoreError> {
        self.try_get(i).map_err(map_err)
    }

    fn blob(&self, i: usize) -> Result<Option<&[u8]>, StoreError> {
        self.try_get(i).map_err(map_err)
    }
}

impl<C: DerefMut<Target = PgConnection> + Send> Db for Pg<C> {
    fn sql(&self) -> &'static Statements {
        &STATEMENTS
    }

    async fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64, StoreError> {
        match bind(sql, args).execute(&mut *self.0).await {
            Ok(done) => Ok(done.rows_affected()),
            Err(e) if sqlstate(&e).as_deref() == Some("23505") => Err(StoreError::Duplicate(e.to_string())),
            Err(e) => Err(map_err(e)),
        }
    }

    async fn query(&mut self, sql: &str, args: &[Arg<'_>], each: &mut EachRow<'_>) -> Result<(), StoreError> {
        let mut rows = bind(sql, args).fetch(&mut *self.0);
        while let Some(row) = rows.try_next().await.map_err(map_err)? {
            each(&row)?;
        }
        Ok(())
    }
}

impl Pg<Transaction<'static, Postgres>> {
    /// Commit, then hand back what the transaction's operation returned.
    async fn commit<T>(self, value: T) -> Result<T, StoreError> {
        self.0.commit().await.map_err(map_err)?;
        Ok(value)
    }
}

impl PostgresStore {
    /// A pooled connection for a read.
    pub(super) async fn reader(&self) -> Result<Pg<PoolConnection<Postgres>>, StoreError> {
        Ok(Pg(self.pool.acquire().await.map_err(map_err)?))
    }

    /// A transaction for a write (rolled back if dropped before [`Pg::commit`]).
    async fn writer(&self) -> Result<Pg<Transaction<'static, Postgres>>, StoreError> {
        Ok(Pg(self.pool.begin().await.map_err(map_err)?))
    }
}

/// Runs an operation of `crate::retrieval` for [`retrieval_store`]: a read on a pooled
/// connection, a write in a transaction committed when the operation succeeds.
macro_rules! on_postgres {
    ($self:ident, read, $op:ident($($arg:ident),*)) => {{
        $(let $arg = Carry::carry($arg);)*
        retrieval::$op(&mut $self.reader().await?, $(Lend::lend(&$arg)),*).await
    }};
    ($self:ident, $write:ident, $op:ident($($arg:ident),*)) => {{
        $(let $arg = Carry::carry($arg);)*
        let mut tx = $self.writer().await?;
        let done = retrieval::$op(&mut tx, $(Lend::lend(&$arg)),*).await?;
        tx.commit(done).await
    }};
}

retrieval_store!(PostgresStore, on_postgres);
