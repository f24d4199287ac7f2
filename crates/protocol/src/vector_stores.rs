//! The vector-store API's wire types: the bodies of `/v1/vector_stores` and of its files, file
//! batches and search, with their checks (errors name the field: `file_ids[2]`,
//! `chunking_strategy.static.chunk_overlap_tokens`, `attributes.year`), and the objects and pages
//! clients get back, as the official `openai` SDK types them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::ApiError;
use crate::error::{describe_json_syntax, json_kind};
use crate::filters::Filter;
use crate::request::check_metadata;

/// Most files one call may add (a create's `file_ids`, a batch).
pub const MAX_FILES_PER_CALL: usize = 500;
/// Most queries in one search.
pub const MAX_QUERIES: usize = 10;
/// Most results a search returns (`max_num_results`).
pub const MAX_NUM_RESULTS: usize = 50;
/// `max_num_results` when none is given.
pub const DEFAULT_NUM_RESULTS: usize = 10;
/// Longest vector-store name and description, in characters.
const MAX_NAME_CHARS: usize = 256;
const MAX_DESCRIPTION_CHARS: usize = 512;

/// How a file is cut into chunks: tokens per chunk and tokens shared by neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkingStrategy {
    pub max_chunk_size_tokens: u32,
    pub chunk_overlap_tokens: u32,
}

impl ChunkingStrategy {
    /// `auto`: OpenAI's default, 800 tokens with 400 shared.
    pub const AUTO: ChunkingStrategy = ChunkingStrategy { max_chunk_size_tokens: 800, chunk_overlap_tokens: 400 };

    /// Parse `{"type":"auto"}` or `{"type":"static","static":{"max_chunk_size_tokens":100..=4096,
    /// "chunk_overlap_tokens":0..=half of it}}` at `param`.
    pub fn parse(value: &Value, param: &str) -> Result<Self, ApiError> {
        let Some(object) = value.as_object() else {
            return Err(ApiError::invalid(param, format!("'{param}' must be an object, got {}.", json_kind(value))));
        };
        match object.get("type").and_then(Value::as_str) {
            Some("auto") => Ok(Self::AUTO),
            Some("static") => {
                let inner_param = format!("{param}.static");
                let Some(inner) = object.get("static").and_then(Value::as_object) else {
                    return Err(ApiError::invalid(
                        &inner_param,
                        format!(
                            "'{inner_param}' must be an object with max_chunk_size_tokens and chunk_overlap_tokens."
                        ),
                    ));
                };
                let int = |key: &str| {
                    let field = format!("{inner_param}.{key}");
                    inner
                        .get(key)
                        .and_then(Value::as_u64)
                        .ok_or_else(|| ApiError::invalid(&field, format!("'{field}' must be a non-negative integer.")))
                };
                let size = int("max_chunk_size_tokens")?;
                let overlap = int("chunk_overlap_tokens")?;
                if !(100..=4096).contains(&size) {
                    let field = format!("{inner_param}.max_chunk_size_tokens");
                    return Err(ApiError::invalid(&field, format!("'{field}' must be from 100 to 4096; got {size}.")));
                }
                if overlap > size / 2 {
                    let field = format!("{inner_param}.chunk_overlap_tokens");
                    return Err(ApiError::invalid(
                        &field,
                        format!(
                            "'{field}' must be at most half of max_chunk_size_tokens ({}); got {overlap}.",
                            size / 2
                        ),
                    ));
                }
                // Both fit in u32: checked against 4096 above.
                Ok(ChunkingStrategy { max_chunk_size_tokens: size as u32, chunk_overlap_tokens: overlap as u32 })
            }
            _ => {
                let field = format!("{param}.type");
                Err(ApiError::invalid(&field, format!("'{field}' must be 'auto' or 'static'.")))
            }
        }
    }

    /// The strategy as a file reports it: `{"type":"static","static":{…}}`.
    pub fn to_json(self) -> Value {
        json!({"type":"static","static":{
            "max_chunk_size_tokens": self.max_chunk_size_tokens,
            "chunk_overlap_tokens": self.chunk_overlap_tokens,
        }})
    }

    fn parse_optional(value: Option<&Value>, param: &str) -> Result<Self, ApiError> {
        match value {
            None | Some(Value::Null) => Ok(Self::AUTO),
            Some(v) => Self::parse(v, param),
        }
    }
}

/// `expires_after` of a vector store: `{"anchor":"last_active_at","days":1..=365}`, kept as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpiresAfter {
    pub days: u32,
}

impl ExpiresAfter {
    pub fn parse(value: &Value, param: &str) -> Result<Self, ApiError> {
        if value.get("anchor").and_then(Value::as_str) != Some("last_active_at") {
            let field = format!("{param}.anchor");
            return Err(ApiError::invalid(&field, format!("'{field}' must be 'last_active_at'.")));
        }
        match value.get("days").and_then(Value::as_u64) {
            Some(days @ 1..=365) => Ok(ExpiresAfter { days: days as u32 }),
            _ => {
                let field = format!("{param}.days");
                Err(ApiError::invalid(&field, format!("'{field}' must be an integer from 1 to 365.")))
            }
        }
    }

    pub fn to_json(self) -> Value {
        json!({"anchor":"last_active_at","days":self.days})
    }

    /// Seconds after `last_active_at` the store expires.
    pub fn seconds(self) -> i64 {
        i64::from(self.days) * 86_400
    }
}

/// Check a file's `attributes` at `param`: an object of at most 16 keys of at most 64
/// characters, each value a string of at most 512 characters, a number or a boolean. `null` is
/// an empty object.
pub fn check_attributes(value: Option<&Value>, param: &str) -> Result<Value, ApiError> {
    let object = match value {
        None | Some(Value::Null) => return Ok(Value::Object(Map::new())),
        Some(Value::Object(object)) => object,
        Some(other) => {
            return Err(ApiError::invalid(param, format!("'{param}' must be an object, got {}.", json_kind(other))));
        }
    };
    if object.len() > 16 {
        return Err(ApiError::invalid(param, format!("'{param}' may hold at most 16 keys; got {}.", object.len())));
    }
    for (key, value) in object {
        let field = format!("{param}.{key}");
        if key.chars().count() > 64 {
            return Err(ApiError::invalid(&field, format!("{param} keys must be at most 64 characters.")));
        }
        match value {
            Value::String(s) if s.chars().count() > 512 => {
                return Err(ApiError::invalid(&field, format!("'{field}': strings must be at most 512 characters.")));
            }
            Value::String(_) | Value::Number(_) | Value::Bool(_) => {}
            other => {
                return Err(ApiError::invalid(
                    &field,
                    format!("'{field}' must be a string, a number or a boolean, got {}.", json_kind(other)),
                ));
            }
        }
    }
    Ok(Value::Object(object.clone()))
}

/// A file to add: its id, attributes and chunking.
#[derive(Debug, Clone, PartialEq)]
pub struct FileToAdd {
    pub file_id: String,
    /// Checked by [`check_attributes`].
    pub attributes: Value,
    pub chunking_strategy: ChunkingStrategy,
}

/// The body of `POST /v1/vector_stores`, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateVectorStore {
    pub name: Option<String>,
    pub metadata: Map<String, Value>,
    pub expires_after: Option<ExpiresAfter>,
    pub files: Vec<FileToAdd>,
}

#[derive(Deserialize)]
struct CreateBody {
    name: Option<String>,
    description: Option<String>,
    #[serde(default)]
    file_ids: Option<Vec<Value>>,
    metadata: Option<Map<String, Value>>,
    chunking_strategy: Option<Value>,
    expires_after: Option<Value>,
}

impl CreateVectorStore {
    /// Parse and check a create body (every field optional; `description` is checked, not kept).
    pub fn from_slice(bytes: &[u8]) -> Result<Self, ApiError> {
        let body: CreateBody =
            if bytes.iter().all(u8::is_ascii_whitespace) { parse_object(b"{}")? } else { parse_object(bytes)? };
        check_name(body.name.as_deref(), "name", MAX_NAME_CHARS)?;
        check_name(body.description.as_deref(), "description", MAX_DESCRIPTION_CHARS)?;
        let metadata = body.metadata.unwrap_or_default();
        check_metadata(&metadata)?;
        let chunking = ChunkingStrategy::parse_optional(body.chunking_strategy.as_ref(), "chunking_strategy")?;
        let file_ids = file_ids(body.file_ids.unwrap_or_default(), "file_ids", false)?;
        let files = file_ids
            .into_iter()
            .map(|file_id| FileToAdd { file_id, attributes: Value::Object(Map::new()), chunking_strategy: chunking })
            .collect();
        let expires_after = match body.expires_after {
            None | Some(Value::Null) => None,
            Some(v) => Some(ExpiresAfter::parse(&v, "expires_after")?),
        };
        Ok(CreateVectorStore { name: body.name, metadata, expires_after, files })
    }
}

/// The body of `POST /v1/vector_stores/{id}`, checked: each field given replaces the old one;
/// `expires_after: null` removes the expiry.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateVectorStore {
    pub name: Option<String>,
    pub metadata: Option<Map<String, Value>>,
    pub expires_after: Option<Option<ExpiresAfter>>,
}

impl UpdateVectorStore {
    pub fn from_slice(bytes: &[u8]) -> Result<Self, ApiError> {
        let body: Map<String, Value> = parse_object(bytes)?;
        let name = match body.get("name") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(ApiError::invalid("name", format!("'name' must be a string, got {}.", json_kind(other))));
            }
        };
        check_name(name.as_deref(), "name", MAX_NAME_CHARS)?;
        let metadata = match body.get("metadata") {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => {
                check_metadata(m)?;
                Some(m.clone())
            }
            Some(other) => {
                return Err(ApiError::invalid(
                    "metadata",
                    format!("'metadata' must be an object, got {}.", json_kind(other)),
                ));
            }
        };
        let expires_after = match body.get("expires_after") {
            None => None,
            Some(Value::Null) => Some(None),
            Some(v) => Some(Some(ExpiresAfter::parse(v, "expires_after")?)),
        };
        Ok(UpdateVectorStore { name, metadata, expires_after })
    }
}

/// The body of `POST /v1/vector_stores/{id}/files`, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateVectorStoreFile(pub FileToAdd);

impl CreateVectorStoreFile {
    pub fn from_slice(bytes: &[u8]) -> Result<Self, ApiError> {
        let body: Map<String, Value> = parse_object(bytes)?;
        Ok(CreateVectorStoreFile(file_to_add(&body, "", None, None)?))
    }
}

/// The body of `POST /v1/vector_stores/{id}/file_batches`, checked: `file_ids` (with the
/// shared `attributes` and `chunking_strategy`) or `files` (each with its own), 1 to
/// [`MAX_FILES_PER_CALL`].
#[derive(Debug, Clone, PartialEq)]
pub struct CreateFileBatch {
    pub files: Vec<FileToAdd>,
    /// `true`: given as `files` (entries named `files[i].file_id`), else as `file_ids`.
    pub as_entries: bool,
}

impl CreateFileBatch {
    /// The field a file of the batch is named by, and what follows its index
    /// (`files[2].file_id`, `file_ids[2]`).
    pub fn file_param(&self) -> (&'static str, &'static str) {
        if self.as_entries { ("files", ".file_id") } else { ("file_ids", "") }
    }
}

impl CreateFileBatch {
    pub fn from_slice(bytes: &[u8]) -> Result<Self, ApiError> {
        let body: Map<String, Value> = parse_object(bytes)?;
        let shared_attributes = check_attributes(body.get("attributes"), "attributes")?;
        let shared_chunking = ChunkingStrategy::parse_optional(body.get("chunking_strategy"), "chunking_strategy")?;
        let as_entries = body.contains_key("files");
        let files = match (body.get("file_ids"), body.get("files")) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid("files", "Send either 'file_ids' or 'files', not both."));
            }
            (Some(ids), None) => {
                let Value::Array(ids) = ids else {
                    return Err(ApiError::invalid("file_ids", "'file_ids' must be an array of file ids."));
                };
                file_ids(ids.clone(), "file_ids", true)?
                    .into_iter()
                    .map(|file_id| FileToAdd {
                        file_id,
                        attributes: shared_attributes.clone(),
                        chunking_strategy: shared_chunking,
                    })
                    .collect()
            }
            (None, Some(files)) => {
                let Value::Array(files) = files else {
                    return Err(ApiError::invalid("files", "'files' must be an array of objects with a file_id."));
                };
                check_count(files.len(), "files", true)?;
                let files = files
                    .iter()
                    .enumerate()
                    .map(|(i, file)| {
                        let param = format!("files[{i}]");
                        let Value::Object(file) = file else {
                            return Err(ApiError::invalid(&param, format!("'{param}' must be an object.")));
                        };
                        file_to_add(file, &param, Some(&shared_attributes), Some(shared_chunking))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                check_unique(files.iter().map(|f| f.file_id.as_str()), "files", ".file_id")?;
                files
            }
            (None, None) => {
                return Err(ApiError::invalid("file_ids", "Missing required parameter: 'file_ids' (or 'files').")
                    .with_code("missing_required_parameter"));
            }
        };
        Ok(CreateFileBatch { files, as_entries })
    }
}

/// The body of `POST /v1/vector_stores/{id}/files/{file_id}`: new attributes.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateFileAttributes {
    pub attributes: Value,
}

impl UpdateFileAttributes {
    pub fn from_slice(bytes: &[u8]) -> Result<Self, ApiError> {
        let body: Map<String, Value> = parse_object(bytes)?;
        if !body.contains_key("attributes") {
            return Err(ApiError::invalid("attributes", "Missing required parameter: 'attributes'.")
                .with_code("missing_required_parameter"));
        }
        Ok(UpdateFileAttributes { attributes: check_attributes(body.get("attributes"), "attributes")? })
    }
}

/// The body of `POST /v1/vector_stores/{id}/search`, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchVectorStore {
    /// 1 to [`MAX_QUERIES`] non-blank queries.
    pub queries: Vec<String>,
    pub filters: Option<Filter>,
    /// 1 to [`MAX_NUM_RESULTS`].
    pub max_num_results: usize,
    /// 0 to 1.
    pub score_threshold: Option<f64>,
    /// Accepted as OpenAI's API does; the queries are searched as written (the page's
    /// `search_query` shows them).
    pub rewrite_query: bool,
}

impl SearchVectorStore {
    pub fn from_slice(bytes: &[u8]) -> Result<Self, ApiError> {
        let body: Map<String, Value> = parse_object(bytes)?;
        let queries = match body.get("query") {
            None => {
                return Err(ApiError::invalid("query", "Missing required parameter: 'query'.")
                    .with_code("missing_required_parameter"));
            }
            Some(Value::String(q)) => vec![non_blank_query(q, "query")?],
            Some(Value::Array(qs)) => {
                if qs.is_empty() || qs.len() > MAX_QUERIES {
                    return Err(ApiError::invalid(
                        "query",
                        format!("'query' must hold 1 to {MAX_QUERIES} queries; got {}.", qs.len()),
                    ));
                }
                qs.iter()
                    .enumerate()
                    .map(|(i, q)| {
                        let param = format!("query[{i}]");
                        match q {
                            Value::String(q) => non_blank_query(q, &param),
                            other => Err(ApiError::invalid(
                                &param,
                                format!("'{param}' must be a string, got {}.", json_kind(other)),
                            )),
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            Some(other) => {
                return Err(ApiError::invalid(
                    "query",
                    format!("'query' must be a string or an array of strings, got {}.", json_kind(other)),
                ));
            }
        };
        let filters = match body.get("filters") {
            None | Some(Value::Null) => None,
            Some(f) => Some(Filter::parse(f, "filters")?),
        };
        let max_num_results = match body.get("max_num_results") {
            None | Some(Value::Null) => DEFAULT_NUM_RESULTS,
            Some(v) => match v.as_u64() {
                Some(n @ 1..=50) => n as usize,
                _ => {
                    return Err(ApiError::invalid(
                        "max_num_results",
                        format!("'max_num_results' must be an integer from 1 to {MAX_NUM_RESULTS}."),
                    ));
                }
            },
        };
        let score_threshold = match body.get("ranking_options") {
            None | Some(Value::Null) => None,
            Some(options) => parse_ranking_options(options, "ranking_options")?,
        };
        let rewrite_query = match body.get("rewrite_query") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(ApiError::invalid(
                    "rewrite_query",
                    format!("'rewrite_query' must be a boolean, got {}.", json_kind(other)),
                ));
            }
        };
        Ok(SearchVectorStore { queries, filters, max_num_results, score_threshold, rewrite_query })
    }
}

/// `ranking_options` at `param`: `ranker` one of `none`, `auto`, `default-2024-11-15` (all rank
/// the same here), `score_threshold` from 0 to 1; the threshold, if any.
pub fn parse_ranking_options(value: &Value, param: &str) -> Result<Option<f64>, ApiError> {
    let Some(options) = value.as_object() else {
        return Err(ApiError::invalid(param, format!("'{param}' must be an object, got {}.", json_kind(value))));
    };
    match options.get("ranker") {
        None | Some(Value::Null) => {}
        Some(Value::String(r)) if ["none", "auto", "default-2024-11-15"].contains(&r.as_str()) => {}
        Some(_) => {
            let field = format!("{param}.ranker");
            return Err(ApiError::invalid(
                &field,
                format!("'{field}' must be 'none', 'auto' or 'default-2024-11-15'."),
            ));
        }
    }
    match options.get("score_threshold") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(t) if (0.0..=1.0).contains(&t) => Ok(Some(t)),
            _ => {
                let field = format!("{param}.score_threshold");
                Err(ApiError::invalid(&field, format!("'{field}' must be a number from 0 to 1.")))
            }
        },
    }
}

fn non_blank_query(query: &str, param: &str) -> Result<String, ApiError> {
    if query.trim().is_empty() {
        return Err(ApiError::invalid(param, format!("'{param}' must not be empty.")));
    }
    Ok(query.to_owned())
}

fn parse_object<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let body: Value = serde_json::from_slice(bytes).map_err(|e| describe_json_syntax("request body", &e))?;
    if !body.is_object() {
        return Err(ApiError::invalid_body("The request body must be a JSON object."));
    }
    serde_path_to_error::deserialize(body).map_err(|e| ApiError::from_path_error("", e))
}

fn check_name(value: Option<&str>, param: &str, max: usize) -> Result<(), ApiError> {
    match value {
        Some(v) if v.chars().count() > max => {
            Err(ApiError::invalid(param, format!("'{param}' must be at most {max} characters.")))
        }
        _ => Ok(()),
    }
}

fn check_count(len: usize, param: &str, required: bool) -> Result<(), ApiError> {
    if required && len == 0 {
        return Err(ApiError::invalid(param, format!("'{param}' must name at least one file.")));
    }
    if len > MAX_FILES_PER_CALL {
        return Err(ApiError::invalid(
            param,
            format!("'{param}' may name at most {MAX_FILES_PER_CALL} files; got {len}."),
        ));
    }
    Ok(())
}

/// `file_ids` at `param`: strings, not blank, no repeats.
fn file_ids(ids: Vec<Value>, param: &str, required: bool) -> Result<Vec<String>, ApiError> {
    check_count(ids.len(), param, required)?;
    let ids = ids
        .into_iter()
        .enumerate()
        .map(|(i, id)| match id {
            Value::String(s) if !s.trim().is_empty() => Ok(s),
            other => {
                let field = format!("{param}[{i}]");
                Err(ApiError::invalid(&field, format!("'{field}' must be a file id, got {}.", json_kind(&other))))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    check_unique(ids.iter().map(String::as_str), param, "")?;
    Ok(ids)
}

fn check_unique<'a>(ids: impl Iterator<Item = &'a str>, param: &str, suffix: &str) -> Result<(), ApiError> {
    let mut seen = std::collections::HashSet::new();
    for (i, id) in ids.enumerate() {
        if !seen.insert(id) {
            let field = format!("{param}[{i}]{suffix}");
            return Err(ApiError::invalid(&field, format!("'{field}': file '{id}' is named twice.")));
        }
    }
    Ok(())
}

/// A `{file_id, attributes?, chunking_strategy?}` object at `prefix` (`""` for a whole body).
fn file_to_add(
    object: &Map<String, Value>,
    prefix: &str,
    default_attributes: Option<&Value>,
    default_chunking: Option<ChunkingStrategy>,
) -> Result<FileToAdd, ApiError> {
    let field = |name: &str| if prefix.is_empty() { name.to_owned() } else { format!("{prefix}.{name}") };
    let file_id = match object.get("file_id") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        None => {
            let param = field("file_id");
            return Err(ApiError::invalid(&param, format!("Missing required parameter: '{param}'."))
                .with_code("missing_required_parameter"));
        }
        Some(other) => {
            let param = field("file_id");
            return Err(ApiError::invalid(&param, format!("'{param}' must be a file id, got {}.", json_kind(other))));
        }
    };
    let attributes = match (object.get("attributes"), default_attributes) {
        (None, Some(shared)) => shared.clone(),
        (given, _) => check_attributes(given, &field("attributes"))?,
    };
    let chunking_strategy = match (object.get("chunking_strategy"), default_chunking) {
        (None, Some(shared)) => shared,
        (given, _) => ChunkingStrategy::parse_optional(given, &field("chunking_strategy"))?,
    };
    Ok(FileToAdd { file_id, attributes, chunking_strategy })
}

/// File counts by status, with their total.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FileCounts {
    pub in_progress: u64,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub total: u64,
}

/// A vector store as clients see it (`object: "vector_store"`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VectorStoreObject {
    pub id: String,
    object: &'static str,
    pub created_at: i64,
    /// `""` when the store has none (the SDK types it as a string).
    pub name: String,
    pub usage_bytes: u64,
    pub file_counts: FileCounts,
    /// `expired`, `in_progress` or `completed`.
    pub status: &'static str,
    pub expires_after: Option<Value>,
    pub expires_at: Option<i64>,
    pub last_active_at: i64,
    pub metadata: Value,
}

impl VectorStoreObject {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: String,
        created_at: i64,
        name: Option<String>,
        usage_bytes: u64,
        file_counts: FileCounts,
        status: &'static str,
        (expires_after, expires_at): (Option<Value>, Option<i64>),
        last_active_at: i64,
        metadata: Value,
    ) -> Self {
        VectorStoreObject {
            id,
            object: "vector_store",
            created_at,
            name: name.unwrap_or_default(),
            usage_bytes,
            file_counts,
            status,
            expires_after,
            expires_at,
            last_active_at,
            metadata,
        }
    }
}

/// Why a vector-store file failed (`last_error`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LastError {
    /// `server_error`, `unsupported_file` or `invalid_file`.
    pub code: String,
    pub message: String,
}

/// A file in a vector store as clients see it (`object: "vector_store.file"`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VectorStoreFileObject {
    /// The file's id.
    pub id: String,
    object: &'static str,
    pub usage_bytes: u64,
    pub created_at: i64,
    pub vector_store_id: String,
    /// `in_progress`, `completed`, `cancelled` or `failed`.
    pub status: &'static str,
    pub last_error: Option<LastError>,
    pub chunking_strategy: Value,
    pub attributes: Value,
}

impl VectorStoreFileObject {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: String,
        usage_bytes: u64,
        created_at: i64,
        vector_store_id: String,
        status: &'static str,
        last_error: Option<LastError>,
        chunking_strategy: Value,
        attributes: Value,
    ) -> Self {
        VectorStoreFileObject {
            id,
            object: "vector_store.file",
            usage_bytes,
            created_at,
            vector_store_id,
            status,
            last_error,
            chunking_strategy,
            attributes,
        }
    }
}

/// A file batch as clients see it (`object: "vector_store.files_batch"`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileBatchObject {
    pub id: String,
    object: &'static str,
    pub created_at: i64,
    pub vector_store_id: String,
    /// `in_progress`, `completed`, `cancelled` or `failed`.
    pub status: &'static str,
    pub file_counts: FileCounts,
}

impl FileBatchObject {
    pub fn new(
        id: String,
        created_at: i64,
        vector_store_id: String,
        status: &'static str,
        file_counts: FileCounts,
    ) -> Self {
        FileBatchObject { id, object: "vector_store.files_batch", created_at, vector_store_id, status, file_counts }
    }
}

/// One text part of a search result or of a file's content.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TextContent {
    #[serde(rename = "type")]
    kind: &'static str,
    pub text: String,
}

impl TextContent {
    pub fn new(text: String) -> Self {
        TextContent { kind: "text", text }
    }
}

/// One file a search found, with its best chunks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchResultObject {
    pub file_id: String,
    pub filename: String,
    pub score: f64,
    pub attributes: Value,
    pub content: Vec<TextContent>,
}

/// A page of search results, or of a file's content: the whole answer, in one page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SinglePage<T> {
    object: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    search_query: Option<Vec<String>>,
    pub data: Vec<T>,
    has_more: bool,
    next_page: Option<String>,
}

impl SinglePage<SearchResultObject> {
    /// `vector_store.search_results.page`, naming the queries searched.
    pub fn search_results(queries: Vec<String>, data: Vec<SearchResultObject>) -> Self {
        SinglePage {
            object: "vector_store.search_results.page",
            search_query: Some(queries),
            data,
            has_more: false,
            next_page: None,
        }
    }
}

impl SinglePage<TextContent> {
    /// `vector_store.file_content.page`: a file's chunks' text, in order.
    pub fn file_content(data: Vec<TextContent>) -> Self {
        SinglePage {
            object: "vector_store.file_content.page",
            search_query: None,
            data,
            has_more: false,
            next_page: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param_of(result: Result<impl std::fmt::Debug, ApiError>) -> String {
        let e = result.unwrap_err();
        assert_eq!(e.status, 400, "{e:?}");
        e.param.unwrap_or_default()
    }

    #[test]
    fn chunking_is_auto_or_static_within_bounds() {
        assert_eq!(ChunkingStrategy::parse(&json!({"type":"auto"}), "c").unwrap(), ChunkingStrategy::AUTO);
        let s = json!({"type":"static","static":{"max_chunk_size_tokens":200,"chunk_overlap_tokens":100}});
        assert_eq!(
            ChunkingStrategy::parse(&s, "c").unwrap().to_json(),
            json!({"type":"static","static":{"max_chunk_size_tokens":200,"chunk_overlap_tokens":100}})
        );
        let cases = [
            (json!({"type":"fixed"}), "c.type"),
            (json!("auto"), "c"),
            (json!({"type":"static"}), "c.static"),
            (
                json!({"type":"static","static":{"max_chunk_size_tokens":99,"chunk_overlap_tokens":0}}),
                "c.static.max_chunk_size_tokens",
            ),
            (
                json!({"type":"static","static":{"max_chunk_size_tokens":4097,"chunk_overlap_tokens":0}}),
                "c.static.max_chunk_size_tokens",
            ),
            (
                json!({"type":"static","static":{"max_chunk_size_tokens":200,"chunk_overlap_tokens":101}}),
                "c.static.chunk_overlap_tokens",
            ),
            (
                json!({"type":"static","static":{"max_chunk_size_tokens":200,"chunk_overlap_tokens":-1}}),
                "c.static.chunk_overlap_tokens",
            ),
        ];
        for (value, param) in cases {
            assert_eq!(param_of(ChunkingStrategy::parse(&value, "c")), param, "{value}");
        }
    }

    #[test]
    fn expiry_is_anchored_on_last_activity_for_1_to_365_days() {
        assert_eq!(
            ExpiresAfter::parse(&json!({"anchor":"last_active_at","days":7}), "e").unwrap().seconds(),
            7 * 86_400
        );
        assert_eq!(param_of(ExpiresAfter::parse(&json!({"anchor":"created_at","days":7}), "e")), "e.anchor");
        assert_eq!(param_of(ExpiresAfter::parse(&json!({"anchor":"last_active_at","days":366}), "e")), "e.days");
        assert_eq!(param_of(ExpiresAfter::parse(&json!({"anchor":"last_active_at"}), "e")), "e.days");
    }

    #[test]
    fn attributes_hold_16_short_keys_of_scalars() {
        assert_eq!(check_attributes(None, "a").unwrap(), json!({}));
        assert!(check_attributes(Some(&json!({"year":2024,"draft":false,"team":"x"})), "a").is_ok());
        assert_eq!(param_of(check_attributes(Some(&json!({"k":[1]})), "a")), "a.k");
        assert_eq!(param_of(check_attributes(Some(&json!({"k":"x".repeat(513)})), "a")), "a.k");
        let many: Map<String, Value> = (0..17).map(|i| (format!("k{i}"), json!(1))).collect();
        assert_eq!(param_of(check_attributes(Some(&Value::Object(many)), "a")), "a");
        assert_eq!(param_of(check_attributes(Some(&json!({"k".repeat(65): 1})), "a")), format!("a.{}", "k".repeat(65)));
    }

    #[test]
    fn a_create_names_the_bad_file_id() {
        let c = CreateVectorStore::from_slice(br#"{"name":"n","file_ids":["file-a","file-b"]}"#).unwrap();
        assert_eq!(c.files.len(), 2);
        assert_eq!(c.files[0].chunking_strategy, ChunkingStrategy::AUTO);
        assert!(CreateVectorStore::from_slice(b"").unwrap().files.is_empty());
        assert_eq!(param_of(CreateVectorStore::from_slice(br#"{"file_ids":["file-a",3]}"#)), "file_ids[1]");
        assert_eq!(param_of(CreateVectorStore::from_slice(br#"{"file_ids":["f","f"]}"#)), "file_ids[1]");
        assert_eq!(param_of(CreateVectorStore::from_slice(br#"{"metadata":{"k":1}}"#)), "metadata.k");
        assert_eq!(
            param_of(CreateVectorStore::from_slice(br#"{"expires_after":{"anchor":"last_active_at","days":0}}"#)),
            "expires_after.days"
        );
    }

    #[test]
    fn an_update_removes_the_expiry_with_null() {
        let u = UpdateVectorStore::from_slice(br#"{"expires_after":null}"#).unwrap();
        assert_eq!(u.expires_after, Some(None));
        let u = UpdateVectorStore::from_slice(br#"{"name":"x"}"#).unwrap();
        assert_eq!((u.name.as_deref(), u.expires_after), (Some("x"), None));
    }

    #[test]
    fn a_batch_takes_file_ids_or_files_with_their_own_attributes() {
        let b = CreateFileBatch::from_slice(br#"{"file_ids":["a","b"],"attributes":{"t":"x"}}"#).unwrap();
        assert_eq!(b.files[1].attributes, json!({"t":"x"}));
        let b = CreateFileBatch::from_slice(
            br#"{"files":[{"file_id":"a","attributes":{"n":1}},{"file_id":"b"}],"attributes":{"t":"x"}}"#,
        )
        .unwrap();
        assert_eq!((b.files[0].attributes.clone(), b.files[1].attributes.clone()), (json!({"n":1}), json!({"t":"x"})));
        assert_eq!(param_of(CreateFileBatch::from_slice(br#"{}"#)), "file_ids");
        assert_eq!(param_of(CreateFileBatch::from_slice(br#"{"file_ids":[]}"#)), "file_ids");
        assert_eq!(param_of(CreateFileBatch::from_slice(br#"{"file_ids":["a"],"files":[]}"#)), "files");
        assert_eq!(param_of(CreateFileBatch::from_slice(br#"{"files":[{"attributes":{}}]}"#)), "files[0].file_id");
        assert_eq!(
            param_of(CreateFileBatch::from_slice(br#"{"files":[{"file_id":"a"},{"file_id":"a"}]}"#)),
            "files[1].file_id"
        );
    }

    #[test]
    fn a_search_needs_non_blank_queries_and_results_from_1_to_50() {
        let s = SearchVectorStore::from_slice(
            br#"{"query":["a","b"],"max_num_results":3,"rewrite_query":true,
            "ranking_options":{"ranker":"auto","score_threshold":0.5}}"#,
        )
        .unwrap();
        assert_eq!((s.queries.len(), s.max_num_results, s.score_threshold, s.rewrite_query), (2, 3, Some(0.5), true));
        assert_eq!(SearchVectorStore::from_slice(br#"{"query":"a"}"#).unwrap().max_num_results, DEFAULT_NUM_RESULTS);
        for (body, param) in [
            (r#"{}"#, "query"),
            (r#"{"query":""}"#, "query"),
            (r#"{"query":[]}"#, "query"),
            (r#"{"query":["a"," "]}"#, "query[1]"),
            (r#"{"query":["a",1]}"#, "query[1]"),
            (r#"{"query":"a","max_num_results":0}"#, "max_num_results"),
            (r#"{"query":"a","max_num_results":51}"#, "max_num_results"),
            (r#"{"query":"a","ranking_options":{"score_threshold":2}}"#, "ranking_options.score_threshold"),
            (r#"{"query":"a","ranking_options":{"ranker":"best"}}"#, "ranking_options.ranker"),
            (r#"{"query":"a","rewrite_query":"yes"}"#, "rewrite_query"),
        ] {
            assert_eq!(param_of(SearchVectorStore::from_slice(body.as_bytes())), param, "{body}");
        }
    }

    #[test]
    fn pages_read_as_the_sdk_types_them() {
        let page = SinglePage::search_results(
            vec!["q".into()],
            vec![SearchResultObject {
                file_id: "file-1".into(),
                filename: "a.md".into(),
                score: 0.5,
                attributes: json!({}),
                content: vec![TextContent::new("t".into())],
            }],
        );
        assert_eq!(
            serde_json::to_value(page).unwrap(),
            json!({"object":"vector_store.search_results.page","search_query":["q"],"data":[{"file_id":"file-1",
                "filename":"a.md","score":0.5,"attributes":{},"content":[{"type":"text","text":"t"}]}],
                "has_more":false,"next_page":null})
        );
        let content = SinglePage::file_content(vec![TextContent::new("x".into())]);
        assert_eq!(
            serde_json::to_value(content).unwrap(),
            json!({"object":"vector_store.file_content.page","data":[{"type":"text","text":"x"}],"has_more":false,"next_page":null})
        );
    }
}
