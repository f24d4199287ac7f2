//! Turning [`ApiError`] into an HTTP response: the status line plus the one JSON error body.

use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use respgw_protocol::ApiError;

/// Wrapper that lets handlers return `Result<_, HttpError>`.
pub struct HttpError(pub ApiError);

impl From<ApiError> for HttpError {
    fn from(e: ApiError) -> Self {
        HttpError(e)
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, axum::Json(self.0.body())).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// A body that could not be read: too large (413), or broken off (400).
pub fn body_rejection(rejection: BytesRejection) -> HttpError {
    let status = rejection.status();
    let mut error = ApiError::invalid_body(format!("Could not read the request body: {}", rejection.body_text()));
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        error.status = 413;
        error.code = Some("request_too_large".into());
    }
    HttpError(error)
}
