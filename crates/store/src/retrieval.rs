//! [`RetrievalStore`](respgw_store_api::RetrievalStore) written once for both backends: every
//! operation is a function over [`Db`], a connection (inside a transaction for writes) that runs
//! one statement at a time. A backend provides the connection and its [`Statements`] (the shared
//! SQL in its dialect, `sql.rs`); rows are decoded in `codec.rs`.
//!
//! On SQLite the functions run on the writer thread (writes) or a reader connection (reads); they
//! never wait, so they complete on their first poll. On PostgreSQL they run on a pooled
//! connection, writes inside a transaction that locks the rows it reads before changing them
//! (`FOR UPDATE`; claims skip rows another claim holds).
//!
//! Rules kept here:
//! - A write that can be refused checks everything first and writes only when it goes ahead, so a
//!   refusal writes nothing on either backend.
//! - Chunks exist only for `completed` files: they are written by the finish that completes a
//!   file, and removed with the file (re-adding a file removes its row, with its chunks, first).
//! - A vector store's `generation` moves on with every change of its chunks: a finish, a removal,
//!   a deletion of a file, a re-added file.
//! - A lock on a vector store's row comes before a lock on its files' rows.

pub(crate) mod carry;
pub(crate) mod codec;
pub(crate) mod sql;

use std::collections::HashSet;

use respgw_store_api::StoreError;
use respgw_store_api::retrieval::{
    AddFiles, BatchRecord, ChunkText, EmbeddingSpace, FileFilter, FileRecord, FileStatus, Finished, IngestionError,
    IngestionJob, LexicalHit, Listed, MAX_INGESTION_ATTEMPTS, NewChunk, NewVectorStore, NewVectorStoreFile, Page,
    SearchableFile, StoreVectors, VectorStoreFileRecord, VectorStoreUpdate, VectorStoreView,
};

use self::codec::{encode_json, expiry_days};
pub(crate) use self::sql::{Dialect, Statements};
/// The interface's types, by a path the [`retrieval_store`] macro can name.
pub(crate) use respgw_store_api::retrieval as api;

/// A statement parameter.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    Int(Option<i64>),
    Text(Option<&'a str>),
    Blob(Option<&'a [u8]>),
    Bool(bool),
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(text: &'a str) -> Self {
        Arg::Text(Some(text))
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(text: &'a String) -> Self {
        Arg::Text(Some(text))
    }
}

impl<'a> From<Option<&'a str>> for Arg<'a> {
    fn from(text: Option<&'a str>) -> Self {
        Arg::Text(text)
    }
}

impl From<i64> for Arg<'_> {
    fn from(n: i64) -> Self {
        Arg::Int(Some(n))
    }
}

impl From<Option<i64>> for Arg<'_> {
    fn from(n: Option<i64>) -> Self {
        Arg::Int(n)
    }
}

impl From<bool> for Arg<'_> {
    fn from(b: bool) -> Self {
        Arg::Bool(b)
    }
}

/// Parameters from values convertible to [`Arg`].
macro_rules! args {
    ($($arg:expr),* $(,)?) => { &[$(Arg::from($arg)),*] };
}

/// One result row; values borrow from it.
pub(crate) trait Row {
    fn int(&self, i: usize) -> Result<Option<i64>, StoreError>;
    fn real(&self, i: usize) -> Result<f64, StoreError>;
    fn text(&self, i: usize) -> Result<Option<&str>, StoreError>;
    fn blob(&self, i: usize) -> Result<Option<&[u8]>, StoreError>;
}

/// What a query does with each row.
pub(crate) type EachRow<'f> = dyn FnMut(&dyn Row) -> Result<(), StoreError> + Send + 'f;

/// A connection as the operations use it.
pub(crate) trait Db {
    /// This backend's statements.
    fn sql(&self) -> &'static Statements;
    /// Run a statement that returns no rows; how many rows it changed. A unique violation is
    /// [`StoreError::Duplicate`].
    async fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64, StoreError>;
    /// Run a query, handing each row to `each` in order.
    async fn query(&mut self, sql: &str, args: &[Arg<'_>], each: &mut EachRow<'_>) -> Result<(), StoreError>;
}

/// Every row of a query, decoded.
pub(crate) async fn rows<T: Send>(
    db: &mut impl Db,
    sql: &str,
    args: &[Arg<'_>],
    decode: impl Fn(&dyn Row) -> Result<T, StoreError> + Send + Sync,
) -> Result<Vec<T>, StoreError> {
    let mut out = Vec::new();
    db.query(sql, args, &mut |row| {
        out.push(decode(row)?);
        Ok(())
    })
    .await?;
    Ok(out)
}

/// The first row of a query, decoded.
pub(crate) async fn first<T: Send>(
    db: &mut impl Db,
    sql: &str,
    args: &[Arg<'_>],
    decode: impl Fn(&dyn Row) -> Result<T, StoreError> + Send + Sync,
) -> Result<Option<T>, StoreError> {
    Ok(rows(db, sql, args, decode).await?.into_iter().next())
}

/// A list of strings as the JSON array the statements' list parameters take.
fn json_list<S: serde::Serialize>(items: &[S]) -> Result<String, StoreError> {
    serde_json::to_string(items).map_err(|e| StoreError::Corrupt(format!("cannot encode a list: {e}")))
}

/// How many rows a page fetches: one more than it shows, telling whether more follow.
fn fetch(page: &Page) -> i64 {
    i64::try_from(page.limit.saturating_add(1)).unwrap_or(i64::MAX)
}

/// A page from the rows its statement fetched ([`fetch`] of them, against the page's order when
/// [`sql::reversed`]).
fn listed<T>(page: &Page, mut data: Vec<T>) -> Listed<T> {
    let has_more = data.len() > page.limit;
    data.truncate(page.limit);
    if sql::reversed(page) {
        data.reverse();
    }
    Listed { data, has_more }
}

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

// ----- files -----

pub(crate) async fn create_file(db: &mut impl Db, file: &FileRecord, content: &[u8]) -> Result<(), StoreError> {
    let sql = db.sql();
    let inserted = db
        .execute(
            &sql.insert_file,
            args![
                &file.id,
                &file.owner,
                &file.filename,
                &file.purpose,
                count(file.bytes),
                file.created_at,
                file.expires_at
            ],
        )
        .await;
    if let Err(StoreError::Duplicate(_)) = inserted {
        return Err(StoreError::Duplicate(file.id.clone()));
    }
    inserted?;
    db.execute(&sql.insert_file_content, &[Arg::from(&file.id), Arg::Blob(Some(content))]).await?;
    Ok(())
}

pub(crate) async fn file(db: &mut impl Db, owner: &str, id: &str) -> Result<Option<FileRecord>, StoreError> {
    let statement = &db.sql().select_file;
    first(db, statement, args![owner, id], codec::file).await
}

pub(crate) async fn files(
    db: &mut impl Db,
    owner: &str,
    purpose: Option<&str>,
    page: &Page,
) -> Result<Listed<FileRecord>, StoreError> {
    let sql = db.sql().list_files(page);
    let args = args![owner, purpose, page.after.as_deref(), page.before.as_deref(), fetch(page)];
    Ok(listed(page, rows(db, &sql, args, codec::file).await?))
}

/// A file's bytes (copied out of the row once).
pub(crate) async fn file_content(db: &mut impl Db, owner: &str, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
    let statement = &db.sql().file_content;
    first(db, statement, args![owner, id], |row| Ok(row.blob(0)?.unwrap_or_default().to_vec())).await
}

pub(crate) async fn delete_file(db: &mut impl Db, owner: &str, id: &str) -> Result<bool, StoreError> {
    let sql = db.sql();
    db.execute(&sql.bump_stores_of_file, args![owner, id]).await?;
    // Its bytes, its rows in vector stores and their chunks go with it (foreign keys cascade).
    Ok(db.execute(&sql.delete_file, args![owner, id]).await? > 0)
}

// ----- vector stores -----

/// The first of `files` that is not one of `owner`'s uploaded files.
async fn first_missing_file(
    db: &mut impl Db,
    owner: &str,
    files: &[NewVectorStoreFile],
) -> Result<Option<String>, StoreError> {
    if files.is_empty() {
        return Ok(None);
    }
    let ids: Vec<&str> = files.iter().map(|f| f.file_id.as_str()).collect();
    let list = json_list(&ids)?;
    let statement = &db.sql().owned_files;
    let owned: HashSet<String> =
        rows(db, statement, args![owner, &list], |row| codec::text(row, 0)).await?.into_iter().collect();
    Ok(ids.into_iter().find(|id| !owned.contains(*id)).map(str::to_owned))
}

/// Add checked files to a vector store (see [`add_vector_store_files`]).
async fn insert_files(
    db: &mut impl Db,
    owner: &str,
    vector_store_id: &str,
    files: &[NewVectorStoreFile],
    batch: Option<&str>,
    now: i64,
) -> Result<(), StoreError> {
    let sql = db.sql();
    let mut replaced = false;
    for file in files {
        replaced |= db.execute(&sql.delete_file_in_store, args![vector_store_id, &file.file_id]).await? > 0;
        let (attributes, strategy) = (encode_json(&file.attributes), encode_json(&file.chunking_strategy));
        db.execute(
            &sql.insert_file_in_store,
            args![vector_store_id, &file.file_id, owner, &attributes, &strategy, now, batch],
        )
        .await?;
    }
    if replaced {
        db.execute(&sql.bump_generation, args![vector_store_id]).await?;
    }
    Ok(())
}

pub(crate) async fn create_vector_store(db: &mut impl Db, store: &NewVectorStore) -> Result<AddFiles, StoreError> {
    if let Some(missing) = first_missing_file(db, &store.owner, &store.files).await? {
        return Ok(AddFiles::NoFile(missing));
    }
    let sql = db.sql();
    let metadata = encode_json(&store.metadata);
    let expires_after = store.expires_after.as_ref().map(encode_json);
    let inserted = db
        .execute(
            &sql.insert_vector_store,
            args![
                &store.id,
                &store.owner,
                store.name.as_deref(),
                &metadata,
                store.created_at,
                expires_after.as_deref(),
                expiry_days(store.expires_after.as_ref()),
                store.expires_at,
            ],
        )
        .await;
    if let Err(StoreError::Duplicate(_)) = inserted {
        return Err(StoreError::Duplicate(store.id.clone()));
    }
    inserted?;
    insert_files(db, &store.owner, &store.id, &store.files, None, store.created_at).await?;
    Ok(AddFiles::Added)
}

pub(crate) async fn vector_store(
    db: &mut impl Db,
    owner: &str,
    id: &str,
) -> Result<Option<VectorStoreView>, StoreError> {
    let statement = &db.sql().select_view;
    first(db, statement, args![owner, id], codec::view).await
}

pub(crate) async fn vector_stores(
    db: &mut impl Db,
    owner: &str,
    page: &Page,
) -> Result<Listed<VectorStoreView>, StoreError> {
    let sql = db.sql().list_views(page);
    let args = args![owner, page.after.as_deref(), page.before.as_deref(), fetch(page)];
    Ok(listed(page, rows(db, &sql, args, codec::view).await?))
}

pub(crate) async fn update_vector_store(
    db: &mut impl Db,
    owner: &str,
    id: &str,
    update: &VectorStoreUpdate,
) -> Result<Option<VectorStoreView>, StoreError> {
    let metadata = update.metadata.as_ref().map(encode_json);
    let expires_after = update.expires_after.as_ref().map(|e| e.as_ref().map(encode_json));
    let days = update.expires_after.as_ref().and_then(|e| expiry_days(e.as_ref()));
    let changed = db
        .execute(
            &db.sql().update_vector_store,
            args![
                owner,
                id,
                update.name.is_some(),
                update.name.as_deref(),
                metadata.is_some(),
                metadata.as_deref(),
                expires_after.is_some(),
                expires_after.flatten().as_deref(),
                days,
                update.expires_at.is_some(),
                update.expires_at.flatten(),
            ],
        )
        .await?;
    if changed == 0 {
        return Ok(None);
    }
    vector_store(db, owner, id).await
}

pub(crate) async fn delete_vector_store(db: &mut impl Db, owner: &str, id: &str) -> Result<bool, StoreError> {
    // Its files' rows, their chunks and its batches go with it (foreign keys cascade).
    Ok(db.execute(&db.sql().delete_vector_store, args![owner, id]).await? > 0)
}

pub(crate) async fn touch_vector_stores(
    db: &mut impl Db,
    owner: &str,
    ids: &[String],
    now: i64,
) -> Result<(), StoreError> {
    if ids.is_empty() {
        return Ok(());
    }
    let list = json_list(ids)?;
    db.execute(&db.sql().touch_vector_stores, args![owner, &list, now]).await?;
    Ok(())
}

// ----- a vector store's files and batches -----

pub(crate) async fn add_vector_store_files(
    db: &mut impl Db,
    owner: &str,
    vector_store_id: &str,
    files: &[NewVectorStoreFile],
    batch: Option<&str>,
    now: i64,
) -> Result<AddFiles, StoreError> {
    let sql = db.sql();
    if first(db, &sql.lock_vector_store, args![owner, vector_store_id], |_| Ok(())).await?.is_none() {
        return Ok(AddFiles::NoVectorStore);
    }
    if let Some(missing) = first_missing_file(db, owner, files).await? {
        return Ok(AddFiles::NoFile(missing));
    }
    if let Some(batch) = batch {
        let inserted = db.execute(&sql.insert_batch, args![batch, vector_store_id, owner, now]).await;
        if let Err(StoreError::Duplicate(_)) = inserted {
            return Err(StoreError::Duplicate(batch.to_owned()));
        }
        inserted?;
    }
    insert_files(db, owner, vector_store_id, files, batch, now).await?;
    Ok(AddFiles::Added)
}

pub(crate) async fn vector_store_file(
    db: &mut impl Db,
    owner: &str,
    vector_store_id: &str,
    file_id: &str,
) -> Result<Option<VectorStoreFileRecord>, StoreError> {
    let statement = &db.sql().select_file_in_store;
    first(db, statement, args![owner, vector_store_id, file_id], codec::vector_store_file).await
}

pub(crate) async fn vector_store_files(
    db: &mut impl Db,
    owner: &str,
    vector_store_id: &str,
    filter: &FileFilter,
    page: &Page,
) -> Result<Listed<VectorStoreFileRecord>, StoreError> {
    let sql = db.sql().list_files_in_store(page);
    let args = args![
        owner,
        vector_store_id,
        filter.status.map(FileStatus::as_str),
        filter.batch_id.as_deref(),
        page.after.as_deref(),
        page.before.as_deref(),
        fetch(page),
    ];
    Ok(listed(page, rows(db, &sql, args, codec::vector_store_file).await?))
}

pub(crate) async fn update_file_attributes(
    db: &mut impl Db,
    owner: &str,
    vector_store_id: &str,
    file_id: &str,
    attributes: &serde_json::Value,
) -> Result<Option<VectorStoreFileRecord>, StoreError> {
    let attributes = encode_json(attributes);
    let sql = &db.sql().update_attributes;
    first(db, sql, args![owner, vector_store_id, file_id, &attributes], codec::vector_store_file).await
}

pub(crate) async fn remove_vector_store_file(
    db: &mut impl Db,
    owner: &str,
    vector_store_id: &str,
    file_id: &str,
) -> Result<bool, StoreError> {
    let sql = db.sql();
    if first(db, &sql.lock_vector_store, args![owner, vector_store_id], |_| Ok(())).await?.is_none() {
        return Ok(false);
    }
    // Its chunks go with it (the foreign key cascades).
    if db.execute(&sql.delete_file_in_store, args![vector_store_id, file_id]).await? == 0 {
        return Ok(false);
    }
    db.execute(&sql.bump_generation, args![vector_store_id]).await?;
    Ok(true)
}

pub(crate) async fn vector_store_file_chunks(
    db: &mut impl Db,
    owner: &str,
    vector_store_id: &str,
    file_id: &str,
) -> Result<Option<Vec<String>>, StoreError> {
    // One row per chunk, or one NULL row for a file without chunks; none for a missing file.
    let statement = &db.sql().file_chunks;
    let texts = rows(db, statement, args![owner, vector_store_id, file_id], |row| codec::opt_text(row, 0)).await?;
    if texts.is_empty() {
        return Ok(None);
    }
    Ok(Some(texts.into_iter().flatten().collect()))
}

pub(crate) async fn batch(
    db: &mut impl Db,
    owner: &str,
    vector_store_id: &str,
    batch_id: &str,
) -> Result<Option<BatchRecord>, StoreError> {
    let statement = &db.sql().select_batch;
    first(db, statement, args![owner, vector_store_id, batch_id], codec::batch).await
}

pub(crate) async fn cancel_batch(
    db: &mut impl Db,
    owner: &str,
    vector_store_id: &str,
    batch_id: &str,
) -> Result<Option<BatchRecord>, StoreError> {
    let sql = db.sql();
    if db.execute(&sql.cancel_batch, args![owner, vector_store_id, batch_id]).await? == 0 {
        return Ok(None);
    }
    db.execute(&sql.cancel_batch_files, args![owner, vector_store_id, batch_id]).await?;
    batch(db, owner, vector_store_id, batch_id).await
}

// ----- ingestion -----

pub(crate) async fn claim_ingestion(
    db: &mut impl Db,
    worker: &str,
    now_ms: i64,
    lease_until_ms: i64,
    limit: usize,
) -> Result<Vec<IngestionJob>, StoreError> {
    let sql = db.sql();
    let gave_up = format!("ingestion stopped {MAX_INGESTION_ATTEMPTS} times before it finished");
    db.execute(&sql.fail_exhausted, args![now_ms, &gave_up]).await?;
    if limit == 0 {
        return Ok(Vec::new());
    }
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let claimed = rows(db, &sql.claim, args![worker, now_ms, lease_until_ms, limit], |row| {
        Ok([codec::text(row, 0)?, codec::text(row, 1)?])
    })
    .await?;
    if claimed.is_empty() {
        return Ok(Vec::new());
    }
    let pairs = json_list(&claimed)?;
    rows(db, &sql.claimed_jobs, args![worker, &pairs], |row| {
        let attempt = codec::int(row, 5)?;
        Ok(IngestionJob {
            vector_store_id: codec::text(row, 0)?,
            file_id: codec::text(row, 1)?,
            owner: codec::text(row, 2)?,
            filename: codec::text(row, 3)?,
            chunking_strategy: serde_json::from_str(&codec::text(row, 4)?)
                .map_err(|e| StoreError::Corrupt(format!("chunking strategy: {e}")))?,
            attempt: u32::try_from(attempt).map_err(|_| StoreError::Corrupt(format!("attempt {attempt}")))?,
            embedding: codec::space(row, 6)?,
        })
    })
    .await
}

pub(crate) async fn renew_ingestion(
    db: &mut impl Db,
    worker: &str,
    files: &[(String, String)],
    lease_until_ms: i64,
) -> Result<(), StoreError> {
    if files.is_empty() {
        return Ok(());
    }
    let pairs = json_list(files)?;
    db.execute(&db.sql().renew, args![worker, lease_until_ms, &pairs]).await?;
    Ok(())
}

/// Whether `job` is still `worker`'s claim: in progress, leased to it, and not claimed since.
async fn still_claimed(db: &mut impl Db, worker: &str, job: &IngestionJob) -> Result<bool, StoreError> {
    let sql = &db.sql().lock_file_for_finish;
    let row = first(db, sql, args![&job.vector_store_id, &job.file_id], |row| {
        Ok((codec::text(row, 0)?, codec::opt_text(row, 1)?, codec::int(row, 2)?))
    })
    .await?;
    Ok(row.is_some_and(|(status, holder, attempts)| {
        status == FileStatus::InProgress.as_str()
            && holder.as_deref() == Some(worker)
            && attempts == i64::from(job.attempt)
    }))
}

pub(crate) async fn finish_ingestion(
    db: &mut impl Db,
    worker: &str,
    job: &IngestionJob,
    embedding: Option<&EmbeddingSpace>,
    chunks: &[NewChunk],
) -> Result<Finished, StoreError> {
    let sql = db.sql();
    let (store, file) = (job.vector_store_id.as_str(), job.file_id.as_str());
    let Some(space) = first(db, &sql.lock_store_space, args![&job.owner, store], |row| codec::space(row, 0)).await?
    else {
        return Ok(Finished::Gone);
    };
    if !still_claimed(db, worker, job).await? {
        return Ok(Finished::Gone);
    }
    if let Some(space) = space
        && embedding != Some(&space)
    {
        return Ok(Finished::EmbeddingMismatch(space));
    }
    let dimensions = embedding.map_or(0, |e| e.dimensions as usize);
    for (seq, chunk) in chunks.iter().enumerate() {
        let floats = chunk.embedding.as_ref().map_or(0, Vec::len);
        if floats != dimensions {
            return Err(StoreError::Corrupt(format!(
                "chunk {seq} of file {file} has an embedding of {floats} floats, not {dimensions}"
            )));
        }
    }
    insert_chunks(db, store, file, chunks).await?;
    let text_bytes = chunks.iter().map(|c| c.text.len()).sum();
    let usage = codec::usage_bytes(text_bytes, chunks.len() * dimensions);
    db.execute(&sql.complete_file, args![store, file, usage]).await?;
    let model = embedding.map(|e| e.model.as_str());
    db.execute(&sql.set_space_and_bump, args![store, model, embedding.map(|e| i64::from(e.dimensions))]).await?;
    Ok(Finished::Completed)
}

/// Write a file's chunks, [`sql::CHUNKS_PER_INSERT`] per statement (the rest one by one).
async fn insert_chunks(db: &mut impl Db, store: &str, file: &str, chunks: &[NewChunk]) -> Result<(), StoreError> {
    let sql = db.sql();
    let (whole, rest) = chunks.split_at(chunks.len() / sql::CHUNKS_PER_INSERT * sql::CHUNKS_PER_INSERT);
    let mut seq = 0;
    for rows in whole.chunks(sql::CHUNKS_PER_INSERT).chain(rest.chunks(1)) {
        let statement = if rows.len() == sql::CHUNKS_PER_INSERT { &sql.insert_chunks } else { &sql.insert_chunk };
        let embeddings: Vec<Option<Vec<u8>>> =
            rows.iter().map(|c| c.embedding.as_deref().map(codec::encode_embedding)).collect();
        let mut args = Vec::with_capacity(2 + 4 * rows.len());
        args.extend([Arg::from(store), Arg::from(file)]);
        for (chunk, embedding) in rows.iter().zip(&embeddings) {
            args.extend([
                Arg::from(seq),
                Arg::from(chunk.text.as_str()),
                Arg::from(i64::from(chunk.tokens)),
                Arg::Blob(embedding.as_deref()),
            ]);
            seq += 1;
        }
        db.execute(statement, &args).await?;
    }
    Ok(())
}

pub(crate) async fn fail_ingestion(
    db: &mut impl Db,
    worker: &str,
    job: &IngestionJob,
    error: &IngestionError,
) -> Result<bool, StoreError> {
    let args = args![
        &job.vector_store_id,
        &job.file_id,
        &job.owner,
        worker,
        &error.code,
        &error.message,
        i64::from(job.attempt),
    ];
    Ok(db.execute(&db.sql().fail_file, args).await? > 0)
}

// ----- search -----

pub(crate) async fn searchable_files(
    db: &mut impl Db,
    owner: &str,
    vector_store_ids: &[String],
) -> Result<Vec<SearchableFile>, StoreError> {
    if vector_store_ids.is_empty() {
        return Ok(Vec::new());
    }
    let list = json_list(vector_store_ids)?;
    let statement = &db.sql().searchable_files;
    rows(db, statement, args![owner, &list], |row| {
        Ok(SearchableFile {
            vector_store_id: codec::text(row, 0)?,
            file_id: codec::text(row, 1)?,
            filename: codec::text(row, 2)?,
            attributes: serde_json::from_str(&codec::text(row, 3)?)
                .map_err(|e| StoreError::Corrupt(format!("attributes: {e}")))?,
        })
    })
    .await
}

pub(crate) async fn generation(
    db: &mut impl Db,
    owner: &str,
    vector_store_id: &str,
) -> Result<Option<i64>, StoreError> {
    let statement = &db.sql().generation;
    first(db, statement, args![owner, vector_store_id], |row| codec::int(row, 0)).await
}

pub(crate) async fn vectors(
    db: &mut impl Db,
    owner: &str,
    vector_store_id: &str,
) -> Result<Option<StoreVectors>, StoreError> {
    // One row per chunk with an embedding, or one row with NULL chunk columns; none when the
    // store is missing. Without an embedding space, every row has NULL dimensions.
    let mut found: Option<StoreVectors> = None;
    let sql = &db.sql().vectors;
    db.query(sql, args![owner, vector_store_id], &mut |row| {
        let Some(dimensions) = row.int(1)? else { return Ok(()) };
        let vectors = match &mut found {
            Some(vectors) => vectors,
            None => found.insert(StoreVectors {
                generation: codec::int(row, 0)?,
                dimensions: u32::try_from(dimensions)
                    .map_err(|_| StoreError::Corrupt(format!("embedding dimensions {dimensions}")))?,
                chunk_ids: Vec::new(),
                file_ids: Vec::new(),
                vectors: Vec::new(),
            }),
        };
        let (Some(chunk_id), Some(embedding)) = (row.int(2)?, row.blob(4)?) else { return Ok(()) };
        codec::decode_embedding(embedding, vectors.dimensions as usize, &mut vectors.vectors)?;
        vectors.chunk_ids.push(chunk_id);
        vectors.file_ids.push(codec::text(row, 3)?);
        Ok(())
    })
    .await?;
    Ok(found)
}

pub(crate) async fn lexical_search(
    db: &mut impl Db,
    owner: &str,
    vector_store_ids: &[String],
    files: Option<&[(String, String)]>,
    query: &str,
    limit: usize,
) -> Result<Vec<LexicalHit>, StoreError> {
    let sql = db.sql();
    let mut terms = codec::query_terms(query);
    if terms.is_empty() || vector_store_ids.is_empty() || limit == 0 || files.is_some_and(<[_]>::is_empty) {
        return Ok(Vec::new());
    }
    // A word in more than half of the chunks has an inverse document frequency of at most zero,
    // which BM25 (FTS5's too) counts as nothing: leaving it out changes no chunk's rank among
    // those matching a rarer word, and spares ranking nearly every chunk. PostgreSQL's ranking
    // (`ts_rank_cd`) has no such weight, so the same rule bounds its work and makes both
    // backends rank by the words that tell chunks apart. A query of such words only is kept
    // whole.
    let listed = json_list(&terms)?;
    let common = rows(db, &sql.common_terms, args![&listed], |row| codec::text(row, 0)).await?;
    if common.len() < terms.len() {
        terms.retain(|term| !common.contains(term));
    }
    let asked = json_list(vector_store_ids)?;
    let stores = rows(db, &sql.owned_stores, args![owner, &asked], |row| codec::text(row, 0)).await?;
    let Some(query) = codec::lexical_query(sql.dialect, &terms) else { return Ok(Vec::new()) };
    if stores.is_empty() {
        return Ok(Vec::new());
    }
    if let Some(statement) = &sql.lexical_unfiltered
        && let Some(hits) = best_of_whole_index(db, statement, &query, &stores, files, limit).await?
    {
        return Ok(hits);
    }
    let stores = json_list(&stores)?;
    let files = files.map(json_list).transpose()?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    rows(db, &sql.lexical_search, args![&query, &stores, files.as_deref(), limit], |row| {
        Ok(LexicalHit { chunk_id: codec::int(row, 0)?, score: row.real(1)? })
    })
    .await
}

/// How many of the whole index's best chunks [`best_of_whole_index`] ranks per hit asked for.
const WHOLE_INDEX_FACTOR: usize = 4;

/// The best `limit` chunks of `stores` (restricted to `files` when given) taken from the whole
/// index's best `limit × WHOLE_INDEX_FACTOR`, when that is the exact answer: enough of those are
/// in the searched stores and files, or the index has no more matches. `None` otherwise, for the
/// filtered statement to rank the stores' chunks alone.
///
/// Why: the searched stores often hold most of the matches, and then ranking the whole index
/// and dropping other stores' chunks afterwards costs one pass without a filter, where filtering
/// first costs a lookup for every chunk of the stores. The scores are the same either way (BM25's
/// statistics are the whole index's), so the order of the kept chunks is the filtered order.
async fn best_of_whole_index(
    db: &mut impl Db,
    statement: &str,
    query: &str,
    stores: &[String],
    files: Option<&[(String, String)]>,
    limit: usize,
) -> Result<Option<Vec<LexicalHit>>, StoreError> {
    let ranked = limit.saturating_mul(WHOLE_INDEX_FACTOR);
    let allowed: Option<HashSet<(&str, &str)>> =
        files.map(|files| files.iter().map(|(store, file)| (store.as_str(), file.as_str())).collect());
    let mut seen = 0usize;
    let mut hits = Vec::with_capacity(limit);
    db.query(statement, args![query, i64::try_from(ranked).unwrap_or(i64::MAX)], &mut |row| {
        seen += 1;
        if hits.len() == limit {
            return Ok(());
        }
        let (store, file) = (row.text(2)?.unwrap_or_default(), row.text(3)?.unwrap_or_default());
        let kept = stores.iter().any(|s| s == store) && allowed.as_ref().is_none_or(|a| a.contains(&(store, file)));
        if kept {
            hits.push(LexicalHit { chunk_id: codec::int(row, 0)?, score: row.real(1)? });
        }
        Ok(())
    })
    .await?;
    Ok((hits.len() == limit || seen < ranked).then_some(hits))
}

pub(crate) async fn chunks(db: &mut impl Db, owner: &str, chunk_ids: &[i64]) -> Result<Vec<ChunkText>, StoreError> {
    if chunk_ids.is_empty() {
        return Ok(Vec::new());
    }
    // The list parameter holds strings, which the statement casts back.
    let ids: Vec<String> = chunk_ids.iter().map(i64::to_string).collect();
    let list = json_list(&ids)?;
    let statement = &db.sql().chunks;
    let mut found = rows(db, statement, args![owner, &list], |row| {
        Ok(ChunkText {
            chunk_id: codec::int(row, 0)?,
            vector_store_id: codec::text(row, 1)?,
            file_id: codec::text(row, 2)?,
            text: codec::text(row, 3)?,
        })
    })
    .await?;
    // In the order asked.
    found.sort_by_key(|c| chunk_ids.iter().position(|id| *id == c.chunk_id));
    Ok(found)
}

/// `impl RetrievalStore for $store`: each method runs its operation here through the backend's
/// macro `$run!(self, MODE, operation(arguments…))`, MODE being `read`, `adds` (a write that
/// stores something new) or `bounded` (a write that deletes or rewrites rows in place). The
/// arguments are passed as they come; the backend carries and lends them (see `carry.rs`).
macro_rules! retrieval_store {
    ($store:ty, $run:ident) => {
        #[async_trait::async_trait]
        impl $crate::retrieval::api::RetrievalStore for $store {
            async fn create_file(
                &self,
                file: $crate::retrieval::api::FileRecord,
                content: Vec<u8>,
            ) -> Result<(), $crate::StoreError> {
                $run!(self, adds, create_file(file, content))
            }

            async fn file(
                &self,
                owner: &str,
                id: &str,
            ) -> Result<Option<$crate::retrieval::api::FileRecord>, $crate::StoreError> {
                $run!(self, read, file(owner, id))
            }

            async fn files(
                &self,
                owner: &str,
                purpose: Option<&str>,
                page: &$crate::retrieval::api::Page,
            ) -> Result<$crate::retrieval::api::Listed<$crate::retrieval::api::FileRecord>, $crate::StoreError> {
                $run!(self, read, files(owner, purpose, page))
            }

            async fn file_content(&self, owner: &str, id: &str) -> Result<Option<Vec<u8>>, $crate::StoreError> {
                $run!(self, read, file_content(owner, id))
            }

            async fn delete_file(&self, owner: &str, id: &str) -> Result<bool, $crate::StoreError> {
                $run!(self, bounded, delete_file(owner, id))
            }

            async fn create_vector_store(
                &self,
                store: $crate::retrieval::api::NewVectorStore,
            ) -> Result<$crate::retrieval::api::AddFiles, $crate::StoreError> {
                $run!(self, adds, create_vector_store(store))
            }

            async fn vector_store(
                &self,
                owner: &str,
                id: &str,
            ) -> Result<Option<$crate::retrieval::api::VectorStoreView>, $crate::StoreError> {
                $run!(self, read, vector_store(owner, id))
            }

            async fn vector_stores(
                &self,
                owner: &str,
                page: &$crate::retrieval::api::Page,
            ) -> Result<$crate::retrieval::api::Listed<$crate::retrieval::api::VectorStoreView>, $crate::StoreError> {
                $run!(self, read, vector_stores(owner, page))
            }

            async fn update_vector_store(
                &self,
                owner: &str,
                id: &str,
                update: $crate::retrieval::api::VectorStoreUpdate,
            ) -> Result<Option<$crate::retrieval::api::VectorStoreView>, $crate::StoreError> {
                $run!(self, adds, update_vector_store(owner, id, update))
            }

            async fn delete_vector_store(&self, owner: &str, id: &str) -> Result<bool, $crate::StoreError> {
                $run!(self, bounded, delete_vector_store(owner, id))
            }

            async fn touch_vector_stores(&self, owner: &str, ids: &[String], now: i64) -> Result<(), $crate::StoreError> {
                $run!(self, bounded, touch_vector_stores(owner, ids, now))
            }

            async fn add_vector_store_files(
                &self,
                owner: &str,
                vector_store_id: &str,
                files: Vec<$crate::retrieval::api::NewVectorStoreFile>,
                batch: Option<&str>,
                now: i64,
            ) -> Result<$crate::retrieval::api::AddFiles, $crate::StoreError> {
                $run!(self, adds, add_vector_store_files(owner, vector_store_id, files, batch, now))
            }

            async fn vector_store_file(
                &self,
                owner: &str,
                vector_store_id: &str,
                file_id: &str,
            ) -> Result<Option<$crate::retrieval::api::VectorStoreFileRecord>, $crate::StoreError> {
                $run!(self, read, vector_store_file(owner, vector_store_id, file_id))
            }

            async fn vector_store_files(
                &self,
                owner: &str,
                vector_store_id: &str,
                filter: &$crate::retrieval::api::FileFilter,
                page: &$crate::retrieval::api::Page,
            ) -> Result<
                $crate::retrieval::api::Listed<$crate::retrieval::api::VectorStoreFileRecord>,
                $crate::StoreError,
            > {
                $run!(self, read, vector_store_files(owner, vector_store_id, filter, page))
            }

            async fn update_file_attributes(
                &self,
                owner: &str,
                vector_store_id: &str,
                file_id: &str,
                attributes: serde_json::Value,
            ) -> Result<Option<$crate::retrieval::api::VectorStoreFileRecord>, $crate::StoreError> {
                $run!(self, adds, update_file_attributes(owner, vector_store_id, file_id, attributes))
            }

            async fn remove_vector_store_file(
                &self,
                owner: &str,
                vector_store_id: &str,
                file_id: &str,
            ) -> Result<bool, $crate::StoreError> {
                $run!(self, bounded, remove_vector_store_file(owner, vector_store_id, file_id))
            }

            async fn vector_store_file_chunks(
                &self,
                owner: &str,
                vector_store_id: &str,
                file_id: &str,
            ) -> Result<Option<Vec<String>>, $crate::StoreError> {
                $run!(self, read, vector_store_file_chunks(owner, vector_store_id, file_id))
            }

            async fn batch(
                &self,
                owner: &str,
                vector_store_id: &str,
                batch_id: &str,
            ) -> Result<Option<$crate::retrieval::api::BatchRecord>, $crate::StoreError> {
                $run!(self, read, batch(owner, vector_store_id, batch_id))
            }

            async fn cancel_batch(
                &self,
                owner: &str,
                vector_store_id: &str,
                batch_id: &str,
            ) -> Result<Option<$crate::retrieval::api::BatchRecord>, $crate::StoreError> {
                $run!(self, bounded, cancel_batch(owner, vector_store_id, batch_id))
            }

            async fn claim_ingestion(
                &self,
                worker: &str,
                now_ms: i64,
                lease_until_ms: i64,
                limit: usize,
            ) -> Result<Vec<$crate::retrieval::api::IngestionJob>, $crate::StoreError> {
                $run!(self, bounded, claim_ingestion(worker, now_ms, lease_until_ms, limit))
            }

            async fn renew_ingestion(
                &self,
                worker: &str,
                files: &[(String, String)],
                lease_until_ms: i64,
            ) -> Result<(), $crate::StoreError> {
                $run!(self, bounded, renew_ingestion(worker, files, lease_until_ms))
            }

            async fn finish_ingestion(
                &self,
                worker: &str,
                job: &$crate::retrieval::api::IngestionJob,
                embedding: Option<&$crate::retrieval::api::EmbeddingSpace>,
                chunks: Vec<$crate::retrieval::api::NewChunk>,
            ) -> Result<$crate::retrieval::api::Finished, $crate::StoreError> {
                $run!(self, adds, finish_ingestion(worker, job, embedding, chunks))
            }

            async fn fail_ingestion(
                &self,
                worker: &str,
                job: &$crate::retrieval::api::IngestionJob,
                error: $crate::retrieval::api::IngestionError,
            ) -> Result<bool, $crate::StoreError> {
                $run!(self, bounded, fail_ingestion(worker, job, error))
            }

            async fn searchable_files(
                &self,
                owner: &str,
                vector_store_ids: &[String],
            ) -> Result<Vec<$crate::retrieval::api::SearchableFile>, $crate::StoreError> {
                $run!(self, read, searchable_files(owner, vector_store_ids))
            }

            async fn generation(&self, owner: &str, vector_store_id: &str) -> Result<Option<i64>, $crate::StoreError> {
                $run!(self, read, generation(owner, vector_store_id))
            }

            async fn vectors(
                &self,
                owner: &str,
                vector_store_id: &str,
            ) -> Result<Option<$crate::retrieval::api::StoreVectors>, $crate::StoreError> {
                $run!(self, read, vectors(owner, vector_store_id))
            }

            async fn lexical_search(
                &self,
                owner: &str,
                vector_store_ids: &[String],
                files: Option<&[(String, String)]>,
                query: &str,
                limit: usize,
            ) -> Result<Vec<$crate::retrieval::api::LexicalHit>, $crate::StoreError> {
                $run!(self, read, lexical_search(owner, vector_store_ids, files, query, limit))
            }

            async fn chunks(
                &self,
                owner: &str,
                chunk_ids: &[i64],
            ) -> Result<Vec<$crate::retrieval::api::ChunkText>, $crate::StoreError> {
                $run!(self, read, chunks(owner, chunk_ids))
            }
        }
    };
}
pub(crate) use retrieval_store;
