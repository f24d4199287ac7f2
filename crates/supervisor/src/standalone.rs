//! `respgw serve`: wait for the upstream, check the store, bind the public sockets, and run the
//! worker pool until a signal.

use std::time::Duration;

use std::sync::{Arc, Mutex};

use respgw_server::GatewayOptions;
use respgw_telemetry::MergedMetrics;

use crate::pool::{self, PoolConfig};
use crate::readiness::wait_for_upstream;
use crate::sockets::PublicSockets;

/// Everything `respgw serve` needs.
pub struct StandaloneOptions {
    pub host: String,
    pub port: u16,
    pub workers: usize,
    pub gateway: GatewayOptions,
    pub upstream_ready_timeout: Duration,
    pub upstream_ready_interval: Duration,
    /// The Built-in MCP helper, if any.
    pub mcp: crate::McpSetup,
}

/// Run standalone mode to the end. Prints `listening on http://ADDR` on stdout once every worker
/// serves.
pub fn run(mut options: StandaloneOptions) -> anyhow::Result<()> {
    crate::open_files::raise_to_hard_limit();
    // One thread: the supervisor only moves frames and waits on children, and workers' death
    // signal (PR_SET_PDEATHSIG) is tied to the thread that forked them.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let upstream = &options.gateway.upstream;
        wait_for_upstream(
            &upstream.base_url,
            upstream.api_key.as_deref(),
            options.upstream_ready_timeout,
            options.upstream_ready_interval,
        )
        .await?;
        crate::check_store(&options.gateway).await?;
        // Held until the workers have stopped; dropping it deletes this run's containers.
        let _containers = crate::check_code_interpreter(&mut options.gateway).await;
        let merged = Arc::new(Mutex::new(MergedMetrics::new()));
        let helper = crate::mcp_helper_process::start(&options.mcp, Arc::clone(&merged)).await?;
        options.gateway.mcp_helper_url = helper.as_ref().map(|h| h.url.clone());
        let sockets = PublicSockets::open(&options.host, options.port, options.workers)?;
        crate::log_auth(&options.gateway);
        let config = PoolConfig::new(&options.gateway, options.workers, sockets, merged)?;
        let workers = options.workers;
        let stopped = pool::run(
            config,
            move |address| {
                tracing::info!(%address, workers, "respgw serving");
                println!("listening on http://{address}");
            },
            std::future::pending(),
        )
        .await;
        if let Some(helper) = helper {
            helper.stop().await;
        }
        stopped?;
        tracing::info!("respgw stopped");
        Ok(())
    })
}
