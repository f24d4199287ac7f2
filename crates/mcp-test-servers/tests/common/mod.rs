//! Shared pieces of the MCP helper's end-to-end tests: starting the test servers as real processes and
//! the helper in-process on `127.0.0.1:0`.
//!
//! These tests live in the test servers' package because Cargo builds a package's binaries (and
//! exports `CARGO_BIN_EXE_<name>`) only for that package's own tests; here the servers are always the
//! freshly built ones.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use respgw_mcp::{McpConfig, McpTimeouts, ServerStatus};
use respgw_mcp_helper::HelperSettings;
use respgw_tools::mcp::McpHelperClient;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The stdio test server binary.
pub const STDIO_BIN: &str = env!("CARGO_BIN_EXE_respgw-mcp-test-stdio");
/// The HTTP test server binary.
pub const HTTP_BIN: &str = env!("CARGO_BIN_EXE_respgw-mcp-test-http");

/// reqwest (workspace build) needs a process-wide rustls provider before any client is built.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A running `respgw-mcp-test-http`, killed on drop.
pub struct HttpServer {
    pub child: Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    pub port: u16,
}

impl HttpServer {
    /// Starts the HTTP test server on `port` (0: any) with extra arguments, and waits for its
    /// `listening on` line.
    pub async fn start(port: u16, extra: &[&str]) -> HttpServer {
        let mut child = Command::new(HTTP_BIN)
            .arg("--port")
            .arg(port.to_string())
            .args(extra)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn respgw-mcp-test-http");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("respgw-mcp-test-http did not print its address in time")
            .expect("read stdout")
            .expect("respgw-mcp-test-http exited before printing its address");
        let base = line.strip_prefix("listening on ").expect("listening line").trim().to_owned();
        let port = base.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port");
        HttpServer { child, base, port }
    }

    /// Kills the server and waits until it is gone.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}

/// The helper running in this process.
pub struct Helper {
    pub client: McpHelperClient,
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

impl Helper {
    /// Starts the helper with `config` (an `mcp.json` document) and `settings`; does not wait for it
    /// to be ready.
    pub async fn start(config: Value, settings: HelperSettings) -> Helper {
        install_crypto();
        let config = McpConfig::from_json_str(&config.to_string()).expect("valid test config");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(respgw_mcp_helper::serve(listener, config, settings, async move {
            let _ = stopped.await;
        }));
        let client = McpHelperClient::new(&format!("http://{addr}")).expect("client");
        Helper { client, addr, stop: Some(stop), task: Some(task) }
    }

    /// Starts the helper and waits until `/health` says ready.
    pub async fn start_ready(config: Value, settings: HelperSettings) -> Helper {
        let helper = Helper::start(config, settings).await;
        helper.wait_ready().await;
        helper
    }

    pub async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(health) = self.client.health().await
                && health.ok
            {
                return;
            }
            assert!(Instant::now() < deadline, "helper not ready within 30s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the helper (as on SIGTERM) and waits for `serve` to return.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("helper did not stop within 30s")
                .expect("helper task")
                .expect("helper serve");
        }
    }

    /// The status of one server.
    pub async fn status(&self, label: &str) -> ServerStatus {
        let servers = self.client.servers().await.expect("servers");
        servers.into_iter().find(|s| s.server_label == label).unwrap_or_else(|| panic!("no server {label}"))
    }

    /// Polls `GET /servers` until `label` satisfies `pred` (20 s at most).
    pub async fn wait_for(&self, label: &str, what: &str, pred: impl Fn(&ServerStatus) -> bool) -> ServerStatus {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let status = self.status(label).await;
            if pred(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "{label}: not {what} within 20s: {status:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Settings for tests: quick restarts, a short call timeout.
pub fn test_settings(tool_call: Duration) -> HelperSettings {
    HelperSettings {
        timeouts: McpTimeouts { startup: Duration::from_secs(15), tool_call },
        restart_backoff_initial: Duration::from_millis(100),
        restart_backoff_max: Duration::from_secs(1),
        ping_interval: Duration::from_millis(300),
        on_startup: None,
    }
}
