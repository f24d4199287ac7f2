//! `respgw-mcp-test-stdio`: the test tool set ([`TestServer`]) speaking MCP on stdin/stdout, the way a
//! Built-in MCP `command` entry is run. Exits when stdin closes, or with status 3 on the `crash` tool.

use std::sync::Arc;

use anyhow::Context;
use respgw_mcp_test_servers::{SharedState, TestServer};
use rmcp::ServiceExt;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    // stderr is the helper's log of this server: say who we are so the log shows it works.
    eprintln!("respgw-mcp-test-stdio: ready on stdio");
    let server = TestServer::new(Arc::new(SharedState::default()), true)
        .serve(rmcp::transport::stdio())
        .await
        .context("MCP initialization on stdio failed")?;
    server.waiting().await.context("MCP server task failed")?;
    Ok(())
}
