//! [`RetrievalStore`] on PostgreSQL: the shared operations (`crate::retrieval`) on a pooled
//! connection (reads, each one statement) or inside a transaction (writes), which locks the rows
//! it reads before changing them; claims pass over rows another claim holds (`SKIP LOCKED`).
//! Rows are streamed to the operations, so reading a vector store's embeddings never holds them
//! all as rows at once.

use std::borrow::Cow;
use std::ops::DerefMut;
use std::sync::LazyLock;

use futures::TryStreamExt;
use respgw_store_api::retrieval::{
    AddFiles, BatchRecord, ChunkText, EmbeddingSpace, FileFilter, FileRecord, Finished, IngestionError, IngestionJob,
    LexicalHit, Listed, NewChunk, NewVectorStore, NewVectorStoreFile, Page, RetrievalStore, SearchableFile,
    StoreVectors, VectorStoreFileRecord, VectorStoreUpdate, VectorStoreView,
};
use sqlx::Row as _;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgArguments, PgConnection, PgRow};
use sqlx::query::Query;
use sqlx::{Postgres, Transaction};

use super::{PostgresStore, map_err, sqlstate};
use crate::StoreError;
use crate::retrieval::{self, Arg, Db, Dialect, EachRow, Row, Statements};

static STATEMENTS: LazyLock<Statements> = LazyLock::new(|| Statements::new(Dialect::Postgres));

/// A connection (pooled, or a transaction) as the shared operations use it.
struct Pg<C>(C);

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
    async fn reader(&self) -> Result<Pg<PoolConnection<Postgres>>, StoreError> {
        Ok(Pg(self.pool.acquire().await.map_err(map_err)?))
    }

    /// A transaction for a write (rolled back if dropped before [`Pg::commit`]).
    async fn writer(&self) -> Result<Pg<Transaction<'static, Postgres>>, StoreError> {
        Ok(Pg(self.pool.begin().await.map_err(map_err)?))
    }
}

#[async_trait::async_trait]
impl RetrievalStore for PostgresStore {
    async fn create_file(&self, file: FileRecord, content: Vec<u8>) -> Result<(), StoreError> {
        let mut tx = self.writer().await?;
        let done = retrieval::create_file(&mut tx, &file, &content).await?;
        tx.commit(done).await
    }

    async fn file(&self, owner: &str, id: &str) -> Result<Option<FileRecord>, StoreError> {
        retrieval::file(&mut self.reader().await?, owner, id).await
    }

    async fn files(&self, owner: &str, purpose: Option<&str>, page: &Page) -> Result<Listed<FileRecord>, StoreError> {
        retrieval::files(&mut self.reader().await?, owner, purpose, page).await
    }

    async fn file_content(&self, owner: &str, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        retrieval::file_content(&mut self.reader().await?, owner, id).await
    }

    async fn delete_file(&self, owner: &str, id: &str) -> Result<bool, StoreError> {
        let mut tx = self.writer().await?;
        let deleted = retrieval::delete_file(&mut tx, owner, id).await?;
        tx.commit(deleted).await
    }

    async fn create_vector_store(&self, store: NewVectorStore) -> Result<AddFiles, StoreError> {
        let mut tx = self.writer().await?;
        let added = retrieval::create_vector_store(&mut tx, &store).await?;
        tx.commit(added).await
    }

    async fn vector_store(&self, owner: &str, id: &str) -> Result<Option<VectorStoreView>, StoreError> {
        retrieval::vector_store(&mut self.reader().await?, owner, id).await
    }

    async fn vector_stores(&self, owner: &str, page: &Page) -> Result<Listed<VectorStoreView>, StoreError> {
        retrieval::vector_stores(&mut self.reader().await?, owner, page).await
    }

    async fn update_vector_store(
        &self,
        owner: &str,
        id: &str,
        update: VectorStoreUpdate,
    ) -> Result<Option<VectorStoreView>, StoreError> {
        let mut tx = self.writer().await?;
        let view = retrieval::update_vector_store(&mut tx, owner, id, &update).await?;
        tx.commit(view).await
    }

    async fn delete_vector_store(&self, owner: &str, id: &str) -> Result<bool, StoreError> {
        let mut tx = self.writer().await?;
        let deleted = retrieval::delete_vector_store(&mut tx, owner, id).await?;
        tx.commit(deleted).await
    }

    async fn touch_vector_stores(&self, owner: &str, ids: &[String], now: i64) -> Result<(), StoreError> {
        retrieval::touch_vector_stores(&mut self.reader().await?, owner, ids, now).await
    }

    async fn add_vector_store_files(
        &self,
        owner: &str,
        vector_store_id: &str,
        files: Vec<NewVectorStoreFile>,
        batch: Option<&str>,
        now: i64,
    ) -> Result<AddFiles, StoreError> {
        let mut tx = self.writer().await?;
        let added = retrieval::add_vector_store_files(&mut tx, owner, vector_store_id, &files, batch, now).await?;
        tx.commit(added).await
    }

    async fn vector_store_file(
        &self,
        owner: &str,
        vector_store_id: &str,
        file_id: &str,
    ) -> Result<Option<VectorStoreFileRecord>, StoreError> {
        retrieval::vector_store_file(&mut self.reader().await?, owner, vector_store_id, file_id).await
    }

    async fn vector_store_files(
        &self,
        owner: &str,
        vector_store_id: &str,
        filter: &FileFilter,
        page: &Page,
    ) -> Result<Listed<VectorStoreFileRecord>, StoreError> {
        retrieval::vector_store_files(&mut self.reader().await?, owner, vector_store_id, filter, page).await
    }

    async fn update_file_attributes(
        &self,
        owner: &str,
        vector_store_id: &str,
        file_id: &str,
        attributes: serde_json::Value,
    ) -> Result<Option<VectorStoreFileRecord>, StoreError> {
        let mut db = self.reader().await?;
        retrieval::update_file_attributes(&mut db, owner, vector_store_id, file_id, &attributes).await
    }

    async fn remove_vector_store_file(
        &self,
        owner: &str,
        vector_store_id: &str,
        file_id: &str,
    ) -> Result<bool, StoreError> {
        let mut tx = self.writer().await?;
        let removed = retrieval::remove_vector_store_file(&mut tx, owner, vector_store_id, file_id).await?;
        tx.commit(removed).await
    }

    async fn vector_store_file_chunks(
        &self,
        owner: &str,
        vector_store_id: &str,
        file_id: &str,
    ) -> Result<Option<Vec<String>>, StoreError> {
        retrieval::vector_store_file_chunks(&mut self.reader().await?, owner, vector_store_id, file_id).await
    }

    async fn batch(
        &self,
        owner: &str,
        vector_store_id: &str,
        batch_id: &str,
    ) -> Result<Option<BatchRecord>, StoreError> {
        retrieval::batch(&mut self.reader().await?, owner, vector_store_id, batch_id).await
    }

    async fn cancel_batch(
        &self,
        owner: &str,
        vector_store_id: &str,
        batch_id: &str,
    ) -> Result<Option<BatchRecord>, StoreError> {
        let mut tx = self.writer().await?;
        let batch = retrieval::cancel_batch(&mut tx, owner, vector_store_id, batch_id).await?;
        tx.commit(batch).await
    }

    async fn claim_ingestion(
        &self,
        worker: &str,
        now_ms: i64,
        lease_until_ms: i64,
        limit: usize,
    ) -> Result<Vec<IngestionJob>, StoreError> {
        let mut tx = self.writer().await?;
        let jobs = retrieval::claim_ingestion(&mut tx, worker, now_ms, lease_until_ms, limit).await?;
        tx.commit(jobs).await
    }

    async fn renew_ingestion(
        &self,
        worker: &str,
        files: &[(String, String)],
        lease_until_ms: i64,
    ) -> Result<(), StoreError> {
        retrieval::renew_ingestion(&mut self.reader().await?, worker, files, lease_until_ms).await
    }

    async fn finish_ingestion(
        &self,
        worker: &str,
        job: &IngestionJob,
        embedding: Option<&EmbeddingSpace>,
        chunks: Vec<NewChunk>,
    ) -> Result<Finished, StoreError> {
        let mut tx = self.writer().await?;
        let finished = retrieval::finish_ingestion(&mut tx, worker, job, embedding, &chunks).await?;
        tx.commit(finished).await
    }

    async fn fail_ingestion(
        &self,
        worker: &str,
        job: &IngestionJob,
        error: IngestionError,
    ) -> Result<bool, StoreError> {
        retrieval::fail_ingestion(&mut self.reader().await?, worker, job, &error).await
    }

    async fn searchable_files(
        &self,
        owner: &str,
        vector_store_ids: &[String],
    ) -> Result<Vec<SearchableFile>, StoreError> {
        retrieval::searchable_files(&mut self.reader().await?, owner, vector_store_ids).await
    }

    async fn generation(&self, owner: &str, vector_store_id: &str) -> Result<Option<i64>, StoreError> {
        retrieval::generation(&mut self.reader().await?, owner, vector_store_id).await
    }

    async fn vectors(&self, owner: &str, vector_store_id: &str) -> Result<Option<StoreVectors>, StoreError> {
        retrieval::vectors(&mut self.reader().await?, owner, vector_store_id).await
    }

    async fn lexical_search(
        &self,
        owner: &str,
        vector_store_ids: &[String],
        files: Option<&[(String, String)]>,
        query: &str,
        limit: usize,
    ) -> Result<Vec<LexicalHit>, StoreError> {
        retrieval::lexical_search(&mut self.reader().await?, owner, vector_store_ids, files, query, limit).await
    }

    async fn chunks(&self, owner: &str, chunk_ids: &[i64]) -> Result<Vec<ChunkText>, StoreError> {
        retrieval::chunks(&mut self.reader().await?, owner, chunk_ids).await
    }
}
