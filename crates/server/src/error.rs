//! Turning [`ApiError`] into an HTTP response: the status line plus the one JSON error body; and
//! the errors of the HTTP edge itself (stalled bodies, wrong content types, a full worker).

use axum::extract::Request;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use respgw_protocol::{ApiError, ErrorType};
use tower_http::timeout::TimeoutError;

/// Wrapper that lets handlers return `Result<_, HttpError>`.
pub struct HttpError(pub ApiError);

impl From<ApiError> for HttpError {
    fn from(e: ApiError) -> Self {
        HttpError(e)
    }
}

/// `Retry-After` of a 429 the engine answers, in seconds.
const QUEUE_RETRY_AFTER_SECONDS: &str = "5";

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, axum::Json(self.0.body())).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if status == StatusCode::TOO_MANY_REQUESTS {
            // A refusal of the engine's (a full background queue): room comes back as runs end.
            // The tenant limits' 429s carry their own, exact `Retry-After` (`auth.rs`).
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static(QUEUE_RETRY_AFTER_SECONDS));
        }
        if status == StatusCode::REQUEST_TIMEOUT {
            // The rest of the body may still be on its way: this connection cannot carry another request.
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        // The error itself travels with its reply, for a layer that answers in another API's shape.
        response.extensions_mut().insert(self.0);
        response
    }
}

/// A body that could not be read: too large (413), stalled (408), or broken off (400).
pub fn body_rejection(rejection: BytesRejection) -> HttpError {
    if stalled(&rejection) {
        return HttpError(ApiError {
            status: 408,
            error_type: ErrorType::InvalidRequestError,
            message: "The request body stopped arriving before it was complete.".into(),
            param: None,
            code: Some("request_timeout".into()),
        });
    }
    let status = rejection.status();
    let mut error = ApiError::invalid_body(format!("Could not read the request body: {}", rejection.body_text()));
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        error.status = 413;
        error.code = Some("request_too_large".into());
    }
    HttpError(error)
}

/// Whether the body broke off because it stalled longer than the body timeout.
fn stalled(rejection: &BytesRejection) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(rejection);
    while let Some(error) = source {
        if error.is::<TimeoutError>() {
            return true;
        }
        source = error.source();
    }
    false
}

/// 400 for a path segment that does not decode to UTF-8 text.
pub fn path_rejection(param: &str) -> HttpError {
    HttpError(ApiError::invalid(param, format!("'{param}' in the path is not valid UTF-8 text once percent-decoded.")))
}

/// 415 for a request body that is not declared as JSON.
pub fn unsupported_media_type(content_type: &str) -> HttpError {
    HttpError(ApiError {
        status: 415,
        error_type: ErrorType::InvalidRequestError,
        message: format!(
            "Unsupported Content-Type '{content_type}': send the request body as JSON with 'Content-Type: application/json'."
        ),
        param: None,
        code: Some("unsupported_media_type".into()),
    })
}

/// 503 for a connection over the worker's connection cap while every connection is busy.
pub fn server_busy() -> Response {
    let mut response = HttpError(ApiError {
        status: 503,
        error_type: ErrorType::ApiError,
        message: "The gateway is at its connection limit; retry shortly.".into(),
        param: None,
        code: Some("server_busy".into()),
    })
    .into_response();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// Marks a reply relayed from the model server: its body is the model server's and stays as it is.
#[derive(Clone, Copy)]
pub struct Relayed;

/// Middleware: an error reply of the gateway's own without a JSON body (a rejection of axum's,
/// say) gets the error shape; its status and other headers stay. Replies to `HEAD` carry no body,
/// and [`Relayed`] ones are left alone.
pub async fn fill_error_body(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let uri = request.uri().clone();
    let response = next.run(request).await;
    let status = response.status();
    let is_error = status.is_client_error() || status.is_server_error();
    if !is_error
        || method == Method::HEAD
        || response.extensions().get::<Relayed>().is_some()
        || is_json(response.headers())
    {
        return response;
    }
    let error = match status {
        StatusCode::NOT_FOUND => ApiError::route_not_found(method.as_str(), uri.path()),
        StatusCode::METHOD_NOT_ALLOWED => ApiError::method_not_allowed(method.as_str(), uri.path()),
        _ => ApiError {
            status: status.as_u16(),
            error_type: if status.is_server_error() { ErrorType::ApiError } else { ErrorType::InvalidRequestError },
            message: format!("The request failed: {status}."),
            param: None,
            code: None,
        },
    };
    let (mut parts, _) = response.into_parts();
    let (filled, body) = HttpError(error).into_response().into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.extend(filled.headers);
    parts.extensions.extend(filled.extensions);
    Response::from_parts(parts, body)
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"))
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    use super::*;

    async fn reply(handler_status: StatusCode, relayed: bool, method: Method) -> (StatusCode, HeaderMap, String) {
        let app = Router::new()
            .route(
                "/",
                get(move || async move {
                    let mut response = (handler_status, [(header::RETRY_AFTER, "5")], "plain words").into_response();
                    if relayed {
                        response.extensions_mut().insert(Relayed);
                    }
                    response
                }),
            )
            .layer(axum::middleware::from_fn(fill_error_body));
        let request = axum::http::Request::builder().method(method).uri("/").body(Body::empty()).expect("a request");
        let response = app.oneshot(request).await.expect("infallible");
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.expect("a body");
        (parts.status, parts.headers, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn error_replies_without_a_json_body_get_the_error_shape() {
        let (status, headers, body) = reply(StatusCode::SERVICE_UNAVAILABLE, false, Method::GET).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(headers[header::CONTENT_TYPE], "application/json");
        assert_eq!(headers[header::RETRY_AFTER], "5", "other headers stay");
        let body: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(body["error"]["type"], "api_error");
        assert_eq!(body["error"]["message"], "The request failed: 503 Service Unavailable.");
    }

    #[tokio::test]
    async fn relayed_successful_and_head_replies_are_left_alone() {
        assert_eq!(reply(StatusCode::BAD_GATEWAY, true, Method::GET).await.2, "plain words");
        assert_eq!(reply(StatusCode::OK, false, Method::GET).await.2, "plain words");
        assert_eq!(reply(StatusCode::BAD_REQUEST, false, Method::HEAD).await.2, "");
    }
}
