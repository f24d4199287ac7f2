//! (filled in by its owner: a prepared response answered as a Messages JSON body or stream)

use axum::Json;
use axum::response::{IntoResponse, Response};
use respgw_engine::{PreparedResponse, RunOutcome};
use respgw_messages::reply::message;
use respgw_messages::shape::ReplyShape;
use respgw_protocol::ApiError;
use respgw_telemetry::SseStreamGuard;

use crate::auth::StreamSlot;
use crate::error::HttpError;

/// Runs `prepared` to its end and answers with the `message` body; a failed run answers with
/// its error (re-shaped for Messages by the routes' error layer).
pub(crate) async fn json(prepared: PreparedResponse, shape: ReplyShape) -> Result<Response, HttpError> {
    match prepared.run().await {
        RunOutcome::Finished(response) => Ok(Json(message(&response, &shape)).into_response()),
        RunOutcome::Failed { error, .. } => Err(HttpError(error)),
        // Unreachable: a run without a stream never learns that its client left.
        RunOutcome::ClientGone => Err(HttpError(ApiError::internal("The message was abandoned."))),
    }
}

/// Spawns `prepared` and answers with Anthropic's event stream (always ended: `message_stop`,
/// or an `error` event); `open_stream` and `slot` are released when the body is dropped.
pub(crate) fn sse(
    prepared: PreparedResponse,
    shape: ReplyShape,
    open_stream: SseStreamGuard,
    slot: Option<StreamSlot>,
) -> Response {
    todo!("{:?} {shape:?} {:?} {:?}", prepared.id(), open_stream, slot.is_some())
}
