//! Several tenants on one gateway (`--api-keys-file`): another tenant's response, conversation
//! or container is exactly an unknown one, and the upstream never hears of it; keys rotate with a
//! SIGHUP; limits answer 429 for one tenant only; token counters add up to the responses' usage.
//! The cross-tenant checks also run on two gateway processes sharing PostgreSQL.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Harness, assert_error_shape, serve_args};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use respgw_testkit::gateway::{GatewayProcess, http_client};
use respgw_testkit::postgres::TestSchema;
use respgw_testkit::upstream::{ReplayUpstream, Step};
use serde_json::{Value, json};

const ALPHA: &str = "sk-alpha-0123456789";
const BETA: &str = "sk-beta-0123456789";

/// A `[[tenant]]` entry: its name, keys and extra TOML lines (limits).
fn tenant(name: &str, keys: &[&str], extra: &str) -> String {
    let hashes: Vec<String> = keys.iter().map(|k| format!("\"{}\"", respgw_server::hash_key(k))).collect();
    format!("[[tenant]]\nname = \"{name}\"\nkeys = [{}]\n{extra}\n", hashes.join(", "))
}

fn write_keys(path: &Path, tenants: &[String]) {
    std::fs::write(path, tenants.concat()).expect("the keys file is written");
}

/// A keys file with tenants `alpha` and `beta`, in `dir`.
fn two_tenants(dir: &Path) -> PathBuf {
    let path = dir.join("keys.toml");
    write_keys(&path, &[tenant("alpha", &[ALPHA], ""), tenant("beta", &[BETA], "")]);
    path
}

/// A client opening a new connection per request, so both workers serve the test.
fn fresh_connections() -> reqwest::Client {
    http_client();
    reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).build().expect("client")
}

/// One API call as a tenant: status, `Retry-After` and JSON body.
async fn call(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    key: &str,
    body: Option<&Value>,
) -> (u16, Option<String>, Value) {
    let mut request = client.request(method, url).bearer_auth(key);
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.expect("request completes");
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let text = response.text().await.expect("body reads");
    let json = serde_json::from_str(&text).unwrap_or_else(|_| panic!("non-JSON reply ({status}): {text}"));
    (status, retry_after, json)
}

fn text(t: &str, usage: (u64, u64)) -> Step {
    Step::text(&[t], "stop", Some(usage))
}

/// What alpha stored: a response continued once, a conversation with a response in it, and a
/// background response still running.
struct AlphasState {
    response: String,
    continued: String,
    conversation: String,
    item: String,
    background: String,
}

/// Alpha stores a response, its continuation and a conversation (through `base`).
async fn alpha_stores(client: &reqwest::Client, base: &str) -> AlphasState {
    let post = |path: &str, body: Value| {
        let url = format!("{base}{path}");
        async move { call(client, reqwest::Method::POST, url, ALPHA, Some(&body)).await }
    };
    let (status, _, first) = post("/v1/responses", json!({"model":"alpha-m","input":"secret one"})).await;
    assert_eq!(status, 200, "{first}");
    let response = first["id"].as_str().expect("an id").to_owned();
    let (status, _, second) =
        post("/v1/responses", json!({"model":"alpha-m","input":"secret two","previous_response_id":response})).await;
    assert_eq!(status, 200, "{second}");
    let continued = second["id"].as_str().expect("an id").to_owned();
    let (status, _, conversation) = post(
        "/v1/conversations",
        json!({"items":[{"type":"message","role":"user","content":"secret three","id":"msg_alpha_1"}]}),
    )
    .await;
    assert_eq!(status, 200, "{conversation}");
    let conversation = conversation["id"].as_str().expect("an id").to_owned();
    let (status, _, in_conversation) =
        post("/v1/responses", json!({"model":"alpha-m","input":"secret four","conversation":conversation})).await;
    assert_eq!(status, 200, "{in_conversation}");
    let (status, _, queued) =
        post("/v1/responses", json!({"model":"alpha-bg","input":"secret five","background":true})).await;
    assert_eq!(status, 200, "{queued}");
    let background = queued["id"].as_str().expect("an id").to_owned();
    AlphasState { response, continued, conversation, item: "msg_alpha_1".into(), background }
}

/// Beta's answer for each of alpha's ids is the answer for an id nobody stored — status and body,
/// the id aside — and the upstream hears nothing of it. Then alpha still finds everything.
async fn beta_sees_unknown_ids(client: &reqwest::Client, alpha_base: &str, beta_base: &str, upstream: &ReplayUpstream) {
    let state = alpha_stores(client, alpha_base).await;
    // Alpha's background run reaches the upstream on its own time: count from after that.
    let start = Instant::now();
    while upstream.requests("alpha-bg").is_empty() {
        assert!(start.elapsed() < Duration::from_secs(10), "the background run never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let upstream_calls = upstream.all_requests().len();
    let unknown_response = "resp_019abcde-0000-7000-8000-000000000000";
    let unknown_conversation = "conv_019abcde-0000-7000-8000-000000000000";
    use reqwest::Method as M;
    // (method, path with {r}/{c}/{i}, body), `{r}` a response id, `{c}` a conversation id.
    let probes: Vec<(M, &str, Option<Value>)> = vec![
        (M::GET, "/v1/responses/{r}", None),
        (M::GET, "/v1/responses/{r}/input_items", None),
        (M::DELETE, "/v1/responses/{r}", None),
        (M::POST, "/v1/responses", Some(json!({"model":"beta-m","input":"hi","previous_response_id":"{r}"}))),
        (
            M::POST,
            "/v1/responses",
            Some(json!({"model":"beta-m","input":"hi","previous_response_id":"{r}","stream":true})),
        ),
        (
            M::POST,
            "/v1/responses/input_tokens",
            Some(json!({"model":"beta-m","input":"hi","previous_response_id":"{r}"})),
        ),
        (M::POST, "/v1/responses", Some(json!({"model":"beta-m","input":"hi","conversation":"{c}"}))),
        (M::GET, "/v1/conversations/{c}", None),
        (M::POST, "/v1/conversations/{c}", Some(json!({"metadata":{"k":"v"}}))),
        (M::GET, "/v1/conversations/{c}/items", None),
        (
            M::POST,
            "/v1/conversations/{c}/items",
            Some(json!({"items":[{"type":"message","role":"user","content":"x"}]})),
        ),
        (M::GET, "/v1/conversations/{c}/items/{i}", None),
        (M::DELETE, "/v1/conversations/{c}/items/{i}", None),
        (M::DELETE, "/v1/conversations/{c}", None),
    ];
    for response_id in [&state.response, &state.continued] {
        for (method, path, body) in &probes {
            let fill =
                |text: &str, r: &str, c: &str| text.replace("{r}", r).replace("{c}", c).replace("{i}", &state.item);
            let body_for = |r: &str, c: &str| {
                body.as_ref().map(|b| serde_json::from_str(&fill(&b.to_string(), r, c)).expect("JSON"))
            };
            let theirs = call(
                client,
                method.clone(),
                format!("{beta_base}{}", fill(path, response_id, &state.conversation)),
                BETA,
                body_for(response_id, &state.conversation).as_ref(),
            )
            .await;
            let unknown = call(
                client,
                method.clone(),
                format!("{beta_base}{}", fill(path, unknown_response, unknown_conversation)),
                BETA,
                body_for(unknown_response, unknown_conversation).as_ref(),
            )
            .await;
            assert!(matches!(theirs.0, 400 | 404), "{method} {path}: {} {}", theirs.0, theirs.2);
            assert_error_shape(&theirs.2);
            let expected = unknown
                .2
                .to_string()
                .replace(unknown_response, response_id)
                .replace(unknown_conversation, &state.conversation);
            assert_eq!(
                (theirs.0, theirs.2.to_string()),
                (unknown.0, expected),
                "{method} {path}: another tenant's id must answer as an unknown one"
            );
        }
    }
    // Alpha's background response, running: read, followed and cancelled as an unknown one.
    let background_probes = [
        (M::GET, "/v1/responses/{r}"),
        (M::GET, "/v1/responses/{r}?stream=true"),
        (M::POST, "/v1/responses/{r}/cancel"),
    ];
    for (method, path) in background_probes {
        let theirs =
            call(client, method.clone(), format!("{beta_base}{}", path.replace("{r}", &state.background)), BETA, None)
                .await;
        let unknown =
            call(client, method.clone(), format!("{beta_base}{}", path.replace("{r}", unknown_response)), BETA, None)
                .await;
        assert_eq!(theirs.0, 404, "{method} {path}: {}", theirs.2);
        assert_eq!(
            theirs.2.to_string(),
            unknown.2.to_string().replace(unknown_response, &state.background),
            "{method} {path}: another tenant's background response must answer as an unknown one"
        );
    }
    assert_eq!(upstream.all_requests().len(), upstream_calls, "the upstream was called for another tenant's id");
    let (status, _, own) =
        call(client, M::POST, format!("{alpha_base}/v1/responses/{}/cancel", state.background), ALPHA, None).await;
    assert_eq!((status, own["status"].as_str()), (200, Some("cancelled")), "{own}");
    assert!(upstream.requests("beta-m").is_empty());

    // Alpha's records are all still there.
    let get = |path: String| call(client, M::GET, format!("{alpha_base}{path}"), ALPHA, None);
    for path in [
        format!("/v1/responses/{}", state.response),
        format!("/v1/responses/{}/input_items", state.continued),
        format!("/v1/conversations/{}/items/{}", state.conversation, state.item),
    ] {
        let (status, _, body) = get(path.clone()).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    let (_, _, items) = get(format!("/v1/conversations/{}/items?order=asc", state.conversation)).await;
    assert_eq!(items["data"].as_array().map(Vec::len), Some(3), "{items}");
}

async fn gateway_with(upstream: &ReplayUpstream, args: &[&str]) -> GatewayProcess {
    GatewayProcess::spawn(common::respgw_bin(), &serve_args(&upstream.base_url(), args), &common::quiet_env())
        .await
        .expect("gateway starts")
}

fn alpha_scenario(upstream: &ReplayUpstream) {
    upstream.add_repeating_scenario("alpha-m", text("Noted.", (12, 3)));
    let words: Vec<String> = (0..100).map(|n| format!("w{n} ")).collect();
    upstream.add_scenario("alpha-bg", vec![Step::slow_text(&words, Duration::from_millis(100))]);
}

#[tokio::test]
async fn another_tenants_ids_answer_as_unknown_ones_across_workers() {
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path());
    let h = Harness::start_with(&["--gateway-workers", "2", "--api-keys-file", keys.to_str().unwrap()], &[]).await;
    alpha_scenario(&h.upstream);
    let base = h.gateway.base_url().to_owned();
    beta_sees_unknown_ids(&fresh_connections(), &base, &base, &h.upstream).await;
    // Workers report their counts every second: wait for the merged view to show both tenants.
    let start = Instant::now();
    loop {
        let metrics = h.metrics().await;
        let alpha_ok =
            common::sample(&metrics, "gw_responses_requests_by_tenant_total{status=\"200\",tenant=\"alpha\"}");
        let beta_404 =
            common::sample(&metrics, "gw_responses_requests_by_tenant_total{status=\"404\",tenant=\"beta\"}");
        if alpha_ok >= 4.0 && beta_404 >= 1.0 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{metrics}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn another_tenants_ids_answer_as_unknown_ones_on_two_gateways_sharing_postgres() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::postgres());
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path());
    let schema = TestSchema::create().await.unwrap();
    let upstream = ReplayUpstream::start().await.unwrap();
    alpha_scenario(&upstream);
    let args = ["--db-path", &schema.url(), "--api-keys-file", keys.to_str().unwrap()];
    let (a, b) = tokio::join!(gateway_with(&upstream, &args), gateway_with(&upstream, &args));
    beta_sees_unknown_ids(&fresh_connections(), a.base_url(), b.base_url(), &upstream).await;
}

#[tokio::test]
async fn a_code_interpreter_container_id_of_another_tenant_opens_a_fresh_container() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::code_interpreter_sandbox());
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path());
    let h =
        Harness::start_with(&["--api-keys-file", keys.to_str().unwrap()], &[("GW_CODE_INTERPRETER", "spawn")]).await;
    assert!(h.wait_for_log("code_interpreter is enabled").await, "{}", h.gateway.stderr_text());
    let code = |source: &str| common::tool_turn(&[("code_interpreter", json!({"code": source}))]);
    let read = "print(open('secret.txt').read())";
    h.scenario("writes", vec![code("open('secret.txt','w').write('alpha only')"), text("Written.", (5, 1))]);
    h.scenario("reads", vec![code(read), text("Read.", (5, 1)), code(read), text("Read.", (5, 1))]);
    let client = http_client();
    let tools = json!([{"type":"code_interpreter","container":{"type":"auto"}}]);
    let include = json!(["code_interpreter_call.outputs"]);
    let create = |key: &'static str, body: Value| {
        let (client, url) = (client.clone(), h.url("/v1/responses"));
        async move { call(&client, reqwest::Method::POST, url, key, Some(&body)).await }
    };
    let (status, _, written) =
        create(ALPHA, json!({"model":"writes","input":"write","tools":tools,"include":include})).await;
    assert_eq!(status, 200, "{written}");
    let logs = |response: &Value| {
        let call = response["output"].as_array().and_then(|o| o.iter().find(|i| i["type"] == "code_interpreter_call"));
        call.map(|c| (c["container_id"].clone(), c["outputs"].to_string())).unwrap_or_default()
    };
    // Alpha continuing finds its file.
    let (status, _, own) = create(
        ALPHA,
        json!({"model":"reads","input":"read","tools":tools,"include":include,"previous_response_id":written["id"]}),
    )
    .await;
    assert_eq!(status, 200, "{own}");
    assert!(logs(&own).1.contains("alpha only"), "{own}");
    // Beta replays alpha's output, its container id included, as its own input.
    let mut input = vec![json!({"type":"message","role":"user","content":"write"})];
    input.extend(written["output"].as_array().cloned().unwrap_or_default());
    input.push(json!({"type":"message","role":"user","content":"read"}));
    let (status, _, theirs) =
        create(BETA, json!({"model":"reads","input":input,"tools":tools,"include":include})).await;
    assert_eq!(status, 200, "{theirs}");
    let (_, outputs) = logs(&theirs);
    assert!(
        outputs.contains("FileNotFoundError") && !outputs.contains("alpha only"),
        "beta saw alpha's file: {outputs}"
    );
}

fn hup(pid: u32) {
    kill(Pid::from_raw(pid as libc::pid_t), Signal::SIGHUP).expect("SIGHUP is sent");
}

/// The status a key gets on an authenticated route (404: accepted, the id is unknown).
async fn status_with(client: &reqwest::Client, base: &str, key: &str) -> u16 {
    call(client, reqwest::Method::GET, format!("{base}/v1/responses/resp_unknown"), key, None).await.0
}

/// Wait (bounded) until `key` gets `status` from every worker (fresh connections spread).
async fn until_key_answers(client: &reqwest::Client, base: &str, key: &str, status: u16) {
    let start = Instant::now();
    let mut in_a_row = 0;
    while in_a_row < 10 {
        assert!(start.elapsed() < Duration::from_secs(20), "{key} never answered {status}");
        if status_with(client, base, key).await == status {
            in_a_row += 1;
        } else {
            in_a_row = 0;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test]
async fn keys_rotate_with_a_sighup_and_streams_in_progress_finish() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.toml");
    let (old, new) = ("sk-alpha-old-key", "sk-alpha-new-key");
    write_keys(&keys, &[tenant("alpha", &[old], "")]);
    let h = Harness::start_with(&["--gateway-workers", "2", "--api-keys-file", keys.to_str().unwrap()], &[]).await;
    let client = fresh_connections();
    let base = h.gateway.base_url().to_owned();
    assert_eq!(status_with(&client, &base, old).await, 404);
    assert_eq!(status_with(&client, &base, new).await, 401);

    // A stream that outlives both reloads.
    let chunks: Vec<String> = (0..30)
        .map(|n| {
            let chunk = json!({"choices":[{"index":0,"delta":{"content":format!("w{n} ")},"finish_reason":null}]});
            format!("data: {chunk}\n\n")
        })
        .chain([
            format!("data: {}\n\n", json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})),
            "data: [DONE]\n\n".to_owned(),
        ])
        .collect();
    h.scenario("slow", vec![Step::SlowSse { chunks, delay: Duration::from_millis(100) }]);
    let stream = {
        let url = h.url("/v1/responses");
        let client = client.clone();
        tokio::spawn(async move {
            let response = client
                .post(url)
                .bearer_auth(old)
                .json(&json!({"model":"slow","input":"take your time","stream":true}))
                .send()
                .await
                .expect("the stream starts");
            assert_eq!(response.status().as_u16(), 200);
            response.text().await.expect("the stream is read to its end")
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Rotation: both keys for a while, then only the new one.
    write_keys(&keys, &[tenant("alpha", &[old, new], "")]);
    hup(h.gateway.pid());
    until_key_answers(&client, &base, new, 404).await;
    assert_eq!(status_with(&client, &base, old).await, 404, "the old key works until it is removed");
    // An invalid file on reload keeps the keys in use.
    std::fs::write(&keys, "[[tenant]]\nname = \"alpha\"\nkeys = [\"sk-raw-key-pasted-by-mistake\"]\n").unwrap();
    hup(h.gateway.pid());
    assert!(h.wait_for_log("was not reloaded").await, "{}", h.gateway.stderr_text());
    assert!(!h.gateway.stderr_text().contains("sk-raw-key-pasted-by-mistake"), "a key reached the log");
    until_key_answers(&client, &base, new, 404).await;
    write_keys(&keys, &[tenant("alpha", &[new], "")]);
    hup(h.gateway.pid());
    until_key_answers(&client, &base, old, 401).await;
    assert_eq!(status_with(&client, &base, new).await, 404);

    let text = stream.await.expect("the stream task");
    assert!(text.contains("response.completed") && text.contains("w29"), "the stream was cut: {text}");
    assert!(!h.gateway.stderr_text().contains(old) && !h.gateway.stderr_text().contains(new), "a key was logged");
}

#[tokio::test]
async fn a_tenant_over_its_limits_gets_429_and_another_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.json");
    let hash = |k: &str| respgw_server::hash_key(k);
    let file = json!({"tenant": [
        {"name": "alpha", "keys": [hash(ALPHA)], "requests_per_minute": 3},
        {"name": "beta", "keys": [{"hash": hash(BETA), "expires": "2999-01-01T00:00:00Z"}], "max_open_streams": 1},
    ]});
    std::fs::write(&keys, file.to_string()).unwrap();
    // Limits hold for the whole gateway (tests/e2e/limits.rs checks it with several workers).
    let h = Harness::start_with(&["--gateway-workers", "1", "--api-keys-file", keys.to_str().unwrap()], &[]).await;
    let client = http_client();
    let base = h.gateway.base_url().to_owned();
    for _ in 0..3 {
        assert_eq!(status_with(&client, &base, ALPHA).await, 404);
    }
    let (status, retry_after, body) =
        call(&client, reqwest::Method::GET, format!("{base}/v1/responses/resp_unknown"), ALPHA, None).await;
    assert_eq!(status, 429, "{body}");
    assert_error_shape(&body);
    assert_eq!(
        (body["error"]["code"].as_str(), body["error"]["type"].as_str()),
        (Some("rate_limit_exceeded"), Some("rate_limit_error"))
    );
    let wait: u64 = retry_after.expect("Retry-After").parse().expect("seconds");
    assert!((1..=20).contains(&wait), "Retry-After {wait}");
    for _ in 0..20 {
        assert_eq!(status_with(&client, &base, BETA).await, 404, "beta is unaffected");
    }

    // Beta may have one stream open at a time.
    let chunks = vec![
        format!("data: {}\n\n", json!({"choices":[{"index":0,"delta":{"content":"slow"},"finish_reason":null}]})),
        format!("data: {}\n\n", json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})),
        "data: [DONE]\n\n".to_owned(),
    ];
    h.scenario("slow", vec![Step::SlowSse { chunks, delay: Duration::from_millis(1500) }]);
    let first = client
        .post(h.url("/v1/responses"))
        .bearer_auth(BETA)
        .json(&json!({"model":"slow","input":"x","stream":true}))
        .send()
        .await
        .expect("the first stream starts");
    assert_eq!(first.status().as_u16(), 200);
    // The stream's upstream call starts after its head was sent.
    let start = Instant::now();
    while h.upstream.requests("slow").is_empty() {
        assert!(start.elapsed() < Duration::from_secs(5), "the first stream never reached the upstream");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let upstream_calls = h.upstream.all_requests().len();
    let (status, retry_after, body) = call(
        &client,
        reqwest::Method::POST,
        h.url("/v1/responses"),
        BETA,
        Some(&json!({"model":"slow","input":"y","stream":true})),
    )
    .await;
    assert_eq!((status, body["error"]["code"].as_str()), (429, Some("rate_limit_exceeded")), "{body}");
    assert!(retry_after.is_some());
    // A background response counts as well while it runs.
    let (status, _, body) = call(
        &client,
        reqwest::Method::POST,
        h.url("/v1/responses"),
        BETA,
        Some(&json!({"model":"slow","input":"z","background":true})),
    )
    .await;
    assert_eq!((status, body["error"]["code"].as_str()), (429, Some("rate_limit_exceeded")), "{body}");
    assert_eq!(h.upstream.all_requests().len(), upstream_calls, "a refused stream never reaches the upstream");
    assert!(first.text().await.expect("the first stream ends").contains("response.completed"));
}

/// A scripted model turn calling the Built-in MCP server's `echo`, with its usage.
fn tool_round(call_id: &str, text: &str, usage: Value) -> Step {
    let call = json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":call_id,"type":"function",
        "function":{"name":"mcp__local__echo","arguments":json!({"text":text}).to_string()}}]},"finish_reason":"tool_calls"}]});
    let usage = json!({"choices":[],"usage":usage});
    Step::Sse(vec![format!("data: {call}\n\n"), format!("data: {usage}\n\n"), "data: [DONE]\n\n".into()])
}

#[tokio::test]
async fn token_counters_equal_the_usage_of_every_round_of_a_tool_loop() {
    let stdio = common::respgw_bin().with_file_name("respgw-mcp-test-stdio");
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::file(&stdio, "cargo builds it with the workspace"));
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path());
    let mcp = dir.path().join("mcp.json");
    std::fs::write(&mcp, json!({"mcpServers": {"local": {"command": stdio}}}).to_string()).unwrap();
    let h = Harness::start_with(
        &["--gateway-workers", "2", "--api-keys-file", keys.to_str().unwrap(), "--mcp-config", mcp.to_str().unwrap()],
        &[],
    )
    .await;
    let usage = |prompt: u64, completion: u64, cached: u64, reasoning: u64| {
        json!({"prompt_tokens":prompt,"completion_tokens":completion,"total_tokens":prompt+completion,
               "prompt_tokens_details":{"cached_tokens":cached},"completion_tokens_details":{"reasoning_tokens":reasoning}})
    };
    let final_turn = {
        let text = json!({"choices":[{"index":0,"delta":{"content":"All done."},"finish_reason":"stop"}]});
        let u = json!({"choices":[],"usage":usage(90, 4, 64, 1)});
        Step::Sse(vec![format!("data: {text}\n\n"), format!("data: {u}\n\n"), "data: [DONE]\n\n".into()])
    };
    h.scenario(
        "loop",
        vec![
            tool_round("call_1", "one", usage(40, 7, 0, 3)),
            tool_round("call_2", "two", usage(60, 9, 32, 2)),
            final_turn,
        ],
    );
    h.upstream.add_repeating_scenario("plain", text("Hi.", (11, 2)));
    let client = fresh_connections();
    let tools = json!([{"type":"mcp","server_label":"local","require_approval":"never"}]);
    let mut reported = [0u64; 4];
    for (key, body) in [
        (ALPHA, json!({"model":"loop","input":"go","tools":tools})),
        (ALPHA, json!({"model":"plain","input":"hi"})),
        (BETA, json!({"model":"plain","input":"hi"})),
    ] {
        let (status, _, response) =
            call(&client, reqwest::Method::POST, h.url("/v1/responses"), key, Some(&body)).await;
        assert_eq!(status, 200, "{response}");
        if key == ALPHA {
            let u = &response["usage"];
            for (slot, value) in reported.iter_mut().zip([
                &u["input_tokens"],
                &u["output_tokens"],
                &u["input_tokens_details"]["cached_tokens"],
                &u["output_tokens_details"]["reasoning_tokens"],
            ]) {
                *slot += value.as_u64().expect("a count");
            }
        }
    }
    assert_eq!(h.upstream.requests("loop").len(), 3, "three upstream calls in the loop");
    assert_eq!(reported, [40 + 60 + 90 + 11, 7 + 9 + 4 + 2, 64 + 32, 3 + 2 + 1]);
    // Workers report every second; wait until the merged view has caught up.
    let start = Instant::now();
    loop {
        let metrics = h.metrics().await;
        let counted: Vec<f64> = ["input", "output", "cached", "reasoning"]
            .iter()
            .map(|kind| {
                common::sample(
                    &metrics,
                    &format!("gw_responses_tokens_total{{kind=\"{kind}\",model=\"loop\",tenant=\"alpha\"}}"),
                ) + common::sample(
                    &metrics,
                    &format!("gw_responses_tokens_total{{kind=\"{kind}\",model=\"plain\",tenant=\"alpha\"}}"),
                )
            })
            .collect();
        let expected: Vec<f64> = reported.iter().map(|n| *n as f64).collect();
        // Beta's response may have been served by the other worker, which reports on its own time.
        let beta =
            common::sample(&metrics, "gw_responses_tokens_total{kind=\"input\",model=\"plain\",tenant=\"beta\"}");
        if counted == expected && beta == 11.0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "counted {counted:?} and beta {beta}, reported {expected:?} and 11\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn hash_key_prints_the_keys_file_entry() {
    let output = std::process::Command::new(common::respgw_bin())
        .arg("hash-key")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().expect("stdin").write_all(b"sk-some-key\n")?;
            child.wait_with_output()
        })
        .expect("respgw hash-key runs");
    assert!(output.status.success());
    assert_eq!(String::from_utf8_lossy(&output.stdout), format!("\"{}\"\n", respgw_server::hash_key("sk-some-key")));

    let output = std::process::Command::new(common::respgw_bin()).args(["hash-key", "--generate"]).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("sk-gw-") && lines[0].len() > 40, "{text}");
    assert_eq!(lines[1], format!("\"{}\"", respgw_server::hash_key(lines[0])));
}

#[tokio::test]
async fn a_keys_file_with_a_raw_key_stops_the_start_without_showing_it() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.toml");
    std::fs::write(&keys, "[[tenant]]\nname = \"alpha\"\nkeys = [\"sk-live-raw-key\"]\n").unwrap();
    let output = std::process::Command::new(common::respgw_bin())
        .args(serve_args("http://127.0.0.1:1/v1", &["--api-keys-file", keys.to_str().unwrap()]))
        .envs(common::quiet_env())
        .output()
        .expect("respgw runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("keys[0]") && stderr.contains("not a key hash"), "{stderr}");
    assert!(!stderr.contains("sk-live-raw-key"), "the key was shown: {stderr}");
}

/// A model turn that reasons (`reasoning_content`), then answers.
fn thinking(reasoning: &str, answer: &str) -> Step {
    let chunk = |delta: Value, finish: Value| {
        format!("data: {}\n\n", json!({"choices":[{"index":0,"delta":delta,"finish_reason":finish}]}))
    };
    Step::Sse(vec![
        chunk(json!({"role":"assistant","reasoning_content":reasoning}), Value::Null),
        chunk(json!({"content":answer}), Value::Null),
        chunk(json!({}), json!("stop")),
        "data: [DONE]\n\n".into(),
    ])
}

#[tokio::test]
async fn another_tenants_sealed_blobs_are_refused_like_altered_ones_and_never_reach_the_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path());
    let h = Harness::start_with(&["--api-keys-file", keys.to_str().unwrap()], &[]).await;
    h.scenario("think", vec![thinking("Alpha's secret: two and two.", "4"), thinking("Again.", "Yes")]);
    h.scenario("sum", vec![Step::text(&["Alpha's secret summary."], "stop", None)]);
    let client = fresh_connections();
    let as_tenant = |key: &'static str, path: &'static str, body: Value| {
        let (client, url) = (&client, h.url(path));
        async move {
            let (status, _, json) = call(client, reqwest::Method::POST, url, key, Some(&body)).await;
            (status, json)
        }
    };
    let include = json!(["reasoning.encrypted_content"]);
    let (status, first) =
        as_tenant(ALPHA, "/v1/responses", json!({"model":"think","input":"2+2?","store":false,"include":include}))
            .await;
    assert_eq!(status, 200, "{first}");
    let mut reasoning = first["output"][0].clone();
    assert_eq!(reasoning["type"], "reasoning", "{first}");
    // Only the sealed blob carries the reasoning from here on.
    reasoning.as_object_mut().expect("an item").remove("content");
    let (status, compacted) = as_tenant(ALPHA, "/v1/responses/compact", json!({"model":"sum","input":"hi"})).await;
    assert_eq!(status, 200, "{compacted}");
    let summary = compacted["output"][1].clone();
    let upstream_calls = h.upstream.all_requests().len();

    let mut altered = reasoning.clone();
    let blob = reasoning["encrypted_content"].as_str().expect("sealed").to_owned();
    let at = blob.len() - 4;
    altered["encrypted_content"] =
        json!(format!("{}{}{}", &blob[..at], if &blob[at..=at] == "A" { "B" } else { "A" }, &blob[at + 1..]));
    let with = |item: &Value| json!([{"role":"user","content":"go on"}, item]);
    let (status, altered_error) =
        as_tenant(BETA, "/v1/responses", json!({"model":"think","input":with(&altered)})).await;
    assert_eq!(status, 400, "{altered_error}");
    for item in [&reasoning, &summary] {
        for path in ["/v1/responses", "/v1/responses/compact", "/v1/responses/input_tokens"] {
            let (status, body) = as_tenant(BETA, path, json!({"model":"think","input":with(item)})).await;
            assert_eq!(status, 400, "{path}: {body}");
            assert_error_shape(&body);
            assert_eq!(body["error"]["param"], "input[1].encrypted_content", "{path}: {body}");
            assert_eq!(body["error"]["code"], "invalid_encrypted_content", "{path}: {body}");
            assert_eq!(
                body["error"]["message"], altered_error["error"]["message"],
                "the same refusal as an altered blob"
            );
        }
        let (status, body) = as_tenant(BETA, "/v1/conversations", json!({"items":with(item)})).await;
        assert_eq!((status, body["error"]["param"].as_str()), (400, Some("items[1].encrypted_content")), "{body}");
    }
    let (status, conversation) = as_tenant(BETA, "/v1/conversations", json!({})).await;
    assert_eq!(status, 200, "{conversation}");
    let items_url = format!("{}/v1/conversations/{}/items", h.gateway.base_url(), conversation["id"].as_str().unwrap());
    let (status, _, body) =
        call(&client, reqwest::Method::POST, items_url.clone(), BETA, Some(&json!({"items":[reasoning]}))).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("items[0].encrypted_content")), "{body}");
    let (_, _, listed) = call(&client, reqwest::Method::GET, items_url, BETA, None).await;
    assert_eq!(listed["data"], json!([]), "nothing was added");
    assert_eq!(h.upstream.all_requests().len(), upstream_calls, "the upstream heard nothing of beta's attempts");

    // Alpha's own blob still opens for alpha, and the model gets its reasoning back.
    let (status, again) = as_tenant(
        ALPHA,
        "/v1/responses",
        json!({"model":"think","store":false,"input":[{"role":"user","content":"2+2?"}, reasoning, first["output"][1], {"role":"user","content":"Sure?"}]}),
    )
    .await;
    assert_eq!(status, 200, "{again}");
    let sent = h.upstream_messages("think");
    let assistant = sent[1].iter().find(|m| m["role"] == "assistant").expect("the earlier turn");
    assert_eq!(assistant["reasoning_content"], "Alpha's secret: two and two.", "{assistant}");
}
