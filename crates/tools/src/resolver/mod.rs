//! The engine's view of this crate: [`GatewayTools`] resolves a request's `code_interpreter`,
//! `web_search`, `file_search` and `mcp` declarations into [`GatewayTool`](respgw_engine::GatewayTool)s
//! — the adapters between the engine and this crate's executors, one module per tool kind, as in
//! the engine's `tool_kinds`: [`code_interpreter`] (the sandbox), [`file_search`] (the tenant's
//! vector stores, checked here), [`mcp`] (Built-in MCP through the helper, Remote MCP over the
//! request's session); `web_search`'s per-request tool is
//! [`crate::web_search::WebSearchTool`] itself. Each tool turns a model call into an outcome on
//! its item; a failure is an outcome the model sees, never a failed response.

mod code_interpreter;
mod file_search;
mod mcp;

use std::sync::Arc;

use async_trait::async_trait;
use respgw_engine::{ResolvedTools, ToolResolver};
use respgw_protocol::items::Item;
use respgw_protocol::tools::tool_not_enabled;
use respgw_protocol::{ApiError, ToolDeclaration, ValidatedRequest};

use crate::code_interpreter::Sandbox;
use crate::file_search::FileSearch;
use crate::mcp::{McpHelperClient, RemoteMcp};
use crate::web_search::WebSearch;
use code_interpreter::CodeInterpreterTool;

/// The gateway tools this process can run.
#[derive(Clone, Default)]
pub struct GatewayTools {
    sandbox: Option<Sandbox>,
    mcp_helper: Option<McpHelperClient>,
    /// Remote MCP (disabled by default).
    remote_mcp: RemoteMcp,
    /// `web_search`, when a profile is configured.
    web_search: Option<WebSearch>,
    /// `file_search`, when the worker has the retrieval service.
    file_search: Option<FileSearch>,
}

impl GatewayTools {
    /// `sandbox`: the code interpreter, when enabled and working; `mcp_helper`: the Built-in MCP
    /// helper, when MCP servers are configured; `remote_mcp`: Remote MCP and its settings.
    pub fn new(sandbox: Option<Sandbox>, mcp_helper: Option<McpHelperClient>, remote_mcp: RemoteMcp) -> Self {
        GatewayTools { sandbox, mcp_helper, remote_mcp, web_search: None, file_search: None }
    }

    /// Offer `web_search` through this profile.
    pub fn with_web_search(mut self, web_search: WebSearch) -> Self {
        self.web_search = Some(web_search);
        self
    }

    /// Offer `file_search` over the vector stores of `file_search`'s retrieval service.
    pub fn with_file_search(mut self, file_search: FileSearch) -> Self {
        self.file_search = Some(file_search);
        self
    }
}

#[async_trait]
impl ToolResolver for GatewayTools {
    fn capabilities(&self) -> respgw_protocol::Capabilities {
        respgw_protocol::Capabilities {
            code_interpreter: self.sandbox.is_some(),
            builtin_mcp: self.mcp_helper.is_some(),
            remote_mcp: self.remote_mcp.settings().enabled,
            remote_url_checks: self.remote_mcp.settings().url_checks,
            web_search: self.web_search.is_some(),
            file_search: self.file_search.is_some(),
        }
    }

    async fn resolve(
        &self,
        request: &ValidatedRequest,
        history: &[Item],
        owner: &str,
    ) -> Result<ResolvedTools, ApiError> {
        let mut resolved = ResolvedTools::default();
        for (i, declaration) in request.tools.iter().enumerate() {
            match declaration {
                // Client tools (the client runs them) and tools left out of the offer.
                ToolDeclaration::Function(_)
                | ToolDeclaration::Namespace(_)
                | ToolDeclaration::Custom(_)
                | ToolDeclaration::LocalShell(_)
                | ToolDeclaration::OfflineWebSearch(_) => {}
                ToolDeclaration::CodeInterpreter(_) => {
                    let sandbox = self
                        .sandbox
                        .clone()
                        .ok_or_else(|| tool_not_enabled(&format!("tools[{i}]"), "code_interpreter"))?;
                    resolved.tools.push(Arc::new(CodeInterpreterTool::new(sandbox)));
                }
                ToolDeclaration::WebSearch(declaration) => {
                    let web_search = self
                        .web_search
                        .as_ref()
                        .ok_or_else(|| tool_not_enabled(&format!("tools[{i}]"), "web_search"))?;
                    resolved.tools.push(Arc::new(web_search.tool(declaration)));
                }
                ToolDeclaration::FileSearch(declaration) => {
                    let search = self
                        .file_search
                        .as_ref()
                        .ok_or_else(|| tool_not_enabled(&format!("tools[{i}]"), "file_search"))?;
                    resolved.tools.push(file_search::resolve(i, declaration, search, owner).await?);
                }
                ToolDeclaration::Mcp(mcp) if mcp.is_builtin() => {
                    let client = self.mcp_helper.clone().ok_or_else(|| {
                        ApiError::bad_input(
                            format!("tools[{i}].server_label"),
                            "Built-in MCP tools were declared but no Built-in MCP servers are configured on this gateway.",
                        )
                    })?;
                    mcp::resolve_builtin(i, mcp, client, history, &mut resolved).await?;
                }
                ToolDeclaration::Mcp(mcp) => {
                    mcp::resolve_remote(i, mcp, &self.remote_mcp, history, &mut resolved).await?
                }
            }
        }
        Ok(resolved)
    }
}
