//! Tests of the SQLite backend's own machinery: the writer thread and its group commits, the busy handler, the
//! background checkpointer and the key arithmetic of multi-row inserts. The store's behaviour as
//! seen through [`ResponseStore`] is tested in the crate's `tests` module.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use respgw_protocol::items::{ContentPart, ItemStatus, MessageItem, MessageRole};
use serde_json::json;

use super::*;
use crate::sqlite::responses::{ROLE_INPUT, ROLE_OUTPUT};

fn message(id: &str, role: MessageRole) -> Item {
    let content = match role {
        MessageRole::Assistant => ContentPart::output_text(format!("answer {id}")),
        _ => ContentPart::InputText { text: format!("text of {id}") },
    };
    Item::Message(MessageItem { id: id.into(), role, status: ItemStatus::Completed, content: vec![content] })
}

/// The owner of everything these tests store.
const OWNER: &str = "default";

fn new_response(id: &str, history_from: Option<&str>, inputs: usize, outputs: usize) -> NewResponse {
    NewResponse {
        id: id.into(),
        owner: OWNER.into(),
        previous_response_id: history_from.map(Into::into),
        model: "m".into(),
        created_at: 1_700_000_000,
        status: "completed".into(),
        response: json!({"id": id, "object": "response", "status": "completed", "output": []}),
        history_from: history_from.map(Into::into),
        input: (0..inputs).map(|n| message(&format!("{id}_in{n}"), MessageRole::User)).collect(),
        output: (0..outputs).map(|n| message(&format!("{id}_out{n}"), MessageRole::Assistant)).collect(),
        conversation: None,
        rounds: Vec::new(),
    }
}

/// The key list in a response's row.
async fn history(store: &SqliteStore, id: &str) -> Vec<i64> {
    let id = id.to_owned();
    let list: String = store
        .with_writer(move |conn| conn.query_row("SELECT history FROM responses WHERE id = ?1", [&id], |row| row.get(0)))
        .await;
    serde_json::from_str(&list).unwrap()
}

fn wal_bytes(path: &Path) -> u64 {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0)
}

/// WAL frames of 4 KiB pages (SQLite's default page size, which the store keeps).
fn frames(bytes: u64) -> u64 {
    bytes.saturating_sub(32) / (4096 + 24)
}

#[tokio::test]
async fn only_reads_fill_the_item_cache() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("cache.db")).await.unwrap();
    store.save(new_response("r1", None, 2, 1)).await.unwrap();
    store.save(new_response("r2", Some("r1"), 1, 1)).await.unwrap();
    // Saved items are not kept: allocated at the end of a stream, among the buffers of the
    // streams being served, they would keep those heap pages resident after the streams close.
    assert_eq!(store.inner.items.len(), 0);
    let first = store.history(OWNER, "r2").await.unwrap().unwrap();
    assert_eq!(first.len(), 5);
    assert_eq!(store.inner.items.len(), 5, "a read keeps what it decoded");
    assert_eq!(store.history(OWNER, "r2").await.unwrap().unwrap(), first);
}

/// Save `count` one-in-one-out responses named `{tag}_{n}` from `tasks` concurrent tasks.
async fn save_many(store: &SqliteStore, tag: &str, tasks: usize, count: usize) {
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let store = store.clone();
            let tag = tag.to_owned();
            tokio::spawn(async move {
                for n in (t..count).step_by(tasks) {
                    store.save(new_response(&format!("{tag}_{n}"), None, 1, 1)).await.unwrap();
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.unwrap();
    }
}

#[tokio::test]
async fn concurrent_saves_in_one_process_never_sleep() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("queue.db")).await.unwrap();
    // 8 writers of 10 saves each, and readers beside them: this process's writers queue for its
    // one writer connection instead of racing for SQLite's lock, and readers never wait in WAL mode.
    let writers = save_many(&store, "w", 8, 80);
    let readers = async {
        for _ in 0..40 {
            let got = store.history(OWNER, "w_0").await.unwrap();
            assert!(got.is_none_or(|c| c.len() == 2));
        }
    };
    tokio::join!(writers, readers);
    assert_eq!(store.sql_i64("SELECT COUNT(*) FROM responses").await, 80);
    assert_eq!(store.stats().busy_sleeps.load(Ordering::Relaxed), 0, "a save slept waiting for a lock");
}

/// Hold the writer thread inside a write transaction (with an uncommitted insert), as a long save
/// would, until the returned sender is used; the transaction is then rolled back.
async fn hold_the_writer(store: &SqliteStore) -> (std::sync::mpsc::Sender<()>, tokio::task::JoinHandle<()>) {
    let (held, is_held) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let store = store.clone();
    let holder = tokio::spawn(async move {
        store
            .with_writer_rolled_back(move |conn| {
                conn.execute_batch("INSERT INTO items (item_id, body) VALUES ('x', '{}');").unwrap();
                held.send(()).unwrap();
                released.recv().unwrap();
            })
            .await;
    });
    tokio::task::spawn_blocking(move || is_held.recv().unwrap()).await.unwrap();
    (release, holder)
}

#[tokio::test]
async fn reads_do_not_wait_for_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("read.db")).await.unwrap();
    store.save(new_response("r1", None, 1, 1)).await.unwrap();
    let (release, holder) = hold_the_writer(&store).await;
    let conversation = tokio::time::timeout(Duration::from_secs(5), store.history(OWNER, "r1")).await.unwrap().unwrap();
    assert_eq!(conversation.unwrap().len(), 2);
    assert!(
        tokio::time::timeout(Duration::from_secs(5), store.response(OWNER, "r1")).await.unwrap().unwrap().is_some()
    );
    release.send(()).unwrap();
    holder.await.unwrap();
    assert_eq!(store.sql_i64("SELECT COUNT(*) FROM items").await, 2, "the held insert was rolled back");
}

#[tokio::test]
async fn writes_waiting_together_commit_in_one_transaction_each_failing_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("group.db")).await.unwrap();
    store.save(new_response("taken", None, 1, 1)).await.unwrap();
    let (release, holder) = hold_the_writer(&store).await;
    // Queued behind the held transaction: two good saves around a duplicate id and a
    // continuation of a response that does not exist.
    let saves = [
        new_response("a", None, 2, 1),
        new_response("taken", None, 1, 1),
        new_response("b", Some("missing"), 1, 1),
        new_response("c", Some("a"), 1, 1),
    ];
    let tasks: Vec<_> = saves
        .into_iter()
        .map(|save| {
            let store = store.clone();
            tokio::spawn(async move { store.save(save).await })
        })
        .collect();
    // Let every task send its job.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = store.stats().write_transactions.load(Ordering::Relaxed);
    release.send(()).unwrap();
    holder.await.unwrap();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    // The held transaction, then one for the four queued saves.
    assert_eq!(store.stats().write_transactions.load(Ordering::Relaxed), before + 1);
    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert!(matches!(&results[1], Err(StoreError::Duplicate(id)) if id == "taken"), "{:?}", results[1]);
    assert!(matches!(&results[2], Err(StoreError::MissingHistory(_))), "{:?}", results[2]);
    assert!(results[3].is_ok(), "{:?}", results[3]);
    // What failed left nothing behind; what succeeded is whole.
    assert_eq!(store.history(OWNER, "c").await.unwrap().unwrap().len(), 5);
    assert!(store.response(OWNER, "b").await.unwrap().is_none());
    assert_eq!(store.sql_i64("SELECT COUNT(*) FROM items").await, 2 + 3 + 2);
    assert_eq!(store.sql_i64("SELECT COUNT(*) FROM response_items").await, 2 + 3 + 2);
    assert_eq!(store.stats().busy_sleeps.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn another_process_lock_is_waited_for_in_short_sleeps() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.db");
    let store = SqliteStore::open(&path).await.unwrap();
    // Another "process" holds the write lock for 50 ms.
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        other.execute_batch("COMMIT").unwrap();
    });
    let started = Instant::now();
    store.save(new_response("r1", None, 1, 1)).await.unwrap();
    let waited = started.elapsed();
    release.join().unwrap();
    assert!(waited >= Duration::from_millis(40), "{waited:?}");
    // 50 µs doubling up to 2 ms: about 30 sleeps for 50 ms (fewer if the machine oversleeps),
    // where SQLite's default handler would have slept in steps of up to 100 ms.
    let sleeps = store.stats().busy_sleeps.load(Ordering::Relaxed);
    assert!(sleeps >= 3, "{sleeps}");
    // One statement met the lock: one wait, however many sleeps it took.
    assert_eq!(store.lock_waits().count(), 1);
    // The time slept is counted too: about the 50 ms the lock was held.
    let waited_us = store.stats().busy_wait_micros.load(Ordering::Relaxed);
    assert!((30_000..=waited.as_micros() as u64).contains(&waited_us), "{waited_us} µs");
}

#[tokio::test]
async fn a_lock_held_past_the_budget_is_unavailable_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("budget.db");
    let config = Config { busy_budget: Duration::from_millis(100), ..Config::default() };
    let store = SqliteStore::open_with(&path, config).await.unwrap();
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = Instant::now();
    let err = store.save(new_response("r1", None, 1, 1)).await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert!(started.elapsed() >= Duration::from_millis(90), "{:?}", started.elapsed());
    other.execute_batch("ROLLBACK").unwrap();
    assert!(store.response(OWNER, "r1").await.unwrap().is_none());
    assert_eq!(store.sql_i64("SELECT COUNT(*) FROM items").await, 0);
    // And the writer is usable again.
    store.save(new_response("r1", None, 1, 1)).await.unwrap();
}

/// Poll (bounded) until the checkpointer has copied the whole WAL back into the database.
async fn wait_for_full_checkpoint(store: &SqliteStore) {
    let since = store.stats().checkpoints.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (log, copied) = *store.stats().last_checkpoint.lock().unwrap();
        if store.stats().checkpoints.load(Ordering::Relaxed) > since && log >= 0 && log == copied {
            return;
        }
        assert!(Instant::now() < deadline, "no complete checkpoint within 10 s: last {log} frames, {copied} copied");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_checkpointer_keeps_the_wal_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wal.db");
    // Production marks scaled down, so that 500 saves (a thousand frames and more, depending on
    // how many saves each group commit takes) cross them often.
    let config = Config {
        checkpoint_interval: Duration::from_millis(100),
        checkpoint_pages: 100,
        max_wal_pages: 200,
        journal_size_limit: 100 * 4096,
        ..Config::default()
    };
    let store = SqliteStore::open_with(&path, config.clone()).await.unwrap();
    // 8 writers back to back: a load that outruns the checkpointer, so that commits reach the
    // WAL limit and wait for it.
    save_many(&store, "r", 8, 500).await;
    let peak = store.stats().wal_frames_max.load(Ordering::Relaxed);
    // Reads on the pooled reader connections (with their cached statements) must not keep a
    // snapshot open afterwards: that would stop the WAL from starting over below.
    for n in 0..20 {
        let id = format!("r_{n}");
        assert!(store.response(OWNER, &id).await.unwrap().is_some());
        assert_eq!(store.history(OWNER, &id).await.unwrap().unwrap().len(), 2);
        let page = InputItemsPage { after: None, limit: 10, order: InputItemsOrder::Desc };
        assert_eq!(store.input_items(OWNER, &id, page).await.unwrap().unwrap().items.len(), 1);
    }
    wait_for_full_checkpoint(&store).await;
    // The next write starts the WAL over and truncates its file to `journal_size_limit`.
    store.save(new_response("last", None, 1, 1)).await.unwrap();
    let after = wal_bytes(&path);

    // Without the checkpointer the same saves leave every frame in the WAL: compare.
    let unchecked = Config {
        checkpoint_interval: Duration::from_secs(3600),
        checkpoint_pages: i32::MAX,
        max_wal_pages: i32::MAX,
        ..config
    };
    let path2 = dir.path().join("unchecked.db");
    let store2 = SqliteStore::open_with(&path2, unchecked).await.unwrap();
    save_many(&store2, "r", 8, 500).await;
    let unbounded = frames(wal_bytes(&path2));

    let waits = store.stats().wal_waits.load(Ordering::Relaxed);
    eprintln!("WAL frames: peak {peak}, after {}, without checkpointer {unbounded}; {waits} waits", frames(after));
    // Commits never checkpoint by themselves (SQLite's automatic checkpoint is off): all frames stay.
    assert!(unbounded > 4 * 200, "{unbounded}");
    assert_eq!(store2.stats().checkpoints.load(Ordering::Relaxed), 0);
    // At most `max_wal_pages` plus the frames of the commit that crossed it (about 8).
    assert!(peak <= 200 + 40, "peak {peak}");
    assert!(after <= 100 * 4096 + 16 * (4096 + 24), "{after}");
    assert!(store.stats().checkpoints.load(Ordering::Relaxed) > 0);
}

#[tokio::test]
async fn new_item_keys_are_contiguous() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys.db");
    let store = SqliteStore::open(&path).await.unwrap();
    store.save(new_response("r1", None, 2, 1)).await.unwrap();
    // Deleting the newest response removes the largest keys: the next keys continue after them
    // (AUTOINCREMENT), not after the largest key left.
    store.save(new_response("gone", None, 3, 0)).await.unwrap();
    assert!(store.delete(OWNER, "gone").await.unwrap());
    let c1 = store.history(OWNER, "r1").await.unwrap().unwrap();

    // More items than one multi-row INSERT takes (16): three statements, 23 input + 17 output.
    let r2 = new_response("r2", Some("r1"), 23, 17);
    let expected: Vec<Item> = c1.iter().cloned().chain(r2.input.clone()).chain(r2.output.clone()).collect();
    store.save(r2).await.unwrap();
    assert_eq!(store.history(OWNER, "r2").await.unwrap().unwrap(), expected);
    let history = history(&store, "r2").await;
    assert_eq!(history, [1, 2, 3].into_iter().chain(7..7 + 40).collect::<Vec<_>>(), "keys 4..=6 went to `gone`");

    // Each key of the list names the very row holding that item, and the roles split input from
    // output.
    let rows = store
        .with_writer(|conn| {
            let mut stmt = conn.prepare(
                "SELECT ri.item_key, i.item_id, ri.role FROM response_items ri JOIN items i ON i.key = ri.item_key
                 WHERE ri.response_id = 'r2' ORDER BY ri.position",
            )?;
            let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
            rows.collect::<rusqlite::Result<Vec<(i64, String, i64)>>>()
        })
        .await;
    assert_eq!(rows.len(), 40);
    for ((key, item_id, role), (listed, item)) in rows.iter().zip(history[3..].iter().zip(&expected[3..])) {
        assert_eq!(key, listed);
        assert_eq!(item_id, item.id());
        let expected_role = if item_id.contains("_in") { ROLE_INPUT } else { ROLE_OUTPUT };
        assert_eq!(*role, expected_role, "{item_id}");
    }
    let page = InputItemsPage { after: None, limit: 100, order: InputItemsOrder::Asc };
    let input = store.input_items(OWNER, "r2", page).await.unwrap().unwrap();
    assert_eq!(input.items.len(), 23);
    assert!(input.items.iter().enumerate().all(|(n, item)| item.id() == format!("r2_in{n}")));
}

#[tokio::test]
async fn concurrent_multi_row_saves_from_two_stores_do_not_interleave() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("interleave.db");
    let a = SqliteStore::open(&path).await.unwrap();
    let b = SqliteStore::open(&path).await.unwrap();
    let mut tasks = Vec::new();
    for (s, store) in [a.clone(), b.clone()].into_iter().enumerate() {
        for n in 0..10 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                store.save(new_response(&format!("s{s}_{n}"), None, 20, 5)).await.unwrap();
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    for s in 0..2 {
        for n in 0..10 {
            let id = format!("s{s}_{n}");
            let conv = a.history(OWNER, &id).await.unwrap().unwrap();
            let keys = history(&a, &id).await;
            assert_eq!(keys, (keys[0]..keys[0] + 25).collect::<Vec<_>>(), "{id}");
            for (k, item) in conv.iter().enumerate() {
                let want = if k < 20 { format!("{id}_in{k}") } else { format!("{id}_out{}", k - 20) };
                assert_eq!(item.id(), want);
            }
        }
    }
}

#[tokio::test]
async fn dropping_the_store_closes_everything() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("drop.db")).await.unwrap();
    store.save(new_response("r1", None, 1, 1)).await.unwrap();
    assert!(store.response(OWNER, "r1").await.unwrap().is_some());
    let clone = store.clone();
    drop(store);
    assert!(clone.history(OWNER, "r1").await.unwrap().is_some(), "clones share the connections");
    // The counters are shared by every connection's busy handler and by the checkpointer thread:
    // once the last clone is gone, only this handle is left.
    let stats = Arc::clone(&clone.inner.stats);
    drop(clone);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Arc::strong_count(&stats) > 1 {
        assert!(Instant::now() < deadline, "checkpointer thread or a connection outlived the store");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn in_memory_store_serves_reads_from_its_one_connection() {
    let store = SqliteStore::open_in_memory().await.unwrap();
    store.save(new_response("r1", None, 2, 1)).await.unwrap();
    store.save(new_response("r2", Some("r1"), 1, 1)).await.unwrap();
    assert_eq!(store.history(OWNER, "r2").await.unwrap().unwrap().len(), 5);
    assert!(store.delete(OWNER, "r1").await.unwrap());
    assert_eq!(store.history(OWNER, "r2").await.unwrap().unwrap().len(), 5);
}

/// A response whose one input item holds `bytes` of text (overflow pages: a delete frees them).
fn bulky_response(id: &str, bytes: usize) -> NewResponse {
    let mut response = new_response(id, None, 0, 1);
    let text = ContentPart::InputText { text: format!("{id} {}", "x".repeat(bytes)) };
    let item = MessageItem {
        id: format!("{id}_in"),
        role: MessageRole::User,
        status: ItemStatus::Completed,
        content: vec![text],
    };
    response.input = vec![Item::Message(item)];
    response
}

fn reserve_path(db: &Path) -> PathBuf {
    let mut path = db.as_os_str().to_owned();
    path.push("-reserve");
    PathBuf::from(path)
}

#[tokio::test]
async fn a_full_disk_still_deletes_checkpoints_and_stores_again_once_deletes_freed_space() {
    const MIB: u64 = 1 << 20;
    let disk = respgw_testkit::small_disk::SmallDisk::mount(8 * MIB);
    respgw_testkit::skip_unless!(disk.as_ref().map(|_| ()).map_err(Clone::clone));
    let Ok(disk) = disk else { return };
    let path = disk.path().join("full.db");
    // The production proportions scaled down: the reserve holds the WAL at its largest (a commit
    // that takes the WAL past `max_wal_pages` waits for a checkpoint), so that a checkpoint of any
    // WAL fits in it.
    let config = Config {
        checkpoint_interval: Duration::from_millis(100),
        checkpoint_pages: 64,
        max_wal_pages: 128,
        reserve_bytes: 2 * MIB,
        ..Config::default()
    };
    let store = SqliteStore::open_with(&path, config).await.unwrap();
    assert!(reserve_path(&path).exists(), "the reserve is made at open");

    // Fill the disk through the store: 256 KiB responses until one no longer fits.
    let mut saved = Vec::new();
    let full = loop {
        let id = format!("r{}", saved.len());
        match store.save(bulky_response(&id, 256 << 10)).await {
            Ok(()) => saved.push(id),
            Err(e) => break e,
        }
        assert!(saved.len() < 64, "8 MiB never filled up");
    };
    assert!(matches!(full, StoreError::Full(_)), "{full:?}");
    assert!(saved.len() >= 14, "{} responses stored before the disk was full", saved.len());

    // Deletes run on the released reserve, and the WAL is checkpointed into the database.
    for id in &saved[..12] {
        assert!(store.delete(OWNER, id).await.unwrap(), "{id} deleted");
    }
    wait_for_full_checkpoint(&store).await;

    // What the deletes freed (more than the reserve) is reused: new responses are stored again.
    for n in 0..2 {
        store.save(bulky_response(&format!("again{n}"), 64 << 10)).await.unwrap();
    }

    // Nothing was damaged: the file checks out, and every response stored is whole.
    assert_eq!(store.sql_string("PRAGMA integrity_check").await, "ok");
    for id in saved[12..].iter().cloned().chain((0..2).map(|n| format!("again{n}"))) {
        assert_eq!(store.history(OWNER, &id).await.unwrap().map(|items| items.len()), Some(2), "{id}");
    }
}

#[tokio::test]
async fn while_the_reserve_is_released_new_data_is_refused_and_deletes_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("released.db");
    // No checkpoint round during the test: nothing makes the reserve again.
    let config = Config { checkpoint_interval: Duration::from_secs(3600), reserve_bytes: 1 << 20, ..Config::default() };
    let store = SqliteStore::open_with(&path, config).await.unwrap();
    store.save(new_response("kept", None, 1, 1)).await.unwrap();
    let conversation = NewConversation {
        id: "conv_1".into(),
        owner: OWNER.into(),
        created_at: 1,
        metadata: serde_json::Map::new(),
        items: vec![message("c_in", MessageRole::User)],
    };
    store.create_conversation(conversation).await.unwrap();
    // As when another process found the disk full.
    std::fs::remove_file(reserve_path(&path)).unwrap();

    let refused = store.save(new_response("new", None, 1, 1)).await.unwrap_err();
    assert!(matches!(&refused, StoreError::Full(m) if m.contains("deleting")), "{refused:?}");
    let refused =
        store.append_conversation_items(OWNER, "conv_1", vec![message("c2", MessageRole::User)], usize::MAX).await;
    assert!(matches!(refused, Err(StoreError::Full(_))), "{refused:?}");
    assert!(store.response(OWNER, "new").await.unwrap().is_none());

    assert!(store.delete(OWNER, "kept").await.unwrap());
    assert!(store.delete_conversation(OWNER, "conv_1").await.unwrap());
    assert_eq!(store.sql_i64("SELECT COUNT(*) FROM items").await, 0);
}
