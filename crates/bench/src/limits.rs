//! What one Redis-backed limit costs per request: the same authenticated requests through two
//! gateways with a request-rate limit on their tenant, one counting in its own shared memory,
//! the other in Redis (`--redis-url`: one `EVALSHA` round trip per admitted request), interleaved
//! round by round so both see the same machine. The difference in p50 latency and in respgw's
//! CPU per request (the Redis server's own CPU not included) is what the Redis limit adds.

use std::time::Duration;

use anyhow::ensure;
use serde_json::json;

use crate::gateway::Gateway;
use crate::measure;
use crate::mock;

/// Rounds before the measured ones.
const WARMUP_ROUNDS: usize = 100;
/// The key of the benchmark's tenant.
const KEY: &str = "sk-respgw-bench-limits";
/// A request rate the benchmark never reaches: every request is admitted.
const REQUESTS_PER_MINUTE: &str = "4000000000";

/// Latencies and CPU per request of each side.
pub struct LimitCost {
    pub local: Vec<Duration>,
    pub redis: Vec<Duration>,
    pub local_cpu_us: f64,
    pub redis_cpu_us: f64,
}

/// `serve` arguments of a limited gateway (one worker), counting in Redis at `redis_url` if given.
fn args(extra: &[String], redis_url: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = extra.to_vec();
    args.extend(
        ["--gateway-workers", "1", "--api-key", KEY, "--tenant-requests-per-minute", REQUESTS_PER_MINUTE]
            .map(String::from),
    );
    if let Some(url) = redis_url {
        args.extend(["--redis-url".to_owned(), url.to_owned(), "--redis-failure-mode".to_owned(), "closed".to_owned()]);
    }
    args
}

/// One non-stream `store: false` request of the limited tenant; its latency.
async fn request(client: &reqwest::Client, url: &str) -> anyhow::Result<Duration> {
    let body = json!({"model": mock::model_for(1), "input": "Hi.", "store": false});
    let started = std::time::Instant::now();
    let response = client.post(url).bearer_auth(KEY).json(&body).send().await?;
    let status = response.status();
    let limited = response.headers().contains_key("x-ratelimit-limit-requests");
    let bytes = response.bytes().await?;
    let elapsed = started.elapsed();
    ensure!(status.is_success(), "respgw answered {status}: {}", String::from_utf8_lossy(&bytes));
    ensure!(limited, "the reply has no x-ratelimit-* headers: the limit is not applied");
    Ok(elapsed)
}

/// `rounds` requests through each of two gateways in front of `upstream`, the second counting in
/// the Redis at `redis_url`.
pub async fn measure(
    binary: &std::path::Path,
    upstream: &str,
    extra: &[String],
    redis_url: &str,
    rounds: usize,
) -> anyhow::Result<LimitCost> {
    let mut local_gw = Gateway::start(binary, upstream, &args(extra, None)).await?;
    let mut redis_gw = Gateway::start(binary, upstream, &args(extra, Some(redis_url))).await?;
    let client = measure::client(4)?;
    let local_url = format!("{}/v1/responses", local_gw.base_url());
    let redis_url = format!("{}/v1/responses", redis_gw.base_url());
    for _ in 0..WARMUP_ROUNDS {
        request(&client, &local_url).await?;
        request(&client, &redis_url).await?;
    }
    let mut cost = LimitCost {
        local: Vec::with_capacity(rounds),
        redis: Vec::with_capacity(rounds),
        local_cpu_us: 0.0,
        redis_cpu_us: 0.0,
    };
    let (local_cpu, redis_cpu) = (local_gw.cpu_ns().await?, redis_gw.cpu_ns().await?);
    for _ in 0..rounds {
        cost.local.push(request(&client, &local_url).await?);
        cost.redis.push(request(&client, &redis_url).await?);
    }
    let per_request = |before: u64, after: u64| (after.saturating_sub(before)) as f64 / 1e3 / rounds.max(1) as f64;
    cost.local_cpu_us = per_request(local_cpu, local_gw.cpu_ns().await?);
    cost.redis_cpu_us = per_request(redis_cpu, redis_gw.cpu_ns().await?);
    local_gw.stop().await?;
    redis_gw.stop().await?;
    Ok(cost)
}
