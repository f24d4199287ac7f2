//! Worker scaling: how much throughput respgw gains from a second worker process under a
//! CPU-bound load.
//!
//! The load is `conns` keep-alive connections, each sending the next request as soon as the last
//! answer is complete, for a warm-up then a fixed window. The load generator is as cheap as it can
//! be, so that respgw gets as much of the machine as possible: one thread, a current-thread tokio
//! runtime, pre-serialized requests over [`crate::rawhttp`], and it reads only the status, the
//! body length and (once per connection) `x-respgw-worker`. Non-stream bodies are not parsed
//! (the first one of each connection is checked for `"status":"completed"`); event streams are
//! only split into frames and counted, as in the other SSE tests.
//!
//! Over the window it records the CPU time (user + system, `/proc/<pid>/stat`, exited threads
//! included) of respgw's process tree, of the mock upstream's process, of this process, and the
//! busy time of the whole machine (`/proc/stat`), so the table can say where the cores went and
//! whether the machine could show scaling at all.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use bytes::Bytes;
use serde_json::json;

use crate::fastmock::MockProcess;
use crate::gateway::{self, Gateway};
use crate::mock;
use crate::rawhttp::{self, Conn};
use crate::sse::{Frame, FrameSplitter, classify_responses};

/// Longest one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What each connection does in a loop.
#[derive(Clone, Copy)]
pub enum Load {
    /// Non-stream `store: false` requests, each asking the mock for `deltas` deltas; counts
    /// completed requests.
    Requests { deltas: usize },
    /// Streamed `store: false` requests of `deltas` deltas each; counts delta events.
    Events { deltas: usize },
}

/// The result of one load run against one respgw instance.
pub struct ScalingRun {
    /// Requests or delta events per second over the window.
    pub rate: f64,
    /// Cores used over the window (CPU seconds per second) by respgw's process tree, the mock
    /// upstream process, this process (the load generator), and the whole machine.
    pub respgw_cores: f64,
    pub mock_cores: f64,
    pub bench_cores: f64,
    pub busy_cores: f64,
    /// The machine's cores.
    pub cores: usize,
    /// respgw CPU time per request or per event, in µs.
    pub respgw_cpu_us: f64,
    /// Connections per worker slot (from `x-respgw-worker`), slot order, as used (balanced).
    pub conns_per_worker: Vec<usize>,
    /// How the kernel spread the first `conns` connections, before balancing.
    pub natural_per_worker: Vec<usize>,
}

impl ScalingRun {
    /// Cores busy with something other than respgw, the mock and the bench (other processes,
    /// interrupts).
    pub fn other_cores(&self) -> f64 {
        (self.busy_cores - self.respgw_cores - self.mock_cores - self.bench_cores).max(0.0)
    }
}

/// CPU counters at one instant.
struct Snapshot {
    at: Instant,
    respgw_ns: u64,
    mock_ns: u64,
    bench_ns: u64,
    /// `/proc/stat` busy and total ticks, all CPUs.
    busy_ticks: u64,
    total_ticks: u64,
}

async fn snapshot(gateway: &mut Gateway, mock: &MockProcess) -> anyhow::Result<Snapshot> {
    let (busy_ticks, total_ticks) = machine_ticks()?;
    Ok(Snapshot {
        at: Instant::now(),
        respgw_ns: gateway.stat_cpu_ns().await?,
        mock_ns: gateway::stat_cpu_ns(mock.pid()),
        bench_ns: gateway::stat_cpu_ns(std::process::id()),
        busy_ticks,
        total_ticks,
    })
}

/// Busy and total ticks of all CPUs from the first line of `/proc/stat`.
pub fn machine_ticks() -> anyhow::Result<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").context("cannot read /proc/stat")?;
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("cpu "))
        .context("no cpu line in /proc/stat")?
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    ensure!(fields.len() >= 8, "short cpu line in /proc/stat");
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let idle = fields[3] + fields[4];
    let total: u64 = fields[..8].iter().sum();
    Ok((total - idle, total))
}

/// Cores the machine is busy with over `window` (before anything of the bench runs: other
/// processes' load, which makes every number noisier).
pub async fn machine_busy(window: Duration) -> anyhow::Result<f64> {
    let (busy0, total0) = machine_ticks()?;
    tokio::time::sleep(window).await;
    let (busy1, total1) = machine_ticks()?;
    Ok((busy1 - busy0) as f64 / (total1 - total0).max(1) as f64 * machine_cpus() as f64)
}

/// The machine's CPUs, as `/proc/stat` counts them.
pub fn machine_cpus() -> usize {
    std::fs::read_to_string("/proc/stat")
        .map(|s| s.lines().filter(|l| l.starts_with("cpu") && !l.starts_with("cpu ")).count())
        .unwrap_or(0)
        .max(1)
}

/// Run `load` from `conns` connections, balanced over `workers` worker processes (see
/// [`generate`]), against `gateway` for `warmup` then `window`.
pub async fn run(
    gateway: &mut Gateway,
    mock: &MockProcess,
    load: Load,
    workers: usize,
    conns: usize,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<ScalingRun> {
    let addr: SocketAddr = gateway
        .base_url()
        .strip_prefix("http://")
        .and_then(|a| a.parse().ok())
        .with_context(|| format!("cannot parse respgw's address {}", gateway.base_url()))?;
    let (deltas, stream) = match load {
        Load::Requests { deltas } => (deltas, false),
        Load::Events { deltas } => (deltas, true),
    };
    let body = json!({
        "model": mock::model_for(deltas),
        "input": "Say hello to the benchmark.",
        "stream": stream,
        "store": false,
    });
    let request = rawhttp::post_json(addr, "/v1/responses", &body);

    let start = Instant::now() + warmup;
    let end = start + window;
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("load".into())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start the load generator's runtime")
                .and_then(|rt| rt.block_on(generate(addr, request, load, conns, workers, start, end)));
            let _ = tx.send(result);
        })
        .context("cannot start the load generator thread")?;

    tokio::time::sleep_until(start.into()).await;
    let before = snapshot(gateway, mock).await?;
    tokio::time::sleep_until(end.into()).await;
    let after = snapshot(gateway, mock).await?;
    let generated = tokio::time::timeout(REQUEST_TIMEOUT + Duration::from_secs(5), rx)
        .await
        .context("the load generator did not finish in time")?
        .context("the load generator thread died")??;
    gateway.check_alive().await?;

    let counted: u64 = generated.counted.iter().sum();
    let wall = after.at.duration_since(before.at).as_secs_f64();
    let cores_of = |ns: u64| ns as f64 / 1e9 / wall;
    let cores = machine_cpus();
    let respgw_ns = after.respgw_ns.saturating_sub(before.respgw_ns);
    Ok(ScalingRun {
        rate: counted as f64 / window.as_secs_f64(),
        respgw_cores: cores_of(respgw_ns),
        mock_cores: cores_of(after.mock_ns.saturating_sub(before.mock_ns)),
        bench_cores: cores_of(after.bench_ns.saturating_sub(before.bench_ns)),
        busy_cores: (after.busy_ticks - before.busy_ticks) as f64
            / (after.total_ticks - before.total_ticks).max(1) as f64
            * cores as f64,
        cores,
        respgw_cpu_us: respgw_ns as f64 / 1e3 / counted.max(1) as f64,
        conns_per_worker: generated.per_worker,
        natural_per_worker: generated.natural,
    })
}

/// The connections of a load run.
struct Generated {
    /// Requests completed, or delta events received, inside the window, per connection.
    counted: Vec<u64>,
    /// Connections per worker slot, as used.
    per_worker: Vec<usize>,
    /// Worker slots of the first `conns` connections the kernel handed out, before balancing.
    natural: Vec<usize>,
}

/// Count `slot` in `per_slot`, growing it as needed.
fn bump(per_slot: &mut Vec<usize>, slot: usize) {
    if per_slot.len() <= slot {
        per_slot.resize(slot + 1, 0);
    }
    per_slot[slot] += 1;
}

/// The load generator: `conns` connections, each looping until `end`.
///
/// The kernel spreads connections over the workers' `SO_REUSEPORT` sockets by a hash of the
/// address pair, so a few dozen keep-alive connections often land unevenly (say 20/12), and stay
/// so: that measures the hash's luck with a small sample, not what the workers can do (many
/// clients even out). So each new connection first makes one request (outside the window) to
/// learn its worker from `x-respgw-worker`, and is kept only while its worker has fewer than
/// `conns / workers`; the split the kernel gave is reported too.
async fn generate(
    addr: SocketAddr,
    request: Bytes,
    load: Load,
    conns: usize,
    workers: usize,
    start: Instant,
    end: Instant,
) -> anyhow::Result<Generated> {
    let quota = conns.div_ceil(workers.max(1));
    let (mut per_worker, mut natural) = (Vec::new(), Vec::new());
    let mut kept = Vec::with_capacity(conns);
    let mut body = Vec::new();
    let mut attempts = 0;
    while kept.len() < conns {
        attempts += 1;
        let mut conn = Conn::connect(addr).await?;
        let (worker, _) = exchange(&mut conn, &request, load, true, &mut body, (end, end)).await?;
        let slot = worker.unwrap_or(0) as usize;
        if attempts <= conns {
            bump(&mut natural, slot);
        }
        // Bounded: after 8 tries per connection, take whatever comes.
        if per_worker.get(slot).copied().unwrap_or(0) < quota || attempts > 8 * conns {
            bump(&mut per_worker, slot);
            kept.push(conn);
        }
    }
    let tasks: Vec<_> =
        kept.into_iter().map(|conn| tokio::spawn(connection(conn, request.clone(), load, start, end))).collect();
    let mut counted = Vec::with_capacity(conns);
    for t in tasks {
        counted.push(t.await.context("a load connection panicked")??);
    }
    Ok(Generated { counted, per_worker, natural })
}

/// One connection's loop: requests back to back until `end`; returns what it counted inside
/// `[start, end)`.
async fn connection(mut conn: Conn, request: Bytes, load: Load, start: Instant, end: Instant) -> anyhow::Result<u64> {
    let mut body = Vec::new();
    let mut counted = 0;
    while Instant::now() < end {
        counted += exchange(&mut conn, &request, load, false, &mut body, (start, end)).await?.1;
    }
    Ok(counted)
}

/// One request and its whole response. Returns the worker slot (if `want_worker`) and what it
/// counts inside `window`: 1 for a non-stream request completed in it, or the delta events
/// received in it. Fails on anything but a complete `200`; `body` keeps (the start of) the body
/// for the error message.
async fn exchange(
    conn: &mut Conn,
    request: &[u8],
    load: Load,
    want_worker: bool,
    body: &mut Vec<u8>,
    (start, end): (Instant, Instant),
) -> anyhow::Result<(Option<u32>, u64)> {
    conn.write_all(request).await?;
    body.clear();
    let (head, counted) = match load {
        Load::Requests { .. } => {
            let head =
                tokio::time::timeout(REQUEST_TIMEOUT, conn.read_response(want_worker, |p| body.extend_from_slice(p)))
                    .await
                    .context("a request timed out")??;
            let now = Instant::now();
            (head, u64::from(now >= start && now < end))
        }
        Load::Events { deltas } => {
            let mut splitter = FrameSplitter::default();
            let (mut seen, mut ended, mut counted) = (0usize, false, 0u64);
            let head = tokio::time::timeout(
                REQUEST_TIMEOUT,
                conn.read_response(want_worker, |piece| {
                    let now = Instant::now();
                    let in_window = now >= start && now < end;
                    splitter.feed(piece, |frame| match classify_responses(frame) {
                        Frame::Delta => {
                            seen += 1;
                            counted += u64::from(in_window);
                        }
                        Frame::End => ended = true,
                        Frame::Other => {}
                    });
                    if seen == 0 && body.len() < 2000 {
                        body.extend_from_slice(&piece[..piece.len().min(2000)]);
                    }
                }),
            )
            .await
            .context("a stream timed out")??;
            if head.status == 200 {
                ensure!(ended && seen == deltas, "a stream delivered {seen}/{deltas} deltas (ended: {ended})");
            }
            (head, counted)
        }
    };
    if head.status != 200 {
        bail!("respgw answered {}: {}", head.status, String::from_utf8_lossy(body));
    }
    // Non-stream bodies are checked when the worker is asked for: once per connection.
    if want_worker && matches!(load, Load::Requests { .. }) {
        ensure!(
            rawhttp::find(body, br#""status":"completed""#).is_some(),
            "respgw's response is not completed: {}",
            String::from_utf8_lossy(body)
        );
    }
    Ok((head.worker, counted))
}
