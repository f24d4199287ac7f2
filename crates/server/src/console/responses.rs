//! `GET /v1/console/responses` (stored responses, filtered, newest first) and
//! `GET /v1/console/responses/{response_id}` (one response with its own input items, its rounds
//! and its chain). Only stored responses are listed; background runs have their own list
//! (`background.rs`).

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use respgw_protocol::ApiError;
use respgw_protocol::listing::{ListOrder, ListPage, ListQuery};
use respgw_store_api::console::{ResponseFilter, ResponseRow};
use serde_json::{Value, json};

use super::{ConsoleQuery, ConsoleState, invalid, list_reply, list_scope, lookup_scope};
use crate::auth::Tenant;
use crate::error::{HttpError, path_rejection};

/// The statuses a response can have.
const STATUSES: &[&str] = &["completed", "incomplete", "failed", "cancelled", "queued", "in_progress"];

/// Characters of a preview.
const PREVIEW_CHARS: usize = 160;

/// Longest `q`, in characters.
const MAX_QUERY_CHARS: usize = 200;

/// The filters of the list, checked.
fn filter(query: &ConsoleQuery) -> Result<ResponseFilter, ApiError> {
    let time = |name| query.integer(name, 0..=i64::MAX, "unix seconds (an integer from 0)");
    let (since, until) = (time("since")?, time("until")?);
    if let (Some(since), Some(until)) = (since, until)
        && since > until
    {
        return Err(invalid("since", format!("'since' ({since}) is after 'until' ({until}).")));
    }
    let text = query.text("q");
    if let Some(text) = text
        && text.chars().count() > MAX_QUERY_CHARS
    {
        return Err(invalid("q", format!("'q' may be at most {MAX_QUERY_CHARS} characters.")));
    }
    Ok(ResponseFilter {
        model: query.text("model").map(str::to_owned),
        status: query.one_of("status", STATUSES)?.map(str::to_owned),
        since,
        until,
        text: text.map(str::to_owned),
    })
}

/// `GET /v1/console/responses`.
pub async fn list(
    State(state): State<ConsoleState>,
    tenant: Tenant,
    RawQuery(query): RawQuery,
) -> Result<Json<ListPage<Value>>, HttpError> {
    let query =
        ConsoleQuery::parse(query.as_deref(), &["limit", "after", "tenant", "model", "status", "since", "until", "q"])?;
    let (page, filter) = (query.page()?, filter(&query)?);
    let Some(scope) = list_scope(&tenant, query.text("tenant")) else { return Ok(Json(list_reply(vec![], false))) };
    let listed = state.store.list_responses(&scope, &filter, &page).await.map_err(ApiError::from)?;
    Ok(Json(list_reply(listed.data.into_iter().map(summary).collect(), listed.has_more)))
}

/// The first [`PREVIEW_CHARS`] characters of `text`.
fn preview(text: &str) -> String {
    text.chars().take(PREVIEW_CHARS).collect()
}

/// The text of a response object's output messages.
fn output_text(response: &Value) -> String {
    let items = response.get("output").and_then(Value::as_array).into_iter().flatten();
    let parts = items
        .filter(|item| item.get("type").and_then(Value::as_str) == Some("message"))
        .filter_map(|item| item.get("content").and_then(Value::as_array))
        .flatten();
    let texts: Vec<&str> = parts.filter_map(|part| part.get("text").and_then(Value::as_str)).collect();
    texts.join("\n")
}

/// Output items that are tool calls (`function_call`, `web_search_call`, `mcp_call`, …).
fn tool_calls(response: &Value) -> usize {
    let items = response.get("output").and_then(Value::as_array).into_iter().flatten();
    items.filter(|item| item.get("type").and_then(Value::as_str).is_some_and(|t| t.ends_with("_call"))).count()
}

/// A list row.
fn summary(row: ResponseRow) -> Value {
    let usage = row.response.get("usage").filter(|u| u.is_object()).map(|u| {
        json!({
            "input_tokens": u.get("input_tokens"),
            "output_tokens": u.get("output_tokens"),
            "total_tokens": u.get("total_tokens"),
        })
    });
    let duration_ms: Option<u64> =
        (!row.rounds.is_empty()).then(|| row.rounds.iter().map(|r| r.duration_ms + r.tools_ms).sum());
    json!({
        "object": "console.response_summary",
        "id": row.id,
        "tenant": row.owner,
        "model": row.model,
        "status": row.status,
        "created_at": row.created_at,
        "previous_response_id": row.previous_response_id,
        "conversation_id": row.conversation_id,
        "background": row.response.get("background").and_then(Value::as_bool).unwrap_or(false),
        "input_preview": preview(&row.input_text),
        "output_preview": preview(&output_text(&row.response)),
        "tool_calls": tool_calls(&row.response),
        "usage": usage,
        "duration_ms": duration_ms,
    })
}

/// `GET /v1/console/responses/{response_id}`.
pub async fn detail(
    State(state): State<ConsoleState>,
    tenant: Tenant,
    id: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, HttpError> {
    let Path(id) = id.map_err(|_| path_rejection("response_id"))?;
    ConsoleQuery::parse(query.as_deref(), &[])?;
    let facts = state
        .store
        .response_facts(&lookup_scope(&tenant), &id)
        .await
        .map_err(ApiError::from)?
        .ok_or_else(|| ApiError::response_not_found(&id))?;
    let stored = state.engine.stored(&facts.owner);
    let response = stored.retrieve(&id).await?;
    let mut input_items = Vec::new();
    let mut after = None;
    loop {
        let query = ListQuery { after, limit: 100, order: ListOrder::Asc };
        let page = stored.input_items(&id, query).await?;
        after = page.last_id.clone();
        input_items.extend(page.data);
        if !page.has_more {
            break;
        }
    }
    Ok(Json(json!({
        "object": "console.response",
        "tenant": facts.owner,
        "response": response,
        "input_items": input_items,
        "inherited_items": facts.inherited_items,
        "rounds": facts.rounds,
        "chain": {"previous": facts.previous, "next": facts.next},
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_text_and_tool_calls_come_from_the_output_items() {
        let response = json!({"output": [
            {"type": "function_call", "name": "f"},
            {"type": "web_search_call"},
            {"type": "message", "content": [{"type": "output_text", "text": "It is"}, {"type": "output_text", "text": "sunny"}]},
            {"type": "reasoning", "summary": []}
        ]});
        assert_eq!(output_text(&response), "It is\nsunny");
        assert_eq!(tool_calls(&response), 2);
        assert_eq!(preview(&"é".repeat(500)).chars().count(), PREVIEW_CHARS);
    }
}
