//! What a background stream costs over a plain one: the time from sending a streamed
//! `store: true` request to the end of its stream (`data: [DONE]`), with and without
//! `background: true`, through the same gateway, interleaved round by round so both see the same
//! machine. The difference is the event log: a background run's events are written to the store
//! in batches and the client reads them back from there.

use std::time::Duration;

use anyhow::ensure;
use serde_json::json;

use crate::measure;
use crate::mock;

/// Rounds before the measured ones.
const WARMUP_ROUNDS: usize = 20;

/// Stream times of each kind.
pub struct StreamTimes {
    pub plain: Vec<Duration>,
    pub background: Vec<Duration>,
}

/// One stream of `deltas` content deltas, read to its end; its duration.
async fn stream(client: &reqwest::Client, url: &str, deltas: usize, background: bool) -> anyhow::Result<Duration> {
    let body = json!({
        "model": mock::model_for(deltas),
        "input": "Tell me more.",
        "store": true,
        "stream": true,
        "background": background,
    });
    let (bytes, elapsed) = measure::timed_post(client, url, &body).await?;
    ensure!(bytes.ends_with(b"data: [DONE]\n\n"), "a stream without its end");
    ensure!(
        bytes.windows(b"response.completed".len()).any(|w| w == b"response.completed"),
        "a stream that did not complete"
    );
    Ok(elapsed)
}

/// `rounds` plain and `rounds` background streams of `deltas` deltas through the gateway at
/// `gateway_url` (its base URL).
pub async fn measure(gateway_url: &str, deltas: usize, rounds: usize) -> anyhow::Result<StreamTimes> {
    let client = measure::client(4)?;
    let url = format!("{gateway_url}/v1/responses");
    let mut times = StreamTimes { plain: Vec::with_capacity(rounds), background: Vec::with_capacity(rounds) };
    for round in 0..WARMUP_ROUNDS + rounds {
        let plain = stream(&client, &url, deltas, false).await?;
        let background = stream(&client, &url, deltas, true).await?;
        if round >= WARMUP_ROUNDS {
            times.plain.push(plain);
            times.background.push(background);
        }
    }
    Ok(times)
}
