//! HTTP metrics: a middleware that counts every routed request by method, route template and
//! status, and times its handler; plus the `/metrics` endpoint.
//!
//! Handler time ends when the response head is ready, so an SSE stream's lifetime is not part of
//! `http_request_duration_seconds` (streams are timed by their own guard in the SSE body). The
//! in-flight gauge likewise counts handlers, not open streams. `/health` and `/metrics` are not
//! counted; unrouted paths are not either, so the `route` label stays bounded.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use respgw_telemetry::{Metrics, MetricsSnapshot};

/// Produces the metrics view a scrape serves: the merged view of all workers under the
/// supervisor, or this process's own snapshot when it runs alone.
pub type MetricsView = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = MetricsSnapshot> + Send>> + Send + Sync>;

/// A view of one process's own metrics.
pub fn local_view(metrics: Metrics) -> MetricsView {
    Arc::new(move || {
        let snapshot = metrics.snapshot();
        Box::pin(async move { snapshot })
    })
}

/// Middleware on the routed API: record each request.
pub async fn record(State(metrics): State<Metrics>, request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned());
    let Some(route) = route else {
        return next.run(request).await;
    };
    let method = request.method().as_str().to_owned();
    let started = Instant::now();
    let in_flight = metrics.in_flight();
    let response = next.run(request).await;
    drop(in_flight);
    metrics.record_request(&method, &route, response.status().as_u16(), started.elapsed());
    response
}

/// `GET /metrics`.
pub async fn serve(State(view): State<MetricsView>) -> impl IntoResponse {
    let snapshot = view().await;
    let mut response = respgw_telemetry::render(&snapshot).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(respgw_telemetry::CONTENT_TYPE));
    response
}
