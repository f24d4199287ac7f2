//! The MCP helper end to end: the real test server binaries (stdio child, streamable HTTP, legacy SSE)
//! behind the helper's loopback API, driven through `McpHelperClient`.

mod common;

use std::time::Duration;

use common::{HTTP_BIN, Helper, HttpServer, STDIO_BIN, test_settings};
use respgw_mcp::TransportKind;
use respgw_tools::mcp::{HelperError, McpHelperClient};
use serde_json::{Value, json};

/// A config with one server per transport, a broken entry, and token-protected servers.
struct Setup {
    helper: Helper,
    /// The HTTP servers live as long as the setup (killed on drop).
    _http: HttpServer,
    _secured: HttpServer,
}

const TOKEN: &str = "tok-s3cret-123";

async fn setup(tool_call: Duration) -> Setup {
    let http = HttpServer::start(0, &[]).await;
    let secured = HttpServer::start(0, &["--require-token", TOKEN]).await;
    let config = json!({"mcpServers": {
        "stdio": {"command": STDIO_BIN},
        "http": {"url": format!("{}/mcp", http.base)},
        "sse": {"url": format!("{}/sse", http.base)},
        "broken": {"command": "/nonexistent/respgw-no-such-mcp-server", "args": ["x"]},
        "secured": {"url": format!("{}/mcp", secured.base), "headers": {"Authorization": format!("Bearer {TOKEN}")}},
        "wrong_token": {"url": format!("{}/mcp?apiKey=query-s3cret", secured.base),
                        "headers": {"Authorization": "Bearer not-the-token"}},
    }});
    let helper = Helper::start_ready(config, test_settings(tool_call)).await;
    Setup { helper, _http: http, _secured: secured }
}

fn text(outcome: &respgw_mcp::CallOutcome) -> &str {
    outcome.output_text.as_deref().unwrap_or_default()
}

#[tokio::test]
async fn servers_report_transport_availability_and_last_error() {
    let s = setup(Duration::from_secs(10)).await;
    let servers = s.helper.client.servers().await.expect("servers");
    let labels: Vec<&str> = servers.iter().map(|s| s.server_label.as_str()).collect();
    assert_eq!(labels, ["broken", "http", "secured", "sse", "stdio", "wrong_token"], "sorted by label");
    for label in ["http", "secured", "sse", "stdio"] {
        let status = servers.iter().find(|s| s.server_label == label).expect("listed");
        assert!(status.available, "{status:?}");
        assert_eq!(status.last_error, None);
        assert!(status.tool_count >= 5, "{status:?}");
        assert_eq!((status.startup_ok_count, status.startup_error_count), (1, 0), "{status:?}");
    }
    let by_label = |l: &str| servers.iter().find(|s| s.server_label == l).expect("listed").clone();
    assert_eq!(by_label("stdio").transport, TransportKind::Stdio);
    assert_eq!(by_label("http").transport, TransportKind::StreamableHttp);
    assert_eq!(by_label("sse").transport, TransportKind::Sse);

    let broken = by_label("broken");
    assert!(!broken.available);
    assert_eq!(broken.tool_count, 0);
    let error = broken.last_error.clone().expect("last_error");
    assert!(error.contains("cannot start") && error.contains("No such file"), "{error}");
    assert!(broken.startup_error_count >= 1 && broken.startup_ok_count == 0, "{broken:?}");
    s.helper.stop().await;
}

#[tokio::test]
async fn lists_tools_over_every_transport() {
    let s = setup(Duration::from_secs(10)).await;
    for label in ["stdio", "http", "sse"] {
        let tools = s.helper.client.tools(label).await.expect("tools");
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "{label}: sorted by name");
        for expected in ["add", "echo", "fail", "image", "ref_schema", "slow"] {
            assert!(names.contains(&expected), "{label}: {expected} missing from {names:?}");
        }
        assert_eq!(names.contains(&"crash"), label == "stdio", "{label}: crash is stdio-only");
        let echo = tools.iter().find(|t| t.name == "echo").expect("echo");
        assert_eq!(echo.description.as_deref(), Some("Returns its text."));
        assert_eq!(echo.input_schema["properties"]["text"]["type"], "string");
        assert_eq!(echo.annotations.as_ref().expect("annotations")["readOnlyHint"], true);
        let ref_schema = tools.iter().find(|t| t.name == "ref_schema").expect("ref_schema");
        assert_eq!(ref_schema.input_schema["properties"]["point"]["$ref"], "#/$defs/Point");
        assert!(ref_schema.input_schema["$defs"]["Point"].is_object());
    }
    s.helper.stop().await;
}

#[tokio::test]
async fn calls_echo_add_and_ref_schema_over_every_transport() {
    let s = setup(Duration::from_secs(10)).await;
    for label in ["stdio", "http", "sse", "secured"] {
        let client = &s.helper.client;
        let echo = client.call(label, "echo", json!({"text": "héllo"})).await.expect("echo");
        assert!(echo.ok, "{label}: {echo:?}");
        assert_eq!(text(&echo), "héllo");
        assert_eq!(echo.error_text, None);
        assert_eq!(echo.content, [json!({"type": "text", "text": "héllo"})]);
        let add = client.call(label, "add", json!({"a": 2, "b": 40})).await.expect("add");
        assert_eq!((add.ok, text(&add)), (true, "42"), "{label}");
        let point = client.call(label, "ref_schema", json!({"point": {"x": 1, "y": 2}})).await.expect("ref_schema");
        assert_eq!(text(&point), "point (1, 2)", "{label}");
    }
    s.helper.stop().await;
}

#[tokio::test]
async fn tool_error_is_an_unsuccessful_outcome_not_an_http_error() {
    let s = setup(Duration::from_secs(10)).await;
    for label in ["stdio", "http", "sse"] {
        let fail = s.helper.client.call(label, "fail", json!({"message": "nope, said the tool"})).await.expect("fail");
        assert!(!fail.ok, "{label}: {fail:?}");
        assert_eq!(fail.output_text, None);
        assert_eq!(fail.error_text.as_deref(), Some("nope, said the tool"));
        assert_eq!(fail.content, [json!({"type": "text", "text": "nope, said the tool"})]);
    }
    s.helper.stop().await;
}

#[tokio::test]
async fn image_content_is_summarised_in_output_text() {
    let s = setup(Duration::from_secs(10)).await;
    let image = s.helper.client.call("http", "image", json!({})).await.expect("image");
    assert!(image.ok);
    assert_eq!(text(&image), "[image: image/png, 68 bytes]\na pixel");
    assert_eq!(image.content[0]["type"], "image");
    s.helper.stop().await;
}

#[tokio::test]
async fn slow_call_times_out_and_the_helper_stays_healthy() {
    let s = setup(Duration::from_millis(700)).await;
    for label in ["stdio", "http", "sse"] {
        let slow = s.helper.client.call(label, "slow", json!({"ms": 5000})).await.expect("slow");
        assert!(!slow.ok, "{label}: {slow:?}");
        let error = slow.error_text.as_deref().unwrap_or_default();
        assert!(error.contains("timed out after 0.7s"), "{label}: {error}");
        // The session survived: the next call works at once.
        let echo = s.helper.client.call(label, "echo", json!({"text": "still here"})).await.expect("echo");
        assert_eq!(text(&echo), "still here", "{label}");
        let quick = s.helper.client.call(label, "slow", json!({"ms": 10})).await.expect("quick");
        assert_eq!(text(&quick), "slept 10 ms", "{label}");
    }
    assert!(s.helper.client.health().await.expect("health").ok);
    assert!(s.helper.status("stdio").await.available);
    s.helper.stop().await;
}

#[tokio::test]
async fn crashed_stdio_server_is_restarted() {
    let s = setup(Duration::from_secs(10)).await;
    let crash = s.helper.client.call("stdio", "crash", json!({})).await.expect("crash");
    assert!(!crash.ok, "{crash:?}");
    let restarted = s.helper.wait_for("stdio", "restarted", |st| st.available && st.startup_ok_count >= 2).await;
    assert_eq!(restarted.last_error, None);
    let echo = s.helper.client.call("stdio", "echo", json!({"text": "back"})).await.expect("echo");
    assert_eq!(text(&echo), "back");
    s.helper.stop().await;
}

#[tokio::test]
async fn unknown_label_is_unknown_server_and_unavailable_is_unavailable() {
    let s = setup(Duration::from_secs(10)).await;
    let client = &s.helper.client;
    assert_eq!(client.tools("nope").await, Err(HelperError::UnknownServer { label: "nope".into() }));
    assert_eq!(client.call("nope", "echo", json!({})).await, Err(HelperError::UnknownServer { label: "nope".into() }));
    match client.tools("broken").await {
        Err(HelperError::Unavailable { label, last_error }) => {
            assert_eq!(label, "broken");
            assert!(last_error.contains("cannot start"), "{last_error}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(matches!(client.call("broken", "echo", json!({})).await, Err(HelperError::Unavailable { .. })));
    s.helper.stop().await;
}

#[tokio::test]
async fn raw_http_status_codes_and_bodies() {
    let s = setup(Duration::from_secs(10)).await;
    let http = reqwest::Client::new();
    let base = format!("http://{}", s.helper.addr);
    let get = |path: &str| http.get(format!("{base}{path}")).send();
    let health = get("/health").await.expect("health");
    assert_eq!(health.status(), 200);
    assert_eq!(health.json::<Value>().await.expect("json"), json!({"ok": true, "servers": 6, "available": 4}));
    let unknown = get("/servers/nope/tools").await.expect("404");
    assert_eq!(unknown.status(), 404);
    assert_eq!(unknown.json::<Value>().await.expect("json")["error"]["code"], "unknown_server");
    let unavailable = get("/servers/broken/tools").await.expect("409");
    assert_eq!(unavailable.status(), 409);
    let body = unavailable.json::<Value>().await.expect("json");
    assert_eq!(body["error"]["code"], "server_unavailable");
    assert!(body["error"]["last_error"].as_str().unwrap_or_default().contains("cannot start"), "{body}");
    let bad = http
        .post(format!("{base}/servers/http/tools/echo/call"))
        .json(&json!({"arguments": [1]}))
        .send()
        .await
        .expect("400");
    assert_eq!(bad.status(), 400);
    let list = get("/servers").await.expect("servers").json::<Value>().await.expect("json");
    assert_eq!(list["object"], "list");
    assert_eq!(list["data"][0]["server_label"], "broken");
    s.helper.stop().await;
}

#[tokio::test]
async fn bearer_token_from_config_headers_reaches_the_server_and_stays_secret() {
    let s = setup(Duration::from_secs(10)).await;
    assert!(s.helper.status("secured").await.available);
    let echo = s.helper.client.call("secured", "echo", json!({"text": "authorized"})).await.expect("echo");
    assert_eq!(text(&echo), "authorized");
    let wrong = s.helper.status("wrong_token").await;
    assert!(!wrong.available, "{wrong:?}");
    let error = wrong.last_error.expect("last_error");
    assert!(error.contains("401") || error.to_lowercase().contains("unauthorized"), "{error}");
    let listing = serde_json::to_string(&s.helper.client.servers().await.expect("servers")).expect("json");
    for secret in [TOKEN, "not-the-token", "query-s3cret"] {
        assert!(!listing.contains(secret), "{secret} leaked: {listing}");
    }
    s.helper.stop().await;
}

#[tokio::test]
async fn tools_list_changed_notification_refreshes_the_cache() {
    let s = setup(Duration::from_secs(10)).await;
    for label in ["stdio", "http", "sse"] {
        // Each session's cache was filled at its start, before anyone enabled `extra`.
        let before = s.helper.client.tools(label).await.expect("tools");
        assert!(!before.iter().any(|t| t.name == "extra"), "{label}");
        let enabled = s.helper.client.call(label, "enable_extra", json!({})).await.expect("enable");
        assert!(enabled.ok, "{label}: {enabled:?}");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let tools = s.helper.client.tools(label).await.expect("tools");
            if tools.iter().any(|t| t.name == "extra") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{label}: extra never appeared");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    s.helper.stop().await;
}

#[tokio::test]
async fn a_call_to_a_tool_missing_from_the_cache_refreshes_it_once() {
    // A separate HTTP server, so that no other test has enabled `extra` on it.
    let http = HttpServer::start(0, &[]).await;
    let helper = Helper::start_ready(
        json!({"mcpServers": {"http": {"url": format!("{}/mcp", http.base)}, "stdio": {"command": STDIO_BIN}}}),
        test_settings(Duration::from_secs(10)),
    )
    .await;
    for label in ["stdio", "http"] {
        let tools = helper.client.tools(label).await.expect("tools");
        assert!(!tools.iter().any(|t| t.name == "extra"), "{label}");
        let silent = helper.client.call(label, "enable_extra_silently", json!({})).await.expect("enable");
        assert!(silent.ok);
        // Not in the cache, but the server has it now: the helper looks again and calls it.
        let extra = helper.client.call(label, "extra", json!({})).await.expect("extra");
        assert_eq!((extra.ok, text(&extra)), (true, "extra"), "{label}: {extra:?}");
        assert!(helper.client.tools(label).await.expect("tools").iter().any(|t| t.name == "extra"));
        // A tool the server does not have either: an unsuccessful outcome, not an HTTP error.
        let missing = helper.client.call(label, "no_such_tool", json!({})).await.expect("missing");
        assert!(!missing.ok);
        assert!(missing.error_text.as_deref().unwrap_or_default().contains("not available"), "{missing:?}");
    }
    helper.stop().await;
    drop(http);
}

#[tokio::test]
async fn dropped_url_server_is_reconnected() {
    let mut http = HttpServer::start(0, &[]).await;
    let port = http.port;
    let helper = Helper::start_ready(
        json!({"mcpServers": {
            "http": {"url": format!("{}/mcp", http.base)},
            "sse": {"url": format!("{}/sse", http.base)},
        }}),
        test_settings(Duration::from_secs(5)),
    )
    .await;
    http.kill().await;
    for label in ["http", "sse"] {
        let down = helper.wait_for(label, "marked unavailable", |st| !st.available).await;
        assert!(down.last_error.is_some(), "{down:?}");
        assert!(matches!(
            helper.client.call(label, "echo", json!({"text": "x"})).await,
            Err(HelperError::Unavailable { .. })
        ));
    }
    // The server comes back on the same address; the helper finds it again by itself.
    let _again = HttpServer::start(port, &[]).await;
    for label in ["http", "sse"] {
        let up = helper.wait_for(label, "reconnected", |st| st.available).await;
        assert!(up.startup_ok_count >= 2, "{up:?}");
        let echo = helper.client.call(label, "echo", json!({"text": "reconnected"})).await.expect("echo");
        assert_eq!(text(&echo), "reconnected", "{label}");
    }
    helper.stop().await;
}

#[tokio::test]
async fn startup_timeout_marks_the_server_unavailable_and_readiness_waits_for_it() {
    let mut settings = test_settings(Duration::from_secs(5));
    settings.timeouts.startup = Duration::from_millis(1500);
    // `sleep` never answers `initialize`.
    let helper = Helper::start(
        json!({"mcpServers": {"silent": {"command": "sleep", "args": ["60"]}, "stdio": {"command": STDIO_BIN}}}),
        settings,
    )
    .await;
    let early = helper.client.health().await.expect("health");
    assert!(!early.ok, "ready before the first attempts ended: {early:?}");
    helper.wait_ready().await;
    let silent = helper.status("silent").await;
    assert!(!silent.available);
    assert!(silent.last_error.as_deref().unwrap_or_default().contains("timed out after 1.5s"), "{silent:?}");
    assert!(helper.status("stdio").await.available);
    helper.stop().await;
}

#[tokio::test]
async fn helper_down_is_unreachable() {
    common::install_crypto();
    // A port nobody listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let client = McpHelperClient::new(&format!("http://127.0.0.1:{port}")).expect("client");
    assert!(matches!(client.servers().await, Err(HelperError::Unreachable { .. })));
    assert!(matches!(client.tools("x").await, Err(HelperError::Unreachable { .. })));
    assert!(matches!(client.call("x", "y", json!({})).await, Err(HelperError::Unreachable { .. })));
}

#[tokio::test]
async fn http_test_server_prints_its_address_and_requires_the_token() {
    common::install_crypto();
    let server = HttpServer::start(0, &["--require-token", "abc"]).await;
    assert!(server.base.starts_with("http://127.0.0.1:"), "{}", server.base);
    let http = reqwest::Client::new();
    let denied = http.post(format!("{}/mcp", server.base)).json(&json!({})).send().await.expect("post");
    assert_eq!(denied.status(), 401);
    assert!(std::path::Path::new(HTTP_BIN).exists());
}
