//! The router: which path goes to which handler, and which layers wrap them.
//!
//! `/health`, `/metrics` and the console's page and assets (`/console/…`, `respgw-console`) sit
//! outside authentication and are not counted; every `/v1/…` route is behind the API-key check
//! (which gives the request its tenant) and the request metrics (a WebSocket upgrade of `GET
//! /v1/responses` included: a missing key is a 401 before any upgrade). Unknown paths and wrong methods answer in
//! the API's error shape — or, in integrated mode, are forwarded to the model server unchanged.
//! A 405 lists the route's methods in `Allow`, and any other error reply of the gateway's own
//! that has no JSON body gets the error shape ([`error::fill_error_body`]); forwarded replies are
//! left as the model server sent them. Under `/v1/messages` (and for `GET /v1/models` with
//! `anthropic-version`) one more layer recasts every error in Anthropic's shape and adds
//! `request-id` ([`messages::anthropic_errors`]).

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::{HeaderValue, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Extension, Router};
use respgw_engine::Engine;
use respgw_protocol::ApiError;
use respgw_telemetry::Metrics;

use crate::auth::{ApiKeys, AuthState, require_api_key};
use crate::console::overview::{self, OverviewView};
use crate::console::{self, ConsoleState};
use crate::error::{self, HttpError};
use crate::files::RetrievalState;
use crate::mcp_routes::{self, McpDiscovery};
use crate::metrics::{self, MetricsView};
use crate::options::WebSocketLimits;
use crate::passthrough::{self, Passthrough};
use crate::websocket::{self, LocalStates, WebSocketMode};
use crate::{background, conversations, files, input_tokens, messages, request_id, responses, vector_stores};

/// What the router needs.
pub struct AppConfig {
    pub engine: Arc<Engine>,
    pub api_keys: ApiKeys,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// What WebSocket connections are allowed.
    pub websocket: WebSocketLimits,
    /// How long a Messages stream may go without an event before it sends a `ping` event.
    pub messages_ping_interval: std::time::Duration,
    /// Recorder for this process's request metrics.
    pub metrics: Metrics,
    /// Where `/metrics` is served and what it shows; `None` disables the route.
    pub metrics_route: Option<(String, MetricsView)>,
    /// The samples `GET /v1/console/overview` answers from.
    pub overview: OverviewView,
    /// Integrated mode: forward every path no gateway route serves to this base URL.
    pub forward_other_routes_to: Option<String>,
    /// Sent as `x-respgw-worker` on every reply, with the process id as `x-respgw-worker-pid`, so
    /// operators (and the fault tests) can see which worker — and which incarnation of a
    /// restarted one — served it.
    pub worker_label: Option<String>,
    /// The Built-in MCP helper, for the discovery routes.
    pub mcp_helper: McpDiscovery,
    /// Files and vector stores, for their routes.
    pub retrieval: RetrievalState,
    /// What the operator console's API reads.
    pub console: ConsoleState,
}

/// Build the gateway's router.
pub fn router(config: AppConfig) -> Router {
    let passthrough = Passthrough {
        engine: Arc::clone(&config.engine),
        gateway_auth: config.api_keys.enabled(),
        forward_base: config.forward_other_routes_to.clone(),
    };
    let websocket_mode = WebSocketMode {
        engine: Arc::clone(&config.engine),
        max_frame_bytes: config.max_body_bytes,
        limits: config.websocket,
        local_states: LocalStates::new(
            config.websocket.local_state_per_connection,
            config.websocket.local_state_per_worker,
        ),
    };
    let mut api = Router::new()
        .route("/v1/responses", get(websocket::upgrade).with_state(websocket_mode).post(responses::create))
        .route("/v1/responses/{response_id}", get(responses::retrieve).delete(responses::delete))
        .route("/v1/responses/input_tokens", post(input_tokens::count))
        .route("/v1/responses/{response_id}/input_items", get(responses::input_items))
        .route("/v1/conversations", post(conversations::create))
        .route(
            "/v1/conversations/{conversation_id}",
            get(conversations::retrieve).post(conversations::update).delete(conversations::delete),
        )
        .route(
            "/v1/conversations/{conversation_id}/items",
            get(conversations::list_items).post(conversations::add_items),
        )
        .route(
            "/v1/conversations/{conversation_id}/items/{item_id}",
            get(conversations::retrieve_item).delete(conversations::delete_item),
        )
        .route("/v1/responses/compact", post(responses::compact))
        .route("/v1/responses/{response_id}/cancel", post(background::cancel))
        .route(
            messages::ROUTE,
            post(messages::create).layer(Extension(messages::PingInterval(config.messages_ping_interval))),
        )
        .route(messages::COUNT_TOKENS_ROUTE, post(messages::count_tokens))
        .route(messages::OTHER_ROUTES, any(messages::not_found))
        .with_state(Arc::clone(&config.engine))
        .merge(
            Router::new()
                .route("/v1/mcp/servers", get(mcp_routes::servers))
                .route("/v1/mcp/servers/{server_label}/tools", get(mcp_routes::tools))
                .with_state(config.mcp_helper.clone()),
        )
        .merge(retrieval_routes(config.retrieval.clone()))
        .merge(console::routes(config.console.clone()))
        .merge(overview::routes(config.overview.clone()));
    if config.forward_other_routes_to.is_some() {
        // Integrated mode: the model server's own routes (models, chat completions, tokenize, …)
        // are reached through the forwarding fallback below.
        api = api.fallback(any(passthrough::forward_any).with_state(passthrough.clone()));
    } else {
        api = api
            .merge(
                Router::new()
                    .route("/v1/models", get(passthrough::models))
                    .route("/v1/chat/completions", post(passthrough::chat_completions))
                    .with_state(passthrough.clone()),
            )
            .fallback(not_found);
    }
    let api = api
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            AuthState { keys: config.api_keys, metrics: config.metrics.clone() },
            require_api_key,
        ))
        .layer(middleware::from_fn_with_state(config.metrics.clone(), metrics::record));

    // The console's page and assets are public (its data comes from the authenticated `/v1/console/` API).
    let mut open = Router::new()
        .route("/health", get(|| async { axum::Json(serde_json::json!({})) }))
        .merge(respgw_console::routes());
    if let Some((path, view)) = config.metrics_route {
        open = open.route(&path, get(metrics::serve).with_state(view));
    }
    let mut app = open
        .method_not_allowed_fallback(method_not_allowed)
        .merge(api)
        .layer(middleware::from_fn(error::fill_error_body))
        .layer(middleware::from_fn(messages::anthropic_errors))
        .layer(DefaultBodyLimit::max(config.max_body_bytes));
    if let Some(label) = config.worker_label.and_then(|l| HeaderValue::from_str(&l).ok()) {
        let pid = HeaderValue::from(std::process::id());
        app = app.layer(middleware::map_response(move |mut response: axum::response::Response| {
            let (label, pid) = (label.clone(), pid.clone());
            async move {
                response.headers_mut().insert("x-respgw-worker", label);
                response.headers_mut().insert("x-respgw-worker-pid", pid);
                response
            }
        }));
    }
    app.layer(middleware::from_fn(request_id::assign))
}

/// The Files and vector-store routes. The upload streams its body itself, held to the file
/// limit (`--max-file-bytes`) rather than the request body limit.
fn retrieval_routes(state: RetrievalState) -> Router {
    Router::new()
        .route("/v1/files", post(files::upload).get(files::list))
        .route("/v1/files/{file_id}", get(files::retrieve).delete(files::delete))
        .route("/v1/files/{file_id}/content", get(files::content))
        .route("/v1/vector_stores", post(vector_stores::create).get(vector_stores::list))
        .route(
            "/v1/vector_stores/{vector_store_id}",
            get(vector_stores::retrieve).post(vector_stores::update).delete(vector_stores::delete),
        )
        .route("/v1/vector_stores/{vector_store_id}/search", post(vector_stores::search))
        .route(
            "/v1/vector_stores/{vector_store_id}/files",
            post(vector_stores::add_file).get(vector_stores::list_files),
        )
        .route(
            "/v1/vector_stores/{vector_store_id}/files/{file_id}",
            get(vector_stores::retrieve_file).post(vector_stores::update_file).delete(vector_stores::remove_file),
        )
        .route("/v1/vector_stores/{vector_store_id}/files/{file_id}/content", get(vector_stores::file_content))
        .route("/v1/vector_stores/{vector_store_id}/file_batches", post(vector_stores::create_batch))
        .route("/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}", get(vector_stores::retrieve_batch))
        .route("/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}/cancel", post(vector_stores::cancel_batch))
        .route("/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}/files", get(vector_stores::batch_files))
        .with_state(state)
}

async fn not_found(request: Request) -> impl IntoResponse {
    HttpError(ApiError::route_not_found(request.method().as_str(), request.uri().path()))
}

/// 405 on a known path. axum adds `Allow` from the route's methods, except where the route says
/// otherwise here.
async fn method_not_allowed(request: Request) -> Response {
    let mut response =
        HttpError(ApiError::method_not_allowed(request.method().as_str(), request.uri().path())).into_response();
    if request.extensions().get::<MatchedPath>().is_some_and(|route| route.as_str() == websocket::ROUTE) {
        response.headers_mut().insert(header::ALLOW, HeaderValue::from_static(websocket::ROUTE_ALLOW));
    }
    response
}
