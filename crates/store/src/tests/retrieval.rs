//! Behaviour of files, vector stores, ingestion and search, on both backends (run by `both!` in
//! the parent module).

use respgw_store_api::retrieval::{
    AddFiles, EmbeddingSpace, FileFilter, FileRecord, FileStatus, Finished, IngestionError, IngestionJob,
    MAX_INGESTION_ATTEMPTS, NewChunk, NewVectorStore, NewVectorStoreFile, Page, RetrievalStore, VectorStoreUpdate,
};
use serde_json::json;

use super::{Backend, OTHER, OWNER, TestStore};
use crate::StoreError;

const NOW: i64 = 1_700_000_000;
const FAR: i64 = i64::MAX / 2;

fn file(id: &str, created_at: i64) -> FileRecord {
    FileRecord {
        id: id.into(),
        owner: OWNER.into(),
        filename: format!("{id}.txt"),
        purpose: "assistants".into(),
        bytes: 5,
        created_at,
        expires_at: None,
    }
}

fn new_file(id: &str) -> NewVectorStoreFile {
    NewVectorStoreFile {
        file_id: id.into(),
        attributes: json!({"lang": "en", "year": 2024}),
        chunking_strategy: json!({"type": "static", "static": {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400}}),
    }
}

fn new_store(id: &str, files: &[&str]) -> NewVectorStore {
    NewVectorStore {
        id: id.into(),
        owner: OWNER.into(),
        name: Some(format!("store {id}")),
        metadata: json!({"team": "docs"}),
        created_at: NOW,
        expires_after: None,
        expires_at: None,
        files: files.iter().map(|f| new_file(f)).collect(),
    }
}

fn page(limit: usize) -> Page {
    Page { after: None, before: None, limit, newest_first: true }
}

fn chunk(text: &str, embedding: Option<Vec<f32>>) -> NewChunk {
    NewChunk { text: text.into(), tokens: text.split_whitespace().count() as u32, embedding }
}

fn space(model: &str, dimensions: u32) -> EmbeddingSpace {
    EmbeddingSpace { model: model.into(), dimensions }
}

/// Upload files `ids` (created one second apart, in order) with content `hello`.
async fn upload(store: &dyn RetrievalStore, ids: &[&str]) {
    for (i, id) in ids.iter().enumerate() {
        store.create_file(file(id, NOW + i as i64), b"hello".to_vec()).await.unwrap();
    }
}

/// Claim every waiting file for `worker`.
async fn claim_all(store: &dyn RetrievalStore, worker: &str, now_ms: i64, until_ms: i64) -> Vec<IngestionJob> {
    store.claim_ingestion(worker, now_ms, until_ms, 100).await.unwrap()
}

/// Claim the one waiting file and finish it with `chunks`.
async fn ingest(store: &dyn RetrievalStore, embedding: Option<&EmbeddingSpace>, chunks: Vec<NewChunk>) -> Finished {
    let jobs = claim_all(store, "w", 0, FAR).await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    store.finish_ingestion("w", &jobs[0], embedding, chunks).await.unwrap()
}

fn pair(store: &str, file: &str) -> (String, String) {
    (store.into(), file.into())
}

async fn rows(store: &TestStore, table: &'static str) -> i64 {
    let sql = match table {
        "files" => "SELECT COUNT(*) FROM files",
        "file_contents" => "SELECT COUNT(*) FROM file_contents",
        "vector_stores" => "SELECT COUNT(*) FROM vector_stores",
        "vector_store_files" => "SELECT COUNT(*) FROM vector_store_files",
        "vector_store_file_batches" => "SELECT COUNT(*) FROM vector_store_file_batches",
        "chunks" => "SELECT COUNT(*) FROM chunks",
        _ => unreachable!(),
    };
    store.sql_i64(sql).await
}

/// On SQLite, the FTS5 index matches its content table exactly (no orphan or missing rows).
async fn lexical_index_is_whole(store: &TestStore) {
    if let TestStore::Sqlite(sqlite) = store {
        sqlite.sql_execute("INSERT INTO chunks_fts (chunks_fts) VALUES ('integrity-check')").await;
        let indexed = sqlite.sql_i64("SELECT COUNT(*) FROM chunks_fts_docsize").await;
        assert_eq!(indexed, sqlite.sql_i64("SELECT COUNT(*) FROM chunks").await);
    }
}

fn ids<T>(listed: &[T], id: impl Fn(&T) -> &str) -> Vec<&str> {
    listed.iter().map(id).collect()
}

pub(super) async fn files_are_stored_listed_in_pages_and_deleted(backend: Backend) {
    let store = backend.open().await;
    let files = store.retrieval();
    upload(files, &["file-a", "file-b", "file-c"]).await;
    let mut other_purpose = file("file-d", NOW + 3);
    other_purpose.purpose = "user_data".into();
    files.create_file(other_purpose, vec![0, 255, 1]).await.unwrap();
    assert!(
        matches!(files.create_file(file("file-a", NOW), vec![]).await, Err(StoreError::Duplicate(id)) if id == "file-a")
    );

    assert_eq!(files.file(OWNER, "file-a").await.unwrap(), Some(file("file-a", NOW)));
    assert_eq!(files.file_content(OWNER, "file-d").await.unwrap(), Some(vec![0, 255, 1]));
    assert_eq!(files.file_content(OWNER, "file-a").await.unwrap().as_deref(), Some(&b"hello"[..]));

    let first = files.files(OWNER, None, &page(2)).await.unwrap();
    assert_eq!((ids(&first.data, |f| &f.id), first.has_more), (vec!["file-d", "file-c"], true));
    let next = Page { after: Some("file-c".into()), ..page(2) };
    let second = files.files(OWNER, None, &next).await.unwrap();
    assert_eq!((ids(&second.data, |f| &f.id), second.has_more), (vec!["file-b", "file-a"], false));
    let back = Page { before: Some("file-b".into()), ..page(1) };
    let previous = files.files(OWNER, None, &back).await.unwrap();
    assert_eq!((ids(&previous.data, |f| &f.id), previous.has_more), (vec!["file-c"], true));
    let oldest = Page { newest_first: false, ..page(10) };
    let ascending = files.files(OWNER, Some("assistants"), &oldest).await.unwrap();
    assert_eq!(ids(&ascending.data, |f| &f.id), ["file-a", "file-b", "file-c"]);
    let unknown = Page { after: Some("file-zzz".into()), ..page(10) };
    assert!(files.files(OWNER, None, &unknown).await.unwrap().data.is_empty());

    assert!(files.delete_file(OWNER, "file-a").await.unwrap());
    assert!(!files.delete_file(OWNER, "file-a").await.unwrap());
    assert_eq!(files.file(OWNER, "file-a").await.unwrap(), None);
    assert_eq!(files.file_content(OWNER, "file-a").await.unwrap(), None);
    assert_eq!(rows(&store, "file_contents").await, 3);
}

pub(super) async fn vector_stores_are_created_counted_updated_touched_and_deleted(backend: Backend) {
    let store = backend.open().await;
    let r = store.retrieval();
    upload(r, &["file-a", "file-b"]).await;
    let mut expiring = new_store("vs_1", &["file-a", "file-b"]);
    expiring.expires_after = Some(json!({"anchor": "last_active_at", "days": 2}));
    expiring.expires_at = Some(NOW + 2 * 86400);
    assert_eq!(r.create_vector_store(expiring).await.unwrap(), AddFiles::Added);
    assert_eq!(
        r.create_vector_store(NewVectorStore { created_at: NOW + 1, ..new_store("vs_2", &[]) }).await.unwrap(),
        AddFiles::Added
    );
    assert!(matches!(r.create_vector_store(new_store("vs_2", &[])).await, Err(StoreError::Duplicate(_))));

    let view = r.vector_store(OWNER, "vs_1").await.unwrap().unwrap();
    assert_eq!(view.record.name.as_deref(), Some("store vs_1"));
    assert_eq!(view.record.metadata, json!({"team": "docs"}));
    assert_eq!((view.record.created_at, view.record.last_active_at), (NOW, NOW));
    assert_eq!(view.record.expires_at, Some(NOW + 2 * 86400));
    assert_eq!((view.record.embedding.clone(), view.record.generation), (None, 0));
    assert_eq!((view.file_counts.in_progress, view.file_counts.total(), view.usage_bytes), (2, 2, 0));

    let listed = r.vector_stores(OWNER, &page(1)).await.unwrap();
    assert_eq!((ids(&listed.data, |v| &v.record.id), listed.has_more), (vec!["vs_2"], true));
    let rest = r.vector_stores(OWNER, &Page { after: Some("vs_2".into()), ..page(5) }).await.unwrap();
    assert_eq!((ids(&rest.data, |v| &v.record.id), rest.has_more), (vec!["vs_1"], false));
    assert_eq!(rest.data[0].file_counts.in_progress, 2);
    let back = r.vector_stores(OWNER, &Page { before: Some("vs_1".into()), ..page(5) }).await.unwrap();
    assert_eq!((ids(&back.data, |v| &v.record.id), back.has_more), (vec!["vs_2"], false));

    // Searching keeps it alive: the expiry moves with `last_active_at`.
    r.touch_vector_stores(OWNER, &["vs_1".into(), "vs_2".into()], NOW + 100).await.unwrap();
    let touched = r.vector_store(OWNER, "vs_1").await.unwrap().unwrap().record;
    assert_eq!((touched.last_active_at, touched.expires_at), (NOW + 100, Some(NOW + 100 + 2 * 86400)));
    assert_eq!(r.vector_store(OWNER, "vs_2").await.unwrap().unwrap().record.expires_at, None);

    let renamed = VectorStoreUpdate { name: Some("renamed".into()), ..Default::default() };
    let view = r.update_vector_store(OWNER, "vs_1", renamed).await.unwrap().unwrap();
    assert_eq!((view.record.name.as_deref(), view.record.metadata.clone()), (Some("renamed"), json!({"team": "docs"})));
    assert_eq!(view.file_counts.in_progress, 2);
    let unexpiring = VectorStoreUpdate {
        metadata: Some(json!({})),
        expires_after: Some(None),
        expires_at: Some(None),
        ..Default::default()
    };
    let view = r.update_vector_store(OWNER, "vs_1", unexpiring).await.unwrap().unwrap();
    assert_eq!((view.record.expires_after, view.record.expires_at, view.record.metadata), (None, None, json!({})));
    r.touch_vector_stores(OWNER, &["vs_1".into()], NOW + 200).await.unwrap();
    assert_eq!(r.vector_store(OWNER, "vs_1").await.unwrap().unwrap().record.expires_at, None);
    assert_eq!(r.update_vector_store(OWNER, "vs_9", VectorStoreUpdate::default()).await.unwrap(), None);

    for job in claim_all(r, "w", 0, FAR).await {
        assert_eq!(
            r.finish_ingestion("w", &job, None, vec![chunk("some words", None)]).await.unwrap(),
            Finished::Completed
        );
    }
    assert!(r.delete_vector_store(OWNER, "vs_1").await.unwrap());
    assert!(!r.delete_vector_store(OWNER, "vs_1").await.unwrap());
    assert_eq!(r.vector_store(OWNER, "vs_1").await.unwrap(), None);
    // Its files' rows and chunks are gone; the uploaded files stay.
    assert_eq!((rows(&store, "vector_store_files").await, rows(&store, "chunks").await), (0, 0));
    assert_eq!(rows(&store, "files").await, 2);
    lexical_index_is_whole(&store).await;
}

pub(super) async fn adding_files_checks_them_first_and_a_refusal_writes_nothing(backend: Backend) {
    let store = backend.open().await;
    let r = store.retrieval();
    upload(r, &["file-a", "file-b"]).await;
    let mut theirs = file("file-x", NOW);
    theirs.owner = OTHER.into();
    r.create_file(theirs, vec![1]).await.unwrap();

    let refused = r.create_vector_store(new_store("vs_1", &["file-a", "file-x", "file-zz"])).await.unwrap();
    assert_eq!(refused, AddFiles::NoFile("file-x".into()));
    assert_eq!(rows(&store, "vector_stores").await, 0);
    assert_eq!(r.create_vector_store(new_store("vs_1", &["file-a"])).await.unwrap(), AddFiles::Added);
    let add = |files: &[&str]| files.iter().map(|f| new_file(f)).collect::<Vec<_>>();
    let refused = r.add_vector_store_files(OWNER, "vs_1", add(&["file-b", "file-nope"]), Some("vsfb_1"), NOW).await;
    assert_eq!(refused.unwrap(), AddFiles::NoFile("file-nope".into()));
    let missing = r.add_vector_store_files(OWNER, "vs_nope", add(&["file-b"]), None, NOW).await.unwrap();
    assert_eq!(missing, AddFiles::NoVectorStore);
    let theirs = r.add_vector_store_files(OTHER, "vs_1", vec![], None, NOW).await.unwrap();
    assert_eq!(theirs, AddFiles::NoVectorStore);
    assert_eq!((rows(&store, "vector_store_files").await, rows(&store, "vector_store_file_batches").await), (1, 0));

    let added = r.add_vector_store_files(OWNER, "vs_1", add(&["file-b"]), Some("vsfb_1"), NOW + 5).await.unwrap();
    assert_eq!(added, AddFiles::Added);
    let record = r.vector_store_file(OWNER, "vs_1", "file-b").await.unwrap().unwrap();
    assert_eq!(
        (record.status, record.batch_id.as_deref(), record.created_at),
        (FileStatus::InProgress, Some("vsfb_1"), NOW + 5)
    );
    assert_eq!(record.attributes, json!({"lang": "en", "year": 2024}));
    assert_eq!(record.chunking_strategy["type"], "static");
    assert_eq!((record.usage_bytes, record.last_error), (0, None));
}

pub(super) async fn ingestion_claims_oldest_first_and_finishes_with_chunks(backend: Backend) {
    let store = backend.open().await;
    let r = store.retrieval();
    upload(r, &["file-a", "file-b", "file-c"]).await;
    r.create_vector_store(new_store("vs_1", &["file-a", "file-b"])).await.unwrap();
    r.add_vector_store_files(OWNER, "vs_1", vec![new_file("file-c")], None, NOW).await.unwrap();

    let first = r.claim_ingestion("w1", 1000, 5000, 2).await.unwrap();
    assert_eq!(ids(&first, |j| &j.file_id), ["file-a", "file-b"]);
    assert_eq!((first[0].attempt, first[0].owner.as_str(), first[0].filename.as_str()), (1, OWNER, "file-a.txt"));
    assert_eq!(first[0].embedding, None);
    // Held files are not handed out again while their lease lasts.
    let second = r.claim_ingestion("w2", 1000, 5000, 10).await.unwrap();
    assert_eq!(ids(&second, |j| &j.file_id), ["file-c"]);
    assert!(r.claim_ingestion("w3", 4000, 9000, 10).await.unwrap().is_empty());
    // A renewed lease holds past its first end; the other worker's lapses.
    r.renew_ingestion("w1", &[pair("vs_1", "file-a"), pair("vs_1", "file-b")], 20_000).await.unwrap();
    r.renew_ingestion("w3", &[pair("vs_1", "file-c")], 20_000).await.unwrap();
    let retaken = r.claim_ingestion("w3", 6000, 30_000, 10).await.unwrap();
    assert_eq!((ids(&retaken, |j| &j.file_id), retaken[0].attempt), (vec!["file-c"], 2));

    let space = space("embed-small", 3);
    let chunks = vec![chunk("alpha beta", Some(vec![1.0, 2.0, 3.0])), chunk("gamma", Some(vec![4.0, 5.0, 6.0]))];
    assert_eq!(r.finish_ingestion("w1", &first[0], Some(&space), chunks).await.unwrap(), Finished::Completed);
    let done = r.vector_store_file(OWNER, "vs_1", "file-a").await.unwrap().unwrap();
    assert_eq!((done.status, done.usage_bytes), (FileStatus::Completed, (10 + 12) + (5 + 12)));
    let view = r.vector_store(OWNER, "vs_1").await.unwrap().unwrap();
    assert_eq!((view.record.embedding, view.record.generation), (Some(space.clone()), 1));
    assert_eq!((view.file_counts.completed, view.file_counts.in_progress, view.usage_bytes), (1, 2, 39));
    assert_eq!(r.vector_store_file_chunks(OWNER, "vs_1", "file-a").await.unwrap().unwrap(), ["alpha beta", "gamma"]);

    let error = IngestionError { code: "unsupported_file".into(), message: "no text".into() };
    assert!(r.fail_ingestion("w1", &first[1], error.clone()).await.unwrap());
    assert!(!r.fail_ingestion("w1", &first[1], error.clone()).await.unwrap());
    let failed = r.vector_store_file(OWNER, "vs_1", "file-b").await.unwrap().unwrap();
    assert_eq!((failed.status, failed.last_error), (FileStatus::Failed, Some(error.clone())));
    assert_eq!(r.vector_store_file_chunks(OWNER, "vs_1", "file-b").await.unwrap().unwrap(), Vec::<String>::new());
    // The first claim of file-c is no longer its holder's: its finish and failure change nothing.
    assert_eq!(r.finish_ingestion("w2", &second[0], Some(&space), vec![]).await.unwrap(), Finished::Gone);
    assert!(!r.fail_ingestion("w2", &second[0], error).await.unwrap());

    let statuses = |status| FileFilter { status: Some(status), batch_id: None };
    let completed = r.vector_store_files(OWNER, "vs_1", &statuses(FileStatus::Completed), &page(10)).await.unwrap();
    assert_eq!(ids(&completed.data, |f| &f.file_id), ["file-a"]);
    let oldest_first = Page { newest_first: false, ..page(2) };
    let all = r.vector_store_files(OWNER, "vs_1", &FileFilter::default(), &oldest_first).await.unwrap();
    assert_eq!((ids(&all.data, |f| &f.file_id), all.has_more), (vec!["file-a", "file-b"], true));
    let updated = r.update_file_attributes(OWNER, "vs_1", "file-a", json!({"k": true})).await.unwrap().unwrap();
    assert_eq!((updated.attributes, updated.status), (json!({"k": true}), FileStatus::Completed));
    lexical_index_is_whole(&store).await;
}

pub(super) async fn a_lapsed_lease_is_claimed_again_until_its_attempts_run_out(backend: Backend) {
    let store = backend.open().await;
    let r = store.retrieval();
    upload(r, &["file-a"]).await;
    r.create_vector_store(new_store("vs_1", &["file-a"])).await.unwrap();
    let mut now = 0;
    for attempt in 1..=MAX_INGESTION_ATTEMPTS {
        let jobs = r.claim_ingestion("w", now, now + 10, 10).await.unwrap();
        assert_eq!((jobs.len(), jobs[0].attempt), (1, attempt));
        now += 20;
    }
    // The last lease lapsed too: the file fails instead of being handed out again.
    assert!(r.claim_ingestion("w", now, now + 10, 10).await.unwrap().is_empty());
    let failed = r.vector_store_file(OWNER, "vs_1", "file-a").await.unwrap().unwrap();
    assert_eq!(failed.status, FileStatus::Failed);
    assert_eq!(failed.last_error.map(|e| e.code), Some("server_error".into()));
}

pub(super) async fn a_late_finish_after_removal_or_cancel_writes_nothing(backend: Backend) {
    let store = backend.open().await;
    let r = store.retrieval();
    upload(r, &["file-a", "file-b", "file-c"]).await;
    r.create_vector_store(new_store("vs_1", &["file-a"])).await.unwrap();
    let batch = vec![new_file("file-b"), new_file("file-c")];
    r.add_vector_store_files(OWNER, "vs_1", batch, Some("vsfb_1"), NOW).await.unwrap();
    let jobs = claim_all(r, "w", 0, FAR).await;
    assert_eq!(jobs.len(), 3);
    let generation = r.generation(OWNER, "vs_1").await.unwrap().unwrap();

    assert!(r.remove_vector_store_file(OWNER, "vs_1", "file-a").await.unwrap());
    assert!(!r.remove_vector_store_file(OWNER, "vs_1", "file-a").await.unwrap());
    let cancelled = r.cancel_batch(OWNER, "vs_1", "vsfb_1").await.unwrap().unwrap();
    assert!(cancelled.cancelled);
    assert_eq!((cancelled.file_counts.cancelled, cancelled.file_counts.total()), (2, 2));
    for job in &jobs {
        let late = r.finish_ingestion("w", job, None, vec![chunk("late text", None)]).await.unwrap();
        assert_eq!(late, Finished::Gone, "{}", job.file_id);
    }
    assert_eq!(rows(&store, "chunks").await, 0);
    assert_eq!(r.vector_store_file(OWNER, "vs_1", "file-b").await.unwrap().unwrap().status, FileStatus::Cancelled);
    // The removal moved the generation on; the refused finishes did not.
    assert_eq!(r.generation(OWNER, "vs_1").await.unwrap(), Some(generation + 1));
    assert_eq!(r.batch(OWNER, "vs_1", "vsfb_1").await.unwrap().unwrap().file_counts.cancelled, 2);
    assert_eq!(r.batch(OWNER, "vs_2", "vsfb_1").await.unwrap(), None);
    // Cancelled files are not claimed again.
    assert!(claim_all(r, "w", FAR, FAR + 1).await.is_empty());
}

pub(super) async fn a_finish_in_another_embedding_space_writes_nothing(backend: Backend) {
    let store = backend.open().await;
    let r = store.retrieval();
    upload(r, &["file-a", "file-b"]).await;
    r.create_vector_store(new_store("vs_1", &["file-a"])).await.unwrap();
    let small = space("embed-small", 2);
    assert_eq!(ingest(r, Some(&small), vec![chunk("one", Some(vec![0.5, 0.25]))]).await, Finished::Completed);
    r.add_vector_store_files(OWNER, "vs_1", vec![new_file("file-b")], None, NOW).await.unwrap();
    let job = claim_all(r, "w", 0, FAR).await.remove(0);
    assert_eq!(job.embedding, Some(small.clone()));
    for other in [Some(space("embed-large", 2)), Some(space("embed-small", 3)), None] {
        let refused = r.finish_ingestion("w", &job, other.as_ref(), vec![chunk("two", None)]).await.unwrap();
        assert_eq!(refused, Finished::EmbeddingMismatch(small.clone()));
    }
    assert_eq!(rows(&store, "chunks").await, 1);
    assert_eq!(r.vector_store_file(OWNER, "vs_1", "file-b").await.unwrap().unwrap().status, FileStatus::InProgress);
    let good = vec![chunk("two", Some(vec![1.0, -1.0]))];
    assert_eq!(r.finish_ingestion("w", &job, Some(&small), good).await.unwrap(), Finished::Completed);
}

pub(super) async fn deleting_a_file_removes_it_from_every_store_with_its_chunks(backend: Backend) {
    let store = backend.open().await;
    let r = store.retrieval();
    upload(r, &["file-a", "file-b"]).await;
    r.create_vector_store(new_store("vs_1", &["file-a"])).await.unwrap();
    ingest(r, None, vec![chunk("first store", None)]).await;
    r.create_vector_store(new_store("vs_2", &["file-a", "file-b"])).await.unwrap();
    for job in claim_all(r, "w", 0, FAR).await {
        r.finish_ingestion("w", &job, None, vec![chunk("second store", None), chunk("more", None)]).await.unwrap();
    }
    assert_eq!(rows(&store, "chunks").await, 5);
    let generations = (r.generation(OWNER, "vs_1").await.unwrap(), r.generation(OWNER, "vs_2").await.unwrap());
    assert!(!r.delete_file(OTHER, "file-a").await.unwrap());
    assert!(r.delete_file(OWNER, "file-a").await.unwrap());
    assert_eq!(rows(&store, "chunks").await, 2);
    assert_eq!((rows(&store, "vector_store_files").await, rows(&store, "file_contents").await), (1, 1));
    assert_eq!(r.generation(OWNER, "vs_1").await.unwrap(), generations.0.map(|g| g + 1));
    assert_eq!(r.generation(OWNER, "vs_2").await.unwrap(), generations.1.map(|g| g + 1));
    assert_eq!(r.vector_store(OWNER, "vs_2").await.unwrap().unwrap().file_counts.total(), 1);
    lexical_index_is_whole(&store).await;
}

pub(super) async fn re_adding_a_file_replaces_it(backend: Backend) {
    let store = backend.open().await;
    let r = store.retrieval();
    upload(r, &["file-a"]).await;
    r.create_vector_store(new_store("vs_1", &["file-a"])).await.unwrap();
    ingest(r, None, vec![chunk("old words", None)]).await;
    let generation = r.generation(OWNER, "vs_1").await.unwrap().unwrap();
    let again = NewVectorStoreFile { attributes: json!({"v": 2}), ..new_file("file-a") };
    r.add_vector_store_files(OWNER, "vs_1", vec![again], None, NOW + 9).await.unwrap();
    let record = r.vector_store_file(OWNER, "vs_1", "file-a").await.unwrap().unwrap();
    assert_eq!((record.status, record.attributes, record.usage_bytes), (FileStatus::InProgress, json!({"v": 2}), 0));
    assert_eq!(rows(&store, "chunks").await, 0);
    assert_eq!(r.generation(OWNER, "vs_1").await.unwrap(), Some(generation + 1));
    let job = claim_all(r, "w", 0, FAR).await.remove(0);
    assert_eq!(job.attempt, 1);
    r.finish_ingestion("w", &job, None, vec![chunk("new words", None)]).await.unwrap();
    assert_eq!(r.vector_store_file_chunks(OWNER, "vs_1", "file-a").await.unwrap().unwrap(), ["new words"]);
    lexical_index_is_whole(&store).await;
}

/// A word in most chunks adds nothing to a ranking by a rarer word (it is left out of the query:
/// on PostgreSQL once the table's statistics know it), and a query of such words alone still
/// finds their chunks.
pub(super) async fn words_in_most_chunks_neither_rank_nor_hide_the_rest(backend: Backend) {
    let store = backend.open().await;
    let r = store.retrieval();
    upload(r, &["file-a"]).await;
    r.create_vector_store(new_store("vs_1", &["file-a"])).await.unwrap();
    let texts = [
        "The gateway keeps responses.",
        "The gateway gateway forwards requests to the model.",
        "The gateway counts tokens.",
        "Penguins visit the gateway once.",
        "Bread needs yeast.",
    ];
    ingest(r, None, texts.iter().map(|t| chunk(t, None)).collect()).await;
    let stores = ["vs_1".to_owned()];

    let hits = r.lexical_search(OWNER, &stores, None, "gateway penguins", 10).await.unwrap();
    let best = r.chunks(OWNER, &[hits[0].chunk_id]).await.unwrap();
    assert!(best[0].text.starts_with("Penguins"), "{hits:?}");
    let common_only = r.lexical_search(OWNER, &stores, None, "gateway", 10).await.unwrap();
    assert_eq!(common_only.len(), 4, "{common_only:?}");

    // With the statistics PostgreSQL keeps, "gateway" is left out there: the rarer word's chunk
    // alone is ranked. (SQLite looks the word up unstemmed in its index of stemmed terms, where
    // it is "gatewai", so it ranks the common word's chunks after, with their near-zero scores.)
    store.sql_execute("ANALYZE chunks").await;
    let hits = r.lexical_search(OWNER, &stores, None, "gateway penguins", 10).await.unwrap();
    if matches!(store, TestStore::Postgres(_)) {
        assert_eq!(hits.len(), 1, "{hits:?}");
    }
    let best = r.chunks(OWNER, &[hits[0].chunk_id]).await.unwrap();
    assert!(best[0].text.starts_with("Penguins"), "{hits:?}");
    assert_eq!(r.lexical_search(OWNER, &stores, None, "gateway", 10).await.unwrap().len(), 4);
}

pub(super) async fn lexical_search_ranks_the_relevant_chunk_first_and_survives_hostile_queries(backend: Backend) {
    let store = backend.open().await;
    let r = store.retrieval();
    upload(r, &["file-a", "file-b"]).await;
    r.create_vector_store(new_store("vs_1", &["file-a"])).await.unwrap();
    let texts = [
        "The quarterly report covers revenue and costs.",
        "Penguins are flightless birds living in the Southern Hemisphere; penguins swim well.",
        "A recipe for bread: flour, water, salt and yeast.",
    ];
    ingest(r, None, texts.iter().map(|t| chunk(t, None)).collect()).await;
    r.create_vector_store(new_store("vs_2", &["file-b"])).await.unwrap();
    ingest(r, None, vec![chunk("Another penguin colony was counted.", None)]).await;
    let stores = ["vs_1".to_owned(), "vs_2".to_owned()];

    let hits = r.lexical_search(OWNER, &stores, None, "where do penguins live?", 10).await.unwrap();
    assert!(hits.len() >= 2, "{hits:?}");
    let best = r.chunks(OWNER, &[hits[0].chunk_id]).await.unwrap();
    assert!(best[0].text.starts_with("Penguins"), "{best:?}");
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score), "{hits:?}");
    // Any term may match (stemming: "penguin" finds "penguins").
    let either = r.lexical_search(OWNER, &stores, None, "zzzz yeast", 10).await.unwrap();
    assert_eq!(either.len(), 1);
    // Restricted to a list of files, or to the stores asked.
    let only_b = [pair("vs_2", "file-b")];
    let filtered = r.lexical_search(OWNER, &stores, Some(&only_b), "penguin", 10).await.unwrap();
    let texts_found = r.chunks(OWNER, &filtered.iter().map(|h| h.chunk_id).collect::<Vec<_>>()).await.unwrap();
    assert_eq!(ids(&texts_found, |c| &c.file_id), ["file-b"]);
    assert!(r.lexical_search(OWNER, &stores, Some(&[]), "penguin", 10).await.unwrap().is_empty());
    assert_eq!(r.lexical_search(OWNER, &stores[..1], None, "penguin", 10).await.unwrap().len(), 1);
    assert_eq!(r.lexical_search(OWNER, &stores, None, "penguin", 1).await.unwrap().len(), 1);
    // Another owner finds nothing in these stores.
    assert!(r.lexical_search(OTHER, &stores, None, "penguin", 10).await.unwrap().is_empty());

    for hostile in [
        "\"",
        "*",
        "AND OR NOT",
        "NEAR(",
        "-",
        "^",
        "",
        "   ",
        "🐧🐧",
        "penguin\"",
        "(penguin",
        "penguin*",
        "col:penguin",
        "'; DROP TABLE chunks; --",
        "a:b AND -c",
        "NEAR(penguin bread, 2)",
        "\\",
        "{x}",
        "x | y & !z",
        "\0",
    ] {
        let found = r.lexical_search(OWNER, &stores, None, hostile, 10).await;
        assert!(found.is_ok(), "{hostile:?}: {found:?}");
    }
    assert!(r.lexical_search(OWNER, &stores, None, "\"*^-():🦀", 10).await.unwrap().is_empty());
    let quoted = r.lexical_search(OWNER, &stores, None, "\"penguin\" NOT*", 10).await.unwrap();
    assert_eq!(quoted.len(), 2);
    assert_eq!(rows(&store, "chunks").await, 4);
}

/// The lexical search keeps exactly the stores and files asked — a store whose id extends
/// another's (`vs_a_b`, `vs_a`) is not searched with it — whether the other stores' chunks rank
/// above the asked ones (more than the search ranks from the whole index) or not; and the kept
/// chunks come in the order and with the scores of a search over both stores.
pub(super) async fn the_store_filter_is_exact_however_the_other_stores_rank(backend: Backend) {
    let store = backend.open().await;
    let r = store.retrieval();
    upload(r, &["file-a", "file-b", "file-c"]).await;
    r.create_vector_store(new_store("vs_a", &["file-a"])).await.unwrap();
    ingest(r, None, vec![chunk("One penguin stood on the ice.", None)]).await;
    r.create_vector_store(new_store("vs_a_b", &["file-b", "file-c"])).await.unwrap();
    // Twenty chunks that rank above vs_a's for "penguin" (more of the word, shorter).
    let crowd: Vec<NewChunk> = (0..20).map(|i| chunk(&format!("Penguin penguins penguin {i}."), None)).collect();
    let jobs = claim_all(r, "w", 0, FAR).await;
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    r.finish_ingestion("w", &jobs[0], None, crowd.clone()).await.unwrap();
    r.finish_ingestion("w", &jobs[1], None, vec![chunk("A penguin colony.", None)]).await.unwrap();
    let a = ["vs_a".to_owned()];
    let both = ["vs_a".to_owned(), "vs_a_b".to_owned()];

    for limit in [1, 2, 10, 50] {
        let hits = r.lexical_search(OWNER, &a, None, "penguin", limit).await.unwrap();
        let found = r.chunks(OWNER, &hits.iter().map(|h| h.chunk_id).collect::<Vec<_>>()).await.unwrap();
        assert_eq!(ids(&found, |c| &c.vector_store_id), ["vs_a"], "limit {limit}: {hits:?}");
    }
    let all = r.lexical_search(OWNER, &both, None, "penguin", 50).await.unwrap();
    assert_eq!(all.len(), 22, "{all:?}");
    assert!(all.windows(2).all(|w| w[0].score >= w[1].score), "{all:?}");
    let only_a = r.lexical_search(OWNER, &a, None, "penguin", 1).await.unwrap();
    assert_eq!(all.last().map(|h| h.chunk_id), Some(only_a[0].chunk_id), "vs_a's chunk ranks last of all");
    assert!((all.last().unwrap().score - only_a[0].score).abs() < 1e-9, "{all:?} {only_a:?}");
    // A file restriction within a store, the rest of it ranking above: exact too.
    let only_c = [pair("vs_a_b", "file-c")];
    let hits = r.lexical_search(OWNER, &both, Some(&only_c), "penguin", 1).await.unwrap();
    let found = r.chunks(OWNER, &hits.iter().map(|h| h.chunk_id).collect::<Vec<_>>()).await.unwrap();
    assert_eq!(ids(&found, |c| &c.file_id), ["file-c"], "{hits:?}");
    // The best of the crowd is what a search of vs_a_b alone returns first.
    let top = r.lexical_search(OWNER, &["vs_a_b".to_owned()], None, "penguin", 3).await.unwrap();
    assert_eq!(top, all[..3].to_vec());
}

pub(super) async fn vectors_round_trip_floats_exactly(backend: Backend) {
    let store = backend.open().await;
    let r = store.retrieval();
    upload(r, &["file-a", "file-b"]).await;
    r.create_vector_store(new_store("vs_1", &["file-a"])).await.unwrap();
    assert_eq!(r.vectors(OWNER, "vs_1").await.unwrap(), None);
    let space = space("m", 3);
    let floats = [[0.1f32, -0.0, f32::MAX], [f32::MIN_POSITIVE, 1e-30, -7.5]];
    let chunks = floats.iter().enumerate().map(|(i, v)| chunk(&format!("chunk {i}"), Some(v.to_vec()))).collect();
    assert_eq!(ingest(r, Some(&space), chunks).await, Finished::Completed);
    let vectors = r.vectors(OWNER, "vs_1").await.unwrap().unwrap();
    assert_eq!((vectors.dimensions, vectors.generation, vectors.chunk_ids.len()), (3, 1, 2));
    let bits: Vec<u32> = vectors.vectors.iter().map(|x| x.to_bits()).collect();
    assert_eq!(bits, floats.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>());
    assert_eq!(vectors.file_ids, ["file-a", "file-a"]);
    let texts = r.chunks(OWNER, &[vectors.chunk_ids[1], vectors.chunk_ids[0], 999_999]).await.unwrap();
    assert_eq!(ids(&texts, |c| &c.text), ["chunk 1", "chunk 0"]);
    assert_eq!(r.vectors(OTHER, "vs_1").await.unwrap(), None);
    assert_eq!(r.vectors(OWNER, "vs_nope").await.unwrap(), None);

    let searchable = r.searchable_files(OWNER, &["vs_1".into(), "vs_nope".into()]).await.unwrap();
    assert_eq!(ids(&searchable, |f| &f.file_id), ["file-a"]);
    assert_eq!(
        (searchable[0].filename.as_str(), searchable[0].attributes["lang"].as_str()),
        ("file-a.txt", Some("en"))
    );
    // In-progress files are not searchable.
    r.add_vector_store_files(OWNER, "vs_1", vec![new_file("file-b")], None, NOW).await.unwrap();
    assert_eq!(r.searchable_files(OWNER, &["vs_1".into()]).await.unwrap().len(), 1);
}

/// Every method given another owner's id answers as for a missing one, and changes nothing.
pub(super) async fn another_owners_retrieval_objects_are_missing(backend: Backend) {
    let store = backend.open().await;
    let r = store.retrieval();
    upload(r, &["file-a"]).await;
    r.create_vector_store(new_store("vs_1", &["file-a"])).await.unwrap();
    r.add_vector_store_files(OWNER, "vs_1", vec![new_file("file-a")], Some("vsfb_1"), NOW).await.unwrap();
    let job = claim_all(r, "w", 0, FAR).await.remove(0);
    r.finish_ingestion("w", &job, None, vec![chunk("owned text", None)]).await.unwrap();
    let chunk_id = r.lexical_search(OWNER, &["vs_1".into()], None, "owned", 1).await.unwrap()[0].chunk_id;

    assert_eq!(r.file(OTHER, "file-a").await.unwrap(), None);
    assert!(r.files(OTHER, None, &page(10)).await.unwrap().data.is_empty());
    assert_eq!(r.file_content(OTHER, "file-a").await.unwrap(), None);
    assert!(!r.delete_file(OTHER, "file-a").await.unwrap());
    assert_eq!(r.vector_store(OTHER, "vs_1").await.unwrap(), None);
    assert!(r.vector_stores(OTHER, &page(10)).await.unwrap().data.is_empty());
    let update = VectorStoreUpdate { name: Some("stolen".into()), ..Default::default() };
    assert_eq!(r.update_vector_store(OTHER, "vs_1", update).await.unwrap(), None);
    r.touch_vector_stores(OTHER, &["vs_1".into()], NOW + 50).await.unwrap();
    assert_eq!(r.vector_store_file(OTHER, "vs_1", "file-a").await.unwrap(), None);
    let listed = r.vector_store_files(OTHER, "vs_1", &FileFilter::default(), &page(10)).await.unwrap();
    assert!(listed.data.is_empty());
    assert_eq!(r.update_file_attributes(OTHER, "vs_1", "file-a", json!({})).await.unwrap(), None);
    assert!(!r.remove_vector_store_file(OTHER, "vs_1", "file-a").await.unwrap());
    assert_eq!(r.vector_store_file_chunks(OTHER, "vs_1", "file-a").await.unwrap(), None);
    assert_eq!(r.batch(OTHER, "vs_1", "vsfb_1").await.unwrap(), None);
    assert_eq!(r.cancel_batch(OTHER, "vs_1", "vsfb_1").await.unwrap(), None);
    assert!(r.searchable_files(OTHER, &["vs_1".into()]).await.unwrap().is_empty());
    assert_eq!(r.generation(OTHER, "vs_1").await.unwrap(), None);
    assert_eq!(r.vectors(OTHER, "vs_1").await.unwrap(), None);
    assert!(r.chunks(OTHER, &[chunk_id]).await.unwrap().is_empty());
    assert!(!r.delete_vector_store(OTHER, "vs_1").await.unwrap());

    let view = r.vector_store(OWNER, "vs_1").await.unwrap().unwrap();
    assert_eq!((view.record.name.as_deref(), view.record.last_active_at), (Some("store vs_1"), NOW));
    assert_eq!(view.file_counts.completed, 1);
    assert_eq!(r.chunks(OWNER, &[chunk_id]).await.unwrap().len(), 1);
    assert_eq!(r.file_content(OWNER, "file-a").await.unwrap().as_deref(), Some(&b"hello"[..]));
}
