//! The body of a route that takes JSON: declared as JSON (`application/json`, with any
//! parameters, or `application/<anything>+json`) or not declared at all, else 415 before a byte of
//! it is read; then read whole within the body limit.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, header};

use crate::error::{HttpError, body_rejection, unsupported_media_type};

/// A request body that is JSON or undeclared, as bytes (the protocol crate parses it).
pub struct JsonBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = HttpError;

    async fn from_request(request: Request, state: &S) -> Result<Self, HttpError> {
        check_content_type(request.headers())?;
        let body = Bytes::from_request(request, state).await.map_err(body_rejection)?;
        Ok(JsonBody(body))
    }
}

fn check_content_type(headers: &HeaderMap) -> Result<(), HttpError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else { return Ok(()) };
    let declared = String::from_utf8_lossy(value.as_bytes());
    match declared.parse::<mime::Mime>() {
        Ok(media_type) if is_json(&media_type) => Ok(()),
        Ok(media_type) => Err(unsupported_media_type(media_type.essence_str())),
        Err(_) => Err(unsupported_media_type(&declared.trim().chars().take(MAX_SHOWN_CHARS).collect::<String>())),
    }
}

/// Characters of an unparsable Content-Type repeated in the error message.
const MAX_SHOWN_CHARS: usize = 80;

fn is_json(media_type: &mime::Mime) -> bool {
    media_type.type_() == mime::APPLICATION
        && (media_type.subtype() == mime::JSON || media_type.suffix() == Some(mime::JSON))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn accepts(content_type: Option<&str>) -> bool {
        let mut headers = HeaderMap::new();
        if let Some(value) = content_type {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_str(value).expect("a header value"));
        }
        check_content_type(&headers).is_ok()
    }

    #[test]
    fn json_and_undeclared_bodies_are_accepted() {
        assert!(accepts(None));
        assert!(accepts(Some("application/json")));
        assert!(accepts(Some("application/json; charset=utf-8")));
        assert!(accepts(Some("Application/JSON")));
        assert!(accepts(Some("application/vnd.api+json")));
    }

    #[test]
    fn other_media_types_are_refused() {
        for content_type in [
            "text/plain",
            "text/json",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
            "not a media type",
            "",
        ] {
            assert!(!accepts(Some(content_type)), "{content_type}");
        }
    }
}
