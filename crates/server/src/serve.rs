//! Running the gateway: open the store, build the engine and router, bind, serve until a
//! shutdown signal, then drain.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use respgw_engine::{Engine, Upstream, UpstreamConfig};

use crate::app::{AppConfig, router};
use crate::auth::ApiKeys;

/// Everything `respgw serve` needs, already parsed.
pub struct ServeOptions {
    pub host: String,
    pub port: u16,
    pub upstream: UpstreamConfig,
    /// `GW_DB_PATH`: a SQLite file path or `sqlite://` URL.
    pub db_path: String,
    pub api_keys: Vec<String>,
    pub max_body_bytes: usize,
}

/// Serve until SIGINT/SIGTERM. Prints `listening on http://ADDR` on stdout once accepting.
pub async fn serve(options: ServeOptions) -> anyhow::Result<()> {
    let store = respgw_store::open(&options.db_path)
        .await
        .with_context(|| format!("cannot open the response store at '{}'", options.db_path))?;
    let upstream = Upstream::new(options.upstream.clone()).context("cannot set up the upstream client")?;
    let engine = Arc::new(Engine::new(upstream, store));
    let api_keys = ApiKeys::new(options.api_keys);
    if api_keys.enabled() {
        tracing::info!("API key authentication is on");
    } else {
        tracing::warn!("API key authentication is OFF: no --api-key / GW_API_KEYS configured");
    }
    let app = router(AppConfig { engine, api_keys, max_body_bytes: options.max_body_bytes });

    let listener = tokio::net::TcpListener::bind((options.host.as_str(), options.port))
        .await
        .with_context(|| format!("cannot listen on {}:{}", options.host, options.port))?;
    let addr: SocketAddr = listener.local_addr()?;
    tracing::info!(upstream = %options.upstream.base_url, db = %options.db_path, "respgw listening on http://{addr}");
    println!("listening on http://{addr}");
    axum::serve(listener, app).with_graceful_shutdown(shutdown_signal()).await.context("server error")?;
    tracing::info!("respgw stopped");
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutdown signal received; draining in-flight requests");
}
