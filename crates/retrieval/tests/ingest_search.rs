//! Ingestion and search on the real stores (a SQLite file, a PostgreSQL schema), with the replay
//! upstream as the embedding endpoint: files of every supported kind ingested in the background,
//! hybrid and lexical-only search, filters, the score threshold, another owner's store, marking
//! stores active, an embedder that keeps failing, and a lease that lapses.

use std::sync::Arc;
use std::time::{Duration, Instant};

use respgw_protocol::filters::Filter;
use respgw_retrieval::{EmbeddingSettings, Retrieval, RetrievalSettings, SearchError, SearchRequest};
use respgw_store::StoreOptions;
use respgw_store_api::retrieval::{
    FileRecord, FileStatus, NewVectorStore, NewVectorStoreFile, RetrievalStore, VectorStoreFileRecord, VectorStoreView,
};
use respgw_testkit::ReplayUpstream;
use respgw_testkit::postgres::TestSchema;
use serde_json::{Value, json};

/// A store to run a test on, and what keeps it alive.
struct TestStore {
    store: Arc<dyn RetrievalStore>,
    _dir: Option<tempfile::TempDir>,
    _schema: Option<TestSchema>,
}

async fn sqlite() -> TestStore {
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("retrieval.db").display().to_string();
    let stores = respgw_store::open_stores(&location, StoreOptions::default()).await.unwrap();
    TestStore { store: stores.retrieval, _dir: Some(dir), _schema: None }
}

async fn postgres() -> TestStore {
    let schema = TestSchema::create().await.unwrap();
    let stores = respgw_store::open_stores(&schema.url(), StoreOptions::default()).await.unwrap();
    TestStore { store: stores.retrieval, _dir: None, _schema: Some(schema) }
}

fn settings(upstream: Option<&ReplayUpstream>) -> RetrievalSettings {
    let _ = rustls::crypto::ring::default_provider().install_default();
    RetrievalSettings {
        embedding: upstream.map(|u| EmbeddingSettings {
            base_url: u.base_url(),
            api_key: Some("embed-key".into()),
            model: "bag-of-words".into(),
            batch_size: 4,
            max_input_tokens: None,
        }),
        ingestion_concurrency: 2,
        vector_cache_bytes: 64 << 20,
    }
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

async fn upload(store: &dyn RetrievalStore, owner: &str, id: &str, filename: &str, bytes: Vec<u8>) {
    let record = FileRecord {
        id: id.into(),
        owner: owner.into(),
        filename: filename.into(),
        purpose: "assistants".into(),
        bytes: bytes.len() as u64,
        created_at: now(),
        expires_at: None,
    };
    store.create_file(record, bytes).await.unwrap();
}

fn file(id: &str, attributes: Value) -> NewVectorStoreFile {
    NewVectorStoreFile {
        file_id: id.into(),
        attributes,
        chunking_strategy: json!({"type": "static", "static": {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400}}),
    }
}

async fn create_store(store: &dyn RetrievalStore, owner: &str, id: &str, files: Vec<NewVectorStoreFile>) {
    let outcome = store
        .create_vector_store(NewVectorStore {
            id: id.into(),
            owner: owner.into(),
            name: Some(id.into()),
            metadata: json!({}),
            created_at: now(),
            expires_after: None,
            expires_at: None,
            files,
        })
        .await
        .unwrap();
    assert_eq!(outcome, respgw_store_api::retrieval::AddFiles::Added);
}

/// Wait until no file of the store is `in_progress`; their records.
async fn settled(store: &dyn RetrievalStore, owner: &str, vs: &str, files: &[&str]) -> Vec<VectorStoreFileRecord> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut records = Vec::new();
        for id in files {
            records.push(store.vector_store_file(owner, vs, id).await.unwrap().unwrap());
        }
        if records.iter().all(|r| r.status != FileStatus::InProgress) {
            return records;
        }
        assert!(Instant::now() < deadline, "still in progress: {records:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn request(owner: &str, queries: &[&str]) -> SearchRequest {
    SearchRequest {
        owner: owner.into(),
        vector_store_ids: vec!["vs_docs".into()],
        queries: queries.iter().map(|q| (*q).to_owned()).collect(),
        max_num_results: 10,
        filters: None,
        score_threshold: None,
        weights: None,
    }
}

const FILES: [&str; 4] = ["file-refunds", "file-shipping", "file-privacy", "file-warranty"];

/// Four files, one of each kind, in `vs_docs` of alice, ingested.
async fn ingested_documents(store: &dyn RetrievalStore, retrieval: &Retrieval) {
    upload(
        store,
        "alice",
        "file-refunds",
        "refunds.txt",
        b"Refunds are paid back within five business days of the return.".to_vec(),
    )
    .await;
    upload(
        store,
        "alice",
        "file-shipping",
        "shipping.md",
        b"# Shipping\n\nParcels ship from the Lyon warehouse; delivery takes two days in France.".to_vec(),
    )
    .await;
    upload(
        store,
        "alice",
        "file-privacy",
        "privacy.html",
        b"<html><body><h1>Privacy</h1><p>We never sell personal data to advertisers.</p></body></html>".to_vec(),
    )
    .await;
    upload(
        store,
        "alice",
        "file-warranty",
        "warranty.pdf",
        respgw_testkit::pdf::text_pages(&["The warranty covers battery faults for two years"]),
    )
    .await;
    create_store(
        store,
        "alice",
        "vs_docs",
        vec![
            file("file-refunds", json!({"topic": "money", "year": 2024})),
            file("file-shipping", json!({"topic": "logistics", "year": 2023})),
            file("file-privacy", json!({"topic": "legal", "year": 2025})),
            file("file-warranty", json!({"topic": "legal", "year": 2022})),
        ],
    )
    .await;
    retrieval.wake_ingestion();
    let records = settled(store, "alice", "vs_docs", &FILES).await;
    for record in &records {
        assert_eq!(record.status, FileStatus::Completed, "{record:?}");
        assert!(record.usage_bytes > 0, "{record:?}");
    }
}

async fn ingestion_and_search(test: TestStore) {
    let upstream = ReplayUpstream::start().await.unwrap();
    let store = test.store;
    let retrieval = Retrieval::new(Arc::clone(&store), settings(Some(&upstream)));
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    retrieval.spawn_ingestion(async move {
        let _ = stopped.await;
    });
    ingested_documents(store.as_ref(), &retrieval).await;

    // The chunks were embedded in batches of at most 4, with the model and key configured.
    let embeddings = upstream.embedding_requests();
    assert!(!embeddings.is_empty());
    for recorded in &embeddings {
        assert_eq!(recorded.model.as_deref(), Some("bag-of-words"));
        assert_eq!(recorded.headers["authorization"], "Bearer embed-key");
        assert!(recorded.body["input"].as_array().unwrap().len() <= 4);
    }
    let view = store.vector_store("alice", "vs_docs").await.unwrap().unwrap();
    let space = view.record.embedding.expect("an embedding space");
    assert_eq!((space.model.as_str(), space.dimensions), ("bag-of-words", 384));
    // HTML and PDF chunks are their text.
    let privacy = store.vector_store_file_chunks("alice", "vs_docs", "file-privacy").await.unwrap().unwrap();
    assert!(privacy.concat().contains("We never sell personal data") && !privacy.concat().contains("<p>"));

    // Hybrid: the refunds file answers a question about refunds, best first, scored in 0..=1.
    let results = retrieval.search(&request("alice", &["how many days until refunds are paid"])).await.unwrap();
    assert_eq!(results[0].file_id, "file-refunds", "{results:?}");
    assert_eq!(results[0].filename, "refunds.txt");
    assert_eq!(results[0].attributes, json!({"topic": "money", "year": 2024}));
    assert!(results[0].content[0].contains("five business days"));
    assert!(results.iter().all(|r| (0.0..=1.0).contains(&r.score)));
    assert!(results.windows(2).all(|w| w[0].score >= w[1].score));
    // The query was embedded too.
    let last = upstream.embedding_requests().pop().unwrap();
    assert_eq!(last.body["input"], json!(["how many days until refunds are paid"]));

    // Several queries fuse: each one's file is found.
    let results = retrieval.search(&request("alice", &["warranty battery", "Lyon warehouse"])).await.unwrap();
    let found: Vec<&str> = results.iter().take(2).map(|r| r.file_id.as_str()).collect();
    assert!(found.contains(&"file-warranty") && found.contains(&"file-shipping"), "{results:?}");

    // Filters keep only matching files.
    let mut filtered = request("alice", &["two"]);
    filtered.filters = Some(
        Filter::parse(
            &json!({"type": "and", "filters": [
                {"type": "eq", "key": "topic", "value": "legal"},
                {"type": "gte", "key": "year", "value": 2023},
            ]}),
            "filters",
        )
        .unwrap(),
    );
    let results = retrieval.search(&filtered).await.unwrap();
    assert_eq!(results.iter().map(|r| r.file_id.as_str()).collect::<Vec<_>>(), vec!["file-privacy"]);

    // max_num_results, and a threshold no result reaches.
    let mut few = request("alice", &["two days"]);
    few.max_num_results = 1;
    assert_eq!(retrieval.search(&few).await.unwrap().len(), 1);
    let mut strict = request("alice", &["refunds"]);
    strict.score_threshold = Some(1.0);
    assert!(retrieval.search(&strict).await.unwrap().iter().all(|r| r.score >= 1.0));

    // Another owner's store is not found, and nothing is searched.
    match retrieval.search(&request("bob", &["refunds"])).await {
        Err(SearchError::VectorStoreNotFound(id)) => assert_eq!(id, "vs_docs"),
        other => panic!("{other:?}"),
    }

    // A worker marks a store active at most once a minute: this one did above, so setting the
    // mark back stays unseen by its searches; another worker's search marks it now.
    store.touch_vector_stores("alice", &["vs_docs".to_owned()], 1_000).await.unwrap();
    retrieval.search(&request("alice", &["refunds"])).await.unwrap();
    let last_active_at = |view: Option<VectorStoreView>| view.map(|v| v.record.last_active_at);
    assert_eq!(last_active_at(store.vector_store("alice", "vs_docs").await.unwrap()), Some(1_000));

    // Without an embedding model, search is lexical only.
    let lexical = Retrieval::new(Arc::clone(&store), settings(None));
    let before = upstream.embedding_requests().len();
    let results = lexical.search(&request("alice", &["warranty battery"])).await.unwrap();
    assert_eq!(results[0].file_id, "file-warranty", "{results:?}");
    assert!((results[0].score - 1.0).abs() < 1e-9, "the best lexical match scores 1");
    assert_eq!(upstream.embedding_requests().len(), before);
    let marked = last_active_at(store.vector_store("alice", "vs_docs").await.unwrap()).unwrap_or_default();
    assert!(marked >= now() - 60, "marked active at {marked}");
}

async fn failures_and_lapsed_leases(test: TestStore) {
    let upstream = ReplayUpstream::start().await.unwrap();
    let store = test.store;
    let retrieval = Retrieval::new(Arc::clone(&store), settings(Some(&upstream)));
    upload(store.as_ref(), "alice", "file-a", "a.txt", b"alpha text".to_vec()).await;
    upload(store.as_ref(), "alice", "file-png", "photo.png", b"\x89PNG\r\n\x1a\n....".to_vec()).await;
    upload(store.as_ref(), "alice", "file-b", "b.txt", b"beta text".to_vec()).await;
    create_store(store.as_ref(), "alice", "vs_f", vec![file("file-a", json!({})), file("file-png", json!({}))]).await;

    // A lapsed lease: another worker claimed file-a and stopped before finishing.
    let now_ms = now() * 1000;
    let ghost = store.claim_ingestion("ghost-worker", now_ms, now_ms + 300, 10).await.unwrap();
    assert_eq!(ghost.len(), 2);

    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    retrieval.spawn_ingestion(async move {
        let _ = stopped.await;
    });
    let records = settled(store.as_ref(), "alice", "vs_f", &["file-a", "file-png"]).await;
    assert_eq!(records[0].status, FileStatus::Completed, "re-claimed after the lease lapsed: {records:?}");
    assert_eq!(records[1].status, FileStatus::Failed);
    let error = records[1].last_error.clone().unwrap();
    assert_eq!(error.code, "unsupported_file");
    assert!(error.message.contains("'photo.png' is not supported"), "{error:?}");

    // An embedder that keeps failing: retried, then failed with the reason.
    upstream.fail_embeddings(100, 500);
    let before = upstream.embedding_requests().len();
    assert_eq!(
        store.add_vector_store_files("alice", "vs_f", vec![file("file-b", json!({}))], None, now()).await.unwrap(),
        respgw_store_api::retrieval::AddFiles::Added
    );
    retrieval.wake_ingestion();
    let records = settled(store.as_ref(), "alice", "vs_f", &["file-b"]).await;
    assert_eq!(records[0].status, FileStatus::Failed);
    let error = records[0].last_error.clone().unwrap();
    assert_eq!(error.code, "server_error");
    assert!(error.message.contains("could not be embedded") && error.message.contains("after 4 attempts"), "{error:?}");
    assert_eq!(upstream.embedding_requests().len() - before, 4);
}

#[tokio::test]
async fn sqlite_ingests_and_searches() {
    ingestion_and_search(sqlite().await).await;
}

#[tokio::test]
async fn postgres_ingests_and_searches() {
    ingestion_and_search(postgres().await).await;
}

#[tokio::test]
async fn sqlite_fails_files_and_reclaims_lapsed_leases() {
    failures_and_lapsed_leases(sqlite().await).await;
}

#[tokio::test]
async fn postgres_fails_files_and_reclaims_lapsed_leases() {
    failures_and_lapsed_leases(postgres().await).await;
}
