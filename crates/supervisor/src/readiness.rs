//! Waiting for the upstream model server before serving: `GET {upstream}/models` until it
//! answers 2xx, polling every 250 ms, logging progress every `log_interval`, giving up with a
//! clear error after `timeout`. A zero timeout skips the wait (the upstream may come later;
//! requests fail with 502 until it does).

use std::time::{Duration, Instant};

use anyhow::bail;

/// Poll until the upstream lists its models.
pub async fn wait_for_upstream(
    base_url: &str,
    api_key: Option<&str>,
    timeout: Duration,
    log_interval: Duration,
) -> anyhow::Result<()> {
    let url = format!("{}/models", base_url.trim_end_matches('/'));
    if timeout.is_zero() {
        tracing::info!(%url, "not waiting for the upstream (--upstream-ready-timeout 0)");
        return Ok(());
    }
    let client =
        reqwest::Client::builder().connect_timeout(Duration::from_secs(2)).timeout(Duration::from_secs(5)).build()?;
    let started = Instant::now();
    let mut last_log = started;
    loop {
        let mut request = client.get(&url);
        if let Some(key) = api_key {
            request = request.bearer_auth(key);
        }
        let last_problem = match request.send().await {
            Ok(response) if response.status().is_success() => {
                tracing::info!(%url, waited_ms = started.elapsed().as_millis() as u64, "upstream is ready");
                return Ok(());
            }
            Ok(response) => format!("HTTP {}", response.status()),
            Err(e) => e.to_string(),
        };
        if started.elapsed() >= timeout {
            bail!(
                "the upstream at {url} did not become ready within {:.1} s (last: {last_problem}); \
                 check --upstream, or raise --upstream-ready-timeout",
                timeout.as_secs_f64()
            );
        }
        if last_log.elapsed() >= log_interval {
            tracing::info!(%url, waited_s = started.elapsed().as_secs(), last = %last_problem, "waiting for the upstream");
            last_log = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
