//! `respgw-bench`: respgw's speed and memory benchmark.
//!
//! Starts a fast in-process mock upstream ([`mock`]) and the real `respgw` binary in front of it
//! ([`gateway`]), then measures in one run, each against a baseline taken in the same run
//! ([`measure`]):
//!
//! - the latency respgw adds to a non-stream `store: true` request (p50/p99, sequential and
//!   concurrent), against streaming the same reply directly from the mock;
//! - SSE throughput: `response.output_text.delta` events/s through respgw against content
//!   chunks/s read directly;
//! - SSE throughput again with clients that parse every event's JSON, as real clients do;
//! - worker scaling: requests/s (non-stream, `store: false`) and SSE events/s from many
//!   keep-alive connections through `--gateway-workers 1` and then `--gateway-workers N`, with
//!   where the machine's cores went ([`scaling`], against the out-of-process mock [`fastmock`]);
//! - continuation cost by history depth (1, 10, 50 responses) on SQLite and on PostgreSQL
//!   ([`continuation`]), each depth against depth 1;
//! - the added p50 of a background stream (`background: true`, its events logged in the store)
//!   over a plain streamed `store: true` request, on SQLite and on PostgreSQL ([`background`]);
//! - what one Redis-backed tenant limit adds per request (`--redis-url`), in p50 latency and
//!   respgw's CPU, against the same run without limits (and the same limit counted in the
//!   gateway's shared memory) ([`limits`]);
//! - respgw's resident memory with many streams open at once: 1,000 through one worker, and
//!   10,000 through N workers (the mock in its own process, for the open-files limit).
//!
//! respgw's CPU per request, CPU per delta, memory per open stream, concurrency-8 latency and
//! one-stream SSE rate also get a second baseline: the same measurement through the bare proxy
//! floor ([`floor`]), a gateway that does only what any Responses gateway on this stack must, run
//! and measured as respgw is. Its figures show how much of respgw's cost is the stack's, and
//! whether a target is reachable on it at all.
//!
//! `--limits` runs only the limit rows; `--retrieval` runs only the retrieval benchmark instead ([`retrieval`]): vector-store search
//! over 100,000 chunks on SQLite against the raw vector scan, and ingestion against the
//! embedder's own rate.
//!
//! It prints a table with ratios and the targets, and exits 0 whatever the numbers say
//! (the numbers are the output); it fails only when something breaks. Loopback only; every loop
//! is bounded in count and time. Run it through `scripts/bench`.

mod background;
mod continuation;
mod fastmock;
mod floor;
mod gateway;
mod limits;
mod load;
mod measure;
mod mock;
mod rawhttp;
mod retrieval;
mod scaling;
mod sse;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;

use crate::fastmock::MockProcess;
use crate::gateway::Gateway;
use crate::measure::{LatencyResult, MemoryResult, Targets};
use crate::mock::MockUpstream;
use crate::scaling::{Load, ScalingRun};

/// Targets. Latency a lone request adds (sequential, store:true).
const TARGET_ADDED_P50_MS: f64 = 0.5;
const TARGET_ADDED_P99_MS: f64 = 2.0;
/// Latency added at `--concurrency` (8) concurrent non-stream store:true requests.
const TARGET_CONCURRENT_ADDED_P50_MS: f64 = 1.0;
const TARGET_CONCURRENT_ADDED_P99_MS: f64 = 3.0;
/// respgw CPU per non-stream request, with and without the store write.
const TARGET_CPU_PER_STORED_REQUEST_US: f64 = 100.0;
const TARGET_CPU_PER_UNSTORED_REQUEST_US: f64 = 50.0;
/// respgw CPU per streamed delta, with one stream and with `--stream-concurrency` (16).
const TARGET_CPU_PER_DELTA_US: f64 = 2.0;
/// SSE events/s through respgw against content chunks/s read directly (one stream).
const TARGET_SSE_RATIO: f64 = 0.90;
/// CPU per request and per delta at N workers within this fraction of 1 worker's.
const TARGET_WORKER_CPU_DRIFT: f64 = 0.10;
/// The big memory test: total RSS with every stream open, RSS per open stream, and RSS
/// `--settle-seconds` after they closed against idle.
const TARGET_BIG_RSS_BYTES: f64 = 300e6;
const TARGET_KIB_PER_STREAM: f64 = 24.0;
const TARGET_AFTER_CLOSE_RATIO: f64 = 2.0;
const TARGET_DEPTH_RATIO: f64 = 1.3;
/// What one Redis-backed limit may add per request: respgw CPU and p50 latency.
const TARGET_REDIS_LIMIT_CPU_US: f64 = 30.0;
const TARGET_REDIS_LIMIT_P50_MS: f64 = 0.2;
/// History depths of the continuation test; the last is held to [`TARGET_DEPTH_RATIO`] x the first.
const DEPTHS: [usize; 3] = [1, 10, 50];

/// Command line.
#[derive(Parser)]
#[command(
    name = "respgw-bench",
    about = "Benchmark respgw against a fast mock upstream: added latency, SSE throughput, RSS"
)]
struct Cli {
    /// The respgw binary to benchmark (a release build).
    #[arg(long, default_value = "target/release/respgw")]
    respgw: PathBuf,

    /// Measured requests per side in the latency tests (after the warm-up).
    #[arg(long, default_value_t = 2000)]
    requests: usize,

    /// Warm-up requests per side before the sequential latency test.
    #[arg(long, default_value_t = 200)]
    warmup: usize,

    /// Content deltas in each latency-test reply.
    #[arg(long, default_value_t = 1)]
    latency_deltas: usize,

    /// Workers in the concurrent latency test (0 skips it).
    #[arg(long, default_value_t = 8)]
    concurrency: usize,

    /// Short streams per side in the streaming latency test (0 skips it).
    #[arg(long, default_value_t = 100)]
    stream_requests: usize,

    /// Content deltas per stream in the SSE throughput test.
    #[arg(long, default_value_t = 20_000)]
    stream_deltas: usize,

    /// Rounds per side in the SSE throughput tests.
    #[arg(long, default_value_t = 5)]
    stream_runs: usize,

    /// Concurrent streams in the second SSE throughput test (0 skips it).
    #[arg(long, default_value_t = 16)]
    stream_concurrency: usize,

    /// Streams held open at once in the memory test (0 skips it).
    #[arg(long, default_value_t = 1000)]
    open_streams: usize,

    /// Extra argument for `respgw serve` (repeatable), e.g. `--respgw-arg=--gateway-workers=2`.
    #[arg(long = "respgw-arg", value_name = "ARG", allow_hyphen_values = true)]
    respgw_args: Vec<String>,

    /// Longest wait, in seconds, for the memory test's streams to open (and to finish).
    #[arg(long, default_value_t = 60)]
    open_timeout: u64,

    /// Seconds after the memory tests' streams closed before respgw's RSS is read again.
    #[arg(long, default_value_t = 10.0)]
    settle_seconds: f64,

    /// Worker processes compared with one in the scaling test (0 skips it).
    #[arg(long, default_value_t = 2)]
    scaling_workers: usize,

    /// Keep-alive connections of the scaling test's non-stream load.
    #[arg(long, default_value_t = 32)]
    scaling_conns: usize,

    /// Content deltas in each of the scaling test's non-stream replies.
    #[arg(long, default_value_t = 16)]
    scaling_deltas: usize,

    /// Measured seconds of the scaling test's non-stream load (after 1 s of warm-up).
    #[arg(long, default_value_t = 5.0)]
    scaling_seconds: f64,

    /// Concurrent streams of the scaling test's SSE load (0 skips it).
    #[arg(long, default_value_t = 16)]
    scaling_stream_conns: usize,

    /// Content deltas per stream in the scaling test's SSE load.
    #[arg(long, default_value_t = 256)]
    scaling_stream_deltas: usize,

    /// Measured seconds of the scaling test's SSE load (after 1 s of warm-up).
    #[arg(long, default_value_t = 3.0)]
    scaling_stream_seconds: f64,

    /// Streams held open at once in the big memory test (0 skips it).
    #[arg(long, default_value_t = 10_000)]
    big_streams: usize,

    /// Worker processes of respgw in the big memory test.
    #[arg(long, default_value_t = 2)]
    big_streams_workers: usize,

    /// Measured continuations per history depth and backend (0 skips the continuation test).
    #[arg(long, default_value_t = 200)]
    continuation_rounds: usize,

    /// Measured streams per kind (plain, background) and backend in the background test (0 skips
    /// it).
    #[arg(long, default_value_t = 200)]
    background_rounds: usize,

    /// Content deltas per stream in the background test.
    #[arg(long, default_value_t = 16)]
    background_deltas: usize,

    /// Requests per side in the Redis-limit test (0 skips it).
    #[arg(long, default_value_t = 1000)]
    limit_rounds: usize,

    /// The Redis of the Redis-limit test (its keys are `respgw:limits:{default}:…`); empty skips
    /// the test.
    #[arg(long, env = "RESPGW_BENCH_REDIS_URL", default_value = "redis://127.0.0.1:6379/0")]
    redis_url: String,

    /// PostgreSQL server for the continuation and background tests (a fresh schema is created and dropped);
    /// empty skips the PostgreSQL rows.
    #[arg(long, env = "RESPGW_BENCH_POSTGRES_URL", default_value = "postgres://postgres@127.0.0.1:5432/test")]
    postgres_url: String,

    /// Also measure the bare proxy floor (see `floor.rs`), as the baseline of respgw's CPU and
    /// memory rows.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    floor_proxy: bool,

    /// Quicker run: skips the big memory test and shortens the scaling test's windows.
    #[arg(long)]
    quick: bool,

    /// Run only the load test (`scripts/load`): `--load-clients` concurrent SSE streams for
    /// `--load-seconds` through `--load-workers` workers, 0 errors expected.
    #[arg(long)]
    load: bool,

    /// Concurrent streams of the load test.
    #[arg(long, default_value_t = 1000)]
    load_clients: usize,

    /// Seconds of the load test.
    #[arg(long, default_value_t = 60)]
    load_seconds: u64,

    /// respgw workers in the load test.
    #[arg(long, default_value_t = 2)]
    load_workers: usize,

    /// Content deltas per stream in the load test.
    #[arg(long, default_value_t = 32)]
    load_deltas: usize,

    /// Run only the limit rows (see `limits.rs`): what a tenant limit counted in Redis, or in
    /// shared memory, adds per request against the same requests without limits.
    #[arg(long)]
    limits: bool,

    /// Run only the retrieval benchmark (see `retrieval.rs`): search over a SQLite vector store
    /// and ingestion against a mock embedder.
    #[arg(long)]
    retrieval: bool,

    /// Chunks (384 dimensions) in the retrieval benchmark's search store.
    #[arg(long, default_value_t = 100_000)]
    retrieval_chunks: usize,

    /// Measured searches of the retrieval benchmark (after one cold search).
    #[arg(long, default_value_t = 200)]
    retrieval_searches: usize,

    /// Files (about 4,000 tokens each) ingested by the retrieval benchmark.
    #[arg(long, default_value_t = 50)]
    retrieval_ingest_files: usize,

    /// Internal: run only the out-of-process mock upstream (see `fastmock`).
    #[arg(long, hide = true)]
    serve_mock: bool,

    /// Internal: run only the floor proxy in front of `--floor-upstream` (see `floor`).
    #[arg(long, hide = true, requires = "floor_upstream")]
    serve_floor_proxy: bool,

    /// Internal: the floor proxy's upstream base URL, `/v1` included.
    #[arg(long, hide = true)]
    floor_upstream: Option<String>,
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    if cli.serve_mock {
        return fastmock::serve_main(Duration::from_secs(cli.open_timeout.max(1)));
    }
    if let (true, Some(upstream)) = (cli.serve_floor_proxy, &cli.floor_upstream) {
        return floor::serve_main(upstream);
    }
    if cli.quick {
        cli.big_streams = 0;
        cli.scaling_seconds = cli.scaling_seconds.min(2.0);
        cli.scaling_stream_seconds = cli.scaling_stream_seconds.min(1.5);
    }
    // reqwest is built with `rustls-no-provider`: building a client needs a process-wide
    // crypto provider even for plain-HTTP use.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("respgw-bench: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = if cli.load {
        runtime.block_on(run_load(cli))
    } else if cli.retrieval {
        runtime.block_on(run_retrieval(cli))
    } else if cli.limits {
        runtime.block_on(run_limits(cli))
    } else {
        runtime.block_on(run(cli))
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("respgw-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The load test alone; fails when any stream failed.
async fn run_load(cli: Cli) -> anyhow::Result<()> {
    let limit = gateway::raise_open_files_limit()?;
    let needed = (2 * cli.load_clients + 256) as u64;
    if limit < needed {
        bail!("the open-files limit is {limit}, the load test needs about {needed}: raise it (`ulimit -Hn`)");
    }
    progress(&format!(
        "load: {} concurrent SSE streams ({} deltas, store:true) for {} s through {} workers",
        cli.load_clients, cli.load_deltas, cli.load_seconds, cli.load_workers
    ));
    let r = load::run(
        &cli.respgw,
        &cli.respgw_args,
        cli.load_clients,
        cli.load_workers,
        Duration::from_secs(cli.load_seconds),
        cli.load_deltas,
    )
    .await?;
    println!();
    println!("| load: {} concurrent SSE streams, {} s, {} workers | value |", r.clients, r.window.as_secs(), r.workers);
    println!("|---|---|");
    println!(
        "| streams completed | {} ({:.0}/s) |",
        r.streams - r.errors,
        (r.streams - r.errors) as f64 / r.window.as_secs_f64()
    );
    println!("| errors | {} |", r.errors);
    println!(
        "| time to first delta p50 / p99 | {:.1} ms / {:.1} ms |",
        percentile_ms(&r.first_delta, 50.0),
        percentile_ms(&r.first_delta, 99.0)
    );
    println!(
        "| whole stream p50 / p99 | {:.1} ms / {:.1} ms |",
        percentile_ms(&r.end, 50.0),
        percentile_ms(&r.end, 99.0)
    );
    println!(
        "| respgw RSS, {} processes: peak / at the end | {:.0} MB / {:.0} MB |",
        r.processes,
        r.peak_rss_kib as f64 * 1024.0 / 1e6,
        r.end_rss_kib as f64 * 1024.0 / 1e6
    );
    for sample in &r.error_samples {
        println!("error: {sample}");
    }
    if r.errors > 0 {
        bail!("{} of {} streams failed", r.errors, r.streams);
    }
    Ok(())
}

/// The retrieval benchmark alone.
async fn run_retrieval(cli: Cli) -> anyhow::Result<()> {
    let r = retrieval::run(cli.retrieval_chunks, cli.retrieval_searches.max(1), cli.retrieval_ingest_files.max(1))
        .await
        .context("retrieval benchmark")?;
    let (p50, p95) = (percentile_ms(&r.searches, 50.0), percentile_ms(&r.searches, 95.0));
    let (scan50, scan95) = (percentile_ms(&r.scans, 50.0), percentile_ms(&r.scans, 95.0));
    let ingest_rate = r.ingest_chunks as f64 / r.ingest_time.as_secs_f64();
    println!();
    println!(
        "| retrieval (SQLite, {} chunks x 384 dims, filled in {:.1} s) | measured | baseline | ratio | target | verdict |",
        r.chunks,
        r.fill.as_secs_f64()
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| hybrid search p50 (baseline: the raw dot-product scan) | {p50:.2} ms | {scan50:.2} ms | {:.1}x | <= {:.0} ms | {} |",
        p50 / scan50,
        retrieval::TARGET_SEARCH_P50_MS,
        verdict(p50 <= retrieval::TARGET_SEARCH_P50_MS)
    );
    println!("| hybrid search p95 | {p95:.2} ms | {scan95:.2} ms | {:.1}x | - | info |", p95 / scan95);
    println!(
        "| the store's lexical search alone (BM25, 50 hits) p50 / p95 | {:.2} ms / {:.2} ms | - | - | - | info |",
        percentile_ms(&r.lexical, 50.0),
        percentile_ms(&r.lexical, 95.0)
    );
    /// Reads one stage's time.
    type Stage = fn(&respgw_retrieval::SearchStages) -> Duration;
    let stages: [(&str, Stage); 8] = [
        ("ownership, generations, searchable files", |s| s.checks),
        ("marking the stores active (skipped within 60 s)", |s| s.touch),
        ("lexical search (BM25)", |s| s.lexical),
        ("query embedding (alongside the lexical search)", |s| s.embedding),
        ("reading vectors the cache lacks", |s| s.vector_reads),
        ("vector scan (alongside the lexical search)", |s| s.scan),
        ("fusion", |s| s.fusion),
        ("chunk fetch and grouping", |s| s.fetch),
    ];
    for (name, stage) in stages {
        let times: Vec<Duration> = r.stages.iter().map(stage).collect();
        println!(
            "| stage: {name} p50 / p95 | {:.2} ms / {:.2} ms | - | - | - | info |",
            percentile_ms(&times, 50.0),
            percentile_ms(&times, 95.0)
        );
    }
    println!(
        "| first (cold) search, vectors read from the store | {:.1} ms | - | - | - | info |",
        r.cold_search.as_secs_f64() * 1e3
    );
    println!(
        "| ingestion, {} chunks (baseline: the mock embedder's own rate) | {ingest_rate:.0} chunks/s | {:.0} chunks/s | {:.2} | >= {:.0} chunks/s | {} |",
        r.ingest_chunks,
        r.embedder_chunks_per_s,
        ingest_rate / r.embedder_chunks_per_s,
        retrieval::TARGET_INGEST_CHUNKS_PER_S,
        verdict(ingest_rate >= retrieval::TARGET_INGEST_CHUNKS_PER_S)
    );
    println!(
        "| gateway time per ingested chunk | {:.0} us | {:.0} us (embedder) | - | - | info |",
        1e6 / ingest_rate,
        1e6 / r.embedder_chunks_per_s
    );
    Ok(())
}

/// Run every measurement and print the table.
async fn run(cli: Cli) -> anyhow::Result<()> {
    check_open_files(cli.open_streams, cli.big_streams, cli.big_streams_workers)?;
    let started = Instant::now();
    let busy_before = scaling::machine_busy(Duration::from_millis(500)).await?;
    if busy_before > 0.2 {
        progress(&format!("warning: the machine is already busy ({busy_before:.2} cores): the numbers will be noisy"));
    }
    let limit = Duration::from_secs(cli.open_timeout.max(1));
    let mock = MockUpstream::start(limit * 2).await?;
    let mut table = Table::default();

    let mut gw = Gateway::start(&cli.respgw, &mock.base_url(), &cli.respgw_args).await?;
    let targets = Targets::new(&mock, &gw);
    progress(&format!("respgw {} (pid {}) in front of mock {}", gw.base_url(), gw.pid(), mock.base_url()));

    progress(&format!("latency: {} warm-up + {} measured sequential requests per side", cli.warmup, cli.requests));
    let seq = measure::latency_sequential(&targets, &mut gw, cli.latency_deltas, cli.warmup, cli.requests, true)
        .await
        .context("sequential latency test")?;
    gw.check_alive().await?;
    table.latency("sequential", &seq, Some((TARGET_ADDED_P50_MS, TARGET_ADDED_P99_MS)), false);

    // The same without the store write: how much of the added latency is the store's.
    let unstored_requests = cli.requests / 2;
    let unstored = if unstored_requests > 0 {
        progress(&format!("latency: {unstored_requests} sequential store:false requests per side"));
        let r = measure::latency_sequential(
            &targets,
            &mut gw,
            cli.latency_deltas,
            cli.warmup / 2,
            unstored_requests,
            false,
        )
        .await
        .context("sequential store:false latency test")?;
        gw.check_alive().await?;
        table.latency("seq., store:false", &r, None, false);
        Some(r)
    } else {
        None
    };

    let conc = if cli.concurrency > 0 {
        progress(&format!("latency: {} requests per side from {} concurrent workers", cli.requests, cli.concurrency));
        let r = measure::latency_concurrent(&targets, &mut gw, cli.latency_deltas, cli.concurrency, cli.requests)
            .await
            .context("concurrent latency test")?;
        gw.check_alive().await?;
        let at = table.latency(
            &format!("concurrency {}", cli.concurrency),
            &r,
            Some((TARGET_CONCURRENT_ADDED_P50_MS, TARGET_CONCURRENT_ADDED_P99_MS)),
            true,
        );
        Some((r, at))
    } else {
        None
    };

    if cli.stream_requests > 0 {
        progress(&format!(
            "streaming latency: {} short streams ({} delta(s)) per side",
            cli.stream_requests, cli.latency_deltas
        ));
        let r = measure::stream_latency(&targets, cli.latency_deltas, cli.stream_requests)
            .await
            .context("streaming latency test")?;
        gw.check_alive().await?;
        for (label, direct, through) in [
            ("SSE time to first delta", &r.direct_first, &r.gateway_first),
            ("SSE time to stream end", &r.direct_end, &r.gateway_end),
        ] {
            for p in [50.0, 99.0] {
                let (d, g) = (percentile_ms(direct, p), percentile_ms(through, p));
                table.row(Row {
                    metric: format!("{label} p{p:.0}"),
                    direct: format!("{d:.3} ms"),
                    respgw: format!("{g:.3} ms"),
                    delta: format!("{:+.3} ms", g - d),
                    target: "-".into(),
                    verdict: "info",
                    note: String::new(),
                });
            }
        }
    }

    // (streams, parse, result) of every SSE rate measurement; their rows follow the floor's run.
    let mut rates = Vec::new();
    let mut levels = vec![1];
    if cli.stream_concurrency > 1 {
        levels.push(cli.stream_concurrency);
    }
    // First with clients that only split and count frames (the client costs nearly nothing, so
    // the ratio is respgw's raw event rate against the mock's), then with clients that also
    // parse every event's JSON, as real clients do (like for like on both sides).
    for parse in [false, true] {
        for &streams in &levels {
            let how = if parse { ", client parses every event" } else { "" };
            progress(&format!(
                "SSE throughput: {} rounds of {streams} stream(s) x {} deltas per side{how}",
                cli.stream_runs, cli.stream_deltas
            ));
            let r =
                measure::sse_throughput(&targets, &mut gw, cli.stream_deltas, streams, cli.stream_runs.max(1), parse)
                    .await
                    .with_context(|| format!("SSE throughput test ({streams} streams{how})"))?;
            gw.check_alive().await?;
            rates.push((streams, parse, r));
        }
    }
    gw.stop().await?;

    // Time the run spends on the floor proxy alone, for the footer.
    let mut floor_time = Duration::ZERO;
    let floor_cpu = if cli.floor_proxy {
        let floor_started = Instant::now();
        let cpu = floor_cpu(&cli, &mock).await?;
        floor_time += floor_started.elapsed();
        Some(cpu)
    } else {
        None
    };

    if let (Some((_, at)), Some(floor)) = (&conc, floor_cpu.as_ref().and_then(|f| f.concurrent.as_ref())) {
        table.floor_latency(*at, floor, (TARGET_CONCURRENT_ADDED_P50_MS, TARGET_CONCURRENT_ADDED_P99_MS));
    }
    for &(streams, parse, ref r) in &rates {
        // The target is held by the one-stream rows only.
        let single = streams == 1;
        let how = if parse { ", client parses every event" } else { "" };
        let ratio = r.gateway_per_s / r.direct_per_s;
        let note = if parse && single {
            "both clients: serde_json::from_slice::<Value> per data: line".into()
        } else if let (false, true, Some(floor)) = (parse, single, &floor_cpu) {
            let mut note = format!("the floor proxy's rate: {:.1} % of the mock's", floor.delta_rate_ratio * 100.0);
            if floor.delta_rate_ratio < TARGET_SSE_RATIO && ratio < TARGET_SSE_RATIO {
                note.push_str("; the floor alone is below the target");
            }
            note
        } else {
            String::new()
        };
        table.row(Row {
            metric: format!("SSE deltas/s, {streams} stream(s){how}"),
            direct: format!("{:.0}", r.direct_per_s),
            respgw: format!("{:.0}", r.gateway_per_s),
            delta: format!("{:.1} %", ratio * 100.0),
            target: if single { format!(">= {:.0} %", TARGET_SSE_RATIO * 100.0) } else { "-".into() },
            verdict: if single { verdict(ratio >= TARGET_SSE_RATIO) } else { "info" },
            note,
        });
    }

    if cli.continuation_rounds > 0 {
        continuation_rows(&cli, &mock, &mut table).await?;
    }
    if cli.background_rounds > 0 {
        background_rows(&cli, &mock, &mut table).await?;
    }
    if cli.limit_rounds > 0 && !cli.redis_url.is_empty() {
        limit_rows(&cli, &mock, &mut table).await?;
    }

    table.row(
        Row::at_most("respgw CPU per request (seq)", seq.gateway_cpu_us, TARGET_CPU_PER_STORED_REQUEST_US, "us")
            .against_floor(
                floor_cpu.as_ref().map(|f| f.stored),
                seq.gateway_cpu_us,
                TARGET_CPU_PER_STORED_REQUEST_US,
                "us",
            )
            .with_sqlite_share(seq.sqlite_cpu_us),
    );
    if let Some(r) = &unstored {
        table.row(
            Row::at_most(
                "respgw CPU per request (seq, store:false)",
                r.gateway_cpu_us,
                TARGET_CPU_PER_UNSTORED_REQUEST_US,
                "us",
            )
            .against_floor(
                floor_cpu.as_ref().and_then(|f| f.unstored),
                r.gateway_cpu_us,
                TARGET_CPU_PER_UNSTORED_REQUEST_US,
                "us",
            ),
        );
    }
    if let Some((c, _)) = &conc {
        table.row(
            Row::info(&format!("respgw CPU per request (c{})", cli.concurrency), format!("{:.0} us", c.gateway_cpu_us))
                .with_sqlite_share(c.sqlite_cpu_us),
        );
    }
    for (streams, _, r) in rates.iter().filter(|(_, parse, _)| !parse) {
        let floor = floor_cpu.as_ref().map(|f| f.per_delta).filter(|_| *streams == 1);
        table.row(
            Row::at_most(
                &format!("respgw CPU per SSE delta ({streams} str.)"),
                r.gateway_cpu_us,
                TARGET_CPU_PER_DELTA_US,
                "us",
            )
            .against_floor(floor, r.gateway_cpu_us, TARGET_CPU_PER_DELTA_US, "us"),
        );
    }

    // The out-of-process mock: for the scaling test (cheap, CPU measured on its own) and the
    // big memory test (its sockets do not count against this process's open-files limit).
    let fast_mock = if cli.scaling_workers > 0 || cli.big_streams > 0 {
        let m = MockProcess::start(limit * 2).await.context("cannot start the mock upstream process")?;
        progress(&format!("out-of-process mock upstream {} (pid {})", m.base_url(), m.pid()));
        Some(m)
    } else {
        None
    };
    if let (Some(fast_mock), n) = (&fast_mock, cli.scaling_workers)
        && n > 0
    {
        scaling_rows(&cli, fast_mock, &mut table).await?;
    }

    if cli.open_streams > 0 {
        // A fresh gateway, so that "idle" means idle and earlier tests' allocations don't hide
        // the per-stream cost.
        let mut gw = Gateway::start(&cli.respgw, &mock.base_url(), &cli.respgw_args).await?;
        progress(&format!("memory: {} streams held open through a fresh respgw (pid {})", cli.open_streams, gw.pid()));
        let settle = Duration::from_secs_f64(cli.settle_seconds.max(0.0));
        let m = measure::memory(&mock, &mut gw, cli.open_streams, limit).await.context("memory test")?;
        let after_kib = measure::rss_after(&mut gw, settle).await?;
        gw.stop().await?;
        let floor = if cli.floor_proxy {
            let floor_started = Instant::now();
            let mut floor = Gateway::start_floor(&mock.base_url()).await?;
            progress(&format!(
                "memory: {} streams held open through a fresh floor proxy (pid {})",
                cli.open_streams,
                floor.pid()
            ));
            let f = measure::memory(&mock, &mut floor, cli.open_streams, limit)
                .await
                .context("memory test, floor proxy")?;
            floor.stop().await?;
            floor_time += floor_started.elapsed();
            Some(f)
        } else {
            None
        };
        table.row(Row::info(
            &format!("respgw RSS idle ({} processes, warmed)", m.processes),
            format!("{:.1} MiB", m.idle_kib as f64 / 1024.0),
        ));
        let per_stream = m.kib_per_stream();
        table.row(Row {
            metric: format!("respgw RSS, {} open streams", m.streams),
            direct: floor.as_ref().map_or("-".into(), |f| format!("+{:.1} KiB/stream", f.kib_per_stream())),
            respgw: format!("{:.1} MiB", m.open_kib as f64 / 1024.0),
            delta: format!("+{per_stream:.1} KiB/stream"),
            target: "-".into(),
            verdict: "info",
            note: floor.as_ref().map_or_else(String::new, |f| {
                format!(
                    "baseline: the floor's RSS per open stream ({:.1} MiB idle, {:.1} MiB open); respgw/floor {:.1}x",
                    f.idle_kib as f64 / 1024.0,
                    f.open_kib as f64 / 1024.0,
                    per_stream / f.kib_per_stream()
                )
            }),
        });
        table.row(Row::info(
            &format!("respgw RSS {} s after they closed", cli.settle_seconds),
            format!("{:.1} MiB", after_kib as f64 / 1024.0),
        ));
        table.row(Row::info(
            &format!("time to open {} streams", m.streams),
            format!("{:.0} ms", m.open_time.as_secs_f64() * 1e3),
        ));
        table.row(Row::info(
            &format!("time for {} to finish after release", m.streams),
            format!("{:.0} ms", m.finish_time.as_secs_f64() * 1e3),
        ));
    }

    if let Some(fast_mock) = fast_mock {
        if cli.big_streams > 0 {
            floor_time += big_memory_rows(&cli, &fast_mock, &mut table).await?;
        }
        fast_mock.stop().await?;
    }

    println!();
    table.print();
    println!(
        "\n(latency: non-stream store:true through respgw vs streaming the same reply directly; \
         `added` = respgw - direct. SSE deltas/s: client-counted content deltas per second from \
         the first delta to the last.{}{} {} cores, {:.2} of them busy with other processes before \
         the run; total {:.0} s.)",
        if cli.floor_proxy {
            format!(
                " respgw CPU per request and per SSE delta (1 stream), RSS per open stream and after \
                 close: the baseline is the bare proxy floor (`respgw-bench --serve-floor-proxy`: \
                 axum, serde_json and a pooled reqwest client on one current-thread runtime, \
                 none of respgw's logic), its own process, measured the same way in this run; the \
                 note gives respgw/floor and says when the floor alone misses the target. The notes \
                 of the concurrency-8 latency rows and the one-stream SSE rate row give the floor's \
                 figure from the same test. The floor took {:.0} s of the run.",
                floor_time.as_secs_f64()
            )
        } else {
            String::new()
        },
        if cli.scaling_workers > 0 {
            format!(
                " Worker-scaling rows (`@1w`, `@{}w`): the baseline is respgw with 1 worker, both in \
                 front of the out-of-process mock; `cores` = CPU seconds per second over the measured \
                 window (/proc/*/stat), `other` = machine busy time (/proc/stat) not in respgw, mock \
                 or bench.",
                cli.scaling_workers
            )
        } else {
            String::new()
        },
        scaling::machine_cpus(),
        busy_before,
        started.elapsed().as_secs_f64(),
    );
    Ok(())
}

/// Raise the open-files limit, and fail early, with the fix, if it is still too low for the
/// memory tests. The 1,000-stream test: this process holds two sockets per stream (client and
/// in-process mock side) and so does respgw. The big test: this process holds the client
/// sockets, the mock process the upstream ones, and each of respgw's workers both sides of its
/// share (all three inherit this limit).
fn check_open_files(streams: usize, big: usize, big_workers: usize) -> anyhow::Result<()> {
    let limit = gateway::raise_open_files_limit()?;
    let needed = (2 * streams + 256) as u64;
    if streams > 0 && limit < needed {
        bail!(
            "the open-files limit is {limit}, the memory test needs about {needed}: raise the hard \
             limit (`ulimit -Hn`), or pass --open-streams {}",
            limit.saturating_sub(256) / 2
        );
    }
    // SO_REUSEPORT spreads connections by hash: allow a worker 10 % more than its share.
    let per_worker = (2 * big).div_ceil(big_workers.max(1)) * 11 / 10;
    let needed = (big.max(per_worker) + 256) as u64;
    if big > 0 && limit < needed {
        bail!(
            "the open-files limit is {limit}, the {big}-stream memory test needs about {needed} per \
             process: raise the hard limit (`ulimit -Hn`), or pass --big-streams N (or --quick to \
             skip it)"
        );
    }
    Ok(())
}

/// `args` without any `--gateway-workers` of the user's, plus `--gateway-workers <n>`.
fn with_workers(args: &[String], n: usize) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len() + 2);
    let mut skip_value = false;
    for a in args {
        if skip_value {
            skip_value = false;
        } else if a == "--gateway-workers" {
            skip_value = true;
        } else if !a.starts_with("--gateway-workers=") {
            out.push(a.clone());
        }
    }
    out.extend(["--gateway-workers".to_owned(), n.to_string()]);
    out
}

/// The worker-scaling test: the same loads through respgw with 1 worker, then (a fresh instance)
/// with `cli.scaling_workers`, both in front of the out-of-process mock.
/// The stores a per-backend test runs on, each with its `--db-path` (`None`: the gateway's own
/// SQLite file): SQLite, and PostgreSQL in a schema of its own when `--postgres-url` names a
/// server that lets the bench make one (the caller drops it when done). `test` names the test in
/// the line that says PostgreSQL was skipped.
async fn bench_backends(
    cli: &Cli,
    test: &str,
) -> anyhow::Result<(Option<continuation::BenchSchema>, Vec<(&'static str, Option<String>)>)> {
    let schema = if cli.postgres_url.is_empty() {
        None
    } else {
        match continuation::BenchSchema::create(&cli.postgres_url).await {
            Ok(schema) => Some(schema),
            Err(e) => {
                progress(&format!("{test}: PostgreSQL rows skipped: {e:#}"));
                None
            }
        }
    };
    let mut backends = vec![("SQLite", None)];
    if let Some(schema) = &schema {
        backends.push(("PostgreSQL", Some(schema.url()?)));
    }
    Ok((schema, backends))
}

/// Continuation cost by depth on each backend: p50 per depth, and its ratio to depth 1.
async fn continuation_rows(cli: &Cli, mock: &MockUpstream, table: &mut Table) -> anyhow::Result<()> {
    let (schema, backends) = bench_backends(cli, "continuation").await?;
    for (backend, db) in backends {
        progress(&format!("continuation on {backend}: {} continuations per depth {DEPTHS:?}", cli.continuation_rounds));
        let mut gw = Gateway::start_on(&cli.respgw, &mock.base_url(), &cli.respgw_args, db.as_deref()).await?;
        let results = continuation::measure(gw.base_url(), &DEPTHS, cli.continuation_rounds)
            .await
            .with_context(|| format!("continuation test on {backend}"))?;
        gw.check_alive().await?;
        gw.stop().await?;
        let base = percentile_ms(&results[0].latencies, 50.0);
        for (i, r) in results.iter().enumerate() {
            let p50 = percentile_ms(&r.latencies, 50.0);
            let ratio = p50 / base;
            let last = i == results.len() - 1;
            table.row(Row {
                metric: format!("continuation p50, depth {} ({backend})", r.depth),
                direct: "-".into(),
                respgw: format!("{p50:.3} ms"),
                delta: format!("{ratio:.2}x depth {}", results[0].depth),
                target: if last { format!("<= {TARGET_DEPTH_RATIO:.1}x") } else { "-".into() },
                verdict: if last { verdict(ratio <= TARGET_DEPTH_RATIO) } else { "info" },
                note: format!("p99 {:.3} ms", percentile_ms(&r.latencies, 99.0)),
            });
        }
    }
    if let Some(schema) = schema {
        schema.drop_now().await.context("cannot drop the bench schema")?;
    }
    Ok(())
}

/// The background test on each backend: p50 of a plain and of a background stream, and the
/// difference.
async fn background_rows(cli: &Cli, mock: &MockUpstream, table: &mut Table) -> anyhow::Result<()> {
    let (schema, backends) = bench_backends(cli, "background").await?;
    for (backend, db) in backends {
        progress(&format!(
            "background on {backend}: {} plain and {} background streams of {} deltas",
            cli.background_rounds, cli.background_rounds, cli.background_deltas
        ));
        let mut gw = Gateway::start_on(&cli.respgw, &mock.base_url(), &cli.respgw_args, db.as_deref()).await?;
        let times = background::measure(gw.base_url(), cli.background_deltas, cli.background_rounds)
            .await
            .with_context(|| format!("background test on {backend}"))?;
        gw.check_alive().await?;
        gw.stop().await?;
        let plain = percentile_ms(&times.plain, 50.0);
        let detached = percentile_ms(&times.background, 50.0);
        table.row(Row {
            metric: format!("background stream p50, {} deltas ({backend})", cli.background_deltas),
            direct: format!("{plain:.3} ms"),
            respgw: format!("{detached:.3} ms"),
            delta: format!("+{:.3} ms", detached - plain),
            target: "-".into(),
            verdict: "info",
            note: format!(
                "direct = plain stream; p99 {:.3} vs {:.3} ms",
                percentile_ms(&times.plain, 99.0),
                percentile_ms(&times.background, 99.0)
            ),
        });
    }
    if let Some(schema) = schema {
        schema.drop_now().await.context("cannot drop the bench schema")?;
    }
    Ok(())
}

/// `--limits`: the limit rows alone, against the in-process mock.
async fn run_limits(cli: Cli) -> anyhow::Result<()> {
    anyhow::ensure!(cli.limit_rounds > 0 && !cli.redis_url.is_empty(), "--limits needs --limit-rounds and --redis-url");
    let mock = MockUpstream::start(Duration::from_secs(cli.open_timeout.max(1)) * 2).await?;
    let mut table = Table::default();
    limit_rows(&cli, &mock, &mut table).await?;
    table.print();
    Ok(())
}

/// The limit test: p50 latency and respgw CPU per request with the tenant's limit counted in
/// Redis (targets: ≤ 30 µs CPU, ≤ 0.2 ms p50 added) and in shared memory, against the same requests without limits.
async fn limit_rows(cli: &Cli, mock: &MockUpstream, table: &mut Table) -> anyhow::Result<()> {
    progress(&format!(
        "limits: {} requests through each of a gateway without limits, one counting in shared memory, one in Redis",
        cli.limit_rounds
    ));
    let cost = limits::measure(&cli.respgw, &mock.base_url(), &cli.respgw_args, &cli.redis_url, cli.limit_rounds)
        .await
        .context("the limit test (is Redis running at --redis-url?)")?;
    let none = percentile_ms(&cost.unlimited.latencies, 50.0);
    let note = "direct = the same requests without limits; non-stream store:false, 1 worker";
    for (name, side, target) in [("Redis", &cost.redis, true), ("shared-memory", &cost.local, false)] {
        let p50 = percentile_ms(&side.latencies, 50.0);
        let added_p50 = p50 - none;
        table.row(Row {
            metric: format!("{name} limit: added p50 per request"),
            direct: format!("{none:.3} ms"),
            respgw: format!("{p50:.3} ms"),
            delta: format!("{added_p50:+.3} ms"),
            target: if target { format!("<= {TARGET_REDIS_LIMIT_P50_MS} ms") } else { "-".into() },
            verdict: if target { verdict(added_p50 <= TARGET_REDIS_LIMIT_P50_MS) } else { "info" },
            note: note.into(),
        });
        let added_cpu = side.cpu_us - cost.unlimited.cpu_us;
        table.row(Row {
            metric: format!("{name} limit: added respgw CPU per request, one at a time"),
            direct: format!("{:.1} us", cost.unlimited.cpu_us),
            respgw: format!("{:.1} us", side.cpu_us),
            delta: format!("{added_cpu:+.1} us"),
            target: if target { format!("<= {TARGET_REDIS_LIMIT_CPU_US} us") } else { "-".into() },
            verdict: if target { verdict(added_cpu <= TARGET_REDIS_LIMIT_CPU_US) } else { "info" },
            note: "respgw's processes only (not the Redis server's); each Redis wait puts the idle worker to sleep"
                .into(),
        });
        let added_loaded = side.loaded_cpu_us - cost.unlimited.loaded_cpu_us;
        table.row(Row {
            metric: format!("{name} limit: added respgw CPU per request, {} at a time", limits::LOAD_CONCURRENCY),
            direct: format!("{:.1} us", cost.unlimited.loaded_cpu_us),
            respgw: format!("{:.1} us", side.loaded_cpu_us),
            delta: format!("{added_loaded:+.1} us"),
            target: if target { format!("<= {TARGET_REDIS_LIMIT_CPU_US} us") } else { "-".into() },
            verdict: if target { verdict(added_loaded <= TARGET_REDIS_LIMIT_CPU_US) } else { "info" },
            note: "respgw's processes only (not the Redis server's); the same number of requests".into(),
        });
    }
    Ok(())
}

async fn scaling_rows(cli: &Cli, mock: &MockProcess, table: &mut Table) -> anyhow::Result<()> {
    let warmup = Duration::from_secs(1);
    let n = cli.scaling_workers;
    let mut requests: Vec<ScalingRun> = Vec::new();
    let mut events: Vec<ScalingRun> = Vec::new();
    for workers in [1, n] {
        let mut gw = Gateway::start(&cli.respgw, &mock.base_url(), &with_workers(&cli.respgw_args, workers)).await?;
        progress(&format!(
            "scaling: respgw --gateway-workers {workers} (pid {}): {} keep-alive connections, non-stream \
             store:false, {} s",
            gw.pid(),
            cli.scaling_conns,
            cli.scaling_seconds
        ));
        let r = scaling::run(
            &mut gw,
            mock,
            Load::Requests { deltas: cli.scaling_deltas },
            workers,
            cli.scaling_conns.max(1),
            warmup,
            Duration::from_secs_f64(cli.scaling_seconds.max(0.5)),
        )
        .await
        .with_context(|| format!("scaling test, {workers} worker(s), non-stream"))?;
        requests.push(r);
        if cli.scaling_stream_conns > 0 {
            progress(&format!(
                "scaling: respgw --gateway-workers {workers}: {} streams of {} deltas at a time, {} s",
                cli.scaling_stream_conns, cli.scaling_stream_deltas, cli.scaling_stream_seconds
            ));
            let r = scaling::run(
                &mut gw,
                mock,
                Load::Events { deltas: cli.scaling_stream_deltas },
                workers,
                cli.scaling_stream_conns,
                warmup,
                Duration::from_secs_f64(cli.scaling_stream_seconds.max(0.5)),
            )
            .await
            .with_context(|| format!("scaling test, {workers} worker(s), SSE"))?;
            events.push(r);
        }
        gw.stop().await?;
    }
    let what = format!("non-stream store:false, {} conns", cli.scaling_conns);
    scaling_table(table, &format!("requests/s ({what})"), "respgw CPU per request", &requests, n);
    if events.len() == 2 {
        let what = format!("{} streams x {} deltas", cli.scaling_stream_conns, cli.scaling_stream_deltas);
        scaling_table(table, &format!("SSE deltas/s ({what})"), "respgw CPU per SSE delta", &events, n);
    }
    Ok(())
}

/// The rows of one scaling comparison: the rate at 1 worker, at `n` workers (ratio, target), and
/// respgw's CPU per unit at both.
fn scaling_table(table: &mut Table, metric: &str, cpu_metric: &str, runs: &[ScalingRun], n: usize) {
    let [one, many] = runs else { return };
    let ratio = many.rate / one.rate;
    table.row(Row {
        metric: format!("{metric}, 1 -> {n} workers"),
        direct: format!("{:.0} @1w", one.rate),
        respgw: format!("{:.0} @{n}w", many.rate),
        delta: format!("{ratio:.2}x"),
        target: "-".into(),
        verdict: "info",
        note: scaling_note(one, many, n),
    });
    let drift = many.respgw_cpu_us / one.respgw_cpu_us;
    table.row(Row {
        metric: format!("{cpu_metric}, 1 -> {n} workers"),
        direct: format!("{:.1} us", one.respgw_cpu_us),
        respgw: format!("{:.1} us", many.respgw_cpu_us),
        delta: format!("{drift:.2}x"),
        target: format!("{:.2}x - {:.2}x", 1.0 - TARGET_WORKER_CPU_DRIFT, 1.0 + TARGET_WORKER_CPU_DRIFT),
        verdict: verdict((drift - 1.0).abs() <= TARGET_WORKER_CPU_DRIFT),
        note: "process tree".into(),
    });
    let (fewest, most) = (
        many.conns_per_worker.iter().copied().min().unwrap_or(0),
        many.conns_per_worker.iter().copied().max().unwrap_or(0),
    );
    table.row(Row {
        metric: format!("  connections per worker at {n} workers"),
        direct: "-".into(),
        respgw: join(&many.conns_per_worker),
        delta: format!("{} apart", most - fewest),
        target: "<= 1 apart".into(),
        verdict: verdict(most - fewest <= 1),
        note: format!("the kernel's hash alone gave {}", join(&many.natural_per_worker)),
    });
    for (w, r) in [(1, one), (n, many)] {
        table.row(Row {
            metric: format!("  cores used, {w} worker(s)"),
            direct: "-".into(),
            respgw: format!("{:.2}", r.respgw_cores),
            delta: "-".into(),
            target: "-".into(),
            verdict: "info",
            note: format!(
                "machine {:.2}/{} busy: respgw {:.2}, bench client {:.2}, mock {:.2}, other {:.2}",
                r.busy_cores,
                r.cores,
                r.respgw_cores,
                r.bench_cores,
                r.mock_cores,
                r.other_cores()
            ),
        });
    }
}

/// What the reader needs to judge a scaling ratio.
fn scaling_note(one: &ScalingRun, many: &ScalingRun, n: usize) -> String {
    let mut notes = Vec::new();
    let cores = many.cores as f64;
    if many.busy_cores >= 0.9 * cores {
        notes.push(format!(
            "machine saturated: respgw got {:.2} of {} cores at {n} workers, {:.2} at 1",
            many.respgw_cores, many.cores, one.respgw_cores
        ));
    }
    if one.respgw_cores > 1.15 {
        notes.push(format!("1 worker already used {:.2} cores", one.respgw_cores));
    }
    let other = one.other_cores().max(many.other_cores());
    if other > 0.1 {
        notes.push(format!(
            "other processes took up to {other:.2} cores: respgw's share of a contended machine grows \
             with its thread count, so this ratio is not a clean scaling measure"
        ));
    }
    if many.cores < 2 * n {
        notes.push(format!("{} cores shared by respgw, client and mock", many.cores));
    }
    notes.join("; ")
}

fn join(counts: &[usize]) -> String {
    counts.iter().map(usize::to_string).collect::<Vec<_>>().join("/")
}

/// The big memory test: `cli.big_streams` held streams through a fresh respgw with
/// `cli.big_streams_workers` workers, in front of the out-of-process mock; with `--floor-proxy`,
/// first the same through a fresh floor proxy (one process). Returns the time the floor took.
async fn big_memory_rows(cli: &Cli, mock: &MockProcess, table: &mut Table) -> anyhow::Result<Duration> {
    let limit = Duration::from_secs(cli.open_timeout.max(1));
    let settle = Duration::from_secs_f64(cli.settle_seconds.max(0.0));
    let floor_started = Instant::now();
    let floor = if cli.floor_proxy { Some(floor_big_memory(cli, mock, limit, settle).await?) } else { None };
    let floor_time = floor_started.elapsed();

    let workers = cli.big_streams_workers.max(1);
    let mut gw = Gateway::start(&cli.respgw, &mock.base_url(), &with_workers(&cli.respgw_args, workers)).await?;
    progress(&format!(
        "memory: {} streams held open through a fresh respgw --gateway-workers {workers} (pid {})",
        cli.big_streams,
        gw.pid()
    ));
    let m = measure::memory(mock, &mut gw, cli.big_streams, limit).await.context("big memory test")?;
    let after_kib = measure::rss_after(&mut gw, settle).await?;
    gw.stop().await?;
    let floor = match floor {
        Some((f, after)) => Some((f, after.await.context("the floor proxy's RSS task panicked")??)),
        None => None,
    };

    let per_stream = m.kib_per_stream();
    let bytes = m.open_kib as f64 * 1024.0;
    let idle_mib = m.idle_kib as f64 / 1024.0;
    table.row(Row {
        metric: format!("respgw RSS, {} open streams, {workers} workers", m.streams),
        direct: format!("{idle_mib:.1} MiB idle"),
        respgw: format!("{:.1} MiB", m.open_kib as f64 / 1024.0),
        delta: format!("+{per_stream:.1} KiB/stream"),
        target: format!("<= {:.0} MB", TARGET_BIG_RSS_BYTES / 1e6),
        verdict: verdict(bytes <= TARGET_BIG_RSS_BYTES),
        note: format!(
            "{} processes, sum of VmRSS; opened in {:.1} s, finished {:.1} s after release",
            m.processes,
            m.open_time.as_secs_f64(),
            m.finish_time.as_secs_f64()
        ),
    });
    let mut note = "(RSS with every stream open - idle) / streams".to_owned();
    if let Some((f, _)) = &floor {
        note.push_str("; ");
        note.push_str(&floor_note(per_stream, f.kib_per_stream(), TARGET_KIB_PER_STREAM));
        if f.streams != m.streams {
            note.push_str(&format!("; floor: {} streams (open-files limit)", f.streams));
        }
    }
    table.row(Row {
        metric: format!("  respgw RSS per open stream, {} streams", m.streams),
        direct: floor.as_ref().map_or("-".into(), |(f, _)| format!("{:.1} KiB", f.kib_per_stream())),
        respgw: format!("{per_stream:.1} KiB"),
        delta: "-".into(),
        target: format!("<= {TARGET_KIB_PER_STREAM:.0} KiB"),
        verdict: verdict(per_stream <= TARGET_KIB_PER_STREAM),
        note,
    });
    let after_ratio = after_kib as f64 / m.idle_kib.max(1) as f64;
    let (direct, note) = match &floor {
        Some((f, floor_after)) => (
            format!("{:.1} MiB", *floor_after as f64 / 1024.0),
            format!(
                "respgw idle {idle_mib:.1} MiB; baseline: the floor's, {:.1} MiB idle ({:.2}x idle)",
                f.idle_kib as f64 / 1024.0,
                *floor_after as f64 / f.idle_kib.max(1) as f64
            ),
        ),
        None => (format!("{idle_mib:.1} MiB idle"), String::new()),
    };
    table.row(Row {
        metric: format!("  respgw RSS {} s after they closed", cli.settle_seconds),
        direct,
        respgw: format!("{:.1} MiB", after_kib as f64 / 1024.0),
        delta: format!("{after_ratio:.2}x idle"),
        target: format!("<= {TARGET_AFTER_CLOSE_RATIO:.0}x idle"),
        verdict: verdict(after_ratio <= TARGET_AFTER_CLOSE_RATIO),
        note,
    });
    Ok(floor_time)
}

/// The floor proxy's part of the big memory test: `cli.big_streams` held streams (fewer if this
/// process's open-files limit cannot give the floor's one process two sockets per stream)
/// through a fresh floor proxy. Returns what it measured and a task that reads the floor's RSS
/// `settle` after its streams closed and then stops it, so that the wait overlaps respgw's run
/// (the idle floor's RSS does not depend on what else runs).
async fn floor_big_memory(
    cli: &Cli,
    mock: &MockProcess,
    limit: Duration,
    settle: Duration,
) -> anyhow::Result<(MemoryResult, tokio::task::JoinHandle<anyhow::Result<u64>>)> {
    let open_files = gateway::raise_open_files_limit()?;
    let streams = cli.big_streams.min((open_files.saturating_sub(256) / 2) as usize);
    let mut floor = Gateway::start_floor(&mock.base_url()).await?;
    progress(&format!("memory: {streams} streams held open through a fresh floor proxy (pid {})", floor.pid()));
    let m = measure::memory(mock, &mut floor, streams, limit).await.context("big memory test, floor proxy")?;
    let after = tokio::spawn(async move {
        let after = measure::rss_after(&mut floor, settle).await;
        floor.stop().await?;
        after
    });
    Ok((m, after))
}

/// The floor proxy's figures for respgw's CPU rows, each measured as respgw's was.
struct FloorCpu {
    /// CPU per sequential non-stream request, in µs (`store: true` sent; the floor has no store).
    stored: f64,
    /// The same with `store: false` and respgw's smaller count.
    unstored: Option<f64>,
    /// CPU per SSE delta, one stream, in µs.
    per_delta: f64,
    /// Deltas/s through the floor over deltas/s read straight from the mock, one stream, in the
    /// floor's own run of the throughput test.
    delta_rate_ratio: f64,
    /// The concurrent latency test through the floor (when respgw's ran).
    concurrent: Option<LatencyResult>,
}

/// Start a floor proxy in front of `mock` and run the sequential CPU tests, the concurrent latency
/// test and the one-stream SSE throughput test through it, with respgw's counts.
async fn floor_cpu(cli: &Cli, mock: &MockUpstream) -> anyhow::Result<FloorCpu> {
    let mut floor = Gateway::start_floor(&mock.base_url()).await?;
    let targets = Targets::new(mock, &floor);
    progress(&format!(
        "floor proxy {} (pid {}): the sequential and concurrent requests and 1 stream of SSE, as through respgw",
        floor.base_url(),
        floor.pid()
    ));
    let stored = measure::latency_sequential(&targets, &mut floor, cli.latency_deltas, cli.warmup, cli.requests, true)
        .await
        .context("sequential latency test, floor proxy")?
        .gateway_cpu_us;
    let unstored_requests = cli.requests / 2;
    let unstored = if unstored_requests > 0 {
        let r = measure::latency_sequential(
            &targets,
            &mut floor,
            cli.latency_deltas,
            cli.warmup / 2,
            unstored_requests,
            false,
        )
        .await
        .context("sequential store:false latency test, floor proxy")?;
        Some(r.gateway_cpu_us)
    } else {
        None
    };
    let concurrent = if cli.concurrency > 0 {
        let r = measure::latency_concurrent(&targets, &mut floor, cli.latency_deltas, cli.concurrency, cli.requests)
            .await
            .context("concurrent latency test, floor proxy")?;
        Some(r)
    } else {
        None
    };
    let sse = measure::sse_throughput(&targets, &mut floor, cli.stream_deltas, 1, cli.stream_runs.max(1), false)
        .await
        .context("SSE throughput test, floor proxy")?;
    floor.check_alive().await?;
    floor.stop().await?;
    Ok(FloorCpu {
        stored,
        unstored,
        per_delta: sse.gateway_cpu_us,
        delta_rate_ratio: sse.gateway_per_s / sse.direct_per_s,
        concurrent,
    })
}

/// `respgw/floor Nx`, and whether the floor alone misses `target` (all three in one unit).
fn floor_note(respgw: f64, floor: f64, target: f64) -> String {
    let mut note = format!("respgw/floor {:.1}x", respgw / floor);
    if floor > target && respgw > target {
        note.push_str("; the floor alone is above the target");
    }
    note
}

fn progress(msg: &str) {
    eprintln!("respgw-bench: {msg}");
}

fn verdict(pass: bool) -> &'static str {
    if pass { "PASS" } else { "FAIL" }
}

/// Nearest-rank percentile of `samples` (`p` in 0..=100), in milliseconds.
fn percentile_ms(samples: &[Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e3
}

/// One line of the result table.
struct Row {
    metric: String,
    direct: String,
    respgw: String,
    /// Ratio or added amount.
    delta: String,
    target: String,
    verdict: &'static str,
    /// What the reader needs to judge the number.
    note: String,
}

impl Row {
    /// A respgw-only figure held to at most `target`, both in `unit`.
    fn at_most(metric: &str, value: f64, target: f64, unit: &str) -> Self {
        Row {
            metric: metric.to_owned(),
            direct: "-".into(),
            respgw: format!("{value:.2} {unit}"),
            delta: "-".into(),
            target: format!("<= {target} {unit}"),
            verdict: verdict(value <= target),
            note: String::new(),
        }
    }

    /// With the floor proxy's figure of the same measurement in the baseline column, in the row's
    /// unit, and respgw/floor in the note.
    fn against_floor(mut self, floor: Option<f64>, respgw: f64, target: f64, unit: &str) -> Self {
        if let Some(floor) = floor {
            self.direct = format!("{floor:.2} {unit}");
            self.note = floor_note(respgw, floor, target);
        }
        self
    }

    /// Adds to the note how much of a CPU-per-request figure respgw's SQLite threads took.
    fn with_sqlite_share(mut self, sqlite_us: f64) -> Self {
        if !self.note.is_empty() {
            self.note.push_str("; ");
        }
        self.note.push_str(&format!("of which the SQLite writer and checkpointer threads {sqlite_us:.0} us"));
        self
    }

    /// A respgw-only, informational line.
    fn info(metric: &str, respgw: String) -> Self {
        Row {
            metric: metric.to_owned(),
            direct: "-".into(),
            respgw,
            delta: "-".into(),
            target: "-".into(),
            verdict: "info",
            note: String::new(),
        }
    }
}

/// The result table.
#[derive(Default)]
struct Table {
    rows: Vec<Row>,
}

impl Table {
    fn row(&mut self, row: Row) {
        self.rows.push(row);
    }

    /// p50/p99 lines of a latency test; `targets` are the most the p50 and the p99 may add, `rate`
    /// adds a requests/s line. Returns the index of the p50 line; the p99 line follows it.
    fn latency(&mut self, label: &str, r: &LatencyResult, targets: Option<(f64, f64)>, rate: bool) -> usize {
        let first = self.rows.len();
        let (p50_target, p99_target) = targets.unwrap_or((f64::NAN, f64::NAN));
        for (p, target) in [(50.0, p50_target), (99.0, p99_target)] {
            let direct = percentile_ms(&r.direct, p);
            let through = percentile_ms(&r.gateway, p);
            let added = through - direct;
            self.row(Row {
                metric: format!("latency p{p:.0} ({label})"),
                direct: format!("{direct:.3} ms"),
                respgw: format!("{through:.3} ms"),
                delta: format!("{added:+.3} ms"),
                target: if targets.is_some() { format!("<= {target} ms added") } else { "-".into() },
                verdict: if targets.is_some() { verdict(added <= target) } else { "info" },
                note: String::new(),
            });
        }
        if rate {
            let direct = r.direct.len() as f64 / r.direct_wall.as_secs_f64();
            let through = r.gateway.len() as f64 / r.gateway_wall.as_secs_f64();
            self.row(Row {
                metric: format!("requests/s ({label})"),
                direct: format!("{direct:.0}"),
                respgw: format!("{through:.0}"),
                delta: format!("{:.1} %", through / direct * 100.0),
                target: "-".into(),
                verdict: "info",
                note: String::new(),
            });
        }
        first
    }

    /// Notes on the latency rows from `at` (see [`Table::latency`]) what the floor proxy added in
    /// the same test, and whether that alone is above the targets.
    fn floor_latency(&mut self, at: usize, floor: &LatencyResult, targets: (f64, f64)) {
        for (offset, p, target) in [(0, 50.0, targets.0), (1, 99.0, targets.1)] {
            let added = percentile_ms(&floor.gateway, p) - percentile_ms(&floor.direct, p);
            let mut note = format!("the floor proxy adds {added:+.3} ms in the same test");
            if added > target {
                note.push_str("; the floor alone is above the target");
            }
            if let Some(row) = self.rows.get_mut(at + offset) {
                row.note = note;
            }
        }
    }

    fn print(&self) {
        let header = Row {
            metric: "metric".into(),
            direct: "baseline".into(),
            respgw: "respgw".into(),
            delta: "ratio/added".into(),
            target: "target".into(),
            verdict: "result",
            note: "note".into(),
        };
        let all: Vec<&Row> = std::iter::once(&header).chain(&self.rows).collect();
        let w = |f: fn(&Row) -> usize| all.iter().map(|r| f(r)).max().unwrap_or(0);
        let widths = [
            w(|r| r.metric.chars().count()),
            w(|r| r.direct.chars().count()),
            w(|r| r.respgw.chars().count()),
            w(|r| r.delta.chars().count()),
            w(|r| r.target.chars().count()),
            w(|r| r.verdict.chars().count()),
            w(|r| r.note.chars().count()),
        ];
        let line = |r: &Row| {
            format!(
                "| {:<w0$} | {:>w1$} | {:>w2$} | {:>w3$} | {:<w4$} | {:<w5$} | {:<w6$} |",
                r.metric,
                r.direct,
                r.respgw,
                r.delta,
                r.target,
                r.verdict,
                r.note,
                w0 = widths[0],
                w1 = widths[1],
                w2 = widths[2],
                w3 = widths[3],
                w4 = widths[4],
                w5 = widths[5],
                w6 = widths[6],
            )
        };
        println!("{}", line(&header));
        let sep: Vec<String> = widths.iter().map(|w| "-".repeat(w + 2)).collect();
        println!("|{}|", sep.join("|"));
        for r in &self.rows {
            println!("{}", line(r));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latencies(direct_ms: &[u64], gateway_ms: &[u64]) -> LatencyResult {
        let ms = |v: &[u64]| v.iter().map(|&m| Duration::from_millis(m)).collect::<Vec<_>>();
        LatencyResult {
            direct: ms(direct_ms),
            gateway: ms(gateway_ms),
            gateway_cpu_us: 0.0,
            sqlite_cpu_us: 0.0,
            direct_wall: Duration::from_secs(1),
            gateway_wall: Duration::from_secs(1),
        }
    }

    #[test]
    fn the_floors_added_latency_is_noted_on_respgws_p50_and_p99_rows() {
        let mut table = Table::default();
        table.row(Row::info("before", "-".into()));
        let respgw = latencies(&[1; 100], &[3; 100]);
        let at = table.latency("concurrency 8", &respgw, Some((1.0, 3.0)), true);
        assert_eq!(at, 1);
        assert_eq!(table.rows[at].metric, "latency p50 (concurrency 8)");
        assert_eq!(table.rows[at + 1].metric, "latency p99 (concurrency 8)");

        // The floor adds 0.5 ms at p50 and 4.5 ms at p99 (its slowest 2 %).
        let mut floor_gateway = vec![1; 98];
        floor_gateway.extend([5, 5]);
        let mut floor = latencies(&[0; 100], &floor_gateway);
        floor.direct = vec![Duration::from_micros(500); 100];
        table.floor_latency(at, &floor, (1.0, 3.0));
        assert_eq!(table.rows[at].note, "the floor proxy adds +0.500 ms in the same test");
        assert_eq!(
            table.rows[at + 1].note,
            "the floor proxy adds +4.500 ms in the same test; the floor alone is above the target"
        );
        assert_eq!(table.rows[at + 2].metric, "requests/s (concurrency 8)");
        assert!(table.rows[at + 2].note.is_empty(), "the rate row has no floor note");
    }
}
