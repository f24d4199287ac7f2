//! Turning [`GatewayOptions`] into a running server: open the store, build the engine and the
//! router, serve on a listener until told to stop, then drain within a bound.

use std::future::Future;
use std::sync::Arc;

use anyhow::Context;
use axum::serve::ListenerExt;
use axum::{Extension, Router};
use respgw_engine::{Engine, Upstream};
use respgw_mcp::McpTimeouts;
use respgw_telemetry::Metrics;
use respgw_tools::GatewayTools;
use respgw_tools::code_interpreter::{Sandbox, SandboxConfig};
use respgw_tools::input_files::InputFiles;
use respgw_tools::mcp::{HelperTimeouts, McpHelperClient, RemoteMcp};
use respgw_tools::web_search::{BRAVE_API_KEY_ENV, WebSearch};

use crate::app::{AppConfig, router};
use crate::auth::ApiKeys;
use crate::metrics::MetricsView;
use crate::options::GatewayOptions;
use crate::websocket::WebSocketDrain;
use respgw_engine::sealed::{ReasoningKeys, ReasoningSeal};

/// Build the router for one gateway process.
///
/// `metrics_view` is what `/metrics` serves (the supervisor's merged view in a worker);
/// `worker_label` is sent as `x-respgw-worker`.
pub async fn build(
    options: &GatewayOptions,
    metrics: Metrics,
    metrics_view: MetricsView,
    worker_label: Option<String>,
) -> anyhow::Result<Router> {
    let store_options = respgw_store::StoreOptions { pool_size: options.db_pool_size };
    let store = respgw_store::open_with(&options.db_path, store_options).await.with_context(|| {
        format!("cannot open the response store at '{}'", respgw_store::redacted_location(&options.db_path))
    })?;
    let upstream = Upstream::new(options.upstream.clone()).context("cannot set up the upstream client")?;
    let mcp_helper = mcp_helper_client(options)?;
    let tools = gateway_tools(options, mcp_helper.clone()).await?;
    let reasoning_keys = if options.reasoning_keys.keys.is_empty() {
        ReasoningKeys::ephemeral().map_err(anyhow::Error::msg)?
    } else {
        options.reasoning_keys.clone()
    };
    let seal = ReasoningSeal::new(&reasoning_keys).map_err(anyhow::Error::msg)?;
    let files =
        InputFiles::new(options.input_files.clone()).map_err(|e| anyhow::anyhow!("input_file settings: {e}"))?;
    let engine = Arc::new(
        Engine::new(upstream, store, Arc::new(tools), metrics.clone())
            .with_limits(options.limits)
            .with_reasoning_seal(seal)
            .with_file_reader(Arc::new(files)),
    );
    let api_keys = ApiKeys::new(options.api_keys.iter().cloned());
    Ok(router(AppConfig {
        engine,
        api_keys,
        max_body_bytes: options.max_body_bytes,
        metrics,
        metrics_route: options.metrics_path.clone().map(|path| (path, metrics_view)),
        forward_other_routes_to: options.forward_other_routes_to.clone(),
        worker_label,
        mcp_helper,
    }))
}

/// The gateway tools this worker runs. The supervisor already checked the sandbox; if it fails
/// here anyway, the tool is left out (requests naming it get a 400) rather than the worker dying.
/// Remote MCP settings were validated by the supervisor too (an unreadable CA file fails here).
async fn gateway_tools(options: &GatewayOptions, mcp_helper: Option<McpHelperClient>) -> anyhow::Result<GatewayTools> {
    let sandbox = if options.code_interpreter {
        let config = SandboxConfig::from_settings(&options.code_interpreter_settings)
            .map_err(|e| anyhow::anyhow!("code interpreter settings: {e}"))?;
        match Sandbox::new(config).await {
            Ok(sandbox) => Some(sandbox),
            Err(e) => {
                tracing::error!(error = %e, "code_interpreter is disabled in this worker");
                None
            }
        }
    } else {
        None
    };
    let remote_mcp =
        RemoteMcp::new(options.remote_mcp.clone()).map_err(|e| anyhow::anyhow!("Remote MCP settings: {e}"))?;
    let tools = GatewayTools::new(sandbox, mcp_helper.clone(), remote_mcp);
    let Some(settings) = &options.web_search else { return Ok(tools) };
    let brave_key = std::env::var(BRAVE_API_KEY_ENV).ok();
    let web_search =
        WebSearch::new(settings, brave_key, mcp_helper).map_err(|e| anyhow::anyhow!("web_search settings: {e}"))?;
    Ok(tools.with_web_search(web_search))
}

/// The client of the Built-in MCP helper, with call timeouts matching the helper's own.
fn mcp_helper_client(options: &GatewayOptions) -> anyhow::Result<Option<McpHelperClient>> {
    let Some(url) = &options.mcp_helper_url else { return Ok(None) };
    let timeouts = McpTimeouts::from_env().map_err(anyhow::Error::msg)?;
    let client = McpHelperClient::new(url).with_context(|| format!("bad MCP helper URL '{url}'"))?;
    Ok(Some(client.with_timeouts(HelperTimeouts::for_tool_timeout(timeouts.tool_call))))
}

/// How long just-accepted connections get to send their first request before draining starts.
const ACCEPT_GRACE: std::time::Duration = std::time::Duration::from_millis(300);

/// A listener that stops accepting once told to, while the server keeps running its
/// connections (axum's graceful shutdown alone stops accepting and closes idle connections at the
/// same instant).
struct StopAccepting<L> {
    inner: L,
    stop: tokio::sync::watch::Receiver<bool>,
}

impl<L: axum::serve::Listener> axum::serve::Listener for StopAccepting<L> {
    type Io = L::Io;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            if *self.stop.borrow() {
                std::future::pending::<()>().await;
            }
            tokio::select! {
                connection = self.inner.accept() => return connection,
                changed = self.stop.changed() => {
                    if changed.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// Serve `app` on `listener` until `shutdown` resolves; then stop accepting and let in-flight
/// requests, streams and WebSocket responses finish for at most `options.drain_timeout`.
pub async fn serve_on(
    listener: std::net::TcpListener,
    app: Router,
    options: &GatewayOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener).context("cannot adopt the listening socket")?;
    // Without TCP_NODELAY the last small write of a stream waits for the client's delayed ACK
    // (~40 ms on Linux): every SSE event must leave as soon as it is written.
    let listener = listener.tap_io(|stream| {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
    });
    // Upgraded connections leave the HTTP server's books: they are drained through this.
    let (draining, draining_rx) = tokio::sync::watch::channel(false);
    let (open_websockets, mut websockets_closed) = tokio::sync::mpsc::channel::<()>(1);
    let app = app.layer(Extension(WebSocketDrain { draining: draining_rx, open: open_websockets }));
    let (stop_accepting, stop_rx) = tokio::sync::watch::channel(false);
    let listener = StopAccepting { inner: listener, stop: stop_rx };
    let (drain_started_tx, drain_started_rx) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown.await;
        // First stop taking connections (a successor on the same socket takes the backlog),
        // then give connections accepted a moment ago time to send their request: graceful
        // shutdown closes connections that are idle, and those would otherwise be cut.
        let _ = stop_accepting.send(true);
        tokio::time::sleep(ACCEPT_GRACE).await;
        let _ = drain_started_tx.send(());
    });
    let drain_timeout = options.drain_timeout;
    let serving = tokio::spawn(async move { server.await });
    tokio::pin!(serving);
    tokio::select! {
        // Draining first: once it started, the server may finish at once (upgraded WebSocket
        // connections are not its to wait for), and those still have to be drained below.
        biased;
        _ = drain_started_rx => {}
        result = &mut serving => return result.context("server task failed")?.context("server error"),
    }
    tracing::info!(
        timeout_s = drain_timeout.as_secs_f64(),
        "draining: no new connections; waiting for in-flight requests"
    );
    let _ = draining.send(true);
    let drained = async {
        let served = (&mut serving).await;
        // Every sender is gone once the router and the last WebSocket connection are.
        let _ = websockets_closed.recv().await;
        served
    };
    match tokio::time::timeout(drain_timeout, drained).await {
        Ok(result) => result.context("server task failed")?.context("server error"),
        Err(_) => {
            tracing::warn!("drain timeout reached; closing the remaining connections");
            serving.abort();
            Ok(())
        }
    }
}
