//! Process management for respgw.
//!
//! - [`standalone`]: `respgw serve` — the supervisor binds the public port (an `SO_REUSEPORT`
//!   socket per worker slot, or systemd's socket) and runs N worker processes ([`pool`]).
//! - [`integrated`]: `respgw integrated` — the same pool on the model server's public port, with
//!   the model server itself as a supervised child on a private loopback port.
//! - [`worker`]: `respgw worker` — the re-exec'd worker process.
//!
//! # Files
//!
//! - `sockets.rs`: the public sockets (one `SO_REUSEPORT` socket per slot, kept open by the
//!   supervisor so a restarted worker inherits it; or the socket systemd passes in `LISTEN_FDS`),
//!   and handing a socket to a re-exec'd worker (`RESPGW_LISTEN_FD`, close-on-exec cleared in that
//!   child only).
//! - `pool.rs`: the worker pool — spawn, IPC, restart with back-off, SIGHUP rolling restart (the API
//!   keys file read again first), SIGTERM/SIGINT drain with a kill deadline, merged metrics,
//!   `READY=1`.
//! - `worker.rs`: the worker process — a current-thread tokio runtime (blocking work on tokio's
//!   blocking pool), so the way to use more cores is more workers; adopts its sockets, builds the
//!   gateway, reports readiness and metrics, answers `/metrics` with the supervisor's merged view,
//!   drains on `Shutdown`, signals or the supervisor's death.
//! - `memory.rs`: a worker's freed memory given back to the system after a burst (`malloc_trim`
//!   once the free memory the allocator holds has grown by 16 MiB).
//! - `mcp_helper_process.rs`: the MCP helper process — validate the config, start the helper on
//!   loopback, wait for it, restart it with back-off, hand its URL to workers, and merge its
//!   per-server start-up counts into the metrics like one more process.
//! - `readiness.rs` waits for the upstream; `notify.rs` speaks sd_notify; `open_files.rs` raises
//!   `RLIMIT_NOFILE` and derives the client-connection cap under it.
//! - `lib.rs` (below) checks the store and the code-interpreter sandbox once before workers start, and
//!   claims the code interpreter's per-instance container directory (`WorkRootClaim`) for as long as
//!   the workers run.
//!
//! Architecture invariant: this crate knows processes, sockets and signals, not Responses; a
//! worker hands its listener, shutdown signal and metrics view to `respgw_server`.

pub mod integrated;
mod mcp_helper_process;
mod memory;
mod notify;
mod open_files;
mod pool;
mod readiness;
mod sockets;
pub mod standalone;
pub mod worker;

use anyhow::Context;
use respgw_server::GatewayOptions;
use respgw_tools::code_interpreter::{Sandbox, SandboxConfig, WorkRootClaim};

pub use mcp_helper_process::{ExaServer, McpSetup};

/// A loopback port nobody listens on right now.
fn free_loopback_port() -> anyhow::Result<u16> {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").context("cannot find a free loopback port")?;
    Ok(probe.local_addr()?.port())
}

/// Open the store once before starting workers: a wrong path or an unreachable database fails
/// here with a clear message (never showing a password), and the schema exists (migrated) before
/// several workers open it at once. One connection is enough for that.
async fn check_store(options: &GatewayOptions) -> anyhow::Result<()> {
    let db_path = &options.db_path;
    respgw_store::open_with(db_path, respgw_store::StoreOptions { pool_size: 1, ..options.store_options() })
        .await
        .with_context(|| format!("cannot open the response store at '{}'", respgw_store::redacted_location(db_path)))?;
    Ok(())
}

/// Check the code interpreter sandbox once, before workers start, and claim its directory for
/// this instance (deleting the containers a previous run left). Without a working sandbox the
/// tool is left out — never run unsandboxed — and the log says how to fix it. The claim is held
/// until the instance stops; dropping it deletes this run's containers.
async fn check_code_interpreter(options: &mut GatewayOptions) -> Option<WorkRootClaim> {
    if !options.code_interpreter {
        tracing::info!("code_interpreter is disabled (--code-interpreter disabled)");
        return None;
    }
    let settings = &options.code_interpreter_settings;
    let config = SandboxConfig::from_settings(settings);
    let checked = match WorkRootClaim::take(&config.work_root) {
        Ok(claim) => Sandbox::new(config).await.map(|_| claim).map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    match checked {
        Ok(claim) => {
            tracing::info!(dir = %settings.dir.display(), "code_interpreter is enabled (bubblewrap sandbox)");
            Some(claim)
        }
        Err(e) => {
            tracing::error!(
                "code_interpreter is NOT offered: {e}. Run scripts/setup-code-interpreter to install \
                 bubblewrap and the Python environment, or pass --code-interpreter disabled to silence this."
            );
            options.code_interpreter = false;
            None
        }
    }
}

fn log_auth(options: &GatewayOptions) {
    let tenants: Vec<&str> = options.tenants.tenants.iter().map(|t| t.name.as_str()).collect();
    if options.api_keys.iter().any(|k| !k.is_empty()) || !tenants.is_empty() {
        tracing::info!(?tenants, "API key authentication is on");
    } else {
        tracing::warn!(
            "API key authentication is OFF: no --api-key / GW_API_KEYS or --api-keys-file configured; every request \
             belongs to the tenant 'default'"
        );
    }
}
