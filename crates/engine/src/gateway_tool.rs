//! Gateway tools (the tools the gateway runs itself) as the engine sees them: the executor
//! interface that `respgw-tools` implements.
//!
//! The engine does not know how code runs, how pages are searched or how MCP servers are
//! reached. It asks a [`ToolResolver`] for the gateway tools of a request, offers them to the
//! model next to the client's own functions, and when the model calls one it calls
//! [`GatewayTool::call`]; the call's kind module (`tool_kinds`) records the outcome on the call's
//! item. A tool failure is an outcome the model sees, never a failed response.

use std::sync::Arc;

use async_trait::async_trait;
use respgw_protocol::items::Item;
use respgw_protocol::{ApiError, ValidatedRequest};
use serde_json::Value;

use crate::tool_kinds::{GatewayKind, GatewayOutcome, GatewayToolState, ShownFirst};

/// What the model sees of one function: its name, description and parameter schema.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionSpec {
    pub name: String,
    pub description: Option<String>,
    pub parameters: Value,
    pub strict: Option<bool>,
}

/// One call to a gateway tool.
#[derive(Debug)]
pub struct GatewayCall<'a> {
    /// The arguments JSON the model produced.
    pub arguments: &'a str,
    /// What the gateway tool kinds keep across this response's calls; an executor reads its own
    /// kind's part of it.
    pub state: &'a GatewayToolState,
}

/// A tool the gateway runs itself.
#[async_trait]
pub trait GatewayTool: Send + Sync {
    /// How the model sees it.
    fn spec(&self) -> &FunctionSpec;
    /// Which kind of tool it is: the item family its calls produce.
    fn kind(&self) -> &GatewayKind;
    /// Run one call. Never fails the response: failures are outcomes.
    async fn call(&self, call: GatewayCall<'_>) -> GatewayOutcome;
}

/// The gateway tools of one request.
#[derive(Default)]
pub struct ResolvedTools {
    pub tools: Vec<Arc<dyn GatewayTool>>,
    /// What the kinds show before the first model turn, in order.
    pub shown_first: Vec<ShownFirst>,
}

/// Turns a request's declarations of gateway tools into the tools.
#[async_trait]
pub trait ToolResolver: Send + Sync {
    /// Which gateway tools requests may declare (validation rejects the others with a 400).
    fn capabilities(&self) -> respgw_protocol::Capabilities;

    /// Resolve the declarations of `request`, a request of tenant `owner`. May do network I/O
    /// (MCP inventories) and store reads (file_search's vector stores, which must be `owner`'s);
    /// a failure here is a request error (e.g. 422 `bad_input` for an unknown or unreachable
    /// server, 404 for another tenant's vector store). `history` is the conversation so far (to
    /// skip servers already listed).
    async fn resolve(
        &self,
        request: &ValidatedRequest,
        history: &[Item],
        owner: &str,
    ) -> Result<ResolvedTools, ApiError>;
}

/// Gateway tools for unit tests.
#[cfg(test)]
pub(crate) mod test_tools {
    use async_trait::async_trait;

    use super::{FunctionSpec, GatewayCall, GatewayTool};
    use crate::tool_kinds::{GatewayKind, GatewayOutcome};

    /// A tool that is offered and resolved but never called.
    pub(crate) struct UncalledTool(pub FunctionSpec, pub GatewayKind);

    #[async_trait]
    impl GatewayTool for UncalledTool {
        fn spec(&self) -> &FunctionSpec {
            &self.0
        }
        fn kind(&self) -> &GatewayKind {
            &self.1
        }
        async fn call(&self, _: GatewayCall<'_>) -> GatewayOutcome {
            unreachable!("a test called a tool it only offers")
        }
    }
}
