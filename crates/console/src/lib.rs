//! The operator console: a browser app served by the gateway itself under `/console`.
//!
//! The app is plain ES modules, CSS and one `index.html` under `assets/` — no build step, no
//! framework, nothing fetched from elsewhere. `build.rs` embeds every file in the binary with its
//! gzipped form and an ETag, so the routes here only look a path up in that table (never the file
//! system). The assets are public; the data the page shows comes from the `/v1/console/` API, behind
//! the API-key check like every `/v1` route, with the key the user types in (`docs/console.md`).
//!
//! Every reply under `/console` carries a strict Content-Security-Policy (scripts and styles from
//! this origin only: no inline script or style, no `eval`), `nosniff` and `no-referrer`. Assets are
//! revalidated on each load (`no-cache` + ETag → 304) and sent gzipped to clients that accept it.
//!
//! Architecture invariant: the console reads data only through the documented `/v1/console/` API;
//! this crate knows nothing of the store, the engine or tenants.

mod assets;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use respgw_protocol::ApiError;

use crate::assets::Asset;

/// The policy every console reply carries: everything from this origin only, nothing inline.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The console's routes: `/console` (a redirect to `/console/`), `/console/` (the page) and
/// `/console/<asset>`. They need no state and no authentication.
pub fn routes() -> Router {
    Router::new()
        .route("/console", get(|| async { with_security_headers(Redirect::permanent("/console/").into_response()) }))
        .route("/console/", get(|headers: HeaderMap| async move { serve("index.html", &headers) }))
        .route("/console/{*asset}", get(|uri: Uri, headers: HeaderMap| async move { serve_uri(&uri, &headers) }))
}

/// The asset a `/console/<asset>` path names, matched on the raw path: asset names are plain ASCII.
fn serve_uri(uri: &Uri, headers: &HeaderMap) -> Response {
    let path = uri.path();
    serve(path.strip_prefix("/console/").unwrap_or(path), headers)
}

fn serve(path: &str, request_headers: &HeaderMap) -> Response {
    let Some(asset) = assets::find(path) else {
        let mut error = ApiError::route_not_found("GET", &format!("/console/{path}"));
        error.message = format!("The console has no file '{path}'.");
        let response = (StatusCode::NOT_FOUND, axum::Json(error.body())).into_response();
        return with_security_headers(response);
    };
    let gzip = accepts_gzip(request_headers);
    // The gzipped representation is a different entity, so it gets its own tag.
    let etag = if gzip { format!("\"{}-gzip\"", asset.etag) } else { format!("\"{}\"", asset.etag) };
    let mut response = if matches_if_none_match(request_headers, &etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        full_reply(asset, gzip)
    };
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    with_security_headers(response)
}

fn full_reply(asset: &'static Asset, gzip: bool) -> Response {
    let body = if gzip { asset.gzip } else { asset.body };
    let mut response = Response::new(Body::from(body));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type()));
    if gzip {
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    response
}

fn with_security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

/// Whether `Accept-Encoding` allows gzip: named (or `*`) with a non-zero quality; an explicit
/// `gzip` entry wins over `*`.
fn accepts_gzip(headers: &HeaderMap) -> bool {
    let mut wildcard = false;
    for value in headers.get_all(header::ACCEPT_ENCODING) {
        let Ok(value) = value.to_str() else { continue };
        for entry in value.split(',') {
            let mut parts = entry.split(';');
            let coding = parts.next().unwrap_or("").trim();
            let quality_allows = parts.all(|parameter| match parameter.trim().split_once('=') {
                Some((name, q)) if name.trim().eq_ignore_ascii_case("q") => {
                    q.trim().parse::<f32>().is_ok_and(|q| q > 0.0)
                }
                _ => true,
            });
            if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
                return quality_allows;
            }
            if coding == "*" {
                wildcard = quality_allows;
            }
        }
    }
    wildcard
}

/// `If-None-Match` against `etag`, with the weak comparison RFC 9110 prescribes for it.
fn matches_if_none_match(headers: &HeaderMap, etag: &str) -> bool {
    headers.get_all(header::IF_NONE_MATCH).iter().filter_map(|value| value.to_str().ok()).any(|value| {
        value.split(',').map(str::trim).any(|candidate| candidate == "*" || candidate.trim_start_matches("W/") == etag)
    })
}

#[cfg(test)]
mod tests;
