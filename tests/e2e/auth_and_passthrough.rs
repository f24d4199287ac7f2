//! API-key authentication and the pass-through routes (`/v1/models`, `/v1/chat/completions`).

use crate::common;

use common::{Harness, assert_error_shape};
use respgw_testkit::cassette::Cassette;
use respgw_testkit::gateway::http_client;
use respgw_testkit::upstream::Step;
use serde_json::json;

#[tokio::test]
async fn api_routes_need_a_configured_key_when_auth_is_on() {
    let h = Harness::start_with(&["--api-key", "sk-one", "--api-key", "sk-two"], &[]).await;
    h.scenario("m", vec![Step::text(&["ok"], "stop", None), Step::text(&["ok"], "stop", None)]);
    let url = h.url("/v1/responses");
    let body = json!({"model":"m","input":"x"});

    let (status, err) = h.send(http_client().post(&url).json(&body)).await;
    assert_eq!((status, err["error"]["type"].as_str()), (401, Some("authentication_error")));
    assert_error_shape(&err);
    let (status, _) = h.send(http_client().post(&url).bearer_auth("sk-wrong").json(&body)).await;
    assert_eq!(status, 401);
    for key in ["sk-one", "sk-two"] {
        let (status, _) = h.send(http_client().post(&url).bearer_auth(key).json(&body)).await;
        assert_eq!(status, 200, "{key}");
    }
    // Every API route is protected, including retrieval and pass-through.
    assert_eq!(h.get("/v1/responses/resp_x").await.0, 401);
    assert_eq!(h.get("/v1/models").await.0, 401);
    // Health never needs a key.
    assert_eq!(h.get("/health").await, (200, json!({})));
}

#[tokio::test]
async fn gw_api_keys_takes_a_comma_separated_list() {
    let h = Harness::start_with(&[], &[("GW_API_KEYS", "alpha,beta")]).await;
    h.scenario("m", vec![Step::text(&["ok"], "stop", None)]);
    assert_eq!(h.get("/v1/models").await.0, 401);
    let (status, _) = h
        .send(http_client().post(h.url("/v1/responses")).bearer_auth("beta").json(&json!({"model":"m","input":"x"})))
        .await;
    assert_eq!(status, 200);
    assert!(h.wait_for_log("authentication is on").await);
}

#[tokio::test]
async fn without_keys_auth_is_off_and_says_so() {
    let h = Harness::start().await;
    assert!(h.wait_for_log("authentication is OFF").await);
}

#[tokio::test]
async fn models_are_forwarded() {
    let h = Harness::start().await;
    h.scenario("served-model", vec![]);
    let (status, body) = h.get("/v1/models").await;
    assert_eq!(status, 200);
    assert_eq!(body["data"][0]["id"], "served-model");
    assert_eq!(h.upstream.all_requests().last().unwrap().path, "/v1/models");
}

#[tokio::test]
async fn chat_completions_stream_is_relayed_byte_for_byte() {
    let h = Harness::start().await;
    let rel = "chat_completion/text-single-stream.yaml";
    h.scenario("gpt", vec![Step::cassette(rel)]);
    let request = json!({"model":"gpt","messages":[{"role":"user","content":"hi"}],"stream":true,"extra_field":[1,2]});
    let response = http_client().post(h.url("/v1/chat/completions")).json(&request).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let bytes = response.bytes().await.unwrap();
    let expected = Cassette::load(respgw_testkit::cassettes_dir().join(rel)).unwrap().sse_bytes().unwrap();
    assert_eq!(bytes.as_ref(), expected.as_slice());
    // The request body arrived unchanged (unknown fields included).
    assert_eq!(h.upstream_bodies("gpt")[0], request);
}

#[tokio::test]
async fn upstream_error_bodies_pass_through_unchanged() {
    let h = Harness::start().await;
    let body = json!({"object":"error","message":"bad things","type":"BadRequestError","param":null,"code":400});
    h.scenario("bad", vec![Step::Status { status: 400, body: body.clone() }]);
    let (status, got) =
        h.send(http_client().post(h.url("/v1/chat/completions")).json(&json!({"model":"bad","messages":[]}))).await;
    assert_eq!((status, got), (400, body));
}

#[tokio::test]
async fn the_upstream_key_replaces_the_client_authorization() {
    let h = Harness::start_with(&["--upstream-api-key", "upstream-secret"], &[]).await;
    h.scenario("m", vec![Step::text(&["ok"], "stop", None), Step::text(&["ok"], "stop", None)]);
    let chat = json!({"model":"m","messages":[{"role":"user","content":"x"}],"stream":true});
    http_client().post(h.url("/v1/chat/completions")).bearer_auth("client-token").json(&chat).send().await.unwrap();
    h.create(json!({"model":"m","input":"x"})).await;
    for recorded in h.upstream.requests("m") {
        assert_eq!(recorded.headers["authorization"], "Bearer upstream-secret");
    }
}

#[tokio::test]
async fn the_gateway_api_key_never_reaches_the_upstream() {
    let h = Harness::start_with(&["--api-key", "gateway-key"], &[]).await;
    h.scenario("m", vec![Step::text(&["ok"], "stop", None)]);
    let chat = json!({"model":"m","messages":[{"role":"user","content":"x"}],"stream":true});
    let response =
        http_client().post(h.url("/v1/chat/completions")).bearer_auth("gateway-key").json(&chat).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.bytes().await.unwrap();
    assert!(h.upstream.requests("m")[0].headers.get("authorization").is_none());
}

#[tokio::test]
async fn without_any_keys_the_client_authorization_is_forwarded() {
    let h = Harness::start().await;
    h.scenario("m", vec![Step::text(&["ok"], "stop", None)]);
    let chat = json!({"model":"m","messages":[{"role":"user","content":"x"}],"stream":true});
    http_client().post(h.url("/v1/chat/completions")).bearer_auth("client-token").json(&chat).send().await.unwrap();
    assert_eq!(h.upstream.requests("m")[0].headers["authorization"], "Bearer client-token");
}

#[tokio::test]
async fn pass_through_reports_unreachable_and_slow_upstreams() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let gw = respgw_testkit::gateway::GatewayProcess::spawn(
        common::respgw_bin(),
        &common::serve_args(&format!("http://127.0.0.1:{port}/v1"), &["--upstream-ready-timeout", "0"]),
        &common::quiet_env(),
    )
    .await
    .unwrap();
    let response = http_client().get(format!("{}/v1/models", gw.base_url())).send().await.unwrap();
    assert_eq!(response.status(), 502);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "upstream_unavailable");

    let h = Harness::start_with(&["--upstream-timeout", "0.5"], &[]).await;
    h.scenario("slow", vec![Step::Hang]);
    let (status, body) =
        h.send(http_client().post(h.url("/v1/chat/completions")).json(&json!({"model":"slow","messages":[]}))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (504, Some("upstream_timeout")));
}
