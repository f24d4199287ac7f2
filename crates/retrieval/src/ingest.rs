//! Background ingestion: [`Retrieval::spawn_ingestion`](crate::Retrieval::spawn_ingestion)'s loop.
//!
//! The loop claims vector-store files from the store's queue with a lease of [`LEASE`] (under this
//! process's worker id), at most `ingestion_concurrency` at once, and renews the leases of those it
//! holds every [`RENEW_EVERY`]. It claims again when woken ([`Retrieval::wake_ingestion`]), when a
//! file ends, and every [`POLL_EVERY`] (files queued by other workers). Each file: its bytes are
//! read, its text extracted and chunked on a blocking thread, the chunks embedded (when an
//! embedding model is configured), and everything written with `finish_ingestion`; a failure
//! marks it `failed` with `last_error` (`unsupported_file`, `invalid_file` or `server_error`).
//!
//! On shutdown the loop stops claiming and renewing; files still being worked on are ended by
//! their tasks if the process lives on, else their leases lapse and any worker claims them again
//! (the store fails a file claimed too many times), so none stays `in_progress` forever.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use respgw_store_api::retrieval::{EmbeddingSpace, Finished, IngestionError, IngestionJob, NewChunk};
use tokio::sync::Semaphore;

use crate::Retrieval;
use crate::chunk;
use crate::extract::{self, ExtractError};

/// How long a claim holds a file without renewal.
pub const LEASE: Duration = Duration::from_secs(30);
/// How often held leases are renewed.
pub const RENEW_EVERY: Duration = Duration::from_secs(10);
/// How often the queue is polled without a wake-up.
pub const POLL_EVERY: Duration = Duration::from_secs(1);

/// Unix milliseconds now.
fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)).unwrap_or(0)
}

fn lease_until(now_ms: i64) -> i64 {
    now_ms + i64::try_from(LEASE.as_millis()).unwrap_or(i64::MAX)
}

/// The files this worker holds: `(vector_store_id, file_id)`.
type Held = Arc<Mutex<HashSet<(String, String)>>>;

fn lock(held: &Held) -> std::sync::MutexGuard<'_, HashSet<(String, String)>> {
    held.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Retrieval {
    /// Tell this worker's ingestion loop that files were queued (other workers find them by polling).
    pub fn wake_ingestion(&self) {
        self.wake().notify_one();
    }

    /// Start the ingestion loop on the current runtime; it stops when `shutdown` resolves.
    pub fn spawn_ingestion(&self, shutdown: impl std::future::Future<Output = ()> + Send + 'static) {
        let retrieval = self.clone();
        tokio::spawn(async move { retrieval.ingestion_loop(shutdown).await });
    }

    async fn ingestion_loop(self, shutdown: impl std::future::Future<Output = ()> + Send) {
        let slots = Arc::new(Semaphore::new(self.settings().ingestion_concurrency.max(1)));
        let held: Held = Arc::default();
        let mut shutdown = std::pin::pin!(shutdown);
        let mut renew = tokio::time::interval(RENEW_EVERY);
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.claim_and_start(&slots, &held).await;
            tokio::select! {
                () = &mut shutdown => break,
                () = self.wake().notified() => {}
                () = tokio::time::sleep(POLL_EVERY) => {}
                _ = renew.tick() => self.renew(&held).await,
            }
        }
        tracing::debug!(worker = self.worker_id(), "ingestion stopped claiming files");
    }

    /// Claim as many files as there are free slots and start each on its own task.
    async fn claim_and_start(&self, slots: &Arc<Semaphore>, held: &Held) {
        let free = slots.available_permits();
        if free == 0 {
            return;
        }
        let now = now_ms();
        let jobs = match self.store().claim_ingestion(self.worker_id(), now, lease_until(now), free).await {
            Ok(jobs) => jobs,
            Err(error) => {
                tracing::warn!(error = %error, "could not claim files to ingest");
                return;
            }
        };
        for job in jobs {
            let Ok(permit) = Arc::clone(slots).try_acquire_owned() else { break };
            lock(held).insert((job.vector_store_id.clone(), job.file_id.clone()));
            let retrieval = self.clone();
            let held = Arc::clone(held);
            tokio::spawn(async move {
                let key = (job.vector_store_id.clone(), job.file_id.clone());
                retrieval.ingest(job).await;
                lock(&held).remove(&key);
                drop(permit);
                // A slot is free: claim the next file now rather than at the next poll.
                retrieval.wake().notify_one();
            });
        }
    }

    async fn renew(&self, held: &Held) {
        let files: Vec<(String, String)> = lock(held).iter().cloned().collect();
        if files.is_empty() {
            return;
        }
        if let Err(error) = self.store().renew_ingestion(self.worker_id(), &files, lease_until(now_ms())).await {
            tracing::warn!(error = %error, "could not renew the leases of files being ingested");
        }
    }

    /// Ingest one claimed file and record how it ended.
    async fn ingest(&self, job: IngestionJob) {
        let started = Instant::now();
        let outcome = self.ingest_file(&job).await;
        let store = self.store();
        let ok = match outcome {
            Ok(chunks) => {
                self.metrics().retrieval_ingested(true, chunks, started.elapsed());
                return;
            }
            Err(Outcome::Gone) => return,
            Err(Outcome::Failed(error)) => {
                tracing::info!(
                    vector_store_id = %job.vector_store_id,
                    file_id = %job.file_id,
                    code = %error.code,
                    "ingestion failed: {}",
                    error.message
                );
                store.fail_ingestion(self.worker_id(), &job, error).await
            }
        };
        match ok {
            Ok(true) => self.metrics().retrieval_ingested(false, 0, started.elapsed()),
            Ok(false) => {}
            Err(error) => tracing::warn!(error = %error, file_id = %job.file_id, "could not mark a file failed"),
        }
    }

    /// The file's chunks written; the number of chunks.
    async fn ingest_file(&self, job: &IngestionJob) -> Result<u64, Outcome> {
        let store = self.store();
        let server_error = |message: String| Outcome::Failed(IngestionError { code: "server_error".into(), message });
        let bytes = store
            .file_content(&job.owner, &job.file_id)
            .await
            .map_err(|e| server_error(format!("the file could not be read from the store ({e})")))?
            .ok_or(Outcome::Gone)?;
        if let (Some(embedder), Some(space)) = (self.embedder(), &job.embedding)
            && embedder.model() != space.model
        {
            return Err(mismatch(space, Some(&EmbeddingSpace { model: embedder.model().to_owned(), dimensions: 0 })));
        }
        let strategy = chunk::stored_strategy(&job.chunking_strategy);
        let filename = job.filename.clone();
        let chunks = tokio::task::spawn_blocking(move || {
            extract::extract(&filename, &bytes).map(|text| chunk::chunk(&text, strategy))
        })
        .await
        .map_err(|_| server_error("the file's text could not be extracted (the extractor failed)".to_owned()))?
        .map_err(|error: ExtractError| {
            Outcome::Failed(IngestionError { code: error.code().to_owned(), message: error.message().to_owned() })
        })?;

        let (space, embeddings) = match self.embedder() {
            Some(embedder) if !chunks.is_empty() => {
                let texts: Vec<String> = chunks.iter().map(|c| c.text.clone()).collect();
                let vectors = embedder
                    .embed(&texts)
                    .await
                    .map_err(|e| server_error(format!("the file's chunks could not be embedded: {e}")))?;
                let dimensions = vectors.first().map_or(0, Vec::len);
                let space = EmbeddingSpace {
                    model: embedder.model().to_owned(),
                    dimensions: u32::try_from(dimensions).unwrap_or(0),
                };
                (Some(space), vectors.into_iter().map(Some).collect())
            }
            // Nothing to embed: the store's space, if any, stays as it is.
            Some(_) => (job.embedding.clone(), Vec::new()),
            None => (None, vec![None; chunks.len()]),
        };
        let count = chunks.len() as u64;
        let new_chunks: Vec<NewChunk> = chunks
            .into_iter()
            .zip(embeddings)
            .map(|(chunk, embedding)| NewChunk { text: chunk.text, tokens: chunk.tokens, embedding })
            .collect();
        match store.finish_ingestion(self.worker_id(), job, space.as_ref(), new_chunks).await {
            Ok(Finished::Completed) => Ok(count),
            Ok(Finished::Gone) => Err(Outcome::Gone),
            Ok(Finished::EmbeddingMismatch(existing)) => Err(mismatch(&existing, space.as_ref())),
            Err(e) => Err(server_error(format!("the file's chunks could not be stored ({e})"))),
        }
    }
}

/// How an ingestion ended short of completion.
enum Outcome {
    /// Nothing to record: the file was removed, or is no longer this worker's.
    Gone,
    /// To be marked `failed` with this error.
    Failed(IngestionError),
}

/// The failure of a file embedded in another space (`ours`; dimensions 0 when not yet known) than
/// its store's, or not embedded (`None`) into a store that has embeddings.
fn mismatch(existing: &EmbeddingSpace, ours: Option<&EmbeddingSpace>) -> Outcome {
    let ours = match ours {
        Some(space) if space.dimensions > 0 => {
            format!("this gateway embeds with model '{}' ({} dimensions)", space.model, space.dimensions)
        }
        Some(space) => format!("this gateway embeds with model '{}'", space.model),
        None => "this gateway has no embedding model configured".to_owned(),
    };
    Outcome::Failed(IngestionError {
        code: "server_error".into(),
        message: format!(
            "the vector store's embeddings are of model '{}' ({} dimensions) but {ours}; put the file in a new \
             vector store",
            existing.model, existing.dimensions
        ),
    })
}
