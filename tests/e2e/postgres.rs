//! The PostgreSQL store end to end: several gateway processes on one database, the database
//! unreachable at start and for a moment while serving, and the SQLite counterpart of the latter
//! (a lock held by another connection). tests/store.rs runs the store behaviour on both backends.

use crate::common;

use std::time::{Duration, Instant};

use common::{Harness, assert_error_shape};
use respgw_testkit::gateway::{GatewayProcess, http_client, post_json};
use respgw_testkit::postgres::{CutProxy, TestSchema};
use respgw_testkit::upstream::{ReplayUpstream, Step};
use serde_json::{Value, json};

fn text(t: &str) -> Step {
    Step::text(&[t], "stop", Some((10, 2)))
}

async fn gateway_on(upstream: &ReplayUpstream, db: &str, extra: &[&str]) -> GatewayProcess {
    let mut args = vec!["--db-path", db];
    args.extend_from_slice(extra);
    GatewayProcess::spawn(common::respgw_bin(), &common::serve_args(&upstream.base_url(), &args), &common::quiet_env())
        .await
        .expect("gateway starts")
}

async fn post(gw: &GatewayProcess, body: Value) -> (u16, Value) {
    let (status, _, json) =
        post_json(&format!("{}/v1/responses", gw.base_url()), &body).await.expect("request completes");
    (status, json)
}

async fn send(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.expect("request completes");
    let status = response.status().as_u16();
    let body = response.json().await.expect("a JSON body");
    (status, body)
}

async fn get(gw: &GatewayProcess, path: &str) -> (u16, Value) {
    send(http_client().get(format!("{}{path}", gw.base_url()))).await
}

/// The spec's error shape with the store's 503 (`store_unavailable`, retryable).
fn assert_store_unavailable(status: u16, body: &Value) {
    assert_eq!(status, 503, "{body}");
    assert_error_shape(body);
    assert_eq!(body["error"]["code"], "store_unavailable", "{body}");
    assert_eq!(body["error"]["type"], "api_error", "{body}");
}

#[tokio::test]
async fn two_gateways_share_one_database() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::postgres());
    let schema = TestSchema::create().await.unwrap();
    let upstream = ReplayUpstream::start().await.unwrap();
    upstream.add_scenario("m", vec![text("Paris."), text("Lyon.")]);
    // Two processes on different loopback ports, started together: both migrate the fresh schema.
    let url = schema.url();
    let (a, b) = tokio::join!(gateway_on(&upstream, &url, &[]), gateway_on(&upstream, &url, &[]));
    assert_ne!(a.base_url(), b.base_url());

    let (status, created) = post(&a, json!({"model":"m","input":"capital of France?"})).await;
    assert_eq!(status, 200, "{created}");
    let id = created["id"].as_str().unwrap();

    let (status, got) = get(&b, &format!("/v1/responses/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(got, created, "B returns exactly what A created");

    let (status, next) = post(&b, json!({"model":"m","input":"and the second city?","previous_response_id":id})).await;
    assert_eq!(status, 200, "{next}");
    let history = &upstream.requests("m")[1].body["messages"];
    let texts: Vec<&str> = history.as_array().unwrap().iter().filter_map(|m| m["content"].as_str()).collect();
    assert_eq!(texts, ["capital of France?", "Paris.", "and the second city?"], "{history}");

    let (status, items) = get(&b, &format!("/v1/responses/{}/input_items", next["id"].as_str().unwrap())).await;
    assert_eq!(status, 200);
    assert_eq!(items["data"].as_array().unwrap().len(), 1, "{items}");

    let (status, deleted) = send(http_client().delete(format!("{}/v1/responses/{id}", b.base_url()))).await;
    assert_eq!(status, 200);
    assert_eq!(deleted["deleted"], true);
    assert_eq!(get(&a, &format!("/v1/responses/{id}")).await.0, 404, "A sees B's delete");
    // The continuation stored through B keeps its history, readable through A.
    assert_eq!(get(&a, &format!("/v1/responses/{}", next["id"].as_str().unwrap())).await.0, 200);
}

#[tokio::test]
async fn an_unreachable_database_stops_the_start_naming_it_without_the_password() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::postgres());
    let upstream = ReplayUpstream::start().await.unwrap();
    // Nothing listens on loopback port 1: the connection is refused at once.
    let args = common::serve_args(&upstream.base_url(), &["--db-path", "postgres://app:s3cret@127.0.0.1:1/respgw"]);
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(common::respgw_bin())
            .args(&args)
            .envs(common::quiet_env())
            .stdin(std::process::Stdio::null())
            .output(),
    )
    .await
    .expect("respgw gives up")
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("127.0.0.1:1/respgw"), "names the database: {stderr}");
    assert!(stderr.to_lowercase().contains("refused"), "says why: {stderr}");
    assert!(!stderr.contains("s3cret") && !String::from_utf8_lossy(&out.stdout).contains("s3cret"), "{stderr}");
}

/// Retry `POST` until it succeeds (bounded): the pool replaces its broken connections on use.
async fn create_until_ok(gw: &GatewayProcess, body: &Value) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, json) = post(gw, body.clone()).await;
        if status == 200 {
            return json;
        }
        assert_store_unavailable(status, &json);
        assert!(Instant::now() < deadline, "the gateway did not recover: {json}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn postgres_briefly_unreachable_fails_cleanly_then_recovers() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::postgres());
    let schema = TestSchema::create().await.unwrap();
    let server: std::net::SocketAddr = {
        let url = url_of(&respgw_testkit::postgres::server_url());
        tokio::net::lookup_host(url).await.unwrap().next().unwrap()
    };
    let proxy = CutProxy::start(server).await.unwrap();
    let upstream = ReplayUpstream::start().await.unwrap();
    upstream.add_scenario("m", (0..20).map(|_| text("ok")).collect());
    let gw = gateway_on(&upstream, &schema.url_via(proxy.addr()), &["--db-pool-size", "2"]).await;

    let (status, before) = post(&gw, json!({"model":"m","input":"before"})).await;
    assert_eq!(status, 200, "{before}");
    let before_id = before["id"].as_str().unwrap();

    // As if the server restarted: open connections die, new ones are refused.
    proxy.cut();
    let (status, body) = post(&gw, json!({"model":"m","input":"during"})).await;
    assert_store_unavailable(status, &body);
    let (status, body) = get(&gw, &format!("/v1/responses/{before_id}")).await;
    assert_store_unavailable(status, &body);
    // A stream ends with its error event and `response.failed`, never cut off.
    let (status, sse) = respgw_testkit::gateway::post_sse(
        &format!("{}/v1/responses", gw.base_url()),
        &json!({"model":"m","input":"during","stream":true}),
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
    let events = respgw_testkit::sse::check_stream(&sse).unwrap_or_else(|e| panic!("{e:#}\n{sse}"));
    let kinds = common::kinds(&events);
    assert_eq!(kinds[kinds.len() - 2..], ["error", "response.failed"], "{kinds:?}");

    proxy.restore();
    create_until_ok(&gw, &json!({"model":"m","input":"after"})).await;
    let (status, got) = get(&gw, &format!("/v1/responses/{before_id}")).await;
    assert_eq!(status, 200);
    assert_eq!(got, before);
    assert!(!gw.stderr_text().contains("panicked"), "{}", gw.stderr_text());
}

#[tokio::test]
async fn sqlite_locked_for_a_moment_fails_cleanly_then_recovers() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::postgres());
    let h = Harness::start().await;
    h.scenario("m", (0..20).map(|_| text("ok")).collect());
    let (status, before) = h.create(json!({"model":"m","input":"before"})).await;
    assert_eq!(status, 200);

    // Another connection takes the write lock and keeps it past the store's 5 s lock budget.
    let db = h.gateway.workdir().join("respgw.db");
    let locker = rusqlite::Connection::open(&db).unwrap();
    locker.execute_batch("BEGIN IMMEDIATE; INSERT INTO items (item_id, body) VALUES ('lock', '{}');").unwrap();
    let (status, body) = h.create(json!({"model":"m","input":"during"})).await;
    assert_store_unavailable(status, &body);
    // Readers are not blocked by a writer (WAL).
    assert_eq!(h.get(&format!("/v1/responses/{}", before["id"].as_str().unwrap())).await.0, 200);

    locker.execute_batch("ROLLBACK").unwrap();
    drop(locker);
    let (status, after) = h.create(json!({"model":"m","input":"after"})).await;
    assert_eq!(status, 200, "{after}");
    assert_eq!(h.get(&format!("/v1/responses/{}", after["id"].as_str().unwrap())).await.0, 200);
    // The wait is on /metrics (the save that met the lock, and any background sweep that did).
    let waits = common::sample(&h.metrics().await, "gw_responses_store_lock_waits_total");
    assert!(waits >= 1.0, "{waits}");
    assert!(!h.gateway.stderr_text().contains("panicked"), "{}", h.gateway.stderr_text());
}

/// `host:port` of a `postgres://` URL.
fn url_of(url: &str) -> String {
    let url = url::Url::parse(url).unwrap();
    format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432))
}
