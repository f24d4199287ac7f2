//! Per-tenant limits hold for the gateway as a whole, and for every gateway sharing one Redis:
//! requests per minute and open streams exact across 4 workers and across two gateways, open
//! WebSockets across two gateways; token budgets charged over a tool loop and for
//! `/v1/chat/completions` (JSON and streamed) refuse the next request before the upstream sees it
//! (on the Responses and the Messages routes); `x-ratelimit-*` headers on every authenticated
//! reply; one Redis round trip per admitted request (JSON, SSE, Messages, WebSocket upgrade and
//! `response.create`), counted with Redis's `MONITOR`; a Redis outage served locally (`open`) or
//! refused with 503 (`closed`), and recovered from.

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

// ---- one Redis round trip per admitted request ---------------------------------------------

/// The commands the gateways send a Redis, watched with `MONITOR` on a connection of the test's.
struct RedisMonitor {
    port: u16,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl RedisMonitor {
    fn start(redis: &RedisServer) -> RedisMonitor {
        use std::io::{BufRead, Write};
        let port: u16 = redis.url().rsplit(':').next().and_then(|p| p.split('/').next()?.parse().ok()).expect("a port");
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connects to redis");
        stream.write_all(b"MONITOR\r\n").expect("MONITOR sent");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = std::sync::Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stream).lines() {
                let Ok(line) = line else { return };
                seen.lock().expect("lines").push(line);
            }
        });
        let monitor = RedisMonitor { port, lines };
        monitor.mark("monitor-started");
        monitor
    }

    /// Send `ECHO marker` on a connection of its own and wait until the monitor has seen it.
    fn mark(&self, marker: &str) {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("connects to redis");
        stream.write_all(format!("ECHO {marker}\r\n").as_bytes()).expect("ECHO sent");
        let mut reply = [0u8; 64];
        let _ = stream.read(&mut reply).expect("ECHO answered");
        let start = Instant::now();
        while !self.lines.lock().expect("lines").iter().any(|l| l.contains(&format!("\"{marker}\""))) {
            assert!(start.elapsed() < Duration::from_secs(10), "MONITOR never showed {marker}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The commands clients other than the test sent (not those scripts ran) between the markers
    /// `from` and `to`, each as its lowercased name and arguments.
    fn between(&self, from: &str, to: &str) -> Vec<Vec<String>> {
        let lines = self.lines.lock().expect("lines");
        let position = |marker: &str| {
            lines.iter().position(|l| l.contains(&format!("\"{marker}\""))).expect("the marker was seen")
        };
        lines[position(from) + 1..position(to)]
            .iter()
            .filter(|line| !line.contains(" lua]"))
            .filter_map(|line| {
                let (_, command) = line.split_once("] ")?;
                let mut words: Vec<String> =
                    command.trim().trim_matches('"').split("\" \"").map(str::to_owned).collect();
                words[0] = words[0].to_lowercase();
                Some(words)
            })
            .filter(|words| words[0] != "echo")
            .collect()
    }

    /// Run `action` and return the admissions (the `EVALSHA`s of the admission script: their
    /// first key is a tenant's) and every other command the gateways sent meanwhile, leases'
    /// renewals and releases left out.
    async fn during<T>(&self, label: &str, action: impl Future<Output = T>) -> (T, Vec<Vec<String>>) {
        let (from, to) = (format!("{label}-from"), format!("{label}-to"));
        self.mark(&from);
        let output = action.await;
        self.mark(&to);
        let renewal = |c: &Vec<String>| c[0] == "evalsha" && c.get(3).is_some_and(|key| !key.ends_with('}'));
        let commands = self.between(&from, &to).into_iter().filter(|c| !renewal(c) && c[0] != "zrem").collect();
        (output, commands)
    }

    /// How many leases were released (`ZREM`) since the monitor started.
    fn releases(&self) -> usize {
        self.lines
            .lock()
            .expect("lines")
            .iter()
            .filter(|l| !l.contains(" lua]") && l.to_lowercase().contains("] \"zrem\""))
            .count()
    }
}

type WebSocket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A WebSocket to `base`'s `GET /v1/responses` as `key`.
async fn websocket(base: &str, key: &str) -> Result<WebSocket, tokio_tungstenite::tungstenite::Error> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = format!("{}/v1/responses", base.replacen("http://", "ws://", 1)).into_client_request()?;
    request.headers_mut().insert("authorization", format!("Bearer {key}").parse().expect("header value"));
    tokio_tungstenite::connect_async(request).await.map(|(socket, _)| socket)
}

/// Send one `response.create` on `socket` and read its events to the terminal one.
async fn create_over(socket: &mut WebSocket, model: &str) -> Vec<Value> {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let frame = json!({"type":"response.create","model":model,"input":"hi"});
    socket.send(Message::text(frame.to_string())).await.expect("frame sent");
    let mut events = Vec::new();
    loop {
        let message = tokio::time::timeout(Duration::from_secs(30), socket.next())
            .await
            .expect("a frame arrives")
            .expect("the connection is open")
            .expect("the frame reads");
        let Message::Text(text) = message else { continue };
        let event: Value = serde_json::from_str(&text).expect("a JSON frame");
        let kind = event["type"].as_str().unwrap_or_default().to_owned();
        events.push(event);
        if matches!(kind.as_str(), "response.completed" | "response.failed" | "error") {
            return events;
        }
    }
}

/// Whether a refused WebSocket upgrade was a 429 in the error shape.
fn refused_with_429(outcome: Result<WebSocket, tokio_tungstenite::tungstenite::Error>) -> bool {
    match outcome {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let body: Value = serde_json::from_slice(response.body().as_deref().unwrap_or_default()).expect("JSON");
            assert_error_shape(&body);
            response.status() == 429 && body["error"]["code"] == "rate_limit_exceeded"
        }
        _ => false,
    }
}

#[tokio::test]
async fn every_admitted_request_costs_one_redis_round_trip_streams_and_websockets_included() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::redis_server());
    let redis = RedisServer::start().expect("redis-server starts");
    let monitor = RedisMonitor::start(&redis);
    let upstream = ReplayUpstream::start().await.expect("replay upstream starts");
    upstream.add_repeating_scenario("plain", Step::text(&["Hi."], "stop", None));
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path(), "requests_per_minute = 1000\nmax_open_streams = 4\nmax_websockets = 2");
    let gateway = gateway_on_redis(&upstream, &keys, &redis.url(), &["--gateway-workers", "1"]).await;
    let base = gateway.base_url().to_owned();
    let client = fresh_connections();
    // The first request connects and loads the script (`SCRIPT LOAD` after `NOSCRIPT`).
    assert_eq!(probe(&client, &base, ALPHA).await.status, 404);

    let one_admission = |label: &str, commands: &[Vec<String>]| {
        assert_eq!(commands.len(), 1, "{label}: one round trip, not {commands:?}");
        assert_eq!(commands[0][0], "evalsha", "{label}: {commands:?}");
        assert_eq!(commands[0][3], "respgw:limits:{alpha}", "{label}: {commands:?}");
    };
    let opens = |commands: &[Vec<String>], set: &str| commands[0].get(4).map(String::as_str) == Some(set);
    let post = |body: Value| client.post(format!("{base}/v1/responses")).bearer_auth(ALPHA).json(&body);

    let (json_reply, commands) = monitor.during("json", send(post(json!({"model":"plain","input":"hi"})))).await;
    assert_eq!(json_reply.status, 200, "{}", json_reply.body);
    assert_eq!(json_reply.number("x-ratelimit-limit-requests"), 1000);
    one_admission("JSON", &commands);
    assert!(!opens(&commands, "respgw:limits:{alpha}:streams"), "a JSON request takes no lease: {commands:?}");

    let streamed = async {
        let response = post(json!({"model":"plain","input":"hi","stream":true})).send().await.expect("sent");
        let limit = response.headers().get("x-ratelimit-limit-requests").cloned();
        (response.status().as_u16(), limit, response.text().await.expect("the stream ends"))
    };
    let ((status, limit, text), commands) = monitor.during("sse", streamed).await;
    assert_eq!(status, 200);
    assert!(text.contains("response.completed"), "{text}");
    assert_eq!(limit.as_ref().and_then(|v| v.to_str().ok()), Some("1000"), "the stream's reply has the headers");
    one_admission("SSE", &commands);
    assert!(opens(&commands, "respgw:limits:{alpha}:streams"), "the stream's lease is taken with it: {commands:?}");

    let messages = async {
        let response = client
            .post(format!("{base}/v1/messages"))
            .header("x-api-key", ALPHA)
            .header("anthropic-version", "2023-06-01")
            .json(&json!({"model":"plain","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}))
            .send()
            .await
            .expect("sent");
        (response.status().as_u16(), response.text().await.expect("the stream ends"))
    };
    let ((status, text), commands) = monitor.during("messages", messages).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("message_stop"), "{text}");
    one_admission("Messages stream", &commands);
    assert!(opens(&commands, "respgw:limits:{alpha}:streams"), "{commands:?}");

    let (reply, commands) = monitor.during("probe", probe(&client, &base, ALPHA)).await;
    assert_eq!(reply.status, 404);
    one_admission("GET /v1/responses/{id}", &commands);

    let malformed = client
        .post(format!("{base}/v1/responses"))
        .bearer_auth(ALPHA)
        .header("content-type", "application/json")
        .body("{");
    let (reply, commands) = monitor.during("malformed", send(malformed)).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.number("x-ratelimit-limit-requests"), 1000, "a malformed request counts too");
    one_admission("malformed", &commands);

    let (socket, commands) = monitor.during("upgrade", websocket(&base, ALPHA)).await;
    let mut socket = socket.expect("upgraded");
    one_admission("WebSocket upgrade", &commands);
    assert!(opens(&commands, "respgw:limits:{alpha}:websockets"), "{commands:?}");
    let (events, commands) = monitor.during("frame", create_over(&mut socket, "plain")).await;
    assert_eq!(events.last().map(|e| e["type"].clone()), Some(json!("response.completed")), "{events:?}");
    one_admission("response.create over the WebSocket", &commands);
    assert!(opens(&commands, "respgw:limits:{alpha}:streams"), "{commands:?}");
    drop(socket);

    // Every lease taken (the SSE, Messages and WebSocket responses' streams, the WebSocket) is
    // given back, once each.
    let start = Instant::now();
    while monitor.releases() < 4 {
        assert!(start.elapsed() < Duration::from_secs(10), "{} of 4 leases released", monitor.releases());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(monitor.releases(), 4);
}

#[tokio::test]
async fn two_gateways_sharing_redis_hold_max_websockets_together() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::redis_server());
    let redis = RedisServer::start().expect("redis-server starts");
    let upstream = ReplayUpstream::start().await.expect("replay upstream starts");
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path(), "max_websockets = 2");
    let a = gateway_on_redis(&upstream, &keys, &redis.url(), &["--gateway-workers", "2"]).await;
    let b = gateway_on_redis(&upstream, &keys, &redis.url(), &["--gateway-workers", "2"]).await;
    let on_a = websocket(a.base_url(), ALPHA).await.expect("the first WebSocket opens");
    let _on_b = websocket(b.base_url(), ALPHA).await.expect("the second WebSocket opens");
    for base in [a.base_url(), b.base_url()] {
        assert!(refused_with_429(websocket(base, ALPHA).await), "a third, on either gateway, is refused");
    }
    let _beta = websocket(a.base_url(), BETA).await.expect("another tenant is unaffected");
    // A WebSocket closed on one gateway frees its place for the other (once the gateway notices).
    drop(on_a);
    let start = Instant::now();
    let _again = loop {
        match websocket(b.base_url(), ALPHA).await {
            Ok(socket) => break socket,
            Err(_) => assert!(start.elapsed() < Duration::from_secs(10), "the closed WebSocket's place was not freed"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(refused_with_429(websocket(a.base_url(), ALPHA).await), "two are open again");
}

// ---- chat completions pass-through ---------------------------------------------------------

/// Data payloads of an event stream's events.
fn data_lines(text: &str) -> Vec<&str> {
    text.lines().filter_map(|line| line.strip_prefix("data: ")).collect()
}

#[tokio::test]
async fn chat_completions_tokens_are_charged_to_the_tenants_budget() {
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path(), "tokens_per_day = 100");
    let h = Harness::start_with(&["--gateway-workers", "2", "--api-keys-file", &keys], &[]).await;
    let completion = json!({"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"json",
        "choices":[{"index":0,"message":{"role":"assistant","content":"Hi."},"finish_reason":"stop"}],
        "usage":{"prompt_tokens":30,"completion_tokens":10,"total_tokens":40}});
    h.upstream.add_repeating_scenario("json", Step::Status { status: 200, body: completion.clone() });
    h.upstream.add_repeating_scenario("stream", Step::text(&["Hi", "!"], "stop", Some((25, 5))));
    h.upstream.add_repeating_scenario("asks", Step::text(&["Hi."], "stop", Some((20, 15))));
    let client = fresh_connections();
    let chat = |key: &str, body: Value| client.post(h.url("/v1/chat/completions")).bearer_auth(key).json(&body);
    let messages = json!([{"role":"user","content":"hi"}]);

    // A JSON reply: relayed as it is, its 40 tokens charged.
    let sent = json!({"model":"json","messages":messages});
    let reply = send(chat(ALPHA, sent.clone())).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, completion, "relayed unchanged");
    assert_eq!(reply.number("x-ratelimit-remaining-tokens"), 100);
    assert_eq!(h.upstream.requests("json")[0].body, sent, "forwarded unchanged");

    // A stream that did not ask for usage: asked for it upstream, the usage chunk kept from the
    // client; its 30 tokens charged.
    let response = chat(ALPHA, json!({"model":"stream","messages":messages,"stream":true})).send().await.expect("sent");
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["x-ratelimit-remaining-tokens"], "60", "the JSON reply's 40 were charged");
    let text = response.text().await.expect("the stream ends");
    let received = &h.upstream.requests("stream")[0].body;
    assert_eq!(received["stream_options"], json!({"include_usage": true}), "{received}");
    let data = data_lines(&text);
    assert_eq!(data.last(), Some(&"[DONE]"), "{text}");
    assert_eq!(data.len(), 5, "role, two deltas, finish, [DONE]; no usage chunk: {text}");
    assert!(!text.contains("usage"), "the client did not ask for usage: {text}");

    // A stream that asked for usage gets it; its 35 tokens charged.
    let response =
        chat(ALPHA, json!({"model":"asks","messages":messages,"stream":true,"stream_options":{"include_usage":true}}))
            .send()
            .await
            .expect("sent");
    assert_eq!(response.headers()["x-ratelimit-remaining-tokens"], "30");
    let text = response.text().await.expect("the stream ends");
    let usage = data_lines(&text).into_iter().filter_map(|d| serde_json::from_str::<Value>(d).ok()).next_back();
    assert_eq!(usage.map(|u| u["usage"]["total_tokens"].clone()), Some(json!(35)), "{text}");

    // 105 of 100 spent: the next chat completion (or response) is refused before the upstream.
    for path in ["/v1/chat/completions", "/v1/responses"] {
        let refused = send(
            client.post(h.url(path)).bearer_auth(ALPHA).json(&json!({"model":"json","messages":messages,"input":"x"})),
        )
        .await;
        assert_eq!(refused.status, 429, "{path}: {}", refused.body);
        assert_error_shape(&refused.body);
        assert!(refused.body["error"]["message"].as_str().is_some_and(|m| m.contains("100 tokens per day")));
        assert_eq!(refused.number("x-ratelimit-remaining-tokens"), 0);
    }
    assert_eq!(h.upstream.requests("json").len(), 1, "no refused request reached the upstream");

    // A tenant without a budget is relayed untouched: nothing asked for on its behalf.
    let response = chat(BETA, json!({"model":"stream","messages":messages,"stream":true})).send().await.expect("sent");
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.text().await.expect("the stream ends").contains("usage"), "the upstream's stream as it is");
    assert_eq!(h.upstream.requests("stream")[1].body.get("stream_options"), None);
}

#[tokio::test]
async fn websocket_responses_count_against_the_tenants_limits_across_gateways() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::redis_server());
    let redis = RedisServer::start().expect("redis-server starts");
    let upstream = ReplayUpstream::start().await.expect("replay upstream starts");
    upstream.add_repeating_scenario("plain", Step::text(&["Hi."], "stop", None));
    upstream.add_repeating_scenario("slow", slow_stream(Duration::from_millis(1500)));
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path(), "requests_per_minute = 3\nmax_open_streams = 1");
    let a = gateway_on_redis(&upstream, &keys, &redis.url(), &["--gateway-workers", "1"]).await;
    let b = gateway_on_redis(&upstream, &keys, &redis.url(), &["--gateway-workers", "1"]).await;
    let client = fresh_connections();

    // Request 1: the upgrade, on gateway A.
    let mut socket = websocket(a.base_url(), ALPHA).await.expect("upgraded");
    // Request 2: a slow stream on gateway B holds alpha's one open stream...
    let slow = client
        .post(format!("{}/v1/responses", b.base_url()))
        .bearer_auth(ALPHA)
        .json(&json!({"model":"slow","input":"x","stream":true}))
        .send()
        .await
        .expect("sent");
    assert_eq!(slow.status().as_u16(), 200);
    // ...so a `response.create` on A's WebSocket is refused (using up no rate: streams are
    // checked first).
    let refused = create_over(&mut socket, "plain").await;
    let frame = refused.last().expect("a frame");
    assert_eq!((frame["type"].clone(), frame["status"].clone()), (json!("error"), json!(429)), "{frame}");
    assert_eq!(frame["error"]["code"], "rate_limit_exceeded", "{frame}");
    assert!(frame["error"]["message"].as_str().is_some_and(|m| m.contains("open streams")), "{frame}");
    assert!(slow.text().await.expect("the slow stream ends").contains("response.completed"));
    // Request 3, once the slow stream has ended, is served on the same WebSocket.
    let start = Instant::now();
    let served = loop {
        let events = create_over(&mut socket, "plain").await;
        let last = events.last().expect("a frame").clone();
        if last["type"] == "response.completed" {
            break last;
        }
        assert!(last["error"]["message"].as_str().is_some_and(|m| m.contains("open streams")), "{last}");
        assert!(start.elapsed() < Duration::from_secs(5), "the ended stream's lease was not released");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(served["response"]["status"], "completed");
    // The rate (3 a minute, burst 3) is spent on either gateway, over HTTP and the WebSocket alike.
    let over = create_over(&mut socket, "plain").await;
    let frame = over.last().expect("a frame");
    assert_eq!(frame["status"], 429, "{frame}");
    assert!(frame["error"]["message"].as_str().is_some_and(|m| m.contains("3 requests per minute")), "{frame}");
    let http = probe(&client, b.base_url(), ALPHA).await;
    assert_eq!(http.status, 429, "{}", http.body);
}
