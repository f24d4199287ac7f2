//! Remote MCP: MCP servers a request declares itself (`{"type":"mcp","server_label",
//! "server_url","authorization"?,"headers"?}`), dialled by the worker for that request only.
//!
//! # Life of a Remote session
//! [`RemoteMcp::connect`] opens one MCP session per declaration while the request's tools are
//! resolved: it builds an HTTP client carrying the declaration's credentials, runs `initialize`
//! and `tools/list` (together bounded by [`RemoteMcpSettings::connect_timeout`]), and returns a
//! [`RemoteSession`]. Any failure there — DNS, a refused address, connect, TLS, HTTP status,
//! `initialize`, `tools/list`, the time limit — is a [`RemoteError`], which the resolver turns into
//! a 422 `bad_input` before anything streams. Every call of that request reuses the session
//! ([`RemoteSession::call`], bounded by [`RemoteMcpSettings::tool_timeout`]); it is closed when the
//! last reference goes, i.e. when the response has ended and its tools are dropped (rmcp cancels
//! the session on drop).
//!
//! # Transport
//! The spec leaves the choice to "the MCP client library" (§4.1 rule 7). rmcp's client has no such
//! rule, so the gateway applies the one of the seed's client library (FastMCP) and nothing more: a
//! URL whose path ends in `/sse` (or `/sse/`) is a legacy HTTP+SSE server
//! ([`super::legacy_sse`]), everything else is streamable HTTP. `headers` play no part in it.
//!
//! # Credentials
//! `authorization` is sent as `Authorization: Bearer <authorization>` (as given when it already
//! starts with `Bearer `), replacing any `Authorization` entry of `headers`; `headers` are sent on
//! every request as given (header values are marked sensitive, so they never show in `Debug`).
//! Headers that frame the HTTP exchange (`Host`, `Content-Length`, …) are refused. Neither
//! credential is kept after the request: both live in this session's HTTP client only. Every text
//! a session produces — the 422 message, a failed call's error, a tool's output — goes through a
//! [`Redactor`] holding the credentials' values.
//!
//! # Server-side request forgery
//! With URL checks on (`GW_MCP_REQUEST_REMOTE_URL_CHECKS`, the default), request validation
//! already refused non-https URLs, `localhost`, `*.localhost` and IP-literal hosts (spec §4.1
//! rule 4). Dialling adds:
//! - the URL is parsed again as the HTTP client sees it, and IP-literal hosts are refused in that
//!   form too (`https://2130706433/` *is* `https://127.0.0.1/` to a URL parser);
//! - the host name is resolved by [`GuardedResolver`], which drops every address that is not
//!   public unicast ([`non_public_reason`]: loopback, private, link-local, unspecified, multicast,
//!   CGNAT, reserved, and those hidden in IPv4-mapped, IPv4-compatible, NAT64 and 6to4 IPv6
//!   addresses) and fails when none is left. The resolver *is* the HTTP client's resolver, so the
//!   check applies to every connection the client makes, and an answer that changes between a
//!   check and a connect (DNS rebinding) is checked again when it is used;
//! - redirects are followed only within the same origin (so the same host, and the same
//!   resolver), at most 5; the legacy SSE message endpoint must be on the same origin too;
//! - no proxy from the environment is used (a proxy would make the resolver check the proxy's
//!   address, not the server's).
//!
//! With checks off (trusted set-ups, tests) any http or https URL is dialled, loopback included.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use respgw_protocol::tools::McpTool;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::client::{describe_error, list_tools};
use super::legacy_sse::LegacySseTransport;
use super::redact::{Redactor, error_chain};
use super::{ToolInfo, content_to_text};

/// `GW_MCP_REQUEST_REMOTE_ENABLED`: whether requests may declare Remote MCP servers (default true).
pub const ENABLED_ENV: &str = "GW_MCP_REQUEST_REMOTE_ENABLED";
/// `GW_MCP_REQUEST_REMOTE_URL_CHECKS`: the URL rules and the address policy (default true).
pub const URL_CHECKS_ENV: &str = "GW_MCP_REQUEST_REMOTE_URL_CHECKS";
/// `GW_MCP_REQUEST_REMOTE_CONNECT_TIMEOUT_SEC`: connect + `initialize` + `tools/list` (default 10).
pub const CONNECT_TIMEOUT_ENV: &str = "GW_MCP_REQUEST_REMOTE_CONNECT_TIMEOUT_SEC";
/// `GW_MCP_REQUEST_REMOTE_TOOL_TIMEOUT_SEC`: one tool call (default 60).
pub const TOOL_TIMEOUT_ENV: &str = "GW_MCP_REQUEST_REMOTE_TOOL_TIMEOUT_SEC";
/// `GW_MCP_REQUEST_REMOTE_CA_FILE`: PEM certificates trusted for Remote servers in addition to the
/// system's roots (a private CA; a self-signed test server).
pub const CA_FILE_ENV: &str = "GW_MCP_REQUEST_REMOTE_CA_FILE";

const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);
/// Redirects followed (same origin only).
const MAX_REDIRECTS: usize = 5;
/// Credential values shorter than this are not masked in texts: masking `"1"` would turn every
/// `HTTP 401` into nonsense, and a value that short protects nothing anyway.
const MIN_MASKED_LEN: usize = 4;
/// Headers a declaration may not set: they frame the HTTP exchange, which is the client's job.
const FORBIDDEN_HEADERS: [&str; 9] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "proxy-connection",
];

/// How Remote MCP runs in this gateway. Read once at start-up ([`RemoteMcpSettings::from_env`]) and
/// handed to every worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteMcpSettings {
    /// Requests may declare Remote servers ([`ENABLED_ENV`]).
    pub enabled: bool,
    /// URL rules and the address policy ([`URL_CHECKS_ENV`]).
    pub url_checks: bool,
    /// Opening a session: connect, TLS, `initialize`, `tools/list` ([`CONNECT_TIMEOUT_ENV`]).
    pub connect_timeout: Duration,
    /// One tool call ([`TOOL_TIMEOUT_ENV`]).
    pub tool_timeout: Duration,
    /// Extra trusted root certificates, PEM ([`CA_FILE_ENV`]).
    pub ca_file: Option<PathBuf>,
}

impl Default for RemoteMcpSettings {
    fn default() -> Self {
        RemoteMcpSettings {
            enabled: true,
            url_checks: true,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            tool_timeout: DEFAULT_TOOL_TIMEOUT,
            ca_file: None,
        }
    }
}

impl RemoteMcpSettings {
    /// The settings from the process environment.
    pub fn from_env() -> Result<Self, String> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The settings from `lookup`. Unset or empty means the default; a value that is not one of
    /// `1/true/t/yes/y/on`, `0/false/f/no/n/off` (any case) or not a number of seconds is an error
    /// naming the variable.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let value = |name: &str| lookup(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let flag = |name: &str, default: bool| -> Result<bool, String> {
            match value(name) {
                None => Ok(default),
                Some(v) => match v.to_ascii_lowercase().as_str() {
                    "1" | "true" | "t" | "yes" | "y" | "on" => Ok(true),
                    "0" | "false" | "f" | "no" | "n" | "off" => Ok(false),
                    _ => Err(format!("{name}={v:?}: expected a boolean (true/false, 1/0, yes/no, on/off)")),
                },
            }
        };
        let seconds = |name: &str, default: Duration| -> Result<Duration, String> {
            match value(name) {
                None => Ok(default),
                Some(v) => match v.parse::<f64>() {
                    Ok(secs) if secs.is_finite() && secs > 0.0 && secs <= 86_400.0 => Ok(Duration::from_secs_f64(secs)),
                    _ => Err(format!("{name}={v:?}: expected a number of seconds between 0 and 86400")),
                },
            }
        };
        Ok(RemoteMcpSettings {
            enabled: flag(ENABLED_ENV, true)?,
            url_checks: flag(URL_CHECKS_ENV, true)?,
            connect_timeout: seconds(CONNECT_TIMEOUT_ENV, DEFAULT_CONNECT_TIMEOUT)?,
            tool_timeout: seconds(TOOL_TIMEOUT_ENV, DEFAULT_TOOL_TIMEOUT)?,
            ca_file: value(CA_FILE_ENV).map(PathBuf::from),
        })
    }
}

/// Why a Remote server could not be used: the declaration's field to blame (`server_url`,
/// `headers`, `authorization`) and a message without secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteError {
    /// The field of the declaration, for the error's `param` (`tools[i].<field>`).
    pub field: &'static str,
    /// What went wrong, redacted.
    pub message: String,
}

impl RemoteError {
    fn new(field: &'static str, message: impl Into<String>) -> Self {
        RemoteError { field, message: message.into() }
    }
}

/// Remote MCP in one worker: the settings and the extra trusted roots, loaded once.
#[derive(Clone)]
pub struct RemoteMcp {
    settings: Arc<RemoteMcpSettings>,
    extra_roots: Arc<Vec<reqwest::Certificate>>,
}

impl Default for RemoteMcp {
    /// Remote MCP disabled.
    fn default() -> Self {
        RemoteMcp {
            settings: Arc::new(RemoteMcpSettings { enabled: false, ..RemoteMcpSettings::default() }),
            extra_roots: Arc::default(),
        }
    }
}

impl std::fmt::Debug for RemoteMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteMcp")
            .field("settings", &self.settings)
            .field("extra_roots", &self.extra_roots.len())
            .finish()
    }
}

impl RemoteMcp {
    /// Remote MCP with `settings`; fails when the CA file cannot be read or holds no certificate.
    pub fn new(settings: RemoteMcpSettings) -> Result<Self, String> {
        ensure_crypto_provider();
        let extra_roots = match &settings.ca_file {
            None => Vec::new(),
            Some(path) => {
                let pem =
                    std::fs::read(path).map_err(|e| format!("{CA_FILE_ENV}: cannot read {}: {e}", path.display()))?;
                let certs = reqwest::Certificate::from_pem_bundle(&pem)
                    .map_err(|e| format!("{CA_FILE_ENV}: {} is not a PEM certificate bundle: {e}", path.display()))?;
                if certs.is_empty() {
                    return Err(format!("{CA_FILE_ENV}: {} holds no certificate", path.display()));
                }
                certs
            }
        };
        Ok(RemoteMcp { settings: Arc::new(settings), extra_roots: Arc::new(extra_roots) })
    }

    /// The settings in force.
    pub fn settings(&self) -> &RemoteMcpSettings {
        &self.settings
    }

    /// Opens a session with the server `declaration` names and lists its tools.
    pub async fn connect(&self, declaration: &McpTool) -> Result<RemoteSession, RemoteError> {
        if !self.settings.enabled {
            return Err(RemoteError::new(
                "server_url",
                "Request-declared (Remote) MCP servers are disabled on this gateway.",
            ));
        }
        let label = declaration.server_label.as_str();
        let raw_url = declaration.server_url.as_deref().unwrap_or_default();
        let url = reqwest::Url::parse(raw_url)
            .map_err(|e| RemoteError::new("server_url", format!("Invalid MCP `server_url`: {e}.")))?;
        self.check_url(&url)?;
        let redactor = credential_redactor(declaration);
        let headers = request_headers(declaration)?;
        let http = self.http_client(&url, headers).map_err(|e| {
            RemoteError::new(
                "server_url",
                redactor.clean(&format!("cannot set up an HTTP client: {}", error_chain(&e))),
            )
        })?;
        let failed = |detail: String| {
            RemoteError::new(
                "server_url",
                redactor.clean(&format!("MCP tool inventory resolution failed for server '{label}': {detail}")),
            )
        };
        let open = async {
            let service = if is_legacy_sse(&url) {
                let transport = LegacySseTransport::connect(http, url.clone()).await.map_err(|e| error_chain(&e))?;
                client_info().serve(transport).await
            } else {
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                client_info().serve(StreamableHttpClientTransport::with_client(http, config)).await
            }
            .map_err(|e| format!("MCP initialization failed: {}", describe_error(&e)))?;
            let tools = list_tools(service.peer()).await?;
            Ok::<_, String>((service, tools))
        };
        let (service, tools) = match tokio::time::timeout(self.settings.connect_timeout, open).await {
            Ok(Ok(opened)) => opened,
            Ok(Err(detail)) => {
                let error = failed(detail);
                tracing::warn!(server_label = label, error = %error.message, "Remote MCP server unusable");
                return Err(error);
            }
            Err(_) => {
                let error = failed(format!(
                    "no session within {}s (connect, initialize, tools/list)",
                    self.settings.connect_timeout.as_secs_f64()
                ));
                tracing::warn!(server_label = label, error = %error.message, "Remote MCP server unusable");
                return Err(error);
            }
        };
        tracing::debug!(
            server_label = label,
            host = url.host_str().unwrap_or_default(),
            tools = tools.len(),
            "Remote MCP session open"
        );
        Ok(RemoteSession {
            label: label.to_owned(),
            service,
            tools,
            redactor,
            tool_timeout: self.settings.tool_timeout,
        })
    }

    /// The URL rules once more, on the URL as the HTTP client will see it (validation checked the
    /// text as given).
    fn check_url(&self, url: &reqwest::Url) -> Result<(), RemoteError> {
        let scheme_ok = url.scheme() == "https" || (!self.settings.url_checks && url.scheme() == "http");
        if !scheme_ok {
            return Err(RemoteError::new("server_url", "Remote MCP `server_url` must use `https`."));
        }
        let Some(host) = url.host_str().filter(|h| !h.is_empty()) else {
            return Err(RemoteError::new("server_url", "Remote MCP `server_url` must include a host."));
        };
        if !self.settings.url_checks {
            return Ok(());
        }
        if let Some(address) = ip_literal(host) {
            return Err(RemoteError::new(
                "server_url",
                format!("Remote MCP IP-literal hosts are not allowed (the URL's host is the address {address})."),
            ));
        }
        let name = host.trim_end_matches('.').to_ascii_lowercase();
        if name == "localhost" || name.ends_with(".localhost") {
            return Err(RemoteError::new(
                "server_url",
                "Remote MCP host is denylisted: `localhost` and `.localhost` are not allowed.",
            ));
        }
        Ok(())
    }

    /// The HTTP client of one session: the credentials on every request, the guarded resolver and
    /// no proxy when URL checks are on, same-origin redirects only, the extra roots.
    fn http_client(&self, url: &reqwest::Url, headers: HeaderMap) -> reqwest::Result<reqwest::Client> {
        let mut builder = reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(self.settings.connect_timeout)
            .redirect(same_origin_redirects());
        if !self.extra_roots.is_empty() {
            builder = builder.tls_certs_merge(self.extra_roots.iter().cloned());
        }
        if self.settings.url_checks {
            builder = builder.no_proxy().dns_resolver(GuardedResolver::system());
        } else if url
            .host_str()
            .is_some_and(|h| h.eq_ignore_ascii_case("localhost") || ip_literal(h).is_some_and(|ip| ip.is_loopback()))
        {
            builder = builder.no_proxy();
        }
        builder.build()
    }
}

/// reqwest is built without a TLS provider of its own (and panics without one); the `respgw` binary
/// installs ring, but Remote MCP must also work in a process that did not (tests, embedding).
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The client side of the `initialize` handshake: no capabilities (the gateway has no user to ask
/// for sampling or elicitation), the newest protocol version that still has `initialize`.
fn client_info() -> ClientConfig {
    let mut info =
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("respgw", env!("CARGO_PKG_VERSION")));
    info.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
    info
}

/// The address a URL host (as `Url::host_str` gives it: IPv6 in brackets) names, if it is one.
fn ip_literal(host: &str) -> Option<IpAddr> {
    host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host).parse().ok()
}

/// The seed's client library's rule (FastMCP): a path ending in `/sse` means legacy HTTP+SSE.
pub fn is_legacy_sse(url: &reqwest::Url) -> bool {
    url.path().trim_end_matches('/').ends_with("/sse")
}

/// A redactor for the declaration's credentials.
fn credential_redactor(declaration: &McpTool) -> Redactor {
    let credentials = &declaration.credentials;
    let mut secrets: Vec<String> = credentials.headers.values().cloned().collect();
    if let Some(token) = &credentials.authorization {
        secrets.push(token.clone());
        secrets.push(bearer(token));
    }
    secrets.retain(|s| s.chars().count() >= MIN_MASKED_LEN);
    Redactor::new(secrets)
}

/// `Authorization` value for a token: `Bearer <token>`, or the token as given when it already is one.
fn bearer(token: &str) -> String {
    if token.len() > 7 && token[..7].eq_ignore_ascii_case("bearer ") {
        token.to_owned()
    } else {
        format!("Bearer {token}")
    }
}

/// The declaration's credentials as request headers.
fn request_headers(declaration: &McpTool) -> Result<HeaderMap, RemoteError> {
    let credentials = &declaration.credentials;
    let mut headers = HeaderMap::new();
    for (name, value) in &credentials.headers {
        let is_authorization = name.eq_ignore_ascii_case(AUTHORIZATION.as_str());
        if is_authorization && credentials.authorization.is_some() {
            // `authorization` wins over any Authorization entry of `headers`.
            continue;
        }
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| RemoteError::new("headers", format!("MCP `headers` has an invalid header name {name:?}.")))?;
        if FORBIDDEN_HEADERS.contains(&header.as_str()) {
            return Err(RemoteError::new(
                "headers",
                format!("MCP `headers` may not set {name:?}: the gateway's HTTP client sets it."),
            ));
        }
        let mut value = HeaderValue::from_str(value)
            .map_err(|_| RemoteError::new("headers", format!("MCP `headers` has an invalid value for {name:?}.")))?;
        value.set_sensitive(true);
        headers.append(header, value);
    }
    if let Some(token) = &credentials.authorization {
        let mut value = HeaderValue::from_str(&bearer(token))
            .map_err(|_| RemoteError::new("authorization", "MCP `authorization` is not a valid header value."))?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    Ok(headers)
}

/// Follows at most [`MAX_REDIRECTS`] redirects, and only within the original origin: the
/// credentials go with every request, and a redirect elsewhere could also lead past the address
/// policy's host (same origin means same host name, resolved by the same guarded resolver).
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt.previous().first().is_some_and(|first| first.origin() == attempt.url().origin());
        if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error("too many redirects")
        } else if same_origin {
            attempt.follow()
        } else {
            attempt.error("refusing a redirect to another origin")
        }
    })
}

/// One open session with a Remote server, shared by the tools of one request.
pub struct RemoteSession {
    label: String,
    /// Cancelled (closed) when dropped.
    service: RunningService<RoleClient, ClientConfig>,
    tools: Vec<ToolInfo>,
    redactor: Redactor,
    tool_timeout: Duration,
}

impl std::fmt::Debug for RemoteSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSession").field("label", &self.label).field("tools", &self.tools.len()).finish()
    }
}

impl RemoteSession {
    /// The request-local label.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The server's tools, sorted by name (as listed when the session opened).
    pub fn tools(&self) -> &[ToolInfo] {
        &self.tools
    }

    /// Calls `tool`: its output text, or why the call failed. Both are redacted.
    pub async fn call(&self, tool: &str, arguments: Map<String, Value>) -> Result<String, String> {
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let outcome = match tokio::time::timeout(self.tool_timeout, self.service.peer().call_tool_once(params)).await {
            Err(_) => Err(format!("MCP tool call timed out after {}s", self.tool_timeout.as_secs_f64())),
            Ok(Ok(CallToolResponse::Complete(result))) => {
                let content: Vec<Value> =
                    result.content.iter().filter_map(|item| serde_json::to_value(item).ok()).collect();
                let text = content_to_text(&content, result.structured_content.as_ref());
                if result.is_error.unwrap_or(false) {
                    Err(if text.is_empty() {
                        "the MCP tool reported an error without a message".to_owned()
                    } else {
                        text
                    })
                } else {
                    Ok(text)
                }
            }
            Ok(Ok(_)) => {
                Err("the MCP server asked for client input or started a task, which the gateway does not support"
                    .to_owned())
            }
            Ok(Err(e)) => Err(format!("MCP tool call failed: {}", describe_error(&e))),
        };
        outcome.map(|text| self.redactor.mask(&text)).map_err(|error| self.redactor.clean(&error))
    }
}

/// Why `ip` is not a public unicast address a Remote MCP server may have; `None` when it is one.
/// IPv6 forms that carry an IPv4 address (mapped, compatible, NAT64, 6to4) are judged by that
/// address.
pub fn non_public_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_reason(v4),
        IpAddr::V6(v6) => v6_reason(v6),
    }
}

fn v4_reason(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, _, _) => "unspecified (0.0.0.0/8)",
        (127, _, _) => "loopback (127.0.0.0/8)",
        (10, _, _) => "private (10.0.0.0/8)",
        (172, 16..=31, _) => "private (172.16.0.0/12)",
        (192, 168, _) => "private (192.168.0.0/16)",
        (100, 64..=127, _) => "shared address space (CGNAT, 100.64.0.0/10)",
        (169, 254, _) => "link-local (169.254.0.0/16)",
        (192, 0, 0) => "IETF protocol assignments (192.0.0.0/24)",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (198, 18..=19, _) => "benchmarking (198.18.0.0/15)",
        (224..=239, _, _) => "multicast (224.0.0.0/4)",
        (240..=255, _, _) => "reserved or broadcast (240.0.0.0/4)",
        _ => return None,
    })
}

fn v6_reason(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if ip.is_unspecified() {
        return Some("unspecified (::)");
    }
    if ip.is_loopback() {
        return Some("loopback (::1)");
    }
    let embedded = |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible, deprecated).
    if s[..5] == [0; 5] && (s[5] == 0xffff || s[5] == 0) {
        return v4_reason(embedded(s[6], s[7]))
            .map(|_| "an IPv4-mapped or IPv4-compatible form of a non-public IPv4 address");
    }
    // 64:ff9b::/96, the well-known NAT64 prefix.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return v4_reason(embedded(s[6], s[7])).map(|_| "a NAT64 form of a non-public IPv4 address");
    }
    // 2002::/16, 6to4: the IPv4 address is in bits 16..48.
    if s[0] == 0x2002 {
        return v4_reason(embedded(s[1], s[2])).map(|_| "a 6to4 form of a non-public IPv4 address");
    }
    Some(match s[0] {
        0x0064 if s[1] == 0xff9b && s[2] == 1 => "local-use NAT64 (64:ff9b:1::/48)",
        0x0100 if s[1..4] == [0, 0, 0] => "discard-only (100::/64)",
        0x2001 if s[1] == 0 => "Teredo tunnelling (2001::/32)",
        0x2001 if s[1] == 0x0db8 => "documentation (2001:db8::/32)",
        x if x & 0xfe00 == 0xfc00 => "unique local (fc00::/7)",
        x if x & 0xffc0 == 0xfe80 => "link-local (fe80::/10)",
        x if x & 0xffc0 == 0xfec0 => "site-local (fec0::/10)",
        x if x & 0xff00 == 0xff00 => "multicast (ff00::/8)",
        x if x & 0xe000 != 0x2000 => "not global unicast (outside 2000::/3)",
        _ => return None,
    })
}

/// A name lookup: host name to addresses.
type Lookup = Arc<dyn Fn(String) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> + Send + Sync>;

/// The HTTP client's DNS resolver when URL checks are on: resolves with the system resolver, keeps
/// only public unicast addresses, and fails when none is left — so a connection can only ever go
/// to an address that passed the policy, whatever the name resolved to a moment before.
#[derive(Clone)]
pub struct GuardedResolver {
    lookup: Lookup,
}

/// A host name that resolved to no address the policy allows.
#[derive(Debug, thiserror::Error)]
#[error("Remote MCP host '{host}' resolves to no public address ({refused}); refusing to connect")]
pub struct RefusedHost {
    host: String,
    refused: String,
}

impl GuardedResolver {
    /// Resolution with the system's resolver (`getaddrinfo`, on tokio's blocking pool).
    pub fn system() -> Self {
        Self::with_lookup(|host| {
            Box::pin(async move { Ok(tokio::net::lookup_host((host.as_str(), 0)).await?.map(|a| a.ip()).collect()) })
        })
    }

    /// Resolution with `lookup` (tests: a fake DNS).
    pub fn with_lookup(
        lookup: impl Fn(String) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> + Send + Sync + 'static,
    ) -> Self {
        GuardedResolver { lookup: Arc::new(lookup) }
    }

    /// The allowed addresses of `host`, or why there are none.
    pub async fn resolve_host(&self, host: &str) -> Result<Vec<IpAddr>, Box<dyn std::error::Error + Send + Sync>> {
        let addresses = (self.lookup)(host.to_owned()).await?;
        let (allowed, refused): (Vec<IpAddr>, Vec<IpAddr>) =
            addresses.into_iter().partition(|ip| non_public_reason(*ip).is_none());
        if allowed.is_empty() {
            let refused = if refused.is_empty() {
                "no address at all".to_owned()
            } else {
                let mut listed: BTreeMap<String, &str> = BTreeMap::new();
                for ip in &refused {
                    listed.insert(ip.to_string(), non_public_reason(*ip).unwrap_or_default());
                }
                listed.iter().map(|(ip, why)| format!("{ip}: {why}")).collect::<Vec<_>>().join(", ")
            };
            return Err(Box::new(RefusedHost { host: host.to_owned(), refused }));
        }
        if !refused.is_empty() {
            tracing::debug!(host, ?refused, "Remote MCP: dropped non-public addresses of a host");
        }
        Ok(allowed)
    }
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let resolver = self.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let allowed = resolver.resolve_host(&host).await?;
            Ok(Box::new(allowed.into_iter().map(|ip| SocketAddr::new(ip, 0))) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use respgw_protocol::ToolDeclaration;
    use respgw_protocol::tools::{Capabilities, parse_tools};
    use serde_json::json;

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("address")
    }

    #[test]
    fn every_non_public_ipv4_range_is_refused() {
        for (addr, why) in [
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("127.0.0.1", "loopback"),
            ("127.255.255.254", "loopback"),
            ("10.0.0.1", "private"),
            ("10.255.255.255", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "CGNAT"),
            ("100.127.255.255", "CGNAT"),
            ("169.254.169.254", "link-local"),
            ("192.0.0.8", "IETF"),
            ("192.0.2.1", "documentation"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.9", "documentation"),
            ("198.18.0.1", "benchmarking"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("240.0.0.1", "reserved"),
            ("255.255.255.255", "broadcast"),
        ] {
            let reason = non_public_reason(ip(addr)).unwrap_or_else(|| panic!("{addr} must be refused"));
            assert!(reason.contains(why), "{addr}: {reason}");
        }
    }

    #[test]
    fn public_addresses_are_allowed() {
        for addr in [
            "8.8.8.8",
            "1.1.1.1",
            "93.184.216.34",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "169.253.1.1",
            "192.167.1.1",
            "198.17.1.1",
            "198.20.0.1",
            "223.255.255.254",
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
            "2a00:1450:4001:82b::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert_eq!(non_public_reason(ip(addr)), None, "{addr} is public");
        }
    }

    #[test]
    fn every_non_public_ipv6_range_is_refused_including_embedded_ipv4() {
        for (addr, why) in [
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("fc00::1", "unique local"),
            ("fd12:3456:789a::1", "unique local"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
            ("2001:db8::1", "documentation"),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
            ("100::1", "discard"),
            ("64:ff9b:1::1", "NAT64"),
            ("4000::1", "not global unicast"),
            ("::ffff:127.0.0.1", "IPv4-mapped"),
            ("::ffff:10.1.2.3", "IPv4-mapped"),
            ("::ffff:169.254.169.254", "IPv4-mapped"),
            ("::ffff:100.64.0.1", "IPv4-mapped"),
            ("::ffff:0.0.0.0", "IPv4-mapped"),
            ("::ffff:192.168.0.1", "IPv4-mapped"),
            ("::127.0.0.1", "IPv4-compatible"),
            ("::10.0.0.1", "IPv4-compatible"),
            ("64:ff9b::7f00:1", "NAT64"),
            ("64:ff9b::a9fe:a9fe", "NAT64"),
            ("2002:7f00:1::1", "6to4"),
            ("2002:c0a8:101::1", "6to4"),
        ] {
            let reason = non_public_reason(ip(addr)).unwrap_or_else(|| panic!("{addr} must be refused"));
            assert!(reason.contains(why), "{addr}: {reason}");
        }
    }

    fn fake_dns(answers: &[(&str, &[&str])]) -> GuardedResolver {
        let table: Arc<HashMap<String, Vec<IpAddr>>> = Arc::new(
            answers.iter().map(|(name, ips)| (name.to_string(), ips.iter().map(|s| ip(s)).collect())).collect(),
        );
        GuardedResolver::with_lookup(move |host| {
            let answer = table.get(&host).cloned();
            Box::pin(
                async move { answer.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such host")) },
            )
        })
    }

    #[tokio::test]
    async fn the_resolver_keeps_only_public_addresses_and_fails_without_any() {
        let dns = fake_dns(&[
            ("public.test", &["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"]),
            ("mixed.test", &["10.0.0.5", "93.184.216.34", "::ffff:127.0.0.1"]),
            ("internal.test", &["127.0.0.1", "::1", "169.254.169.254"]),
            ("empty.test", &[]),
        ]);
        assert_eq!(dns.resolve_host("public.test").await.expect("public").len(), 2);
        assert_eq!(dns.resolve_host("mixed.test").await.expect("mixed"), vec![ip("93.184.216.34")]);
        let refused = dns.resolve_host("internal.test").await.expect_err("internal").to_string();
        assert!(
            refused.contains("internal.test") && refused.contains("127.0.0.1: loopback") && refused.contains("169.254"),
            "{refused}"
        );
        assert!(dns.resolve_host("empty.test").await.is_err());
        assert!(dns.resolve_host("nxdomain.test").await.is_err());
    }

    #[tokio::test]
    async fn an_http_client_with_the_resolver_never_connects_to_a_refused_address() {
        // A server on loopback that a name points at: the request must fail before connecting.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let accepted = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = accepted.clone();
        let server = tokio::spawn(async move {
            if listener.accept().await.is_ok() {
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        });
        ensure_crypto_provider();
        let client = reqwest::Client::builder()
            .no_proxy()
            .dns_resolver(fake_dns(&[("rebind.test", &["127.0.0.1"])]))
            .build()
            .expect("client");
        let error = client.get(format!("http://rebind.test:{port}/mcp")).send().await.expect_err("refused");
        let text = error_chain(&error);
        assert!(text.contains("resolves to no public address"), "{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!accepted.load(std::sync::atomic::Ordering::SeqCst), "no connection was made");
        server.abort();
    }

    fn remote(tool: serde_json::Value) -> McpTool {
        let caps = Capabilities { remote_mcp: true, remote_url_checks: false, ..Capabilities::default() };
        match parse_tools(vec![tool], &caps).expect("valid declaration").remove(0) {
            ToolDeclaration::Mcp(m) => m,
            _ => panic!("not mcp"),
        }
    }

    #[test]
    fn credentials_become_headers_and_authorization_wins() {
        let m = remote(json!({"type":"mcp","server_label":"r","server_url":"https://mcp.example.com/mcp",
            "authorization":"tok-1234","headers":{"authorization":"other","X-Api-Key":"k-5678"}}));
        let headers = request_headers(&m).expect("headers");
        assert_eq!(headers.get_all(AUTHORIZATION).iter().count(), 1);
        assert_eq!(headers[AUTHORIZATION], "Bearer tok-1234");
        assert!(headers[AUTHORIZATION].is_sensitive() && headers["x-api-key"].is_sensitive());
        assert!(!format!("{headers:?}").contains("tok-1234"), "sensitive values are hidden from Debug");
        let m = remote(json!({"type":"mcp","server_label":"r","server_url":"https://mcp.example.com/mcp",
            "authorization":"Bearer abc-def"}));
        assert_eq!(request_headers(&m).expect("headers")[AUTHORIZATION], "Bearer abc-def");
        let m = remote(json!({"type":"mcp","server_label":"r","server_url":"https://mcp.example.com/mcp",
            "headers":{"Host":"internal"}}));
        assert_eq!(request_headers(&m).expect_err("host").field, "headers");
        let m = remote(json!({"type":"mcp","server_label":"r","server_url":"https://mcp.example.com/mcp",
            "headers":{"X-Bad":"line\nbreak-SECRET"}}));
        let e = request_headers(&m).expect_err("bad value");
        assert!(e.message.contains("X-Bad") && !e.message.contains("SECRET"), "{e:?}");
    }

    #[test]
    fn redaction_masks_the_token_the_bearer_value_and_header_values() {
        let m = remote(json!({"type":"mcp","server_label":"r","server_url":"https://mcp.example.com/mcp",
            "authorization":"sk-remote-SECRET-123","headers":{"X-Api-Key":"hdr-SECRET-456","X-Version":"1"}}));
        let r = credential_redactor(&m);
        let text = r.clean(
            "HTTP 401: bad header Authorization: Bearer sk-remote-SECRET-123 (token sk-remote-SECRET-123), \
             key hdr-SECRET-456",
        );
        assert!(!text.contains("SECRET"), "{text}");
        assert!(text.contains("HTTP 401"), "short values are not masked: {text}");
        assert_eq!(r.mask("echo hdr-SECRET-456"), "echo [redacted]");
    }

    #[test]
    fn transport_follows_the_url_path() {
        let url = |s: &str| reqwest::Url::parse(s).expect("url");
        assert!(is_legacy_sse(&url("https://mcp.example.com/sse")));
        assert!(is_legacy_sse(&url("https://mcp.example.com/v1/sse/")));
        assert!(is_legacy_sse(&url("https://mcp.example.com/sse?key=1")));
        assert!(!is_legacy_sse(&url("https://mcp.example.com/mcp")));
        assert!(!is_legacy_sse(&url("https://mcp.example.com/ssection")));
        assert!(!is_legacy_sse(&url("https://sse.example.com/")));
    }

    #[tokio::test]
    async fn urls_are_checked_again_as_the_client_parses_them() {
        let checks = RemoteMcp::new(RemoteMcpSettings::default()).expect("settings");
        for url in [
            "https://2130706433/mcp",
            "https://0x7f.0.0.1/mcp",
            "https://127.1/mcp",
            "https://[::ffff:7f00:1]/mcp",
            "https://LOCALHOST./mcp",
            "http://mcp.example.com/mcp",
        ] {
            let m = remote(json!({"type":"mcp","server_label":"r","server_url":url}));
            let e = checks.connect(&m).await.expect_err(url);
            assert_eq!(e.field, "server_url", "{url}: {e:?}");
        }
        let disabled = RemoteMcp::default();
        let m = remote(json!({"type":"mcp","server_label":"r","server_url":"https://mcp.example.com/mcp"}));
        assert!(disabled.connect(&m).await.expect_err("disabled").message.contains("disabled"));
    }

    #[tokio::test]
    async fn a_hostname_that_resolves_to_loopback_is_refused_with_a_clear_422_text() {
        // `localhost.` variants are caught by the URL rules; an /etc/hosts alias of loopback is not,
        // so it reaches the resolver. Use one if this machine has any.
        let Some(alias) = loopback_alias() else { return };
        let checks = RemoteMcp::new(RemoteMcpSettings::default()).expect("settings");
        let m = remote(json!({"type":"mcp","server_label":"r","server_url":format!("https://{alias}:9/mcp"),
            "authorization":"sk-alias-SECRET"}));
        let e = checks.connect(&m).await.expect_err("refused");
        assert!(e.message.contains("resolves to no public address"), "{e:?}");
        assert!(!e.message.contains("SECRET"));
    }

    /// A name from /etc/hosts that maps to a loopback address and is not `localhost`.
    pub(crate) fn loopback_alias() -> Option<String> {
        let hosts = std::fs::read_to_string("/etc/hosts").ok()?;
        hosts.lines().find_map(|line| {
            let mut fields = line.split('#').next()?.split_whitespace();
            let address: IpAddr = fields.next()?.parse().ok()?;
            if !address.is_loopback() {
                return None;
            }
            fields
                .find(|name| {
                    let lower = name.to_ascii_lowercase();
                    lower != "localhost" && !lower.ends_with(".localhost") && lower.parse::<IpAddr>().is_err()
                })
                .map(str::to_owned)
        })
    }

    #[test]
    fn settings_come_from_the_environment_with_clear_errors() {
        let env = |pairs: &[(&str, &str)]| {
            let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            RemoteMcpSettings::from_lookup(move |name| map.get(name).cloned())
        };
        assert_eq!(env(&[]).expect("defaults"), RemoteMcpSettings::default());
        for (value, expected) in
            [("0", false), ("off", false), ("No", false), ("TRUE", true), ("1", true), ("on", true)]
        {
            let s = env(&[(ENABLED_ENV, value), (URL_CHECKS_ENV, value)]).expect(value);
            assert_eq!((s.enabled, s.url_checks), (expected, expected), "{value}");
        }
        assert!(env(&[(ENABLED_ENV, "")]).expect("empty").enabled);
        let e = env(&[(URL_CHECKS_ENV, "maybe")]).expect_err("invalid");
        assert!(e.contains(URL_CHECKS_ENV) && e.contains("maybe"), "{e}");
        let s = env(&[(TOOL_TIMEOUT_ENV, "2.5"), (CONNECT_TIMEOUT_ENV, "3"), (CA_FILE_ENV, "/x/ca.pem")]).expect("ok");
        assert_eq!((s.tool_timeout, s.connect_timeout), (Duration::from_millis(2500), Duration::from_secs(3)));
        assert_eq!(s.ca_file, Some(PathBuf::from("/x/ca.pem")));
        assert!(env(&[(TOOL_TIMEOUT_ENV, "-1")]).is_err());
        let e = RemoteMcp::new(RemoteMcpSettings { ca_file: Some("/nonexistent/ca.pem".into()), ..Default::default() })
            .expect_err("missing CA file");
        assert!(e.contains(CA_FILE_ENV), "{e}");
    }
}
