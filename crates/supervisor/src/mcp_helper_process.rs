//! The Built-in MCP helper process: one `respgw mcp-helper` for the whole gateway.
//!
//! The supervisor validates the MCP config (a bad file is a clear start-up error), starts the
//! helper on a loopback port, waits until every configured server had its first start attempt,
//! hands its URL to the workers, and restarts it with back-off if it dies (its stdio MCP servers
//! come back with it). It also polls the helper's per-server start-up counts and merges them into
//! the gateway's metrics like one more process, so `gw_responses_mcp_server_startup_total`
//! appears on every worker's `/metrics` and never goes backwards across helper restarts.
//! With `--mcp-helper-url` the helper runs on its own and only the polling happens here.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use respgw_mcp::{McpConfig, McpTimeouts};
use respgw_telemetry::{CounterSample, MergedMetrics, MetricsSnapshot};
use respgw_tools::mcp::McpHelperClient;
use tokio::sync::watch;

/// How this gateway gets its Built-in MCP helper.
#[derive(Debug, Clone)]
pub enum McpSetup {
    /// Built-in MCP is disabled.
    None,
    /// Start a helper on this loopback port (0: any free port) for this config and/or the Exa
    /// server the `exa_mcp` web search profile provisions (label `exa`, at `exa.url`), with these
    /// time limits.
    Spawn { config: Option<PathBuf>, port: u16, exa: Option<ExaServer>, timeouts: McpTimeouts },
    /// Use a helper that runs on its own.
    External { url: String },
}

/// The Exa server a spawned helper provisions for the `exa_mcp` web search profile.
#[derive(Clone)]
pub struct ExaServer {
    /// Exa's MCP endpoint.
    pub url: String,
    /// Exa's API key (`EXA_API_KEY`), handed to the helper in its environment, never on its
    /// command line.
    pub api_key: Option<String>,
}

impl std::fmt::Debug for ExaServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExaServer")
            .field("url", &self.url)
            .field("api_key", &self.api_key.as_ref().map(|_| "…"))
            .finish()
    }
}

impl McpSetup {
    /// `exa`: the Exa server when the `exa_mcp` web search profile is on (an external helper must
    /// then be configured with an `exa` server itself).
    pub fn from_args(
        config: Option<PathBuf>,
        port: u16,
        url: Option<String>,
        exa: Option<ExaServer>,
        timeouts: McpTimeouts,
    ) -> Self {
        match (config, url, exa) {
            (None, Some(url), _) => McpSetup::External { url },
            (None, None, None) => McpSetup::None,
            (config, _, exa) => McpSetup::Spawn { config, port, exa, timeouts },
        }
    }
}

/// The key the helper's metrics are merged under in [`MergedMetrics`]: a worker slot number no
/// worker has (workers are numbered from 0).
const HELPER_METRICS_KEY: u32 = u32::MAX;
/// How often the helper's start-up counts are polled.
const POLL_INTERVAL: Duration = Duration::from_secs(2);
const RESTART_DELAY_MIN: Duration = Duration::from_millis(500);
const RESTART_DELAY_MAX: Duration = Duration::from_secs(30);

/// The MCP helper in use: one this supervisor started and restarts, or an external one it only
/// polls. [`McpHelperProcess::stop`] stops the one it started.
pub struct McpHelperProcess {
    pub url: String,
    stop: watch::Sender<bool>,
    supervisor: Option<tokio::task::JoinHandle<()>>,
}

impl McpHelperProcess {
    /// Stop the helper we started and wait for it.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.supervisor.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

/// Start (or find) the helper; `None` when Built-in MCP is disabled.
pub async fn start(setup: &McpSetup, merged: Arc<Mutex<MergedMetrics>>) -> anyhow::Result<Option<McpHelperProcess>> {
    let (stop, stop_rx) = watch::channel(false);
    match setup {
        McpSetup::None => Ok(None),
        McpSetup::External { url } => {
            let client = McpHelperClient::new(url).with_context(|| format!("bad --mcp-helper-url '{url}'"))?;
            match client.health().await {
                Ok(_) => tracing::info!(%url, "using the MCP helper"),
                Err(e) => {
                    tracing::warn!(%url, error = %e, "the MCP helper does not answer yet; MCP calls fail until it does")
                }
            }
            tokio::spawn(poll_startup_counts(client, merged, None, stop_rx));
            Ok(Some(McpHelperProcess { url: url.clone(), stop, supervisor: None }))
        }
        McpSetup::Spawn { config, port, exa, timeouts } => {
            let parsed = match config {
                Some(path) => McpConfig::load(path)?,
                None => McpConfig::default(),
            };
            for warning in &parsed.warnings {
                tracing::warn!("{warning}");
            }
            let port = if *port == 0 { crate::free_loopback_port()? } else { *port };
            let url = format!("http://127.0.0.1:{port}");
            let client = McpHelperClient::new(&url)?;
            let exe = std::env::current_exe().context("cannot find the respgw binary to start the MCP helper")?;
            let command = HelperCommand { exe, config: config.clone(), exa: exa.clone(), port, timeouts: *timeouts };
            let mut child = command.spawn()?;
            // Every server gets its start-up timeout; the helper is healthy once all were tried.
            let ready_within = timeouts.startup + Duration::from_secs(15);
            wait_healthy(&client, &mut child, ready_within).await?;
            let servers = parsed.servers.len() + usize::from(exa.is_some());
            tracing::info!(%url, servers, "MCP helper ready");
            let (generation_tx, generation_rx) = watch::channel(0u64);
            tokio::spawn(poll_startup_counts(client, merged, Some(generation_rx), stop_rx.clone()));
            let supervisor = tokio::spawn(supervise(command, child, generation_tx, stop_rx));
            Ok(Some(McpHelperProcess { url, stop, supervisor: Some(supervisor) }))
        }
    }
}

struct HelperCommand {
    exe: PathBuf,
    config: Option<PathBuf>,
    /// The Exa server to provision.
    exa: Option<ExaServer>,
    port: u16,
    timeouts: McpTimeouts,
}

impl HelperCommand {
    fn spawn(&self) -> anyhow::Result<tokio::process::Child> {
        let mut command = std::process::Command::new(&self.exe);
        command.arg("mcp-helper");
        if let Some(config) = &self.config {
            command.arg("--config").arg(config);
        }
        if let Some(exa) = &self.exa {
            command.arg("--web-search-exa-mcp-url").arg(&exa.url);
            match &exa.api_key {
                Some(key) => command.env("EXA_API_KEY", key),
                None => command.env_remove("EXA_API_KEY"),
            };
        }
        command
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--mcp-builtin-startup-timeout-sec")
            .arg(self.timeouts.startup.as_secs_f64().to_string())
            .arg("--mcp-builtin-tool-timeout-sec")
            .arg(self.timeouts.tool_call.as_secs_f64().to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        crate::pool::die_with_parent(&mut command);
        let child = tokio::process::Command::from(command).spawn().context("cannot start the MCP helper")?;
        tracing::info!(pid = child.id().unwrap_or_default(), port = self.port, "MCP helper started");
        Ok(child)
    }
}

async fn wait_healthy(
    client: &McpHelperClient,
    child: &mut tokio::process::Child,
    within: Duration,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("the MCP helper exited during start-up with {status}; see its log above");
        }
        if client.health().await.is_ok_and(|h| h.ok) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("the MCP helper did not become ready within {} s", within.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Restart the helper whenever it dies, until told to stop; then stop it.
async fn supervise(
    command: HelperCommand,
    mut child: tokio::process::Child,
    generation: watch::Sender<u64>,
    mut stop: watch::Receiver<bool>,
) {
    let mut failures = 0u32;
    loop {
        let started = tokio::time::Instant::now();
        tokio::select! {
            status = child.wait() => {
                let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
                failures = if started.elapsed() > Duration::from_secs(60) { 0 } else { failures + 1 };
                let delay = RESTART_DELAY_MIN.saturating_mul(1 << failures.min(6)).min(RESTART_DELAY_MAX);
                tracing::error!(%status, delay_ms = delay.as_millis() as u64, "the MCP helper died; restarting it");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = stop.changed() => return,
                }
                match command.spawn() {
                    Ok(new_child) => {
                        child = new_child;
                        generation.send_modify(|g| *g += 1);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "cannot restart the MCP helper");
                        return;
                    }
                }
            }
            _ = stop.changed() => {
                if let Some(pid) = child.id() {
                    let _ = kill(Pid::from_raw(pid as libc::pid_t), Signal::SIGTERM);
                }
                if tokio::time::timeout(Duration::from_secs(5), child.wait()).await.is_err() {
                    let _ = child.kill().await;
                }
                return;
            }
        }
    }
}

/// Publish the helper's per-server start-up counts as `gw_responses_mcp_server_startup_total`.
/// They are absolute per helper process: a restarted helper is a new generation, so the counts
/// of the dead one are kept by the merge. For an external helper, a count that drops means it
/// restarted.
async fn poll_startup_counts(
    client: McpHelperClient,
    merged: Arc<Mutex<MergedMetrics>>,
    generations: Option<watch::Receiver<u64>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut external_generation = 0u64;
    let mut last_total = 0u64;
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let Ok(servers) = client.servers().await else { continue };
        let mut counters = Vec::with_capacity(servers.len() * 2);
        for server in &servers {
            for (status, value) in [("ok", server.startup_ok_count), ("error", server.startup_error_count)] {
                counters.push(CounterSample {
                    name: "gw_responses_mcp_server_startup_total".into(),
                    labels: vec![
                        ("server_label".into(), server.server_label.clone()),
                        ("status".into(), status.into()),
                    ],
                    value,
                });
            }
        }
        let total: u64 = counters.iter().map(|c| c.value).sum();
        let generation = match &generations {
            Some(g) => *g.borrow(),
            None => {
                if total < last_total {
                    external_generation += 1;
                }
                external_generation
            }
        };
        last_total = total;
        let snapshot = MetricsSnapshot { counters, gauges: Vec::new(), histograms: Vec::new() };
        merged.lock().unwrap_or_else(PoisonError::into_inner).update(HELPER_METRICS_KEY, generation, snapshot);
    }
}
