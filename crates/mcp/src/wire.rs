//! The JSON bodies of the MCP helper's loopback API, shared by the helper (which writes them) and
//! the workers' client, `respgw_tools::mcp::McpHelperClient` (which reads them). The routes and what
//! each answers are described in the [crate](crate) doc.
//!
//! The list shapes match the gateway's public discovery routes (`{"object":"list","data":[…]}` and
//! `{"server_label","available","tools":[…]}`), so a worker can build its replies from them without
//! renaming anything.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How the helper reaches a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    /// A child process speaking MCP on stdin/stdout.
    Stdio,
    /// MCP streamable HTTP.
    StreamableHttp,
    /// The legacy HTTP+SSE transport.
    Sse,
}

impl TransportKind {
    /// The wire name (`stdio`, `streamable_http`, `sse`).
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::Stdio => "stdio",
            TransportKind::StreamableHttp => "streamable_http",
            TransportKind::Sse => "sse",
        }
    }
}

/// `GET /health`: 200 once every configured server has had its first start attempt, 503 before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// True once the helper is ready (same as the status code saying 200).
    pub ok: bool,
    /// Number of configured servers.
    pub servers: usize,
    /// How many of them are available right now.
    pub available: usize,
}

/// `GET /servers`: every configured server, sorted by label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerList {
    /// Always `"list"`.
    pub object: String,
    /// The servers.
    pub data: Vec<ServerStatus>,
}

/// One server's state, as `GET /servers` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerStatus {
    /// The configured label.
    pub server_label: String,
    /// How the helper reaches it.
    pub transport: TransportKind,
    /// True while a session is up and its tool list is known; tools can be listed and called.
    pub available: bool,
    /// Why it is unavailable (redacted, at most 4096 characters); `null` while available.
    pub last_error: Option<String>,
    /// Tools in the cached inventory (0 while unavailable).
    pub tool_count: usize,
    /// Successful starts (first start, restarts, reconnects) since the helper started. This and
    /// `startup_error_count` are the helper's `gw_responses_mcp_server_startup_total{status="ok"|"error"}`:
    /// they only grow, so a scraper can publish them as counters.
    pub startup_ok_count: u64,
    /// Failed start attempts since the helper started.
    pub startup_error_count: u64,
}

/// `GET /servers/{label}/tools`: the cached inventory of an available server, sorted by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolList {
    /// The server.
    pub server_label: String,
    /// Always true (an unavailable server answers 409 instead).
    pub available: bool,
    /// Its tools.
    pub tools: Vec<ToolInfo>,
}

/// One tool as the server described it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    /// The tool's real name on its server.
    pub name: String,
    /// Human-readable title, when the server gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the tool does; `null` when the server gives nothing.
    pub description: Option<String>,
    /// The tool's JSON Schema for its arguments, exactly as the server sent it (no `$ref` resolution:
    /// making schemas safe for the upstream model is the engine's job).
    pub input_schema: Value,
    /// MCP tool annotations (`readOnlyHint`, …) as sent, when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
}

/// `POST /servers/{label}/tools/{name}/call` request body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRequest {
    /// The tool arguments: a JSON object (`null` or absent means `{}`).
    #[serde(default)]
    pub arguments: Value,
}

/// `POST /servers/{label}/tools/{name}/call` reply (always HTTP 200 once the server was found and
/// available): the outcome of one tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallOutcome {
    /// True when the tool ran and did not report an error.
    pub ok: bool,
    /// The result as text for the model (see [`content_to_text`]); `null` when `ok` is false.
    pub output_text: Option<String>,
    /// Why the call failed: the tool's own error text (`isError` results), a timeout, an unknown tool
    /// or a broken connection. Redacted, at most 4096 characters. `null` when `ok` is true.
    pub error_text: Option<String>,
    /// The MCP content items as the server returned them (empty when the call never returned).
    #[serde(default)]
    pub content: Vec<Value>,
    /// The MCP `structuredContent`, when the server returned one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
}

impl CallOutcome {
    /// A failed call that produced no content (timeout, connection lost, unknown tool).
    pub fn failure(error_text: impl Into<String>) -> Self {
        CallOutcome {
            ok: false,
            output_text: None,
            error_text: Some(error_text.into()),
            content: Vec::new(),
            structured_content: None,
        }
    }
}

/// The body of the helper's 4xx/5xx replies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// Details of a helper error reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// Machine-readable: `unknown_server` (404), `server_unavailable` (409), `bad_request` (400).
    pub code: String,
    /// One sentence for a human.
    pub message: String,
    /// For `server_unavailable`: the server's last error, as in [`ServerStatus::last_error`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// Error code of a 404 for an unknown label.
pub const CODE_UNKNOWN_SERVER: &str = "unknown_server";
/// Error code of a 409 for a known but unavailable server.
pub const CODE_SERVER_UNAVAILABLE: &str = "server_unavailable";
/// Error code of a 400 for a malformed call body.
pub const CODE_BAD_REQUEST: &str = "bad_request";

/// The text the model sees for a tool result: one line (or block) per MCP content item, joined with
/// `\n`. Text items are taken as they are; the rest is summarised, since the model gets text only:
/// - `image` / `audio` → `[image: image/png, 1234 bytes]` (decoded size of the base64 data);
/// - an embedded `resource` → its text when it is a text resource, else `[resource: <uri>, <mime>, N bytes]`;
/// - `resource_link` → `[resource link: <uri> (<name>)]`;
/// - anything else → the item as compact JSON.
///
/// When there are no content items but a `structuredContent`, that is given as compact JSON.
pub fn content_to_text(content: &[Value], structured_content: Option<&Value>) -> String {
    if content.is_empty() {
        return match structured_content {
            Some(Value::Null) | None => String::new(),
            Some(value) => value.to_string(),
        };
    }
    content.iter().map(item_to_text).collect::<Vec<_>>().join("\n")
}

fn item_to_text(item: &Value) -> String {
    let field = |name: &str| item.get(name).and_then(Value::as_str);
    match field("type") {
        Some("text") => field("text").unwrap_or_default().to_owned(),
        Some(kind @ ("image" | "audio")) => format!(
            "[{kind}: {}, {} bytes]",
            field("mimeType").unwrap_or("application/octet-stream"),
            base64_decoded_len(field("data").unwrap_or_default())
        ),
        Some("resource") => {
            let resource = item.get("resource").unwrap_or(&Value::Null);
            let rfield = |name: &str| resource.get(name).and_then(Value::as_str);
            if let Some(text) = rfield("text") {
                text.to_owned()
            } else {
                format!(
                    "[resource: {}, {}, {} bytes]",
                    rfield("uri").unwrap_or("?"),
                    rfield("mimeType").unwrap_or("application/octet-stream"),
                    base64_decoded_len(rfield("blob").unwrap_or_default())
                )
            }
        }
        Some("resource_link") => match field("name") {
            Some(name) => format!("[resource link: {} ({name})]", field("uri").unwrap_or("?")),
            None => format!("[resource link: {}]", field("uri").unwrap_or("?")),
        },
        _ => item.to_string(),
    }
}

/// Length of the bytes a base64 string decodes to (padding and whitespace ignored).
fn base64_decoded_len(data: &str) -> usize {
    let chars = data.bytes().filter(|b| !b.is_ascii_whitespace() && *b != b'=').count();
    chars * 3 / 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn joins_text_items_with_newlines() {
        let content = [json!({"type": "text", "text": "a"}), json!({"type": "text", "text": "b"})];
        assert_eq!(content_to_text(&content, None), "a\nb");
    }

    #[test]
    fn summarises_images_audio_and_resources() {
        let content = [
            json!({"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}),
            json!({"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}),
            json!({"type": "resource", "resource": {"uri": "file:///a.txt", "text": "hello"}}),
            json!({"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AAECAw==", "mimeType": "application/x"}}),
            json!({"type": "resource_link", "uri": "file:///c", "name": "c"}),
            json!({"type": "future_kind", "x": 1}),
        ];
        assert_eq!(
            content_to_text(&content, None),
            "[image: image/png, 8 bytes]\n[audio: audio/wav, 3 bytes]\nhello\n[resource: file:///b.bin, application/x, 4 bytes]\n[resource link: file:///c (c)]\n{\"type\":\"future_kind\",\"x\":1}"
        );
    }

    #[test]
    fn falls_back_to_structured_content() {
        assert_eq!(content_to_text(&[], Some(&json!({"sum": 3}))), "{\"sum\":3}");
        assert_eq!(content_to_text(&[], None), "");
    }

    #[test]
    fn wire_shapes_are_stable() {
        let status = ServerStatus {
            server_label: "files".into(),
            transport: TransportKind::StreamableHttp,
            available: false,
            last_error: Some("boom".into()),
            tool_count: 0,
            startup_ok_count: 1,
            startup_error_count: 2,
        };
        assert_eq!(
            serde_json::to_value(&status).expect("serialize"),
            json!({"server_label": "files", "transport": "streamable_http", "available": false, "last_error": "boom",
                   "tool_count": 0, "startup_ok_count": 1, "startup_error_count": 2})
        );
        let outcome = CallOutcome::failure("timed out");
        assert_eq!(
            serde_json::to_value(&outcome).expect("serialize"),
            json!({"ok": false, "output_text": null, "error_text": "timed out", "content": []})
        );
    }
}
