//! [`TokenMeter`]: where the engine reports the tokens each upstream call used, so that the
//! HTTP layer can hold tenants to their token budgets. The engine knows nothing of how budgets
//! are counted or enforced (admission happens before a request reaches it).

use async_trait::async_trait;

/// Receives the tokens (input + output, as the call's `usage` reports them) of every upstream
/// call the engine makes for a tenant: each turn of a tool loop, compactions included.
#[async_trait]
pub trait TokenMeter: Send + Sync {
    async fn charge(&self, owner: &str, tokens: u64);
}
