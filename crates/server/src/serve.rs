//! Turning [`GatewayOptions`] into a running server: open the store, build the engine and the
//! router, serve on a listener until told to stop, then drain within a bound.

use std::future::Future;
use std::sync::Arc;

use anyhow::Context;
use axum::{Extension, Router};
use respgw_engine::{BackgroundRuns, Engine, Upstream};
use respgw_retrieval::Retrieval;
use respgw_telemetry::Metrics;
use respgw_tools::GatewayTools;
use respgw_tools::code_interpreter::{Sandbox, SandboxConfig};
use respgw_tools::file_search::FileSearch;
use respgw_tools::input_files::InputFiles;
use respgw_tools::mcp::{HelperTimeouts, McpHelperClient, RemoteMcp};
use respgw_tools::web_search::WebSearch;

use crate::app::{AppConfig, router};
use crate::auth::ApiKeys;
use crate::background::BackgroundDrain;
use crate::connections::Connections;
use crate::console::ConsoleState;
use crate::console::overview::{OverviewView, local_overview};
use crate::files::RetrievalState;
use crate::limits::shared::SharedCounters;
use crate::limits::{Limiter, RedisLimits};
use crate::metrics::MetricsView;
use crate::options::GatewayOptions;
use crate::websocket::WebSocketDrain;
use respgw_engine::sealed::{ReasoningKeys, ReasoningSeal};

/// Build the router for one gateway process, counting its tenants' limits on its own, and
/// start its file ingestion.
///
/// `metrics_view` is what `/metrics` serves (the supervisor's merged view in a worker); the
/// console's overview samples this process's own `metrics` ([`local_overview`]);
/// `worker_label` is sent as `x-respgw-worker`; ingestion stops claiming files when
/// `ingestion_stop` resolves (the worker's shutdown signal).
pub async fn build(
    options: &GatewayOptions,
    metrics: Metrics,
    metrics_view: MetricsView,
    worker_label: Option<String>,
    ingestion_stop: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Router> {
    let counters = SharedCounters::private().context("cannot map the limit counters")?;
    let overview = local_overview(metrics.clone(), options.console_sample_seconds);
    build_sharing(options, metrics, metrics_view, overview, worker_label, Arc::new(counters), ingestion_stop).await
}

/// [`build`], counting tenants' limits in `counters` (the region the workers of one gateway
/// share), and in Redis when `options.redis` says so; the console's overview answers from
/// `overview` (the supervisor's samples in a worker).
pub async fn build_sharing(
    options: &GatewayOptions,
    metrics: Metrics,
    metrics_view: MetricsView,
    overview: OverviewView,
    worker_label: Option<String>,
    counters: Arc<SharedCounters>,
    ingestion_stop: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Router> {
    let redis = options.redis.as_ref().map(RedisLimits::connect).transpose().map_err(anyhow::Error::msg)?;
    if let Some(redis) = &redis {
        let up = redis.up_flag();
        metrics.limits_redis_up_from(move || u64::from(up.load(std::sync::atomic::Ordering::Acquire)));
    }
    let limiter = Arc::new(Limiter::new(counters, redis).context("cannot map the limit counters")?);
    let api_keys = ApiKeys::new(&options.api_keys, &options.tenants, options.tenant_limits, limiter);
    let store_options = options.store_options();
    let stores = respgw_store::open_stores(&options.db_path, store_options).await.with_context(|| {
        format!("cannot open the response store at '{}'", respgw_store::redacted_location(&options.db_path))
    })?;
    if let Some(lock_waits) = stores.lock_waits {
        metrics.count_store_lock_waits_from(move || lock_waits.count());
    }
    let console_store = Arc::clone(&stores.console);
    let background_store = Arc::clone(&stores.background);
    let background = BackgroundRuns::start(stores.background, options.background, metrics.clone())
        .await
        .context("cannot start the background responses")?;
    let retrieval = Retrieval::with_metrics(stores.retrieval, options.retrieval.settings(), metrics.clone());
    retrieval.spawn_ingestion(ingestion_stop);
    let upstream = Upstream::new(options.upstream.clone()).context("cannot set up the upstream client")?;
    let mcp_helper = mcp_helper_client(options)?;
    let tools = gateway_tools(options, mcp_helper.clone(), &retrieval).await?;
    let reasoning_keys = if options.reasoning_keys.keys.is_empty() {
        ReasoningKeys::ephemeral().map_err(anyhow::Error::msg)?
    } else {
        options.reasoning_keys.clone()
    };
    // Blobs sealed before they were bound to a tenant still open where every request is
    // `default` (no keys-file tenants), so single-tenant deployments keep their sessions.
    let seal = ReasoningSeal::new(&reasoning_keys)
        .map_err(anyhow::Error::msg)?
        .opening_unbound_blobs(options.tenants.tenants.is_empty());
    let files = InputFiles::new(options.input_files.clone())
        .map_err(|e| anyhow::anyhow!("input_file settings: {e}"))?
        .with_uploads(Arc::clone(retrieval.store()));
    let engine = Arc::new(
        Engine::new(upstream, stores.responses, Arc::new(tools), metrics.clone())
            .with_limits(options.limits)
            .with_background(background)
            .with_reasoning_seal(seal)
            .with_file_reader(Arc::new(files))
            .with_token_meter(api_keys.token_meter()),
    );
    let console = ConsoleState::new(Arc::clone(&engine), console_store, background_store, retrieval.clone(), &api_keys);
    Ok(router(AppConfig {
        engine,
        api_keys,
        max_body_bytes: options.max_body_bytes,
        websocket: options.websocket,
        messages_ping_interval: options.messages_ping_interval,
        metrics,
        metrics_route: options.metrics_path.clone().map(|path| (path, metrics_view)),
        overview,
        forward_other_routes_to: options.forward_other_routes_to.clone(),
        worker_label,
        mcp_helper,
        retrieval: RetrievalState { retrieval, max_file_bytes: options.retrieval.max_file_bytes },
        console,
    }))
}

/// The gateway tools this worker runs. The supervisor already checked the sandbox; if it fails
/// here anyway, the tool is left out (requests naming it get a 400) rather than the worker dying.
/// Remote MCP settings were validated by the supervisor too (an unreadable CA file fails here).
/// `file_search` searches the worker's `retrieval`.
async fn gateway_tools(
    options: &GatewayOptions,
    mcp_helper: Option<McpHelperClient>,
    retrieval: &Retrieval,
) -> anyhow::Result<GatewayTools> {
    let sandbox = if options.code_interpreter {
        match Sandbox::new(SandboxConfig::from_settings(&options.code_interpreter_settings)).await {
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
    let tools =
        GatewayTools::new(sandbox, mcp_helper.clone(), remote_mcp).with_file_search(FileSearch::new(retrieval.clone()));
    let Some(settings) = &options.web_search else { return Ok(tools) };
    let web_search = WebSearch::new(settings, mcp_helper).map_err(|e| anyhow::anyhow!("web_search settings: {e}"))?;
    Ok(tools.with_web_search(web_search))
}

/// The client of the Built-in MCP helper, with call timeouts matching the helper's own.
fn mcp_helper_client(options: &GatewayOptions) -> anyhow::Result<Option<McpHelperClient>> {
    let Some(url) = &options.mcp_helper_url else { return Ok(None) };
    let client = McpHelperClient::new(url).with_context(|| format!("bad MCP helper URL '{url}'"))?;
    Ok(Some(client.with_timeouts(HelperTimeouts::for_tool_timeout(options.mcp_timeouts.tool_call))))
}

/// How long background streams get to send their last event once the drain has timed out.
const CUT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// How long just-accepted connections get to send their first request before draining starts.
const ACCEPT_GRACE: std::time::Duration = std::time::Duration::from_millis(300);

/// Serve `app` on `listener` until `shutdown` resolves; then stop accepting and let in-flight
/// requests, streams, WebSocket responses and the background responses this process runs finish
/// for at most `options.drain_timeout` (background ones still running then are failed by their
/// lease; background streams still open are ended with an event that says how to resume them).
/// Connections are held to `options.client_limits` (see [`crate::connections`]).
pub async fn serve_on(
    listener: std::net::TcpListener,
    app: Router,
    options: &GatewayOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener).context("cannot adopt the listening socket")?;
    // Upgraded connections leave the HTTP server's books: they are drained through this.
    let (draining, draining_rx) = tokio::sync::watch::channel(false);
    let (open_websockets, mut websockets_closed) = tokio::sync::mpsc::channel::<()>(1);
    // Background runs outlive their request: each holds a clone of this until it ends.
    let (open_background, mut background_done) = tokio::sync::mpsc::channel::<()>(1);
    // Background streams still open when the drain times out end with an event saying how to
    // resume them.
    let (cut_background_streams, cut) = tokio::sync::watch::channel(false);
    let app = app
        .layer(Extension(WebSocketDrain { draining: draining_rx, open: open_websockets }))
        .layer(Extension(BackgroundDrain { open: open_background, cut }));
    let connections = Connections::new(options.client_limits);
    tokio::select! {
        () = connections.accept(&listener, &app) => {}
        () = shutdown => {}
    }
    // Accepting has stopped (the listening socket stays open, so a successor on the same socket
    // takes the backlog). Connections accepted a moment ago get time to send their request:
    // a graceful close ends connections that are idle, and those would otherwise be cut.
    drop(app);
    tokio::time::sleep(ACCEPT_GRACE).await;
    let drain_timeout = options.drain_timeout;
    tracing::info!(
        timeout_s = drain_timeout.as_secs_f64(),
        "draining: no new connections; waiting for in-flight requests"
    );
    let _ = draining.send(true);
    connections.close_gracefully();
    let drained = async {
        connections.closed().await;
        // Every sender is gone once the last connection's router and the last WebSocket connection are.
        let _ = websockets_closed.recv().await;
        let _ = background_done.recv().await;
    };
    if tokio::time::timeout(drain_timeout, drained).await.is_err() {
        tracing::warn!("drain timeout reached; closing the remaining connections");
        let _ = cut_background_streams.send(true);
        // Time for the background streams to send their last event and close.
        let _ = tokio::time::timeout(CUT_GRACE, connections.closed()).await;
    }
    drop(listener);
    Ok(())
}
