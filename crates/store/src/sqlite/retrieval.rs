//! [`RetrievalStore`] on SQLite: the shared operations (`crate::retrieval`) run on the writer
//! thread's transaction (writes) or on a reader connection (reads, each one statement), in the
//! same file as the responses. The writer's `BEGIN IMMEDIATE` holds the file's write lock, so a
//! claim or a finish reads and changes its rows atomically, whichever process writes.

use std::sync::LazyLock;

use respgw_store_api::retrieval::{
    AddFiles, BatchRecord, ChunkText, EmbeddingSpace, FileFilter, FileRecord, Finished, IngestionError, IngestionJob,
    LexicalHit, Listed, NewChunk, NewVectorStore, NewVectorStoreFile, Page, RetrievalStore, SearchableFile,
    StoreVectors, VectorStoreFileRecord, VectorStoreUpdate, VectorStoreView,
};
use rusqlite::types::{ToSql, ToSqlOutput, Value, ValueRef};
use rusqlite::{Connection, params_from_iter};

use super::writer::Growth;
use super::{SqliteStore, is_unique_violation, map_err, run_now};
use crate::StoreError;
use crate::retrieval::{self, Arg, Db, Dialect, EachRow, Row, Statements};

static STATEMENTS: LazyLock<Statements> = LazyLock::new(|| Statements::new(Dialect::Sqlite));

/// A connection as the shared operations use it (its futures never wait: see [`run_now`]).
struct Lite<'c>(&'c Connection);

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

/// Owned copies of borrowed arguments, for the closures that run on another thread.
fn owned(s: &str) -> String {
    s.to_owned()
}

#[async_trait::async_trait]
impl RetrievalStore for SqliteStore {
    async fn create_file(&self, file: FileRecord, content: Vec<u8>) -> Result<(), StoreError> {
        self.write(Growth::Adds, move |c| run_now(retrieval::create_file(&mut Lite(c), &file, &content))).await
    }

    async fn file(&self, owner: &str, id: &str) -> Result<Option<FileRecord>, StoreError> {
        let (owner, id) = (owned(owner), owned(id));
        self.read(move |c| run_now(retrieval::file(&mut Lite(c), &owner, &id))).await
    }

    async fn files(&self, owner: &str, purpose: Option<&str>, page: &Page) -> Result<Listed<FileRecord>, StoreError> {
        let (owner, purpose, page) = (owned(owner), purpose.map(owned), page.clone());
        self.read(move |c| run_now(retrieval::files(&mut Lite(c), &owner, purpose.as_deref(), &page))).await
    }

    async fn file_content(&self, owner: &str, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let (owner, id) = (owned(owner), owned(id));
        self.read(move |c| run_now(retrieval::file_content(&mut Lite(c), &owner, &id))).await
    }

    async fn delete_file(&self, owner: &str, id: &str) -> Result<bool, StoreError> {
        let (owner, id) = (owned(owner), owned(id));
        self.write(Growth::Bounded, move |c| run_now(retrieval::delete_file(&mut Lite(c), &owner, &id))).await
    }

    async fn create_vector_store(&self, store: NewVectorStore) -> Result<AddFiles, StoreError> {
        self.write(Growth::Adds, move |c| run_now(retrieval::create_vector_store(&mut Lite(c), &store))).await
    }

    async fn vector_store(&self, owner: &str, id: &str) -> Result<Option<VectorStoreView>, StoreError> {
        let (owner, id) = (owned(owner), owned(id));
        self.read(move |c| run_now(retrieval::vector_store(&mut Lite(c), &owner, &id))).await
    }

    async fn vector_stores(&self, owner: &str, page: &Page) -> Result<Listed<VectorStoreView>, StoreError> {
        let (owner, page) = (owned(owner), page.clone());
        self.read(move |c| run_now(retrieval::vector_stores(&mut Lite(c), &owner, &page))).await
    }

    async fn update_vector_store(
        &self,
        owner: &str,
        id: &str,
        update: VectorStoreUpdate,
    ) -> Result<Option<VectorStoreView>, StoreError> {
        let (owner, id) = (owned(owner), owned(id));
        self.write(Growth::Adds, move |c| run_now(retrieval::update_vector_store(&mut Lite(c), &owner, &id, &update)))
            .await
    }

    async fn delete_vector_store(&self, owner: &str, id: &str) -> Result<bool, StoreError> {
        let (owner, id) = (owned(owner), owned(id));
        self.write(Growth::Bounded, move |c| run_now(retrieval::delete_vector_store(&mut Lite(c), &owner, &id))).await
    }

    async fn touch_vector_stores(&self, owner: &str, ids: &[String], now: i64) -> Result<(), StoreError> {
        let (owner, ids) = (owned(owner), ids.to_vec());
        self.write(Growth::Bounded, move |c| run_now(retrieval::touch_vector_stores(&mut Lite(c), &owner, &ids, now)))
            .await
    }

    async fn add_vector_store_files(
        &self,
        owner: &str,
        vector_store_id: &str,
        files: Vec<NewVectorStoreFile>,
        batch: Option<&str>,
        now: i64,
    ) -> Result<AddFiles, StoreError> {
        let (owner, store, batch) = (owned(owner), owned(vector_store_id), batch.map(owned));
        self.write(Growth::Adds, move |c| {
            run_now(retrieval::add_vector_store_files(&mut Lite(c), &owner, &store, &files, batch.as_deref(), now))
        })
        .await
    }

    async fn vector_store_file(
        &self,
        owner: &str,
        vector_store_id: &str,
        file_id: &str,
    ) -> Result<Option<VectorStoreFileRecord>, StoreError> {
        let (owner, store, file) = (owned(owner), owned(vector_store_id), owned(file_id));
        self.read(move |c| run_now(retrieval::vector_store_file(&mut Lite(c), &owner, &store, &file))).await
    }

    async fn vector_store_files(
        &self,
        owner: &str,
        vector_store_id: &str,
        filter: &FileFilter,
        page: &Page,
    ) -> Result<Listed<VectorStoreFileRecord>, StoreError> {
        let (owner, store, filter, page) = (owned(owner), owned(vector_store_id), filter.clone(), page.clone());
        self.read(move |c| run_now(retrieval::vector_store_files(&mut Lite(c), &owner, &store, &filter, &page))).await
    }

    async fn update_file_attributes(
        &self,
        owner: &str,
        vector_store_id: &str,
        file_id: &str,
        attributes: serde_json::Value,
    ) -> Result<Option<VectorStoreFileRecord>, StoreError> {
        let (owner, store, file) = (owned(owner), owned(vector_store_id), owned(file_id));
        self.write(Growth::Adds, move |c| {
            run_now(retrieval::update_file_attributes(&mut Lite(c), &owner, &store, &file, &attributes))
        })
        .await
    }

    async fn remove_vector_store_file(
        &self,
        owner: &str,
        vector_store_id: &str,
        file_id: &str,
    ) -> Result<bool, StoreError> {
        let (owner, store, file) = (owned(owner), owned(vector_store_id), owned(file_id));
        self.write(Growth::Bounded, move |c| {
            run_now(retrieval::remove_vector_store_file(&mut Lite(c), &owner, &store, &file))
        })
        .await
    }

    async fn vector_store_file_chunks(
        &self,
        owner: &str,
        vector_store_id: &str,
        file_id: &str,
    ) -> Result<Option<Vec<String>>, StoreError> {
        let (owner, store, file) = (owned(owner), owned(vector_store_id), owned(file_id));
        self.read(move |c| run_now(retrieval::vector_store_file_chunks(&mut Lite(c), &owner, &store, &file))).await
    }

    async fn batch(
        &self,
        owner: &str,
        vector_store_id: &str,
        batch_id: &str,
    ) -> Result<Option<BatchRecord>, StoreError> {
        let (owner, store, batch) = (owned(owner), owned(vector_store_id), owned(batch_id));
        self.read(move |c| run_now(retrieval::batch(&mut Lite(c), &owner, &store, &batch))).await
    }

    async fn cancel_batch(
        &self,
        owner: &str,
        vector_store_id: &str,
        batch_id: &str,
    ) -> Result<Option<BatchRecord>, StoreError> {
        let (owner, store, batch) = (owned(owner), owned(vector_store_id), owned(batch_id));
        self.write(Growth::Bounded, move |c| run_now(retrieval::cancel_batch(&mut Lite(c), &owner, &store, &batch)))
            .await
    }

    async fn claim_ingestion(
        &self,
        worker: &str,
        now_ms: i64,
        lease_until_ms: i64,
        limit: usize,
    ) -> Result<Vec<IngestionJob>, StoreError> {
        let worker = owned(worker);
        self.write(Growth::Bounded, move |c| {
            run_now(retrieval::claim_ingestion(&mut Lite(c), &worker, now_ms, lease_until_ms, limit))
        })
        .await
    }

    async fn renew_ingestion(
        &self,
        worker: &str,
        files: &[(String, String)],
        lease_until_ms: i64,
    ) -> Result<(), StoreError> {
        let (worker, files) = (owned(worker), files.to_vec());
        self.write(Growth::Bounded, move |c| {
            run_now(retrieval::renew_ingestion(&mut Lite(c), &worker, &files, lease_until_ms))
        })
        .await
    }

    async fn finish_ingestion(
        &self,
        worker: &str,
        job: &IngestionJob,
        embedding: Option<&EmbeddingSpace>,
        chunks: Vec<NewChunk>,
    ) -> Result<Finished, StoreError> {
        let (worker, job, embedding) = (owned(worker), job.clone(), embedding.cloned());
        self.write(Growth::Adds, move |c| {
            run_now(retrieval::finish_ingestion(&mut Lite(c), &worker, &job, embedding.as_ref(), &chunks))
        })
        .await
    }

    async fn fail_ingestion(
        &self,
        worker: &str,
        job: &IngestionJob,
        error: IngestionError,
    ) -> Result<bool, StoreError> {
        let (worker, job) = (owned(worker), job.clone());
        self.write(Growth::Bounded, move |c| run_now(retrieval::fail_ingestion(&mut Lite(c), &worker, &job, &error)))
            .await
    }

    async fn searchable_files(
        &self,
        owner: &str,
        vector_store_ids: &[String],
    ) -> Result<Vec<SearchableFile>, StoreError> {
        let (owner, stores) = (owned(owner), vector_store_ids.to_vec());
        self.read(move |c| run_now(retrieval::searchable_files(&mut Lite(c), &owner, &stores))).await
    }

    async fn generation(&self, owner: &str, vector_store_id: &str) -> Result<Option<i64>, StoreError> {
        let (owner, store) = (owned(owner), owned(vector_store_id));
        self.read(move |c| run_now(retrieval::generation(&mut Lite(c), &owner, &store))).await
    }

    async fn vectors(&self, owner: &str, vector_store_id: &str) -> Result<Option<StoreVectors>, StoreError> {
        let (owner, store) = (owned(owner), owned(vector_store_id));
        self.read(move |c| run_now(retrieval::vectors(&mut Lite(c), &owner, &store))).await
    }

    async fn lexical_search(
        &self,
        owner: &str,
        vector_store_ids: &[String],
        files: Option<&[(String, String)]>,
        query: &str,
        limit: usize,
    ) -> Result<Vec<LexicalHit>, StoreError> {
        let (owner, stores, files, query) =
            (owned(owner), vector_store_ids.to_vec(), files.map(<[_]>::to_vec), owned(query));
        self.read(move |c| {
            run_now(retrieval::lexical_search(&mut Lite(c), &owner, &stores, files.as_deref(), &query, limit))
        })
        .await
    }

    async fn chunks(&self, owner: &str, chunk_ids: &[i64]) -> Result<Vec<ChunkText>, StoreError> {
        let (owner, ids) = (owned(owner), chunk_ids.to_vec());
        self.read(move |c| run_now(retrieval::chunks(&mut Lite(c), &owner, &ids))).await
    }
}
