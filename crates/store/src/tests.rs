//! Store behaviour tests, each run against both backends: a real SQLite file in a temporary
//! directory, and a fresh schema on the test PostgreSQL server (see `respgw_testkit::postgres`).
//! `both!` turns one `async fn(Backend)` into a `sqlite` and a `postgres` test.

use std::sync::Arc;

use respgw_protocol::Item;
use respgw_protocol::items::{ContentPart, ItemStatus, MessageItem, MessageRole};
use respgw_testkit::postgres::TestSchema;
use serde_json::json;

use super::*;

/// Where a test's store lives; reopening it gives a second store on the same database.
enum Backend {
    Sqlite(tempfile::TempDir),
    Postgres(TestSchema),
}

impl Backend {
    fn sqlite() -> Self {
        Backend::Sqlite(tempfile::tempdir().unwrap())
    }

    async fn postgres() -> Self {
        Backend::Postgres(TestSchema::create().await.unwrap())
    }

    fn location(&self) -> String {
        match self {
            Backend::Sqlite(dir) => dir.path().join("store.db").display().to_string(),
            Backend::Postgres(schema) => schema.url(),
        }
    }

    /// Open a store on this backend's database (creating the schema on first use).
    async fn try_open(&self) -> Result<TestStore, StoreError> {
        Ok(match self {
            Backend::Sqlite(_) => TestStore::Sqlite(SqliteStore::open(self.location()).await?),
            Backend::Postgres(_) => TestStore::Postgres(PostgresStore::open(&self.location(), 8).await?),
        })
    }

    async fn open(&self) -> TestStore {
        self.try_open().await.unwrap()
    }
}

/// A store of either backend, with raw SQL access for checks.
enum TestStore {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
}

impl std::ops::Deref for TestStore {
    type Target = dyn ResponseStore;

    fn deref(&self) -> &Self::Target {
        match self {
            TestStore::Sqlite(store) => store,
            TestStore::Postgres(store) => store,
        }
    }
}

impl TestStore {
    async fn sql_i64(&self, sql: &'static str) -> i64 {
        match self {
            TestStore::Sqlite(store) => store.sql_i64(sql).await,
            TestStore::Postgres(store) => sqlx::query_scalar(sql).fetch_one(store.pool()).await.unwrap(),
        }
    }

    async fn sql_strings(&self, sql: &'static str) -> Vec<String> {
        match self {
            TestStore::Sqlite(store) => store.sql_strings(sql).await,
            TestStore::Postgres(store) => sqlx::query_scalar(sql).fetch_all(store.pool()).await.unwrap(),
        }
    }

    async fn sql_execute(&self, sql: &'static str) {
        match self {
            TestStore::Sqlite(store) => store.sql_execute(sql).await,
            TestStore::Postgres(store) => {
                sqlx::raw_sql(sql).execute(store.pool()).await.unwrap();
            }
        }
    }

    /// The key list a response's row keeps (tombstones included).
    async fn history_keys(&self, id: &str) -> Vec<i64> {
        match self {
            TestStore::Sqlite(store) => {
                let id = id.to_owned();
                let list: String = store
                    .with_writer(move |conn| {
                        conn.query_row("SELECT history FROM responses WHERE id = ?1", [&id], |row| row.get(0))
                    })
                    .await;
                serde_json::from_str(&list).unwrap()
            }
            TestStore::Postgres(store) => sqlx::query_scalar("SELECT history FROM responses WHERE id = $1")
                .bind(id)
                .fetch_one(store.pool())
                .await
                .unwrap(),
        }
    }

    /// How many keys in stored responses' histories (tombstones included) name no item row. Reads
    /// through the store would not tell: the item cache still holds what was deleted.
    async fn dangling_history_keys(&self) -> i64 {
        match self {
            TestStore::Sqlite(store) => {
                store
                    .sql_i64(
                        "SELECT COUNT(*) FROM responses r, json_each(r.history) h
                        WHERE NOT EXISTS (SELECT 1 FROM items i WHERE i.key = h.value)",
                    )
                    .await
            }
            TestStore::Postgres(store) => sqlx::query_scalar(
                "SELECT COUNT(*) FROM responses r, unnest(r.history) h(key)
                WHERE NOT EXISTS (SELECT 1 FROM items i WHERE i.key = h.key)",
            )
            .fetch_one(store.pool())
            .await
            .unwrap(),
        }
    }

    /// The retrieval face of the same store.
    fn retrieval(&self) -> &dyn RetrievalStore {
        match self {
            TestStore::Sqlite(store) => store,
            TestStore::Postgres(store) => store,
        }
    }

    /// The background face of the same store.
    fn background(&self) -> &dyn BackgroundStore {
        match self {
            TestStore::Sqlite(store) => store,
            TestStore::Postgres(store) => store,
        }
    }

    /// Record a schema version newer than this code's.
    async fn bump_schema_version(&self) {
        match self {
            TestStore::Sqlite(store) => store.sql_execute("PRAGMA user_version = 99").await,
            TestStore::Postgres(store) => {
                sqlx::raw_sql("INSERT INTO respgw_schema_migrations (version) VALUES (99)")
                    .execute(store.pool())
                    .await
                    .unwrap();
            }
        }
    }
}

/// Run one `async fn(Backend)` as two tests, `NAME::sqlite` and `NAME::postgres`.
macro_rules! both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$name(super::Backend::sqlite()).await;
            }

            #[tokio::test]
            async fn postgres() {
                respgw_testkit::skip_unless!(respgw_testkit::prerequisites::postgres());
                super::$name(super::Backend::postgres().await).await;
            }
        }
    )*};
}

both!(
    save_then_response_round_trips,
    chain_of_three_reads_in_one_conversation_and_stores_items_once,
    input_items_pages_own_input_only,
    delete_keeps_continuations_and_collects_orphans,
    duplicate_and_missing_history_write_nothing,
    continuing_a_response_deleted_meanwhile,
    a_version_1_database_is_migrated,
    two_stores_on_one_database_write_concurrently,
    corrupt_rows_and_newer_schema_are_reported,
    deletes_racing_continuations_never_leave_dangling_history,
    conversations_are_created_read_updated_and_deleted,
    conversation_items_append_page_and_delete,
    appending_past_the_item_limit_writes_nothing,
    saving_into_a_conversation_extends_it,
    stale_or_deleted_conversations_write_nothing,
    two_stores_racing_saves_into_one_conversation,
    deleting_in_any_order_keeps_every_history_whole_and_leaves_nothing,
    a_version_2_database_is_migrated,
    concurrent_deletes_of_a_conversation_and_its_responses_leave_nothing,
    saves_racing_deletes_in_a_conversation_store_whole_histories_or_nothing,
    another_owners_responses_are_not_there,
    another_owners_conversations_are_not_there,
    a_run_logs_batches_and_ends_with_its_save_in_one_transaction,
    a_cancel_closes_the_log_and_turns_the_owner_away,
    expired_leases_are_found_and_renewed_ones_are_not,
    a_failed_save_writes_none_of_its_batch,
    purging_drops_only_old_logs_of_ended_runs,
    the_queue_refuses_runs_beyond_its_bounds_for_the_gateway_and_per_tenant,
    the_next_run_started_is_of_the_tenant_with_fewest_running,
    files_are_stored_listed_in_pages_and_deleted,
    vector_stores_are_created_counted_updated_touched_and_deleted,
    adding_files_checks_them_first_and_a_refusal_writes_nothing,
    ingestion_claims_oldest_first_and_finishes_with_chunks,
    a_lapsed_lease_is_claimed_again_until_its_attempts_run_out,
    a_late_finish_after_removal_or_cancel_writes_nothing,
    a_finish_in_another_embedding_space_writes_nothing,
    deleting_a_file_removes_it_from_every_store_with_its_chunks,
    re_adding_a_file_replaces_it,
    lexical_search_ranks_the_relevant_chunk_first_and_survives_hostile_queries,
    words_in_most_chunks_neither_rank_nor_hide_the_rest,
    the_store_filter_is_exact_however_the_other_stores_rank,
    vectors_round_trip_floats_exactly,
    another_owners_retrieval_objects_are_missing,
);

/// Another owner's response id reads, pages, continues and deletes exactly like an unknown one,
/// and changes nothing.
async fn another_owners_responses_are_not_there(backend: Backend) {
    let store = backend.open().await;
    store.save(new_response("r1", None, vec![user("a")], vec![assistant("b")])).await.unwrap();
    store.save(new_response("r2", Some("r1"), vec![user("c")], vec![assistant("d")])).await.unwrap();
    let page = || InputItemsPage { after: None, limit: 20, order: InputItemsOrder::Asc };
    for id in ["r1", "r2", "unknown"] {
        assert_eq!(store.response(OTHER, id).await.unwrap(), None, "{id}");
        assert_eq!(store.history(OTHER, id).await.unwrap(), None, "{id}");
        assert_eq!(store.input_items(OTHER, id, page()).await.unwrap(), None, "{id}");
        assert!(!store.delete(OTHER, id).await.unwrap(), "{id}");
    }
    // A continuation saved by another owner finds no history to share, as if it had been deleted.
    let stolen = NewResponse { owner: OTHER.into(), ..new_response("r3", Some("r2"), vec![user("e")], vec![]) };
    assert!(matches!(store.save(stolen).await, Err(StoreError::MissingHistory(_))));
    assert_eq!(count(&store, "responses").await, 2);
    // The owner's view is untouched.
    assert_eq!(ids(&store.history(OWNER, "r2").await.unwrap().unwrap()), ["a", "b", "c", "d"]);
    assert_eq!(store.input_items(OWNER, "r2", page()).await.unwrap().unwrap().items, vec![user("c")]);
    assert!(store.response(OWNER, "r1").await.unwrap().is_some());
    // Ids are global: another owner cannot take one that is stored.
    let taken = NewResponse { owner: OTHER.into(), ..new_response("r1", None, vec![user("x")], vec![]) };
    assert!(matches!(store.save(taken).await, Err(StoreError::Duplicate(_))));
    assert!(store.delete(OWNER, "r2").await.unwrap());
    assert!(store.delete(OWNER, "r1").await.unwrap());
    assert!(items_left(&store).await.is_empty());
}

/// Another owner's conversation id reads, lists, changes, continues and deletes exactly like an
/// unknown one, and changes nothing (not even its version).
async fn another_owners_conversations_are_not_there(backend: Backend) {
    let store = backend.open().await;
    store.create_conversation(new_conversation("conv_1", vec![user("a")])).await.unwrap();
    let version_before = version(&store, "conv_1").await;
    let page = || InputItemsPage { after: None, limit: 20, order: InputItemsOrder::Asc };
    for id in ["conv_1", "conv_unknown"] {
        assert_eq!(store.conversation(OTHER, id).await.unwrap(), None, "{id}");
        assert_eq!(store.update_conversation(OTHER, id, metadata(&[("k", "v")])).await.unwrap(), None, "{id}");
        assert_eq!(store.conversation_history(OTHER, id).await.unwrap(), None, "{id}");
        assert_eq!(store.conversation_items(OTHER, id, page()).await.unwrap(), None, "{id}");
        assert_eq!(store.append_conversation_items(OTHER, id, vec![user("x")], NO_LIMIT).await.unwrap(), None, "{id}");
        assert_eq!(store.conversation_item(OTHER, id, "a").await.unwrap(), ConversationItemLookup::NoConversation);
        assert_eq!(
            store.delete_conversation_item(OTHER, id, "a").await.unwrap(),
            ConversationItemLookup::NoConversation
        );
        assert!(!store.delete_conversation(OTHER, id).await.unwrap(), "{id}");
    }
    let stolen =
        NewResponse { owner: OTHER.into(), ..in_conversation("r1", "conv_1", version_before, vec![user("e")], vec![]) };
    assert!(matches!(store.save(stolen).await, Err(StoreError::ConversationGone(_))));
    assert_eq!(count(&store, "responses").await, 0);
    assert_eq!(version(&store, "conv_1").await, version_before);
    let record = store.conversation(OWNER, "conv_1").await.unwrap().unwrap();
    assert_eq!(record.metadata, metadata(&[("topic", "demo")]));
    assert_eq!(ids(&store.conversation_items(OWNER, "conv_1", page()).await.unwrap().unwrap().items), ["a"]);
    assert!(store.delete_conversation(OWNER, "conv_1").await.unwrap());
    assert!(items_left(&store).await.is_empty());
}

/// A delete of a response while continuations of it are being saved: every save either stores a
/// complete conversation or reports the history as gone (writing nothing), and the delete keeps
/// every item a stored continuation references.
async fn deletes_racing_continuations_never_leave_dangling_history(backend: Backend) {
    let store = Arc::new(backend.open().await);
    for round in 0..5 {
        let root = format!("root{round}");
        let (a, b) = (format!("{root}_a"), format!("{root}_b"));
        store.save(new_response(&root, None, vec![user(&a)], vec![assistant(&b)])).await.unwrap();
        let saves: Vec<_> = (0..8)
            .map(|n| {
                let (store, root) = (Arc::clone(&store), root.clone());
                tokio::spawn(async move {
                    let id = format!("{root}_next{n}");
                    let saved =
                        store.save(new_response(&id, Some(&root), vec![user(&format!("{id}_in"))], vec![])).await;
                    (id, saved)
                })
            })
            .collect();
        assert!(store.delete(OWNER, &root).await.unwrap());
        for save in saves {
            let (id, saved) = save.await.unwrap();
            match saved {
                Ok(()) => {
                    let conv = store.history(OWNER, &id).await.unwrap().unwrap();
                    assert_eq!(ids(&conv), [a.clone(), b.clone(), format!("{id}_in")]);
                }
                Err(StoreError::MissingHistory(_)) => assert!(store.response(OWNER, &id).await.unwrap().is_none()),
                Err(e) => panic!("{id}: {e:?}"),
            }
        }
        // Deleting every continuation takes the root's items with the last one.
        for n in 0..8 {
            store.delete(OWNER, &format!("{root}_next{n}")).await.unwrap();
        }
    }
    assert_eq!(count(&store, "items").await, 0);
    assert_eq!(count(&store, "responses").await, 0);
    assert_eq!(count(&store, "response_items").await, 0);
}

fn message(id: &str, role: MessageRole, text: &str) -> Item {
    let content = match role {
        MessageRole::Assistant => ContentPart::output_text(text),
        _ => ContentPart::InputText { text: text.into() },
    };
    Item::Message(MessageItem { id: id.into(), role, status: ItemStatus::Completed, content: vec![content] })
}

fn user(id: &str) -> Item {
    message(id, MessageRole::User, &format!("text of {id}"))
}

fn assistant(id: &str) -> Item {
    message(id, MessageRole::Assistant, &format!("answer {id}"))
}

/// The owner of what most tests store.
const OWNER: &str = "alpha";
/// Another tenant.
const OTHER: &str = "beta";
/// An item limit no test reaches.
const NO_LIMIT: usize = usize::MAX;
/// The owner of rows from before ownership.
const DEFAULT: &str = "default";

/// A response of [`OWNER`] that continues the stored `prev` (if any).
fn new_response(id: &str, prev: Option<&str>, input: Vec<Item>, output: Vec<Item>) -> NewResponse {
    NewResponse {
        id: id.into(),
        owner: OWNER.into(),
        previous_response_id: prev.map(Into::into),
        model: "m".into(),
        created_at: 1_700_000_000,
        status: "completed".into(),
        response: json!({"id": id, "object": "response", "status": "completed", "output": [], "z": 1, "a": [1, 2]}),
        history_from: prev.map(Into::into),
        input,
        output,
        conversation: None,
        rounds: Vec::new(),
    }
}

async fn count(store: &TestStore, table: &'static str) -> i64 {
    let sql = match table {
        "items" => "SELECT COUNT(*) FROM items",
        "responses" => "SELECT COUNT(*) FROM responses",
        "response_items" => "SELECT COUNT(*) FROM response_items",
        "conversations" => "SELECT COUNT(*) FROM conversations",
        "conversation_items" => "SELECT COUNT(*) FROM conversation_items",
        _ => unreachable!(),
    };
    store.sql_i64(sql).await
}

fn ids(items: &[Item]) -> Vec<&str> {
    items.iter().map(Item::id).collect()
}

async fn save_then_response_round_trips(backend: Backend) {
    let store = backend.open().await;
    let r = new_response("resp_1", None, vec![user("msg_1")], vec![assistant("msg_2")]);
    let body = r.response.clone();
    store.save(r).await.unwrap();

    let got = store.response(OWNER, "resp_1").await.unwrap().unwrap();
    assert_eq!(got, body);
    // Key order survives too (preserve_order), and the body is not double-encoded.
    assert_eq!(got.to_string(), body.to_string());
    let raw = store.sql_strings("SELECT body FROM responses WHERE id = 'resp_1'").await;
    assert!(raw[0].starts_with('{'));

    assert!(store.response(OWNER, "resp_nope").await.unwrap().is_none());
    assert!(store.history(OWNER, "resp_nope").await.unwrap().is_none());
    let page = InputItemsPage { after: None, limit: 20, order: InputItemsOrder::Asc };
    assert!(store.input_items(OWNER, "resp_nope", page).await.unwrap().is_none());
}

async fn chain_of_three_reads_in_one_conversation_and_stores_items_once(backend: Backend) {
    let store = backend.open().await;
    store.save(new_response("r1", None, vec![user("i1")], vec![assistant("o1")])).await.unwrap();
    store
        .save(new_response("r2", Some("r1"), vec![user("i2")], vec![assistant("o2a"), assistant("o2b")]))
        .await
        .unwrap();
    store.save(new_response("r3", Some("r2"), vec![user("i3")], vec![assistant("o3")])).await.unwrap();

    let c3 = store.history(OWNER, "r3").await.unwrap().unwrap();
    assert_eq!(
        c3,
        vec![user("i1"), assistant("o1"), user("i2"), assistant("o2a"), assistant("o2b"), user("i3"), assistant("o3")]
    );
    // The inherited prefix is the very same rows: each item is stored once, and each response has
    // one row per item of its own.
    let (h2, h3) = (store.history_keys("r2").await, store.history_keys("r3").await);
    assert_eq!(&h3[..5], &h2[..]);
    assert_eq!(count(&store, "items").await, 7);
    assert_eq!(count(&store, "response_items").await, 2 + 3 + 2);
}

async fn input_items_pages_own_input_only(backend: Backend) {
    let store = backend.open().await;
    store.save(new_response("r1", None, vec![user("old")], vec![assistant("old_out")])).await.unwrap();
    let input: Vec<Item> = (1..=5).map(|n| user(&format!("m{n}"))).collect();
    store.save(new_response("r2", Some("r1"), input, vec![assistant("out")])).await.unwrap();

    let page = |after: Option<&str>, limit, order| InputItemsPage { after: after.map(Into::into), limit, order };
    let all = store.input_items(OWNER, "r2", page(None, 100, InputItemsOrder::Asc)).await.unwrap().unwrap();
    assert_eq!(ids(&all.items), ["m1", "m2", "m3", "m4", "m5"]);
    assert!(!all.has_more);

    let desc = store.input_items(OWNER, "r2", page(None, 100, InputItemsOrder::Desc)).await.unwrap().unwrap();
    assert_eq!(ids(&desc.items), ["m5", "m4", "m3", "m2", "m1"]);

    let first = store.input_items(OWNER, "r2", page(None, 2, InputItemsOrder::Asc)).await.unwrap().unwrap();
    assert_eq!(ids(&first.items), ["m1", "m2"]);
    assert!(first.has_more);
    let second = store.input_items(OWNER, "r2", page(Some("m2"), 2, InputItemsOrder::Asc)).await.unwrap().unwrap();
    assert_eq!(ids(&second.items), ["m3", "m4"]);
    assert!(second.has_more);
    let last = store.input_items(OWNER, "r2", page(Some("m4"), 2, InputItemsOrder::Asc)).await.unwrap().unwrap();
    assert_eq!(ids(&last.items), ["m5"]);
    assert!(!last.has_more);

    let exact = store.input_items(OWNER, "r2", page(Some("m1"), 4, InputItemsOrder::Asc)).await.unwrap().unwrap();
    assert_eq!(ids(&exact.items), ["m2", "m3", "m4", "m5"]);
    assert!(!exact.has_more);

    let desc_after = store.input_items(OWNER, "r2", page(Some("m4"), 2, InputItemsOrder::Desc)).await.unwrap().unwrap();
    assert_eq!(ids(&desc_after.items), ["m3", "m2"]);
    assert!(desc_after.has_more);
    let desc_end = store.input_items(OWNER, "r2", page(Some("m1"), 2, InputItemsOrder::Desc)).await.unwrap().unwrap();
    assert!(desc_end.items.is_empty());
    assert!(!desc_end.has_more);

    // Inherited and output ids are not cursors into the input, and an unknown cursor is empty.
    for bad in ["old", "out", "nope"] {
        let got = store.input_items(OWNER, "r2", page(Some(bad), 10, InputItemsOrder::Asc)).await.unwrap().unwrap();
        assert!(got.items.is_empty(), "{bad}");
        assert!(!got.has_more);
    }

    // A response with no input at all is stored, with an empty list.
    store.save(new_response("r3", None, vec![], vec![assistant("x")])).await.unwrap();
    let none = store.input_items(OWNER, "r3", page(None, 10, InputItemsOrder::Desc)).await.unwrap().unwrap();
    assert_eq!(none, InputItemsList { items: vec![], has_more: false });
}

/// The ids of the items left in the store, in key order.
async fn items_left(store: &TestStore) -> Vec<String> {
    store.sql_strings("SELECT item_id FROM items ORDER BY key").await
}

async fn delete_keeps_continuations_and_collects_orphans(backend: Backend) {
    let store = backend.open().await;
    store.save(new_response("r1", None, vec![user("a")], vec![assistant("b")])).await.unwrap();
    store.save(new_response("other", None, vec![user("c")], vec![assistant("d")])).await.unwrap();
    store.save(new_response("r2", Some("r1"), vec![user("e")], vec![assistant("f")])).await.unwrap();
    let page = InputItemsPage { after: None, limit: 20, order: InputItemsOrder::Asc };

    // r1 is continued: it is gone for every reader, its items stay for r2.
    assert!(store.delete(OWNER, "r1").await.unwrap());
    assert!(!store.delete(OWNER, "r1").await.unwrap());
    assert!(store.response(OWNER, "r1").await.unwrap().is_none());
    assert!(store.history(OWNER, "r1").await.unwrap().is_none());
    assert!(store.input_items(OWNER, "r1", page.clone()).await.unwrap().is_none());
    let c2 = store.history(OWNER, "r2").await.unwrap().unwrap();
    assert_eq!(c2, vec![user("a"), assistant("b"), user("e"), assistant("f")]);
    assert_eq!(items_left(&store).await, ["a", "b", "c", "d", "e", "f"]);

    // Its last continuation going takes it along; the unrelated response stays whole.
    assert!(store.delete(OWNER, "r2").await.unwrap());
    assert_eq!(items_left(&store).await, ["c", "d"]);
    assert_eq!(count(&store, "responses").await, 1);
    assert_eq!(count(&store, "response_items").await, 2);
    assert_eq!(store.history(OWNER, "other").await.unwrap().unwrap().len(), 2);
    assert!(!store.delete(OWNER, "never").await.unwrap());

    // A chain deleted from the middle: x2 and then x1 become tombstones, and deleting the leaf
    // collects the whole chain; a response nothing continues goes with its items at once.
    store.save(new_response("x1", None, vec![user("x1_in")], vec![])).await.unwrap();
    store.save(new_response("x2", Some("x1"), vec![user("x2_in")], vec![])).await.unwrap();
    store.save(new_response("x3", Some("x2"), vec![user("x3_in")], vec![])).await.unwrap();
    store.save(new_response("x2b", Some("x2"), vec![user("x2b_in")], vec![])).await.unwrap();
    assert!(store.delete(OWNER, "x2").await.unwrap());
    assert!(store.delete(OWNER, "x1").await.unwrap());
    assert_eq!(store.history(OWNER, "x3").await.unwrap().unwrap(), vec![user("x1_in"), user("x2_in"), user("x3_in")]);
    assert!(store.delete(OWNER, "x2b").await.unwrap());
    assert_eq!(items_left(&store).await, ["c", "d", "x1_in", "x2_in", "x3_in"]);
    assert!(store.delete(OWNER, "x3").await.unwrap());
    assert_eq!(items_left(&store).await, ["c", "d"]);
    assert_eq!(count(&store, "responses").await, 1);
}

async fn duplicate_and_missing_history_write_nothing(backend: Backend) {
    let store = backend.open().await;
    store.save(new_response("r1", None, vec![user("a")], vec![assistant("b")])).await.unwrap();
    let err = store.save(new_response("r1", None, vec![user("x")], vec![])).await.unwrap_err();
    assert!(matches!(&err, StoreError::Duplicate(id) if id == "r1"), "{err:?}");
    assert_eq!(count(&store, "items").await, 2);

    let err = store.save(new_response("r2", Some("never"), vec![user("c")], vec![assistant("d")])).await.unwrap_err();
    assert!(matches!(err, StoreError::MissingHistory(_)), "{err:?}");
    assert!(store.response(OWNER, "r2").await.unwrap().is_none());
    assert_eq!(count(&store, "items").await, 2);
    assert_eq!(count(&store, "response_items").await, 2);
    assert_eq!(count(&store, "responses").await, 1);
}

/// An engine read a conversation, then the response was deleted before the continuation was
/// saved: if nothing else kept it, the save fails and writes nothing; if another continuation kept
/// it (a tombstone), the save stores the whole conversation.
async fn continuing_a_response_deleted_meanwhile(backend: Backend) {
    let store = backend.open().await;
    store.save(new_response("r1", None, vec![user("a")], vec![assistant("b")])).await.unwrap();
    assert!(store.delete(OWNER, "r1").await.unwrap());
    store.save(new_response("r9", None, vec![user("x")], vec![assistant("y")])).await.unwrap();
    let err = store.save(new_response("r2", Some("r1"), vec![user("c")], vec![])).await.unwrap_err();
    assert!(matches!(err, StoreError::MissingHistory(_)), "{err:?}");
    assert_eq!(items_left(&store).await, ["x", "y"]);

    store.save(new_response("k1", None, vec![user("k")], vec![])).await.unwrap();
    store.save(new_response("k2", Some("k1"), vec![user("k2_in")], vec![])).await.unwrap();
    assert!(store.delete(OWNER, "k1").await.unwrap());
    store.save(new_response("k3", Some("k1"), vec![user("k3_in")], vec![])).await.unwrap();
    assert_eq!(store.history(OWNER, "k3").await.unwrap().unwrap(), vec![user("k"), user("k3_in")]);
    assert!(store.delete(OWNER, "k2").await.unwrap());
    assert_eq!(store.history(OWNER, "k3").await.unwrap().unwrap(), vec![user("k"), user("k3_in")]);
    assert!(store.delete(OWNER, "k3").await.unwrap());
    assert_eq!(items_left(&store).await, ["x", "y"]);
}

/// A database written by schema version 1 (one `response_items` row per inherited item) is
/// migrated on open: conversations, listings and deletes work on the old rows.
async fn a_version_1_database_is_migrated(backend: Backend) {
    let body = |item: Item| serde_json::to_string(&item).unwrap().replace('\'', "''");
    let v1_rows = format!(
        "INSERT INTO items (key, item_id, body) VALUES (1, 'a', '{}'), (2, 'b', '{}'), (3, 'c', '{}'),
            (4, 'd', '{}'), (5, 'e', '{}'), (6, 'f', '{}');
        INSERT INTO responses (id, previous_response_id, model, created_at, status, body) VALUES
            ('r1', NULL, 'm', 1, 'completed', '{{}}'), ('r2', 'r1', 'm', 2, 'completed', '{{}}'),
            ('r3', 'gone', 'm', 3, 'completed', '{{}}');
        INSERT INTO response_items (response_id, position, item_key, role) VALUES
            ('r1', 0, 1, 1), ('r1', 1, 2, 2),
            ('r2', 0, 1, 0), ('r2', 1, 2, 0), ('r2', 2, 3, 1), ('r2', 3, 4, 2),
            ('r3', 0, 5, 0), ('r3', 1, 6, 1);",
        body(user("a")),
        body(assistant("b")),
        body(user("c")),
        body(assistant("d")),
        body(user("e")),
        body(user("f")),
    );
    match &backend {
        Backend::Sqlite(_) => {
            let conn = rusqlite::Connection::open(backend.location()).unwrap();
            conn.execute_batch(sqlite::SCHEMA_V1).unwrap();
            conn.execute_batch(&v1_rows).unwrap();
        }
        Backend::Postgres(schema) => {
            let pool = sqlx::PgPool::connect(&schema.url()).await.unwrap();
            sqlx::raw_sql(postgres::MIGRATIONS_TABLE).execute(&pool).await.unwrap();
            sqlx::raw_sql(postgres::MIGRATIONS[0]).execute(&pool).await.unwrap();
            sqlx::raw_sql("INSERT INTO respgw_schema_migrations (version) VALUES (1)").execute(&pool).await.unwrap();
            sqlx::raw_sql(&v1_rows).execute(&pool).await.unwrap();
            sqlx::raw_sql("SELECT setval('items_key_seq', 6)").execute(&pool).await.unwrap();
            pool.close().await;
        }
    }
    let store = backend.open().await;
    assert_eq!(
        store.history(DEFAULT, "r2").await.unwrap().unwrap(),
        vec![user("a"), assistant("b"), user("c"), assistant("d")]
    );
    assert_eq!(store.history(DEFAULT, "r3").await.unwrap().unwrap(), vec![user("e"), user("f")]);
    let page = InputItemsPage { after: None, limit: 20, order: InputItemsOrder::Asc };
    assert_eq!(store.input_items(DEFAULT, "r2", page).await.unwrap().unwrap().items, vec![user("c")]);
    // r1 is continued by r2 (its history_from), so deleting it keeps its items until r2 goes.
    assert!(store.delete(DEFAULT, "r1").await.unwrap());
    assert_eq!(items_left(&store).await, ["a", "b", "c", "d", "e", "f"]);
    store
        .save(NewResponse { owner: DEFAULT.into(), ..new_response("r4", Some("r2"), vec![user("g")], vec![]) })
        .await
        .unwrap();
    assert_eq!(store.history(DEFAULT, "r4").await.unwrap().unwrap().len(), 5);
    assert!(store.delete(DEFAULT, "r4").await.unwrap());
    assert!(store.delete(DEFAULT, "r2").await.unwrap());
    // `e` belonged to a response deleted under version 1: it stays (never collected).
    assert!(store.delete(DEFAULT, "r3").await.unwrap());
    assert_eq!(items_left(&store).await, ["e"]);
}

async fn two_stores_on_one_database_write_concurrently(backend: Backend) {
    // Both "processes" create the fresh database and its schema at the same time.
    let (a, b) = tokio::join!(backend.open(), backend.open());
    let stores = [Arc::new(a), Arc::new(b)];

    let mut tasks = Vec::new();
    for (s, store) in stores.iter().enumerate() {
        for n in 0..50 {
            let store = Arc::clone(store);
            tasks.push(tokio::spawn(async move {
                let id = format!("r{s}_{n}");
                store
                    .save(new_response(
                        &id,
                        None,
                        vec![user(&format!("{id}_in"))],
                        vec![assistant(&format!("{id}_out"))],
                    ))
                    .await
            }));
        }
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    for store in &stores {
        for s in 0..2 {
            for n in 0..50 {
                let id = format!("r{s}_{n}");
                assert!(store.response(OWNER, &id).await.unwrap().is_some(), "{id}");
                let conv = store.history(OWNER, &id).await.unwrap().unwrap();
                assert_eq!(ids(&conv), [format!("{id}_in"), format!("{id}_out")]);
            }
        }
    }
    assert_eq!(count(&stores[0], "items").await, 200);
    if let TestStore::Sqlite(store) = &*stores[1] {
        assert_eq!(store.sql_string("PRAGMA journal_mode").await, "wal");
    }
}

#[tokio::test]
async fn open_dispatches_on_location() {
    let dir = tempfile::tempdir().unwrap();
    for location in ["mysql://x", "postgres:x", "redis://u:secret@h", ""] {
        let err = open(location).await.err().unwrap();
        let msg = err.to_string();
        assert!(matches!(err, StoreError::Unavailable(_)), "{location}: {msg}");
        assert!(msg.contains("sqlite://") && msg.contains("postgres://"), "{location}: {msg}");
        assert!(!msg.contains("secret"), "{msg}");
    }

    // PostgreSQL URLs select PostgreSQL: the same data through two opens.
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::postgres());
    let schema = TestSchema::create().await.unwrap();
    for location in [schema.url(), schema.url().replacen("postgres://", "postgresql://", 1)] {
        let store = open_with(&location, StoreOptions { pool_size: 2, ..StoreOptions::default() }).await.unwrap();
        if store.response(OWNER, "r1").await.unwrap().is_none() {
            store.save(new_response("r1", None, vec![user("a")], vec![])).await.unwrap();
        }
        assert_eq!(store.history(OWNER, "r1").await.unwrap().unwrap().len(), 1);
    }

    let a = format!("sqlite://{}", dir.path().join("a.db").display());
    let b = dir.path().join("b.db").display().to_string();
    let c = format!("sqlite:{}", dir.path().join("c.db").display());
    for location in [a, b, c] {
        let store = open(&location).await.unwrap();
        store.save(new_response("r1", None, vec![user("a")], vec![])).await.unwrap();
        // Reopening sees the data and leaves the schema alone.
        drop(store);
        let store = open(&location).await.unwrap();
        assert!(store.response(OWNER, "r1").await.unwrap().is_some(), "{location}");
    }
    assert!(dir.path().join("a.db").exists());
    assert!(dir.path().join("b.db").exists());
    assert!(dir.path().join("c.db").exists());

    let mem = open(":memory:").await.unwrap();
    mem.save(new_response("r1", None, vec![user("a")], vec![])).await.unwrap();
    assert_eq!(mem.history(OWNER, "r1").await.unwrap().unwrap().len(), 1);
}

#[test]
fn location_parsing() {
    assert_eq!(parse_location("respgw.db").unwrap(), Location::Sqlite("respgw.db".into()));
    assert_eq!(parse_location("sqlite://respgw.db").unwrap(), Location::Sqlite("respgw.db".into()));
    assert_eq!(parse_location("sqlite:///var/x.db").unwrap(), Location::Sqlite("/var/x.db".into()));
    assert_eq!(parse_location("sqlite:data/x.db").unwrap(), Location::Sqlite("data/x.db".into()));
    assert_eq!(parse_location("C:\\data\\x.db").unwrap(), Location::Sqlite("C:\\data\\x.db".into()));
    assert!(parse_location("sqlite://").is_err());
    assert!(parse_location("redis://h").is_err());
    let pg = "postgres://u:p@db.example:5433/respgw?sslmode=verify-full";
    assert_eq!(parse_location(pg).unwrap(), Location::Postgres(pg.into()));
    let pg = "postgresql://u@h/db";
    assert_eq!(parse_location(pg).unwrap(), Location::Postgres(pg.into()));
    assert!(parse_location("postgres:nohost").is_err());
}

#[test]
fn passwords_are_redacted() {
    assert_eq!(
        redacted_location("postgres://app:s3cret@db.example:5433/respgw?sslmode=require"),
        "postgres://app:REDACTED@db.example:5433/respgw?sslmode=require"
    );
    assert_eq!(
        redacted_location("postgresql://db/respgw?user=app&password=s3cret"),
        "postgresql://db/respgw?user=app&password=REDACTED"
    );
    assert_eq!(redacted_location("postgres://app@db/respgw"), "postgres://app@db/respgw");
    assert!(!redacted_location("postgres://app:s3cret@[bad/respgw").contains("s3cret"));
    assert_eq!(redacted_location("data/respgw.db"), "data/respgw.db");
    assert_eq!(redacted_location("sqlite:///var/x.db"), "sqlite:///var/x.db");
}

#[tokio::test]
async fn unreachable_postgres_is_unavailable_naming_the_server_not_the_password() {
    // Port 1 on loopback: nothing listens there, so the connection is refused at once.
    let err = open("postgres://app:s3cret@127.0.0.1:1/respgw").await.err().unwrap();
    let msg = err.to_string();
    assert!(matches!(err, StoreError::Unavailable(_)), "{msg}");
    assert!(msg.contains("127.0.0.1:1/respgw"), "{msg}");
    assert!(msg.to_lowercase().contains("refused"), "{msg}");
    assert!(!msg.contains("s3cret"), "{msg}");
}

async fn corrupt_rows_and_newer_schema_are_reported(backend: Backend) {
    let store = backend.open().await;
    store.save(new_response("r1", None, vec![user("a")], vec![])).await.unwrap();
    store.sql_execute("UPDATE items SET body = '{\"type\":\"nonsense\"}'").await;
    store.sql_execute("UPDATE responses SET body = 'not json'").await;
    // A store opened afterwards (another process) has decoded nothing yet.
    drop(store);
    let store = backend.open().await;
    let err = store.history(OWNER, "r1").await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    let err = store.response(OWNER, "r1").await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");

    store.bump_schema_version().await;
    drop(store);
    let err = backend.try_open().await.err().unwrap();
    assert!(matches!(&err, StoreError::Corrupt(m) if m.contains("version 99")), "{err:?}");
}

/// Not a test on its own: the body of one writer process for
/// [`two_processes_on_one_file_write_concurrently`], which runs this test binary as children.
#[tokio::test]
async fn child_writer() {
    let (Ok(path), Ok(tag)) = (std::env::var("RESPGW_STORE_CHILD_DB"), std::env::var("RESPGW_STORE_CHILD_TAG")) else {
        return;
    };
    let store = Arc::new(SqliteStore::open(&path).await.unwrap());
    let tasks: Vec<_> = (0..50)
        .map(|n| {
            let store = Arc::clone(&store);
            let id = format!("{tag}_{n}");
            tokio::spawn(async move { store.save(new_response(&id, None, vec![user(&id)], vec![])).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn two_processes_on_one_file_write_concurrently() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("procs.db");
    let exe = std::env::current_exe().unwrap();
    // Both children create the fresh file and schema at the same time, then write.
    let children: Vec<_> = ["p0", "p1"]
        .into_iter()
        .map(|tag| {
            tokio::process::Command::new(&exe)
                .args(["--exact", "tests::child_writer", "--test-threads=1"])
                .env("RESPGW_STORE_CHILD_DB", &path)
                .env("RESPGW_STORE_CHILD_TAG", tag)
                .output()
        })
        .collect();
    for child in children {
        let out = child.await.unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let store = TestStore::Sqlite(SqliteStore::open(&path).await.unwrap());
    assert_eq!(count(&store, "responses").await, 100);
    for tag in ["p0", "p1"] {
        for n in 0..50 {
            let id = format!("{tag}_{n}");
            let conv = store.history(OWNER, &id).await.unwrap().unwrap();
            assert_eq!(ids(&conv), [id.as_str()]);
        }
    }
}

// ---- Conversations ----

fn metadata(pairs: &[(&str, &str)]) -> serde_json::Map<String, serde_json::Value> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect()
}

fn new_conversation(id: &str, items: Vec<Item>) -> NewConversation {
    NewConversation {
        id: id.into(),
        owner: OWNER.into(),
        created_at: 1_700_000_100,
        metadata: metadata(&[("topic", "demo")]),
        items,
    }
}

/// A response created in conversation `conv` at `version`.
fn in_conversation(id: &str, conv: &str, version: i64, input: Vec<Item>, output: Vec<Item>) -> NewResponse {
    NewResponse {
        conversation: Some(ConversationAppend { id: conv.into(), version }),
        ..new_response(id, None, input, output)
    }
}

fn page(after: Option<&str>, limit: usize, order: InputItemsOrder) -> InputItemsPage {
    InputItemsPage { after: after.map(Into::into), limit, order }
}

async fn version(store: &TestStore, conv: &str) -> i64 {
    store.conversation_history(OWNER, conv).await.unwrap().unwrap().version
}

/// Every visible item of a conversation, oldest first, through the paged listing.
async fn listed(store: &TestStore, conv: &str) -> Vec<String> {
    let got = store.conversation_items(OWNER, conv, page(None, 100, InputItemsOrder::Asc)).await.unwrap().unwrap();
    assert!(!got.has_more);
    ids(&got.items).into_iter().map(str::to_owned).collect()
}

async fn conversations_are_created_read_updated_and_deleted(backend: Backend) {
    let store = backend.open().await;
    store.create_conversation(new_conversation("conv_1", vec![user("a"), assistant("b")])).await.unwrap();
    let record = store.conversation(OWNER, "conv_1").await.unwrap().unwrap();
    assert_eq!(
        record,
        ConversationRecord { id: "conv_1".into(), created_at: 1_700_000_100, metadata: metadata(&[("topic", "demo")]) }
    );
    let history = store.conversation_history(OWNER, "conv_1").await.unwrap().unwrap();
    assert_eq!(history.items, vec![user("a"), assistant("b")]);

    let err = store.create_conversation(new_conversation("conv_1", vec![user("x")])).await.unwrap_err();
    assert!(matches!(&err, StoreError::Duplicate(id) if id == "conv_1"), "{err:?}");
    assert_eq!(count(&store, "items").await, 2);

    // Metadata changes leave the version (the item list) alone; key order is kept.
    let updated = metadata(&[("z", "1"), ("a", "2")]);
    let got = store.update_conversation(OWNER, "conv_1", updated.clone()).await.unwrap().unwrap();
    assert_eq!(got.metadata, updated);
    assert_eq!(got.created_at, 1_700_000_100);
    let again = store.conversation(OWNER, "conv_1").await.unwrap().unwrap();
    assert_eq!(serde_json::Value::Object(again.metadata).to_string(), r#"{"z":"1","a":"2"}"#);
    assert_eq!(version(&store, "conv_1").await, history.version);

    // An empty conversation exists, with no items.
    store.create_conversation(new_conversation("conv_empty", vec![])).await.unwrap();
    let empty = store.conversation_history(OWNER, "conv_empty").await.unwrap().unwrap();
    assert!(empty.items.is_empty());
    let listing = store.conversation_items(OWNER, "conv_empty", page(None, 10, InputItemsOrder::Desc)).await.unwrap();
    assert_eq!(listing, Some(InputItemsList { items: vec![], has_more: false }));

    // Deleted (nothing references it): gone for every call, rows and items removed.
    assert!(store.delete_conversation(OWNER, "conv_1").await.unwrap());
    assert!(!store.delete_conversation(OWNER, "conv_1").await.unwrap());
    assert!(!store.delete_conversation(OWNER, "conv_never").await.unwrap());
    for id in ["conv_1", "conv_never"] {
        assert!(store.conversation(OWNER, id).await.unwrap().is_none());
        assert!(store.update_conversation(OWNER, id, metadata(&[])).await.unwrap().is_none());
        assert!(store.conversation_history(OWNER, id).await.unwrap().is_none());
        assert!(store.conversation_items(OWNER, id, page(None, 10, InputItemsOrder::Asc)).await.unwrap().is_none());
        assert!(store.append_conversation_items(OWNER, id, vec![user("c")], NO_LIMIT).await.unwrap().is_none());
        assert_eq!(store.conversation_item(OWNER, id, "a").await.unwrap(), ConversationItemLookup::NoConversation);
        assert_eq!(
            store.delete_conversation_item(OWNER, id, "a").await.unwrap(),
            ConversationItemLookup::NoConversation
        );
    }
    assert_eq!(count(&store, "items").await, 0);
    assert_eq!(count(&store, "conversation_items").await, 0);
    assert_eq!(count(&store, "conversations").await, 1);
    assert!(store.delete_conversation(OWNER, "conv_empty").await.unwrap());
    assert_eq!(count(&store, "conversations").await, 0);
}

/// Items that would take a conversation past its limit are refused and nothing is written; removed
/// items do not count, so deleting one makes room again.
async fn appending_past_the_item_limit_writes_nothing(backend: Backend) {
    let store = backend.open().await;
    store.create_conversation(new_conversation("conv_1", vec![user("m1"), user("m2")])).await.unwrap();
    let v0 = version(&store, "conv_1").await;
    let err = store.append_conversation_items(OWNER, "conv_1", vec![user("m3"), user("m4")], 3).await.unwrap_err();
    assert!(matches!(err, StoreError::ConversationFull { held: 2, adding: 2, limit: 3 }), "{err:?}");
    assert_eq!(version(&store, "conv_1").await, v0);
    assert_eq!(listed(&store, "conv_1").await, ["m1", "m2"]);
    assert_eq!(count(&store, "items").await, 2);
    store.append_conversation_items(OWNER, "conv_1", vec![user("m3")], 3).await.unwrap().unwrap();
    let full = store.append_conversation_items(OWNER, "conv_1", vec![user("m4")], 3).await.unwrap_err();
    assert!(matches!(full, StoreError::ConversationFull { held: 3, adding: 1, limit: 3 }), "{full:?}");
    store.delete_conversation_item(OWNER, "conv_1", "m1").await.unwrap();
    store.append_conversation_items(OWNER, "conv_1", vec![user("m4")], 3).await.unwrap().unwrap();
    assert_eq!(listed(&store, "conv_1").await, ["m2", "m3", "m4"]);
}

async fn conversation_items_append_page_and_delete(backend: Backend) {
    let store = backend.open().await;
    store.create_conversation(new_conversation("conv_1", vec![user("m1"), user("m2")])).await.unwrap();
    let v0 = version(&store, "conv_1").await;
    store
        .append_conversation_items(OWNER, "conv_1", vec![user("m3"), assistant("m4")], NO_LIMIT)
        .await
        .unwrap()
        .unwrap();
    store.append_conversation_items(OWNER, "conv_1", vec![user("m5")], NO_LIMIT).await.unwrap().unwrap();
    let v1 = version(&store, "conv_1").await;
    assert_ne!(v0, v1);
    // Appending nothing changes nothing.
    store.append_conversation_items(OWNER, "conv_1", vec![], NO_LIMIT).await.unwrap().unwrap();
    assert_eq!(version(&store, "conv_1").await, v1);
    assert_eq!(listed(&store, "conv_1").await, ["m1", "m2", "m3", "m4", "m5"]);

    let asc = |after, limit| page(after, limit, InputItemsOrder::Asc);
    let desc = |after, limit| page(after, limit, InputItemsOrder::Desc);
    let get = |p: InputItemsPage| {
        let store = &store;
        async move {
            let got = store.conversation_items(OWNER, "conv_1", p).await.unwrap().unwrap();
            (ids(&got.items).into_iter().map(str::to_owned).collect::<Vec<_>>(), got.has_more)
        }
    };
    assert_eq!(
        get(desc(None, 100)).await,
        (vec!["m5".into(), "m4".into(), "m3".into(), "m2".into(), "m1".into()], false)
    );
    assert_eq!(get(asc(None, 2)).await, (vec!["m1".into(), "m2".into()], true));
    assert_eq!(get(asc(Some("m2"), 2)).await, (vec!["m3".into(), "m4".into()], true));
    assert_eq!(get(asc(Some("m4"), 2)).await, (vec!["m5".into()], false));
    assert_eq!(get(asc(Some("m1"), 4)).await, (vec!["m2".into(), "m3".into(), "m4".into(), "m5".into()], false));
    assert_eq!(get(desc(Some("m4"), 2)).await, (vec!["m3".into(), "m2".into()], true));
    assert_eq!(get(desc(Some("m1"), 2)).await, (vec![], false));
    assert_eq!(get(asc(Some("nope"), 2)).await, (vec![], false));

    // One item: found, absent, deleted.
    assert_eq!(
        store.conversation_item(OWNER, "conv_1", "m4").await.unwrap(),
        ConversationItemLookup::Found(assistant("m4"))
    );
    assert_eq!(store.conversation_item(OWNER, "conv_1", "nope").await.unwrap(), ConversationItemLookup::NoItem);
    let ConversationItemLookup::Found(record) = store.delete_conversation_item(OWNER, "conv_1", "m3").await.unwrap()
    else {
        panic!("m3 not deleted");
    };
    assert_eq!(record.id, "conv_1");
    assert_eq!(record.metadata, metadata(&[("topic", "demo")]));
    assert_eq!(store.delete_conversation_item(OWNER, "conv_1", "m3").await.unwrap(), ConversationItemLookup::NoItem);
    assert_eq!(store.conversation_item(OWNER, "conv_1", "m3").await.unwrap(), ConversationItemLookup::NoItem);
    assert_eq!(listed(&store, "conv_1").await, ["m1", "m2", "m4", "m5"]);
    assert_ne!(version(&store, "conv_1").await, v1);
    // A deleted item is no cursor any more; no response references the conversation, so its row
    // and item are gone.
    assert_eq!(get(asc(Some("m3"), 2)).await, (vec![], false));
    assert_eq!(count(&store, "items").await, 4);
    assert_eq!(count(&store, "conversation_items").await, 4);

    // Items with the same id: the first is the one found and deleted.
    store.append_conversation_items(OWNER, "conv_1", vec![user("m1")], NO_LIMIT).await.unwrap().unwrap();
    assert!(matches!(
        store.delete_conversation_item(OWNER, "conv_1", "m1").await.unwrap(),
        ConversationItemLookup::Found(_)
    ));
    assert_eq!(listed(&store, "conv_1").await, ["m2", "m4", "m5", "m1"]);
    let history = store.conversation_history(OWNER, "conv_1").await.unwrap().unwrap();
    assert_eq!(ids(&history.items), ["m2", "m4", "m5", "m1"]);

    // Appends after deletes still go last, in order.
    store.append_conversation_items(OWNER, "conv_1", vec![user("m6"), user("m7")], NO_LIMIT).await.unwrap().unwrap();
    assert_eq!(listed(&store, "conv_1").await, ["m2", "m4", "m5", "m1", "m6", "m7"]);
}

async fn saving_into_a_conversation_extends_it(backend: Backend) {
    let store = backend.open().await;
    store.create_conversation(new_conversation("conv_1", vec![user("c1")])).await.unwrap();
    let v = version(&store, "conv_1").await;
    store
        .save(in_conversation("r1", "conv_1", v, vec![user("i1")], vec![assistant("o1a"), assistant("o1b")]))
        .await
        .unwrap();
    assert_eq!(
        store.history(OWNER, "r1").await.unwrap().unwrap(),
        vec![user("c1"), user("i1"), assistant("o1a"), assistant("o1b")]
    );
    assert_eq!(listed(&store, "conv_1").await, ["c1", "i1", "o1a", "o1b"]);
    let page_desc =
        store.conversation_items(OWNER, "conv_1", page(None, 2, InputItemsOrder::Desc)).await.unwrap().unwrap();
    assert_eq!(ids(&page_desc.items), ["o1b", "o1a"]);
    // The response's own input is its own; items are stored once.
    let own = store.input_items(OWNER, "r1", page(None, 10, InputItemsOrder::Asc)).await.unwrap().unwrap();
    assert_eq!(ids(&own.items), ["i1"]);
    assert_eq!(count(&store, "items").await, 4);
    let v2 = version(&store, "conv_1").await;
    assert_ne!(v, v2);

    // The next response in the conversation sees everything, the one after an items call too.
    store.save(in_conversation("r2", "conv_1", v2, vec![user("i2")], vec![assistant("o2")])).await.unwrap();
    store.append_conversation_items(OWNER, "conv_1", vec![user("c2")], NO_LIMIT).await.unwrap().unwrap();
    let v3 = version(&store, "conv_1").await;
    store.save(in_conversation("r3", "conv_1", v3, vec![user("i3")], vec![])).await.unwrap();
    assert_eq!(
        ids(&store.history(OWNER, "r3").await.unwrap().unwrap()),
        ["c1", "i1", "o1a", "o1b", "i2", "o2", "c2", "i3"]
    );
    assert_eq!(listed(&store, "conv_1").await, ["c1", "i1", "o1a", "o1b", "i2", "o2", "c2", "i3"]);
    let conv = store.conversation_history(OWNER, "conv_1").await.unwrap().unwrap();
    assert_eq!(ids(&conv.items), ["c1", "i1", "o1a", "o1b", "i2", "o2", "c2", "i3"]);

    // A response created in a conversation can be continued by previous_response_id, outside it.
    store.save(new_response("r4", Some("r1"), vec![user("i4")], vec![])).await.unwrap();
    assert_eq!(ids(&store.history(OWNER, "r4").await.unwrap().unwrap()), ["c1", "i1", "o1a", "o1b", "i4"]);
    assert_eq!(listed(&store, "conv_1").await.len(), 8);
}

async fn stale_or_deleted_conversations_write_nothing(backend: Backend) {
    let store = backend.open().await;
    store.create_conversation(new_conversation("conv_1", vec![user("c1")])).await.unwrap();
    let v = version(&store, "conv_1").await;
    store.append_conversation_items(OWNER, "conv_1", vec![user("c2")], NO_LIMIT).await.unwrap().unwrap();
    let before = (count(&store, "items").await, count(&store, "conversation_items").await);

    let err =
        store.save(in_conversation("r1", "conv_1", v, vec![user("i1")], vec![assistant("o1")])).await.unwrap_err();
    assert!(matches!(&err, StoreError::ConversationChanged(id) if id == "conv_1"), "{err:?}");
    assert!(store.response(OWNER, "r1").await.unwrap().is_none());
    assert_eq!((count(&store, "items").await, count(&store, "conversation_items").await), before);
    assert_eq!(count(&store, "responses").await, 0);
    assert_eq!(listed(&store, "conv_1").await, ["c1", "c2"]);

    // A duplicate id writes nothing into the conversation either.
    let v = version(&store, "conv_1").await;
    store.save(in_conversation("r1", "conv_1", v, vec![user("i1")], vec![])).await.unwrap();
    let v = version(&store, "conv_1").await;
    let err = store.save(in_conversation("r1", "conv_1", v, vec![user("x")], vec![])).await.unwrap_err();
    assert!(matches!(err, StoreError::Duplicate(_)), "{err:?}");
    assert_eq!(listed(&store, "conv_1").await, ["c1", "c2", "i1"]);
    assert_eq!(version(&store, "conv_1").await, v);

    // Deleted (a tombstone, since r1 was created in it) or never created: gone.
    assert!(store.delete_conversation(OWNER, "conv_1").await.unwrap());
    let before = count(&store, "items").await;
    for conv in ["conv_1", "conv_never"] {
        let err = store.save(in_conversation("r2", conv, v + 1, vec![user("i2")], vec![])).await.unwrap_err();
        assert!(matches!(&err, StoreError::ConversationGone(id) if id == conv), "{err:?}");
    }
    assert_eq!(count(&store, "items").await, before);
    assert_eq!(count(&store, "responses").await, 1);
    assert_eq!(ids(&store.history(OWNER, "r1").await.unwrap().unwrap()), ["c1", "c2", "i1"]);
}

/// Two stores (processes) on one database save into one conversation at once, each read of it
/// followed by a save at the version read, retried on `ConversationChanged`: exactly one save wins
/// per version, and the conversation is each winner's input and output, never interleaved.
async fn two_stores_racing_saves_into_one_conversation(backend: Backend) {
    let (a, b) = tokio::join!(backend.open(), backend.open());
    let stores = [Arc::new(a), Arc::new(b)];
    stores[0].create_conversation(new_conversation("conv_race", vec![user("start")])).await.unwrap();
    let mut tasks = Vec::new();
    for (s, store) in stores.iter().enumerate() {
        for t in 0..4 {
            let store = Arc::clone(store);
            tasks.push(tokio::spawn(async move {
                let mut won = Vec::new();
                let mut lost = 0;
                for n in 0..4 {
                    let id = format!("r{s}_{t}_{n}");
                    loop {
                        let read = store.conversation_history(OWNER, "conv_race").await.unwrap().unwrap();
                        let input = vec![user(&format!("{id}_in"))];
                        let output = vec![assistant(&format!("{id}_out1")), assistant(&format!("{id}_out2"))];
                        match store.save(in_conversation(&id, "conv_race", read.version, input, output)).await {
                            Ok(()) => {
                                won.push((read.version, id.clone(), read.items.len()));
                                break;
                            }
                            Err(StoreError::ConversationChanged(_)) => lost += 1,
                            Err(e) => panic!("{id}: {e:?}"),
                        }
                    }
                }
                (won, lost)
            }));
        }
    }
    let mut won = Vec::new();
    for task in tasks {
        won.extend(task.await.unwrap().0);
    }
    assert_eq!(won.len(), 32);
    let mut versions: Vec<i64> = won.iter().map(|(v, _, _)| *v).collect();
    versions.sort_unstable();
    versions.dedup();
    assert_eq!(versions.len(), 32, "two saves won at one version");

    let list = listed(&stores[1], "conv_race").await;
    assert_eq!(list.len(), 1 + 32 * 3);
    for (_, id, before) in &won {
        // Each winner's items follow exactly what it read, together and in order.
        assert_eq!(list[*before..before + 3], [format!("{id}_in"), format!("{id}_out1"), format!("{id}_out2")], "{id}");
        let history = stores[0].history(OWNER, id).await.unwrap().unwrap();
        assert_eq!(ids(&history), list[..before + 3].iter().map(String::as_str).collect::<Vec<_>>(), "{id}");
    }
    assert_eq!(count(&stores[0], "items").await, 1 + 32 * 3);
}

/// What a deletion-order scenario does next.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    /// Remove this item from the conversation.
    Item(&'static str),
    Conversation,
    Response(&'static str),
}

/// A conversation with its own items, responses created in it (one after an items call), a
/// continuation of one of them outside it by `previous_response_id`; then everything deleted in
/// many orders. After every step every stored response's history reads whole and the
/// conversation lists what it should; after the last, nothing is left in any table.
async fn deleting_in_any_order_keeps_every_history_whole_and_leaves_nothing(backend: Backend) {
    let store = backend.open().await;
    let steps = [
        Step::Item("c1"),
        Step::Item("a1"),
        Step::Conversation,
        Step::Response("r1"),
        Step::Response("r2"),
        Step::Response("d1"),
        Step::Response("r3"),
    ];
    let mut orders = Vec::new();
    permutations(&mut steps.to_vec(), 0, &mut orders);
    // Every order on SQLite would take long on PostgreSQL too: a spread of them, the two ends
    // included.
    let chosen: Vec<_> = orders.iter().step_by(47).chain(orders.last()).collect();
    assert!(chosen.len() > 100);
    for (round, order) in chosen.into_iter().enumerate() {
        let p = |id: &str| format!("{id}_{round}");
        let conv = p("conv");
        store.create_conversation(new_conversation(&conv, vec![user(&p("c1")), user(&p("c2"))])).await.unwrap();
        let mut expected: Vec<(String, Vec<String>)> = Vec::new();
        for (r, extra) in [("r1", false), ("r2", true), ("r3", false)] {
            if extra {
                store.append_conversation_items(OWNER, &conv, vec![user(&p("c3"))], NO_LIMIT).await.unwrap().unwrap();
            }
            let n = &r[1..];
            let read = store.conversation_history(OWNER, &conv).await.unwrap().unwrap();
            let (input, output) = (user(&p(&format!("a{n}"))), assistant(&p(&format!("b{n}"))));
            let mut history: Vec<String> = ids(&read.items).into_iter().map(str::to_owned).collect();
            history.extend([input.id().to_owned(), output.id().to_owned()]);
            store.save(in_conversation(&p(r), &conv, read.version, vec![input], vec![output])).await.unwrap();
            expected.push((p(r), history));
            if r == "r1" {
                let d1 = p("d1");
                store.save(new_response(&d1, Some(&p("r1")), vec![user(&p("d1_in"))], vec![])).await.unwrap();
                let mut history = expected[0].1.clone();
                history.push(p("d1_in"));
                expected.push((d1, history));
            }
        }
        let mut visible = listed(&store, &conv).await;
        let mut conversation_alive = true;
        for step in order {
            match *step {
                Step::Item(item) => {
                    let got = store.delete_conversation_item(OWNER, &conv, &p(item)).await.unwrap();
                    if conversation_alive {
                        assert!(matches!(got, ConversationItemLookup::Found(_)), "{order:?}: {got:?}");
                        visible.retain(|id| *id != p(item));
                    } else {
                        assert_eq!(got, ConversationItemLookup::NoConversation, "{order:?}");
                    }
                }
                Step::Conversation => {
                    assert!(store.delete_conversation(OWNER, &conv).await.unwrap());
                    conversation_alive = false;
                }
                Step::Response(r) => {
                    assert!(store.delete(OWNER, &p(r)).await.unwrap());
                    expected.retain(|(id, _)| *id != p(r));
                }
            }
            for (id, history) in &expected {
                let got = store.history(OWNER, id).await.unwrap().unwrap_or_else(|| panic!("{order:?}: {id} gone"));
                assert_eq!(&ids(&got), history, "{order:?}: {id} after {step:?}");
            }
            assert_eq!(store.dangling_history_keys().await, 0, "{order:?} after {step:?}");
            if conversation_alive {
                assert_eq!(listed(&store, &conv).await, visible, "{order:?} after {step:?}");
            } else {
                assert!(store.conversation_history(OWNER, &conv).await.unwrap().is_none());
            }
        }
        for table in ["items", "conversation_items", "conversations", "responses", "response_items"] {
            assert_eq!(count(&store, table).await, 0, "{table} after {order:?}");
        }
    }
}

/// Every ordering of `steps[k..]` after `steps[..k]`, appended to `out`.
fn permutations(steps: &mut Vec<Step>, k: usize, out: &mut Vec<Vec<Step>>) {
    if k == steps.len() {
        out.push(steps.clone());
        return;
    }
    for i in k..steps.len() {
        steps.swap(k, i);
        permutations(steps, k + 1, out);
        steps.swap(k, i);
    }
}

/// A database at schema version 2 (before conversations) is migrated on open: its responses read
/// and delete as before, and conversations work.
async fn a_version_2_database_is_migrated(backend: Backend) {
    let body = |item: Item| serde_json::to_string(&item).unwrap().replace('\'', "''");
    let v2_rows = format!(
        "INSERT INTO items (key, item_id, body) VALUES (1, 'a', '{}'), (2, 'b', '{}'), (3, 'c', '{}');
        INSERT INTO responses (id, previous_response_id, model, created_at, status, body, history, history_from)
        VALUES ('r1', NULL, 'm', 1, 'completed', '{{}}', '{}', NULL),
            ('r2', 'r1', 'm', 2, 'completed', '{{}}', '{}', 'r1');
        INSERT INTO response_items (response_id, position, item_key, role) VALUES
            ('r1', 0, 1, 1), ('r1', 1, 2, 2), ('r2', 0, 3, 1);",
        body(user("a")),
        body(assistant("b")),
        body(user("c")),
        "HISTORY1",
        "HISTORY2",
    );
    let location = backend.location();
    match &backend {
        Backend::Sqlite(_) => {
            let rows = v2_rows.replace("HISTORY1", "[1,2]").replace("HISTORY2", "[1,2,3]");
            let conn = rusqlite::Connection::open(&location).unwrap();
            conn.execute_batch(sqlite::SCHEMA_V1).unwrap();
            conn.execute_batch(sqlite::SCHEMA_V2).unwrap();
            conn.execute_batch(&rows).unwrap();
        }
        Backend::Postgres(_) => {
            let rows = v2_rows.replace("HISTORY1", "{1,2}").replace("HISTORY2", "{1,2,3}");
            let pool = sqlx::PgPool::connect(&location).await.unwrap();
            sqlx::raw_sql(postgres::MIGRATIONS_TABLE).execute(&pool).await.unwrap();
            for (version, sql) in [(1, postgres::MIGRATIONS[0]), (2, postgres::MIGRATIONS[1])] {
                sqlx::raw_sql(sql).execute(&pool).await.unwrap();
                sqlx::query("INSERT INTO respgw_schema_migrations (version) VALUES ($1)")
                    .bind(version)
                    .execute(&pool)
                    .await
                    .unwrap();
            }
            sqlx::raw_sql(&rows).execute(&pool).await.unwrap();
            sqlx::raw_sql("SELECT setval('items_key_seq', 3)").execute(&pool).await.unwrap();
            pool.close().await;
        }
    }
    let store = backend.open().await;
    let schema = match &store {
        TestStore::Sqlite(_) => store.sql_i64("PRAGMA user_version").await,
        TestStore::Postgres(_) => store.sql_i64("SELECT max(version)::bigint FROM respgw_schema_migrations").await,
    };
    assert_eq!(schema, 8);
    // Rows from before ownership belong to the tenant `default`, and to no other.
    assert_eq!(store.history(DEFAULT, "r2").await.unwrap().unwrap(), vec![user("a"), assistant("b"), user("c")]);
    assert_eq!(store.history(OWNER, "r2").await.unwrap(), None);

    store.create_conversation(new_conversation("conv_1", vec![user("d")])).await.unwrap();
    let v = version(&store, "conv_1").await;
    store.save(in_conversation("r3", "conv_1", v, vec![user("e")], vec![])).await.unwrap();
    assert_eq!(ids(&store.history(OWNER, "r3").await.unwrap().unwrap()), ["d", "e"]);

    assert!(store.delete(DEFAULT, "r1").await.unwrap());
    assert!(store.delete(DEFAULT, "r2").await.unwrap());
    assert!(store.delete_conversation(OWNER, "conv_1").await.unwrap());
    assert_eq!(items_left(&store).await, ["d", "e"]);
    assert!(store.delete(OWNER, "r3").await.unwrap());
    assert!(items_left(&store).await.is_empty());
    assert_eq!(count(&store, "conversations").await, 0);
}

/// Responses created in a conversation, a continuation of one, an item of the conversation and
/// the conversation itself, all deleted at once from two stores (processes): every delete
/// succeeds (no deadlock, no lost update), and nothing is left afterwards.
async fn concurrent_deletes_of_a_conversation_and_its_responses_leave_nothing(backend: Backend) {
    let (a, b) = tokio::join!(backend.open(), backend.open());
    let stores = [Arc::new(a), Arc::new(b)];
    for round in 0..10 {
        let conv = format!("conv_{round}");
        let store = &stores[0];
        store.create_conversation(new_conversation(&conv, vec![user(&format!("{conv}_c"))])).await.unwrap();
        let mut responses = Vec::new();
        for n in 0..4 {
            let id = format!("{conv}_r{n}");
            let v = version(store, &conv).await;
            let (input, output) = (user(&format!("{id}_in")), assistant(&format!("{id}_out")));
            store.save(in_conversation(&id, &conv, v, vec![input], vec![output])).await.unwrap();
            responses.push(id);
        }
        let next = format!("{conv}_next");
        store.save(new_response(&next, Some(&responses[0]), vec![user(&format!("{next}_in"))], vec![])).await.unwrap();
        responses.push(next);

        let mut tasks = Vec::new();
        for (n, id) in responses.into_iter().enumerate() {
            let store = Arc::clone(&stores[n % 2]);
            tasks.push(tokio::spawn(async move { assert!(store.delete(OWNER, &id).await.unwrap(), "{id}") }));
        }
        for (n, item) in [format!("{conv}_c"), format!("{conv}_r1_in")].into_iter().enumerate() {
            let (store, conv) = (Arc::clone(&stores[n % 2]), conv.clone());
            tasks.push(tokio::spawn(async move {
                // Found, or the conversation was deleted first.
                let got = store.delete_conversation_item(OWNER, &conv, &item).await.unwrap();
                assert_ne!(got, ConversationItemLookup::NoItem, "{item}");
            }));
        }
        let (store, conv2) = (Arc::clone(&stores[1]), conv.clone());
        tasks.push(tokio::spawn(async move { assert!(store.delete_conversation(OWNER, &conv2).await.unwrap()) }));
        for task in tasks {
            task.await.unwrap();
        }
    }
    for table in ["items", "conversation_items", "conversations", "responses", "response_items"] {
        assert_eq!(count(&stores[0], table).await, 0, "{table}");
    }
}

/// Saves into a conversation while its items and then the conversation are deleted: each save
/// stores a whole history or fails with `ConversationChanged` / `ConversationGone` writing nothing.
async fn saves_racing_deletes_in_a_conversation_store_whole_histories_or_nothing(backend: Backend) {
    let (a, b) = tokio::join!(backend.open(), backend.open());
    let stores = [Arc::new(a), Arc::new(b)];
    for round in 0..5 {
        let conv = format!("conv_{round}");
        let items: Vec<Item> = (0..4).map(|n| user(&format!("{conv}_c{n}"))).collect();
        stores[0].create_conversation(new_conversation(&conv, items)).await.unwrap();
        let v = version(&stores[0], &conv).await;
        let mut saves = Vec::new();
        for n in 0..6 {
            let (store, conv) = (Arc::clone(&stores[n % 2]), conv.clone());
            saves.push(tokio::spawn(async move {
                let id = format!("{conv}_r{n}");
                let saved = store.save(in_conversation(&id, &conv, v, vec![user(&format!("{id}_in"))], vec![])).await;
                (id, saved)
            }));
        }
        for n in 0..2 {
            stores[1].delete_conversation_item(OWNER, &conv, &format!("{conv}_c{n}")).await.unwrap();
        }
        assert!(stores[0].delete_conversation(OWNER, &conv).await.unwrap());
        let mut stored = Vec::new();
        for save in saves {
            let (id, saved) = save.await.unwrap();
            match saved {
                Ok(()) => {
                    let history = stores[1].history(OWNER, &id).await.unwrap().unwrap();
                    assert_eq!(history.len(), 5, "{id}");
                    stored.push(id);
                }
                Err(StoreError::ConversationChanged(_) | StoreError::ConversationGone(_)) => {
                    assert!(stores[0].response(OWNER, &id).await.unwrap().is_none());
                }
                Err(e) => panic!("{id}: {e:?}"),
            }
        }
        assert!(stored.len() <= 1, "{stored:?}");
        assert_eq!(stores[0].dangling_history_keys().await, 0);
        for id in stored {
            assert!(stores[0].delete(OWNER, &id).await.unwrap());
        }
    }
    for table in ["items", "conversation_items", "conversations", "responses", "response_items"] {
        assert_eq!(count(&stores[0], table).await, 0, "{table}");
    }
}

mod background;
use background::{
    a_cancel_closes_the_log_and_turns_the_owner_away, a_failed_save_writes_none_of_its_batch,
    a_run_logs_batches_and_ends_with_its_save_in_one_transaction, expired_leases_are_found_and_renewed_ones_are_not,
    purging_drops_only_old_logs_of_ended_runs, the_next_run_started_is_of_the_tenant_with_fewest_running,
    the_queue_refuses_runs_beyond_its_bounds_for_the_gateway_and_per_tenant,
};

mod console;

mod retrieval;
use retrieval::{
    a_finish_in_another_embedding_space_writes_nothing, a_lapsed_lease_is_claimed_again_until_its_attempts_run_out,
    a_late_finish_after_removal_or_cancel_writes_nothing, adding_files_checks_them_first_and_a_refusal_writes_nothing,
    another_owners_retrieval_objects_are_missing, deleting_a_file_removes_it_from_every_store_with_its_chunks,
    files_are_stored_listed_in_pages_and_deleted, ingestion_claims_oldest_first_and_finishes_with_chunks,
    lexical_search_ranks_the_relevant_chunk_first_and_survives_hostile_queries, re_adding_a_file_replaces_it,
    the_store_filter_is_exact_however_the_other_stores_rank,
    vector_stores_are_created_counted_updated_touched_and_deleted, vectors_round_trip_floats_exactly,
    words_in_most_chunks_neither_rank_nor_hide_the_rest,
};
