//! Opening one MCP session for a config entry: spawn the stdio child or dial the URL, run the MCP
//! `initialize` handshake with rmcp's client, and fetch the first `tools/list`.
//!
//! The three transports end up as the same thing, an rmcp `RunningService` over [`SessionHandler`], so
//! everything after [`open_session`] is transport-blind. The caller bounds the time it takes (the
//! start-up timeout); dropping the future mid-way kills a half-started child.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use process_wrap::tokio::{CommandWrap, ProcessGroup};
use respgw_mcp::{ServerEntry, StdioServer, ToolInfo, UrlServer, UrlTransport};
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use respgw_mcp::client::list_tools;
use respgw_mcp::legacy_sse::LegacySseTransport;
use respgw_mcp::redact::{Redactor, error_chain, tidy, truncate_chars};

/// Variables a stdio server inherits from the helper; everything else comes from its `env`. Same list
/// as the official MCP SDKs: enough for `npx`/`uvx` to work, without handing the gateway's own secrets
/// (API keys in the helper's environment) to every MCP server.
const INHERITED_ENV: [&str; 10] =
    ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR", "TZ"];

/// How long a failed start waits for the rest of the child's stderr.
const STDERR_DRAIN: std::time::Duration = std::time::Duration::from_millis(500);
/// Lines of a stdio server's stderr kept for error messages.
const STDERR_TAIL_LINES: usize = 10;
/// Longest stderr line kept, in characters.
const STDERR_LINE_CHARS: usize = 500;

/// The rmcp client-side handler of one session: it only listens for `tools/list_changed` (the cache is
/// refreshed). It offers no client capabilities (sampling, roots, elicitation): the gateway has no user
/// to ask.
pub(crate) struct SessionHandler {
    /// The server label, for log lines.
    pub label: Arc<str>,
    /// Woken on `notifications/tools/list_changed`.
    pub tools_changed: Arc<Notify>,
}

impl ClientHandler for SessionHandler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        tracing::info!(server_label = %self.label, "MCP server announced a changed tool list");
        self.tools_changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("respgw-mcp-helper", env!("CARGO_PKG_VERSION")),
        );
        // The `initialize` handshake: the newest version that still has one; servers answer with the
        // version they speak, and rmcp adapts.
        info.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
        info
    }
}

/// A live MCP session.
pub(crate) type Session = RunningService<RoleClient, SessionHandler>;

/// The last lines a stdio server wrote to stderr (redacted), quoted in error messages: "exited during
/// start-up" is far more useful with the server's own last words.
#[derive(Debug, Default, Clone)]
pub(crate) struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    fn push(&self, line: String) {
        if let Ok(mut lines) = self.0.lock() {
            if lines.len() == STDERR_TAIL_LINES {
                lines.pop_front();
            }
            lines.push_back(line);
        }
    }

    /// Empties the buffer (a new process starts).
    pub fn clear(&self) {
        if let Ok(mut lines) = self.0.lock() {
            lines.clear();
        }
    }

    /// `"; stderr: a | b"`, or nothing when the server said nothing.
    pub fn suffix(&self) -> String {
        let Ok(lines) = self.0.lock() else { return String::new() };
        if lines.is_empty() {
            return String::new();
        }
        format!("; stderr: {}", lines.iter().cloned().collect::<Vec<_>>().join(" | "))
    }
}

/// Everything needed to (re)open one server's session.
pub(crate) struct Connector {
    pub label: Arc<str>,
    pub entry: ServerEntry,
    pub redactor: Redactor,
    /// The HTTP client of a URL entry, its `headers` set as default headers (built once, reused across
    /// reconnects so connections are pooled).
    pub http: Option<reqwest::Client>,
    pub stderr_tail: StderrTail,
    /// Process group of the last stdio child started (its pid: the child leads its own group).
    pgid: Mutex<Option<u32>>,
}

impl Connector {
    /// A connector for `entry`; fails only if the HTTP client cannot be built.
    pub fn new(label: &str, entry: ServerEntry) -> anyhow::Result<Self> {
        let http = match &entry {
            ServerEntry::Stdio(_) => None,
            ServerEntry::Url(url) => Some(http_client(url)?),
        };
        Ok(Connector {
            label: label.into(),
            redactor: Redactor::new(entry.secrets()),
            entry,
            http,
            stderr_tail: StderrTail::default(),
            pgid: Mutex::new(None),
        })
    }

    /// Opens a session and lists its tools. The error is a redacted sentence for `last_error`.
    pub async fn open_session(&self, tools_changed: Arc<Notify>) -> Result<(Session, Vec<ToolInfo>), String> {
        let handler = SessionHandler { label: self.label.clone(), tools_changed };
        let session = match (&self.entry, &self.http) {
            (ServerEntry::Stdio(stdio), _) => {
                self.stderr_tail.clear();
                let (transport, stderr_reader) = self.spawn_child(stdio)?;
                match handler.serve(transport).await {
                    Ok(session) => session,
                    Err(e) => {
                        // The child usually died explaining why on stderr: let the reader catch up.
                        if let Some(reader) = stderr_reader {
                            let _ = tokio::time::timeout(STDERR_DRAIN, reader).await;
                        }
                        return Err(format!(
                            "MCP initialization failed: {}{}",
                            tidy(&error_chain(&e)),
                            self.stderr_tail.suffix()
                        ));
                    }
                }
            }
            (ServerEntry::Url(url), Some(http)) => match url.transport {
                UrlTransport::StreamableHttp => {
                    let config = StreamableHttpClientTransportConfig::with_uri(url.url.as_str());
                    let transport = StreamableHttpClientTransport::with_client(http.clone(), config);
                    handler
                        .serve(transport)
                        .await
                        .map_err(|e| format!("MCP initialization failed: {}", tidy(&error_chain(&e))))?
                }
                UrlTransport::Sse => {
                    let transport =
                        LegacySseTransport::connect(http.clone(), url.url.clone()).await.map_err(|e| e.to_string())?;
                    handler
                        .serve(transport)
                        .await
                        .map_err(|e| format!("MCP initialization failed: {}", tidy(&error_chain(&e))))?
                }
            },
            (ServerEntry::Url(_), None) => return Err("internal error: no HTTP client for a URL entry".into()),
        };
        // rmcp can cache `tools/list` by TTL; the helper keeps its own cache with its own refresh rules
        // and must see the server's real answer when it asks.
        session.peer().set_response_cache_config(rmcp::service::ClientCacheConfig::disabled()).await;
        let tools = list_tools(session.peer()).await?;
        Ok((session, tools))
    }

    /// Starts the child in its own process group (so stopping it also stops what it started, e.g.
    /// `npx` → `node`), with a minimal environment, stderr piped into the log.
    fn spawn_child(&self, stdio: &StdioServer) -> Result<(TokioChildProcess, Option<JoinHandle<()>>), String> {
        let mut command = tokio::process::Command::new(&stdio.command);
        command.args(&stdio.args).env_clear();
        for name in INHERITED_ENV {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command.envs(&stdio.env);
        if let Some(cwd) = &stdio.cwd {
            command.current_dir(cwd);
        }
        die_with_parent(&mut command);
        let mut wrapped = CommandWrap::from(command);
        wrapped.wrap(ProcessGroup::leader());
        let (child, stderr) = TokioChildProcess::builder(wrapped)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| self.redactor.clean(&format!("cannot start {:?}: {e}", stdio.command)))?;
        if let Ok(mut pgid) = self.pgid.lock() {
            *pgid = child.id();
        }
        let reader = stderr.map(|stderr| {
            let label = self.label.clone();
            let redactor = self.redactor.clone();
            let tail = self.stderr_tail.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let line = truncate_chars(redactor.clean(&line), STDERR_LINE_CHARS);
                    tracing::info!(target: "respgw_mcp_helper::server_stderr", server_label = %label, "{line}");
                    tail.push(line);
                }
            })
        });
        Ok((child, reader))
    }

    /// Kills whatever is left of the last stdio child's process group (processes the server started and
    /// did not stop) once its session is over. rmcp stops the child itself; this catches the rest.
    pub fn kill_leftovers(&self) {
        let Some(pgid) = self.pgid.lock().ok().and_then(|mut pgid| pgid.take()) else { return };
        #[cfg(unix)]
        {
            let Ok(pgid) = libc::pid_t::try_from(pgid) else { return };
            // The group id is the one our child led; a group id cannot be reused while any member
            // is alive, and ESRCH (none left) is ignored.
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// Asks the kernel to SIGKILL the child if the helper dies without cleaning up (SIGKILL, OOM kill), so
/// MCP servers never outlive their helper. Children of the child are stopped through the process group
/// on an orderly exit, and see their stdin close otherwise.
fn die_with_parent(command: &mut tokio::process::Command) {
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id();
        // SAFETY: the hook runs in the forked child between fork and exec, where only
        // async-signal-safe calls are allowed: it makes two system calls (prctl, getppid), compares
        // with `parent`, a copy taken before the fork, and builds its errors without allocating.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died between fork and prctl; then nothing would ever signal us.
                // (No message: it would allocate, and only an errno reaches the parent, EINVAL here.)
                if libc::getppid() as u32 != parent {
                    return Err(std::io::Error::from(std::io::ErrorKind::Other));
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = command;
}

/// The HTTP client of one URL entry: its headers on every request, same-origin redirects only, no proxy
/// from the environment for loopback URLs, no total timeout (the streams are long-lived; calls are
/// bounded by the helper).
fn http_client(url: &UrlServer) -> anyhow::Result<reqwest::Client> {
    let mut headers = reqwest::header::HeaderMap::new();
    for (name, value) in &url.headers {
        // Both were validated with the config; a failure here is a bug, reported without the value.
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| anyhow::anyhow!("header name {name:?}: {e}"))?;
        let mut value = reqwest::header::HeaderValue::from_str(value)
            .map_err(|_| anyhow::anyhow!("invalid value of header {name}"))?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    let mut builder = reqwest::Client::builder()
        .default_headers(headers)
        .connect_timeout(std::time::Duration::from_secs(10))
        .redirect(same_origin_redirects());
    if url.url.host_str().is_some_and(is_loopback_host) {
        builder = builder.no_proxy();
    }
    builder.build().map_err(|e| anyhow::anyhow!("cannot build the HTTP client: {}", error_chain(&e)))
}

/// Follows at most 5 redirects, and only within the configured origin: the entry's headers (credentials)
/// go with every request, so a server must not be able to send them elsewhere.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt.previous().first().is_some_and(|first| first.origin() == attempt.url().origin());
        if attempt.previous().len() > 5 {
            attempt.error("too many redirects")
        } else if same_origin {
            attempt.follow()
        } else {
            attempt.error("refusing a redirect to another origin")
        }
    })
}

fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}
