//! `respgw-mcp-test-stdio`: the test tool set ([`TestServer`]) speaking MCP on stdin/stdout, the way a
//! Built-in MCP `command` entry is run. Exits when stdin closes, or with status 3 on the `crash` tool.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use respgw_mcp_test_servers::{SharedState, TestServer};
use rmcp::ServiceExt;

#[derive(Parser)]
#[command(about = "respgw's MCP test server on stdin/stdout")]
struct Args {
    /// Append each tool call to this file, one JSON line each.
    #[arg(long, value_name = "PATH")]
    call_log: Option<PathBuf>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // stderr is the helper's log of this server: say who we are so the log shows it works.
    eprintln!("respgw-mcp-test-stdio: ready on stdio");
    let server = TestServer::new(Arc::new(SharedState::with_call_log(args.call_log)), true)
        .serve(rmcp::transport::stdio())
        .await
        .context("MCP initialization on stdio failed")?;
    server.waiting().await.context("MCP server task failed")?;
    Ok(())
}
