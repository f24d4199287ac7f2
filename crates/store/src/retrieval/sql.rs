//! The retrieval statements, written once in PostgreSQL's dialect (`$n` parameters) and filled in
//! per [`Dialect`] where the two differ: how a JSON list parameter becomes rows, row locks, and
//! the lexical index. Every statement that finds a row by id also names its owner.
//!
//! Types are chosen so that both backends bind and read the same Rust values: integers are
//! `bigint` on PostgreSQL (SQLite's `INTEGER`), JSON is text, embeddings are blobs (`bytea`), and
//! flags are read as integers.

use respgw_store_api::retrieval::{MAX_INGESTION_ATTEMPTS, Page};

use crate::queries::with_sqlite_parameters;

/// Which database a statement is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// The rows of a JSON array of strings bound at parameter `n`, as a one-column `value` table.
    fn list(self, n: u8) -> String {
        match self {
            Dialect::Sqlite => format!("SELECT value FROM json_each(${n})"),
            Dialect::Postgres => format!("SELECT value FROM json_array_elements_text(CAST(${n} AS json))"),
        }
    }

    /// The rows of a JSON array of `[vector_store_id, file_id]` pairs bound at parameter `n`.
    fn pairs(self, n: u8) -> String {
        match self {
            Dialect::Sqlite => format!("SELECT value->>0, value->>1 FROM json_each(${n})"),
            Dialect::Postgres => format!("SELECT value->>0, value->>1 FROM json_array_elements(CAST(${n} AS json))"),
        }
    }

    /// Locks the rows a read-then-write selects (SQLite's write transaction holds the whole file).
    fn for_update(self) -> &'static str {
        match self {
            Dialect::Sqlite => "",
            Dialect::Postgres => "FOR UPDATE",
        }
    }

    /// Lets concurrent claims pass each other's rows instead of waiting for them.
    fn skip_locked(self) -> &'static str {
        match self {
            Dialect::Sqlite => "",
            Dialect::Postgres => "FOR UPDATE SKIP LOCKED",
        }
    }

    /// A statement in this dialect's parameter syntax.
    pub(crate) fn render(self, sql: &str) -> String {
        match self {
            Dialect::Sqlite => with_sqlite_parameters(sql),
            Dialect::Postgres => sql.to_owned(),
        }
    }
}

/// A file's columns, as [`super::codec::file`] reads them.
pub(crate) const FILE_COLUMNS: &str = "f.id, f.owner, f.filename, f.purpose, f.bytes, f.created_at, f.expires_at";

/// A vector-store file's columns, as [`super::codec::vector_store_file`] reads them.
const FILE_IN_STORE_COLUMNS: &str = "s.vector_store_id, s.file_id, s.owner, s.status, s.attributes, \
    s.chunking_strategy, s.usage_bytes, s.created_at, s.error_code, s.error_message, s.batch_id";

/// A vector store's own columns (alias `v`).
pub(crate) const STORE_COLUMNS: &str = "v.id, v.owner, v.name, v.metadata, v.created_at, v.last_active_at, v.expires_after, \
    v.expires_at, v.embedding_model, v.embedding_dimensions, v.generation";

/// File counts by status and the completed files' bytes over the joined `s` rows, as
/// [`super::codec::counts`] reads them.
pub(crate) const COUNT_COLUMNS: &str = "
    CAST(coalesce(sum(CASE WHEN s.status = 'in_progress' THEN 1 ELSE 0 END), 0) AS bigint),
    CAST(coalesce(sum(CASE WHEN s.status = 'completed' THEN 1 ELSE 0 END), 0) AS bigint),
    CAST(coalesce(sum(CASE WHEN s.status = 'failed' THEN 1 ELSE 0 END), 0) AS bigint),
    CAST(coalesce(sum(CASE WHEN s.status = 'cancelled' THEN 1 ELSE 0 END), 0) AS bigint),
    CAST(coalesce(sum(CASE WHEN s.status = 'completed' THEN s.usage_bytes ELSE 0 END), 0) AS bigint)";

/// The chunk rows one multi-row insert writes; fewer left over are written one by one.
pub(crate) const CHUNKS_PER_INSERT: usize = 64;

/// Every retrieval statement of one dialect (built once per backend).
pub(crate) struct Statements {
    pub dialect: Dialect,
    pub insert_file: String,
    pub insert_file_content: String,
    pub select_file: String,
    pub file_content: String,
    /// Bumps the generation of every vector store holding file `$1` of owner `$2`.
    pub bump_stores_of_file: String,
    pub delete_file: String,
    /// Which of the ids in the list `$2` are owner `$1`'s files.
    pub owned_files: String,
    pub insert_vector_store: String,
    /// A vector store's id, locked for a change of its files (owner `$1`, id `$2`).
    pub lock_vector_store: String,
    pub select_view: String,
    pub update_vector_store: String,
    pub delete_vector_store: String,
    pub touch_vector_stores: String,
    pub bump_generation: String,
    pub insert_batch: String,
    pub delete_file_in_store: String,
    pub insert_file_in_store: String,
    pub select_file_in_store: String,
    pub update_attributes: String,
    pub file_chunks: String,
    pub select_batch: String,
    pub cancel_batch: String,
    pub cancel_batch_files: String,
    pub fail_exhausted: String,
    pub claim: String,
    pub claimed_jobs: String,
    pub renew: String,
    pub lock_store_space: String,
    pub lock_file_for_finish: String,
    pub insert_chunks: String,
    pub insert_chunk: String,
    pub complete_file: String,
    pub set_space_and_bump: String,
    pub fail_file: String,
    pub searchable_files: String,
    pub generation: String,
    pub vectors: String,
    pub lexical_search: String,
    /// SQLite only: the best `$2` chunks of the whole index for the query `$1`, with each one's
    /// store and file, for [`super::lexical_search`] to keep those of the searched stores.
    pub lexical_unfiltered: Option<String>,
    /// Which of the words in the list `$1` are in more than half of all chunks: SQLite's
    /// `chunks_fts_terms` counts them exactly; PostgreSQL's planner statistics of the `lexemes`
    /// column (`pg_stats.most_common_elems`, kept by `ANALYZE` from a sample) estimate them, and
    /// know nothing before the table's first analysis.
    pub common_terms: String,
    /// Which of the ids in the list `$2` are owner `$1`'s vector stores.
    pub owned_stores: String,
    pub chunks: String,
}

impl Statements {
    pub(crate) fn new(d: Dialect) -> Self {
        let r = |sql: String| d.render(&sql);
        let (for_update, skip_locked) = (d.for_update(), d.skip_locked());
        let max_attempts = MAX_INGESTION_ATTEMPTS;
        Self {
            dialect: d,
            insert_file: r("INSERT INTO files (id, owner, filename, purpose, bytes, created_at, expires_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7)"
                .into()),
            insert_file_content: r("INSERT INTO file_contents (file_id, content) VALUES ($1, $2)".into()),
            select_file: r(format!("SELECT {FILE_COLUMNS} FROM files f WHERE f.id = $2 AND f.owner = $1")),
            file_content: r("SELECT c.content FROM file_contents c JOIN files f ON f.id = c.file_id
                WHERE f.id = $2 AND f.owner = $1"
                .into()),
            bump_stores_of_file: r("UPDATE vector_stores SET generation = generation + 1 WHERE id IN (
                SELECT vector_store_id FROM vector_store_files WHERE file_id = $2 AND owner = $1)"
                .into()),
            delete_file: r("DELETE FROM files WHERE id = $2 AND owner = $1".into()),
            owned_files: r(format!("SELECT id FROM files WHERE owner = $1 AND id IN ({})", d.list(2))),
            insert_vector_store: r("INSERT INTO vector_stores (id, owner, name, metadata, created_at, last_active_at,
                expires_after, expires_days, expires_at, generation)
                VALUES ($1, $2, $3, $4, $5, $5, $6, $7, $8, 0)"
                .into()),
            lock_vector_store: r(format!("SELECT id FROM vector_stores WHERE owner = $1 AND id = $2 {for_update}")),
            select_view: r(format!(
                "SELECT {STORE_COLUMNS}, {COUNT_COLUMNS} FROM vector_stores v
                LEFT JOIN vector_store_files s ON s.vector_store_id = v.id
                WHERE v.owner = $1 AND v.id = $2
                GROUP BY {STORE_COLUMNS}"
            )),
            update_vector_store: r("UPDATE vector_stores SET
                name = CASE WHEN $3 THEN $4 ELSE name END,
                metadata = CASE WHEN $5 THEN $6 ELSE metadata END,
                expires_after = CASE WHEN $7 THEN $8 ELSE expires_after END,
                expires_days = CASE WHEN $7 THEN $9 ELSE expires_days END,
                expires_at = CASE WHEN $10 THEN $11 ELSE expires_at END
                WHERE owner = $1 AND id = $2"
                .into()),
            delete_vector_store: r("DELETE FROM vector_stores WHERE owner = $1 AND id = $2".into()),
            touch_vector_stores: r(format!(
                "UPDATE vector_stores SET last_active_at = $3,
                    expires_at = CASE WHEN expires_days IS NULL THEN expires_at ELSE $3 + 86400 * expires_days END
                WHERE owner = $1 AND id IN ({})",
                d.list(2)
            )),
            bump_generation: r("UPDATE vector_stores SET generation = generation + 1 WHERE id = $1".into()),
            insert_batch: r("INSERT INTO vector_store_file_batches (id, vector_store_id, owner, created_at, cancelled)
                VALUES ($1, $2, $3, $4, false)"
                .into()),
            delete_file_in_store: r("DELETE FROM vector_store_files WHERE vector_store_id = $1 AND file_id = $2".into()),
            insert_file_in_store: r("INSERT INTO vector_store_files (vector_store_id, file_id, owner, status,
                    attributes, chunking_strategy, usage_bytes, created_at, batch_id, attempts, queued)
                VALUES ($1, $2, $3, 'in_progress', $4, $5, 0, $6, $7, 0,
                    (SELECT coalesce(max(queued), 0) + 1 FROM vector_store_files))"
                .into()),
            select_file_in_store: r(format!(
                "SELECT {FILE_IN_STORE_COLUMNS} FROM vector_store_files s
                WHERE s.owner = $1 AND s.vector_store_id = $2 AND s.file_id = $3"
            )),
            update_attributes: r(format!(
                "UPDATE vector_store_files SET attributes = $4
                WHERE owner = $1 AND vector_store_id = $2 AND file_id = $3
                RETURNING {}",
                FILE_IN_STORE_COLUMNS.replace("s.", "")
            )),
            file_chunks: r("SELECT c.text FROM vector_store_files s
                LEFT JOIN chunks c ON c.vector_store_id = s.vector_store_id AND c.file_id = s.file_id
                WHERE s.owner = $1 AND s.vector_store_id = $2 AND s.file_id = $3
                ORDER BY c.seq"
                .into()),
            select_batch: r(format!(
                "SELECT b.id, b.vector_store_id, b.owner, b.created_at,
                    CAST(CASE WHEN b.cancelled THEN 1 ELSE 0 END AS bigint), {COUNT_COLUMNS}
                FROM vector_store_file_batches b LEFT JOIN vector_store_files s ON s.batch_id = b.id
                WHERE b.owner = $1 AND b.vector_store_id = $2 AND b.id = $3
                GROUP BY b.id, b.vector_store_id, b.owner, b.created_at, b.cancelled"
            )),
            cancel_batch: r("UPDATE vector_store_file_batches SET cancelled = true
                WHERE owner = $1 AND vector_store_id = $2 AND id = $3"
                .into()),
            cancel_batch_files: r("UPDATE vector_store_files SET status = 'cancelled', lease_worker = NULL,
                    lease_until = NULL
                WHERE vector_store_id = $2 AND batch_id = $3 AND owner = $1 AND status = 'in_progress'"
                .into()),
            fail_exhausted: r(format!(
                "UPDATE vector_store_files SET status = 'failed', error_code = 'server_error', error_message = $2,
                    lease_worker = NULL, lease_until = NULL
                WHERE (vector_store_id, file_id) IN (
                    SELECT vector_store_id, file_id FROM vector_store_files
                    WHERE status = 'in_progress' AND lease_until < $1 AND attempts >= {max_attempts}
                    {skip_locked})"
            )),
            claim: r(format!(
                "UPDATE vector_store_files SET lease_worker = $1, lease_until = $3, attempts = attempts + 1
                WHERE (vector_store_id, file_id) IN (
                    SELECT vector_store_id, file_id FROM vector_store_files
                    WHERE status = 'in_progress' AND (lease_until IS NULL OR lease_until < $2)
                        AND attempts < {max_attempts}
                    ORDER BY queued LIMIT $4 {skip_locked})
                RETURNING vector_store_id, file_id"
            )),
            claimed_jobs: r(format!(
                "SELECT s.vector_store_id, s.file_id, s.owner, f.filename, s.chunking_strategy, s.attempts,
                    v.embedding_model, v.embedding_dimensions
                FROM vector_store_files s JOIN files f ON f.id = s.file_id
                JOIN vector_stores v ON v.id = s.vector_store_id
                WHERE s.lease_worker = $1 AND (s.vector_store_id, s.file_id) IN ({})
                ORDER BY s.queued",
                d.pairs(2)
            )),
            renew: r(format!(
                "UPDATE vector_store_files SET lease_until = $2
                WHERE lease_worker = $1 AND status = 'in_progress' AND (vector_store_id, file_id) IN ({})",
                d.pairs(3)
            )),
            lock_store_space: r(format!(
                "SELECT embedding_model, embedding_dimensions FROM vector_stores
                WHERE owner = $1 AND id = $2 {for_update}"
            )),
            lock_file_for_finish: r(format!(
                "SELECT status, lease_worker, attempts FROM vector_store_files
                WHERE vector_store_id = $1 AND file_id = $2 {for_update}"
            )),
            insert_chunks: r(insert_chunks(CHUNKS_PER_INSERT)),
            insert_chunk: r(insert_chunks(1)),
            complete_file: r("UPDATE vector_store_files SET status = 'completed', usage_bytes = $3,
                    lease_worker = NULL, lease_until = NULL, error_code = NULL, error_message = NULL
                WHERE vector_store_id = $1 AND file_id = $2"
                .into()),
            set_space_and_bump: r("UPDATE vector_stores SET generation = generation + 1,
                    embedding_model = coalesce(embedding_model, $2),
                    embedding_dimensions = coalesce(embedding_dimensions, $3)
                WHERE id = $1"
                .into()),
            fail_file: r("UPDATE vector_store_files SET status = 'failed', error_code = $5, error_message = $6,
                    lease_worker = NULL, lease_until = NULL
                WHERE vector_store_id = $1 AND file_id = $2 AND owner = $3 AND lease_worker = $4 AND attempts = $7
                    AND status = 'in_progress'"
                .into()),
            searchable_files: r(format!(
                "SELECT s.vector_store_id, s.file_id, f.filename, s.attributes
                FROM vector_store_files s JOIN files f ON f.id = s.file_id
                WHERE s.owner = $1 AND s.status = 'completed' AND s.vector_store_id IN ({})
                ORDER BY s.vector_store_id, s.file_id",
                d.list(2)
            )),
            generation: r("SELECT generation FROM vector_stores WHERE owner = $1 AND id = $2".into()),
            // One statement, so the generation and the vectors are of one snapshot; in the order
            // of the chunks' index, so nothing is sorted.
            vectors: r("SELECT v.generation, v.embedding_dimensions, c.id, c.file_id, c.embedding
                FROM vector_stores v
                LEFT JOIN chunks c ON c.vector_store_id = v.id AND c.embedding IS NOT NULL
                WHERE v.owner = $1 AND v.id = $2
                ORDER BY c.file_id, c.seq"
                .into()),
            lexical_search: r(lexical_search(d)),
            lexical_unfiltered: match d {
                Dialect::Sqlite => Some(r(LEXICAL_UNFILTERED.into())),
                Dialect::Postgres => None,
            },
            common_terms: r(match d {
                Dialect::Sqlite => format!(
                    "SELECT term FROM chunks_fts_terms
                    WHERE term IN ({}) AND doc * 2 > (SELECT COUNT(*) FROM chunks)",
                    d.list(1)
                ),
                Dialect::Postgres => format!(
                    "SELECT w.value FROM ({}) AS w
                    WHERE EXISTS (
                        SELECT 1 FROM pg_stats s,
                            unnest(CAST(CAST(s.most_common_elems AS text) AS text[]), s.most_common_elem_freqs)
                                AS e(lexeme, freq)
                        WHERE s.schemaname = current_schema() AND s.tablename = 'chunks'
                            AND s.attname = 'lexemes' AND e.freq > 0.5
                            AND e.lexeme IN (SELECT unnest(tsvector_to_array(to_tsvector('english', w.value)))))",
                    d.list(1)
                ),
            }),
            owned_stores: r(format!("SELECT id FROM vector_stores WHERE owner = $1 AND id IN ({})", d.list(2))),
            // SQLite: the id list drives the join (`CROSS JOIN` fixes the order), one primary-key
            // lookup per id; left to itself its planner walks the store's every chunk.
            chunks: r(match d {
                Dialect::Sqlite => format!(
                    "SELECT c.id, c.vector_store_id, c.file_id, c.text FROM ({}) AS ids
                    CROSS JOIN chunks c ON c.id = CAST(ids.value AS integer)
                    JOIN vector_stores v ON v.id = c.vector_store_id
                    WHERE v.owner = $1",
                    d.list(2)
                ),
                Dialect::Postgres => format!(
                    "SELECT c.id, c.vector_store_id, c.file_id, c.text FROM chunks c
                    JOIN vector_stores v ON v.id = c.vector_store_id
                    WHERE v.owner = $1 AND c.id IN (SELECT CAST(value AS bigint) FROM ({}) AS ids)",
                    d.list(2)
                ),
            }),
        }
    }

    /// One page of the owner `$1`'s files (purpose `$2` unless NULL; cursors `$3` after, `$4`
    /// before; `$5` rows).
    pub(crate) fn list_files(&self, page: &Page) -> String {
        let cursor = "SELECT created_at, id FROM files WHERE owner = $1 AND id = ";
        let (bounds, order) = paging(page, ("f.created_at", "f.id"), cursor, (3, 4));
        self.dialect.render(&format!(
            "SELECT {FILE_COLUMNS} FROM files f
            WHERE f.owner = $1 AND (CAST($2 AS text) IS NULL OR f.purpose = $2) {bounds}
            ORDER BY {order} LIMIT $5"
        ))
    }

    /// One page of the owner `$1`'s vector stores with their counts (cursors `$2` after, `$3`
    /// before; `$4` rows). The page is chosen first, then counted.
    pub(crate) fn list_views(&self, page: &Page) -> String {
        let cursor = "SELECT created_at, id FROM vector_stores WHERE owner = $1 AND id = ";
        let (bounds, order) = paging(page, ("p.created_at", "p.id"), cursor, (2, 3));
        let (_, outer) = paging(page, ("v.created_at", "v.id"), cursor, (2, 3));
        self.dialect.render(&format!(
            "SELECT {STORE_COLUMNS}, {COUNT_COLUMNS}
            FROM (SELECT * FROM vector_stores p WHERE p.owner = $1 {bounds} ORDER BY {order} LIMIT $4) v
            LEFT JOIN vector_store_files s ON s.vector_store_id = v.id
            GROUP BY {STORE_COLUMNS}
            ORDER BY {outer}"
        ))
    }

    /// One page of a vector store's files (owner `$1`, store `$2`; status `$3` and batch `$4`
    /// unless NULL; cursors `$5` after, `$6` before; `$7` rows).
    pub(crate) fn list_files_in_store(&self, page: &Page) -> String {
        let cursor = "SELECT created_at, file_id FROM vector_store_files WHERE vector_store_id = $2 AND file_id = ";
        let (bounds, order) = paging(page, ("s.created_at", "s.file_id"), cursor, (5, 6));
        self.dialect.render(&format!(
            "SELECT {FILE_IN_STORE_COLUMNS} FROM vector_store_files s
            WHERE s.owner = $1 AND s.vector_store_id = $2
                AND (CAST($3 AS text) IS NULL OR s.status = $3)
                AND (CAST($4 AS text) IS NULL OR s.batch_id = $4) {bounds}
            ORDER BY {order} LIMIT $7"
        ))
    }
}

/// Whether a page is read against its order (only `before` given: the rows nearest the cursor
/// come first, and are put back in order afterwards).
pub(crate) fn reversed(page: &Page) -> bool {
    page.before.is_some() && page.after.is_none()
}

/// The cursor conditions (`AND …`; the cursors at parameters `after` and `before`, NULL for
/// none) and the `ORDER BY` of one page over rows keyed by `(created, id)`. `cursor` selects a
/// cursor's key and ends where its id parameter goes: a cursor that names nothing leaves the
/// page empty.
fn paging(page: &Page, (created, id): (&str, &str), cursor: &str, (after, before): (u8, u8)) -> (String, String) {
    let (onward, back) = if page.newest_first { ("<", ">") } else { (">", "<") };
    let bounds = format!(
        "AND (CAST(${after} AS text) IS NULL OR ({created}, {id}) {onward} ({cursor}${after}))
        AND (CAST(${before} AS text) IS NULL OR ({created}, {id}) {back} ({cursor}${before}))"
    );
    let direction = if page.newest_first != reversed(page) { "DESC" } else { "ASC" };
    (bounds, format!("{created} {direction}, {id} {direction}"))
}

/// An insert of `rows` chunks of one file (`$1` store, `$2` file), each row four parameters
/// from `$3`: seq, text, tokens, embedding.
fn insert_chunks(rows: usize) -> String {
    let values: Vec<String> = (0..rows)
        .map(|row| {
            let n = 3 + 4 * row;
            format!("($1, $2, ${}, ${}, ${}, ${})", n, n + 1, n + 2, n + 3)
        })
        .collect();
    format!("INSERT INTO chunks (vector_store_id, file_id, seq, text, tokens, embedding) VALUES {}", values.join(", "))
}

/// The best chunks for a lexical query (`$1`, built by [`super::codec::lexical_query`]) among
/// vector stores in the list `$2` (already checked to be the owner's), restricted to the
/// `[store, file]` pairs `$3` unless NULL; `$4` rows. The score is higher for better matches:
/// FTS5's `bm25()` of the text column, negated, on SQLite, the stores and files kept by an exact
/// rowid filter (a list built once per statement, tested as a plain expression so that FTS5 is
/// not asked to seek each rowid); `ts_rank_cd` with length normalisation 1 (divided by 1 + log of
/// the chunk's length) on PostgreSQL.
fn lexical_search(d: Dialect) -> String {
    let files = format!("CAST($3 AS text) IS NULL OR (c.vector_store_id, c.file_id) IN ({})", d.pairs(3));
    let stores = d.list(2);
    match d {
        Dialect::Sqlite => format!(
            "SELECT chunks_fts.rowid, -bm25(chunks_fts, 1.0, 0.0) AS score FROM chunks_fts
            WHERE chunks_fts MATCH $1
                AND +chunks_fts.rowid IN (SELECT c.id FROM chunks c WHERE c.vector_store_id IN ({stores}) AND ({files}))
            ORDER BY score DESC, chunks_fts.rowid LIMIT $4"
        ),
        Dialect::Postgres => format!(
            "SELECT c.id, CAST(ts_rank_cd(c.lexemes, q, 1) AS double precision) AS score
            FROM chunks c, to_tsquery('english', $1) AS q
            WHERE c.lexemes @@ q AND c.vector_store_id IN ({stores}) AND ({files})
            ORDER BY score DESC, c.id LIMIT $4"
        ),
    }
}

/// SQLite: the best `$2` chunks of the whole FTS5 index for the query `$1`, best first, each with
/// its store and file (read for those rows only). BM25's statistics are the whole index's either
/// way, so a chunk scores the same here as in [`lexical_search`].
const LEXICAL_UNFILTERED: &str = "SELECT h.id, h.score, c.vector_store_id, c.file_id FROM (
        SELECT chunks_fts.rowid AS id, -bm25(chunks_fts, 1.0, 0.0) AS score FROM chunks_fts
        WHERE chunks_fts MATCH $1
        ORDER BY score DESC, chunks_fts.rowid LIMIT $2) AS h
    JOIN chunks c ON c.id = h.id
    ORDER BY h.score DESC, h.id";
