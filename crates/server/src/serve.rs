//! Turning [`GatewayOptions`] into a running server: open the store, build the engine and the
//! router, serve on a listener until told to stop, then drain within a bound.

use std::future::Future;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use respgw_engine::{Engine, Upstream};
use respgw_telemetry::Metrics;

use crate::app::{AppConfig, router};
use crate::auth::ApiKeys;
use crate::metrics::MetricsView;
use crate::options::GatewayOptions;

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
    let store = respgw_store::open(&options.db_path)
        .await
        .with_context(|| format!("cannot open the response store at '{}'", options.db_path))?;
    let upstream = Upstream::new(options.upstream.clone()).context("cannot set up the upstream client")?;
    let engine = Arc::new(Engine::new(upstream, store, metrics.clone()));
    let api_keys = ApiKeys::new(options.api_keys.iter().cloned());
    Ok(router(AppConfig {
        engine,
        api_keys,
        max_body_bytes: options.max_body_bytes,
        metrics,
        metrics_route: options.metrics_path.clone().map(|path| (path, metrics_view)),
        forward_other_routes_to: options.forward_other_routes_to.clone(),
        worker_label,
    }))
}

/// Serve `app` on `listener` until `shutdown` resolves; then stop accepting and let in-flight
/// requests and streams finish for at most `options.drain_timeout`.
pub async fn serve_on(
    listener: std::net::TcpListener,
    app: Router,
    options: &GatewayOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener).context("cannot adopt the listening socket")?;
    let (drain_started_tx, drain_started_rx) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown.await;
        let _ = drain_started_tx.send(());
    });
    let drain_timeout = options.drain_timeout;
    let serving = tokio::spawn(async move { server.await });
    tokio::pin!(serving);
    tokio::select! {
        result = &mut serving => return result.context("server task failed")?.context("server error"),
        _ = drain_started_rx => {}
    }
    tracing::info!(
        timeout_s = drain_timeout.as_secs_f64(),
        "draining: no new connections; waiting for in-flight requests"
    );
    match tokio::time::timeout(drain_timeout, &mut serving).await {
        Ok(result) => result.context("server task failed")?.context("server error"),
        Err(_) => {
            tracing::warn!("drain timeout reached; closing the remaining connections");
            serving.abort();
            Ok(())
        }
    }
}
