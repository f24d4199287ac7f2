//! [`McpHelperClient`]: how a gateway worker talks to the shared MCP helper over loopback HTTP.
//!
//! Workers never start MCP servers; they list servers, list tools and call tools through this client.
//! Every request has its own time limit, and every failure maps to one [`HelperError`] variant that says
//! what the gateway should do with it: `Unreachable` (helper down or hung → 503 on discovery routes, a
//! failed `mcp_call` item during a run), `UnknownServer` (404), `Unavailable` (409), `Protocol` (the
//! helper answered something this client does not understand — a version mismatch or a bug).
//!
//! The client does not retry: a call may have side effects on the MCP server, and the helper already
//! restarts and reconnects servers on its own.

use std::time::Duration;

use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::Value;

use respgw_mcp::redact::error_chain;

use respgw_mcp::wire::{
    CODE_SERVER_UNAVAILABLE, CODE_UNKNOWN_SERVER, CallOutcome, CallRequest, ErrorBody, Health, ServerList,
    ServerStatus, ToolInfo, ToolList,
};

/// Time limits of the client's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelperTimeouts {
    /// `GET /health` and `GET /servers`.
    pub list_servers: Duration,
    /// `GET /servers/{label}/tools` (may refresh the inventory from the server).
    pub list_tools: Duration,
    /// A tool call. Must exceed the helper's own call limit (`GW_MCP_BUILTIN_TOOL_TIMEOUT_SEC`), so a slow
    /// tool ends as the helper's clear "timed out" outcome rather than as this client's timeout.
    pub call: Duration,
}

impl Default for HelperTimeouts {
    fn default() -> Self {
        HelperTimeouts {
            list_servers: Duration::from_secs(10),
            list_tools: Duration::from_secs(15),
            call: respgw_mcp::config::DEFAULT_TOOL_TIMEOUT + CALL_MARGIN,
        }
    }
}

/// How much longer than the helper's call limit the client waits for a call.
const CALL_MARGIN: Duration = Duration::from_secs(5);

impl HelperTimeouts {
    /// Defaults, with the call limit derived from the helper's tool-call limit.
    pub fn for_tool_timeout(tool_call: Duration) -> Self {
        HelperTimeouts { call: tool_call + CALL_MARGIN, ..Default::default() }
    }
}

/// Why a helper request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelperError {
    /// The helper could not be reached or did not answer in time.
    #[error("Built-in MCP runtime is unavailable: {message}")]
    Unreachable {
        /// What went wrong (connection refused, timeout, …).
        message: String,
    },
    /// No server with that label is configured (helper 404).
    #[error("Unknown MCP server_label: {label}")]
    UnknownServer {
        /// The label asked for.
        label: String,
    },
    /// The server is configured but currently unavailable (helper 409).
    #[error("MCP server '{label}' is currently unavailable: {last_error}")]
    Unavailable {
        /// The label asked for.
        label: String,
        /// The server's last error, as the helper reports it (already redacted).
        last_error: String,
    },
    /// The helper answered, but not with what this client expects.
    #[error("Built-in MCP runtime protocol error: {message}")]
    Protocol {
        /// What was unexpected.
        message: String,
    },
}

/// The worker's client of the MCP helper's loopback API. Cheap to clone (shares one connection pool).
#[derive(Debug, Clone)]
pub struct McpHelperClient {
    base: reqwest::Url,
    http: reqwest::Client,
    timeouts: HelperTimeouts,
}

impl McpHelperClient {
    /// A client of the helper at `base_url` (e.g. `http://127.0.0.1:5981`), with default time limits.
    ///
    /// The process must have installed a rustls crypto provider first (the workspace builds reqwest
    /// without one); `respgw`'s `main` does.
    pub fn new(base_url: &str) -> Result<Self, HelperError> {
        let mut base = reqwest::Url::parse(base_url)
            .map_err(|e| HelperError::Protocol { message: format!("invalid helper URL {base_url:?}: {e}") })?;
        if base.scheme() != "http" && base.scheme() != "https" {
            return Err(HelperError::Protocol { message: format!("invalid helper URL {base_url:?}: not http(s)") });
        }
        // Paths below are joined relative to the base, which needs a trailing slash to keep its own path.
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let http = reqwest::Client::builder()
            // Loopback only: a proxy from the environment must not see these requests.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| HelperError::Protocol { message: format!("cannot build the helper HTTP client: {e}") })?;
        Ok(McpHelperClient { base, http, timeouts: HelperTimeouts::default() })
    }

    /// Replaces the time limits.
    pub fn with_timeouts(mut self, timeouts: HelperTimeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// The helper's base URL.
    pub fn base_url(&self) -> &str {
        self.base.as_str()
    }

    /// `GET /health`: `Ok(health)` whether or not the helper is ready yet (`health.ok` says which).
    pub async fn health(&self) -> Result<Health, HelperError> {
        let url = self.url(&["health"])?;
        let response = self.send(self.http.get(url), self.timeouts.list_servers).await?;
        let status = response.status();
        if status == StatusCode::OK || status == StatusCode::SERVICE_UNAVAILABLE {
            return read_json(response).await;
        }
        Err(unexpected(status, response).await)
    }

    /// `GET /servers`: every configured server with its availability, sorted by label.
    pub async fn servers(&self) -> Result<Vec<ServerStatus>, HelperError> {
        let url = self.url(&["servers"])?;
        let response = self.send(self.http.get(url), self.timeouts.list_servers).await?;
        let list: ServerList = self.expect_ok(response, None).await?;
        Ok(list.data)
    }

    /// `GET /servers/{label}/tools`: the tool inventory of one server, sorted by name.
    pub async fn tools(&self, label: &str) -> Result<Vec<ToolInfo>, HelperError> {
        let url = self.url(&["servers", label, "tools"])?;
        let response = self.send(self.http.get(url), self.timeouts.list_tools).await?;
        let list: ToolList = self.expect_ok(response, Some(label)).await?;
        Ok(list.tools)
    }

    /// `POST /servers/{label}/tools/{tool}/call`. A tool that fails, times out or is unknown is
    /// `Ok(CallOutcome { ok: false, error_text, .. })`; `Err` means the call could not be made at all.
    pub async fn call(&self, label: &str, tool: &str, arguments: Value) -> Result<CallOutcome, HelperError> {
        let url = self.url(&["servers", label, "tools", tool, "call"])?;
        let body = CallRequest { arguments };
        let response = self.send(self.http.post(url).json(&body), self.timeouts.call).await?;
        self.expect_ok(response, Some(label)).await
    }

    /// `base` + percent-encoded path segments (labels and tool names are data, not paths).
    fn url(&self, segments: &[&str]) -> Result<reqwest::Url, HelperError> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| HelperError::Protocol { message: "helper URL cannot be a base".into() })?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        timeout: Duration,
    ) -> Result<reqwest::Response, HelperError> {
        request.timeout(timeout).send().await.map_err(|e| HelperError::Unreachable {
            message: if e.is_timeout() {
                format!("no answer from {} within {}s", self.base, timeout.as_secs_f64())
            } else {
                format!("cannot reach {}: {}", self.base, error_chain(&e))
            },
        })
    }

    /// Decodes a 200 as `T`; maps 404/409 to their variants.
    async fn expect_ok<T: DeserializeOwned>(
        &self,
        response: reqwest::Response,
        label: Option<&str>,
    ) -> Result<T, HelperError> {
        let status = response.status();
        if status == StatusCode::OK {
            return read_json(response).await;
        }
        if let Some(label) = label
            && (status == StatusCode::NOT_FOUND || status == StatusCode::CONFLICT)
        {
            let body: Option<ErrorBody> = response.json().await.ok();
            match (status, body) {
                (StatusCode::NOT_FOUND, Some(body)) if body.error.code == CODE_UNKNOWN_SERVER => {
                    return Err(HelperError::UnknownServer { label: label.to_owned() });
                }
                (StatusCode::CONFLICT, Some(body)) if body.error.code == CODE_SERVER_UNAVAILABLE => {
                    return Err(HelperError::Unavailable {
                        label: label.to_owned(),
                        last_error: body.error.last_error.unwrap_or(body.error.message),
                    });
                }
                (status, _) => {
                    return Err(HelperError::Protocol {
                        message: format!("unexpected HTTP {status} without a known error code"),
                    });
                }
            }
        }
        Err(unexpected(status, response).await)
    }
}

async fn read_json<T: DeserializeOwned>(response: reqwest::Response) -> Result<T, HelperError> {
    let bytes = response
        .bytes()
        .await
        .map_err(|e| HelperError::Unreachable { message: format!("reading the reply: {}", error_chain(&e)) })?;
    serde_json::from_slice(&bytes).map_err(|e| HelperError::Protocol { message: format!("unexpected reply body: {e}") })
}

async fn unexpected(status: StatusCode, response: reqwest::Response) -> HelperError {
    let body = response.text().await.unwrap_or_default();
    let body: String = body.chars().take(512).collect();
    HelperError::Protocol { message: format!("unexpected HTTP {status}: {body}") }
}
