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
//! - respgw's resident memory with many streams open at once.
//!
//! It prints a table with ratios and the targets, and exits 0 whatever the numbers say
//! (the numbers are the output); it fails only when something breaks. Loopback only; every loop
//! is bounded in count and time. Run it through `scripts/bench`.

mod gateway;
mod measure;
mod mock;
mod sse;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;

use crate::gateway::Gateway;
use crate::measure::{LatencyResult, Targets};
use crate::mock::MockUpstream;

/// Issue targets.
const TARGET_ADDED_P50_MS: f64 = 0.5;
const TARGET_ADDED_P99_MS: f64 = 2.0;
const TARGET_SSE_RATIO: f64 = 0.90;

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

    /// Content deltas per stream in the SSE throughput test.
    #[arg(long, default_value_t = 20_000)]
    stream_deltas: usize,

    /// Rounds per side in the SSE throughput tests.
    #[arg(long, default_value_t = 5)]
    stream_runs: usize,

    /// Concurrent streams in the second SSE throughput test (0 skips it).
    #[arg(long, default_value_t = 4)]
    stream_concurrency: usize,

    /// Streams held open at once in the memory test (0 skips it).
    #[arg(long, default_value_t = 1000)]
    open_streams: usize,

    /// Longest wait, in seconds, for the memory test's streams to open (and to finish).
    #[arg(long, default_value_t = 60)]
    open_timeout: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("respgw-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Run every measurement and print the table.
async fn run(cli: Cli) -> anyhow::Result<()> {
    check_open_files(cli.open_streams)?;
    let started = Instant::now();
    let limit = Duration::from_secs(cli.open_timeout.max(1));
    let mock = MockUpstream::start(limit * 2).await?;
    let mut table = Table::default();

    let mut gw = Gateway::start(&cli.respgw, &mock.base_url()).await?;
    let targets = Targets::new(&mock, &gw);
    progress(&format!("respgw {} (pid {}) in front of mock {}", gw.base_url(), gw.pid(), mock.base_url()));

    progress(&format!("latency: {} warm-up + {} measured sequential requests per side", cli.warmup, cli.requests));
    let seq = measure::latency_sequential(&targets, &gw, cli.latency_deltas, cli.warmup, cli.requests)
        .await
        .context("sequential latency test")?;
    gw.check_alive()?;
    table.latency("sequential", &seq, true);

    let conc = if cli.concurrency > 0 {
        progress(&format!("latency: {} requests per side from {} concurrent workers", cli.requests, cli.concurrency));
        let r = measure::latency_concurrent(&targets, &gw, cli.latency_deltas, cli.concurrency, cli.requests)
            .await
            .context("concurrent latency test")?;
        gw.check_alive()?;
        table.latency(&format!("concurrency {}", cli.concurrency), &r, false);
        Some(r)
    } else {
        None
    };

    let mut throughputs = Vec::new();
    let mut levels = vec![1];
    if cli.stream_concurrency > 1 {
        levels.push(cli.stream_concurrency);
    }
    for (i, &streams) in levels.iter().enumerate() {
        progress(&format!(
            "SSE throughput: {} rounds of {streams} stream(s) x {} deltas per side",
            cli.stream_runs, cli.stream_deltas
        ));
        let r = measure::sse_throughput(&targets, &gw, cli.stream_deltas, streams, cli.stream_runs.max(1))
            .await
            .with_context(|| format!("SSE throughput test ({streams} streams)"))?;
        gw.check_alive()?;
        let ratio = r.gateway_per_s / r.direct_per_s;
        table.row(Row {
            metric: format!("SSE deltas/s, {streams} stream(s)"),
            direct: format!("{:.0}", r.direct_per_s),
            respgw: format!("{:.0}", r.gateway_per_s),
            delta: format!("{:.1} %", ratio * 100.0),
            target: if i == 0 { format!(">= {:.0} %", TARGET_SSE_RATIO * 100.0) } else { "-".into() },
            verdict: if i == 0 { verdict(ratio >= TARGET_SSE_RATIO) } else { "info" },
        });
        throughputs.push((streams, r));
    }
    gw.stop().await?;

    table.row(Row::info("respgw CPU per request (seq)", format!("{:.0} us", seq.gateway_cpu_us)));
    if let Some(c) = &conc {
        table.row(Row::info(
            &format!("respgw CPU per request (c{})", cli.concurrency),
            format!("{:.0} us", c.gateway_cpu_us),
        ));
    }
    for (streams, r) in &throughputs {
        table.row(Row::info(
            &format!("respgw CPU per SSE delta ({streams} str.)"),
            format!("{:.2} us", r.gateway_cpu_us),
        ));
    }

    if cli.open_streams > 0 {
        // A fresh gateway, so that "idle" means idle and earlier tests' allocations don't hide
        // the per-stream cost.
        let gw = Gateway::start(&cli.respgw, &mock.base_url()).await?;
        progress(&format!("memory: {} streams held open through a fresh respgw (pid {})", cli.open_streams, gw.pid()));
        let m = measure::memory(&mock, &gw, cli.open_streams, limit).await.context("memory test")?;
        gw.stop().await?;
        table.row(Row::info("respgw RSS idle (fresh, warmed)", format!("{:.1} MiB", m.idle_kib as f64 / 1024.0)));
        let per_stream = m.open_kib.saturating_sub(m.idle_kib) as f64 / m.streams as f64;
        table.row(Row {
            metric: format!("respgw RSS, {} open streams", m.streams),
            direct: "-".into(),
            respgw: format!("{:.1} MiB", m.open_kib as f64 / 1024.0),
            delta: format!("+{per_stream:.1} KiB/stream"),
            target: "-".into(),
            verdict: "info",
        });
        table.row(Row::info("respgw RSS after they closed", format!("{:.1} MiB", m.after_kib as f64 / 1024.0)));
        table.row(Row::info(
            &format!("time to open {} streams", m.streams),
            format!("{:.0} ms", m.open_time.as_secs_f64() * 1e3),
        ));
    }

    println!();
    table.print();
    println!(
        "\n(latency: non-stream store:true through respgw vs streaming the same reply directly; \
         `added` = respgw - direct. SSE: client-counted content deltas per second. \
         {} cores, total {:.0} s.)",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Fail early, with the fix, when the open-file limit is too low for the memory test: this
/// process holds two sockets per stream (client and mock side) and so does respgw.
fn check_open_files(streams: usize) -> anyhow::Result<()> {
    let needed = (2 * streams + 256) as u64;
    match gateway::open_files_limit() {
        Some(limit) if streams > 0 && limit < needed => bail!(
            "the open-files limit is {limit}, the memory test needs about {needed}: \
             run `ulimit -n 65536` first (scripts/bench does), or pass --open-streams {}",
            (limit.saturating_sub(256) / 2)
        ),
        _ => Ok(()),
    }
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
}

impl Row {
    /// A respgw-only, informational line.
    fn info(metric: &str, respgw: String) -> Self {
        Row {
            metric: metric.to_owned(),
            direct: "-".into(),
            respgw,
            delta: "-".into(),
            target: "-".into(),
            verdict: "info",
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

    /// p50/p99 lines (and requests/s) of a latency test; `targets` applies the targets.
    fn latency(&mut self, label: &str, r: &LatencyResult, targets: bool) {
        for (p, target) in [(50.0, TARGET_ADDED_P50_MS), (99.0, TARGET_ADDED_P99_MS)] {
            let direct = percentile_ms(&r.direct, p);
            let through = percentile_ms(&r.gateway, p);
            let added = through - direct;
            self.row(Row {
                metric: format!("latency p{p:.0} ({label})"),
                direct: format!("{direct:.3} ms"),
                respgw: format!("{through:.3} ms"),
                delta: format!("{added:+.3} ms"),
                target: if targets { format!("<= {target} ms added") } else { "-".into() },
                verdict: if targets { verdict(added <= target) } else { "info" },
            });
        }
        if !targets {
            let direct = r.direct.len() as f64 / r.direct_wall.as_secs_f64();
            let through = r.gateway.len() as f64 / r.gateway_wall.as_secs_f64();
            self.row(Row {
                metric: format!("requests/s ({label})"),
                direct: format!("{direct:.0}"),
                respgw: format!("{through:.0}"),
                delta: format!("{:.1} %", through / direct * 100.0),
                target: "-".into(),
                verdict: "info",
            });
        }
    }

    fn print(&self) {
        let header = Row {
            metric: "metric".into(),
            direct: "direct".into(),
            respgw: "respgw".into(),
            delta: "ratio/added".into(),
            target: "target".into(),
            verdict: "result",
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
        ];
        let line = |r: &Row| {
            format!(
                "| {:<w0$} | {:>w1$} | {:>w2$} | {:>w3$} | {:<w4$} | {:<w5$} |",
                r.metric,
                r.direct,
                r.respgw,
                r.delta,
                r.target,
                r.verdict,
                w0 = widths[0],
                w1 = widths[1],
                w2 = widths[2],
                w3 = widths[3],
                w4 = widths[4],
                w5 = widths[5],
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
