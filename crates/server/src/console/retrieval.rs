//! Files and vector stores: `GET /v1/console/files`, `GET /v1/console/vector_stores` (the API's
//! objects with the owning `tenant`) and `GET /v1/console/vector_stores/{vector_store_id}/files`
//! (the store's files, as its owner lists them).

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use respgw_protocol::ApiError;
use respgw_protocol::files::PageQuery;
use respgw_protocol::listing::ListPage;
use respgw_protocol::vector_stores::VectorStoreFileObject;
use respgw_retrieval::files::{is_expired, object};
use respgw_retrieval::vector_stores::store_object;
use serde::Serialize;
use serde_json::Value;

use super::{ConsoleQuery, ConsoleState, list_reply, list_scope, lookup_scope, not_found, unix_now};
use crate::auth::Tenant;
use crate::error::{HttpError, path_rejection};

/// An API object with the tenant that owns it added.
fn with_tenant(object: impl Serialize, tenant: &str) -> Result<Value, ApiError> {
    let mut value =
        serde_json::to_value(object).map_err(|e| ApiError::internal(format!("cannot show an object: {e}")))?;
    value["tenant"] = Value::from(tenant);
    Ok(value)
}

/// `GET /v1/console/files` (`purpose` filters); expired files are not shown, as in the Files API.
pub async fn files(
    State(state): State<ConsoleState>,
    tenant: Tenant,
    RawQuery(query): RawQuery,
) -> Result<Json<ListPage<Value>>, HttpError> {
    let query = ConsoleQuery::parse(query.as_deref(), &["limit", "after", "tenant", "purpose"])?;
    let page = query.page()?;
    let purpose = query.one_of("purpose", &["assistants", "user_data"])?;
    let Some(scope) = list_scope(&tenant, query.text("tenant")) else { return Ok(Json(list_reply(vec![], false))) };
    let listed = state.store.list_files(&scope, purpose, &page).await.map_err(ApiError::from)?;
    let now = unix_now();
    let rows = listed
        .data
        .into_iter()
        .filter(|file| !is_expired(file, now))
        .map(|file| {
            let owner = file.owner.clone();
            with_tenant(object(file), &owner)
        })
        .collect::<Result<_, _>>()?;
    Ok(Json(list_reply(rows, listed.has_more)))
}

/// `GET /v1/console/vector_stores`.
pub async fn vector_stores(
    State(state): State<ConsoleState>,
    tenant: Tenant,
    RawQuery(query): RawQuery,
) -> Result<Json<ListPage<Value>>, HttpError> {
    let query = ConsoleQuery::parse(query.as_deref(), &["limit", "after", "tenant"])?;
    let page = query.page()?;
    let Some(scope) = list_scope(&tenant, query.text("tenant")) else { return Ok(Json(list_reply(vec![], false))) };
    let listed = state.store.list_vector_stores(&scope, &page).await.map_err(ApiError::from)?;
    let now = unix_now();
    let rows = listed
        .data
        .into_iter()
        .map(|view| {
            let owner = view.record.owner.clone();
            with_tenant(store_object(view, now), &owner)
        })
        .collect::<Result<_, _>>()?;
    Ok(Json(list_reply(rows, listed.has_more)))
}

/// `GET /v1/console/vector_stores/{vector_store_id}/files`.
pub async fn vector_store_files(
    State(state): State<ConsoleState>,
    tenant: Tenant,
    id: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Json<ListPage<VectorStoreFileObject>>, HttpError> {
    let Path(id) = id.map_err(|_| path_rejection("vector_store_id"))?;
    let query = ConsoleQuery::parse(query.as_deref(), &["limit", "after"])?;
    let page = query.page()?;
    let owner = state
        .store
        .vector_store_owner(&lookup_scope(&tenant), &id)
        .await
        .map_err(ApiError::from)?
        .ok_or_else(|| not_found("vector store", &id, "vector_store_id"))?;
    let page = PageQuery { after: page.after, before: None, limit: page.limit, newest_first: true };
    Ok(Json(state.retrieval.vector_stores(&owner).files(&id, page, None).await?))
}
