//! Retrieval over users' own files: what the Files and vector-store endpoints and the
//! `file_search` tool run on.
//!
//! SKELETON (issue 30): the public face below is the contract the server's routes and the
//! `file_search` tool kind code against; its bodies are being written.
//!
//! - [`Retrieval`]: one per worker, cheap to clone; holds the [`RetrievalStore`], the embedder
//!   (when an embedding model is configured), the per-worker vector cache and the ingestion wake-up.
//! - [`Retrieval::search`]: hybrid search (vector and BM25, fused) over a tenant's vector stores.
//! - [`Retrieval::spawn_ingestion`]: the background loop that claims vector-store files from the
//!   store's queue, extracts, chunks, embeds and indexes them.

pub mod files;
pub mod vector_stores;

use std::sync::Arc;

use respgw_protocol::filters::Filter;
use respgw_store_api::RetrievalStore;
use respgw_store_api::StoreError;

/// The embedding endpoint: an OpenAI-compatible `POST {base_url}/embeddings`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddingSettings {
    /// e.g. `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    pub api_key: Option<String>,
    pub model: String,
    /// Inputs per `/embeddings` request.
    pub batch_size: usize,
}

/// Everything retrieval is configured with (from `GatewayOptions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrievalSettings {
    /// `None`: search is lexical (BM25) only.
    pub embedding: Option<EmbeddingSettings>,
    /// Files ingested at once by one worker.
    pub ingestion_concurrency: usize,
    /// Bytes of embeddings one worker keeps in memory across searches.
    pub vector_cache_bytes: usize,
}

/// One search: a tenant's question over some of its vector stores.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchRequest {
    pub owner: String,
    pub vector_store_ids: Vec<String>,
    /// One or more queries; results are fused over all of them.
    pub queries: Vec<String>,
    /// 1..=50.
    pub max_num_results: usize,
    pub filters: Option<Filter>,
    /// Results scoring below it are dropped (0..=1).
    pub score_threshold: Option<f64>,
}

/// One result: a file's best-matching chunks.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchResult {
    pub vector_store_id: String,
    pub file_id: String,
    pub filename: String,
    /// 0..=1, higher is better.
    pub score: f64,
    pub attributes: serde_json::Value,
    /// The matching chunks' text, best first.
    pub content: Vec<String>,
}

/// Why a search failed.
#[derive(Debug)]
pub enum SearchError {
    /// This vector store is not the owner's (or does not exist).
    VectorStoreNotFound(String),
    /// The embedding endpoint failed.
    Embedding(String),
    Store(StoreError),
}

/// The retrieval service of one worker.
#[derive(Clone)]
pub struct Retrieval {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn RetrievalStore>,
    settings: RetrievalSettings,
}

impl Retrieval {
    pub fn new(store: Arc<dyn RetrievalStore>, settings: RetrievalSettings) -> Self {
        Retrieval { inner: Arc::new(Inner { store, settings }) }
    }

    pub fn store(&self) -> &Arc<dyn RetrievalStore> {
        &self.inner.store
    }

    pub fn settings(&self) -> &RetrievalSettings {
        &self.inner.settings
    }

    /// Search the owner's vector stores; results best first, at most `max_num_results`.
    pub async fn search(&self, _request: &SearchRequest) -> Result<Vec<SearchResult>, SearchError> {
        todo!("issue 30: hybrid search")
    }

    /// Tell this worker's ingestion loop that files were queued (other workers find them by polling).
    pub fn wake_ingestion(&self) {
        todo!("issue 30: ingestion")
    }

    /// Start the ingestion loop on the current runtime; it stops when `shutdown` resolves.
    pub fn spawn_ingestion(&self, _shutdown: impl std::future::Future<Output = ()> + Send + 'static) {
        todo!("issue 30: ingestion")
    }
}
