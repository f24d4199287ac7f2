//! The `/v1/responses` routes: create (JSON or SSE), retrieve, delete, list input items, and
//! compact a conversation (`POST /v1/responses/compact`, JSON only, nothing stored).
//!
//! Handlers stay thin: parse and validate the body ([`respgw_protocol::request`]) or the query
//! ([`respgw_protocol::listing`]), let the engine prepare (history lookup can still fail with a
//! plain HTTP error), then either run to the outcome (JSON) or let the engine spawn the run and
//! frame its events (SSE). Stored responses are read through the engine too
//! ([`Engine::stored`]). A background response is handed to the engine's background runs
//! instead, and its stream comes from its event log (see [`crate::background`]). Everything is done for the request's
//! [`Tenant`]: the owner of what a response stores, and the only one that reads it back.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use respgw_engine::{BackgroundSettings, Engine, ResumeFrom, RunOutcome};
use respgw_protocol::compaction::CompactRequest;
use respgw_protocol::listing::{ListQuery, ListQueryParams};
use respgw_protocol::{ApiError, CreateResponseRequest};

use crate::auth::{Admission, Tenant};
use crate::background::{BackgroundDrain, BackgroundStream, RetrieveQuery, event_stream_response, retrieve_query};
use crate::error::{HttpError, path_rejection};
use crate::json_body::JsonBody;
use crate::limits::Open;
use crate::request_id::RequestId;
use crate::sse::event_stream;

/// Events buffered between the run and a slow SSE client before the run waits.
const SSE_BUFFER: usize = 64;

/// `POST /v1/responses`.
pub async fn create(
    State(engine): State<Arc<Engine>>,
    tenant: Tenant,
    admission: Admission,
    RequestId(request_id): RequestId,
    drain: Option<Extension<BackgroundDrain>>,
    JsonBody(body): JsonBody,
) -> Result<Response, HttpError> {
    let request =
        CreateResponseRequest::from_slice(&body)?.validate_within(&engine.capabilities(), &engine.limits().request)?;
    let (stream, background) = (request.stream, request.background);
    // Admitted with the stream or background run it opens, before anything is read or sent
    // upstream.
    let slot = match admission.admit((stream || background).then_some(Open::Stream)).await {
        Ok(slot) => slot,
        Err(limited) => return Ok(limited.into_response()),
    };
    let prepared = engine.prepare(tenant.name(), request, vec![("x-request-id", request_id)]).await?;

    if background {
        let Some(runs) = engine.background() else {
            return Err(HttpError(ApiError::invalid(
                "background",
                "Background responses are not enabled on this gateway.",
            )));
        };
        let drain = drain.map(|Extension(drain)| drain);
        let cut = drain.as_ref().map(|drain| drain.cut.clone());
        // The process's drain waits for the run, which holds this until it ends.
        // The run also holds its place among the tenant's open streams and runs.
        let queued = prepared.start_background(runs, (drain, slot)).await?;
        if !stream {
            return Ok(Json(queued).into_response());
        }
        let events = engine.resume_background(tenant.name(), &queued.id, ResumeFrom::Start).await?;
        return Ok(event_stream_response(BackgroundStream {
            events,
            response_id: queued.id,
            after: None,
            keep_alive: runs.keep_alive(),
            cut,
            hold: engine.metrics().sse_stream("/v1/responses"),
        }));
    }

    if !stream {
        return match prepared.run().await {
            RunOutcome::Finished(response) => Ok(Json(response).into_response()),
            RunOutcome::Failed { error, .. } => Err(HttpError(error)),
            // Unreachable: a run without a stream never learns that its client left.
            RunOutcome::ClientGone => Err(HttpError(ApiError::internal("The response was abandoned."))),
        };
    }

    let open_stream = engine.metrics().sse_stream("/v1/responses");
    // Spawned in the request's span: its logs keep the request id, its upstream call is a child span.
    let events = prepared.spawn(SSE_BUFFER);
    let mut response = Body::from_stream(event_stream(events, open_stream, slot)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// `GET /v1/responses/{response_id}`: the response object, or with `stream=true` the events of
/// a background response (after `starting_after`). A resumed stream counts among the tenant's
/// open streams like a streamed create, with the same 429.
pub async fn retrieve(
    State(engine): State<Arc<Engine>>,
    tenant: Tenant,
    admission: Admission,
    drain: Option<Extension<BackgroundDrain>>,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<RetrieveQuery>, QueryRejection>,
) -> Result<Response, HttpError> {
    let Path(id) = id.map_err(|_| path_rejection("response_id"))?;
    let from = retrieve_query(query)?;
    let slot = match admission.admit(from.is_some().then_some(Open::Stream)).await {
        Ok(slot) => slot,
        Err(limited) => return Ok(limited.into_response()),
    };
    let Some(from) = from else {
        return Ok(Json(engine.stored(tenant.name()).retrieve(&id).await?).into_response());
    };
    let events = engine.resume_background(tenant.name(), &id, from).await?;
    let keep_alive = engine.background().map_or(BackgroundSettings::default().keep_alive, |runs| runs.keep_alive());
    let after = match from {
        ResumeFrom::Start => None,
        ResumeFrom::After(n) => Some(n),
    };
    Ok(event_stream_response(BackgroundStream {
        events,
        response_id: id,
        after,
        keep_alive,
        cut: drain.map(|Extension(drain)| drain.cut),
        hold: (engine.metrics().sse_stream("/v1/responses/{response_id}"), slot),
    }))
}

/// `DELETE /v1/responses/{response_id}`.
pub async fn delete(
    State(engine): State<Arc<Engine>>,
    tenant: Tenant,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, HttpError> {
    let Path(id) = id.map_err(|_| path_rejection("response_id"))?;
    Ok(Json(engine.stored(tenant.name()).delete(&id).await?).into_response())
}

/// `GET /v1/responses/{response_id}/input_items`: this response's own input, OpenAI's list shape.
pub async fn input_items(
    State(engine): State<Arc<Engine>>,
    tenant: Tenant,
    id: Result<Path<String>, PathRejection>,
    params: Result<Query<ListQueryParams>, QueryRejection>,
) -> Result<Response, HttpError> {
    let Path(id) = id.map_err(|_| path_rejection("response_id"))?;
    let Query(params) =
        params.map_err(|e| ApiError::invalid_body(format!("Invalid query string: {}", e.body_text())))?;
    let query = ListQuery::parse(params)?;
    Ok(Json(engine.stored(tenant.name()).input_items(&id, query).await?).into_response())
}

/// `POST /v1/responses/compact`: the compacted window of a conversation.
pub async fn compact(
    State(engine): State<Arc<Engine>>,
    tenant: Tenant,
    RequestId(request_id): RequestId,
    JsonBody(body): JsonBody,
) -> Result<Response, HttpError> {
    let request = CompactRequest::from_slice(&body)?.validate_within(&engine.limits().request)?;
    Ok(Json(engine.compact(tenant.name(), request, vec![("x-request-id", request_id)]).await?).into_response())
}
