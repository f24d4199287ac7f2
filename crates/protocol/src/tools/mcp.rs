//! `mcp`: the gateway calls the tools of an MCP server, Built-in (configured on the gateway) or
//! Remote (declared with a `server_url`). The declaration, `require_approval` and
//! `allowed_tools`, the request-scoped credentials kept out of every echo, the checks of a Remote
//! server's URL, and the function names under which the model sees a server's tools.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Capabilities, ToolDeclaration, hashed_function_name};
use crate::error::ApiError;

/// An MCP server declaration: Built-in (no `server_url`, names a configured server) or Remote.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpTool {
    #[serde(rename = "type")]
    pub kind: McpToolType,
    pub server_label: String,
    pub server_url: Option<String>,
    pub allowed_tools: Option<Vec<String>>,
    /// Which tools need the client's approval before a call runs; absent means every tool does
    /// (see [`McpTool::needs_approval`]).
    pub require_approval: Option<RequireApproval>,
    pub server_description: Option<String>,
    /// Request-scoped credentials: never serialized, so never echoed nor stored.
    #[serde(skip)]
    pub credentials: McpCredentials,
    /// Always `null` in the echo: header values are secrets (see `credentials`).
    headers: Option<()>,
}

impl McpTool {
    /// Built-in mode: the server comes from the gateway's configuration.
    pub fn is_builtin(&self) -> bool {
        self.server_url.is_none()
    }

    /// Whether a call of `tool` must wait for the client's approval: with `"never"`, no; with
    /// `"always"` or no `require_approval`, yes; with lists, unless `never` names the tool (a tool
    /// in neither list needs approval, as in the reference API).
    pub fn needs_approval(&self, tool: &str) -> bool {
        match &self.require_approval {
            None | Some(RequireApproval::Always) => true,
            Some(RequireApproval::Never) => false,
            Some(RequireApproval::Lists { never, .. }) => !never.iter().flatten().any(|name| name == tool),
        }
    }

    /// The URL to connect to: `server_url` with the query the client gave (kept out of
    /// `server_url`, which is echoed and stored).
    pub fn connect_url(&self) -> Option<String> {
        let base = self.server_url.as_deref()?;
        Some(match &self.credentials.server_url_query {
            Some(query) => format!("{base}?{query}"),
            None => base.to_owned(),
        })
    }
}

/// `require_approval` of an MCP declaration: `"always"`, `"never"`, or tool lists
/// (`{"always":{"tool_names":[…]},"never":{"tool_names":[…]}}`). Echoed as it was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequireApproval {
    Always,
    Never,
    Lists { always: Option<Vec<String>>, never: Option<Vec<String>> },
}

impl Serialize for RequireApproval {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            RequireApproval::Always => serializer.serialize_str("always"),
            RequireApproval::Never => serializer.serialize_str("never"),
            RequireApproval::Lists { always, never } => {
                let mut lists = Map::new();
                for (key, names) in [("always", always), ("never", never)] {
                    if let Some(names) = names {
                        lists.insert(key.into(), serde_json::json!({ "tool_names": names }));
                    }
                }
                lists.serialize(serializer)
            }
        }
    }
}

/// Parse `require_approval` (at `param`): a mode, or the two tool lists (a name in both is refused;
/// the `read_only` filter is not supported).
fn parse_require_approval(value: Option<Value>, param: &str) -> Result<Option<RequireApproval>, ApiError> {
    const EXPECTED: &str = "expected 'always', 'never' or an object {\"always\": {\"tool_names\": [...]}, \"never\": {\"tool_names\": [...]}}";
    let filter = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(mode)) if mode == "always" => return Ok(Some(RequireApproval::Always)),
        Some(Value::String(mode)) if mode == "never" => return Ok(Some(RequireApproval::Never)),
        Some(Value::Object(filter)) => filter,
        Some(_) => return Err(ApiError::invalid(param, format!("{param}: {EXPECTED}."))),
    };
    let mut lists = [None, None];
    for (key, list) in filter {
        let at = format!("{param}.{key}");
        let slot = match key.as_str() {
            "always" => 0,
            "never" => 1,
            _ => return Err(ApiError::invalid(at.clone(), format!("{at}: unknown field; {EXPECTED}."))),
        };
        let Value::Object(mut entry) = list else {
            return Err(ApiError::invalid(at.clone(), format!("{at}: expected an object with 'tool_names'.")));
        };
        if entry.contains_key("read_only") {
            return Err(ApiError::bad_input(
                format!("{at}.read_only"),
                format!("{at}.read_only: the `read_only` filter is not supported; list the tools in `tool_names`."),
            ));
        }
        let names = entry.remove("tool_names").unwrap_or(Value::Array(Vec::new()));
        if let Some(other) = entry.keys().next() {
            let at = format!("{at}.{other}");
            return Err(ApiError::invalid(at.clone(), format!("{at}: unknown field; expected 'tool_names'.")));
        }
        let names_at = format!("{at}.tool_names");
        let names: Vec<String> =
            serde_path_to_error::deserialize(names).map_err(|e| ApiError::from_path_error(&names_at, e))?;
        lists[slot] = Some(names);
    }
    let [always, never] = lists;
    if let (Some(always), Some(never)) = (&always, &never)
        && let Some(both) = always.iter().find(|name| never.contains(name))
    {
        return Err(ApiError::invalid(
            param,
            format!("{param}: the tool '{both}' is listed under both `always` and `never`."),
        ));
    }
    Ok(Some(RequireApproval::Lists { always, never }))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpToolType {
    Mcp,
}

/// `authorization` and `headers` of a Remote MCP declaration, and the query of its `server_url`.
/// They exist for the duration of the request only; `Debug` shows no values so they cannot reach
/// a log.
#[derive(Clone, PartialEq, Default)]
pub struct McpCredentials {
    pub authorization: Option<String>,
    pub headers: BTreeMap<String, String>,
    /// `server_url`'s query string (without `?`): often a key, so never echoed nor stored.
    pub server_url_query: Option<String>,
}

impl std::fmt::Debug for McpCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpCredentials")
            .field("authorization", &self.authorization.as_ref().map(|_| "<redacted>"))
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("server_url_query", &self.server_url_query.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct McpToolParam {
    #[serde(rename = "type")]
    _kind: McpToolType,
    server_label: String,
    #[serde(default)]
    server_url: Option<String>,
    #[serde(default)]
    connector_id: Option<String>,
    #[serde(default)]
    authorization: Option<String>,
    #[serde(default)]
    headers: Option<BTreeMap<String, String>>,
    #[serde(default)]
    allowed_tools: Option<Value>,
    #[serde(default)]
    require_approval: Option<Value>,
    #[serde(default)]
    server_description: Option<String>,
}

/// `allowed_tools` of an MCP declaration: a list of names, or `{"tool_names":[…]}` (`null`: all).
fn parse_allowed_tools(value: Option<Value>, at: &str) -> Result<Option<Vec<String>>, ApiError> {
    let names = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(mut filter)) => match filter.remove("tool_names") {
            Some(names) => (names, format!("{at}.allowed_tools.tool_names")),
            None => return Ok(None),
        },
        Some(names) => (names, format!("{at}.allowed_tools")),
    };
    let (names, param) = names;
    serde_path_to_error::deserialize::<_, Vec<String>>(names).map(Some).map_err(|e| {
        let e = ApiError::from_path_error(&param, e);
        match (&e.param, e.message.contains("expected an array")) {
            (Some(p), true) if p == &param => ApiError::invalid(
                param.clone(),
                format!("{param}: expected an array of tool names or an object with 'tool_names'."),
            ),
            _ => e,
        }
    })
}

pub(super) fn parse(
    tool: Value,
    at: &str,
    earlier: &[ToolDeclaration],
    caps: &Capabilities,
) -> Result<McpTool, ApiError> {
    let m: McpToolParam = serde_path_to_error::deserialize(tool).map_err(|e| ApiError::from_path_error(at, e))?;
    let allowed_tools = parse_allowed_tools(m.allowed_tools, at)?;
    let field = |f: &str| format!("{at}.{f}");
    if m.server_label.is_empty()
        || m.server_label.len() > 64
        || !m.server_label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(ApiError::invalid(
            field("server_label"),
            "server_label must be 1-64 characters of a-z, A-Z, 0-9, '_' or '-'.",
        ));
    }
    if m.connector_id.is_some() {
        return Err(ApiError::bad_input(field("connector_id"), "MCP `connector_id` declarations are not supported."));
    }
    let require_approval = parse_require_approval(m.require_approval, &field("require_approval"))?;
    if earlier.iter().any(|t| matches!(t, ToolDeclaration::Mcp(other) if other.server_label == m.server_label)) {
        return Err(ApiError::bad_input(
            field("server_label"),
            format!("Duplicate MCP declarations are not allowed for the same `server_label`: '{}'.", m.server_label),
        ));
    }
    match &m.server_url {
        None => {
            if m.headers.is_some() {
                return Err(ApiError::bad_input(
                    field("headers"),
                    "MCP `headers` are only supported when `server_url` is provided.",
                ));
            }
            if m.authorization.is_some() {
                return Err(ApiError::bad_input(
                    field("authorization"),
                    "MCP `authorization` is only supported when `server_url` is provided.",
                ));
            }
            if !caps.builtin_mcp {
                return Err(ApiError::bad_input(
                    field("server_label"),
                    "Built-in MCP tools were declared but no Built-in MCP servers are configured on this gateway.",
                ));
            }
        }
        Some(url) => {
            if has_userinfo(url) {
                let param = field("server_url");
                return Err(ApiError::invalid(
                    param.clone(),
                    format!(
                        "{param}: credentials in the URL (user:password@host) are not accepted, because the URL \
                         is echoed and stored; send them in `authorization` (or `headers`) instead."
                    ),
                ));
            }
            if !caps.remote_mcp {
                return Err(ApiError::bad_input(
                    field("server_url"),
                    "Request-declared (Remote) MCP servers are disabled on this gateway.",
                ));
            }
            check_remote_url(url, caps.remote_url_checks)
                .map_err(|msg| ApiError::bad_input(field("server_url"), msg))?;
            if m.authorization.is_none()
                && m.headers
                    .as_ref()
                    .is_some_and(|h| h.keys().filter(|k| k.eq_ignore_ascii_case("authorization")).count() > 1)
            {
                return Err(ApiError::bad_input(
                    field("headers"),
                    "MCP `headers` contains several `Authorization` header variants.",
                ));
            }
        }
    }
    // The query of a Remote server's URL often carries a key (`?token=…`, `?api_key=…`): it is
    // used to connect but never echoed nor stored.
    let (server_url, server_url_query) = match m.server_url {
        Some(url) => {
            let (base, query) = split_query(&url);
            (Some(base), query)
        }
        None => (None, None),
    };
    Ok(McpTool {
        kind: McpToolType::Mcp,
        server_label: m.server_label,
        server_url,
        allowed_tools,
        require_approval,
        server_description: m.server_description,
        credentials: McpCredentials {
            authorization: m.authorization,
            headers: m.headers.unwrap_or_default(),
            server_url_query,
        },
        headers: None,
    })
}

/// `url` without its query and fragment, and the query (without `?`) when there is one.
fn split_query(url: &str) -> (String, Option<String>) {
    let without_fragment = url.split('#').next().unwrap_or_default();
    match without_fragment.split_once('?') {
        Some((base, query)) if !query.is_empty() => (base.to_owned(), Some(query.to_owned())),
        Some((base, _)) => (base.to_owned(), None),
        None => (without_fragment.to_owned(), None),
    }
}

/// Whether `url`'s authority holds a `user[:password]@` part.
fn has_userinfo(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split(['/', '?', '#']).next().unwrap_or_default().contains('@')
}

/// Remote MCP URL rules: https only; `localhost`, `*.localhost` and IP-literal
/// hosts refused. With checks off, any http(s) URL with a host is accepted. (Names that resolve
/// to private addresses are refused later, when the URL is dialled.)
pub fn check_remote_url(url: &str, checks: bool) -> Result<(), String> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| format!("Invalid MCP `server_url` '{url}'."))?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "https" && (checks || scheme != "http") {
        return Err(if checks {
            "Remote MCP `server_url` must use `https`.".to_owned()
        } else {
            "Remote MCP `server_url` must use http or https.".to_owned()
        });
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(bracketed) = host_port.strip_prefix('[') {
        bracketed.split(']').next().unwrap_or_default()
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    if host.is_empty() {
        return Err("Remote MCP `server_url` must include a host.".to_owned());
    }
    if checks {
        let lower = host.trim_end_matches('.').to_ascii_lowercase();
        if lower == "localhost" || lower.ends_with(".localhost") {
            return Err("Remote MCP host is denylisted: `localhost` and `.localhost` are not allowed.".to_owned());
        }
        if lower.parse::<std::net::IpAddr>().is_ok() {
            return Err("Remote MCP IP-literal hosts are not allowed.".to_owned());
        }
    }
    Ok(())
}

/// The function name under which the model sees an MCP tool: `mcp__<label>__<tool>`, made of
/// characters every upstream accepts, at most 64 long. When the plain form would not fit or
/// needed characters replaced, a short hash of the real (label, tool) pair is appended, so two
/// different tools never share a name. Deterministic: the same pair always gets the same name,
/// in every turn and every worker.
pub fn mcp_function_name(server_label: &str, tool: &str) -> String {
    fn sanitize(s: &str) -> String {
        s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
    }
    let plain = format!("mcp__{}__{}", sanitize(server_label), sanitize(tool));
    let lossless = sanitize(tool) == tool && sanitize(server_label) == server_label;
    if lossless && plain.len() <= 64 {
        return plain;
    }
    hashed_function_name(&plain, server_label, tool)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::{ALL, parse};
    use crate::tools::{Capabilities, is_valid_name, parse_tools};
    use serde_json::json;

    #[test]
    fn require_approval_modes_and_lists_decide_which_calls_wait() {
        let mcp = |require_approval: Value| {
            let mut tool = json!({"type":"mcp","server_label":"docs"});
            if !require_approval.is_null() {
                tool["require_approval"] = require_approval;
            }
            match parse(json!([tool])).map(|mut t| t.remove(0)) {
                Ok(ToolDeclaration::Mcp(m)) => Ok(m),
                Ok(other) => panic!("{other:?}"),
                Err(e) => Err(e),
            }
        };
        let decide = |m: &McpTool| ["read", "write", "other"].map(|t| m.needs_approval(t));
        assert_eq!(decide(&mcp(json!("never")).unwrap()), [false, false, false]);
        assert_eq!(decide(&mcp(json!("always")).unwrap()), [true, true, true]);
        assert_eq!(decide(&mcp(Value::Null).unwrap()), [true, true, true], "absent: as in the reference API");
        let lists = json!({"never":{"tool_names":["read"]},"always":{"tool_names":["write"]}});
        let m = mcp(lists.clone()).unwrap();
        assert_eq!(decide(&m), [false, true, true], "a tool in neither list needs approval");
        assert_eq!(serde_json::to_value(&m).unwrap()["require_approval"], lists, "echoed as sent");
        assert_eq!(decide(&mcp(json!({"never":{"tool_names":["read","other"]}})).unwrap()), [false, true, false]);
        assert_eq!(serde_json::to_value(mcp(json!("never")).unwrap()).unwrap()["require_approval"], "never");

        let refused = |value: Value, param: &str, status: u16| {
            let e = mcp(value).unwrap_err();
            assert_eq!((e.param.as_deref(), e.status), (Some(param), status), "{e:?}");
            e
        };
        let e = refused(json!("sometimes"), "tools[0].require_approval", 400);
        assert!(e.message.contains("'always', 'never'"), "{e:?}");
        refused(json!(true), "tools[0].require_approval", 400);
        refused(json!({"maybe":{"tool_names":[]}}), "tools[0].require_approval.maybe", 400);
        refused(json!({"always":["a"]}), "tools[0].require_approval.always", 400);
        refused(json!({"always":{"tool_names":"a"}}), "tools[0].require_approval.always.tool_names", 400);
        refused(json!({"always":{"tool_names":["a"],"x":1}}), "tools[0].require_approval.always.x", 400);
        refused(json!({"never":{"read_only":true}}), "tools[0].require_approval.never.read_only", 422);
        let e = refused(
            json!({"always":{"tool_names":["a"]},"never":{"tool_names":["a"]}}),
            "tools[0].require_approval",
            400,
        );
        assert!(e.message.contains("'a'"), "{e:?}");
    }
    #[test]
    fn remote_mcp_credentials_are_never_serialized() {
        let t = parse(json!([{"type":"mcp","server_label":"gh","server_url":"https://mcp.example.com/mcp",
            "authorization":"secret-token","headers":{"X-Api-Key":"secret-header"},"require_approval":"never"}]))
        .unwrap();
        let echo = serde_json::to_string(&t[0]).unwrap();
        assert!(!echo.contains("secret"), "{echo}");
        assert!(!format!("{t:?}").contains("secret"), "Debug must not show secrets");
        let ToolDeclaration::Mcp(m) = &t[0] else { panic!() };
        assert_eq!(m.credentials.authorization.as_deref(), Some("secret-token"));
    }

    #[test]
    fn mcp_rules_of_spec_section_4_1() {
        let bad = |tools: Value, param: &str| {
            let e = parse(tools).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{e:?}");
            e
        };
        let e = bad(
            json!([{"type":"mcp","server_label":"a"},{"type":"mcp","server_label":"a","server_url":"https://x.example"}]),
            "tools[1].server_label",
        );
        assert_eq!(e.status, 422);
        bad(json!([{"type":"mcp","server_label":"a","connector_id":"c"}]), "tools[0].connector_id");
        bad(json!([{"type":"mcp","server_label":"a","headers":{"k":"v"}}]), "tools[0].headers");
        bad(json!([{"type":"mcp","server_label":"a","authorization":"t"}]), "tools[0].authorization");
        bad(json!([{"type":"mcp","server_label":"a","require_approval":"sometimes"}]), "tools[0].require_approval");
        bad(json!([{"type":"mcp","server_label":"a","server_url":"http://x.example"}]), "tools[0].server_url");
        bad(json!([{"type":"mcp","server_label":"a","server_url":"https://localhost/mcp"}]), "tools[0].server_url");
        bad(json!([{"type":"mcp","server_label":"a","server_url":"https://api.localhost/mcp"}]), "tools[0].server_url");
        bad(json!([{"type":"mcp","server_label":"a","server_url":"https://10.0.0.1/mcp"}]), "tools[0].server_url");
        bad(json!([{"type":"mcp","server_label":"a","server_url":"https://[::1]:8443/mcp"}]), "tools[0].server_url");
        bad(json!([{"type":"mcp","server_label":"a","bogus":1}]), "tools[0].bogus");
        let off = Capabilities { remote_mcp: false, ..ALL };
        let e = parse_tools(vec![json!({"type":"mcp","server_label":"a","server_url":"https://x.example"})], &off)
            .unwrap_err();
        assert_eq!(e.status, 422);
        let e = parse_tools(vec![json!({"type":"mcp","server_label":"a"})], &Capabilities::default()).unwrap_err();
        assert_eq!(e.status, 422);
        let checks_off = Capabilities { remote_url_checks: false, ..ALL };
        assert!(
            parse_tools(
                vec![json!({"type":"mcp","server_label":"a","server_url":"http://127.0.0.1:9/mcp"})],
                &checks_off
            )
            .is_ok()
        );
    }

    #[test]
    fn remote_mcp_urls_keep_secrets_out_of_the_echo() {
        let e = parse(json!([{"type":"mcp","server_label":"a","server_url":"https://user:pass@mcp.example.com/mcp"}]))
            .unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("tools[0].server_url")));
        assert!(e.message.contains("authorization") && !e.message.contains("pass@"), "{}", e.message);
        let t = parse(
            json!([{"type":"mcp","server_label":"a","server_url":"https://mcp.example.com/mcp?token=s3cret&x=1"}]),
        )
        .unwrap();
        let echo = serde_json::to_string(&t[0]).unwrap();
        assert!(echo.contains("\"server_url\":\"https://mcp.example.com/mcp\"") && !echo.contains("s3cret"), "{echo}");
        assert!(!format!("{t:?}").contains("s3cret"));
        let ToolDeclaration::Mcp(m) = &t[0] else { panic!() };
        assert_eq!(m.connect_url().as_deref(), Some("https://mcp.example.com/mcp?token=s3cret&x=1"));
    }
    #[test]
    fn mcp_function_names_are_safe_short_and_distinct() {
        assert_eq!(mcp_function_name("docs", "search"), "mcp__docs__search");
        let dotted = mcp_function_name("docs", "search.v2");
        assert!(dotted.starts_with("mcp__docs__search_v2_") && is_valid_name(&dotted), "{dotted}");
        assert_ne!(mcp_function_name("docs", "search.v2"), mcp_function_name("docs", "search_v2"));
        let long = mcp_function_name(&"l".repeat(40), &"t".repeat(40));
        assert_eq!(long.len(), 64);
        assert!(is_valid_name(&long));
        assert_eq!(long, mcp_function_name(&"l".repeat(40), &"t".repeat(40)));
    }
}
