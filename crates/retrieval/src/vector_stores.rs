//! The vector-store API's operations, for one owner (see [`Retrieval::vector_stores`]): stores,
//! their files and file batches, a file's chunks, and search. Ids and times are minted here;
//! files added are queued for ingestion and this worker's ingestion loop is woken.
//!
//! Statuses as OpenAI reports them: a store is `expired` past its `expires_at`, `in_progress`
//! while any of its files is, else `completed`; a batch is `cancelled` once cancelled,
//! `in_progress` while any of its files is, `failed` when none completed and some failed, else
//! `completed`. Another owner's store, file or batch is "not found", with the same one lookup.

use respgw_protocol::files::PageQuery;
use respgw_protocol::ids::{IdKind, new_id};
use respgw_protocol::listing::{Deleted, ListPage};
use respgw_protocol::vector_stores::{
    CreateFileBatch, CreateVectorStore, CreateVectorStoreFile, FileBatchObject, FileCounts, FileToAdd, LastError,
    SearchResultObject, SearchVectorStore, SinglePage, TextContent, UpdateFileAttributes, UpdateVectorStore,
    VectorStoreFileObject, VectorStoreObject,
};
use respgw_protocol::{ApiError, ErrorType};
use respgw_store_api::retrieval::{
    AddFiles, BatchRecord, FileFilter, FileStatus, NewVectorStore, NewVectorStoreFile, Page, VectorStoreFileRecord,
    VectorStoreUpdate, VectorStoreView,
};

use crate::files::{file_not_found, unix_now};
use crate::{Retrieval, SearchError, SearchRequest};

/// Vector stores (and their files) per page when a list names no `limit`, and the largest.
pub const DEFAULT_PAGE: usize = 20;
pub const MAX_PAGE: usize = 100;

/// The vector-store API for one owner (see [`Retrieval::vector_stores`]).
pub struct VectorStores<'a> {
    retrieval: &'a Retrieval,
    /// The tenant asking: it sees and changes its own stores only.
    owner: &'a str,
}

impl Retrieval {
    /// The vector-store API as `owner` sees it.
    pub fn vector_stores<'a>(&'a self, owner: &'a str) -> VectorStores<'a> {
        VectorStores { retrieval: self, owner }
    }
}

fn not_found(what: &str, id: &str, param: &str) -> ApiError {
    ApiError {
        status: 404,
        error_type: ErrorType::InvalidRequestError,
        message: format!("No {what} found with id '{id}'."),
        param: Some(param.to_owned()),
        code: Some("not_found".to_owned()),
    }
}

fn store_not_found(id: &str) -> ApiError {
    not_found("vector store", id, "vector_store_id")
}

fn counts(c: respgw_store_api::retrieval::FileCounts) -> FileCounts {
    FileCounts {
        in_progress: c.in_progress,
        completed: c.completed,
        failed: c.failed,
        cancelled: c.cancelled,
        total: c.total(),
    }
}

fn store_status(view: &VectorStoreView, now: i64) -> &'static str {
    if view.record.expires_at.is_some_and(|at| at <= now) {
        "expired"
    } else if view.file_counts.in_progress > 0 {
        "in_progress"
    } else {
        "completed"
    }
}

/// A vector store as the vector-store API shows it at `now` (unix seconds).
pub fn store_object(view: VectorStoreView, now: i64) -> VectorStoreObject {
    let status = store_status(&view, now);
    let r = view.record;
    VectorStoreObject::new(
        r.id,
        r.created_at,
        r.name,
        view.usage_bytes,
        counts(view.file_counts),
        status,
        (r.expires_after, r.expires_at),
        r.last_active_at,
        r.metadata,
    )
}

fn file_object(record: VectorStoreFileRecord) -> VectorStoreFileObject {
    VectorStoreFileObject::new(
        record.file_id,
        record.usage_bytes,
        record.created_at,
        record.vector_store_id,
        record.status.as_str(),
        record.last_error.map(|e| LastError { code: e.code, message: e.message }),
        record.chunking_strategy,
        record.attributes,
    )
}

fn batch_status(batch: &BatchRecord) -> &'static str {
    let c = batch.file_counts;
    if batch.cancelled {
        "cancelled"
    } else if c.in_progress > 0 {
        "in_progress"
    } else if c.completed == 0 && c.failed > 0 {
        "failed"
    } else {
        "completed"
    }
}

fn batch_object(batch: BatchRecord) -> FileBatchObject {
    let status = batch_status(&batch);
    FileBatchObject::new(batch.id, batch.created_at, batch.vector_store_id, status, counts(batch.file_counts))
}

fn page(query: PageQuery) -> Page {
    Page { after: query.after, before: query.before, limit: query.limit, newest_first: query.newest_first }
}

fn new_files(files: &[FileToAdd]) -> Vec<NewVectorStoreFile> {
    files
        .iter()
        .map(|f| NewVectorStoreFile {
            file_id: f.file_id.clone(),
            attributes: f.attributes.clone(),
            chunking_strategy: f.chunking_strategy.to_json(),
        })
        .collect()
}

/// `status` of a files list (`filter=`): one of the four statuses.
pub fn parse_status_filter(value: Option<&str>) -> Result<Option<FileStatus>, ApiError> {
    value
        .map(|v| {
            FileStatus::parse(v).map_err(|_| {
                ApiError::invalid("filter", "'filter' must be one of in_progress, completed, failed, cancelled.")
            })
        })
        .transpose()
}

impl VectorStores<'_> {
    /// Create a store with its first files (queued for ingestion). A file id that is not the
    /// owner's is a 404 naming it; nothing is created then.
    pub async fn create(&self, request: CreateVectorStore) -> Result<VectorStoreObject, ApiError> {
        let now = unix_now();
        let id = new_id(IdKind::VectorStore);
        let queued = !request.files.is_empty();
        let store = NewVectorStore {
            id: id.clone(),
            owner: self.owner.to_owned(),
            name: request.name,
            metadata: serde_json::Value::Object(request.metadata),
            created_at: now,
            expires_after: request.expires_after.map(|e| e.to_json()),
            expires_at: request.expires_after.map(|e| now + e.seconds()),
            files: new_files(&request.files),
        };
        match self.retrieval.store().create_vector_store(store).await? {
            AddFiles::Added => {}
            AddFiles::NoFile(file_id) => return Err(missing_file(&request.files, &file_id, "file_ids", "")),
            AddFiles::NoVectorStore => return Err(ApiError::internal("The new vector store could not be created.")),
        }
        if queued {
            self.retrieval.wake_ingestion();
        }
        self.retrieve(&id).await
    }

    pub async fn list(&self, query: PageQuery) -> Result<ListPage<VectorStoreObject>, ApiError> {
        let listed = self.retrieval.store().vector_stores(self.owner, &page(query)).await?;
        let now = unix_now();
        let data = listed.data.into_iter().map(|v| store_object(v, now)).collect();
        Ok(ListPage::new(data, listed.has_more, |v: &VectorStoreObject| &v.id))
    }

    async fn view(&self, id: &str) -> Result<VectorStoreView, ApiError> {
        self.retrieval.store().vector_store(self.owner, id).await?.ok_or_else(|| store_not_found(id))
    }

    pub async fn retrieve(&self, id: &str) -> Result<VectorStoreObject, ApiError> {
        Ok(store_object(self.view(id).await?, unix_now()))
    }

    /// Change the name, metadata or expiry (counted again from the last activity).
    pub async fn update(&self, id: &str, request: UpdateVectorStore) -> Result<VectorStoreObject, ApiError> {
        let expires_at = match request.expires_after {
            Some(Some(e)) => Some(Some(self.view(id).await?.record.last_active_at + e.seconds())),
            Some(None) => Some(None),
            None => None,
        };
        let update = VectorStoreUpdate {
            name: request.name,
            metadata: request.metadata.map(serde_json::Value::Object),
            expires_after: request.expires_after.map(|e| e.map(|e| e.to_json())),
            expires_at,
        };
        let view = self.retrieval.store().update_vector_store(self.owner, id, update).await?;
        view.map(|v| store_object(v, unix_now())).ok_or_else(|| store_not_found(id))
    }

    pub async fn delete(&self, id: &str) -> Result<Deleted, ApiError> {
        if self.retrieval.store().delete_vector_store(self.owner, id).await? {
            Ok(Deleted::new(id.to_owned(), "vector_store.deleted"))
        } else {
            Err(store_not_found(id))
        }
    }

    /// Search one store; an expired store is refused.
    pub async fn search(
        &self,
        id: &str,
        request: SearchVectorStore,
    ) -> Result<SinglePage<SearchResultObject>, ApiError> {
        let view = self.view(id).await?;
        if store_status(&view, unix_now()) == "expired" {
            return Err(ApiError::invalid(
                "vector_store_id",
                format!("Vector store '{id}' has expired; it can no longer be searched."),
            ));
        }
        let search = SearchRequest {
            owner: self.owner.to_owned(),
            vector_store_ids: vec![id.to_owned()],
            queries: request.queries.clone(),
            max_num_results: request.max_num_results,
            filters: request.filters,
            score_threshold: request.score_threshold,
            weights: None,
        };
        let results = self.retrieval.search(&search).await.map_err(|e| search_error(e, id))?;
        let data = results
            .into_iter()
            .map(|r| SearchResultObject {
                file_id: r.file_id,
                filename: r.filename,
                score: r.score,
                attributes: r.attributes,
                content: r.content.into_iter().map(TextContent::new).collect(),
            })
            .collect();
        Ok(SinglePage::search_results(request.queries, data))
    }

    /// Add one file (queued for ingestion); a file already in the store is ingested again.
    pub async fn add_file(&self, id: &str, request: CreateVectorStoreFile) -> Result<VectorStoreFileObject, ApiError> {
        let files = [request.0];
        self.add(id, &files, None, "file_id", "").await?;
        self.file(id, &files[0].file_id).await
    }

    /// Queue files, in a batch when `batch` is given; `param`/`suffix` name a missing file
    /// (`file_ids[2]`, `files[2].file_id`).
    async fn add(
        &self,
        id: &str,
        files: &[FileToAdd],
        batch: Option<&str>,
        param: &str,
        suffix: &str,
    ) -> Result<(), ApiError> {
        let added =
            self.retrieval.store().add_vector_store_files(self.owner, id, new_files(files), batch, unix_now()).await?;
        match added {
            AddFiles::Added => {
                self.retrieval.wake_ingestion();
                Ok(())
            }
            AddFiles::NoVectorStore => Err(store_not_found(id)),
            AddFiles::NoFile(file_id) => Err(missing_file(files, &file_id, param, suffix)),
        }
    }

    /// A page of the store's files, by status when given.
    pub async fn files(
        &self,
        id: &str,
        query: PageQuery,
        status: Option<FileStatus>,
    ) -> Result<ListPage<VectorStoreFileObject>, ApiError> {
        self.list_files(id, query, FileFilter { status, batch_id: None }).await
    }

    async fn list_files(
        &self,
        id: &str,
        query: PageQuery,
        filter: FileFilter,
    ) -> Result<ListPage<VectorStoreFileObject>, ApiError> {
        // The store's existence is checked first: an unknown store is a 404, not an empty page.
        self.view(id).await?;
        let listed = self.retrieval.store().vector_store_files(self.owner, id, &filter, &page(query)).await?;
        let data = listed.data.into_iter().map(file_object).collect();
        Ok(ListPage::new(data, listed.has_more, |f: &VectorStoreFileObject| &f.id))
    }

    pub async fn file(&self, id: &str, file_id: &str) -> Result<VectorStoreFileObject, ApiError> {
        let record = self.retrieval.store().vector_store_file(self.owner, id, file_id).await?;
        record.map(file_object).ok_or_else(|| self.file_missing(id, file_id))
    }

    fn file_missing(&self, id: &str, file_id: &str) -> ApiError {
        not_found(&format!("file in vector store '{id}'"), file_id, "file_id")
    }

    pub async fn update_file(
        &self,
        id: &str,
        file_id: &str,
        request: UpdateFileAttributes,
    ) -> Result<VectorStoreFileObject, ApiError> {
        let record = self.retrieval.store().update_file_attributes(self.owner, id, file_id, request.attributes).await?;
        record.map(file_object).ok_or_else(|| self.file_missing(id, file_id))
    }

    /// Remove a file from the store (the uploaded file stays).
    pub async fn remove_file(&self, id: &str, file_id: &str) -> Result<Deleted, ApiError> {
        if self.retrieval.store().remove_vector_store_file(self.owner, id, file_id).await? {
            Ok(Deleted::new(file_id.to_owned(), "vector_store.file.deleted"))
        } else {
            Err(self.file_missing(id, file_id))
        }
    }

    /// The text of a file's chunks, in order (empty until it is ingested).
    pub async fn file_content(&self, id: &str, file_id: &str) -> Result<SinglePage<TextContent>, ApiError> {
        let chunks = self.retrieval.store().vector_store_file_chunks(self.owner, id, file_id).await?;
        let chunks = chunks.ok_or_else(|| self.file_missing(id, file_id))?;
        Ok(SinglePage::file_content(chunks.into_iter().map(TextContent::new).collect()))
    }

    /// Add files in a new batch.
    pub async fn create_batch(&self, id: &str, request: CreateFileBatch) -> Result<FileBatchObject, ApiError> {
        let batch_id = new_id(IdKind::FileBatch);
        let (param, suffix) = request.file_param();
        self.add(id, &request.files, Some(&batch_id), param, suffix).await?;
        self.batch(id, &batch_id).await
    }

    pub async fn batch(&self, id: &str, batch_id: &str) -> Result<FileBatchObject, ApiError> {
        let batch = self.retrieval.store().batch(self.owner, id, batch_id).await?;
        batch.map(batch_object).ok_or_else(|| not_found("file batch", batch_id, "batch_id"))
    }

    /// Cancel a batch: its files not yet ingested are `cancelled`.
    pub async fn cancel_batch(&self, id: &str, batch_id: &str) -> Result<FileBatchObject, ApiError> {
        let batch = self.retrieval.store().cancel_batch(self.owner, id, batch_id).await?;
        batch.map(batch_object).ok_or_else(|| not_found("file batch", batch_id, "batch_id"))
    }

    /// A page of a batch's files, by status when given.
    pub async fn batch_files(
        &self,
        id: &str,
        batch_id: &str,
        query: PageQuery,
        status: Option<FileStatus>,
    ) -> Result<ListPage<VectorStoreFileObject>, ApiError> {
        self.batch(id, batch_id).await?;
        self.list_files(id, query, FileFilter { status, batch_id: Some(batch_id.to_owned()) }).await
    }
}

/// 404 for a file id of `files` the owner has no file under, naming its entry
/// (`{param}[i]{suffix}`).
fn missing_file(files: &[FileToAdd], file_id: &str, param: &str, suffix: &str) -> ApiError {
    // A single file (`file_id` of an add) is named by its field alone.
    let at = match files.iter().position(|f| f.file_id == file_id) {
        Some(i) if param != "file_id" => format!("{param}[{i}]{suffix}"),
        _ => param.to_owned(),
    };
    file_not_found(file_id, &at)
}

fn search_error(error: SearchError, id: &str) -> ApiError {
    match error {
        SearchError::VectorStoreNotFound(_) => store_not_found(id),
        SearchError::Embedding(detail) => ApiError {
            status: 502,
            error_type: ErrorType::ApiError,
            message: format!("The embedding endpoint failed to embed the query: {detail}"),
            param: None,
            code: Some("embedding_failed".to_owned()),
        },
        SearchError::Store(e) => e.into(),
    }
}

#[cfg(test)]
mod tests {
    use respgw_protocol::vector_stores::ChunkingStrategy;
    use respgw_store_api::retrieval::{FileCounts as Counts, VectorStoreRecord};
    use serde_json::json;

    use super::*;

    fn view(expires_at: Option<i64>, in_progress: u64) -> VectorStoreView {
        VectorStoreView {
            record: VectorStoreRecord {
                id: "vs_1".into(),
                owner: "o".into(),
                name: None,
                metadata: json!({}),
                created_at: 0,
                last_active_at: 0,
                expires_after: None,
                expires_at,
                embedding: None,
                generation: 0,
            },
            file_counts: Counts { in_progress, completed: 1, ..Counts::default() },
            usage_bytes: 0,
        }
    }

    fn batch(cancelled: bool, in_progress: u64, completed: u64, failed: u64) -> BatchRecord {
        BatchRecord {
            id: "vsfb_1".into(),
            vector_store_id: "vs_1".into(),
            owner: "o".into(),
            created_at: 0,
            cancelled,
            file_counts: Counts { in_progress, completed, failed, cancelled: 0 },
        }
    }

    #[test]
    fn a_store_is_expired_then_in_progress_then_completed() {
        assert_eq!(store_status(&view(Some(10), 1), 10), "expired");
        assert_eq!(store_status(&view(Some(11), 1), 10), "in_progress");
        assert_eq!(store_status(&view(None, 0), 10), "completed");
        let object = store_object(view(None, 2), 10);
        assert_eq!((object.name.as_str(), object.file_counts.total), ("", 3));
    }

    #[test]
    fn a_batch_fails_only_when_nothing_completed() {
        assert_eq!(batch_status(&batch(true, 1, 0, 0)), "cancelled");
        assert_eq!(batch_status(&batch(false, 1, 1, 1)), "in_progress");
        assert_eq!(batch_status(&batch(false, 0, 0, 2)), "failed");
        assert_eq!(batch_status(&batch(false, 0, 1, 1)), "completed");
    }

    #[test]
    fn a_missing_file_is_named_by_its_entry() {
        let file = |id: &str| FileToAdd {
            file_id: id.into(),
            attributes: json!({}),
            chunking_strategy: ChunkingStrategy::AUTO,
        };
        let files = [file("a"), file("b")];
        assert_eq!(missing_file(&files, "b", "file_ids", "").param.as_deref(), Some("file_ids[1]"));
        assert_eq!(missing_file(&files, "b", "files", ".file_id").param.as_deref(), Some("files[1].file_id"));
        let e = missing_file(&files[..1], "a", "file_id", "");
        assert_eq!((e.status, e.param.as_deref()), (404, Some("file_id")));
    }

    #[test]
    fn a_status_filter_is_one_of_the_four_statuses() {
        assert_eq!(parse_status_filter(Some("failed")).unwrap(), Some(FileStatus::Failed));
        assert_eq!(parse_status_filter(None).unwrap(), None);
        assert_eq!(parse_status_filter(Some("done")).unwrap_err().param.as_deref(), Some("filter"));
    }
}
