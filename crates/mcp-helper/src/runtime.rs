//! [`McpRuntime`]: every configured server's [`SupervisedServer`], their supervising tasks, readiness and
//! shutdown. The loopback API ([`crate::api`]) is a thin layer over it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use respgw_mcp::{McpConfig, ServerStatus};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::HelperSettings;
use crate::supervised_server::SupervisedServer;

/// How long [`McpRuntime::shutdown`] waits for sessions to close (each has its own 5 s grace; they
/// close in parallel).
const SHUTDOWN_BOUND: Duration = Duration::from_secs(10);

/// The Built-in MCP runtime: one supervised session per configured server.
pub struct McpRuntime {
    servers: BTreeMap<String, Arc<SupervisedServer>>,
    settings: Arc<HelperSettings>,
    shutdown: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl McpRuntime {
    /// Creates a [`SupervisedServer`] per configured server and starts supervising each (start-ups
    /// run in parallel). Must be called inside a tokio runtime.
    pub fn start(config: McpConfig, settings: HelperSettings) -> anyhow::Result<Arc<Self>> {
        let settings = Arc::new(settings);
        let (shutdown, shutdown_rx) = watch::channel(false);
        let mut servers = BTreeMap::new();
        for (label, entry) in config.servers {
            let server =
                SupervisedServer::new(&label, entry).map_err(|e| anyhow::anyhow!("MCP server {label:?}: {e}"))?;
            servers.insert(label, Arc::new(server));
        }
        let tasks = servers
            .values()
            .map(|server| tokio::spawn(server.clone().supervise(settings.clone(), shutdown_rx.clone())))
            .collect();
        Ok(Arc::new(McpRuntime { servers, settings, shutdown, tasks: Mutex::new(tasks) }))
    }

    /// The settings the runtime runs with.
    pub fn settings(&self) -> &HelperSettings {
        &self.settings
    }

    /// True once every server has had its first start attempt (successful or not).
    pub fn is_ready(&self) -> bool {
        self.servers.values().all(|server| server.first_attempt_done())
    }

    /// Waits until [`Self::is_ready`] (polling; start-ups take seconds, not microseconds).
    pub async fn wait_ready(&self) {
        while !self.is_ready() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every server's status, sorted by label.
    pub fn servers(&self) -> Vec<ServerStatus> {
        self.servers.values().map(|server| server.status()).collect()
    }

    /// The server labelled `label`.
    pub fn server(&self, label: &str) -> Option<&Arc<SupervisedServer>> {
        self.servers.get(label)
    }

    /// Stops every session (stdio children are terminated) and waits for the supervisors, bounded.
    pub async fn shutdown(&self) {
        let _ = self.shutdown.send(true);
        let tasks: Vec<JoinHandle<()>> = match self.tasks.lock() {
            Ok(mut tasks) => tasks.drain(..).collect(),
            Err(_) => Vec::new(),
        };
        let all = futures::future::join_all(tasks);
        if tokio::time::timeout(SHUTDOWN_BOUND, all).await.is_err() {
            tracing::warn!("some MCP sessions did not stop in time");
        }
    }
}
