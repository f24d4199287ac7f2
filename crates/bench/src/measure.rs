//! The measurements. Each one runs the same workload directly against the mock upstream (the
//! baseline) and through a gateway (respgw, or the floor proxy of [`crate::floor`]), in the same
//! run, so results are compared as ratios or differences rather than against absolute numbers
//! from another machine.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use futures::StreamExt;
use serde_json::{Value, json};

use crate::gateway::Gateway;
use crate::mock::{self, HOLD_MODEL, MockUpstream};
use crate::sse::{Frame, FrameSplitter, classify_responses, classify_upstream};

/// The prompt every request carries.
const PROMPT: &str = "Say hello to the benchmark.";
/// Streams of the memory test that may be opening (not yet past their first delta) at once.
const OPENING_AT_ONCE: usize = 64;
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

/// POST `body` to `url` and read the whole reply (a stream to its end): the reply and how long it
/// took. A status other than success is an error carrying the reply.
pub async fn timed_post(client: &reqwest::Client, url: &str, body: &Value) -> anyhow::Result<(bytes::Bytes, Duration)> {
    let started = Instant::now();
    let response = client.post(url).json(body).timeout(REQUEST_TIMEOUT).send().await?;
    let status = response.status();
    let bytes = response.bytes().await?;
    let elapsed = started.elapsed();
    ensure!(status.is_success(), "respgw answered {status}: {}", String::from_utf8_lossy(&bytes));
    Ok((bytes, elapsed))
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
    ensure!(status.is_success(), "the gateway answered {status}: {}", String::from_utf8_lossy(&bytes));
    let value: Value = serde_json::from_slice(&bytes).context("the gateway's body is not JSON")?;
    ensure!(value["status"] == "completed", "the gateway's response is not completed: {value}");
    Ok(elapsed)
}

/// Latencies of the two sides, plus the gateway's CPU time over its requests.
pub struct LatencyResult {
    pub direct: Vec<Duration>,
    pub gateway: Vec<Duration>,
    /// Gateway CPU time per gateway request, in µs.
    pub gateway_cpu_us: f64,
    /// The part of `gateway_cpu_us` spent in respgw's SQLite writer and checkpointer threads
    /// (0 for the floor and on PostgreSQL).
    pub sqlite_cpu_us: f64,
    /// Wall time of each side (for requests/s); in the sequential test, the sum of latencies.
    pub direct_wall: Duration,
    pub gateway_wall: Duration,
}

/// `warmup` then `requests` sequential requests on each side, alternating direct and gateway so
/// that both see the same machine conditions. `store` is the gateway requests' `store` flag.
pub async fn latency_sequential(
    targets: &Targets,
    gateway: &mut Gateway,
    deltas: usize,
    warmup: usize,
    requests: usize,
    store: bool,
) -> anyhow::Result<LatencyResult> {
    let client = client(4)?;
    let model = mock::model_for(deltas);
    let chat = chat_body(&model);
    let mut resp = responses_body(&model, false);
    resp["store"] = Value::Bool(store);
    for _ in 0..warmup {
        direct_once(&client, &targets.direct, &chat).await?;
        gateway_once(&client, &targets.gateway, &resp).await?;
    }
    let mut direct = Vec::with_capacity(requests);
    let mut through = Vec::with_capacity(requests);
    let cpu_before = gateway.cpu_ns().await?;
    let sqlite_before = sqlite_cpu_ns(gateway).await?;
    for _ in 0..requests {
        direct.push(direct_once(&client, &targets.direct, &chat).await?);
        through.push(gateway_once(&client, &targets.gateway, &resp).await?);
    }
    let cpu = gateway.cpu_ns().await?.saturating_sub(cpu_before);
    let sqlite = sqlite_cpu_ns(gateway).await?.saturating_sub(sqlite_before);
    let per_request = |ns: u64| ns as f64 / 1e3 / requests.max(1) as f64;
    Ok(LatencyResult {
        direct_wall: direct.iter().sum(),
        gateway_wall: through.iter().sum(),
        direct,
        gateway: through,
        gateway_cpu_us: per_request(cpu),
        sqlite_cpu_us: per_request(sqlite),
    })
}

/// CPU time so far of respgw's SQLite threads: the writer and the checkpointer.
async fn sqlite_cpu_ns(gateway: &mut Gateway) -> anyhow::Result<u64> {
    Ok(gateway.thread_cpu_ns("sqlite-writer").await? + gateway.thread_cpu_ns("sqlite-checkpoi").await?)
}

/// `requests` requests per side from `concurrency` workers: first all direct, then all through
/// the gateway (each phase after its own short warm-up).
pub async fn latency_concurrent(
    targets: &Targets,
    gateway: &mut Gateway,
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
    let cpu_before = gateway.cpu_ns().await?;
    let sqlite_before = sqlite_cpu_ns(gateway).await?;
    let (through, gateway_wall) = run_phase(false, per_worker).await?;
    let cpu = gateway.cpu_ns().await?.saturating_sub(cpu_before);
    let sqlite = sqlite_cpu_ns(gateway).await?.saturating_sub(sqlite_before);
    let per_request = |ns: u64| ns as f64 / 1e3 / through.len().max(1) as f64;
    Ok(LatencyResult {
        gateway_cpu_us: per_request(cpu),
        sqlite_cpu_us: per_request(sqlite),
        direct,
        gateway: through,
        direct_wall,
        gateway_wall,
    })
}

/// What the client saw of one SSE stream.
struct StreamRead {
    /// Delta frames.
    deltas: usize,
    /// Whether the end frame arrived.
    ended: bool,
    /// When the first and the last delta frame arrived.
    first_delta: Option<Instant>,
    last_delta: Option<Instant>,
}

/// Read one SSE stream to its end, classifying frames with `classify`. With `parse`, the client
/// also does what a real one does with every event: parse the JSON of each `data:` line (all but
/// the upstream's `[DONE]`) into a `serde_json::Value`.
async fn read_stream(
    response: reqwest::Response,
    classify: fn(&[u8]) -> Frame,
    parse: bool,
) -> anyhow::Result<StreamRead> {
    let status = response.status();
    ensure!(status.is_success(), "stream answered {status}");
    let mut body = response.bytes_stream();
    let mut splitter = FrameSplitter::default();
    let mut read = StreamRead { deltas: 0, ended: false, first_delta: None, last_delta: None };
    let mut bad_json = 0usize;
    while let Some(chunk) = body.next().await {
        let before = read.deltas;
        splitter.feed(&chunk?, |frame| {
            if parse && !parse_data_lines(frame) {
                bad_json += 1;
            }
            match classify(frame) {
                Frame::Delta => read.deltas += 1,
                Frame::End => read.ended = true,
                Frame::Other => {}
            }
        });
        if read.deltas > before {
            let now = Instant::now();
            read.first_delta.get_or_insert(now);
            read.last_delta = Some(now);
        }
    }
    ensure!(bad_json == 0, "{bad_json} event(s) carried a `data:` line that is not JSON");
    Ok(read)
}

/// Parse every `data:` line of an SSE frame as JSON (skipping `[DONE]`); `false` if one is not
/// valid JSON.
fn parse_data_lines(frame: &[u8]) -> bool {
    frame.split(|&b| b == b'\n').filter_map(|line| line.strip_prefix(b"data:")).all(|data| {
        let data = data.strip_prefix(b" ").unwrap_or(data);
        data == b"[DONE]" || std::hint::black_box(serde_json::from_slice::<Value>(data)).is_ok()
    })
}

/// Time to first delta and time to the end of short streams, each side.
pub struct StreamLatencyResult {
    pub direct_first: Vec<Duration>,
    pub gateway_first: Vec<Duration>,
    pub direct_end: Vec<Duration>,
    pub gateway_end: Vec<Duration>,
}

/// `requests` short streams (`deltas` deltas) per side, sequential and alternating: how long until
/// the first delta and until the stream's end.
pub async fn stream_latency(targets: &Targets, deltas: usize, requests: usize) -> anyhow::Result<StreamLatencyResult> {
    let client = client(4)?;
    let model = mock::model_for(deltas);
    let chat = chat_body(&model);
    let resp = responses_body(&model, true);
    let mut result = StreamLatencyResult {
        direct_first: Vec::with_capacity(requests),
        gateway_first: Vec::with_capacity(requests),
        direct_end: Vec::with_capacity(requests),
        gateway_end: Vec::with_capacity(requests),
    };
    // The first round of each side is a warm-up.
    for i in 0..=requests {
        for direct in [true, false] {
            let (url, body, classify): (_, _, fn(&[u8]) -> Frame) = if direct {
                (&targets.direct, &chat, classify_upstream)
            } else {
                (&targets.gateway, &resp, classify_responses)
            };
            let started = Instant::now();
            let response = client.post(url).json(body).timeout(REQUEST_TIMEOUT).send().await?;
            let read = read_stream(response, classify, false).await?;
            let end = started.elapsed();
            ensure!(
                read.deltas == deltas && read.ended,
                "a short stream delivered {}/{deltas} deltas (ended: {})",
                read.deltas,
                read.ended
            );
            let first = read.first_delta.map_or(end, |t| t.saturating_duration_since(started));
            if i == 0 {
                continue;
            }
            let (firsts, ends) = if direct {
                (&mut result.direct_first, &mut result.direct_end)
            } else {
                (&mut result.gateway_first, &mut result.gateway_end)
            };
            firsts.push(first);
            ends.push(end);
        }
    }
    Ok(result)
}

/// Events/s of the two sides.
pub struct ThroughputResult {
    /// Content chunks per second read directly from the mock.
    pub direct_per_s: f64,
    /// `response.output_text.delta` events per second read through the gateway.
    pub gateway_per_s: f64,
    /// Gateway CPU time per delta event, in µs.
    pub gateway_cpu_us: f64,
}

/// `runs` rounds; each round streams `concurrency` replies of `deltas` chunks at once, first
/// directly, then through the gateway. A round's rate window runs from the first delta any of
/// its streams received to the last one (request set-up and the stream's tail are not counted);
/// rates are total deltas over total window time per side. With `parse`, the clients of both
/// sides parse the JSON of every event (see [`read_stream`]).
pub async fn sse_throughput(
    targets: &Targets,
    gateway: &mut Gateway,
    deltas: usize,
    concurrency: usize,
    runs: usize,
    parse: bool,
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
            let streams: Vec<_> = (0..concurrency)
                .map(|_| {
                    let request = client.post(&url).json(&body).send();
                    tokio::spawn(async move { read_stream(request.await?, classify, parse).await })
                })
                .collect();
            let (mut first, mut last): (Option<Instant>, Option<Instant>) = (None, None);
            for s in streams {
                let read = s.await.context("a stream reader panicked")??;
                ensure!(
                    read.deltas == deltas && read.ended,
                    "a stream delivered {}/{deltas} deltas (ended: {})",
                    read.deltas,
                    read.ended
                );
                first = match (first, read.first_delta) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                // `None` orders before any `Some`.
                last = last.max(read.last_delta);
            }
            match (first, last) {
                (Some(a), Some(b)) => anyhow::Ok(b.saturating_duration_since(a)),
                _ => bail!("no delta arrived"),
            }
        }
    };

    // Warm-up: one round each way (fills connection pools, the mock's frame cache).
    round(true).await?;
    round(false).await?;
    let (mut direct_wall, mut gateway_wall, mut cpu) = (Duration::ZERO, Duration::ZERO, 0u64);
    for _ in 0..runs {
        direct_wall += round(true).await?;
        let cpu_before = gateway.cpu_ns().await?;
        gateway_wall += round(false).await?;
        cpu += gateway.cpu_ns().await?.saturating_sub(cpu_before);
    }
    let total = (deltas * concurrency * runs) as f64;
    Ok(ThroughputResult {
        direct_per_s: total / direct_wall.as_secs_f64(),
        gateway_per_s: total / gateway_wall.as_secs_f64(),
        // The CPU window includes the streams' set-up and tail: a slight over-estimate.
        gateway_cpu_us: cpu as f64 / 1e3 / total.max(1.0),
    })
}

/// A mock upstream whose `hold` streams wait until released.
pub trait HeldStreams {
    /// Held streams currently waiting.
    async fn holding(&self) -> anyhow::Result<usize>;
    /// Let every held stream (and any later `hold` request) finish.
    async fn release(&self) -> anyhow::Result<()>;
    /// Make later `hold` requests wait again, until the next release.
    async fn arm(&self) -> anyhow::Result<()>;
}

impl HeldStreams for MockUpstream {
    async fn holding(&self) -> anyhow::Result<usize> {
        Ok(MockUpstream::holding(self))
    }

    async fn release(&self) -> anyhow::Result<()> {
        MockUpstream::release(self);
        Ok(())
    }

    async fn arm(&self) -> anyhow::Result<()> {
        MockUpstream::arm(self);
        Ok(())
    }
}

/// A gateway's memory with many open streams.
pub struct MemoryResult {
    pub streams: usize,
    /// After start-up and a few warm-up requests.
    pub idle_kib: u64,
    /// The gateway's processes (respgw: supervisor and workers).
    pub processes: usize,
    /// With every stream open and past its first delta.
    pub open_kib: u64,
    /// Time to open all streams and see each one's first delta.
    pub open_time: Duration,
    /// Time from the release to the end of the last stream.
    pub finish_time: Duration,
}

impl MemoryResult {
    /// (RSS with every stream open - idle) / streams, in KiB.
    pub fn kib_per_stream(&self) -> f64 {
        self.open_kib.saturating_sub(self.idle_kib) as f64 / self.streams.max(1) as f64
    }
}

/// The gateway's RSS in KiB `settle` from now (after a [`memory`] test: once its streams' memory
/// had time to be given back).
pub async fn rss_after(gateway: &mut Gateway, settle: Duration) -> anyhow::Result<u64> {
    tokio::time::sleep(settle).await;
    Ok(gateway.rss_kib().await?.0)
}

/// Open `streams` SSE streams through a fresh gateway (model `hold`), measure RSS once each one
/// has received its first delta, then release them and check that all complete and that their
/// client connections are closed.
pub async fn memory(
    mock: &impl HeldStreams,
    gateway: &mut Gateway,
    streams: usize,
    limit: Duration,
) -> anyhow::Result<MemoryResult> {
    mock.arm().await?;
    let url = format!("{}/v1/responses", gateway.base_url());
    let warm = client(2)?;
    let model = mock::model_for(4);
    for _ in 0..20 {
        gateway_once(&warm, &url, &responses_body(&model, false)).await?;
        let response = warm.post(&url).json(&responses_body(&model, true)).send().await?;
        let read = read_stream(response, classify_responses, false).await?;
        ensure!(read.deltas == 4 && read.ended, "warm-up stream was incomplete");
    }
    drop(warm);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (idle_kib, processes) = gateway.rss_kib().await?;

    let client = client(streams)?;
    let first = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let body = responses_body(HOLD_MODEL, true);
    // Streams still opening at once. Opening all of them at the same instant overflows the
    // listen backlogs (SYN cookies, 1 s retransmits), which measures the kernel, not respgw.
    let opening = Arc::new(tokio::sync::Semaphore::new(OPENING_AT_ONCE));
    let started = Instant::now();
    let tasks: Vec<_> = (0..streams)
        .map(|_| {
            let request = client.post(&url).json(&body).send();
            let (first, failed, opening) = (Arc::clone(&first), Arc::clone(&failed), Arc::clone(&opening));
            tokio::spawn(async move {
                let result = async {
                    // Held until this stream's first delta: bounds the connection burst.
                    let mut permit = Some(opening.acquire_owned().await?);
                    let response = request.await?;
                    ensure!(response.status().is_success(), "{}", response.status());
                    let mut body = response.bytes_stream();
                    let mut splitter = FrameSplitter::default();
                    let (mut deltas, mut ended) = (0usize, false);
                    while let Some(chunk) = body.next().await {
                        splitter.feed(&chunk?, |frame| match classify_responses(frame) {
                            Frame::Delta => deltas += 1,
                            Frame::End => ended = true,
                            Frame::Other => {}
                        });
                        if deltas > 0 && permit.is_some() {
                            permit = None;
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
    let (open_kib, _) = gateway.rss_kib().await?;
    let holding = mock.holding().await?;
    let released = Instant::now();
    mock.release().await?;

    let mut errors = Vec::new();
    let deadline = tokio::time::Instant::now() + limit;
    for t in tasks {
        match tokio::time::timeout_at(deadline, t).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => errors.push(format!("{e:#}")),
            Ok(Err(e)) => errors.push(format!("stream task panicked: {e}")),
            Err(_) => errors.push("a released stream did not finish in time".into()),
        }
    }
    let finish_time = released.elapsed();
    if let Some(e) = errors.first() {
        bail!("{} of {streams} held streams failed; first: {e}", errors.len());
    }
    ensure!(!waited_out, "only {opened} of {streams} streams got their first delta within {limit:?}");
    ensure!(holding == streams, "the mock held {holding} upstream streams, expected {streams}");
    drop(client);
    Ok(MemoryResult { streams, idle_kib, processes, open_kib, open_time, finish_time })
}

#[cfg(test)]
mod tests {
    use super::parse_data_lines;

    #[test]
    fn parses_data_lines() {
        assert!(parse_data_lines(b"event: response.output_text.delta\ndata: {\"delta\":\" hi\"}"));
        assert!(parse_data_lines(b"data: [DONE]"));
        assert!(parse_data_lines(b"data:{}"));
        assert!(!parse_data_lines(b"event: x\ndata: {\"unterminated\""));
    }
}
