//! `respgw-mcp-test-http`: the test tool set over HTTP on loopback — streamable HTTP at `/mcp`, legacy
//! HTTP+SSE at `/sse` (or, with `--exa`, the Exa stand-in at `/mcp`). Prints `listening on http://127.0.0.1:<port>` once it accepts connections, so a
//! test that started it with `--port 0` can read the port from its stdout.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use respgw_mcp_test_servers::{SharedState, http_router};

#[derive(Parser)]
#[command(about = "respgw's MCP test server over HTTP (streamable HTTP at /mcp, legacy SSE at /sse)")]
struct Args {
    /// Port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Require `Authorization: Bearer <TOKEN>` on every request.
    #[arg(long, value_name = "TOKEN")]
    require_token: Option<String>,
    /// Serve the Exa stand-in (`web_search_exa`, `crawling_exa` at `/mcp`) instead of the test tools.
    #[arg(long, conflicts_with = "require_token")]
    exa: bool,
    /// Append each tool call to this file, one JSON line each.
    #[arg(long, value_name = "PATH")]
    call_log: Option<PathBuf>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, args.port)))
        .await
        .with_context(|| format!("cannot listen on 127.0.0.1:{}", args.port))?;
    let addr = listener.local_addr().context("listener address")?;
    let app = if args.exa {
        respgw_mcp_test_servers::exa::exa_router()
    } else {
        http_router(Arc::new(SharedState::with_call_log(args.call_log)), args.require_token)
    };
    println!("listening on http://{addr}");
    std::io::stdout().flush().context("stdout")?;
    axum::serve(listener, app).await.context("HTTP server failed")
}
