//! The measurements. Each one runs the same workload directly against the mock upstream (the
//! baseline) and through respgw, in the same run, so results are compared as ratios or
//! differences rather than against absolute numbers from another machine.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use futures::StreamExt;
use serde_json::{Value, json};

use crate::gateway::{self, Gateway};
use crate::mock::{self, HOLD_MODEL, MockUpstream};
use crate::sse::{Frame, FrameSplitter, classify_responses, classify_upstream};

/// The prompt every request carries.
const PROMPT: &str = "Say hello to the benchmark.";
/// Longest any single non-stream request may take before the run is declared broken.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// An HTTP/1.1 client for loopback: no proxy, no Nagle, keeps up to `idle` connections per host.
pub fn client(idle: usize) -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .http1_only()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(idle)
        .build()
        .context("cannot build the HTTP client")
}

/// Where the two sides of a comparison are.
pub struct Targets {
    /// `POST` target of the baseline: the mock's `/v1/chat/completions`.
    pub direct: String,
    /// `POST` target through the gateway: respgw's `/v1/responses`.
    pub gateway: String,
}

impl Targets {
    pub fn new(mock: &MockUpstream, gateway: &Gateway) -> Self {
        Targets {
            direct: format!("{}/chat/completions", mock.base_url()),
            gateway: format!("{}/v1/responses", gateway.base_url()),
        }
    }
}

/// The chat-completions body the baseline sends (what respgw itself sends upstream).
fn chat_body(model: &str) -> Value {
    json!({
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "stream": true,
        "stream_options": {"include_usage": true},
    })
}

/// The Responses body sent through the gateway.
fn responses_body(model: &str, stream: bool) -> Value {
    json!({"model": model, "input": PROMPT, "stream": stream, "store": true})
}

/// One baseline request: stream a chat completion and read the whole body. Returns its latency.
async fn direct_once(client: &reqwest::Client, url: &str, body: &Value) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let response = client.post(url).json(body).timeout(REQUEST_TIMEOUT).send().await?;
    let status = response.status();
    let bytes = response.bytes().await?;
    let elapsed = started.elapsed();
    ensure!(status.is_success(), "mock upstream answered {status}");
    ensure!(bytes.ends_with(b"data: [DONE]\n\n"), "mock upstream stream did not end with [DONE]");
    Ok(elapsed)
}

/// One gateway request: non-stream, `store: true`, JSON body. Returns its latency.
async fn gateway_once(client: &reqwest::Client, url: &str, body: &Value) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let response = client.post(url).json(body).timeout(REQUEST_TIMEOUT).send().await?;
    let status = response.status();
    let bytes = response.bytes().await?;
    let elapsed = started.elapsed();
    ensure!(status.is_success(), "respgw answered {status}: {}", String::from_utf8_lossy(&bytes));
    let value: Value = serde_json::from_slice(&bytes).context("respgw's body is not JSON")?;
    ensure!(value["status"] == "completed", "respgw's response is not completed: {value}");
    Ok(elapsed)
}

/// Latencies of the two sides, plus respgw's CPU time over its requests.
pub struct LatencyResult {
    pub direct: Vec<Duration>,
    pub gateway: Vec<Duration>,
    /// respgw CPU time per gateway request, in µs.
    pub gateway_cpu_us: f64,
    /// Wall time of each side (for requests/s); in the sequential test, the sum of latencies.
    pub direct_wall: Duration,
    pub gateway_wall: Duration,
}

/// `warmup` then `requests` sequential requests on each side, alternating direct and gateway so
/// that both see the same machine conditions.
pub async fn latency_sequential(
    targets: &Targets,
    gateway: &Gateway,
    deltas: usize,
    warmup: usize,
    requests: usize,
) -> anyhow::Result<LatencyResult> {
    let client = client(4)?;
    let model = mock::model_for(deltas);
    let chat = chat_body(&model);
    let resp = responses_body(&model, false);
    for _ in 0..warmup {
        direct_once(&client, &targets.direct, &chat).await?;
        gateway_once(&client, &targets.gateway, &resp).await?;
    }
    let mut direct = Vec::with_capacity(requests);
    let mut through = Vec::with_capacity(requests);
    let cpu_before = gateway::cpu_ns(gateway.pid())?;
    for _ in 0..requests {
        direct.push(direct_once(&client, &targets.direct, &chat).await?);
        through.push(gateway_once(&client, &targets.gateway, &resp).await?);
    }
    let cpu = gateway::cpu_ns(gateway.pid())?.saturating_sub(cpu_before);
    Ok(LatencyResult {
        direct_wall: direct.iter().sum(),
        gateway_wall: through.iter().sum(),
        direct,
        gateway: through,
        gateway_cpu_us: cpu as f64 / 1e3 / requests.max(1) as f64,
    })
}

/// `requests` requests per side from `concurrency` workers: first all direct, then all through
/// the gateway (each phase after its own short warm-up).
pub async fn latency_concurrent(
    targets: &Targets,
    gateway: &Gateway,
    deltas: usize,
    concurrency: usize,
    requests: usize,
) -> anyhow::Result<LatencyResult> {
    let client = client(concurrency * 2)?;
    let model = mock::model_for(deltas);
    let chat = Arc::new(chat_body(&model));
    let resp = Arc::new(responses_body(&model, false));
    let per_worker = requests.div_ceil(concurrency.max(1));

    let run_phase = |direct: bool, count: usize| {
        let client = client.clone();
        let (url, body) = if direct {
            (targets.direct.clone(), Arc::clone(&chat))
        } else {
            (targets.gateway.clone(), Arc::clone(&resp))
        };
        async move {
            let started = Instant::now();
            let workers: Vec<_> = (0..concurrency)
                .map(|_| {
                    let (client, url, body) = (client.clone(), url.clone(), Arc::clone(&body));
                    tokio::spawn(async move {
                        let mut out = Vec::with_capacity(count);
                        for _ in 0..count {
                            out.push(if direct {
                                direct_once(&client, &url, &body).await?
                            } else {
                                gateway_once(&client, &url, &body).await?
                            });
                        }
                        anyhow::Ok(out)
                    })
                })
                .collect();
            let mut all = Vec::with_capacity(count * concurrency);
            for w in workers {
                all.extend(w.await.context("a worker panicked")??);
            }
            anyhow::Ok((all, started.elapsed()))
        }
    };

    run_phase(true, 20).await?;
    let (direct, direct_wall) = run_phase(true, per_worker).await?;
    run_phase(false, 20).await?;
    let cpu_before = gateway::cpu_ns(gateway.pid())?;
    let (through, gateway_wall) = run_phase(false, per_worker).await?;
    let cpu = gateway::cpu_ns(gateway.pid())?.saturating_sub(cpu_before);
    Ok(LatencyResult {
        gateway_cpu_us: cpu as f64 / 1e3 / through.len().max(1) as f64,
        direct,
        gateway: through,
        direct_wall,
        gateway_wall,
    })
}

/// Read one SSE stream to its end; returns the number of delta frames and whether the end frame
/// arrived.
async fn read_stream(response: reqwest::Response, classify: fn(&[u8]) -> Frame) -> anyhow::Result<(usize, bool)> {
    let status = response.status();
    ensure!(status.is_success(), "stream answered {status}");
    let mut body = response.bytes_stream();
    let mut splitter = FrameSplitter::default();
    let (mut deltas, mut ended) = (0usize, false);
    while let Some(chunk) = body.next().await {
        splitter.feed(&chunk?, |frame| match classify(frame) {
            Frame::Delta => deltas += 1,
            Frame::End => ended = true,
            Frame::Other => {}
        });
    }
    Ok((deltas, ended))
}

/// Events/s of the two sides.
pub struct ThroughputResult {
    /// Content chunks per second read directly from the mock.
    pub direct_per_s: f64,
    /// `response.output_text.delta` events per second read through respgw.
    pub gateway_per_s: f64,
    /// respgw CPU time per delta event, in µs.
    pub gateway_cpu_us: f64,
}

/// `runs` rounds; each round streams `concurrency` replies of `deltas` chunks at once, first
/// directly, then through the gateway. Rates are total deltas over total wall time per side.
pub async fn sse_throughput(
    targets: &Targets,
    gateway: &Gateway,
    deltas: usize,
    concurrency: usize,
    runs: usize,
) -> anyhow::Result<ThroughputResult> {
    let client = client(concurrency * 2)?;
    let model = mock::model_for(deltas);
    let chat = chat_body(&model);
    let resp = responses_body(&model, true);

    let round = |direct: bool| {
        let client = client.clone();
        let (url, body, classify): (_, _, fn(&[u8]) -> Frame) = if direct {
            (targets.direct.clone(), chat.clone(), classify_upstream)
        } else {
            (targets.gateway.clone(), resp.clone(), classify_responses)
        };
        async move {
            let started = Instant::now();
            let streams: Vec<_> = (0..concurrency)
                .map(|_| {
                    let request = client.post(&url).json(&body).send();
                    tokio::spawn(async move { read_stream(request.await?, classify).await })
                })
                .collect();
            for s in streams {
                let (got, ended) = s.await.context("a stream reader panicked")??;
                ensure!(got == deltas && ended, "a stream delivered {got}/{deltas} deltas (ended: {ended})");
            }
            anyhow::Ok(started.elapsed())
        }
    };

    // Warm-up: one short round each way (fills connection pools, the mock's frame cache).
    round(true).await?;
    round(false).await?;
    let (mut direct_wall, mut gateway_wall, mut cpu) = (Duration::ZERO, Duration::ZERO, 0u64);
    for _ in 0..runs {
        direct_wall += round(true).await?;
        let cpu_before = gateway::cpu_ns(gateway.pid())?;
        gateway_wall += round(false).await?;
        cpu += gateway::cpu_ns(gateway.pid())?.saturating_sub(cpu_before);
    }
    let total = (deltas * concurrency * runs) as f64;
    Ok(ThroughputResult {
        direct_per_s: total / direct_wall.as_secs_f64(),
        gateway_per_s: total / gateway_wall.as_secs_f64(),
        gateway_cpu_us: cpu as f64 / 1e3 / total.max(1.0),
    })
}

/// respgw's memory with many open streams.
pub struct MemoryResult {
    pub streams: usize,
    /// After start-up and a few warm-up requests.
    pub idle_kib: u64,
    /// With every stream open and past its first delta.
    pub open_kib: u64,
    /// After every stream finished.
    pub after_kib: u64,
    /// Time to open all streams and see each one's first delta.
    pub open_time: Duration,
}

/// Open `streams` SSE streams through a fresh gateway (model `hold`), measure RSS once each one
/// has received its first delta, then release them and check that all complete.
pub async fn memory(
    mock: &MockUpstream,
    gateway: &Gateway,
    streams: usize,
    limit: Duration,
) -> anyhow::Result<MemoryResult> {
    let targets = Targets::new(mock, gateway);
    let warm = client(2)?;
    let model = mock::model_for(4);
    for _ in 0..20 {
        gateway_once(&warm, &targets.gateway, &responses_body(&model, false)).await?;
        let response = warm.post(&targets.gateway).json(&responses_body(&model, true)).send().await?;
        let (deltas, ended) = read_stream(response, classify_responses).await?;
        ensure!(deltas == 4 && ended, "warm-up stream was incomplete");
    }
    drop(warm);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let idle_kib = gateway::rss_kib(gateway.pid())?;

    let client = client(streams)?;
    let first = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let body = responses_body(HOLD_MODEL, true);
    let started = Instant::now();
    let tasks: Vec<_> = (0..streams)
        .map(|_| {
            let request = client.post(&targets.gateway).json(&body).send();
            let (first, failed) = (Arc::clone(&first), Arc::clone(&failed));
            tokio::spawn(async move {
                let result = async {
                    let response = request.await?;
                    ensure!(response.status().is_success(), "{}", response.status());
                    let mut body = response.bytes_stream();
                    let mut splitter = FrameSplitter::default();
                    let (mut deltas, mut ended, mut counted) = (0usize, false, false);
                    while let Some(chunk) = body.next().await {
                        splitter.feed(&chunk?, |frame| match classify_responses(frame) {
                            Frame::Delta => deltas += 1,
                            Frame::End => ended = true,
                            Frame::Other => {}
                        });
                        if deltas > 0 && !counted {
                            counted = true;
                            first.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    ensure!(ended && deltas == 2, "held stream ended early");
                    anyhow::Ok(())
                }
                .await;
                if result.is_err() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                result
            })
        })
        .collect();

    // Wait (bounded) until every stream is open and past its first delta.
    let deadline = Instant::now() + limit;
    let mut waited_out = false;
    while first.load(Ordering::Relaxed) < streams && failed.load(Ordering::Relaxed) == 0 {
        if Instant::now() > deadline {
            waited_out = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let open_time = started.elapsed();
    let opened = first.load(Ordering::Relaxed);
    let open_kib = gateway::rss_kib(gateway.pid())?;
    let holding = mock.holding();
    mock.release();

    let mut errors = Vec::new();
    for t in tasks {
        match tokio::time::timeout(limit, t).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => errors.push(format!("{e:#}")),
            Ok(Err(e)) => errors.push(format!("stream task panicked: {e}")),
            Err(_) => errors.push("a released stream did not finish in time".into()),
        }
    }
    if let Some(e) = errors.first() {
        bail!("{} of {streams} held streams failed; first: {e}", errors.len());
    }
    ensure!(!waited_out, "only {opened} of {streams} streams got their first delta within {limit:?}");
    ensure!(holding == streams, "the mock held {holding} upstream streams, expected {streams}");
    drop(client);
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(MemoryResult { streams, idle_kib, open_kib, after_kib: gateway::rss_kib(gateway.pid())?, open_time })
}
