//! The retrieval benchmark (`respgw-bench --retrieval`): vector-store search and ingestion on a
//! SQLite store, each against a baseline measured in the same run.
//!
//! - Search: a vector store of `--retrieval-chunks` chunks (default 100,000) of 384 dimensions,
//!   written straight through the store's ingestion API (`finish_ingestion`, files of 1,000
//!   chunks), then hybrid searches through `Retrieval::search` (query embedded by an in-process
//!   mock embedder, BM25, a full vector scan from the worker's cache, fusion, the chunks' text):
//!   p50/p95 against the target p50 ≤ 50 ms, and the p50 of each of the search's stages
//!   ([`SearchStages`]). Baseline: the raw dot-product scan of the same vectors alone, what any
//!   exact search must at least do.
//! - Ingestion: files of prose queued and ingested by the real loop (read, extract, chunk by
//!   tokens, embed, store) against the mock embedder, which answers at once: chunks/s. Baseline:
//!   the chunks/s the embedder itself serves to the same client in the same batches, so the ratio
//!   says how much of ingestion is the gateway's own work.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use axum::Json;
use axum::routing::post;
use respgw_retrieval::embed::Embedder;
use respgw_retrieval::{EmbeddingSettings, Retrieval, RetrievalSettings, SearchRequest, SearchStages};
use respgw_store_api::retrieval::{
    EmbeddingSpace, FileRecord, FileStatus, Finished, NewChunk, NewVectorStore, NewVectorStoreFile, RetrievalStore,
};
use serde_json::{Value, json};

/// Target: p50 of one hybrid search over 100,000 chunks of 384 dimensions.
pub const TARGET_SEARCH_P50_MS: f64 = 50.0;
/// Target: ingestion chunks/s with an embedder that answers at once — the gateway's own cost per
/// chunk (1 ms) well under what any real embedding model takes per 800-token chunk.
pub const TARGET_INGEST_CHUNKS_PER_S: f64 = 1000.0;
/// The embeddings' length.
const DIMENSIONS: usize = 384;
/// Chunks per file in the search store.
const CHUNKS_PER_FILE: usize = 1000;
/// Inputs per embedding request.
const BATCH: usize = 64;

/// What the retrieval benchmark measured.
pub struct RetrievalResult {
    pub chunks: usize,
    pub fill: Duration,
    pub searches: Vec<Duration>,
    /// The stages of each measured search.
    pub stages: Vec<SearchStages>,
    pub cold_search: Duration,
    pub scans: Vec<Duration>,
    /// The store's lexical search alone (part of every hybrid search).
    pub lexical: Vec<Duration>,
    pub ingest_chunks: usize,
    pub ingest_time: Duration,
    pub embedder_chunks_per_s: f64,
}

/// A deterministic pseudo-random unit vector for `seed`.
fn vector(seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut v: Vec<f32> = (0..DIMENSIONS)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

/// Text of `words` words, varied by `seed`: drawn from 5,000 made-up words with a skewed
/// (roughly Zipf) frequency, as prose is, so a query's terms match some chunks, not all.
fn prose(seed: u64, words: usize) -> String {
    const SYLLABLES: [&str; 16] =
        ["ka", "lo", "mi", "ren", "to", "sha", "vel", "dor", "pi", "qua", "zen", "bro", "fi", "nu", "tra", "ges"];
    let mut state = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
    (0..words)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Squaring a uniform draw favours small ranks: frequent words are few.
            let uniform = (state >> 11) as f64 / (1u64 << 53) as f64;
            let rank = (uniform * uniform * 5000.0) as usize;
            format!("{}{}{}", SYLLABLES[rank % 16], SYLLABLES[(rank / 16) % 16], SYLLABLES[(rank / 256) % 16])
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The mock embedder: `POST /v1/embeddings` answering at once with [`vector`]s.
async fn start_mock_embedder() -> anyhow::Result<SocketAddr> {
    async fn embeddings(Json(body): Json<Value>) -> Json<Value> {
        let inputs: Vec<&str> = match &body["input"] {
            Value::String(s) => vec![s.as_str()],
            Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let data: Vec<Value> = inputs
            .iter()
            .enumerate()
            .map(|(i, text)| {
                let seed = text.bytes().fold(0u64, |h, b| h.wrapping_mul(131).wrapping_add(u64::from(b)));
                json!({"object": "embedding", "index": i, "embedding": vector(seed)})
            })
            .collect();
        Json(
            json!({"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 0, "total_tokens": 0}}),
        )
    }
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let address = listener.local_addr()?;
    let router = axum::Router::new().route("/v1/embeddings", post(embeddings));
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok(address)
}

fn now_s() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// Fill `vs_bench` with `chunks` chunks through the ingestion API.
async fn fill(store: &Arc<dyn RetrievalStore>, chunks: usize) -> anyhow::Result<()> {
    let files = chunks.div_ceil(CHUNKS_PER_FILE);
    let mut new_files = Vec::with_capacity(files);
    for f in 0..files {
        let id = format!("file-bench-{f}");
        let record = FileRecord {
            id: id.clone(),
            owner: "bench".into(),
            filename: format!("doc{f}.txt"),
            purpose: "assistants".into(),
            bytes: 1,
            created_at: now_s(),
            expires_at: None,
        };
        store.create_file(record, b"x".to_vec()).await?;
        new_files.push(NewVectorStoreFile { file_id: id, attributes: json!({"n": f}), chunking_strategy: json!({"type": "static", "static": {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400}}) });
    }
    store
        .create_vector_store(NewVectorStore {
            id: "vs_bench".into(),
            owner: "bench".into(),
            name: None,
            metadata: json!({}),
            created_at: now_s(),
            expires_after: None,
            expires_at: None,
            files: new_files,
        })
        .await?;
    let space = EmbeddingSpace { model: "mock".into(), dimensions: DIMENSIONS as u32 };
    let now_ms = now_s() * 1000;
    let mut left = chunks;
    loop {
        let jobs = store.claim_ingestion("bench-filler", now_ms, now_ms + 3_600_000, 16).await?;
        if jobs.is_empty() {
            break;
        }
        for job in jobs {
            let n = left.min(CHUNKS_PER_FILE);
            left -= n;
            let base = job.file_id.len() as u64 * 1_000_003 + job.file_id.bytes().map(u64::from).sum::<u64>() * 7919;
            let new_chunks = (0..n as u64)
                .map(|i| NewChunk { text: prose(base + i, 60), tokens: 60, embedding: Some(vector(base + i)) })
                .collect();
            match store.finish_ingestion("bench-filler", &job, Some(&space), new_chunks).await? {
                Finished::Completed => {}
                other => bail!("the bench store refused its chunks: {other:?}"),
            }
        }
    }
    Ok(())
}

/// The raw scan: dot products of `query` with every vector, keeping the best (no allocation).
fn raw_scan(query: &[f32], vectors: &[f32]) -> f32 {
    vectors.chunks_exact(DIMENSIONS).map(|v| respgw_retrieval::dot(query, v)).fold(f32::MIN, f32::max)
}

pub async fn run(chunks: usize, searches: usize, ingest_files: usize) -> anyhow::Result<RetrievalResult> {
    let dir = tempfile::tempdir()?;
    let location = dir.path().join("retrieval-bench.db").display().to_string();
    let store = respgw_store::open_stores(&location, respgw_store::StoreOptions::default())
        .await
        .context("opening the bench's SQLite store")?
        .retrieval;
    let embedder_address = start_mock_embedder().await?;
    let embedding = EmbeddingSettings {
        base_url: format!("http://{embedder_address}/v1"),
        api_key: None,
        model: "mock".into(),
        batch_size: BATCH,
        max_input_tokens: None,
    };
    let settings = RetrievalSettings {
        embedding: Some(embedding.clone()),
        ingestion_concurrency: 2,
        vector_cache_bytes: 512 << 20,
    };
    let retrieval = Retrieval::new(Arc::clone(&store), settings);

    crate::progress(&format!(
        "retrieval: filling a SQLite vector store with {chunks} chunks of {DIMENSIONS} dimensions"
    ));
    let started = Instant::now();
    fill(&store, chunks).await?;
    let fill_time = started.elapsed();

    let request = |i: usize| SearchRequest {
        owner: "bench".into(),
        vector_store_ids: vec!["vs_bench".into()],
        queries: vec![prose(i as u64 * 977 + 13, 6)],
        max_num_results: 10,
        filters: None,
        score_threshold: None,
        weights: None,
    };
    crate::progress(&format!("retrieval: 1 cold + {searches} hybrid searches"));
    let started = Instant::now();
    let first = retrieval.search(&request(0)).await?;
    let cold_search = started.elapsed();
    if first.is_empty() {
        bail!("the bench search found nothing");
    }
    let mut search_times = Vec::with_capacity(searches);
    let mut stages = Vec::with_capacity(searches);
    for i in 1..=searches {
        let started = Instant::now();
        let (_, stages_of_one) = retrieval.search_with_stages(&request(i)).await?;
        search_times.push(started.elapsed());
        stages.push(stages_of_one);
    }

    let mut lexical = Vec::with_capacity(searches);
    for i in 1..=searches {
        let query = prose(i as u64 * 977 + 13, 6);
        let started = Instant::now();
        store.lexical_search("bench", &["vs_bench".to_owned()], None, &query, 50).await?;
        lexical.push(started.elapsed());
    }

    let vectors = store.vectors("bench", "vs_bench").await?.context("the bench store has no vectors")?;
    let mut scans = Vec::with_capacity(searches);
    let mut sink = 0f32;
    for i in 0..searches {
        let query = vector(i as u64 + 1);
        let started = Instant::now();
        sink += raw_scan(&query, &vectors.vectors);
        scans.push(started.elapsed());
    }
    std::hint::black_box(sink);

    // Ingestion: files of about 4,000 tokens each (8 chunks of 800 overlapping by 400).
    crate::progress(&format!("retrieval: ingesting {ingest_files} files against the mock embedder"));
    let ids: Vec<String> = (0..ingest_files).map(|i| format!("file-ingest-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let text = prose(i as u64 + 1_000_000, 3600);
        let record = FileRecord {
            id: id.clone(),
            owner: "bench".into(),
            filename: format!("ingest{i}.txt"),
            purpose: "assistants".into(),
            bytes: text.len() as u64,
            created_at: now_s(),
            expires_at: None,
        };
        store.create_file(record, text.into_bytes()).await?;
    }
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let started = Instant::now();
    store
        .create_vector_store(NewVectorStore {
            id: "vs_ingest".into(),
            owner: "bench".into(),
            name: None,
            metadata: json!({}),
            created_at: now_s(),
            expires_after: None,
            expires_at: None,
            files: ids
                .iter()
                .map(|id| NewVectorStoreFile { file_id: id.clone(), attributes: json!({}), chunking_strategy: json!({"type": "static", "static": {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400}}) })
                .collect(),
        })
        .await?;
    retrieval.spawn_ingestion(async move {
        let _ = stopped.await;
    });
    retrieval.wake_ingestion();
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut ingest_chunks = 0;
    loop {
        let view = store.vector_store("bench", "vs_ingest").await?.context("the ingestion store vanished")?;
        if view.file_counts.in_progress == 0 {
            if view.file_counts.failed > 0 {
                bail!("{} bench files failed to ingest", view.file_counts.failed);
            }
            break;
        }
        if Instant::now() > deadline {
            bail!("ingestion did not finish within 600 s");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ingest_time = started.elapsed();
    for id in &ids {
        let record = store.vector_store_file("bench", "vs_ingest", id).await?.context("a bench file vanished")?;
        if record.status != FileStatus::Completed {
            bail!("bench file {id} is {:?}", record.status);
        }
        ingest_chunks += store.vector_store_file_chunks("bench", "vs_ingest", id).await?.map_or(0, |c| c.len());
    }

    // Baseline: the embedder's own rate, same client, same batches, same concurrency.
    let embedder = Embedder::new(embedding);
    let texts: Vec<String> = (0..ingest_chunks as u64).map(|i| prose(i, 600)).collect();
    let started = Instant::now();
    let halves: Vec<&[String]> = texts.chunks(texts.len().div_ceil(2).max(1)).collect();
    let mut tasks = Vec::new();
    for half in halves {
        let embedder = embedder.clone();
        let half = half.to_vec();
        tasks.push(tokio::spawn(async move { embedder.embed(&half).await.map(|v| v.len()) }));
    }
    for task in tasks {
        task.await?.map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let embedder_chunks_per_s = ingest_chunks as f64 / started.elapsed().as_secs_f64();

    Ok(RetrievalResult {
        chunks,
        fill: fill_time,
        searches: search_times,
        stages,
        cold_search,
        scans,
        lexical,
        ingest_chunks,
        ingest_time,
        embedder_chunks_per_s,
    })
}
