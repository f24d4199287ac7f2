//! Continuation cost by history depth: the latency of a non-stream `store: true` request that
//! continues (`previous_response_id`) a conversation `depth` responses deep, for depths 1, 10 and
//! 50, on each store backend. The store reads a conversation in one query, saves a continuation
//! as one row plus its new items, and decodes each stored item once per process, so the cost
//! should barely grow with depth (the target: depth 50 within 1.3x of depth 1).
//!
//! One chain of responses is built first; each measured request then branches off the chain at
//! its depth (the chain itself never grows), with the depths interleaved round by round so that
//! they all see the same machine conditions. The PostgreSQL run uses a fresh schema, dropped after.

use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};
use sqlx::{Connection, Executor, PgConnection};

use crate::measure;
use crate::mock;

/// Continuations measured per depth before the measured rounds.
const WARMUP_ROUNDS: usize = 20;

/// Latencies of continuations from one depth.
pub struct DepthResult {
    pub depth: usize,
    pub latencies: Vec<Duration>,
}

/// One non-stream request; returns the response id and the latency.
async fn create(client: &reqwest::Client, url: &str, previous: Option<&str>) -> anyhow::Result<(String, Duration)> {
    let body = json!({
        "model": mock::model_for(1),
        "input": "Tell me more.",
        "store": true,
        "previous_response_id": previous,
    });
    let (bytes, elapsed) = measure::timed_post(client, url, &body).await?;
    let value: Value = serde_json::from_slice(&bytes).context("respgw's body is not JSON")?;
    let id = value["id"].as_str().context("a response without id")?.to_owned();
    Ok((id, elapsed))
}

/// Build a chain as deep as the deepest of `depths`, then measure `rounds` continuations per
/// depth through the gateway at `gateway_url` (its base URL).
pub async fn measure(gateway_url: &str, depths: &[usize], rounds: usize) -> anyhow::Result<Vec<DepthResult>> {
    let client = measure::client(4)?;
    let url = format!("{gateway_url}/v1/responses");
    let deepest = depths.iter().copied().max().unwrap_or(0);
    let mut chain: Vec<String> = Vec::with_capacity(deepest);
    for _ in 0..deepest {
        let (id, _) = create(&client, &url, chain.last().map(String::as_str)).await?;
        chain.push(id);
    }
    let mut results: Vec<DepthResult> =
        depths.iter().map(|&depth| DepthResult { depth, latencies: Vec::with_capacity(rounds) }).collect();
    for round in 0..WARMUP_ROUNDS + rounds {
        for result in &mut results {
            let (_, latency) = create(&client, &url, Some(&chain[result.depth - 1])).await?;
            if round >= WARMUP_ROUNDS {
                result.latencies.push(latency);
            }
        }
    }
    Ok(results)
}

/// A fresh schema on the PostgreSQL server at `server_url`, dropped by [`BenchSchema::drop_now`].
pub struct BenchSchema {
    server_url: String,
    name: String,
}

impl BenchSchema {
    pub async fn create(server_url: &str) -> anyhow::Result<Self> {
        let name = format!("respgw_bench_{}", std::process::id());
        let mut conn = PgConnection::connect(server_url).await.context("cannot connect to PostgreSQL")?;
        conn.execute(format!("DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}").as_str()).await?;
        conn.close().await?;
        Ok(Self { server_url: server_url.to_owned(), name })
    }

    /// The URL whose connections use this schema.
    pub fn url(&self) -> anyhow::Result<String> {
        let mut url = url::Url::parse(&self.server_url).context("the PostgreSQL URL does not parse")?;
        url.query_pairs_mut().append_pair("options", &format!("-c search_path={}", self.name));
        Ok(url.to_string())
    }

    pub async fn drop_now(self) -> anyhow::Result<()> {
        let mut conn = PgConnection::connect(&self.server_url).await?;
        conn.execute(format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name).as_str()).await?;
        conn.close().await?;
        Ok(())
    }
}
