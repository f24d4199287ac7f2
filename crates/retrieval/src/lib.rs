//! Retrieval over users' own files: what the Files and vector-store endpoints and the
//! `file_search` tool run on.
//!
//! - [`Retrieval`]: one per worker, cheap to clone; holds the [`RetrievalStore`], the embedder
//!   (when an embedding model is configured), the per-worker vector cache and the ingestion wake-up.
//! - [`Retrieval::search`] (`search.rs`): hybrid search (vector and BM25, fused) over a tenant's
//!   vector stores; `cache.rs` keeps the stores' vectors between searches, `activity.rs` when
//!   the searches last marked each store active.
//! - [`Retrieval::spawn_ingestion`] (`ingest.rs`): the background loop that claims vector-store
//!   files from the store's queue, extracts (`extract.rs`), chunks (`chunk.rs`), embeds
//!   (`embed.rs`) and indexes them.
//! - [`Retrieval::files`] (`files.rs`) and [`Retrieval::vector_stores`] (`vector_stores.rs`): the
//!   operations behind the `/v1/files` and `/v1/vector_stores` routes for one owner — ids and
//!   times minted, statuses as OpenAI reports them, files queued then the ingestion woken.
//!
//! Architecture invariant: this crate writes no SQL and knows no HTTP route; it reaches the
//! database only through [`RetrievalStore`] and the outside world only through the embedding
//! endpoint. Extraction is the same for `input_file` parts (respgw-tools calls [`extract`]) and
//! for ingestion.

pub mod activity;
pub mod cache;
pub mod chunk;
pub mod embed;
pub mod extract;
mod ingest;
mod search;

pub mod files;
pub mod vector_stores;

use std::sync::Arc;

use respgw_protocol::filters::Filter;
use respgw_store_api::RetrievalStore;
use respgw_store_api::StoreError;
use respgw_telemetry::Metrics;

pub use ingest::{LEASE, POLL_EVERY, RENEW_EVERY};
pub use search::{CHUNKS_PER_FILE, SearchStages, dot};

use crate::activity::RecentTouches;
use crate::cache::VectorCache;
use crate::embed::Embedder;

/// The embedding endpoint: an OpenAI-compatible `POST {base_url}/embeddings`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddingSettings {
    /// e.g. `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    pub api_key: Option<String>,
    pub model: String,
    /// Inputs per `/embeddings` request.
    pub batch_size: usize,
    /// Tokens (cl100k_base) of a text sent to be embedded, at most: longer chunks and queries
    /// are embedded by their beginning (the stored chunk and the lexical index keep all of it).
    /// For models that read fewer tokens than a chunk has; `None`: whole texts.
    pub max_input_tokens: Option<usize>,
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
    /// How much the vector and the lexical ranks count in a hybrid search; `None`: equally.
    pub weights: Option<HybridWeights>,
}

/// The weights of a hybrid search's two kinds of ranked lists (`ranking_options.hybrid_search`):
/// each at least 0, not both 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HybridWeights {
    pub embedding: f64,
    pub text: f64,
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

impl std::fmt::Display for SearchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SearchError::VectorStoreNotFound(id) => write!(f, "no vector store found with id '{id}'"),
            SearchError::Embedding(message) => write!(f, "the search query could not be embedded: {message}"),
            SearchError::Store(error) => write!(f, "the store failed during the search: {error}"),
        }
    }
}

impl std::error::Error for SearchError {}

/// The retrieval service of one worker.
#[derive(Clone)]
pub struct Retrieval {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn RetrievalStore>,
    settings: RetrievalSettings,
    /// `None`: no embedding model, search is lexical only.
    embedder: Option<Embedder>,
    cache: VectorCache,
    /// The stores this worker's searches marked active lately.
    touches: RecentTouches,
    /// Wakes the ingestion loop (files queued here, or a slot freed).
    wake: tokio::sync::Notify,
    /// This process's name in the ingestion queue's leases.
    worker_id: String,
    metrics: Metrics,
}

impl Retrieval {
    pub fn new(store: Arc<dyn RetrievalStore>, settings: RetrievalSettings) -> Self {
        Self::with_metrics(store, settings, Metrics::new())
    }

    /// A retrieval service recording ingestion and search into `metrics`.
    pub fn with_metrics(store: Arc<dyn RetrievalStore>, settings: RetrievalSettings, metrics: Metrics) -> Self {
        let embedder = settings.embedding.clone().map(Embedder::new);
        let cache = VectorCache::new(settings.vector_cache_bytes);
        let worker_id = format!("ingest-{}-{}", std::process::id(), uuid::Uuid::new_v4().simple());
        Retrieval {
            inner: Arc::new(Inner {
                store,
                settings,
                embedder,
                cache,
                touches: RecentTouches::default(),
                wake: tokio::sync::Notify::new(),
                worker_id,
                metrics,
            }),
        }
    }

    pub fn store(&self) -> &Arc<dyn RetrievalStore> {
        &self.inner.store
    }

    pub fn settings(&self) -> &RetrievalSettings {
        &self.inner.settings
    }

    /// The embedder, when an embedding model is configured.
    pub fn embedder(&self) -> Option<&Embedder> {
        self.inner.embedder.as_ref()
    }

    /// This process's worker id in the ingestion queue.
    pub fn worker_id(&self) -> &str {
        &self.inner.worker_id
    }

    fn cache(&self) -> &VectorCache {
        &self.inner.cache
    }

    fn touches(&self) -> &RecentTouches {
        &self.inner.touches
    }

    fn wake(&self) -> &tokio::sync::Notify {
        &self.inner.wake
    }

    fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }
}
