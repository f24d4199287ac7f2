//! The Built-in MCP runtime: `respgw mcp-helper --config mcp.json --listen 127.0.0.1:PORT`.
//!
//! One helper per gateway, shared by all workers (or run on its own, e.g. as a systemd unit, with the
//! workers given its URL). It keeps one persistent MCP client session per configured server — stdio
//! child processes, streamable HTTP and legacy HTTP+SSE remotes — and serves a small HTTP API on a
//! loopback address through which workers list servers, list tools and call tools (routes and JSON
//! shapes: `respgw_mcp`; the worker's client: `respgw_tools::mcp::McpHelperClient`).
//!
//! What it guarantees:
//! - start-up: every server is started in parallel, each within `GW_MCP_BUILTIN_STARTUP_TIMEOUT_SEC`
//!   (spawn or connect, `initialize`, first `tools/list`); `/health` answers 200 once every server has
//!   had that first attempt, whatever its outcome. A server that fails is *unavailable*, not fatal;
//! - recovery: a dead stdio server is restarted, a dropped URL server reconnected, a failed start
//!   retried — with exponential back-off, forever;
//! - tools: `tools/list` is cached per session, refreshed on `notifications/tools/list_changed` and when
//!   a call names a tool missing from the cache;
//! - calls: bounded by `GW_MCP_BUILTIN_TOOL_TIMEOUT_SEC`; every failure of an attempted call (tool error,
//!   timeout, lost connection, unknown tool) is an `ok:false` outcome with a redacted `error_text`;
//! - metrics: start-up outcomes are counted per server and exposed in `GET /servers`
//!   (`startup_ok_count`, `startup_error_count`), and optionally reported to a [`StartupHook`];
//! - secrets (header values, env values, URL query values) never appear in error texts or the log;
//! - stdio servers run in their own process group with a minimal environment, are stopped (EOF, SIGTERM,
//!   SIGKILL) when the helper stops, and are SIGKILLed by the kernel if the helper dies.
//!
//! Files: [`runtime`] (all servers), [`supervised_server`] (one server: state, supervision, calls), `connect`
//! (opening a session), [`api`] (the routes). Shared with Remote MCP and kept in `respgw_mcp`:
//! `legacy_sse` (the SSE client transport rmcp lacks), `redact` (secret masking, error texts) and
//! `client` (`tools/list` into the wire shape).

pub mod api;
mod connect;
pub mod runtime;
pub mod supervised_server;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use respgw_mcp::{McpConfig, McpTimeouts};

pub use runtime::McpRuntime;

/// Called on every server start attempt with the label and whether it succeeded — for a process that
/// embeds the runtime and wants `gw_responses_mcp_server_startup_total` in its own recorder.
pub type StartupHook = Arc<dyn Fn(&str, bool) + Send + Sync>;

/// How the helper runs.
#[derive(Clone)]
pub struct HelperSettings {
    /// Start-up and tool-call limits (`GW_MCP_BUILTIN_STARTUP_TIMEOUT_SEC`, `GW_MCP_BUILTIN_TOOL_TIMEOUT_SEC`).
    pub timeouts: McpTimeouts,
    /// First delay before restarting a failed or dead server.
    pub restart_backoff_initial: Duration,
    /// Longest delay between restart attempts.
    pub restart_backoff_max: Duration,
    /// How often a live session is pinged, to notice a URL server that went away while idle.
    pub ping_interval: Duration,
    /// Optional observer of start-up outcomes.
    pub on_startup: Option<StartupHook>,
}

impl Default for HelperSettings {
    fn default() -> Self {
        HelperSettings {
            timeouts: McpTimeouts::default(),
            restart_backoff_initial: Duration::from_millis(500),
            restart_backoff_max: Duration::from_secs(30),
            ping_interval: Duration::from_secs(30),
            on_startup: None,
        }
    }
}

impl fmt::Debug for HelperSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HelperSettings")
            .field("timeouts", &self.timeouts)
            .field("restart_backoff_initial", &self.restart_backoff_initial)
            .field("restart_backoff_max", &self.restart_backoff_max)
            .field("ping_interval", &self.ping_interval)
            .field("on_startup", &self.on_startup.as_ref().map(|_| "…"))
            .finish()
    }
}

/// Runs the helper on `listen` until SIGTERM or SIGINT. `listen` must be a loopback address: the API
/// has no authentication.
pub async fn run(config: McpConfig, listen: SocketAddr, settings: HelperSettings) -> anyhow::Result<()> {
    check_loopback(listen)?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("MCP helper: cannot listen on {listen}"))?;
    serve(listener, config, settings, stop_signal()).await
}

/// Runs the helper on an already bound listener until `shutdown` completes, then stops every MCP
/// session. For tests and for embedding (bind `127.0.0.1:0`, read the port, pass the listener).
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: McpConfig,
    settings: HelperSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let addr = listener.local_addr().context("MCP helper: listener address")?;
    check_loopback(addr)?;
    // URL servers use reqwest, built here without a default TLS provider; the `respgw` binary installs
    // one, but the helper must also work embedded in a process that did not.
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    let labels: Vec<&String> = config.servers.keys().collect();
    tracing::info!(%addr, servers = ?labels, "MCP helper listening");
    let runtime = McpRuntime::start(config, settings)?;
    let served = axum::serve(listener, api::router(runtime.clone())).with_graceful_shutdown(shutdown).await;
    runtime.shutdown().await;
    served.context("MCP helper: HTTP server failed")
}

fn check_loopback(addr: SocketAddr) -> anyhow::Result<()> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        anyhow::bail!(
            "MCP helper: refusing to listen on {addr}: its API has no authentication, so it only listens on a \
             loopback address (127.0.0.1 or ::1)"
        )
    }
}

/// Completes on SIGTERM or SIGINT.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGTERM; stopping on SIGINT only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_non_loopback_listen_addresses() {
        let e = check_loopback("0.0.0.0:5981".parse().expect("addr")).expect_err("refused");
        assert!(e.to_string().contains("loopback"), "{e}");
        assert!(check_loopback("192.168.1.2:5981".parse().expect("addr")).is_err());
        assert!(check_loopback("127.0.0.1:5981".parse().expect("addr")).is_ok());
        assert!(check_loopback("[::1]:5981".parse().expect("addr")).is_ok());
    }

    #[tokio::test]
    async fn run_refuses_a_public_address_before_binding() {
        let e = run(McpConfig::default(), "0.0.0.0:0".parse().expect("addr"), HelperSettings::default())
            .await
            .expect_err("refused");
        assert!(e.to_string().contains("refusing"), "{e}");
    }
}
