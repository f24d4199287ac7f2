//! [`RetrievalStore`] on SQLite: the shared operations (`crate::retrieval`) run on the writer
//! thread's transaction (writes) or on a reader connection (reads, each one statement), in the
//! same file as the responses. The writer's `BEGIN IMMEDIATE` holds the file's write lock, so a
//! claim or a finish reads and changes its rows atomically, whichever process writes.

use std::sync::LazyLock;

use rusqlite::types::{ToSql, ToSqlOutput, Value, ValueRef};
use rusqlite::{Connection, params_from_iter};

use super::writer::Growth;
use super::{SqliteStore, is_unique_violation, map_err, run_now};
use crate::StoreError;
use crate::retrieval::carry::{Carry, Lend};
use crate::retrieval::{self, Arg, Db, Dialect, EachRow, Row, Statements, retrieval_store};

static STATEMENTS: LazyLock<Statements> = LazyLock::new(|| Statements::new(Dialect::Sqlite));

/// A connection as the shared operations use it (its futures never wait: see [`run_now`]).
pub(super) struct Lite<'c>(pub(super) &'c Connection);

impl ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match *self {
            Arg::Int(Some(n)) => ToSqlOutput::Owned(Value::Integer(n)),
            Arg::Text(Some(text)) => ToSqlOutput::Borrowed(ValueRef::Text(text.as_bytes())),
            Arg::Blob(Some(bytes)) => ToSqlOutput::Borrowed(ValueRef::Blob(bytes)),
            Arg::Bool(b) => ToSqlOutput::Owned(Value::Integer(i64::from(b))),
            Arg::Int(None) | Arg::Text(None) | Arg::Blob(None) => ToSqlOutput::Owned(Value::Null),
        })
    }
}

impl Row for rusqlite::Row<'_> {
    fn int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        self.get(i).map_err(map_err)
    }

    fn real(&self, i: usize) -> Result<f64, StoreError> {
        self.get(i).map_err(map_err)
    }

    fn text(&self, i: usize) -> Result<Option<&str>, StoreError> {
        match self.get_ref(i).map_err(map_err)? {
            ValueRef::Null => Ok(None),
            ValueRef::Text(text) => std::str::from_utf8(text)
                .map(Some)
                .map_err(|e| StoreError::Corrupt(format!("retrieval column {i} is not UTF-8: {e}"))),
            _ => Err(StoreError::Corrupt(format!("retrieval column {i} is not text"))),
        }
    }

    fn blob(&self, i: usize) -> Result<Option<&[u8]>, StoreError> {
        match self.get_ref(i).map_err(map_err)? {
            ValueRef::Null => Ok(None),
            ValueRef::Blob(bytes) => Ok(Some(bytes)),
            _ => Err(StoreError::Corrupt(format!("retrieval column {i} is not a blob"))),
        }
    }
}

impl Db for Lite<'_> {
    fn sql(&self) -> &'static Statements {
        &STATEMENTS
    }

    async fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64, StoreError> {
        let mut statement = self.0.prepare_cached(sql).map_err(map_err)?;
        match statement.execute(params_from_iter(args)) {
            Ok(changed) => Ok(changed as u64),
            Err(e) if is_unique_violation(&e) => Err(StoreError::Duplicate(e.to_string())),
            Err(e) => Err(map_err(e)),
        }
    }

    async fn query(&mut self, sql: &str, args: &[Arg<'_>], each: &mut EachRow<'_>) -> Result<(), StoreError> {
        let mut statement = self.0.prepare_cached(sql).map_err(map_err)?;
        let mut rows = statement.query(params_from_iter(args)).map_err(map_err)?;
        while let Some(row) = rows.next().map_err(map_err)? {
            each(row)?;
        }
        Ok(())
    }
}

/// Runs an operation of `crate::retrieval` for [`retrieval_store`]: its arguments carried to the
/// writer thread (writes) or a reader's blocking thread (reads).
macro_rules! on_sqlite {
    ($self:ident, read, $op:ident($($arg:ident),*)) => {{
        $(let $arg = Carry::carry($arg);)*
        $self.read(move |c| run_now(retrieval::$op(&mut Lite(c), $(Lend::lend(&$arg)),*))).await
    }};
    ($self:ident, adds, $op:ident($($arg:ident),*)) => {
        on_sqlite!(@write $self, Growth::Adds, $op($($arg),*))
    };
    ($self:ident, bounded, $op:ident($($arg:ident),*)) => {
        on_sqlite!(@write $self, Growth::Bounded, $op($($arg),*))
    };
    (@write $self:ident, $growth:expr, $op:ident($($arg:ident),*)) => {{
        $(let $arg = Carry::carry($arg);)*
        $self.write($growth, move |c| run_now(retrieval::$op(&mut Lite(c), $(Lend::lend(&$arg)),*))).await
    }};
}

retrieval_store!(SqliteStore, on_sqlite);
