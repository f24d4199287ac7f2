//! The router: which path goes to which handler, and which layers wrap them.
//!
//! `/health` (and `/metrics`, later) sit outside authentication; every `/v1/…` route is behind
//! it. Unknown paths and wrong methods answer in the API's error shape, not axum's plain text.

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::middleware;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use respgw_engine::Engine;
use respgw_protocol::ApiError;

use crate::auth::{ApiKeys, require_api_key};
use crate::error::HttpError;
use crate::passthrough::{self, Passthrough};
use crate::{request_id, responses};

/// What the router needs.
pub struct AppConfig {
    pub engine: Arc<Engine>,
    pub api_keys: ApiKeys,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
}

/// Build the gateway's router.
pub fn router(config: AppConfig) -> Router {
    let passthrough = Passthrough { engine: Arc::clone(&config.engine), gateway_auth: config.api_keys.enabled() };
    let responses_routes = Router::new()
        .route("/v1/responses", post(responses::create))
        .route("/v1/responses/{response_id}", get(responses::retrieve).delete(responses::delete))
        .route("/v1/responses/{response_id}/input_items", get(responses::input_items))
        .with_state(Arc::clone(&config.engine));
    let passthrough_routes = Router::new()
        .route("/v1/models", get(passthrough::models))
        .route("/v1/chat/completions", post(passthrough::chat_completions))
        .with_state(passthrough);
    let api = responses_routes
        .merge(passthrough_routes)
        .method_not_allowed_fallback(method_not_allowed)
        .route_layer(middleware::from_fn_with_state(config.api_keys, require_api_key));

    Router::new()
        .route("/health", get(|| async { axum::Json(serde_json::json!({})) }))
        .merge(api)
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .layer(middleware::from_fn(request_id::assign))
}

async fn not_found(request: Request) -> impl IntoResponse {
    HttpError(ApiError::route_not_found(request.method().as_str(), request.uri().path()))
}

async fn method_not_allowed(request: Request) -> impl IntoResponse {
    HttpError(ApiError::method_not_allowed(request.method().as_str(), request.uri().path()))
}
