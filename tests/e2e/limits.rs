//! Per-tenant limits hold for the gateway as a whole, and for every gateway sharing one Redis:
//! requests per minute and open streams exact across 4 workers and across two gateways; token
//! budgets charged over a tool loop refuse the next request before the upstream sees it (on the
//! Responses and the Messages routes); `x-ratelimit-*` headers on every authenticated reply; a
//! Redis outage served locally (`open`) or refused with 503 (`closed`), and recovered from.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{ALPHA, BETA, Harness, assert_error_shape, respgw_bin, serve_args, two_tenants};
use futures::future::join_all;
use respgw_testkit::gateway::{GatewayProcess, http_client};
use respgw_testkit::redis::RedisServer;
use respgw_testkit::upstream::{ReplayUpstream, Step};
use serde_json::{Value, json};

/// A client opening a new connection per request, so that every worker serves the test.
fn fresh_connections() -> reqwest::Client {
    http_client();
    reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).build().expect("client")
}

/// One reply: status, headers and JSON body.
struct Reply {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Value,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn number(&self, name: &str) -> u64 {
        self.header(name).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no numeric {name}"))
    }
}

async fn send(request: reqwest::RequestBuilder) -> Reply {
    let response = request.send().await.expect("request completes");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.expect("body reads");
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("non-JSON reply ({status}): {text}"));
    Reply { status, headers, body }
}

/// `GET /v1/responses/<unknown>` as `key`: a cheap authenticated request (404 when admitted).
async fn probe(client: &reqwest::Client, base: &str, key: &str) -> Reply {
    send(client.get(format!("{base}/v1/responses/resp_unknown")).bearer_auth(key)).await
}

/// A streamed reply that takes `delay` between its two chunks.
fn slow_stream(delay: Duration) -> Step {
    let chunks = vec![
        format!("data: {}\n\n", json!({"choices":[{"index":0,"delta":{"content":"slow"},"finish_reason":null}]})),
        format!("data: {}\n\n", json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})),
        "data: [DONE]\n\n".to_owned(),
    ];
    Step::SlowSse { chunks, delay }
}

/// Seconds of an OpenAI-style duration (`120ms`, `1.5s`, `6m0s`, `1h2m3s`).
fn parse_duration(text: &str) -> f64 {
    if let Some(ms) = text.strip_suffix("ms") {
        return ms.parse::<f64>().expect("milliseconds") / 1000.0;
    }
    let mut seconds = 0.0;
    let mut number = String::new();
    for c in text.chars() {
        match c {
            'h' => seconds += number.parse::<f64>().expect("hours") * 3600.0,
            'm' => seconds += number.parse::<f64>().expect("minutes") * 60.0,
            's' => seconds += number.parse::<f64>().expect("seconds"),
            _ => {
                number.push(c);
                continue;
            }
        }
        number.clear();
    }
    assert!(number.is_empty(), "'{text}' is not a duration");
    seconds
}

/// 90 rapid requests of a tenant allowed 30 a minute, spread over `bases`: exactly 30 admitted,
/// every refusal a 429 with `Retry-After`, and the headers consistent.
async fn exactly_30_of_90(bases: &[String]) -> BTreeSet<String> {
    let client = fresh_connections();
    let replies = join_all((0..90).map(|i| probe(&client, &bases[i % bases.len()], ALPHA))).await;
    let admitted: Vec<&Reply> = replies.iter().filter(|r| r.status == 404).collect();
    let refused: Vec<&Reply> = replies.iter().filter(|r| r.status == 429).collect();
    assert_eq!((admitted.len(), refused.len()), (30, 60), "exactly the limit is admitted");
    let mut remaining = BTreeSet::new();
    for reply in &admitted {
        assert_eq!(reply.number("x-ratelimit-limit-requests"), 30);
        remaining.insert(reply.number("x-ratelimit-remaining-requests"));
        let reset = parse_duration(reply.header("x-ratelimit-reset-requests").expect("reset"));
        assert!(reset > 0.0 && reset <= 60.0, "reset {reset}");
    }
    assert!(remaining.len() >= 25 && remaining.iter().all(|r| *r < 30), "remaining counts down: {remaining:?}");
    for reply in &refused {
        assert_error_shape(&reply.body);
        assert_eq!(reply.body["error"]["code"], "rate_limit_exceeded");
        let wait = reply.number("retry-after");
        assert!((1..=2).contains(&wait), "Retry-After {wait}");
        assert_eq!(reply.number("x-ratelimit-remaining-requests"), 0);
    }
    // Another tenant is not limited, and gets no request headers.
    let beta = probe(&client, &bases[0], BETA).await;
    assert_eq!(beta.status, 404);
    assert_eq!(beta.header("x-ratelimit-limit-requests"), None);
    replies.iter().filter_map(|r| r.header("x-respgw-worker-pid").map(str::to_owned)).collect()
}

#[tokio::test]
async fn four_workers_admit_exactly_the_tenants_requests_per_minute() {
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path(), "requests_per_minute = 30");
    let h = Harness::start_with(&["--gateway-workers", "4", "--api-keys-file", &keys], &[]).await;
    let workers = exactly_30_of_90(&[h.gateway.base_url().to_owned()]).await;
    assert!(workers.len() >= 2, "the requests were spread over several workers: {workers:?}");
}

/// Start `n` streams of `key` at once on `bases` (round robin); their statuses, the open ones
/// still streaming.
async fn open_streams(client: &reqwest::Client, bases: &[String], key: &str, n: usize) -> Vec<reqwest::Response> {
    let starts = (0..n).map(|i| {
        client
            .post(format!("{}/v1/responses", bases[i % bases.len()]))
            .bearer_auth(key)
            .json(&json!({"model":"slow","input":"x","stream":true}))
            .send()
    });
    join_all(starts).await.into_iter().map(|r| r.expect("the request completes")).collect()
}

/// Of 6 streams started at once by `key`'s tenant, allowed 2, exactly 2 open, spread over
/// `bases`; once they end, another opens.
async fn exactly_2_of_6_streams(bases: &[String], upstream: &ReplayUpstream, key: &str) {
    upstream.add_repeating_scenario("slow", slow_stream(Duration::from_millis(1500)));
    let client = fresh_connections();
    let responses = open_streams(&client, bases, key, 6).await;
    let (open, refused): (Vec<_>, Vec<_>) = responses.into_iter().partition(|r| r.status() == 200);
    assert_eq!((open.len(), refused.len()), (2, 4), "exactly the limit opens");
    for response in refused {
        assert_eq!(response.status().as_u16(), 429);
        let body: Value = response.json().await.expect("a JSON error");
        assert_error_shape(&body);
    }
    for response in open {
        assert!(response.text().await.expect("the stream ends").contains("response.completed"));
    }
    assert_eq!(upstream.requests("slow").len(), 2, "refused streams never reached the upstream");
    for again in open_streams(&client, bases, key, 1).await {
        assert_eq!(again.status().as_u16(), 200, "finished streams free their places");
        assert!(again.text().await.expect("the stream ends").contains("response.completed"));
    }
}

#[tokio::test]
async fn four_workers_hold_max_open_streams_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path(), "max_open_streams = 2");
    let h = Harness::start_with(&["--gateway-workers", "4", "--api-keys-file", &keys], &[]).await;
    exactly_2_of_6_streams(&[h.gateway.base_url().to_owned()], &h.upstream, ALPHA).await;
}

/// A scripted model turn calling the Built-in MCP server's `echo`, reporting `usage`.
fn tool_round(call_id: &str, usage: (u64, u64)) -> Step {
    let call = json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":call_id,"type":"function",
        "function":{"name":"mcp__local__echo","arguments":json!({"text":"hi"}).to_string()}}]},"finish_reason":"tool_calls"}]});
    let usage = json!({"choices":[],"usage":{"prompt_tokens":usage.0,"completion_tokens":usage.1,
        "total_tokens":usage.0 + usage.1}});
    Step::Sse(vec![format!("data: {call}\n\n"), format!("data: {usage}\n\n"), "data: [DONE]\n\n".into()])
}

#[tokio::test]
async fn a_spent_token_budget_refuses_the_next_request_before_the_model_sees_it() {
    let stdio = respgw_bin().with_file_name("respgw-mcp-test-stdio");
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::file(&stdio, "cargo builds it with the workspace"));
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path(), "tokens_per_day = 150");
    let mcp = dir.path().join("mcp.json");
    std::fs::write(&mcp, json!({"mcpServers": {"local": {"command": stdio}}}).to_string()).unwrap();
    let h = Harness::start_with(
        &["--gateway-workers", "2", "--api-keys-file", &keys, "--mcp-config", mcp.to_str().unwrap()],
        &[],
    )
    .await;
    // Three upstream calls of one tool loop: 47 + 69 + 94 tokens, past the day's 150 only with the
    // last; the loop is not cut (budgets are checked before a request, charged after each call).
    h.scenario(
        "loop",
        vec![
            tool_round("call_1", (40, 7)),
            tool_round("call_2", (60, 9)),
            Step::text(&["Done."], "stop", Some((90, 4))),
        ],
    );
    h.upstream.add_repeating_scenario("plain", Step::text(&["Hi."], "stop", Some((5, 2))));
    let client = fresh_connections();
    let tools = json!([{"type":"mcp","server_label":"local","require_approval":"never"}]);
    let first = send(
        client
            .post(h.url("/v1/responses"))
            .bearer_auth(ALPHA)
            .json(&json!({"model":"loop","input":"go","tools":tools})),
    )
    .await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body["usage"]["total_tokens"], 210);
    assert_eq!(h.upstream.requests("loop").len(), 3, "the whole loop ran");
    assert_eq!(first.number("x-ratelimit-limit-tokens"), 150);
    assert_eq!(first.number("x-ratelimit-remaining-tokens"), 150, "admitted with the whole budget");

    // Spent: refused before the upstream is called, on every route, whichever worker answers.
    for _ in 0..4 {
        let next = send(
            client.post(h.url("/v1/responses")).bearer_auth(ALPHA).json(&json!({"model":"plain","input":"again"})),
        )
        .await;
        assert_eq!(next.status, 429, "{}", next.body);
        assert_error_shape(&next.body);
        assert_eq!(next.body["error"]["code"], "rate_limit_exceeded");
        assert!(next.body["error"]["message"].as_str().is_some_and(|m| m.contains("150 tokens per day")));
        let wait = next.number("retry-after");
        assert!((1..=86_400).contains(&wait), "Retry-After {wait}");
        assert_eq!(next.number("x-ratelimit-remaining-tokens"), 0);
    }
    let messages = send(
        client
            .post(h.url("/v1/messages"))
            .header("x-api-key", ALPHA)
            .header("anthropic-version", "2023-06-01")
            .json(&json!({"model":"plain","max_tokens":16,"messages":[{"role":"user","content":"hi"}]})),
    )
    .await;
    assert_eq!(messages.status, 429, "{}", messages.body);
    assert_eq!(messages.body["type"], "error", "the Messages routes keep Anthropic's shape: {}", messages.body);
    assert_eq!(messages.body["error"]["type"], "rate_limit_error");
    assert!(messages.header("retry-after").is_some());
    assert!(h.upstream.requests("plain").is_empty(), "no refused request reached the upstream");

    // Beta has no budget and is served.
    let beta =
        send(client.post(h.url("/v1/responses")).bearer_auth(BETA).json(&json!({"model":"plain","input":"hi"}))).await;
    assert_eq!(beta.status, 200, "{}", beta.body);
    assert_eq!(beta.header("x-ratelimit-limit-tokens"), None);
    assert_eq!(h.upstream.requests("plain").len(), 1);
}

/// A gateway of `workers` workers in front of `upstream`, counting in the Redis at `redis_url`.
async fn gateway_on_redis(upstream: &ReplayUpstream, keys: &str, redis_url: &str, extra: &[&str]) -> GatewayProcess {
    let mut args = vec!["--api-keys-file", keys, "--redis-url", redis_url];
    args.extend_from_slice(extra);
    let envs = common::quiet_env();
    GatewayProcess::spawn(respgw_bin(), &serve_args(&upstream.base_url(), &args), &envs).await.expect("gateway starts")
}

#[tokio::test]
async fn two_gateways_sharing_redis_hold_one_limit_together() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::redis_server());
    let redis = RedisServer::start().expect("redis-server starts");
    let upstream = ReplayUpstream::start().await.expect("replay upstream starts");
    let dir = tempfile::tempdir().unwrap();
    let entry = |name: &str, key: &str, limit: &str| {
        format!("[[tenant]]\nname = \"{name}\"\nkeys = [\"{}\"]\n{limit}\n", respgw_server::hash_key(key))
    };
    let keys = dir.path().join("keys.toml");
    std::fs::write(
        &keys,
        entry("alpha", ALPHA, "requests_per_minute = 30") + &entry("beta", BETA, "max_open_streams = 2"),
    )
    .unwrap();
    let keys = keys.display().to_string();
    let a = gateway_on_redis(&upstream, &keys, &redis.url(), &["--gateway-workers", "2"]).await;
    let b = gateway_on_redis(&upstream, &keys, &redis.url(), &["--gateway-workers", "2"]).await;
    let bases = [a.base_url().to_owned(), b.base_url().to_owned()];
    let workers = exactly_30_of_90(&bases).await;
    assert!(workers.len() >= 3, "both gateways' workers served: {workers:?}");
    exactly_2_of_6_streams(&bases, &upstream, BETA).await;
}

/// Wait (bounded) until `gateway`'s log contains `needle`.
async fn log_shows(gateway: &GatewayProcess, needle: &str) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if gateway.stderr_text().contains(needle) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// `gw_responses_limits_redis_up` on `gateway`'s `/metrics`, once it equals `want` (bounded wait).
async fn redis_up_becomes(gateway: &GatewayProcess, want: f64) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let text = http_client()
            .get(format!("{}/metrics", gateway.base_url()))
            .send()
            .await
            .expect("scrape")
            .text()
            .await
            .expect("metrics");
        if common::sample(&text, "gw_responses_limits_redis_up") == want {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

#[tokio::test]
async fn a_redis_outage_is_served_locally_in_open_mode_and_refused_in_closed_mode() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::redis_server());
    let mut redis = RedisServer::start().expect("redis-server starts");
    let upstream = ReplayUpstream::start().await.expect("replay upstream starts");
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path(), "requests_per_minute = 1000");
    let one = ["--gateway-workers", "1"];
    let open = gateway_on_redis(&upstream, &keys, &redis.url(), &one).await;
    let closed =
        gateway_on_redis(&upstream, &keys, &redis.url(), &["--gateway-workers", "1", "--redis-failure-mode", "closed"])
            .await;
    let client = fresh_connections();
    for gateway in [&open, &closed] {
        assert_eq!(probe(&client, gateway.base_url(), ALPHA).await.status, 404);
    }
    assert!(redis_up_becomes(&open, 1.0).await, "Redis is up");

    redis.stop();
    for _ in 0..3 {
        let served = probe(&client, open.base_url(), ALPHA).await;
        assert_eq!(served.status, 404, "open mode serves: {}", served.body);
        assert_eq!(served.number("x-ratelimit-limit-requests"), 1000, "counted locally, with headers");
        let refused = probe(&client, closed.base_url(), ALPHA).await;
        assert_eq!(refused.status, 503, "closed mode refuses: {}", refused.body);
        assert_error_shape(&refused.body);
        assert_eq!(refused.body["error"]["code"], "limits_unavailable");
    }
    for gateway in [&open, &closed] {
        let health = http_client().get(format!("{}/health", gateway.base_url())).send().await.expect("health");
        assert_eq!(health.status().as_u16(), 200, "/health stays up");
    }
    assert!(log_shows(&open, "Redis is unreachable").await, "the outage is logged");
    assert_eq!(open.stderr_text().matches("Redis is unreachable").count(), 1, "once per outage");
    assert!(redis_up_becomes(&open, 0.0).await, "the gauge shows the outage");

    redis.resume().expect("redis-server starts again");
    let start = Instant::now();
    loop {
        let open_reply = probe(&client, open.base_url(), ALPHA).await;
        let closed_reply = probe(&client, closed.base_url(), ALPHA).await;
        if open_reply.status == 404 && closed_reply.status == 404 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "the gateways never reconnected");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(log_shows(&open, "Redis is reachable again").await);
    assert!(redis_up_becomes(&open, 1.0).await, "the gauge shows the recovery");
}
