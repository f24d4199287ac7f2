//! HTTP metrics: a middleware that counts every API request by method, route template and status,
//! and times its handler; plus the `/metrics` endpoint.
//!
//! Handler time ends when the response head is ready, so an SSE stream's lifetime is not part of
//! `http_request_duration_seconds` (streams are timed by their own guard in the SSE body). The
//! in-flight gauge likewise counts handlers, not open streams. `/health` and `/metrics` are not
//! counted. Every label comes from a fixed set, whatever clients send: a method outside RFC 9110's
//! (and PATCH) is `OTHER`, a path no route serves is the route `other` (a 404, or in integrated
//! mode a request forwarded to the model server), and the status is one of the gateway's replies.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, Method, header};
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
    let route = request.extensions().get::<MatchedPath>().map_or(UNMATCHED_ROUTE, |p| p.as_str()).to_owned();
    let method = method_label(request.method());
    let started = Instant::now();
    let in_flight = metrics.in_flight();
    let response = next.run(request).await;
    drop(in_flight);
    metrics.record_request(method, &route, response.status().as_u16(), started.elapsed());
    response
}

/// The `route` label of requests no route template matched.
const UNMATCHED_ROUTE: &str = "other";

/// The `method` label: the method itself when it is a standard one, else `OTHER`.
pub(crate) fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::CONNECT => "CONNECT",
        Method::OPTIONS => "OPTIONS",
        Method::TRACE => "TRACE",
        Method::PATCH => "PATCH",
        _ => "OTHER",
    }
}

/// `GET /metrics`.
pub async fn serve(State(view): State<MetricsView>) -> impl IntoResponse {
    let snapshot = view().await;
    let mut response = respgw_telemetry::render(&snapshot).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(respgw_telemetry::CONTENT_TYPE));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_outside_the_standard_ones_share_one_label() {
        assert_eq!(method_label(&Method::PATCH), "PATCH");
        assert_eq!(method_label(&Method::from_bytes(b"BREW").expect("a method token")), "OTHER");
        assert_eq!(method_label(&Method::from_bytes(b"get").expect("a method token")), "OTHER");
    }
}
