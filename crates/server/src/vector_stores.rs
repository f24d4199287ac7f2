//! The `/v1/vector_stores` routes: stores, their files, file batches, a file's content and
//! search. Handlers stay thin: parse the body ([`respgw_protocol::vector_stores`]) or the query,
//! then hand over to [`respgw_retrieval::vector_stores`] for the request's tenant.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use respgw_protocol::files::PageQuery;
use respgw_protocol::vector_stores::{
    CreateFileBatch, CreateVectorStore, CreateVectorStoreFile, SearchVectorStore, UpdateFileAttributes,
    UpdateVectorStore,
};
use respgw_retrieval::vector_stores::{DEFAULT_PAGE, MAX_PAGE, parse_status_filter};

use crate::auth::Tenant;
use crate::error::{HttpError, path_rejection};
use crate::files::RetrievalState;
use crate::json_body::JsonBody;

type Id = Result<Path<String>, PathRejection>;
type Ids = Result<Path<(String, String)>, PathRejection>;

fn id(path: Id) -> Result<String, HttpError> {
    path.map(|Path(id)| id).map_err(|_| path_rejection("vector_store_id"))
}

fn ids(path: Ids, second: &str) -> Result<(String, String), HttpError> {
    path.map(|Path(ids)| ids).map_err(|_| path_rejection(second))
}

/// `POST /v1/vector_stores`.
pub async fn create(
    State(state): State<RetrievalState>,
    tenant: Tenant,
    JsonBody(body): JsonBody,
) -> Result<Response, HttpError> {
    let request = CreateVectorStore::from_slice(&body)?;
    Ok(Json(state.retrieval.vector_stores(tenant.name()).create(request).await?).into_response())
}

/// `GET /v1/vector_stores`.
pub async fn list(
    State(state): State<RetrievalState>,
    tenant: Tenant,
    RawQuery(query): RawQuery,
) -> Result<Response, HttpError> {
    let (query, _) = PageQuery::parse(query.as_deref(), DEFAULT_PAGE, MAX_PAGE, &[])?;
    Ok(Json(state.retrieval.vector_stores(tenant.name()).list(query).await?).into_response())
}

/// `GET /v1/vector_stores/{vector_store_id}`.
pub async fn retrieve(State(state): State<RetrievalState>, tenant: Tenant, path: Id) -> Result<Response, HttpError> {
    let id = id(path)?;
    Ok(Json(state.retrieval.vector_stores(tenant.name()).retrieve(&id).await?).into_response())
}

/// `POST /v1/vector_stores/{vector_store_id}`.
pub async fn update(
    State(state): State<RetrievalState>,
    tenant: Tenant,
    path: Id,
    JsonBody(body): JsonBody,
) -> Result<Response, HttpError> {
    let id = id(path)?;
    let request = UpdateVectorStore::from_slice(&body)?;
    Ok(Json(state.retrieval.vector_stores(tenant.name()).update(&id, request).await?).into_response())
}

/// `DELETE /v1/vector_stores/{vector_store_id}`.
pub async fn delete(State(state): State<RetrievalState>, tenant: Tenant, path: Id) -> Result<Response, HttpError> {
    let id = id(path)?;
    Ok(Json(state.retrieval.vector_stores(tenant.name()).delete(&id).await?).into_response())
}

/// `POST /v1/vector_stores/{vector_store_id}/search`.
pub async fn search(
    State(state): State<RetrievalState>,
    tenant: Tenant,
    path: Id,
    JsonBody(body): JsonBody,
) -> Result<Response, HttpError> {
    let id = id(path)?;
    let request = SearchVectorStore::from_slice(&body)?;
    Ok(Json(state.retrieval.vector_stores(tenant.name()).search(&id, request).await?).into_response())
}

/// `POST /v1/vector_stores/{vector_store_id}/files`.
pub async fn add_file(
    State(state): State<RetrievalState>,
    tenant: Tenant,
    path: Id,
    JsonBody(body): JsonBody,
) -> Result<Response, HttpError> {
    let id = id(path)?;
    let request = CreateVectorStoreFile::from_slice(&body)?;
    Ok(Json(state.retrieval.vector_stores(tenant.name()).add_file(&id, request).await?).into_response())
}

/// `GET /v1/vector_stores/{vector_store_id}/files`: `filter` by status, paged.
pub async fn list_files(
    State(state): State<RetrievalState>,
    tenant: Tenant,
    path: Id,
    RawQuery(query): RawQuery,
) -> Result<Response, HttpError> {
    let id = id(path)?;
    let (query, filters) = PageQuery::parse(query.as_deref(), DEFAULT_PAGE, MAX_PAGE, &["filter"])?;
    let status = parse_status_filter(filters.first().and_then(Option::as_deref))?;
    Ok(Json(state.retrieval.vector_stores(tenant.name()).files(&id, query, status).await?).into_response())
}

/// `GET /v1/vector_stores/{vector_store_id}/files/{file_id}`.
pub async fn retrieve_file(
    State(state): State<RetrievalState>,
    tenant: Tenant,
    path: Ids,
) -> Result<Response, HttpError> {
    let (id, file_id) = ids(path, "file_id")?;
    Ok(Json(state.retrieval.vector_stores(tenant.name()).file(&id, &file_id).await?).into_response())
}

/// `POST /v1/vector_stores/{vector_store_id}/files/{file_id}`: new attributes.
pub async fn update_file(
    State(state): State<RetrievalState>,
    tenant: Tenant,
    path: Ids,
    JsonBody(body): JsonBody,
) -> Result<Response, HttpError> {
    let (id, file_id) = ids(path, "file_id")?;
    let request = UpdateFileAttributes::from_slice(&body)?;
    Ok(Json(state.retrieval.vector_stores(tenant.name()).update_file(&id, &file_id, request).await?).into_response())
}

/// `DELETE /v1/vector_stores/{vector_store_id}/files/{file_id}`.
pub async fn remove_file(
    State(state): State<RetrievalState>,
    tenant: Tenant,
    path: Ids,
) -> Result<Response, HttpError> {
    let (id, file_id) = ids(path, "file_id")?;
    Ok(Json(state.retrieval.vector_stores(tenant.name()).remove_file(&id, &file_id).await?).into_response())
}

/// `GET /v1/vector_stores/{vector_store_id}/files/{file_id}/content`.
pub async fn file_content(
    State(state): State<RetrievalState>,
    tenant: Tenant,
    path: Ids,
) -> Result<Response, HttpError> {
    let (id, file_id) = ids(path, "file_id")?;
    Ok(Json(state.retrieval.vector_stores(tenant.name()).file_content(&id, &file_id).await?).into_response())
}

/// `POST /v1/vector_stores/{vector_store_id}/file_batches`.
pub async fn create_batch(
    State(state): State<RetrievalState>,
    tenant: Tenant,
    path: Id,
    JsonBody(body): JsonBody,
) -> Result<Response, HttpError> {
    let id = id(path)?;
    let request = CreateFileBatch::from_slice(&body)?;
    Ok(Json(state.retrieval.vector_stores(tenant.name()).create_batch(&id, request).await?).into_response())
}

/// `GET /v1/vector_stores/{vector_store_id}/file_batches/{batch_id}`.
pub async fn retrieve_batch(
    State(state): State<RetrievalState>,
    tenant: Tenant,
    path: Ids,
) -> Result<Response, HttpError> {
    let (id, batch_id) = ids(path, "batch_id")?;
    Ok(Json(state.retrieval.vector_stores(tenant.name()).batch(&id, &batch_id).await?).into_response())
}

/// `POST /v1/vector_stores/{vector_store_id}/file_batches/{batch_id}/cancel`.
pub async fn cancel_batch(
    State(state): State<RetrievalState>,
    tenant: Tenant,
    path: Ids,
) -> Result<Response, HttpError> {
    let (id, batch_id) = ids(path, "batch_id")?;
    Ok(Json(state.retrieval.vector_stores(tenant.name()).cancel_batch(&id, &batch_id).await?).into_response())
}

/// `GET /v1/vector_stores/{vector_store_id}/file_batches/{batch_id}/files`: `filter` by status, paged.
pub async fn batch_files(
    State(state): State<RetrievalState>,
    tenant: Tenant,
    path: Ids,
    RawQuery(query): RawQuery,
) -> Result<Response, HttpError> {
    let (id, batch_id) = ids(path, "batch_id")?;
    let (query, filters) = PageQuery::parse(query.as_deref(), DEFAULT_PAGE, MAX_PAGE, &["filter"])?;
    let status = parse_status_filter(filters.first().and_then(Option::as_deref))?;
    let page = state.retrieval.vector_stores(tenant.name()).batch_files(&id, &batch_id, query, status).await?;
    Ok(Json(page).into_response())
}
