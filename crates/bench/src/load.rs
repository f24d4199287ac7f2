//! The load test (`respgw-bench --load`, `scripts/load`): `clients` concurrent SSE streams for
//! a fixed window through respgw with several workers, against the out-of-process mock
//! ([`crate::fastmock`]). Every client opens a `store: true` stream, reads it to its terminal
//! event and opens the next one at once, so `clients` streams are in flight the whole time.
//! An error is anything but a 200 stream carrying every delta and ending in
//! `response.completed` (a transport error, another status, a cut stream). Reported: streams
//! done, errors, p50/p99 of the time to the first delta and to the end of the stream, and
//! respgw's resident memory (the process tree, sampled every second; peak and at the end).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use futures::StreamExt;
use serde_json::json;

use crate::fastmock::MockProcess;
use crate::gateway::Gateway;
use crate::mock;
use crate::sse::{Frame, FrameSplitter, classify_responses};

/// Longest one stream may take before it counts as an error.
const STREAM_TIMEOUT: Duration = Duration::from_secs(30);

/// What the load test saw.
pub struct LoadResult {
    pub clients: usize,
    pub workers: usize,
    pub window: Duration,
    pub streams: usize,
    pub errors: usize,
    /// The first few error messages.
    pub error_samples: Vec<String>,
    pub first_delta: Vec<Duration>,
    pub end: Vec<Duration>,
    pub peak_rss_kib: u64,
    pub end_rss_kib: u64,
    pub processes: usize,
}

/// Per-client tallies.
#[derive(Default)]
struct Tally {
    streams: usize,
    errors: Vec<String>,
    first_delta: Vec<Duration>,
    end: Vec<Duration>,
}

/// Run the load test against a fresh respgw (`workers` workers) in front of a fresh mock.
pub async fn run(
    respgw: &Path,
    extra_args: &[String],
    clients: usize,
    workers: usize,
    window: Duration,
    deltas: usize,
) -> anyhow::Result<LoadResult> {
    let mock = MockProcess::start(window + STREAM_TIMEOUT).await?;
    let mut args = extra_args.to_vec();
    args.push(format!("--gateway-workers={workers}"));
    let mut gw = Gateway::start(respgw, &mock.base_url(), &args).await?;
    let url = format!("{}/v1/responses", gw.base_url());
    let client = reqwest::Client::builder()
        .http1_only()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(clients)
        .build()
        .context("cannot build the HTTP client")?;
    let body =
        Arc::new(json!({"model": mock::model_for(deltas), "input": "Say something.", "stream": true, "store": true}));
    let stop = Arc::new(AtomicBool::new(false));

    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (client, url, body, stop) = (client.clone(), url.clone(), Arc::clone(&body), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut tally = Tally::default();
                while !stop.load(Ordering::Relaxed) {
                    let opened = Instant::now();
                    match one_stream(&client, &url, &body, deltas, opened).await {
                        Ok(first) => {
                            tally.first_delta.push(first);
                            tally.end.push(opened.elapsed());
                        }
                        Err(e) => tally.errors.push(format!("{e:#}")),
                    }
                    tally.streams += 1;
                }
                tally
            })
        })
        .collect();

    let (mut peak_rss_kib, mut processes) = (0, 0);
    while started.elapsed() < window {
        tokio::time::sleep(Duration::from_secs(1).min(window.saturating_sub(started.elapsed()))).await;
        let (rss, n) = gw.rss_kib().await?;
        (peak_rss_kib, processes) = (peak_rss_kib.max(rss), n);
    }
    stop.store(true, Ordering::Relaxed);
    let mut result = LoadResult {
        clients,
        workers,
        window,
        streams: 0,
        errors: 0,
        error_samples: Vec::new(),
        first_delta: Vec::new(),
        end: Vec::new(),
        peak_rss_kib,
        end_rss_kib: 0,
        processes,
    };
    for task in tasks {
        let tally = task.await.context("a load client panicked")?;
        result.streams += tally.streams;
        result.errors += tally.errors.len();
        result.error_samples.extend(tally.errors.into_iter().take(3 - result.error_samples.len().min(3)));
        result.first_delta.extend(tally.first_delta);
        result.end.extend(tally.end);
    }
    result.end_rss_kib = gw.rss_kib().await?.0;
    gw.check_alive().await?;
    gw.stop().await?;
    mock.stop().await?;
    Ok(result)
}

/// One stream read to its end; returns the time to its first delta.
async fn one_stream(
    client: &reqwest::Client,
    url: &str,
    body: &serde_json::Value,
    deltas: usize,
    opened: Instant,
) -> anyhow::Result<Duration> {
    let response = client.post(url).json(body).timeout(STREAM_TIMEOUT).send().await?;
    ensure!(response.status() == 200, "the stream answered {}", response.status());
    let mut frames = response.bytes_stream();
    let mut splitter = FrameSplitter::default();
    let (mut seen, mut completed, mut first) = (0usize, false, None);
    while let Some(bytes) = frames.next().await {
        splitter.feed(&bytes?, |frame| match classify_responses(frame) {
            Frame::Delta => seen += 1,
            Frame::End => completed = true,
            Frame::Other => {}
        });
        if seen > 0 && first.is_none() {
            first = Some(opened.elapsed());
        }
    }
    ensure!(completed && seen == deltas, "the stream ended after {seen}/{deltas} deltas (completed: {completed})");
    Ok(first.unwrap_or_else(|| opened.elapsed()))
}
