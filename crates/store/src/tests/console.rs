//! Behaviour of the console's reads across tenants, on both backends (run by `both!` in the
//! parent module): scope, filters, paging, a response's facts, and the migration from schema 7.

use respgw_protocol::items::MessageRole;
use respgw_store_api::background::{NewRun, QueueBounds, RunStatus, StoredEvent};
use respgw_store_api::console::{ConsolePage, ConsoleStore, ResponseFilter, ResponseRow, Scope};
use respgw_store_api::retrieval::{FileRecord, NewVectorStore};
use respgw_store_api::{NewConversation, NewResponse, RoundRecord};
use serde_json::json;

use super::{Backend, OTHER, OWNER, TestStore, assistant, in_conversation, message, new_response, user, version};
use crate::{postgres, sqlite};

both!(
    console_responses_are_scoped_filtered_and_paged,
    response_facts_give_rounds_inherited_items_and_chain,
    conversations_runs_files_and_vector_stores_are_scoped,
    a_version_7_database_is_migrated_for_the_console,
);

impl TestStore {
    /// The console face of the same store.
    fn console(&self) -> &dyn ConsoleStore {
        match self {
            TestStore::Sqlite(store) => store,
            TestStore::Postgres(store) => store,
        }
    }
}

fn tenant(name: &str) -> Scope {
    Scope::Tenant(name.into())
}

fn page(after: Option<&str>, limit: usize) -> ConsolePage {
    ConsolePage { after: after.map(Into::into), limit }
}

/// A response of `owner` created at `created_at` whose input is one user message `text`.
fn response(id: &str, owner: &str, created_at: i64, model: &str, status: &str, text: &str) -> NewResponse {
    NewResponse {
        owner: owner.into(),
        model: model.into(),
        created_at,
        status: status.into(),
        ..new_response(id, None, vec![message(&format!("{id}_in"), MessageRole::User, text)], vec![])
    }
}

fn round(started_ms: u64, tokens: (u64, u64)) -> RoundRecord {
    RoundRecord {
        started_ms,
        first_chunk_ms: Some(started_ms + 5),
        duration_ms: 20,
        input_tokens: tokens.0,
        output_tokens: tokens.1,
        tools_ms: 3,
        item_ids: vec![format!("fc_{started_ms}")],
    }
}

async fn ids(store: &TestStore, scope: &Scope, filter: &ResponseFilter, page: &ConsolePage) -> (Vec<String>, bool) {
    let listed = store.console().list_responses(scope, filter, page).await.unwrap();
    (listed.data.into_iter().map(|r| r.id).collect(), listed.has_more)
}

fn text(q: &str) -> ResponseFilter {
    ResponseFilter { text: Some(q.into()), ..Default::default() }
}

async fn console_responses_are_scoped_filtered_and_paged(backend: Backend) {
    let store = backend.open().await;
    let rounds = vec![round(0, (10, 2)), round(40, (15, 4))];
    store
        .save(NewResponse {
            rounds: rounds.clone(),
            ..response("a1", OWNER, 100, "m1", "completed", "Weather in PARIS")
        })
        .await
        .unwrap();
    store.save(response("a2", OWNER, 200, "m2", "completed", "50% off today")).await.unwrap();
    store.save(response("a3", OWNER, 300, "m1", "incomplete", "50 percent off")).await.unwrap();
    store.save(response("b1", OTHER, 250, "m1", "completed", "the other tenant's")).await.unwrap();
    let all = ResponseFilter::default();
    let ten = page(None, 10);

    assert_eq!(ids(&store, &tenant(OWNER), &all, &ten).await, (vec!["a3".into(), "a2".into(), "a1".into()], false));
    assert_eq!(ids(&store, &tenant(OTHER), &all, &ten).await.0, ["b1"]);
    assert!(ids(&store, &tenant("nobody"), &all, &ten).await.0.is_empty());
    assert_eq!(ids(&store, &Scope::All, &all, &ten).await.0, ["a3", "b1", "a2", "a1"]);

    let model = ResponseFilter { model: Some("m1".into()), ..Default::default() };
    assert_eq!(ids(&store, &Scope::All, &model, &ten).await.0, ["a3", "b1", "a1"]);
    let status = ResponseFilter { status: Some("incomplete".into()), ..Default::default() };
    assert_eq!(ids(&store, &Scope::All, &status, &ten).await.0, ["a3"]);
    let window = ResponseFilter { since: Some(200), until: Some(250), ..Default::default() };
    assert_eq!(ids(&store, &Scope::All, &window, &ten).await.0, ["b1", "a2"]);

    // Case-insensitive, and `%` / `_` are themselves.
    assert_eq!(ids(&store, &Scope::All, &text("paris"), &ten).await.0, ["a1"]);
    assert_eq!(ids(&store, &Scope::All, &text("50%"), &ten).await.0, ["a2"]);
    assert!(ids(&store, &Scope::All, &text("50_"), &ten).await.0.is_empty());
    assert_eq!(ids(&store, &Scope::All, &text("OFF"), &ten).await.0, ["a3", "a2"]);
    assert!(ids(&store, &tenant(OTHER), &text("off"), &ten).await.0.is_empty());

    // Pages: newest first, strictly after the cursor; a cursor out of scope or unknown: empty.
    assert_eq!(ids(&store, &Scope::All, &all, &page(None, 2)).await, (vec!["a3".into(), "b1".into()], true));
    assert_eq!(ids(&store, &Scope::All, &all, &page(Some("b1"), 2)).await, (vec!["a2".into(), "a1".into()], false));
    assert_eq!(ids(&store, &tenant(OWNER), &all, &page(Some("a3"), 1)).await, (vec!["a2".into()], true));
    assert!(ids(&store, &tenant(OWNER), &all, &page(Some("b1"), 5)).await.0.is_empty());
    assert!(ids(&store, &Scope::All, &all, &page(Some("resp_unknown"), 5)).await.0.is_empty());

    let listed = store.console().list_responses(&tenant(OWNER), &text("paris"), &ten).await.unwrap();
    let ResponseRow { owner, model, status, created_at, input_text, rounds: got, response, .. } = &listed.data[0];
    assert_eq!((owner.as_str(), model.as_str(), status.as_str(), *created_at), (OWNER, "m1", "completed", 100));
    assert_eq!(input_text, "Weather in PARIS");
    assert_eq!(got, &rounds);
    assert_eq!(response["id"], "a1");

    // Deleted responses are gone from the lists.
    assert!(store.delete(OWNER, "a2").await.unwrap());
    assert_eq!(ids(&store, &tenant(OWNER), &all, &ten).await.0, ["a3", "a1"]);
}

async fn response_facts_give_rounds_inherited_items_and_chain(backend: Backend) {
    let store = backend.open().await;
    let at = |r: NewResponse, created_at| NewResponse { created_at, ..r };
    store.save(at(new_response("c1", None, vec![user("u1")], vec![assistant("a1")]), 1)).await.unwrap();
    let rounds = vec![round(0, (30, 5)), round(50, (40, 6))];
    let c2 = new_response("c2", Some("c1"), vec![user("u2")], vec![assistant("a2")]);
    store.save(at(NewResponse { rounds: rounds.clone(), ..c2 }, 2)).await.unwrap();
    store.save(at(new_response("c3", Some("c2"), vec![user("u3")], vec![]), 3)).await.unwrap();
    store.save(at(new_response("c3b", Some("c2"), vec![user("u3b")], vec![]), 4)).await.unwrap();

    let facts = store.console().response_facts(&tenant(OWNER), "c2").await.unwrap().unwrap();
    assert_eq!(facts.owner, OWNER);
    assert_eq!(facts.rounds, rounds);
    assert_eq!(facts.inherited_items, 2);
    assert_eq!(facts.previous, ["c1"]);
    assert_eq!(facts.next, ["c3", "c3b"]);
    assert!(store.console().response_facts(&tenant(OTHER), "c2").await.unwrap().is_none());
    assert!(store.console().response_facts(&Scope::All, "c2").await.unwrap().is_some());

    let facts = store.console().response_facts(&Scope::All, "c3").await.unwrap().unwrap();
    assert_eq!((facts.previous, facts.inherited_items, facts.next.len()), (vec!["c1".into(), "c2".into()], 4, 0));
    assert!(facts.rounds.is_empty());

    // A deleted (continued, hence kept) response is left out of the chain and of lookups.
    assert!(store.delete(OWNER, "c1").await.unwrap());
    assert_eq!(store.console().response_facts(&Scope::All, "c3").await.unwrap().unwrap().previous, ["c2"]);
    assert!(store.console().response_facts(&Scope::All, "c1").await.unwrap().is_none());
}

fn new_run(id: &str, tenant: &str) -> NewRun {
    let event = |seq: u64, kind: &str| StoredEvent {
        seq,
        kind: kind.into(),
        data: json!({"type": kind, "sequence_number": seq}).to_string(),
    };
    NewRun {
        id: id.into(),
        owner: "worker-1".into(),
        tenant: tenant.into(),
        lease_until_ms: i64::MAX / 2,
        status: RunStatus::Queued,
        body: json!({"id": id, "object": "response", "status": "queued", "model": "m", "created_at": 7}).to_string(),
        events: vec![event(0, "response.created"), event(1, "response.queued")],
        bounds: QueueBounds { total: 100, per_tenant: 100 },
    }
}

fn file(id: &str, owner: &str, created_at: i64) -> FileRecord {
    FileRecord {
        id: id.into(),
        owner: owner.into(),
        filename: format!("{id}.txt"),
        purpose: "assistants".into(),
        bytes: 5,
        created_at,
        expires_at: None,
    }
}

fn vector_store(id: &str, owner: &str, created_at: i64) -> NewVectorStore {
    NewVectorStore {
        id: id.into(),
        owner: owner.into(),
        name: Some(id.into()),
        metadata: json!({}),
        created_at,
        expires_after: None,
        expires_at: None,
        files: vec![],
    }
}

async fn conversations_runs_files_and_vector_stores_are_scoped(backend: Backend) {
    let store = backend.open().await;
    let conversation = |id: &str, owner: &str, created_at| NewConversation {
        id: id.into(),
        owner: owner.into(),
        created_at,
        metadata: super::metadata(&[("topic", id)]),
        items: vec![user(&format!("{id}_item"))],
    };
    store.create_conversation(conversation("conv_a", OWNER, 10)).await.unwrap();
    store.create_conversation(conversation("conv_b", OTHER, 20)).await.unwrap();
    let v = version(&store, "conv_a").await;
    store.save(in_conversation("in_a", "conv_a", v, vec![user("q")], vec![assistant("r")])).await.unwrap();

    let listed = store.console().list_conversations(&Scope::All, &page(None, 10)).await.unwrap();
    let rows: Vec<(&str, &str, u64, u64)> =
        listed.data.iter().map(|c| (c.id.as_str(), c.owner.as_str(), c.items, c.responses)).collect();
    assert_eq!(rows, [("conv_b", OTHER, 1, 0), ("conv_a", OWNER, 3, 1)]);
    assert_eq!(listed.data[1].metadata["topic"], "conv_a");
    let mine = store.console().list_conversations(&tenant(OWNER), &page(None, 10)).await.unwrap();
    assert_eq!(mine.data.len(), 1);
    let paged = store.console().list_conversations(&Scope::All, &page(Some("conv_b"), 10)).await.unwrap();
    assert_eq!(paged.data.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["conv_a"]);
    assert_eq!(store.console().conversation_owner(&Scope::All, "conv_a").await.unwrap().as_deref(), Some(OWNER));
    assert_eq!(store.console().conversation_owner(&tenant(OTHER), "conv_a").await.unwrap(), None);

    store.background().create_run(new_run("run_a", OWNER)).await.unwrap();
    store.background().create_run(new_run("run_b", OTHER)).await.unwrap();
    let runs = store.console().list_runs(&Scope::All, None, &page(None, 10)).await.unwrap();
    assert_eq!(runs.data.len(), 2);
    let mine = store.console().list_runs(&tenant(OWNER), Some(RunStatus::Queued), &page(None, 10)).await.unwrap();
    assert_eq!(mine.data.len(), 1);
    let run = &mine.data[0];
    assert_eq!((run.id.as_str(), run.tenant.as_str(), run.status, run.events), ("run_a", OWNER, RunStatus::Queued, 2));
    assert!(run.ended_at_ms.is_none() && run.queued_at_ms > 0);
    let done = store.console().list_runs(&Scope::All, Some(RunStatus::Completed), &page(None, 10)).await.unwrap();
    assert!(done.data.is_empty());
    let first = store.console().list_runs(&Scope::All, None, &page(None, 1)).await.unwrap();
    assert!(first.has_more);
    let rest = store.console().list_runs(&Scope::All, None, &page(Some(&first.data[0].id), 1)).await.unwrap();
    assert_eq!(rest.data.len(), 1);
    assert_ne!(rest.data[0].id, first.data[0].id);
    assert!(store.console().run_row(&tenant(OTHER), "run_a").await.unwrap().is_none());
    assert_eq!(store.console().run_row(&Scope::All, "run_a").await.unwrap().unwrap().tenant, OWNER);

    store.retrieval().create_file(file("file-a", OWNER, 1), b"hello".to_vec()).await.unwrap();
    store.retrieval().create_file(file("file-b", OTHER, 2), b"hello".to_vec()).await.unwrap();
    let files = store.console().list_files(&Scope::All, None, &page(None, 10)).await.unwrap();
    assert_eq!(files.data.iter().map(|f| f.owner.as_str()).collect::<Vec<_>>(), [OTHER, OWNER]);
    assert_eq!(store.console().list_files(&tenant(OWNER), None, &page(None, 10)).await.unwrap().data.len(), 1);
    assert!(store.console().list_files(&Scope::All, Some("user_data"), &page(None, 10)).await.unwrap().data.is_empty());

    store.retrieval().create_vector_store(vector_store("vs_a", OWNER, 1)).await.unwrap();
    store.retrieval().create_vector_store(vector_store("vs_b", OTHER, 2)).await.unwrap();
    let stores = store.console().list_vector_stores(&Scope::All, &page(None, 1)).await.unwrap();
    assert_eq!((stores.data[0].record.id.as_str(), stores.has_more), ("vs_b", true));
    let stores = store.console().list_vector_stores(&Scope::All, &page(Some("vs_b"), 1)).await.unwrap();
    assert_eq!((stores.data[0].record.id.as_str(), stores.has_more), ("vs_a", false));
    assert_eq!(store.console().vector_store_owner(&Scope::All, "vs_b").await.unwrap().as_deref(), Some(OTHER));
    assert_eq!(store.console().vector_store_owner(&tenant(OWNER), "vs_b").await.unwrap(), None);
}

async fn a_version_7_database_is_migrated_for_the_console(backend: Backend) {
    let location = backend.location();
    let old_row = "INSERT INTO responses (id, previous_response_id, model, created_at, status, body, owner)
        VALUES ('old', NULL, 'm', 5, 'completed', '{\"id\":\"old\"}', 'alpha')";
    match &backend {
        Backend::Sqlite(_) => {
            let conn = rusqlite::Connection::open(&location).unwrap();
            for sql in &sqlite::MIGRATIONS[..7] {
                conn.execute_batch(sql).unwrap();
            }
            conn.execute_batch(old_row).unwrap();
        }
        Backend::Postgres(_) => {
            let pool = sqlx::PgPool::connect(&location).await.unwrap();
            sqlx::raw_sql(postgres::MIGRATIONS_TABLE).execute(&pool).await.unwrap();
            for (version, sql) in (1..).zip(&postgres::MIGRATIONS[..7]) {
                sqlx::raw_sql(sql).execute(&pool).await.unwrap();
                sqlx::query("INSERT INTO respgw_schema_migrations (version) VALUES ($1)")
                    .bind(version)
                    .execute(&pool)
                    .await
                    .unwrap();
            }
            sqlx::raw_sql(old_row).execute(&pool).await.unwrap();
            pool.close().await;
        }
    }
    let store = backend.open().await;
    let schema = match &store {
        TestStore::Sqlite(_) => store.sql_i64("PRAGMA user_version").await,
        TestStore::Postgres(_) => store.sql_i64("SELECT max(version)::bigint FROM respgw_schema_migrations").await,
    };
    assert_eq!(schema, 8);
    store.save(response("new", OWNER, 9, "m", "completed", "after the upgrade")).await.unwrap();
    let listed =
        store.console().list_responses(&Scope::All, &ResponseFilter::default(), &page(None, 10)).await.unwrap();
    let rows: Vec<(&str, &str, usize)> =
        listed.data.iter().map(|r| (r.id.as_str(), r.input_text.as_str(), r.rounds.len())).collect();
    assert_eq!(rows, [("new", "after the upgrade", 0), ("old", "", 0)]);
    let facts = store.console().response_facts(&tenant(OWNER), "old").await.unwrap().unwrap();
    assert_eq!((facts.inherited_items, facts.rounds.len()), (0, 0));
}
