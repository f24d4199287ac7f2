//! The console's routes and the rules its assets must keep (size budget, nothing CSP would block).

use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode, header};
use axum::response::Response;
use std::io::Read as _;
use tower::ServiceExt as _;

use super::*;
use crate::assets::ASSETS;

/// At most this many bytes, gzipped, for everything the console ships.
const GZIPPED_BUDGET_BYTES: usize = 300 * 1024;

async fn get(path: &str, headers: &[(&str, &str)]) -> Response {
    let mut request = Request::get(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    routes().oneshot(request.body(Body::empty()).unwrap()).await.unwrap()
}

async fn body(response: Response) -> Vec<u8> {
    to_bytes(response.into_body(), usize::MAX).await.unwrap().to_vec()
}

fn header_of(response: &Response, name: header::HeaderName) -> &str {
    response.headers().get(name).map(|v| v.to_str().unwrap()).unwrap_or("")
}

fn assert_security_headers(response: &Response) {
    assert_eq!(header_of(response, header::CONTENT_SECURITY_POLICY), CONTENT_SECURITY_POLICY);
    assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-inline") && !CONTENT_SECURITY_POLICY.contains("unsafe-eval"));
    assert_eq!(header_of(response, header::X_CONTENT_TYPE_OPTIONS), "nosniff");
    assert_eq!(header_of(response, header::REFERRER_POLICY), "no-referrer");
}

#[tokio::test]
async fn serves_the_page_at_console_slash_with_its_security_headers() {
    let response = get("/console/", &[]).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_security_headers(&response);
    assert_eq!(header_of(&response, header::CONTENT_TYPE), "text/html; charset=utf-8");
    assert_eq!(header_of(&response, header::CACHE_CONTROL), "no-cache");
    assert!(header_of(&response, header::ETAG).starts_with('"'));
    assert_eq!(header_of(&response, header::CONTENT_ENCODING), "");
    let page = String::from_utf8(body(response).await).unwrap();
    assert!(page.contains("<script type=\"module\" src=\"app.js\"></script>"), "{page}");
}

#[tokio::test]
async fn console_without_a_slash_redirects_to_the_page() {
    let response = get("/console", &[]).await;
    assert_eq!(response.status(), StatusCode::PERMANENT_REDIRECT);
    assert_eq!(header_of(&response, header::LOCATION), "/console/");
    assert_security_headers(&response);
}

#[tokio::test]
async fn serves_modules_and_styles_with_their_types() {
    let script = get("/console/views/overview.js", &[]).await;
    assert_eq!(script.status(), StatusCode::OK);
    assert_eq!(header_of(&script, header::CONTENT_TYPE), "text/javascript; charset=utf-8");
    assert_security_headers(&script);
    let style = get("/console/style.css", &[]).await;
    assert_eq!(header_of(&style, header::CONTENT_TYPE), "text/css; charset=utf-8");
}

#[tokio::test]
async fn sends_gzip_to_clients_that_accept_it_and_identity_to_others() {
    let plain = body(get("/console/app.js", &[]).await).await;
    let response = get("/console/app.js", &[("accept-encoding", "br, gzip;q=0.8")]).await;
    assert_eq!(header_of(&response, header::CONTENT_ENCODING), "gzip");
    assert_eq!(header_of(&response, header::VARY), "accept-encoding");
    let compressed = body(response).await;
    assert!(compressed.len() < plain.len());
    let mut unpacked = Vec::new();
    flate2::read::GzDecoder::new(&compressed[..]).read_to_end(&mut unpacked).unwrap();
    assert_eq!(unpacked, plain);

    for refusing in ["gzip;q=0", "identity", "br", "*;q=0", "gzip;q=0, *"] {
        let response = get("/console/app.js", &[("accept-encoding", refusing)]).await;
        assert_eq!(header_of(&response, header::CONTENT_ENCODING), "", "{refusing}");
    }
    let response = get("/console/app.js", &[("accept-encoding", "*")]).await;
    assert_eq!(header_of(&response, header::CONTENT_ENCODING), "gzip");
}

#[tokio::test]
async fn answers_304_when_the_tag_matches_and_the_full_asset_otherwise() {
    let first = get("/console/app.js", &[]).await;
    let etag = header_of(&first, header::ETAG).to_owned();
    let again = get("/console/app.js", &[("if-none-match", &etag)]).await;
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(header_of(&again, header::ETAG), etag);
    assert_security_headers(&again);
    assert!(body(again).await.is_empty());

    let weak = get("/console/app.js", &[("if-none-match", &format!("\"other\", W/{etag}"))]).await;
    assert_eq!(weak.status(), StatusCode::NOT_MODIFIED);
    let stale = get("/console/app.js", &[("if-none-match", "\"0000\"")]).await;
    assert_eq!(stale.status(), StatusCode::OK);

    // The gzipped representation has its own tag: a cached identity body is not reused for it.
    let gzipped = get("/console/app.js", &[("accept-encoding", "gzip"), ("if-none-match", &etag)]).await;
    assert_eq!(gzipped.status(), StatusCode::OK);
    assert_ne!(header_of(&gzipped, header::ETAG), etag);
    let other_asset = get("/console/style.css", &[("if-none-match", &etag)]).await;
    assert_eq!(other_asset.status(), StatusCode::OK);
}

#[tokio::test]
async fn unknown_assets_are_404_in_the_error_shape() {
    for path in ["/console/nope.js", "/console/views/", "/console/%2e%2e/Cargo.toml", "/console/../build.rs"] {
        let response = get(path, &[]).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        assert_security_headers(&response);
        let error: serde_json::Value = serde_json::from_slice(&body(response).await).unwrap();
        assert_eq!(error["error"]["code"], "not_found", "{path}");
        assert_eq!(error["error"]["type"], "invalid_request_error");
        assert!(error["error"]["message"].as_str().unwrap().contains("console"), "{error}");
    }
}

#[test]
fn everything_gzipped_fits_the_300_kb_budget() {
    let gzipped: usize = ASSETS.iter().map(|asset| asset.gzip.len()).sum();
    let plain: usize = ASSETS.iter().map(|asset| asset.body.len()).sum();
    eprintln!("console assets: {} files, {plain} bytes, {gzipped} bytes gzipped", ASSETS.len());
    assert!(gzipped <= GZIPPED_BUDGET_BYTES, "{gzipped} bytes gzipped is over the budget");
}

/// Each tag's attribute names in an HTML text (quoted values skipped), lowercased, with the tag.
fn attribute_names(html: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut chars = html.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '<' || matches!(chars.peek(), Some('!' | '/')) {
            continue;
        }
        let mut tag = String::new();
        while let Some(&c) = chars.peek().filter(|c| !c.is_whitespace() && **c != '>' && **c != '/') {
            tag.push(c.to_ascii_lowercase());
            chars.next();
        }
        let mut name = String::new();
        let mut in_value = false;
        let mut quote: Option<char> = None;
        for c in chars.by_ref() {
            if let Some(q) = quote {
                if c == q {
                    quote = None;
                    in_value = false;
                }
                continue;
            }
            let ends_name = c == '=' || c == '>' || c == '/' || c.is_whitespace();
            if ends_name && !name.is_empty() {
                found.push((tag.clone(), std::mem::take(&mut name).to_ascii_lowercase()));
            }
            match c {
                '>' => break,
                '=' => in_value = true,
                '"' | '\'' if in_value => quote = Some(c),
                c if c.is_whitespace() => in_value = false,
                c if !in_value && c != '/' => name.push(c),
                _ => {}
            }
        }
    }
    found
}

#[test]
fn html_has_nothing_the_content_security_policy_would_block() {
    let pages: Vec<_> = ASSETS.iter().filter(|asset| asset.path.ends_with(".html")).collect();
    assert!(!pages.is_empty());
    for page in pages {
        let html = std::str::from_utf8(page.body).unwrap();
        let lower = html.to_ascii_lowercase();
        for (tag, attribute) in attribute_names(html) {
            assert!(!attribute.starts_with("on"), "{}: <{tag} {attribute}=…> is an inline handler", page.path);
            assert_ne!(attribute, "style", "{}: <{tag} style=…> is an inline style", page.path);
        }
        assert!(!lower.contains("<style"), "{}: inline <style>", page.path);
        assert!(!lower.contains("javascript:"), "{}: a javascript: URL", page.path);
        let mut scripts = lower.split("<script").skip(1);
        assert!(scripts.all(|script| {
            let opening_end = script.find('>').unwrap();
            script[..opening_end].contains("src=") && script[opening_end + 1..].trim_start().starts_with("</script>")
        }));
    }
}

#[test]
fn the_attribute_scanner_sees_handlers_and_styles() {
    let names = attribute_names("<p id=\"a>b\" onclick='x()'><span style=color:red hidden>");
    let names: Vec<_> = names.iter().map(|(_, name)| name.as_str()).collect();
    assert_eq!(names, ["id", "onclick", "style", "hidden"]);
}

#[test]
fn scripts_never_parse_html_from_strings_or_evaluate_code() {
    for asset in ASSETS.iter().filter(|asset| asset.path.ends_with(".js")) {
        let script = std::str::from_utf8(asset.body).unwrap();
        for banned in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
            ".style.",
            "setAttribute(\"style\"",
        ] {
            assert!(!script.contains(banned), "{} uses {banned}", asset.path);
        }
    }
}

#[test]
fn every_relative_import_names_an_embedded_module() {
    for asset in ASSETS.iter().filter(|asset| asset.path.ends_with(".js")) {
        let script = std::str::from_utf8(asset.body).unwrap();
        let directory = asset.path.rsplit_once('/').map_or("", |(dir, _)| dir);
        for piece in script.split("from \"").skip(1).chain(script.split("import(\"").skip(1)) {
            let Some(end) = piece.find('"') else { continue };
            let target = &piece[..end];
            let mut parts: Vec<&str> = directory.split('/').filter(|p| !p.is_empty()).collect();
            for segment in target.split('/') {
                match segment {
                    "." => {}
                    ".." => {
                        parts.pop();
                    }
                    other => parts.push(other),
                }
            }
            let resolved = parts.join("/");
            assert!(assets::find(&resolved).is_some(), "{} imports {target}, which is not embedded", asset.path);
        }
    }
}
