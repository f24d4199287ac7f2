//! The PostgreSQL schema: its migrations, applied at open under an advisory lock (see the
//! backend's "Start-up and migrations").

use sqlx::Connection;
use sqlx::postgres::PgConnection;

use super::{SCHEMA_VERSION, map_err};
use crate::StoreError;

/// The advisory lock key that serializes migrations ("respgw" in ASCII, then 1).
const MIGRATION_LOCK: i64 = 0x7265_7370_6777_0001;

pub(crate) const MIGRATIONS_TABLE: &str = "
    CREATE TABLE IF NOT EXISTS respgw_schema_migrations (
        version integer PRIMARY KEY,
        applied_at timestamptz NOT NULL DEFAULT now()
    )";

/// Migration `n` (1-based) takes the schema from version `n - 1` to `n`.
pub(crate) const MIGRATIONS: &[&str] = &[
    "
    CREATE SEQUENCE items_key_seq AS bigint;
    CREATE TABLE items (
        key bigint PRIMARY KEY DEFAULT nextval('items_key_seq'),
        item_id text NOT NULL,
        body text NOT NULL
    );
    ALTER SEQUENCE items_key_seq OWNED BY items.key;
    CREATE TABLE responses (
        id text PRIMARY KEY,
        previous_response_id text,
        model text NOT NULL,
        created_at bigint NOT NULL,
        status text NOT NULL,
        body text NOT NULL
    );
    CREATE TABLE response_items (
        response_id text NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
        position integer NOT NULL,
        item_key bigint NOT NULL REFERENCES items(key),
        role smallint NOT NULL,
        PRIMARY KEY (response_id, position)
    );
    CREATE INDEX response_items_item_key ON response_items (item_key);",
    "
    ALTER TABLE responses
        ADD COLUMN history bigint[] NOT NULL DEFAULT '{}',
        ADD COLUMN history_from text REFERENCES responses(id),
        ADD COLUMN deleted boolean NOT NULL DEFAULT false;
    UPDATE responses r SET history = coalesce(
        (SELECT array_agg(ri.item_key ORDER BY ri.position) FROM response_items ri WHERE ri.response_id = r.id),
        '{}');
    UPDATE responses r SET history_from = r.previous_response_id
    WHERE EXISTS (SELECT 1 FROM response_items ri WHERE ri.response_id = r.id AND ri.role = 0)
    AND EXISTS (SELECT 1 FROM responses p WHERE p.id = r.previous_response_id);
    DELETE FROM response_items WHERE role = 0;
    CREATE INDEX responses_history_from ON responses (history_from);",
    "
    CREATE TABLE conversations (
        id text PRIMARY KEY,
        created_at bigint NOT NULL,
        metadata text NOT NULL,
        version bigint NOT NULL DEFAULT 0,
        deleted boolean NOT NULL DEFAULT false
    );
    CREATE TABLE conversation_items (
        conversation_id text NOT NULL REFERENCES conversations(id),
        position integer NOT NULL,
        item_key bigint NOT NULL REFERENCES items(key),
        removed boolean NOT NULL DEFAULT false,
        PRIMARY KEY (conversation_id, position)
    );
    CREATE INDEX conversation_items_item_key ON conversation_items (item_key);
    ALTER TABLE responses ADD COLUMN conversation_id text REFERENCES conversations(id);
    CREATE INDEX responses_conversation_id ON responses (conversation_id);",
    "
    CREATE TABLE background_runs (
        id text PRIMARY KEY,
        status text NOT NULL,
        body text NOT NULL,
        owner text NOT NULL,
        lease_until bigint NOT NULL,
        next_seq bigint NOT NULL,
        ended_at bigint
    );
    CREATE INDEX background_runs_lease ON background_runs (lease_until) WHERE ended_at IS NULL;
    CREATE INDEX background_runs_ended ON background_runs (ended_at) WHERE ended_at IS NOT NULL;
    CREATE TABLE background_events (
        run_id text NOT NULL REFERENCES background_runs(id) ON DELETE CASCADE,
        seq bigint NOT NULL,
        kind text NOT NULL,
        data text NOT NULL,
        PRIMARY KEY (run_id, seq)
    );",
    // Ownership: rows from before belong to the tenant `default` (a background run's `owner` is
    // the process running it, its tenant is `tenant`). Lookups are by primary key, so the columns
    // need no index.
    "
    ALTER TABLE responses ADD COLUMN owner text NOT NULL DEFAULT 'default';
    ALTER TABLE conversations ADD COLUMN owner text NOT NULL DEFAULT 'default';
    ALTER TABLE background_runs ADD COLUMN tenant text NOT NULL DEFAULT 'default';",
    // The queue of background runs: `queued_at` orders a process's queued runs, `started_at`
    // marks a run that left the queue for a run slot (with neither it nor `ended_at`, a run is
    // queued); the partial index serves the counts of unfinished runs by tenant; `background_tenants`
    // keeps when each tenant's last run started (whose turn is next). Runs from before
    // count as started unless they are still `queued`.
    "
    ALTER TABLE background_runs ADD COLUMN queued_at bigint NOT NULL DEFAULT 0;
    ALTER TABLE background_runs ADD COLUMN started_at bigint;
    UPDATE background_runs SET started_at = 0 WHERE status <> 'queued';
    CREATE INDEX background_runs_unfinished ON background_runs (tenant) WHERE ended_at IS NULL;
    CREATE TABLE background_tenants (tenant text PRIMARY KEY, last_started_at bigint NOT NULL);",
    // Retrieval: uploaded files (their bytes apart, stored uncompressed), vector stores, their
    // files (with the ingestion queue's lease columns) and batches, and the chunks with their
    // embeddings (little-endian `f32`s as `bytea`) and a generated `tsvector` under a GIN index.
    // Integers are `bigint` throughout, as the shared statements bind and read them. Deleting a
    // file, a vector store or a vector-store file cascades to what hangs off it.
    "
    CREATE TABLE files (
        id text PRIMARY KEY,
        owner text NOT NULL,
        filename text NOT NULL,
        purpose text NOT NULL,
        bytes bigint NOT NULL,
        created_at bigint NOT NULL,
        expires_at bigint
    );
    CREATE INDEX files_owner ON files (owner, created_at, id);
    CREATE TABLE file_contents (
        file_id text PRIMARY KEY REFERENCES files(id) ON DELETE CASCADE,
        content bytea NOT NULL
    );
    ALTER TABLE file_contents ALTER COLUMN content SET STORAGE EXTERNAL;
    CREATE TABLE vector_stores (
        id text PRIMARY KEY,
        owner text NOT NULL,
        name text,
        metadata text NOT NULL,
        created_at bigint NOT NULL,
        last_active_at bigint NOT NULL,
        expires_after text,
        expires_days bigint,
        expires_at bigint,
        embedding_model text,
        embedding_dimensions bigint,
        generation bigint NOT NULL
    );
    CREATE INDEX vector_stores_owner ON vector_stores (owner, created_at, id);
    CREATE TABLE vector_store_file_batches (
        id text PRIMARY KEY,
        vector_store_id text NOT NULL REFERENCES vector_stores(id) ON DELETE CASCADE,
        owner text NOT NULL,
        created_at bigint NOT NULL,
        cancelled boolean NOT NULL
    );
    CREATE INDEX vector_store_file_batches_store ON vector_store_file_batches (vector_store_id);
    CREATE TABLE vector_store_files (
        vector_store_id text NOT NULL REFERENCES vector_stores(id) ON DELETE CASCADE,
        file_id text NOT NULL REFERENCES files(id) ON DELETE CASCADE,
        owner text NOT NULL,
        status text NOT NULL,
        attributes text NOT NULL,
        chunking_strategy text NOT NULL,
        usage_bytes bigint NOT NULL,
        created_at bigint NOT NULL,
        error_code text,
        error_message text,
        batch_id text,
        lease_worker text,
        lease_until bigint,
        attempts bigint NOT NULL,
        queued bigint NOT NULL,
        PRIMARY KEY (vector_store_id, file_id)
    );
    CREATE INDEX vector_store_files_file ON vector_store_files (file_id);
    CREATE INDEX vector_store_files_page ON vector_store_files (vector_store_id, created_at, file_id);
    CREATE INDEX vector_store_files_batch ON vector_store_files (batch_id) WHERE batch_id IS NOT NULL;
    CREATE INDEX vector_store_files_queued ON vector_store_files (queued);
    CREATE INDEX vector_store_files_queue ON vector_store_files (queued) WHERE status = 'in_progress';
    CREATE TABLE chunks (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        vector_store_id text NOT NULL,
        file_id text NOT NULL,
        seq bigint NOT NULL,
        text text NOT NULL,
        tokens bigint NOT NULL,
        embedding bytea,
        lexemes tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
        FOREIGN KEY (vector_store_id, file_id) REFERENCES vector_store_files (vector_store_id, file_id)
            ON DELETE CASCADE
    );
    CREATE INDEX chunks_file ON chunks (vector_store_id, file_id, seq);
    CREATE INDEX chunks_lexemes ON chunks USING gin (lexemes);",
    // The operator console: each response's upstream calls (`rounds`, a JSON array of
    // `RoundRecord`s) and the text of its own input (`input_text`, what the console's search
    // matches with ILIKE); rows from before get none. Indexes serve the console's lists, newest
    // first, of one tenant or all, and a response's continuations.
    "
    ALTER TABLE responses
        ADD COLUMN rounds text NOT NULL DEFAULT '[]',
        ADD COLUMN input_text text NOT NULL DEFAULT '';
    CREATE INDEX responses_owner_created ON responses (owner, created_at, id);
    CREATE INDEX responses_created ON responses (created_at, id);
    CREATE INDEX responses_previous ON responses (previous_response_id);
    CREATE INDEX conversations_owner_created ON conversations (owner, created_at, id);
    CREATE INDEX conversations_created ON conversations (created_at, id);
    CREATE INDEX background_runs_tenant_queued ON background_runs (tenant, queued_at, id);
    CREATE INDEX background_runs_queued ON background_runs (queued_at, id);
    CREATE INDEX files_created ON files (created_at, id);
    CREATE INDEX vector_stores_created ON vector_stores (created_at, id);",
];

/// Create the schema, or bring it up to [`SCHEMA_VERSION`], under an advisory lock.
pub(super) async fn migrate(conn: &mut PgConnection) -> Result<(), StoreError> {
    let mut tx = conn.begin().await.map_err(map_err)?;
    match migrate_in(&mut tx).await {
        Ok(()) => tx.commit().await.map_err(map_err),
        Err(e) => {
            // Roll back now rather than when the connection is next used: that releases the lock
            // for the other processes starting at the same time.
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}

async fn migrate_in(tx: &mut sqlx::PgConnection) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(MIGRATION_LOCK).execute(&mut *tx).await.map_err(map_err)?;
    sqlx::raw_sql(MIGRATIONS_TABLE).execute(&mut *tx).await.map_err(map_err)?;
    let current: i32 = sqlx::query_scalar("SELECT coalesce(max(version), 0) FROM respgw_schema_migrations")
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
    if current > SCHEMA_VERSION {
        return Err(StoreError::Corrupt(format!(
            "database schema version {current} is newer than this gateway's ({SCHEMA_VERSION}); upgrade the gateway"
        )));
    }
    for (version, sql) in (1..).zip(MIGRATIONS) {
        if version <= current {
            continue;
        }
        sqlx::raw_sql(sql).execute(&mut *tx).await.map_err(map_err)?;
        sqlx::query("INSERT INTO respgw_schema_migrations (version) VALUES ($1)")
            .bind(version)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        tracing::info!(version, "applied PostgreSQL schema migration");
    }
    Ok(())
}
