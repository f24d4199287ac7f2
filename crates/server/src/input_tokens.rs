//! `POST /v1/responses/input_tokens`: how many tokens the model would be sent for a would-be
//! `POST /v1/responses` body. The body is parsed and validated like a create request's; the
//! engine prepares it and has the upstream count its first model turn
//! ([`Engine::count_input_tokens`]).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use respgw_engine::Engine;
use respgw_protocol::CreateResponseRequest;
use respgw_protocol::response::InputTokenCount;

use crate::auth::Tenant;
use crate::error::HttpError;
use crate::json_body::JsonBody;
use crate::request_id::RequestId;

/// `POST /v1/responses/input_tokens`.
pub async fn count(
    State(engine): State<Arc<Engine>>,
    tenant: Tenant,
    RequestId(request_id): RequestId,
    JsonBody(body): JsonBody,
) -> Result<Response, HttpError> {
    let request =
        CreateResponseRequest::from_slice(&body)?.validate_within(&engine.capabilities(), &engine.limits().request)?;
    let tokens = engine.count_input_tokens(tenant.name(), request, vec![("x-request-id", request_id)]).await?;
    Ok(Json(InputTokenCount::new(tokens)).into_response())
}
