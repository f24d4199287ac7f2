//! `input_file` content parts: PDFs (text extracted by the gateway), text files and images sent as
//! `file_data` or fetched from a `file_url` (under the address rules, on a loopback fixture
//! exempted by flag) reach the model; what cannot be read is a 400 naming the part; a
//! continuation shows the model the same file again without fetching it; the stored input keeps
//! the part as the client sent it. `input_image` URLs go the same way: fetched by the gateway
//! under the same rules and sent to the model as `data:` URLs, never as URLs to fetch.

use crate::common;

use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use common::{Harness, assert_valid_response};
use respgw_testkit::pdf;
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

const SENTENCE: &str = "The lighthouse keeper counts seventeen gulls every morning.";

/// A 1×1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0d, 0x49,
    0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0, 0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d,
    0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn user_with(parts: Value) -> Value {
    json!([{"role":"user","content":parts}])
}

/// The user message content the upstream received in its `n`th request of `model`.
fn received_user_content(h: &Harness, model: &str, n: usize) -> Value {
    let bodies = h.upstream_bodies(model);
    let messages =
        bodies.get(n).unwrap_or_else(|| panic!("no request {n} for {model}: {bodies:?}"))["messages"].clone();
    messages
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .map(|m| m["content"].clone())
        .unwrap_or(Value::Null)
}

fn ok_scenario(h: &Harness, model: &str, turns: usize) {
    h.scenario(model, (0..turns).map(|_| Step::text(&["Read it."], "stop", None)).collect());
}

#[tokio::test]
async fn a_pdf_reaches_the_model_as_its_text() {
    let h = Harness::start().await;
    ok_scenario(&h, "pdf", 1);
    let data = format!("data:application/pdf;base64,{}", b64(&pdf::text_pages(&[SENTENCE])));
    let (status, body) = h
        .create(json!({"model":"pdf","input":user_with(json!([
            {"type":"input_text","text":"Summarise the file."},
            {"type":"input_file","filename":"x.pdf","file_data":data}]))}))
        .await;
    assert_eq!(status, 200, "{body}");
    let content = received_user_content(&h, "pdf", 0);
    let text = content.as_str().unwrap_or_else(|| panic!("text-only content: {content}"));
    assert!(text.starts_with("Summarise the file."), "{text}");
    assert!(text.contains(SENTENCE), "the extracted sentence reached the model: {text}");
    assert!(text.contains("file: x.pdf"), "headed with its name: {text}");
}

/// Readers rebuild a missing cross-reference table from the objects in the file; so does the
/// gateway.
#[tokio::test]
async fn a_pdf_without_a_cross_reference_table_reaches_the_model_as_its_text() {
    let h = Harness::start().await;
    ok_scenario(&h, "no-xref", 1);
    let bytes = pdf::document_without_xref(&pdf::text_pages_objects(&[SENTENCE]));
    let data = format!("data:application/pdf;base64,{}", b64(&bytes));
    let (status, body) = h
        .create(json!({"model":"no-xref","input":user_with(json!([
            {"type":"input_text","text":"Summarise the file."},
            {"type":"input_file","filename":"bare.pdf","file_data":data}]))}))
        .await;
    assert_eq!(status, 200, "{body}");
    let text = received_user_content(&h, "no-xref", 0).as_str().unwrap_or_default().to_owned();
    assert!(text.contains(SENTENCE) && text.contains("file: bare.pdf"), "{text}");
}

#[tokio::test]
async fn a_damaged_pdf_is_a_400_naming_the_part() {
    let h = Harness::start().await;
    let whole = pdf::text_pages(&[SENTENCE]);
    for (what, bytes) in [("truncated", &whole[..whole.len() / 3]), ("garbage", &b"%PDF-1.7\n\x00\x01garbage"[..])] {
        let data = format!("data:application/pdf;base64,{}", b64(bytes));
        let (status, body) = h
            .create(json!({"model":"m","input":user_with(json!([
                {"type":"input_text","text":"Summarise the file."},
                {"type":"input_file","filename":"bad.pdf","file_data":data}]))}))
            .await;
        assert_eq!((status, body["error"]["param"].as_str()), (400, Some("input[0].content[1]")), "{what}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("the PDF could not be read (it is damaged, or not a PDF)"), "{what}: {body}");
    }
    assert!(h.upstream_bodies("m").is_empty(), "nothing reached the model");
}

#[tokio::test]
async fn pdf_pages_past_the_limit_are_left_out_and_the_model_is_told() {
    let h = Harness::start_with(&["--input-file-max-pdf-pages", "1"], &[]).await;
    ok_scenario(&h, "pages", 1);
    let data = format!("data:application/pdf;base64,{}", b64(&pdf::text_pages(&[SENTENCE, "Page two is never read."])));
    let (status, body) =
        h.create(json!({"model":"pages","input":user_with(json!([{"type":"input_file","filename":"two.pdf","file_data":data}]))})).await;
    assert_eq!(status, 200, "{body}");
    let text = received_user_content(&h, "pages", 0).as_str().unwrap_or_default().to_owned();
    assert!(text.contains(SENTENCE) && !text.contains("Page two"), "{text}");
    assert!(text.contains("first 1 of 2 pages"), "{text}");
}

#[tokio::test]
async fn a_text_file_reaches_the_model_and_long_text_is_cut() {
    let h = Harness::start_with(&["--input-file-max-text-kb", "1"], &[]).await;
    ok_scenario(&h, "text", 2);
    let (status, body) = h
        .create(json!({"model":"text","input":user_with(json!([
            {"type":"input_file","filename":"notes.md","file_data":b64("# Notes\n\nCafé opens at nine.".as_bytes())}]))}))
        .await;
    assert_eq!(status, 200, "{body}");
    let text = received_user_content(&h, "text", 0).as_str().unwrap_or_default().to_owned();
    assert!(text.contains("file: notes.md") && text.contains("Café opens at nine."), "{text}");
    let long = "a".repeat(3000);
    let (status, _) = h
        .create(json!({"model":"text","input":user_with(json!([
            {"type":"input_file","file_data":format!("data:text/plain;base64,{}", b64(long.as_bytes()))}]))}))
        .await;
    assert_eq!(status, 200);
    let text = received_user_content(&h, "text", 1).as_str().unwrap_or_default().to_owned();
    assert!(text.contains("the first 1024 of 3000 bytes are shown") && text.len() < 1300, "{text}");
}

#[tokio::test]
async fn an_image_file_is_sent_as_an_image() {
    let h = Harness::start().await;
    ok_scenario(&h, "image", 1);
    let (status, body) = h
        .create(json!({"model":"image","input":user_with(json!([
            {"type":"input_text","text":"What is this?"},
            {"type":"input_file","filename":"dot.png","file_data":b64(PNG)}]))}))
        .await;
    assert_eq!(status, 200, "{body}");
    let content = received_user_content(&h, "image", 0);
    assert_eq!(content[0], json!({"type":"text","text":"What is this?"}));
    assert_eq!(content[1]["type"], "image_url");
    assert_eq!(content[1]["image_url"]["url"], format!("data:image/png;base64,{}", b64(PNG)));
}

/// A loopback file server counting its requests.
async fn file_server() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://127.0.0.1:{}", listener.local_addr().expect("addr").port());
    let app = axum::Router::new().fallback(serve_file).with_state(seen.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, seen)
}

async fn serve_file(State(seen): State<Arc<Mutex<Vec<String>>>>, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    seen.lock().expect("lock").push(path.clone());
    match path.as_str() {
        "/docs/report.pdf" => {
            ([(header::CONTENT_TYPE, "application/pdf")], pdf::text_pages(&[SENTENCE])).into_response()
        }
        "/big.txt" => ([(header::CONTENT_TYPE, "text/plain")], "b".repeat(4096)).into_response(),
        "/archive" => ([(header::CONTENT_TYPE, "application/zip")], b"PK\x03\x04".to_vec()).into_response(),
        "/dot.png" => ([(header::CONTENT_TYPE, "image/png")], PNG.to_vec()).into_response(),
        _ => (axum::http::StatusCode::NOT_FOUND, "no such file").into_response(),
    }
}

#[tokio::test]
async fn a_file_url_is_fetched_once_and_continuations_reuse_its_text() {
    let (base, seen) = file_server().await;
    let h = Harness::start_with(&["--input-file-fetch-exempt-host", "127.0.0.1"], &[]).await;
    ok_scenario(&h, "url", 2);
    let part = json!({"type":"input_file","file_url":format!("{base}/docs/report.pdf")});
    let (status, first) = h.create(json!({"model":"url","input":user_with(json!([part.clone()]))})).await;
    assert_eq!(status, 200, "{first}");
    let text = received_user_content(&h, "url", 0).as_str().unwrap_or_default().to_owned();
    assert!(text.contains(SENTENCE) && text.contains("file: report.pdf"), "{text}");

    let (status, second) =
        h.create(json!({"model":"url","input":"And again?","previous_response_id":first["id"]})).await;
    assert_eq!(status, 200, "{second}");
    let text = received_user_content(&h, "url", 1).as_str().unwrap_or_default().to_owned();
    assert!(text.contains(SENTENCE), "the continuation shows the model the file again: {text}");
    assert_eq!(seen.lock().expect("lock").len(), 1, "the file was fetched once");

    // The stored input is the part as sent (no gateway state), and it validates as an item.
    let (status, listing) = h.get(&format!("/v1/responses/{}/input_items", first["id"].as_str().unwrap())).await;
    assert_eq!(status, 200, "{listing}");
    assert_eq!(listing["data"][0]["content"][0], part, "{listing}");
    let mut as_output = first.clone();
    as_output["output"] = listing["data"].clone();
    assert_valid_response(&as_output);
}

#[tokio::test]
async fn file_urls_are_refused_when_the_address_rules_say_so_or_they_fail() {
    let (base, seen) = file_server().await;
    let h = Harness::start_with(&["--input-file-max-kb", "1"], &[]).await;
    let url = |path: &str| json!({"type":"input_file","file_url":format!("{base}{path}")});
    let (status, body) = h
        .create(
            json!({"model":"m","input":user_with(json!([{"type":"input_text","text":"a"}, url("/docs/report.pdf")]))}),
        )
        .await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("input[0].content[1]")), "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("the address is not allowed"), "{message}");
    assert!(seen.lock().expect("lock").is_empty(), "the loopback server was never contacted");
    let (status, body) =
        h.create(json!({"model":"m","input":user_with(json!([{"type":"input_file","file_url":"http://localhost:9/a.txt"}]))})).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("input[0].content[0]")), "{body}");

    let exempt =
        Harness::start_with(&["--input-file-fetch-exempt-host", "127.0.0.1", "--input-file-max-kb", "1"], &[]).await;
    for (path, says) in
        [("/missing.pdf", "404"), ("/archive", "application/zip"), ("/big.txt", "input file size limit")]
    {
        let (status, body) = exempt.create(json!({"model":"m","input":user_with(json!([url(path)]))})).await;
        assert_eq!((status, body["error"]["param"].as_str()), (400, Some("input[0].content[0]")), "{path}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{path}: {message}");
    }
    assert!(exempt.upstream.all_requests().iter().all(|r| r.path == "/v1/models"), "nothing reached the model");
}

fn image_at(url: &str) -> Value {
    user_with(json!([{"type":"input_text","text":"What is this?"},{"type":"input_image","image_url":url}]))
}

#[tokio::test]
async fn an_image_url_on_loopback_is_refused_and_the_upstream_sees_nothing() {
    let (base, seen) = file_server().await;
    let h = Harness::start().await;
    ok_scenario(&h, "image", 1);
    let (status, body) = h.create(json!({"model":"image","input":image_at(&format!("{base}/dot.png"))})).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("input[0].content[1]")), "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("image_url could not be fetched") && message.contains("not allowed"), "{message}");
    let (status, body) = h.create(json!({"model":"image","input":image_at("http://localhost:9/cat.png")})).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("input[0].content[1]")), "{body}");
    assert!(seen.lock().expect("lock").is_empty(), "the loopback server was never contacted");
    assert!(h.upstream_bodies("image").is_empty(), "nothing reached the model server");
}

#[tokio::test]
async fn an_allowed_image_url_reaches_the_model_as_a_data_url_fetched_once() {
    let (base, seen) = file_server().await;
    let h = Harness::start_with(&["--input-file-fetch-exempt-host", "127.0.0.1"], &[]).await;
    ok_scenario(&h, "image", 2);
    let url = format!("{base}/dot.png");
    let (status, first) = h.create(json!({"model":"image","input":image_at(&url)})).await;
    assert_eq!(status, 200, "{first}");
    let sent =
        json!({"type":"image_url","image_url":{"url":format!("data:image/png;base64,{}", b64(PNG)),"detail":"auto"}});
    assert_eq!(received_user_content(&h, "image", 0)[1], sent);
    let (status, second) =
        h.create(json!({"model":"image","input":"And now?","previous_response_id":first["id"]})).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(received_user_content(&h, "image", 1)[1], sent, "the continuation sends the same image");
    assert_eq!(seen.lock().expect("lock").len(), 1, "the image was fetched once");
    // The stored input is the part as the client sent it.
    let (status, listing) = h.get(&format!("/v1/responses/{}/input_items", first["id"].as_str().unwrap())).await;
    assert_eq!(status, 200, "{listing}");
    assert_eq!(listing["data"][0]["content"][1], json!({"type":"input_image","image_url":url,"detail":"auto"}));
}

#[tokio::test]
async fn an_image_url_that_is_not_an_image_is_refused() {
    let (base, _) = file_server().await;
    let h = Harness::start_with(&["--input-file-fetch-exempt-host", "127.0.0.1"], &[]).await;
    for (path, says) in [("/big.txt", "not an image"), ("/archive", "application/zip"), ("/missing.png", "404")] {
        let (status, body) = h.create(json!({"model":"image","input":image_at(&format!("{base}{path}"))})).await;
        assert_eq!((status, body["error"]["param"].as_str()), (400, Some("input[0].content[1]")), "{path}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{path}: {message}");
    }
    assert!(h.upstream_bodies("image").is_empty(), "nothing reached the model server");
}

#[tokio::test]
async fn oversize_file_data_names_the_limit() {
    let h = Harness::start_with(&["--input-file-max-kb", "1"], &[]).await;
    let data = format!("data:text/plain;base64,{}", b64(&[b'a'; 2048]));
    let (status, body) =
        h.create(json!({"model":"m","input":user_with(json!([{"type":"input_file","file_data":data}]))})).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("input[0].content[0]")), "{body}");
    assert_eq!(body["error"]["code"], "limit_exceeded");
    assert!(body["error"]["message"].as_str().unwrap_or_default().contains("at most 1024 bytes"), "{body}");
}
