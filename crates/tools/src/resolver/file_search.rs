//! `file_search` for the engine: a request's declaration, once its vector stores are found to be
//! the tenant's, made the tool whose calls [`FileSearch::run`] searches. The engine side of the
//! kind (its item, events, citations and history) is `respgw_engine::tool_kinds::file_search`.

use std::sync::Arc;

use async_trait::async_trait;
use respgw_engine::tool_kinds::file_search::function_spec;
use respgw_engine::{FunctionSpec, GatewayCall, GatewayKind, GatewayOutcome, GatewayTool};
use respgw_protocol::ApiError;
use respgw_protocol::tools::file_search::FileSearchTool as FileSearchDeclaration;

use crate::file_search::FileSearch;

/// The tool of the declaration at `tools[index]` of a request of tenant `owner`; 404 when one of
/// its vector stores is not `owner`'s.
pub(super) async fn resolve(
    index: usize,
    declaration: &FileSearchDeclaration,
    search: &FileSearch,
    owner: &str,
) -> Result<Arc<dyn GatewayTool>, ApiError> {
    search.check_vector_stores(index, declaration, owner).await?;
    Ok(Arc::new(FileSearchTool {
        search: search.clone(),
        spec: function_spec(),
        kind: GatewayKind::FileSearch,
        owner: owner.to_owned(),
        declaration: declaration.clone(),
    }))
}

/// `file_search` for one request: its tenant and declaration.
struct FileSearchTool {
    search: FileSearch,
    spec: FunctionSpec,
    kind: GatewayKind,
    owner: String,
    declaration: FileSearchDeclaration,
}

#[async_trait]
impl GatewayTool for FileSearchTool {
    fn spec(&self) -> &FunctionSpec {
        &self.spec
    }

    fn kind(&self) -> &GatewayKind {
        &self.kind
    }

    async fn call(&self, call: GatewayCall<'_>) -> GatewayOutcome {
        GatewayOutcome::FileSearch(self.search.run(&self.owner, &self.declaration, call.arguments).await)
    }
}
