//! The Files and vector-store APIs end to end, on both store backends: the official `openai` SDK
//! (`tests/sdk/files_check.py`: uploads, vector stores, `upload_and_poll`, batches, search with
//! filters and thresholds, two tenants, bad input; every body parsed strictly by the SDK's models),
//! the embedding requests the scripted upstream received, the upload limit on the wire,
//! `input_file` by `file_id` (in a response's input and in conversation items), and a restart
//! during ingestion.

use crate::common;

use std::time::Duration;

use common::{ALPHA, BETA, Backend, Harness, assert_error_shape, two_tenants};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use respgw_testkit::gateway::{GatewayProcess, http_client};
use respgw_testkit::postgres::TestSchema;
use respgw_testkit::upstream::{ReplayUpstream, Step};
use serde_json::{Value, json};

/// The upload limit the tests run with.
const MAX_FILE_BYTES: usize = 64 * 1024;
/// The embedding model and key the gateway is told to use.
const EMBEDDING_MODEL: &str = "embed-small";
const EMBEDDING_KEY: &str = "sk-embeddings-0123";

/// A `multipart/form-data` body: text fields, then one file part; its boundary.
fn multipart(fields: &[(&str, &str)], file: Option<(&str, &[u8])>) -> (String, Vec<u8>) {
    let boundary = "respgw-test-boundary-7d1f".to_owned();
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend_from_slice(
            format!("--{boundary}\r\ncontent-disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").as_bytes(),
        );
    }
    if let Some((filename, bytes)) = file {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\ncontent-disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n\
                 content-type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (boundary, body)
}

async fn upload(h: &Harness, key: &str, filename: &str, bytes: &[u8], purpose: &str) -> (u16, Value) {
    let (boundary, body) = multipart(&[("purpose", purpose)], Some((filename, bytes)));
    h.send(
        http_client()
            .post(h.url("/v1/files"))
            .bearer_auth(key)
            .header("content-type", format!("multipart/form-data; boundary={boundary}"))
            .body(body),
    )
    .await
}

async fn get_as(h: &Harness, key: &str, path: &str) -> (u16, Value) {
    h.send(http_client().get(h.url(path)).bearer_auth(key)).await
}

async fn post_as(h: &Harness, key: &str, path: &str, body: Value) -> (u16, Value) {
    h.send(http_client().post(h.url(path)).bearer_auth(key).json(&body)).await
}

/// A gateway with the tenants `alpha` and `beta`, the test upload limit and the embedding model.
async fn start(backend: Backend, dir: &std::path::Path, extra: &[&str]) -> common::BackendHarness {
    let keys = two_tenants(dir, "");
    let limit = MAX_FILE_BYTES.to_string();
    let mut args = vec![
        "--api-keys-file",
        keys.as_str(),
        "--max-file-bytes",
        limit.as_str(),
        "--embedding-model",
        EMBEDDING_MODEL,
        "--embedding-api-key",
        EMBEDDING_KEY,
        "--embedding-batch-size",
        "2",
    ];
    args.extend_from_slice(extra);
    Harness::start_on_with(backend, &args).await
}

crate::on_both_backends!(the_sdk_uploads_indexes_and_searches_files);

async fn the_sdk_uploads_indexes_and_searches_files(backend: Backend) {
    respgw_testkit::skip_unless!(common::python_env());
    let dir = tempfile::tempdir().unwrap();
    let h = start(backend, dir.path(), &[]).await;
    let limit = MAX_FILE_BYTES.to_string();
    let run = common::run_sdk_script(
        "files_check.py",
        h.gateway.base_url(),
        &[("RESPGW_ALPHA_KEY", ALPHA), ("RESPGW_BETA_KEY", BETA), ("RESPGW_MAX_FILE_BYTES", &limit)],
    )
    .await;
    assert!(
        run.succeeded,
        "SDK checks failed:\n{}\n{}\n--- gateway log ---\n{}",
        run.stdout,
        run.stderr,
        h.gateway.stderr_text()
    );
    assert!(run.stdout.contains("files checks passed"), "{}", run.stdout);

    // What the embedder was asked: the configured model and key, batches of at most 2 inputs,
    // and the chunks' text (Poseidonia is in atlas.md) as well as the search queries.
    let embeddings = h.upstream.embedding_requests();
    assert!(!embeddings.is_empty(), "no embedding request reached the upstream");
    let mut inputs = Vec::new();
    for request in &embeddings {
        assert_eq!(request.path, "/v1/embeddings", "{request:?}");
        let auth = request.headers.get("authorization").and_then(|v| v.to_str().ok());
        assert_eq!(auth, Some(format!("Bearer {EMBEDDING_KEY}").as_str()));
        let batch = match &request.body["input"] {
            Value::Array(texts) => texts.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
            Value::String(text) => vec![text.clone()],
            other => panic!("unexpected input {other}"),
        };
        assert!((1..=2).contains(&batch.len()), "batch of {}: {:?}", batch.len(), request.body);
        inputs.extend(batch);
    }
    assert!(inputs.iter().any(|t| t.contains("Poseidonia")), "{inputs:?}");
    assert!(inputs.iter().any(|t| t == "capital of Atlantis"), "{inputs:?}");
    // No model was asked anything.
    assert!(h.upstream.all_requests().iter().all(|r| r.path != "/v1/chat/completions"));
}

crate::on_both_backends!(an_oversized_upload_is_refused_while_streaming_and_stores_nothing);

async fn an_oversized_upload_is_refused_while_streaming_and_stores_nothing(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let h = start(backend, dir.path(), &[]).await;
    let big = vec![b'a'; MAX_FILE_BYTES + 1];
    let (status, body) = upload(&h, ALPHA, "big.txt", &big, "assistants").await;
    assert_eq!(status, 413, "{body}");
    assert_error_shape(&body);
    assert_eq!(
        (body["error"]["param"].as_str(), body["error"]["code"].as_str()),
        (Some("file"), Some("file_too_large"))
    );
    // Exactly at the limit is accepted.
    let (status, body) = upload(&h, ALPHA, "fits.txt", &big[1..], "assistants").await;
    assert_eq!(status, 200, "{body}");
    let (_, listed) = get_as(&h, ALPHA, "/v1/files").await;
    let names: Vec<&str> = listed["data"].as_array().unwrap().iter().filter_map(|f| f["filename"].as_str()).collect();
    assert_eq!(names, ["fits.txt"], "{listed}");
}

#[tokio::test]
async fn uploads_check_their_form_and_type_before_storing() {
    let dir = tempfile::tempdir().unwrap();
    let h = start(Backend::Sqlite, dir.path(), &[]).await;
    let cases = [
        ("a.md", &b"# hi"[..], "batch", "purpose", None),
        ("a.exe", &b"MZ\x90\x00\x03binary"[..], "assistants", "file", Some("unsupported_file")),
        ("photo.png", &b"\x89PNG\r\n\x1a\nxxxx"[..], "assistants", "file", Some("unsupported_file")),
        ("fake.pdf", &b"not a pdf at all"[..], "assistants", "file", Some("unsupported_file")),
        ("empty.txt", &b""[..], "assistants", "file", None),
    ];
    for (name, bytes, purpose, param, code) in cases {
        let (status, body) = upload(&h, ALPHA, name, bytes, purpose).await;
        assert_eq!(status, 400, "{name}: {body}");
        assert_error_shape(&body);
        assert_eq!(body["error"]["param"], param, "{name}: {body}");
        if let Some(code) = code {
            assert_eq!(body["error"]["code"], code, "{name}: {body}");
        }
    }
    // A form without a file, and a body that is not a form.
    let (boundary, body) = multipart(&[("purpose", "assistants")], None);
    let (status, reply) = h
        .send(
            http_client()
                .post(h.url("/v1/files"))
                .bearer_auth(ALPHA)
                .header("content-type", format!("multipart/form-data; boundary={boundary}"))
                .body(body),
        )
        .await;
    assert_eq!((status, reply["error"]["param"].as_str()), (400, Some("file")), "{reply}");
    let (status, reply) = post_as(&h, ALPHA, "/v1/files", json!({"purpose":"assistants"})).await;
    assert_eq!(status, 400, "{reply}");
    assert_error_shape(&reply);
    // An image is a `user_data` upload (for input_file), not an `assistants` one.
    let (status, body) = upload(&h, ALPHA, "photo.png", b"\x89PNG\r\n\x1a\nxxxx", "user_data").await;
    assert_eq!(status, 200, "{body}");
    let (_, listed) = get_as(&h, ALPHA, "/v1/files").await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 1, "only the image is stored: {listed}");
}

#[tokio::test]
async fn an_input_file_reads_the_tenants_upload_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let h = start(Backend::Sqlite, dir.path(), &[]).await;
    h.scenario("m", (0..3).map(|_| Step::text(&["Read it."], "stop", None)).collect());
    let sentence = "The lighthouse keeper counts seventeen gulls every morning.";
    let (status, file) = upload(&h, ALPHA, "keeper.md", sentence.as_bytes(), "user_data").await;
    assert_eq!(status, 200, "{file}");
    let id = file["id"].as_str().unwrap();
    let part = json!([{"type":"input_text","text":"Summarise."},{"type":"input_file","file_id":id}]);

    let (status, response) =
        post_as(&h, ALPHA, "/v1/responses", json!({"model":"m","input":[{"role":"user","content":part}]})).await;
    assert_eq!(status, 200, "{response}");
    common::assert_valid_response(&response);
    let sent = h.upstream_bodies("m")[0]["messages"][0]["content"].to_string();
    assert!(sent.contains(sentence) && sent.contains("file: keeper.md"), "{sent}");

    // In a conversation's items too.
    let (status, conversation) =
        post_as(&h, ALPHA, "/v1/conversations", json!({"items":[{"type":"message","role":"user","content":part}]}))
            .await;
    assert_eq!(status, 200, "{conversation}");
    let (status, response) =
        post_as(&h, ALPHA, "/v1/responses", json!({"model":"m","conversation":conversation["id"],"input":"and then?"}))
            .await;
    assert_eq!(status, 200, "{response}");
    assert!(h.upstream_bodies("m")[1]["messages"].to_string().contains(sentence));

    // Another tenant's file id is an unknown one, named by its part; the model never sees it.
    for key in [BETA, ALPHA] {
        let file_id = if key == BETA { id } else { "file-0000" };
        let input = json!([{"role":"user","content":[{"type":"input_text","text":"x"},{"type":"input_file","file_id":file_id}]}]);
        let (status, body) = post_as(&h, key, "/v1/responses", json!({"model":"m","input":input})).await;
        assert_eq!(status, 400, "{body}");
        assert_error_shape(&body);
        assert_eq!(body["error"]["param"], "input[0].content[1]", "{body}");
    }
    assert_eq!(h.upstream_bodies("m").len(), 2, "no third model call");
}

async fn send_as_alpha(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.bearer_auth(ALPHA).send().await.expect("request completes");
    let status = response.status().as_u16();
    (status, response.json::<Value>().await.expect("a JSON body"))
}

crate::on_both_backends!(a_restart_during_ingestion_never_leaves_a_file_in_progress);

/// The embedder is slow; the gateway is stopped (SIGTERM) while it ingests a file and started
/// again on the same store: the file ends `completed` (or `failed` with `last_error`), never
/// stuck `in_progress`.
async fn a_restart_during_ingestion_never_leaves_a_file_in_progress(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path(), "");
    let schema = match backend {
        Backend::Postgres => Some(TestSchema::create().await.expect("a test schema")),
        Backend::Sqlite => None,
    };
    let db = schema.as_ref().map_or_else(|| dir.path().join("gw.db").display().to_string(), TestSchema::url);
    let upstream = ReplayUpstream::start().await.unwrap();
    let args = common::serve_args(
        &upstream.base_url(),
        &["--db-path", &db, "--api-keys-file", &keys, "--embedding-model", EMBEDDING_MODEL],
    );
    let env = common::quiet_env();
    let spawn = || GatewayProcess::spawn_in(dir.path(), common::respgw_bin(), &args, &env);
    let first = spawn().await.expect("gateway starts");
    // Longer than the first gateway lives: its embedding request is still open when it stops.
    upstream.set_embedding_delay(Duration::from_secs(120));
    let (boundary, body) = multipart(&[("purpose", "assistants")], Some(("slow.md", b"Slow rivers carve canyons.")));
    let (status, file) = send_as_alpha(
        http_client()
            .post(format!("{}/v1/files", first.base_url()))
            .header("content-type", format!("multipart/form-data; boundary={boundary}"))
            .body(body),
    )
    .await;
    assert_eq!(status, 200, "{file}");
    let (status, store) = send_as_alpha(
        http_client().post(format!("{}/v1/vector_stores", first.base_url())).json(&json!({"file_ids":[file["id"]]})),
    )
    .await;
    assert_eq!(status, 200, "{store}");
    // Stop the gateway while the embedder holds the file's chunks.
    let started = tokio::time::Instant::now();
    while upstream.embedding_requests().is_empty() && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!upstream.embedding_requests().is_empty(), "ingestion reached the embedder");
    kill(Pid::from_raw(first.pid() as libc::pid_t), Signal::SIGTERM).expect("SIGTERM to the gateway");
    drop(first);
    upstream.set_embedding_delay(Duration::ZERO);
    let asked_before_restart = upstream.embedding_requests().len();

    let second = spawn().await.expect("gateway restarts");
    let path = format!(
        "{}/v1/vector_stores/{}/files/{}",
        second.base_url(),
        store["id"].as_str().unwrap(),
        file["id"].as_str().unwrap()
    );
    let mut last = Value::Null;
    // The stopped worker's lease lapses, then the restarted one claims the file again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while tokio::time::Instant::now() < deadline {
        let (status, body) = send_as_alpha(http_client().get(&path)).await;
        assert_eq!(status, 200, "{body}");
        last = body;
        if last["status"] != "in_progress" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    match last["status"].as_str() {
        Some("completed") => {
            assert!(last["last_error"].is_null(), "{last}");
            assert!(upstream.embedding_requests().len() > asked_before_restart, "the restarted gateway embedded it");
        }
        Some("failed") => assert!(last["last_error"]["message"].is_string(), "{last}"),
        _ => panic!("the file is still {last}\n{}", second.stderr_text()),
    }
    drop(second);
    drop(schema);
}
