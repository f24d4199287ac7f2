//! `GET /v1/console/conversations` (conversations with their item and response counts) and
//! `GET /v1/console/conversations/{conversation_id}/items` (its items, as the conversations API
//! lists them for their owner).

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use respgw_protocol::listing::{ListOrder, ListPage, ListQuery};
use respgw_protocol::{ApiError, Item};
use serde_json::{Value, json};

use super::{ConsoleQuery, ConsoleState, list_reply, list_scope, lookup_scope};
use crate::auth::Tenant;
use crate::error::{HttpError, path_rejection};

/// `GET /v1/console/conversations`.
pub async fn list(
    State(state): State<ConsoleState>,
    tenant: Tenant,
    RawQuery(query): RawQuery,
) -> Result<Json<ListPage<Value>>, HttpError> {
    let query = ConsoleQuery::parse(query.as_deref(), &["limit", "after", "tenant"])?;
    let page = query.page()?;
    let Some(scope) = list_scope(&tenant, query.text("tenant")) else { return Ok(Json(list_reply(vec![], false))) };
    let listed = state.store.list_conversations(&scope, &page).await.map_err(ApiError::from)?;
    let rows = listed
        .data
        .into_iter()
        .map(|row| {
            json!({
                "object": "console.conversation_summary",
                "id": row.id,
                "tenant": row.owner,
                "created_at": row.created_at,
                "metadata": row.metadata,
                "items": row.items,
                "responses": row.responses,
            })
        })
        .collect();
    Ok(Json(list_reply(rows, listed.has_more)))
}

/// `GET /v1/console/conversations/{conversation_id}/items` (`limit`, `after`, `order`).
pub async fn items(
    State(state): State<ConsoleState>,
    tenant: Tenant,
    id: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Json<ListPage<Item>>, HttpError> {
    let Path(id) = id.map_err(|_| path_rejection("conversation_id"))?;
    let query = ConsoleQuery::parse(query.as_deref(), &["limit", "after", "order"])?;
    let page = query.page()?;
    let order = match query.one_of("order", &["asc", "desc"])? {
        Some("asc") => ListOrder::Asc,
        _ => ListOrder::Desc,
    };
    let owner = state
        .store
        .conversation_owner(&lookup_scope(&tenant), &id)
        .await
        .map_err(ApiError::from)?
        .ok_or_else(|| ApiError::conversation_not_found(&id, "conversation_id"))?;
    let query = ListQuery { after: page.after, limit: page.limit, order };
    Ok(Json(state.engine.conversations(&owner).items(&id, query, &[]).await?))
}
