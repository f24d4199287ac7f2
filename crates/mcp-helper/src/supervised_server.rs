//! One configured server: its state, its tool cache, and the task that keeps its session alive.
//!
//! Life of a server: `Starting` → (`Ready` ⇄ `Down`)*. The supervising task ([`SupervisedServer::supervise`])
//! opens a session within the start-up timeout, then watches it: a closed session (stdio child exited,
//! stream dropped), a call that hit a dead connection, or an unanswered ping mark the server `Down` and
//! it starts again after an exponential back-off (`initial`, doubling up to `max`; back to `initial`
//! once a session has stayed up for a minute). Every start attempt counts as one
//! `mcp_server_startup_total{status="ok"|"error"}`.
//!
//! The tool cache is the inventory of the current session. It is refreshed when the server sends
//! `notifications/tools/list_changed`, and when a call names a tool that is not in it (the server may
//! have changed its tools without saying so); a tool still missing after that refresh fails the call.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use respgw_mcp::client::list_tools;
use respgw_mcp::redact::{error_chain, tidy};
use respgw_mcp::{CallOutcome, ServerEntry, ServerStatus, ToolInfo, content_to_text};
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ClientRequest};
use rmcp::service::ServiceError;
use rmcp::{Peer, RoleClient};
use serde_json::{Map, Value};
use tokio::sync::{Notify, mpsc, watch};

use crate::HelperSettings;
use crate::connect::Connector;

/// A session that lived this long before dying resets the back-off: it was not a crash loop.
const STABLE_SESSION: Duration = Duration::from_secs(60);
/// How long a session may take to close when the helper stops it (then it is dropped, which kills a
/// child).
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Where a server stands.
#[derive(Clone)]
enum ServerState {
    /// The first start attempt is under way.
    Starting,
    /// A session is up.
    Ready {
        /// Which session this is (one per successful start), so late news about an old session does not
        /// touch a new one.
        generation: u64,
        peer: Peer<RoleClient>,
        tools: Arc<Vec<ToolInfo>>,
    },
    /// No session; the reason, redacted.
    Down { error: String },
}

/// The parts of a `Ready` state a request needs.
struct Live {
    generation: u64,
    peer: Peer<RoleClient>,
    tools: Arc<Vec<ToolInfo>>,
}

/// Why a request for this server was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerError {
    /// The server is not available; its last error.
    Unavailable(String),
}

/// One configured server.
pub struct SupervisedServer {
    label: String,
    connector: Connector,
    state: Mutex<ServerState>,
    /// Woken by the session handler on `notifications/tools/list_changed`.
    tools_changed: Arc<Notify>,
    /// Calls report a dead connection here: (session generation, what happened).
    broken_tx: mpsc::UnboundedSender<(u64, String)>,
    broken_rx: Mutex<Option<mpsc::UnboundedReceiver<(u64, String)>>>,
    startup_ok: AtomicU64,
    startup_error: AtomicU64,
    /// Set once the first start attempt has ended either way (the helper is ready when all have).
    first_attempt_done: AtomicBool,
}

impl SupervisedServer {
    /// A server for one config entry (nothing is started yet).
    pub fn new(label: &str, entry: ServerEntry) -> anyhow::Result<Self> {
        let (broken_tx, broken_rx) = mpsc::unbounded_channel();
        Ok(SupervisedServer {
            label: label.to_owned(),
            connector: Connector::new(label, entry)?,
            state: Mutex::new(ServerState::Starting),
            tools_changed: Arc::new(Notify::new()),
            broken_tx,
            broken_rx: Mutex::new(Some(broken_rx)),
            startup_ok: AtomicU64::new(0),
            startup_error: AtomicU64::new(0),
            first_attempt_done: AtomicBool::new(false),
        })
    }

    /// The configured label.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// True once the first start attempt has ended.
    pub fn first_attempt_done(&self) -> bool {
        self.first_attempt_done.load(Ordering::SeqCst)
    }

    fn state(&self) -> ServerState {
        match self.state.lock() {
            Ok(state) => state.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn set_state(&self, new: ServerState) {
        match self.state.lock() {
            Ok(mut state) => *state = new,
            Err(poisoned) => *poisoned.into_inner() = new,
        }
    }

    /// The server as `GET /servers` shows it.
    pub fn status(&self) -> ServerStatus {
        let (available, last_error, tool_count) = match self.state() {
            ServerState::Starting => (false, Some("starting".to_owned()), 0),
            ServerState::Ready { tools, .. } => (true, None, tools.len()),
            ServerState::Down { error } => (false, Some(error), 0),
        };
        ServerStatus {
            server_label: self.label.clone(),
            transport: self.connector.entry.transport(),
            available,
            last_error,
            tool_count,
            startup_ok_count: self.startup_ok.load(Ordering::SeqCst),
            startup_error_count: self.startup_error.load(Ordering::SeqCst),
        }
    }

    /// The current session, or why there is none.
    fn ready(&self) -> Result<Live, ServerError> {
        match self.state() {
            ServerState::Ready { generation, peer, tools } => Ok(Live { generation, peer, tools }),
            ServerState::Starting => Err(ServerError::Unavailable("starting".into())),
            ServerState::Down { error } => Err(ServerError::Unavailable(error)),
        }
    }

    /// The cached tool inventory.
    pub fn tools(&self) -> Result<Arc<Vec<ToolInfo>>, ServerError> {
        self.ready().map(|live| live.tools)
    }

    /// Re-lists the tools of session `generation` and caches them, if that session is still current.
    async fn refresh_tools(
        &self,
        generation: u64,
        peer: &Peer<RoleClient>,
        timeout: Duration,
    ) -> Result<Arc<Vec<ToolInfo>>, String> {
        let tools = match tokio::time::timeout(timeout, list_tools(peer)).await {
            Ok(Ok(tools)) => Arc::new(tools),
            Ok(Err(e)) => return Err(self.connector.redactor.clean(&e)),
            Err(_) => return Err(format!("tools/list did not answer within {}s", timeout.as_secs_f64())),
        };
        if let Ok(mut state) = self.state.lock()
            && let ServerState::Ready { generation: current, tools: cached, .. } = &mut *state
            && *current == generation
        {
            *cached = tools.clone();
        }
        tracing::info!(server_label = %self.label, tools = tools.len(), "MCP tool inventory refreshed");
        Ok(tools)
    }

    /// Calls `tool`. Every outcome of a call that was attempted is `Ok` (see [`CallOutcome`]); `Err`
    /// only means the server is unavailable.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        settings: &HelperSettings,
    ) -> Result<CallOutcome, ServerError> {
        let Live { generation, peer, tools } = self.ready()?;
        if !tools.iter().any(|t| t.name == tool) {
            // Maybe the server changed its tools without a notification: look again, once.
            match self.refresh_tools(generation, &peer, settings.timeouts.startup).await {
                Ok(tools) if tools.iter().any(|t| t.name == tool) => {}
                Ok(_) => {
                    return Ok(CallOutcome::failure(format!(
                        "MCP tool {tool:?} is not available on server {:?}",
                        self.label
                    )));
                }
                Err(e) => {
                    return Ok(CallOutcome::failure(format!(
                        "MCP tool {tool:?} is not in the inventory of server {:?}, and listing its tools \
                         again failed: {e}",
                        self.label
                    )));
                }
            }
        }
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let timeout = settings.timeouts.tool_call;
        let outcome = match tokio::time::timeout(timeout, peer.call_tool_once(params)).await {
            Err(_) => CallOutcome::failure(format!("MCP tool call timed out after {}s", timeout.as_secs_f64())),
            Ok(Ok(CallToolResponse::Complete(result))) => self.outcome(result),
            Ok(Ok(_)) => CallOutcome::failure(
                "the MCP server asked for client input or started a task, which the gateway does not support",
            ),
            Ok(Err(e)) => {
                let detail = tidy(&error_chain(&e));
                if is_connection_error(&e) {
                    let text = self
                        .connector
                        .redactor
                        .clean(&format!("the connection to the MCP server was lost during the call ({detail})"));
                    // The supervisor ignores this if that session is already gone.
                    let _ = self.broken_tx.send((generation, text.clone()));
                    CallOutcome::failure(text)
                } else {
                    CallOutcome::failure(self.connector.redactor.clean(&format!("MCP tool call failed: {detail}")))
                }
            }
        };
        Ok(outcome)
    }

    fn outcome(&self, result: CallToolResult) -> CallOutcome {
        let content: Vec<Value> = result.content.iter().filter_map(|item| serde_json::to_value(item).ok()).collect();
        let text = content_to_text(&content, result.structured_content.as_ref());
        if result.is_error.unwrap_or(false) {
            let error =
                if text.is_empty() { "the MCP tool reported an error without a message".to_owned() } else { text };
            CallOutcome {
                ok: false,
                output_text: None,
                error_text: Some(self.connector.redactor.clean(&error)),
                content,
                structured_content: result.structured_content,
            }
        } else {
            CallOutcome {
                ok: true,
                output_text: Some(text),
                error_text: None,
                content,
                structured_content: result.structured_content,
            }
        }
    }

    /// Keeps the server's session alive until `shutdown` turns true. Runs once per server.
    pub async fn supervise(self: Arc<Self>, settings: Arc<HelperSettings>, mut shutdown: watch::Receiver<bool>) {
        let Some(mut broken_rx) = self.broken_rx.lock().ok().and_then(|mut rx| rx.take()) else {
            tracing::error!(server_label = %self.label, "supervise called twice");
            return;
        };
        let mut backoff = settings.restart_backoff_initial;
        let mut generation = 0u64;
        loop {
            let attempt_started = Instant::now();
            let opened = tokio::select! {
                opened = tokio::time::timeout(
                    settings.timeouts.startup,
                    self.connector.open_session(self.tools_changed.clone()),
                ) => opened,
                _ = stopped(&mut shutdown) => {
                    // Dropping the half-open session kills the child; this kills what it started.
                    self.connector.kill_leftovers();
                    return;
                }
            };
            match opened {
                Ok(Ok((session, tools))) => {
                    generation += 1;
                    self.record_startup(&settings, true);
                    tracing::info!(server_label = %self.label, tools = tools.len(), "MCP server started");
                    let peer = session.peer().clone();
                    self.set_state(ServerState::Ready { generation, peer: peer.clone(), tools: Arc::new(tools) });
                    self.first_attempt_done.store(true, Ordering::SeqCst);
                    let ended = self.watch(generation, session, &peer, &settings, &mut broken_rx, &mut shutdown).await;
                    self.connector.kill_leftovers();
                    let Some(reason) = ended else { return };
                    tracing::warn!(server_label = %self.label, reason = %reason, "MCP server session ended");
                    self.set_state(ServerState::Down { error: reason });
                    if attempt_started.elapsed() >= STABLE_SESSION {
                        backoff = settings.restart_backoff_initial;
                    }
                }
                Ok(Err(error)) => self.start_failed(&settings, error),
                Err(_) => self.start_failed(
                    &settings,
                    format!(
                        "MCP server start-up timed out after {}s{}",
                        settings.timeouts.startup.as_secs_f64(),
                        self.connector.stderr_tail.suffix()
                    ),
                ),
            }
            let delay_ms = u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX);
            tracing::info!(server_label = %self.label, delay_ms, "restarting the MCP server after a delay");
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stopped(&mut shutdown) => return,
            }
            backoff = (backoff * 2).min(settings.restart_backoff_max);
        }
    }

    fn start_failed(&self, settings: &HelperSettings, error: String) {
        self.connector.kill_leftovers();
        let error = self.connector.redactor.clean(&error);
        self.record_startup(settings, false);
        tracing::warn!(server_label = %self.label, error = %error, "MCP server failed to start");
        self.set_state(ServerState::Down { error });
        self.first_attempt_done.store(true, Ordering::SeqCst);
    }

    fn record_startup(&self, settings: &HelperSettings, ok: bool) {
        let counter = if ok { &self.startup_ok } else { &self.startup_error };
        counter.fetch_add(1, Ordering::SeqCst);
        if let Some(hook) = &settings.on_startup {
            hook(&self.label, ok);
        }
    }

    /// Watches one session until it ends. `Some(reason)` when it died; `None` on shutdown.
    async fn watch(
        &self,
        generation: u64,
        session: crate::connect::Session,
        peer: &Peer<RoleClient>,
        settings: &HelperSettings,
        broken_rx: &mut mpsc::UnboundedReceiver<(u64, String)>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<String> {
        let cancel = session.cancellation_token();
        let waiting = session.waiting();
        tokio::pin!(waiting);
        let mut ping = tokio::time::interval(settings.ping_interval);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.tick().await;
        let reason = loop {
            tokio::select! {
                _ = &mut waiting => return Some(self.session_closed_reason()),
                _ = self.tools_changed.notified() => {
                    if let Err(e) = self.refresh_tools(generation, peer, settings.timeouts.startup).await {
                        tracing::warn!(server_label = %self.label, error = %e, "refreshing the tool inventory failed");
                    }
                }
                Some((broken_generation, reason)) = broken_rx.recv() => {
                    if broken_generation == generation {
                        break Some(reason);
                    }
                }
                _ = ping.tick() => {
                    if let Err(reason) = self.ping(peer, settings.timeouts.startup).await {
                        break Some(reason);
                    }
                }
                _ = stopped(shutdown) => break None,
            }
        };
        // Ending the session closes its transport: a stdio child gets EOF, then SIGTERM, then SIGKILL.
        cancel.cancel();
        if tokio::time::timeout(CLOSE_GRACE, &mut waiting).await.is_err() {
            tracing::warn!(server_label = %self.label, "MCP session did not close in time; dropping it");
        }
        reason
    }

    /// Whether the server still answers: `Err(reason)` when the connection is gone or it is silent.
    /// A JSON-RPC error answer (a server without `ping`) still proves it is alive.
    async fn ping(&self, peer: &Peer<RoleClient>, timeout: Duration) -> Result<(), String> {
        let request = ClientRequest::PingRequest(Default::default());
        match tokio::time::timeout(timeout, peer.send_request(request)).await {
            Err(_) => Err(format!("the MCP server did not answer a ping within {}s", timeout.as_secs_f64())),
            Ok(Err(e)) if is_connection_error(&e) => Err(self
                .connector
                .redactor
                .clean(&format!("lost the connection to the MCP server: {}", tidy(&error_chain(&e))))),
            Ok(_) => Ok(()),
        }
    }

    fn session_closed_reason(&self) -> String {
        match &self.connector.entry {
            ServerEntry::Stdio(_) => {
                format!("the MCP server process exited or closed its stdout{}", self.connector.stderr_tail.suffix())
            }
            ServerEntry::Url(_) => "the connection to the MCP server was closed".to_owned(),
        }
    }
}

/// Errors that mean the session is dead, as opposed to one request going wrong.
fn is_connection_error(e: &ServiceError) -> bool {
    matches!(e, ServiceError::TransportSend(_) | ServiceError::TransportClosed)
}

/// Completes once the helper stops (the flag turns true or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    // Only completion matters; the guard `wait_for` returns must not live across an await.
    let _ = shutdown.wait_for(|stop| *stop).await;
}
