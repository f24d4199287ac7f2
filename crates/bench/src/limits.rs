//! What one Redis-backed limit costs per request: the same authenticated requests through three
//! one-worker gateways — one without limits, one with a request-rate limit on the tenant counted
//! in its own shared memory, one with the same limit counted in Redis (`--redis-url`: one
//! `EVALSHA` round trip per admitted request) — interleaved round by round (each round in a
//! different order) so all three see the same machine. The differences in p50 latency and in
//! respgw's CPU per request (the Redis server's own CPU not included) are what each limit adds.

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

/// Requests sent at once to a side in the loaded rounds.
pub const LOAD_CONCURRENCY: usize = 8;

/// Latencies and CPU per request of one side.
pub struct Side {
    /// One request at a time.
    pub latencies: Vec<Duration>,
    /// CPU per request, one request at a time.
    pub cpu_us: f64,
    /// CPU per request with [`LOAD_CONCURRENCY`] requests at a time.
    pub loaded_cpu_us: f64,
}

/// The three sides: no limit, the limit in shared memory, the limit in Redis.
pub struct LimitCost {
    pub unlimited: Side,
    pub local: Side,
    pub redis: Side,
}

/// How a gateway counts the tenant's limit.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Counting {
    None,
    SharedMemory,
    Redis,
}

/// `serve` arguments of a gateway (one worker, the benchmark's key) counting as `counting` (in
/// the Redis at `redis_url`).
fn args(extra: &[String], counting: Counting, redis_url: &str) -> Vec<String> {
    let mut args: Vec<String> = extra.to_vec();
    args.extend(["--gateway-workers", "1", "--api-key", KEY].map(String::from));
    if counting != Counting::None {
        args.extend(["--tenant-requests-per-minute", REQUESTS_PER_MINUTE].map(String::from));
    }
    if counting == Counting::Redis {
        args.extend(["--redis-url", redis_url, "--redis-failure-mode", "closed"].map(String::from));
    }
    args
}

/// One non-stream `store: false` request of the tenant; its latency. `limited`: the reply must
/// show the limit.
async fn request(client: &reqwest::Client, url: &str, limited: bool) -> anyhow::Result<Duration> {
    let body = json!({"model": mock::model_for(1), "input": "Hi.", "store": false});
    let started = std::time::Instant::now();
    let response = client.post(url).bearer_auth(KEY).json(&body).send().await?;
    let status = response.status();
    let shows_limit = response.headers().contains_key("x-ratelimit-limit-requests");
    let bytes = response.bytes().await?;
    let elapsed = started.elapsed();
    ensure!(status.is_success(), "respgw answered {status}: {}", String::from_utf8_lossy(&bytes));
    ensure!(shows_limit == limited, "the reply's x-ratelimit-* headers do not match the gateway's limits");
    Ok(elapsed)
}

/// `rounds` requests through each of three gateways in front of `upstream`: without limits,
/// counting in shared memory, counting in the Redis at `redis_url`.
pub async fn measure(
    binary: &std::path::Path,
    upstream: &str,
    extra: &[String],
    redis_url: &str,
    rounds: usize,
) -> anyhow::Result<LimitCost> {
    let sides = [Counting::None, Counting::SharedMemory, Counting::Redis];
    let mut gateways = Vec::with_capacity(sides.len());
    for counting in sides {
        gateways.push(Gateway::start(binary, upstream, &args(extra, counting, redis_url)).await?);
    }
    let urls: Vec<String> = gateways.iter().map(|gw| format!("{}/v1/responses", gw.base_url())).collect();
    let client = measure::client(4)?;
    for _ in 0..WARMUP_ROUNDS {
        for (url, counting) in urls.iter().zip(sides) {
            request(&client, url, counting != Counting::None).await?;
        }
    }
    let mut cpu_before = Vec::with_capacity(sides.len());
    for gateway in &mut gateways {
        cpu_before.push(gateway.cpu_ns().await?);
    }
    let mut latencies: Vec<Vec<Duration>> = sides.iter().map(|_| Vec::with_capacity(rounds)).collect();
    for round in 0..rounds {
        // Each side goes first in a third of the rounds.
        for turn in 0..sides.len() {
            let side = (round + turn) % sides.len();
            latencies[side].push(request(&client, &urls[side], sides[side] != Counting::None).await?);
        }
    }
    let mut cpu_after = Vec::with_capacity(sides.len());
    for gateway in &mut gateways {
        cpu_after.push(gateway.cpu_ns().await?);
    }
    // Loaded: each side in turn gets LOAD_CONCURRENCY requests at once, as many in all as above.
    let loaded_rounds = rounds.div_ceil(LOAD_CONCURRENCY);
    for round in 0..loaded_rounds {
        for turn in 0..sides.len() {
            let side = (round + turn) % sides.len();
            let limited = sides[side] != Counting::None;
            let batch = (0..LOAD_CONCURRENCY).map(|_| request(&client, &urls[side], limited));
            for outcome in futures::future::join_all(batch).await {
                outcome?;
            }
        }
    }
    let mut measured = Vec::with_capacity(sides.len());
    for (((gateway, before), after), latencies) in gateways.iter_mut().zip(cpu_before).zip(cpu_after).zip(latencies) {
        let loaded = gateway.cpu_ns().await?;
        let cpu_us = after.saturating_sub(before) as f64 / 1e3 / rounds.max(1) as f64;
        let loaded_requests = (loaded_rounds * LOAD_CONCURRENCY).max(1) as f64;
        let loaded_cpu_us = loaded.saturating_sub(after) as f64 / 1e3 / loaded_requests;
        measured.push(Side { latencies, cpu_us, loaded_cpu_us });
    }
    for gateway in gateways {
        gateway.stop().await?;
    }
    let mut measured = measured.into_iter();
    match (measured.next(), measured.next(), measured.next()) {
        (Some(unlimited), Some(local), Some(redis)) => Ok(LimitCost { unlimited, local, redis }),
        _ => anyhow::bail!("a side of the limit benchmark was not measured"),
    }
}
