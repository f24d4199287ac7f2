//! The worker process (`respgw worker`, re-exec'd by the supervisor): serves the gateway on the
//! inherited listening socket and talks to the supervisor over the inherited IPC socket.
//!
//! IPC duties: `Ready` once serving; a metrics snapshot every second (and a last one on exit);
//! a `/metrics` scrape asks the supervisor for the merged view (falling back to this worker's
//! own numbers if the supervisor does not answer in time); `GET /v1/console/overview` asks it for
//! its samples of the merged view (an empty history if it does not answer). `Shutdown`, SIGTERM, SIGINT or the
//! supervisor going away (IPC end-of-file) all start a bounded drain.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use respgw_ipc::{Frame, FrameReader, FrameWriter};
use respgw_server::limits::shared::SharedCounters;
use respgw_server::{GatewayOptions, MetricsView, OverviewView};
use respgw_telemetry::{Metrics, MetricsSnapshot, OverviewHistory};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, watch};

use crate::sockets::inherited_listener;
use crate::{memory, open_files};

/// Environment variable carrying the worker's [`GatewayOptions`] as JSON.
pub const CONFIG_ENV: &str = "RESPGW_WORKER_CONFIG";
/// Environment variable carrying the worker's slot number (shown as `x-respgw-worker`).
pub const SLOT_ENV: &str = "RESPGW_WORKER_SLOT";

/// How often a worker reports its metrics.
const SNAPSHOT_INTERVAL: Duration = Duration::from_secs(1);
/// How long a scrape waits for the supervisor's merged view.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

/// The options the supervisor handed this worker (before anything else, so that `main` can set up
/// tracing from them).
pub fn inherited_options() -> anyhow::Result<GatewayOptions> {
    let config = std::env::var(CONFIG_ENV)
        .with_context(|| format!("{CONFIG_ENV} is not set: workers are started by `respgw serve`"))?;
    serde_json::from_str(&config).context("invalid worker configuration")
}

/// Entry point of `respgw worker`, with the [`inherited_options`].
pub fn run(mut options: GatewayOptions) -> anyhow::Result<()> {
    fit_connection_cap(&mut options);
    let slot = std::env::var(SLOT_ENV).unwrap_or_else(|_| "0".into());
    let listener = inherited_listener()?;
    // One thread per worker: the supervisor scales by processes (one worker per core), and a
    // single-threaded runtime has no cross-thread wake-ups, work stealing or allocator contention.
    // Blocking work (SQLite, file reads) still goes to tokio's blocking pool.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(serve(options, slot, listener))
}

/// Raise the open-files limit and lower the client-connection cap to what it can hold.
fn fit_connection_cap(options: &mut GatewayOptions) {
    let Some(open_files) = open_files::raise_to_hard_limit() else { return };
    let wanted = options.client_limits.max_connections;
    let cap = open_files::connection_cap(wanted, open_files);
    if cap < wanted {
        tracing::warn!(
            wanted,
            cap,
            open_files,
            "the open-files limit holds fewer client connections than --max-client-connections; \
             raise the limit (e.g. LimitNOFILE=) to allow more"
        );
    }
    options.client_limits.max_connections = cap;
}

async fn serve(options: GatewayOptions, slot: String, listener: std::net::TcpListener) -> anyhow::Result<()> {
    let ipc = respgw_ipc::inherited_from_env()?.context("the IPC socket was not inherited")?;
    let (reader, writer) = respgw_ipc::into_frame_halves(ipc);
    let metrics = Metrics::new();
    let (outbox, outbox_rx) = mpsc::channel::<Frame>(64);
    let pending: PendingScrapes = Arc::new(Mutex::new(HashMap::new()));
    let pending_overviews: PendingOverviews = Arc::new(Mutex::new(HashMap::new()));
    let (stop_tx, stop_rx) = watch::channel(false);

    let writer_task = tokio::spawn(write_frames(writer, outbox_rx));
    tokio::spawn(read_frames(reader, Arc::clone(&pending), Arc::clone(&pending_overviews), stop_tx.clone()));
    tokio::spawn(stop_on_signals(stop_tx.clone()));
    tokio::spawn(report_metrics(metrics.clone(), outbox.clone(), stop_rx.clone()));
    tokio::spawn(memory::release_freed_memory());

    let view = merged_view(metrics.clone(), outbox.clone(), pending);
    let overview = supervisor_overview(outbox.clone(), pending_overviews, options.console_sample_seconds);
    let counters = match SharedCounters::inherited_from_env().context("cannot map the shared limit counters")? {
        Some(counters) => counters,
        None => SharedCounters::private().context("cannot map the limit counters")?,
    };
    let app = respgw_server::build_sharing(
        &options,
        metrics.clone(),
        view,
        overview,
        Some(slot.clone()),
        Arc::new(counters),
        stopped(stop_rx.clone()),
    )
    .await?;
    outbox.send(Frame::Ready { pid: std::process::id() }).await.context("the supervisor is gone")?;
    tracing::info!(slot = %slot, pid = std::process::id(), "worker serving");

    let shutdown = stopped(stop_rx);
    let result = respgw_server::serve_on(listener, app, &options, shutdown).await;
    // The last numbers, so nothing counted during the drain is lost from the merged view.
    let _ = outbox.send(Frame::Metrics(metrics.snapshot())).await;
    drop(outbox);
    let _ = tokio::time::timeout(Duration::from_secs(2), writer_task).await;
    tracing::info!(slot = %slot, "worker stopped");
    result
}

/// Resolves once the worker is told to stop.
async fn stopped(mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        if stop.changed().await.is_err() {
            break;
        }
    }
}

type PendingScrapes = Arc<Mutex<HashMap<u64, oneshot::Sender<MetricsSnapshot>>>>;

/// `/metrics` on a worker: ask the supervisor for the merged view.
fn merged_view(metrics: Metrics, outbox: mpsc::Sender<Frame>, pending: PendingScrapes) -> MetricsView {
    let next_id = Arc::new(std::sync::atomic::AtomicU64::new(1));
    Arc::new(move || {
        let (metrics, outbox, pending, next_id) =
            (metrics.clone(), outbox.clone(), Arc::clone(&pending), Arc::clone(&next_id));
        Box::pin(async move {
            let id = next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let (tx, rx) = oneshot::channel();
            pending.lock().unwrap_or_else(PoisonError::into_inner).insert(id, tx);
            // Send our latest numbers first, so the merged view includes this very worker's counts.
            let sent = outbox.send(Frame::Metrics(metrics.snapshot())).await.is_ok()
                && outbox.send(Frame::ScrapeRequest { id }).await.is_ok();
            let reply =
                if sent { tokio::time::timeout(SCRAPE_TIMEOUT, rx).await.ok().and_then(Result::ok) } else { None };
            pending.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
            reply.unwrap_or_else(|| {
                tracing::warn!("the supervisor did not answer a metrics scrape; serving this worker's own metrics");
                metrics.snapshot()
            })
        })
    })
}

type PendingOverviews = Arc<Mutex<HashMap<u64, oneshot::Sender<OverviewHistory>>>>;

/// `GET /v1/console/overview` on a worker: ask the supervisor for its samples of the merged view.
fn supervisor_overview(outbox: mpsc::Sender<Frame>, pending: PendingOverviews, step_seconds: u64) -> OverviewView {
    let next_id = Arc::new(std::sync::atomic::AtomicU64::new(1));
    Arc::new(move || {
        let (outbox, pending, next_id) = (outbox.clone(), Arc::clone(&pending), Arc::clone(&next_id));
        Box::pin(async move {
            let id = next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let (tx, rx) = oneshot::channel();
            pending.lock().unwrap_or_else(PoisonError::into_inner).insert(id, tx);
            let sent = outbox.send(Frame::OverviewRequest { id }).await.is_ok();
            let reply =
                if sent { tokio::time::timeout(SCRAPE_TIMEOUT, rx).await.ok().and_then(Result::ok) } else { None };
            pending.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
            reply.unwrap_or_else(|| {
                tracing::warn!("the supervisor did not answer for the console overview; serving no samples");
                OverviewHistory::new(step_seconds)
            })
        })
    })
}

async fn write_frames<W: AsyncWrite + Unpin>(mut writer: FrameWriter<W>, mut outbox: mpsc::Receiver<Frame>) {
    while let Some(frame) = outbox.recv().await {
        if let Err(e) = writer.write_frame(&frame).await {
            tracing::warn!(error = %e, "cannot write to the supervisor");
            return;
        }
    }
}

async fn read_frames<R: AsyncRead + Unpin>(
    mut reader: FrameReader<R>,
    pending: PendingScrapes,
    pending_overviews: PendingOverviews,
    stop: watch::Sender<bool>,
) {
    loop {
        match reader.read_frame().await {
            Ok(Some(Frame::ScrapeReply { id, snapshot })) => {
                if let Some(tx) = pending.lock().unwrap_or_else(PoisonError::into_inner).remove(&id) {
                    let _ = tx.send(snapshot);
                }
            }
            Ok(Some(Frame::OverviewReply { id, history })) => {
                if let Some(tx) = pending_overviews.lock().unwrap_or_else(PoisonError::into_inner).remove(&id) {
                    let _ = tx.send(history);
                }
            }
            Ok(Some(Frame::Shutdown)) => {
                tracing::info!("the supervisor asked this worker to stop");
                let _ = stop.send(true);
            }
            Ok(Some(other)) => tracing::warn!(frame = ?other, "unexpected frame from the supervisor"),
            Ok(None) => {
                tracing::warn!("the supervisor went away; stopping");
                let _ = stop.send(true);
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, "broken IPC from the supervisor; stopping");
                let _ = stop.send(true);
                return;
            }
        }
    }
}

async fn stop_on_signals(stop: watch::Sender<bool>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::error!("cannot listen for SIGTERM/SIGINT");
        return;
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
    let _ = stop.send(true);
}

async fn report_metrics(metrics: Metrics, outbox: mpsc::Sender<Frame>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(SNAPSHOT_INTERVAL);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if outbox.send(Frame::Metrics(metrics.snapshot())).await.is_err() {
                    return;
                }
            }
            _ = stop.changed() => return,
        }
    }
}
