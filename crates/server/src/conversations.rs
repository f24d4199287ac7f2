//! The `/v1/conversations` routes: create, retrieve, update and delete a conversation; list, add,
//! retrieve and delete its items.
//!
//! Handlers stay thin: parse and check the body ([`respgw_protocol::conversations`]) or the
//! query ([`respgw_protocol::listing`]), then hand over to [`Engine::conversations`] for the
//! request's tenant, which sees its own conversations only.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use respgw_engine::Engine;
use respgw_protocol::conversations::{AddItems, CreateConversation, UpdateConversation};
use respgw_protocol::listing::{ListQuery, ListQueryParams};

use crate::auth::Tenant;
use crate::error::{HttpError, path_rejection};
use crate::json_body::JsonBody;

/// `POST /v1/conversations`.
pub async fn create(
    State(engine): State<Arc<Engine>>,
    tenant: Tenant,
    JsonBody(body): JsonBody,
) -> Result<Response, HttpError> {
    let request = CreateConversation::from_slice(&body, &engine.limits().request)?;
    Ok(Json(engine.conversations(tenant.name()).create(request).await?).into_response())
}

/// `GET /v1/conversations/{conversation_id}`.
pub async fn retrieve(
    State(engine): State<Arc<Engine>>,
    tenant: Tenant,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, HttpError> {
    let Path(id) = id.map_err(|_| path_rejection("conversation_id"))?;
    Ok(Json(engine.conversations(tenant.name()).retrieve(&id).await?).into_response())
}

/// `POST /v1/conversations/{conversation_id}`: replace its metadata.
pub async fn update(
    State(engine): State<Arc<Engine>>,
    tenant: Tenant,
    id: Result<Path<String>, PathRejection>,
    JsonBody(body): JsonBody,
) -> Result<Response, HttpError> {
    let Path(id) = id.map_err(|_| path_rejection("conversation_id"))?;
    let request = UpdateConversation::from_slice(&body)?;
    Ok(Json(engine.conversations(tenant.name()).update(&id, request).await?).into_response())
}

/// `DELETE /v1/conversations/{conversation_id}`.
pub async fn delete(
    State(engine): State<Arc<Engine>>,
    tenant: Tenant,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, HttpError> {
    let Path(id) = id.map_err(|_| path_rejection("conversation_id"))?;
    Ok(Json(engine.conversations(tenant.name()).delete(&id).await?).into_response())
}

/// `GET /v1/conversations/{conversation_id}/items`.
pub async fn list_items(
    State(engine): State<Arc<Engine>>,
    tenant: Tenant,
    id: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Response, HttpError> {
    let Path(id) = id.map_err(|_| path_rejection("conversation_id"))?;
    let (params, include) = ListQueryParams::with_include(query.as_deref())?;
    let query = ListQuery::parse(params)?;
    Ok(Json(engine.conversations(tenant.name()).items(&id, query, &include).await?).into_response())
}

/// `POST /v1/conversations/{conversation_id}/items`.
pub async fn add_items(
    State(engine): State<Arc<Engine>>,
    tenant: Tenant,
    id: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody,
) -> Result<Response, HttpError> {
    let Path(id) = id.map_err(|_| path_rejection("conversation_id"))?;
    let (_, include) = ListQueryParams::with_include(query.as_deref())?;
    let request = AddItems::from_slice(&body, &engine.limits().request)?;
    Ok(Json(engine.conversations(tenant.name()).add_items(&id, request, &include).await?).into_response())
}

/// `GET /v1/conversations/{conversation_id}/items/{item_id}`.
pub async fn retrieve_item(
    State(engine): State<Arc<Engine>>,
    tenant: Tenant,
    ids: Result<Path<(String, String)>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Response, HttpError> {
    let Path((id, item_id)) = ids.map_err(|_| path_rejection("item_id"))?;
    let (_, include) = ListQueryParams::with_include(query.as_deref())?;
    Ok(Json(engine.conversations(tenant.name()).item(&id, &item_id, &include).await?).into_response())
}

/// `DELETE /v1/conversations/{conversation_id}/items/{item_id}`: the conversation afterwards.
pub async fn delete_item(
    State(engine): State<Arc<Engine>>,
    tenant: Tenant,
    ids: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, HttpError> {
    let Path((id, item_id)) = ids.map_err(|_| path_rejection("item_id"))?;
    Ok(Json(engine.conversations(tenant.name()).delete_item(&id, &item_id).await?).into_response())
}
