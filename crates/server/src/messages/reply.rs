//! (filled in by its owner: a prepared response answered as a Messages JSON body or stream)

use axum::response::Response;
use respgw_engine::PreparedResponse;
use respgw_messages::shape::ReplyShape;
use respgw_telemetry::SseStreamGuard;

use crate::auth::StreamSlot;
use crate::error::HttpError;

/// Runs `prepared` to its end and answers with the `message` body.
pub(crate) async fn json(prepared: PreparedResponse, shape: ReplyShape) -> Result<Response, HttpError> {
    todo!("{:?} {shape:?}", prepared.id())
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
