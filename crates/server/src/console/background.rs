//! Background runs: `GET /v1/console/background` (runs, newest accepted first),
//! `GET /v1/console/background/{response_id}` (one run with its response as it stands),
//! `GET …/{response_id}/events` (its event log from a sequence number, which the console polls for
//! a live view) and `POST …/{response_id}/cancel` (admins only: the cancel its owner would make).

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use respgw_protocol::ApiError;
use respgw_protocol::listing::ListPage;
use respgw_store_api::background::RunStatus;
use respgw_store_api::console::{RunRow, Scope};
use serde_json::{Value, json};

use super::{ConsoleQuery, ConsoleState, list_reply, list_scope, lookup_scope};
use crate::auth::Tenant;
use crate::error::{HttpError, path_rejection};

/// The statuses a run can be in.
const STATUSES: &[&str] = &["queued", "in_progress", "completed", "failed", "cancelled", "incomplete"];

/// `GET /v1/console/background`.
pub async fn list(
    State(state): State<ConsoleState>,
    tenant: Tenant,
    RawQuery(query): RawQuery,
) -> Result<Json<ListPage<Value>>, HttpError> {
    let query = ConsoleQuery::parse(query.as_deref(), &["limit", "after", "tenant", "status"])?;
    let page = query.page()?;
    let status = query.one_of("status", STATUSES)?.map(RunStatus::parse).transpose().map_err(ApiError::from)?;
    let Some(scope) = list_scope(&tenant, query.text("tenant")) else { return Ok(Json(list_reply(vec![], false))) };
    let listed = state.store.list_runs(&scope, status, &page).await.map_err(ApiError::from)?;
    let rows = listed.data.into_iter().map(|row| run_object(row).map(|(run, _)| run)).collect::<Result<_, _>>()?;
    Ok(Json(list_reply(rows, listed.has_more)))
}

/// A run as the console shows it, and its response object as it stands.
fn run_object(row: RunRow) -> Result<(Value, Value), ApiError> {
    let response: Value = serde_json::from_str(&row.body)
        .map_err(|e| ApiError::internal(format!("The background response {} is unreadable: {e}", row.id)))?;
    let run = json!({
        "object": "console.background_run",
        "id": row.id,
        "tenant": row.tenant,
        "status": row.status.as_str(),
        "model": response.get("model"),
        "created_at": response.get("created_at"),
        "ended_at": row.ended_at_ms.map(|ms| ms.div_euclid(1000)),
        "events": row.events,
    });
    Ok((run, response))
}

/// The run `id` in the caller's scope; 404 when there is none.
async fn find(state: &ConsoleState, scope: &Scope, id: &str) -> Result<RunRow, ApiError> {
    state.store.run_row(scope, id).await?.ok_or_else(|| ApiError::response_not_found(id))
}

/// `GET /v1/console/background/{response_id}`.
pub async fn detail(
    State(state): State<ConsoleState>,
    tenant: Tenant,
    id: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, HttpError> {
    let Path(id) = id.map_err(|_| path_rejection("response_id"))?;
    ConsoleQuery::parse(query.as_deref(), &[])?;
    let (mut run, response) = run_object(find(&state, &lookup_scope(&tenant), &id).await?)?;
    run["response"] = response;
    Ok(Json(run))
}

/// `GET /v1/console/background/{response_id}/events?after=<sequence_number>&limit=`: the logged
/// events after `after` (from the first without it); `ended` once the last event of an ended
/// run is on this page.
pub async fn events(
    State(state): State<ConsoleState>,
    tenant: Tenant,
    id: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, HttpError> {
    let Path(id) = id.map_err(|_| path_rejection("response_id"))?;
    let query = ConsoleQuery::parse(query.as_deref(), &["after", "limit"])?;
    let after = query.integer("after", 0..=i64::MAX, "a sequence number (an integer from 0)")?;
    let limit = query.page()?.limit;
    // The run first: when it has ended, its whole log is already written.
    let run = find(&state, &lookup_scope(&tenant), &id).await?;
    let mut events =
        state.background.events_after(&id, after.map(|n| n as u64), limit + 1).await.map_err(ApiError::from)?;
    let has_more = events.len() > limit;
    events.truncate(limit);
    let data = events
        .into_iter()
        .map(|event| {
            let body: Value = serde_json::from_str(&event.data)
                .map_err(|e| ApiError::internal(format!("An event of background response {id} is unreadable: {e}")))?;
            Ok(json!({"sequence_number": event.seq, "type": event.kind, "event": body}))
        })
        .collect::<Result<Vec<Value>, ApiError>>()?;
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "has_more": has_more,
        "ended": run.status.is_terminal() && !has_more,
    })))
}

/// `POST /v1/console/background/{response_id}/cancel`: admins only (403 `permission_denied`
/// otherwise); the run is cancelled exactly as its owner's `POST /v1/responses/{id}/cancel`
/// would, and the reply is the same response object.
pub async fn cancel(
    State(state): State<ConsoleState>,
    tenant: Tenant,
    id: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, HttpError> {
    let Path(id) = id.map_err(|_| path_rejection("response_id"))?;
    ConsoleQuery::parse(query.as_deref(), &[])?;
    if !tenant.is_admin() {
        return Err(ApiError::permission_denied(
            "Only an admin tenant may cancel background responses from the console.",
        )
        .into());
    }
    let run = find(&state, &Scope::All, &id).await?;
    Ok(Json(state.engine.cancel_background(&run.tenant, &id).await?))
}
