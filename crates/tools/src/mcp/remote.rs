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
//! The URL's path picks the transport (the rule common MCP clients such as FastMCP apply; rmcp's
//! client has none): a URL whose path ends in `/sse` (or `/sse/`) is a legacy HTTP+SSE server
//! (`respgw_mcp::legacy_sse`), everything else is streamable HTTP. `headers` play no part in it.
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
//! already refused non-https URLs, `localhost`, `*.localhost` and IP-literal hosts
//! (`respgw_protocol::tools::mcp`). Dialling adds:
//! - the URL is parsed again as the HTTP client sees it, and IP-literal hosts are refused in that
//!   form too (`https://2130706433/` *is* `https://127.0.0.1/` to a URL parser);
//! - the host name is resolved by [`GuardedResolver`] (shared with web_search: [`crate::net_guard`]), which drops every address that is not
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

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use respgw_protocol::tools::mcp::McpTool;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::net_guard::{GuardedResolver, ensure_crypto_provider, ip_literal};
use respgw_mcp::client::{describe_error, list_tools};
use respgw_mcp::legacy_sse::LegacySseTransport;
use respgw_mcp::redact::{Redactor, error_chain};
use respgw_mcp::{ToolInfo, content_to_text};

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

/// How Remote MCP runs in this gateway (`--mcp-request-remote-*`). Resolved once at start-up and
/// handed to every worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteMcpSettings {
    /// Requests may declare Remote servers.
    pub enabled: bool,
    /// URL rules and the address policy.
    pub url_checks: bool,
    /// Opening a session: connect, TLS, `initialize`, `tools/list`.
    pub connect_timeout: Duration,
    /// One tool call.
    pub tool_timeout: Duration,
    /// Extra trusted root certificates, PEM (a private CA; a self-signed test server).
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
                let pem = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                let certs = reqwest::Certificate::from_pem_bundle(&pem)
                    .map_err(|e| format!("{} is not a PEM certificate bundle: {e}", path.display()))?;
                if certs.is_empty() {
                    return Err(format!("{} holds no certificate", path.display()));
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
        let raw_url = declaration.connect_url().unwrap_or_default();
        let url = reqwest::Url::parse(&raw_url)
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

/// The client side of the `initialize` handshake: no capabilities (the gateway has no user to ask
/// for sampling or elicitation), the newest protocol version that still has `initialize`.
fn client_info() -> ClientConfig {
    let mut info =
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("respgw", env!("CARGO_PKG_VERSION")));
    info.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
    info
}

/// Whether a URL names a legacy HTTP+SSE server: its path ends in `/sse` (FastMCP's rule).
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
    // The URL's query (often a key) appears in transport errors; mask its values, raw and encoded.
    if let Some(query) = &credentials.server_url_query {
        secrets.extend(query.split('&').filter_map(|pair| pair.split_once('=').map(|(_, v)| v.to_owned())));
        secrets.extend(url::form_urlencoded::parse(query.as_bytes()).map(|(_, v)| v.into_owned()));
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

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use respgw_protocol::ToolDeclaration;
    use respgw_protocol::tools::{Capabilities, parse_tools};
    use serde_json::json;

    use super::*;

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
        assert!(e.message.contains("is not an allowed destination"), "{e:?}");
        assert!(!e.message.contains("127.0.0.1") && !e.message.contains("loopback"), "{e:?}");
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
    fn an_unreadable_ca_file_is_an_error_naming_it() {
        let e = RemoteMcp::new(RemoteMcpSettings { ca_file: Some("/nonexistent/ca.pem".into()), ..Default::default() })
            .expect_err("missing CA file");
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    }
}
