//! Per-request size caps: how many input items, tools and MCP servers one request may carry, and
//! how large an input file may be.
//! They are checked on the raw request, before items are normalized or tools parsed, so an
//! oversized request costs little; each breach is a 400 naming the field and the cap.
//! (The body-size cap is the HTTP layer's; it answers 413 before any parsing.)

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ApiError;
use crate::request::{CreateResponseRequest, InputParam};

/// Caps on one create-response request, set by the operator (`GW_MAX_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestLimits {
    /// Items in this request's own `input` (history inherited via `previous_response_id` is not counted).
    pub max_input_items: usize,
    /// Entries in `tools`, of every type.
    pub max_tools: usize,
    /// `mcp` entries in `tools`.
    pub max_mcp_servers: usize,
    /// Bytes of one `input_file` (decoded `file_data`, or a fetched `file_url`).
    #[serde(default = "default_max_input_file_bytes")]
    pub max_input_file_bytes: usize,
}

/// 10 MiB: a 16 MiB request body holds at most ~12 MiB of base64-decoded data.
pub const DEFAULT_MAX_INPUT_FILE_BYTES: usize = 10 * 1024 * 1024;

fn default_max_input_file_bytes() -> usize {
    DEFAULT_MAX_INPUT_FILE_BYTES
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits {
            max_input_items: 2048,
            max_tools: 128,
            max_mcp_servers: 16,
            max_input_file_bytes: DEFAULT_MAX_INPUT_FILE_BYTES,
        }
    }
}

impl RequestLimits {
    /// Refuse a request over any cap with a 400 naming the field.
    pub fn check(&self, request: &CreateResponseRequest) -> Result<(), ApiError> {
        if let Some(InputParam::Items(items)) = &request.input
            && items.len() > self.max_input_items
        {
            return Err(over_cap("input", "input items", items.len(), self.max_input_items));
        }
        let tools = request.tools.as_deref().unwrap_or_default();
        if tools.len() > self.max_tools {
            return Err(over_cap("tools", "tools", tools.len(), self.max_tools));
        }
        let mcp = tools.iter().filter(|t| t.get("type").and_then(Value::as_str) == Some("mcp")).count();
        if mcp > self.max_mcp_servers {
            return Err(over_cap("tools", "MCP servers", mcp, self.max_mcp_servers));
        }
        Ok(())
    }
}

fn over_cap(param: &str, what: &str, got: usize, cap: usize) -> ApiError {
    ApiError::invalid(param, format!("Too many {what}: {got} given, this gateway accepts at most {cap} per request."))
        .with_code("limit_exceeded")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(v: Value) -> CreateResponseRequest {
        CreateResponseRequest::from_slice(v.to_string().as_bytes()).unwrap()
    }

    const SMALL: RequestLimits =
        RequestLimits { max_input_items: 2, max_tools: 3, max_mcp_servers: 1, max_input_file_bytes: 100 };

    #[test]
    fn counts_at_the_cap_pass_and_one_more_fails() {
        let item = json!({"role":"user","content":"x"});
        assert!(SMALL.check(&request(json!({"model":"m","input":[item, item]}))).is_ok());
        let e = SMALL.check(&request(json!({"model":"m","input":[item, item, item]}))).unwrap_err();
        assert_eq!((e.status, e.param.as_deref(), e.code.as_deref()), (400, Some("input"), Some("limit_exceeded")));
        assert!(e.message.contains("3 given") && e.message.contains("at most 2"), "{}", e.message);
        // A plain-text input is one item.
        assert!(SMALL.check(&request(json!({"model":"m","input":"x"}))).is_ok());
    }

    #[test]
    fn tools_and_mcp_servers_are_capped_separately() {
        let f = |n: &str| json!({"type":"function","name":n});
        let mcp = |l: &str| json!({"type":"mcp","server_label":l});
        assert!(SMALL.check(&request(json!({"model":"m","input":"x","tools":[f("a"), f("b"), mcp("c")]}))).is_ok());
        let e = SMALL
            .check(&request(json!({"model":"m","input":"x","tools":[f("a"), f("b"), f("c"), f("d")]})))
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools"));
        assert!(e.message.contains("tools"), "{}", e.message);
        let e = SMALL.check(&request(json!({"model":"m","input":"x","tools":[mcp("a"), mcp("b")]}))).unwrap_err();
        assert!(e.message.contains("MCP servers: 2 given"), "{}", e.message);
    }
}
