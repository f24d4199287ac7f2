//! [`RetrievalStore`]: uploaded files, vector stores, their files and file batches, the chunks
//! ingestion cuts files into (text, embedding, lexical index) and the ingestion queue.
//!
//! Every object has an owner (the tenant that created it) and every call by id takes the owner
//! asking: another owner's object is a missing one, found with the same one lookup.
//!
//! Ingestion is a queue of vector-store files in `in_progress`: a process claims some with a
//! lease ([`RetrievalStore::claim_ingestion`]), renews it while it works, and ends each with
//! [`RetrievalStore::finish_ingestion`] (chunks written, `completed`) or
//! [`RetrievalStore::fail_ingestion`]. A file whose lease lapsed (its process stopped) is claimed
//! again by anyone; after [`MAX_INGESTION_ATTEMPTS`] claims it is failed instead. A file removed
//! or cancelled meanwhile is left as it is: the late finish writes nothing.

use crate::StoreError;

/// How many times a vector-store file is claimed for ingestion before a lapsed lease fails it
/// (`last_error` `server_error`) rather than handing it out again.
pub const MAX_INGESTION_ATTEMPTS: u32 = 3;

/// A page of a list: after the object with id `after` (in `order`), at most `limit` objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub after: Option<String>,
    pub before: Option<String>,
    pub limit: usize,
    /// `true`: newest first (`order=desc`, the default of every list here).
    pub newest_first: bool,
}

/// One page of objects, and whether more follow it.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed<T> {
    pub data: Vec<T>,
    pub has_more: bool,
}

/// An uploaded file, without its bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct FileRecord {
    /// `file-…`
    pub id: String,
    pub owner: String,
    pub filename: String,
    /// `assistants` or `user_data`.
    pub purpose: String,
    /// The file's size.
    pub bytes: u64,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds; `None`: kept until deleted.
    pub expires_at: Option<i64>,
}

/// A vector store's own row.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorStoreRecord {
    /// `vs_…`
    pub id: String,
    pub owner: String,
    pub name: Option<String>,
    /// String keys to string values, as the client set them (an object).
    pub metadata: serde_json::Value,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds: creation, or the last search or file change.
    pub last_active_at: i64,
    /// `{"anchor":"last_active_at","days":N}` as the client set it.
    pub expires_after: Option<serde_json::Value>,
    /// Unix seconds, from `expires_after` and `last_active_at`.
    pub expires_at: Option<i64>,
    /// The embedding model and its dimension, set by the first file ingested with embeddings;
    /// `None` while no file has any (or search is lexical only).
    pub embedding: Option<EmbeddingSpace>,
    /// Bumped by every change of the store's chunks (a file ingested, removed or deleted): a
    /// reader's cached vectors are current while it is unchanged.
    pub generation: i64,
}

/// Which model made a vector store's embeddings, and their length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddingSpace {
    pub model: String,
    pub dimensions: u32,
}

/// Counts of a vector store's (or a batch's) files by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileCounts {
    pub in_progress: u64,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
}

impl FileCounts {
    pub fn total(&self) -> u64 {
        self.in_progress + self.completed + self.failed + self.cancelled
    }
}

/// A vector store as its endpoints report it: the row, its file counts and the bytes its
/// completed files' chunks take.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorStoreView {
    pub record: VectorStoreRecord,
    pub file_counts: FileCounts,
    pub usage_bytes: u64,
}

/// A vector-store file's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileStatus {
    InProgress,
    Completed,
    Cancelled,
    Failed,
}

impl FileStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            FileStatus::InProgress => "in_progress",
            FileStatus::Completed => "completed",
            FileStatus::Cancelled => "cancelled",
            FileStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Result<Self, StoreError> {
        Ok(match s {
            "in_progress" => FileStatus::InProgress,
            "completed" => FileStatus::Completed,
            "cancelled" => FileStatus::Cancelled,
            "failed" => FileStatus::Failed,
            other => return Err(StoreError::Corrupt(format!("unknown vector store file status '{other}'"))),
        })
    }
}

/// Why ingesting a file failed, as OpenAI reports it (`last_error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestionError {
    /// `server_error`, `unsupported_file` or `invalid_file`.
    pub code: String,
    pub message: String,
}

/// A file in a vector store.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorStoreFileRecord {
    /// The file's id (`file-…`): a vector-store file is named by its file.
    pub file_id: String,
    pub vector_store_id: String,
    pub owner: String,
    pub status: FileStatus,
    /// Up to 16 string keys to string, number or boolean values (an object).
    pub attributes: serde_json::Value,
    /// The chunking strategy as resolved when the file was added (`{"type":"static","static":{…}}`).
    pub chunking_strategy: serde_json::Value,
    /// The bytes the file's chunks take (text and embeddings); 0 until completed.
    pub usage_bytes: u64,
    /// Unix seconds.
    pub created_at: i64,
    pub last_error: Option<IngestionError>,
    /// The batch it was added by, if any (`vsfb_…`).
    pub batch_id: Option<String>,
}

/// A file to add to a vector store (on creation, alone, or in a batch).
#[derive(Debug, Clone, PartialEq)]
pub struct NewVectorStoreFile {
    pub file_id: String,
    pub attributes: serde_json::Value,
    pub chunking_strategy: serde_json::Value,
}

/// A vector store to create, with its first files (added in the same transaction).
#[derive(Debug, Clone, PartialEq)]
pub struct NewVectorStore {
    pub id: String,
    pub owner: String,
    pub name: Option<String>,
    pub metadata: serde_json::Value,
    pub created_at: i64,
    pub expires_after: Option<serde_json::Value>,
    pub expires_at: Option<i64>,
    pub files: Vec<NewVectorStoreFile>,
}

/// What an update of a vector store changes; `None` keeps a field. `expires_after:
/// Some(None)` removes the expiry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VectorStoreUpdate {
    pub name: Option<String>,
    pub metadata: Option<serde_json::Value>,
    pub expires_after: Option<Option<serde_json::Value>>,
    pub expires_at: Option<Option<i64>>,
}

/// A file batch: the files added by one call, tracked together.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRecord {
    /// `vsfb_…`
    pub id: String,
    pub vector_store_id: String,
    pub owner: String,
    pub created_at: i64,
    /// `true` once [`RetrievalStore::cancel_batch`] ran.
    pub cancelled: bool,
    /// Its files' counts by status.
    pub file_counts: FileCounts,
}

/// Why adding files failed, when it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddFiles {
    /// Added (a file already in the store is replaced: its chunks go, it is ingested again).
    Added,
    /// No such vector store (for this owner).
    NoVectorStore,
    /// This file id is not the owner's uploaded file.
    NoFile(String),
}

/// Which files of a vector store a list shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileFilter {
    pub status: Option<FileStatus>,
    pub batch_id: Option<String>,
}

/// A vector-store file handed to an ingestion worker.
#[derive(Debug, Clone, PartialEq)]
pub struct IngestionJob {
    pub vector_store_id: String,
    pub file_id: String,
    pub owner: String,
    pub filename: String,
    pub chunking_strategy: serde_json::Value,
    /// How many times it has been claimed, this claim included.
    pub attempt: u32,
    /// The vector store's embedding space when claimed (a finish in another one is refused).
    pub embedding: Option<EmbeddingSpace>,
}

/// One chunk of a file, as ingestion writes it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewChunk {
    pub text: String,
    /// The chunk's length in tokens.
    pub tokens: u32,
    /// Its embedding; `None` when ingestion runs without an embedding model.
    pub embedding: Option<Vec<f32>>,
}

/// What [`RetrievalStore::finish_ingestion`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finished {
    /// The chunks were written and the file is `completed`.
    Completed,
    /// The file is no longer this worker's to finish (removed, cancelled, its lease taken by
    /// another worker): nothing was written.
    Gone,
    /// The vector store's embeddings are of another model or dimension: nothing was written.
    EmbeddingMismatch(EmbeddingSpace),
}

/// A file a search may return, with what filters and results need of it.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchableFile {
    pub vector_store_id: String,
    pub file_id: String,
    pub filename: String,
    pub attributes: serde_json::Value,
}

/// A chunk as a search returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkText {
    pub chunk_id: i64,
    pub vector_store_id: String,
    pub file_id: String,
    pub text: String,
}

/// A chunk found by the lexical index, with its score (higher is better): SQLite's FTS5 `bm25()`
/// (negated); on PostgreSQL `ts_rank_cd` normalised by the chunk's length (`1 + log(length)`), a
/// BM25-like ranking. Scores compare within one search, not across backends.
#[derive(Debug, Clone, PartialEq)]
pub struct LexicalHit {
    pub chunk_id: i64,
    pub score: f64,
}

/// The embeddings of one vector store's completed files.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreVectors {
    /// [`VectorStoreRecord::generation`] they were read at.
    pub generation: i64,
    pub dimensions: u32,
    /// Chunk ids, in the order of `vectors`.
    pub chunk_ids: Vec<i64>,
    /// The file each chunk is of, in the same order.
    pub file_ids: Vec<String>,
    /// `chunk_ids.len() × dimensions` floats, one chunk after another.
    pub vectors: Vec<f32>,
}

/// Files, vector stores and their chunks. "Missing" includes "another owner's".
#[async_trait::async_trait]
pub trait RetrievalStore: Send + Sync + 'static {
    // ----- files -----

    /// Store an uploaded file and its bytes (one transaction).
    async fn create_file(&self, file: FileRecord, content: Vec<u8>) -> Result<(), StoreError>;
    async fn file(&self, owner: &str, id: &str) -> Result<Option<FileRecord>, StoreError>;
    /// The owner's files, by purpose when given.
    async fn files(&self, owner: &str, purpose: Option<&str>, page: &Page) -> Result<Listed<FileRecord>, StoreError>;
    async fn file_content(&self, owner: &str, id: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Delete a file, its bytes, and it from every vector store of the owner (with its chunks).
    async fn delete_file(&self, owner: &str, id: &str) -> Result<bool, StoreError>;

    // ----- vector stores -----

    /// Create a vector store and add its files (`in_progress`). Fails with the first file id that
    /// is not the owner's, writing nothing.
    async fn create_vector_store(&self, store: NewVectorStore) -> Result<AddFiles, StoreError>;
    async fn vector_store(&self, owner: &str, id: &str) -> Result<Option<VectorStoreView>, StoreError>;
    async fn vector_stores(&self, owner: &str, page: &Page) -> Result<Listed<VectorStoreView>, StoreError>;
    async fn update_vector_store(
        &self,
        owner: &str,
        id: &str,
        update: VectorStoreUpdate,
    ) -> Result<Option<VectorStoreView>, StoreError>;
    /// Delete a vector store with its files' chunks (the uploaded files stay).
    async fn delete_vector_store(&self, owner: &str, id: &str) -> Result<bool, StoreError>;
    /// Mark searched: `last_active_at` (and `expires_at` from `expires_after`) set to `now`.
    async fn touch_vector_stores(&self, owner: &str, ids: &[String], now: i64) -> Result<(), StoreError>;

    // ----- a vector store's files and batches -----

    /// Add files (`in_progress`), in a new batch when `batch` is given (`vsfb_…`, created at
    /// `now`). All or nothing.
    async fn add_vector_store_files(
        &self,
        owner: &str,
        vector_store_id: &str,
        files: Vec<NewVectorStoreFile>,
        batch: Option<&str>,
        now: i64,
    ) -> Result<AddFiles, StoreError>;
    async fn vector_store_file(
        &self,
        owner: &str,
        vector_store_id: &str,
        file_id: &str,
    ) -> Result<Option<VectorStoreFileRecord>, StoreError>;
    async fn vector_store_files(
        &self,
        owner: &str,
        vector_store_id: &str,
        filter: &FileFilter,
        page: &Page,
    ) -> Result<Listed<VectorStoreFileRecord>, StoreError>;
    async fn update_file_attributes(
        &self,
        owner: &str,
        vector_store_id: &str,
        file_id: &str,
        attributes: serde_json::Value,
    ) -> Result<Option<VectorStoreFileRecord>, StoreError>;
    /// Remove a file from a vector store with its chunks (the uploaded file stays).
    async fn remove_vector_store_file(
        &self,
        owner: &str,
        vector_store_id: &str,
        file_id: &str,
    ) -> Result<bool, StoreError>;
    /// A vector-store file's chunks' text, in order (the `/content` endpoint).
    async fn vector_store_file_chunks(
        &self,
        owner: &str,
        vector_store_id: &str,
        file_id: &str,
    ) -> Result<Option<Vec<String>>, StoreError>;
    async fn batch(
        &self,
        owner: &str,
        vector_store_id: &str,
        batch_id: &str,
    ) -> Result<Option<BatchRecord>, StoreError>;
    /// Cancel a batch: its files still `in_progress` become `cancelled`.
    async fn cancel_batch(
        &self,
        owner: &str,
        vector_store_id: &str,
        batch_id: &str,
    ) -> Result<Option<BatchRecord>, StoreError>;

    // ----- ingestion -----

    /// Claim up to `limit` files `in_progress` that nobody holds (never claimed, or their lease
    /// ended before `now_ms`), oldest first, for `worker` until `lease_until_ms`. A file past
    /// [`MAX_INGESTION_ATTEMPTS`] is failed here instead of claimed.
    async fn claim_ingestion(
        &self,
        worker: &str,
        now_ms: i64,
        lease_until_ms: i64,
        limit: usize,
    ) -> Result<Vec<IngestionJob>, StoreError>;
    /// Extend `worker`'s leases on these files (`(vector_store_id, file_id)`).
    async fn renew_ingestion(
        &self,
        worker: &str,
        files: &[(String, String)],
        lease_until_ms: i64,
    ) -> Result<(), StoreError>;
    /// Write a claimed file's chunks and mark it `completed` (one transaction), setting the
    /// vector store's embedding space if it had none; see [`Finished`]. The file must still be
    /// `worker`'s claim `job.attempt` (else [`Finished::Gone`]). `embedding` `None` (chunks
    /// without embeddings) in a store that has embeddings is a mismatch too; each chunk's
    /// embedding must have `embedding`'s dimension (else [`StoreError::Corrupt`], nothing written).
    async fn finish_ingestion(
        &self,
        worker: &str,
        job: &IngestionJob,
        embedding: Option<&EmbeddingSpace>,
        chunks: Vec<NewChunk>,
    ) -> Result<Finished, StoreError>;
    /// Mark a claimed file `failed` with `error` (if still `worker`'s claim `job.attempt`);
    /// `false` if it was not.
    async fn fail_ingestion(&self, worker: &str, job: &IngestionJob, error: IngestionError)
    -> Result<bool, StoreError>;

    // ----- search -----

    /// The completed files of these vector stores (the owner's; others are skipped).
    async fn searchable_files(
        &self,
        owner: &str,
        vector_store_ids: &[String],
    ) -> Result<Vec<SearchableFile>, StoreError>;
    /// A vector store's generation, `None` if missing.
    async fn generation(&self, owner: &str, vector_store_id: &str) -> Result<Option<i64>, StoreError>;
    /// The embeddings of a vector store's completed files; `None` if missing or without
    /// embeddings.
    async fn vectors(&self, owner: &str, vector_store_id: &str) -> Result<Option<StoreVectors>, StoreError>;
    /// The best `limit` chunks of these vector stores' completed files for `query` by the
    /// lexical index (BM25; any query term may match), restricted to `files`
    /// (`(vector_store_id, file_id)`) when given.
    async fn lexical_search(
        &self,
        owner: &str,
        vector_store_ids: &[String],
        files: Option<&[(String, String)]>,
        query: &str,
        limit: usize,
    ) -> Result<Vec<LexicalHit>, StoreError>;
    /// These chunks' text (the owner's; others are skipped).
    async fn chunks(&self, owner: &str, chunk_ids: &[i64]) -> Result<Vec<ChunkText>, StoreError>;
}
