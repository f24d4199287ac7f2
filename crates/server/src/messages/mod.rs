//! The Anthropic Messages routes: `POST /v1/messages` (JSON or SSE; `?beta=true` is accepted and
//! changes nothing) and `POST /v1/messages/count_tokens`, plus [`anthropic_errors`], the one layer
//! that gives every error reply of these routes Anthropic's shape and every reply a `request-id`.
//!
//! A Messages request is translated at the edge ([`respgw_messages::into_engine`]) and run by the
//! same engine, tenants and limits as `POST /v1/responses`; [`reply`] frames the outcome. Errors
//! are made as everywhere else in the gateway ([`HttpError`]); only the layer reshapes them.

pub(crate) mod reply;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use respgw_engine::Engine;
use respgw_messages::error::messages_error;
use respgw_messages::into_engine::{EngineRequest, into_engine};
use respgw_messages::request::MessagesRequest;
use respgw_protocol::{ApiError, ErrorType};
use serde_json::json;

use crate::auth::{Admission, Tenant};
use crate::error::{HttpError, Relayed};
use crate::json_body::JsonBody;
use crate::limits::Open;
use crate::request_id::RequestId;

/// The route of `POST /v1/messages`, also its streams' metrics label.
pub(crate) const ROUTE: &str = "/v1/messages";
/// The route of `POST /v1/messages/count_tokens`.
pub(crate) const COUNT_TOKENS_ROUTE: &str = "/v1/messages/count_tokens";
/// Every other path under `/v1/messages/`: a 404 in Anthropic's shape in both modes.
pub(crate) const OTHER_ROUTES: &str = "/v1/messages/{*rest}";

/// How long a Messages stream may go without an event before it sends a `ping` (the router's
/// setting, handed to [`create`] as a request extension).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PingInterval(pub Duration);

/// `POST /v1/messages`.
pub(crate) async fn create(
    State(engine): State<Arc<Engine>>,
    Extension(PingInterval(ping_interval)): Extension<PingInterval>,
    tenant: Tenant,
    admission: Admission,
    RequestId(request_id): RequestId,
    JsonBody(body): JsonBody,
) -> Result<Response, HttpError> {
    let request = MessagesRequest::from_slice(&body)?;
    let EngineRequest { request, shape, paths } =
        into_engine(request, &engine.capabilities(), &engine.limits().request)?;
    let stream = request.stream;
    // Admitted with the stream it opens, before anything is read or sent upstream.
    let slot = match admission.admit(stream.then_some(Open::Stream)).await {
        Ok(slot) => slot,
        Err(limited) => return Ok(limited.into_response()),
    };
    let prepared = engine
        .prepare(tenant.name(), request, vec![("x-request-id", request_id)])
        .await
        .map_err(|error| paths.rename(error))?;
    if !stream {
        return reply::json(prepared, shape).await;
    }
    let open_stream = engine.metrics().sse_stream(ROUTE);
    Ok(reply::sse(prepared, shape, open_stream, slot, ping_interval))
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens": n}`, counted by the upstream like
/// `POST /v1/responses/input_tokens`.
pub(crate) async fn count_tokens(
    State(engine): State<Arc<Engine>>,
    tenant: Tenant,
    RequestId(request_id): RequestId,
    JsonBody(body): JsonBody,
) -> Result<Response, HttpError> {
    let request = MessagesRequest::counting_from_slice(&body)?;
    let EngineRequest { request, paths, .. } = into_engine(request, &engine.capabilities(), &engine.limits().request)?;
    let tokens = engine
        .count_input_tokens(tenant.name(), request, vec![("x-request-id", request_id)])
        .await
        .map_err(|error| paths.rename(error))?;
    Ok(Json(json!({"input_tokens": tokens})).into_response())
}

/// Any other path under `/v1/messages/`.
pub(crate) async fn not_found(request: Request) -> HttpError {
    HttpError(ApiError::route_not_found(request.method().as_str(), request.uri().path()))
}

/// Whether a request is answered in Anthropic's shape: everything under `/v1/messages`, and
/// `GET /v1/models` from an Anthropic client (one sending `anthropic-version`).
pub(crate) fn is_anthropic_request(request: &Request) -> bool {
    let path = request.uri().path();
    path == ROUTE
        || path.starts_with("/v1/messages/")
        || (path == "/v1/models" && request.headers().contains_key("anthropic-version"))
}

/// Middleware: on the Anthropic routes, every reply carries `request-id`, and every error reply
/// of the gateway's own (auth, rate limits, body limits, bad JSON, content type, unknown paths
/// and methods, engine errors) is re-cast as `{"type":"error","error":{"type","message"}}` with
/// Anthropic's status, its message starting with the field at fault when it does not name it.
/// Headers such as `Retry-After` and `Allow` stay.
pub(crate) async fn anthropic_errors(request: Request, next: Next) -> Response {
    if !is_anthropic_request(&request) {
        return next.run(request).await;
    }
    let request_id = request.extensions().get::<RequestId>().and_then(|RequestId(id)| HeaderValue::from_str(id).ok());
    let mut response = next.run(request).await;
    if let Some(id) = request_id {
        response.headers_mut().insert("request-id", id);
    }
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) || response.extensions().get::<Relayed>().is_some() {
        return response;
    }
    // Every error reply of the gateway's own carries its `ApiError` (`HttpError`, filled in by
    // `fill_error_body` where a layer answered first); one without is named by its status alone.
    let mut error = response.extensions_mut().remove::<ApiError>().unwrap_or_else(|| ApiError {
        status: status.as_u16(),
        error_type: if status.is_server_error() { ErrorType::ApiError } else { ErrorType::InvalidRequestError },
        message: format!("The request failed: {status}."),
        param: None,
        code: None,
    });
    // Anthropic's shape has no `param`: the message names the field instead.
    if let Some(param) = &error.param
        && !error.message.contains(param.as_str())
    {
        error.message = format!("{param}: {}", error.message);
    }
    let (anthropic_status, anthropic_body) = messages_error(&error);
    let (mut parts, _) = response.into_parts();
    // HTTP-level refusals keep their status (a 405 goes with its `Allow`); the rest take Anthropic's.
    let keeps_status = matches!(status.as_u16(), 405 | 408 | 415);
    if !keeps_status {
        parts.status = StatusCode::from_u16(anthropic_status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::WWW_AUTHENTICATE);
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Response::from_parts(parts, Body::from(anthropic_body.to_string()))
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::to_bytes;
    use axum::routing::{get, post};
    use serde_json::Value;
    use tower::ServiceExt;

    use super::*;

    async fn reply(app: Router, method: &str, path: &str, headers: &[(&str, &str)]) -> (StatusCode, Response) {
        let mut request = axum::http::Request::builder().method(method).uri(path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Body::empty()).expect("a request");
        let response =
            app.layer(axum::middleware::from_fn(anthropic_errors)).oneshot(request).await.expect("infallible");
        (response.status(), response)
    }

    async fn json_body(response: Response) -> Value {
        let bytes = to_bytes(response.into_body(), usize::MAX).await.expect("a body");
        serde_json::from_slice(&bytes).expect("JSON")
    }

    fn limited() -> Response {
        let mut response = HttpError(ApiError::rate_limited("slow down")).into_response();
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("7"));
        response
    }

    #[tokio::test]
    async fn errors_under_messages_take_anthropics_shape_and_keep_retry_after() {
        let app = Router::new().route(ROUTE, post(|| async { limited() }));
        let (status, response) = reply(app, "POST", "/v1/messages?beta=true", &[]).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "7");
        assert_eq!(
            json_body(response).await,
            json!({"type":"error","error":{"type":"rate_limit_error","message":"slow down"}})
        );
    }

    #[tokio::test]
    async fn the_message_names_the_field_it_is_about() {
        let app = Router::new().route(
            ROUTE,
            post(|| async { HttpError(ApiError::invalid("tools[1].type", "Tool type 'web_search' is not enabled.")) }),
        );
        let (_, response) = reply(app, "POST", ROUTE, &[]).await;
        assert_eq!(
            json_body(response).await["error"]["message"],
            "tools[1].type: Tool type 'web_search' is not enabled."
        );
        let named = Router::new()
            .route(ROUTE, post(|| async { HttpError(ApiError::invalid("model", "model: expected a string.")) }));
        let (_, response) = reply(named, "POST", ROUTE, &[]).await;
        assert_eq!(json_body(response).await["error"]["message"], "model: expected a string.");
    }

    #[tokio::test]
    async fn statuses_follow_anthropic_but_http_refusals_keep_theirs() {
        let app = Router::new()
            .route("/v1/messages/count_tokens", post(|| async { HttpError(ApiError::upstream_unavailable("down")) }))
            .route(ROUTE, post(|| async { StatusCode::OK }));
        let (status, response) = reply(app.clone(), "POST", "/v1/messages/count_tokens", &[]).await;
        assert_eq!(status.as_u16(), 529);
        assert_eq!(json_body(response).await["error"]["type"], "overloaded_error");
        let wrong_method = app
            .method_not_allowed_fallback(|| async { HttpError(ApiError::method_not_allowed("GET", "/v1/messages")) });
        let (status, response) = reply(wrong_method, "GET", "/v1/messages", &[]).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(json_body(response).await["error"]["type"], "invalid_request_error");
    }

    #[tokio::test]
    async fn other_routes_are_left_alone_unless_an_anthropic_client_lists_models() {
        let failing = || async { HttpError(ApiError::upstream_unavailable("down")) };
        let app = Router::new().route("/v1/responses", post(failing)).route("/v1/models", get(failing));
        let (status, response) = reply(app.clone(), "POST", "/v1/responses", &[]).await;
        assert!(status.is_server_error() && status.as_u16() != 529, "{status}");
        assert!(response.headers().get("request-id").is_none());
        assert!(json_body(response).await["error"]["message"].is_string());
        let (status, response) = reply(app, "GET", "/v1/models", &[("anthropic-version", "2023-06-01")]).await;
        assert_eq!(status.as_u16(), 529);
        assert_eq!(json_body(response).await["type"], "error");
    }
}
