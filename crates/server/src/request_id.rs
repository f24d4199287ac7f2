//! Request ids and the request span: the id is taken from the client's `x-request-id` (when sane)
//! or minted, echoed on the response, forwarded upstream and attached to the request's span.
//!
//! The `request` span is the log context of everything a request does and, when tracing is on
//! ([`respgw_telemetry::tracing_otlp`]), the OpenTelemetry server span: named
//! `HTTP {method} {route template}`, continuing the caller's trace from `traceparent`/`tracestate`,
//! with method, path, route and status — never bodies or headers' values beyond those. This
//! middleware is a router layer, so it runs after routing and sees the matched route template.
//! The server span lasts until the response body has been sent (streams included).

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, MatchedPath, Request};
use axum::http::HeaderValue;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::Response;
use respgw_telemetry::tracing_otlp;
use tracing::field::Empty;

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
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        http.request.method = %request.method(),
        url.path = %request.uri().path(),
        http.route = Empty,
        otel.name = Empty,
        otel.kind = Empty,
        http.response.status_code = Empty,
        otel.status_code = Empty,
        tenant = Empty,
        key_id = Empty,
    );
    let exporting = tracing_otlp::exporting();
    if exporting {
        // Recorded before the span is first entered, while the OpenTelemetry span is still unbuilt.
        let route = request.extensions().get::<MatchedPath>().map(MatchedPath::as_str);
        // The span name keeps to a fixed set of methods, as the metrics' labels do.
        let method = crate::metrics::method_label(request.method());
        let name = match route {
            Some(route) => format!("HTTP {method} {route}"),
            None => format!("HTTP {method}"),
        };
        span.record("otel.name", name.as_str());
        span.record("otel.kind", "server");
        if let Some(route) = route {
            span.record("http.route", route);
        }
        tracing_otlp::continue_remote_trace(&span, request.headers());
    }
    let mut response = tracing::Instrument::instrument(next.run(request), span.clone()).await;
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(HEADER, value);
    }
    if !exporting {
        return response;
    }
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "error");
    }
    response.map(|body| Body::new(InSpan { body, span }))
}

/// A response body that enters the request span while it is polled: an OpenTelemetry span ends at
/// its last exit, so the server span then covers sending the body, not just producing the headers.
struct InSpan {
    body: Body,
    span: tracing::Span,
}

impl http_body::Body for InSpan {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        let _entered = this.span.enter();
        let frame = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(None) = frame {
            // Drop the finished body (and spans it holds, such as a pass-through's upstream call)
            // inside the request span, so they end before it.
            this.body = Body::empty();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for RequestId {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts.extensions.get::<RequestId>().cloned().unwrap_or_else(|| RequestId(uuid::Uuid::now_v7().to_string())))
    }
}
