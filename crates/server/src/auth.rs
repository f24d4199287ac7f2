//! API-key authentication: `Authorization: Bearer <key>` checked against the configured keys.
//!
//! Keys are kept as SHA-256 digests and compared in constant time, so neither the key's content
//! nor its length leaks through timing. With no key configured, authentication is off.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::HttpError;
use respgw_protocol::ApiError;

/// The accepted API keys.
#[derive(Clone, Default)]
pub struct ApiKeys {
    digests: Vec<[u8; 32]>,
}

fn digest(key: &[u8]) -> [u8; 32] {
    Sha256::digest(key).into()
}

impl ApiKeys {
    pub fn new<I: IntoIterator<Item = String>>(keys: I) -> Self {
        ApiKeys { digests: keys.into_iter().filter(|k| !k.is_empty()).map(|k| digest(k.as_bytes())).collect() }
    }

    /// Whether any key is configured (authentication on).
    pub fn enabled(&self) -> bool {
        !self.digests.is_empty()
    }

    /// Whether `presented` is one of the keys. Every configured key is compared, so the time
    /// taken does not say which one matched.
    pub fn accepts(&self, presented: &str) -> bool {
        let d = digest(presented.as_bytes());
        self.digests.iter().fold(subtle::Choice::from(0), |acc, k| acc | k.ct_eq(&d)).into()
    }
}

/// Middleware for the API routes: 401 `authentication_error` unless a configured key is presented.
pub async fn require_api_key(State(keys): State<ApiKeys>, request: Request, next: Next) -> Response {
    if !keys.enabled() {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    match presented {
        Some(key) if keys.accepts(key) => next.run(request).await,
        Some(_) => HttpError(ApiError::unauthorized("Incorrect API key provided.")).into_response(),
        None => HttpError(ApiError::unauthorized("Missing API key: send it as 'Authorization: Bearer <key>'."))
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_only_configured_keys() {
        let keys = ApiKeys::new(["alpha".to_owned(), "beta".to_owned()]);
        assert!(keys.enabled());
        assert!(keys.accepts("alpha"));
        assert!(keys.accepts("beta"));
        assert!(!keys.accepts("alph"));
        assert!(!keys.accepts(""));
    }

    #[test]
    fn no_keys_means_auth_off() {
        assert!(!ApiKeys::new(Vec::new()).enabled());
        assert!(!ApiKeys::new([String::new()]).enabled());
    }
}
