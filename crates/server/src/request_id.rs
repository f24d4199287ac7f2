//! Request ids: taken from the client's `x-request-id` (when sane) or minted, echoed on the
//! response, forwarded upstream and attached to the request's log span.

use axum::extract::{FromRequestParts, Request};
use axum::http::HeaderValue;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::Response;

/// The id of the current request, available to handlers as an extractor.
#[derive(Clone)]
pub struct RequestId(pub String);

const HEADER: &str = "x-request-id";

fn acceptable(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic())
}

/// Middleware: assign the id, run the request inside a span carrying it, echo it.
pub async fn assign(mut request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| acceptable(v))
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    request.extensions_mut().insert(RequestId(id.clone()));
    let span =
        tracing::info_span!("request", request_id = %id, method = %request.method(), path = %request.uri().path());
    let mut response = tracing::Instrument::instrument(next.run(request), span).await;
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(HEADER, value);
    }
    response
}

impl<S: Send + Sync> FromRequestParts<S> for RequestId {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts.extensions.get::<RequestId>().cloned().unwrap_or_else(|| RequestId(uuid::Uuid::now_v7().to_string())))
    }
}
