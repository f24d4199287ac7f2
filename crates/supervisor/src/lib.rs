//! Process management for respgw.
//!
//! - [`standalone`]: `respgw serve` — the supervisor binds the public port (an `SO_REUSEPORT`
//!   socket per worker slot, or systemd's socket) and runs N worker processes ([`pool`]).
//! - [`integrated`]: `respgw integrated` — the same pool on the model server's public port, with
//!   the model server itself as a supervised child on a private loopback port.
//! - [`worker`]: `respgw worker` — the re-exec'd worker process.
//!
//! Architecture invariant: this crate knows processes, sockets and signals, not Responses; a
//! worker hands its listener, shutdown signal and metrics view to `respgw_server`.

pub mod integrated;
mod notify;
mod pool;
mod readiness;
mod sockets;
pub mod standalone;
pub mod worker;

use anyhow::Context;
use respgw_server::GatewayOptions;

/// Open the store once before starting workers: a wrong path fails here with a clear message,
/// and the schema exists before several workers open the file at once.
async fn check_store(db_path: &str) -> anyhow::Result<()> {
    respgw_store::open(db_path).await.with_context(|| format!("cannot open the response store at '{db_path}'"))?;
    Ok(())
}

fn log_auth(options: &GatewayOptions) {
    if options.api_keys.iter().any(|k| !k.is_empty()) {
        tracing::info!("API key authentication is on");
    } else {
        tracing::warn!("API key authentication is OFF: no --api-key / GW_API_KEYS configured");
    }
}
