//! The helper against an ecosystem server: `@modelcontextprotocol/server-everything` (the official
//! TypeScript SDK's reference server) over stdio, legacy SSE and streamable HTTP.
//!
//! The package is installed by `scripts/setup-mcp-test-servers` into `crates/mcp-test-servers/npm/`
//! (pinned in its `package.json`), so this test runs offline afterwards. Without it the test is
//! skipped with a line saying what to run under plain `cargo test`, and fails under `scripts/test`
//! (see `respgw_testkit::prerequisites`).

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Helper, test_settings};
use serde_json::json;
use tokio::process::{Child, Command};

/// The installed server's entry point.
fn server_everything() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

/// The npm server and Node.js are installed (`scripts/setup-mcp-test-servers`).
fn server_everything_installed() -> Result<(), String> {
    respgw_testkit::prerequisites::program("node", "Debian package nodejs")?;
    respgw_testkit::prerequisites::file(&server_everything(), "scripts/setup-mcp-test-servers installs it")
}

/// A free loopback port (bound, then released; server-everything takes its port from `PORT`).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// Starts `node index.js <transport>` on `port` and waits until it accepts connections.
async fn start_node_server(index: &PathBuf, transport: &str, port: u16) -> Child {
    let child = Command::new("node")
        .arg(index)
        .arg(transport)
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn node");
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(Instant::now() < deadline, "server-everything ({transport}) did not listen on {port} within 30s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    child
}

#[tokio::test]
async fn server_everything_works_over_stdio_sse_and_streamable_http() {
    respgw_testkit::skip_unless!(server_everything_installed());
    let index = server_everything();
    let (sse_port, http_port) = (free_port(), free_port());
    let _sse = start_node_server(&index, "sse", sse_port).await;
    let _http = start_node_server(&index, "streamableHttp", http_port).await;
    let helper = Helper::start_ready(
        json!({"mcpServers": {
            "everything": {"command": "node", "args": [index, "stdio"]},
            "everything_sse": {"url": format!("http://127.0.0.1:{sse_port}/sse")},
            "everything_http": {"url": format!("http://127.0.0.1:{http_port}/mcp")},
        }}),
        test_settings(Duration::from_secs(20)),
    )
    .await;
    for label in ["everything", "everything_sse", "everything_http"] {
        let status = helper.status(label).await;
        assert!(status.available, "{status:?}");
        let tools = helper.client.tools(label).await.expect("tools");
        let echo = tools.iter().find(|t| t.name == "echo").unwrap_or_else(|| panic!("{label}: no echo tool"));
        assert_eq!(echo.input_schema["properties"]["message"]["type"], "string", "{label}");

        let echoed = helper.client.call(label, "echo", json!({"message": "hi from respgw"})).await.expect("echo");
        assert!(echoed.ok, "{label}: {echoed:?}");
        assert_eq!(echoed.output_text.as_deref(), Some("Echo: hi from respgw"), "{label}");

        let sum = helper.client.call(label, "get-sum", json!({"a": 2, "b": 3})).await.expect("get-sum");
        assert_eq!(sum.output_text.as_deref(), Some("The sum of 2 and 3 is 5."), "{label}: {sum:?}");

        let image = helper.client.call(label, "get-tiny-image", json!({})).await.expect("image");
        let text = image.output_text.unwrap_or_default();
        assert!(text.contains("[image: image/png, "), "{label}: {text}");

        // Invalid arguments: the server's validation error is an unsuccessful outcome.
        let bad = helper.client.call(label, "get-sum", json!({"a": "two"})).await.expect("bad");
        assert!(!bad.ok, "{label}: {bad:?}");
        assert!(bad.error_text.is_some());
    }
    helper.stop().await;
}
