//! The supervisor's worker pool: N re-exec'd `respgw worker` processes, one per slot, each on
//! its slot's listening socket and its own IPC socketpair.
//!
//! - A worker that dies is restarted on the same socket with exponential back-off (reset once a
//!   worker has lived a while). A worker that dies before the pool ever became ready fails the
//!   start, with its own log explaining why.
//! - SIGHUP replaces workers one slot at a time: the new worker starts on the same socket, and
//!   only when it is ready is the old one told to drain, so no connection is refused and every
//!   request and stream in progress finishes. The API keys file (`--api-keys-file`) is read again
//!   first, so the new workers serve the new keys; an invalid file keeps the keys in use.
//! - SIGTERM/SIGINT (or the caller's stop condition) drain every worker within a bound, then
//!   kill what is left.
//! - Limits: the supervisor makes the region of limit counters the workers share and hands it to
//!   each (its memfd across exec, and a row of its own for the streams it opens); when a worker
//!   exits, its row is released, so what a crashed worker had open is no longer counted.
//! - Metrics: every worker's snapshots are merged here; a scrape on any worker gets the merged
//!   view. Each worker process has its own id in the merge, so counters of a dead or replaced
//!   worker are kept and never go backwards. Every `--console-sample-seconds` the merged view is
//!   sampled into the console overview's ring ([`OverviewHistory`]), which a worker asks for with
//!   `OverviewRequest`.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use respgw_ipc::Frame;
use respgw_telemetry::{MergedMetrics, OverviewHistory};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use crate::notify;
use crate::sockets::{PublicSockets, inherit_listener};
use crate::worker::{CONFIG_ENV, SLOT_ENV};
use respgw_server::limits::shared::{REGION_FD_ENV, REGION_ROW_ENV, SharedCounters, WORKER_ROWS};

/// Back-off after a worker crash: doubles from here…
const RESTART_DELAY_MIN: Duration = Duration::from_millis(100);
/// …up to here.
const RESTART_DELAY_MAX: Duration = Duration::from_secs(10);
/// A worker that lived this long resets its slot's back-off.
const HEALTHY_UPTIME: Duration = Duration::from_secs(30);
/// Extra time past the drain timeout before remaining workers are killed.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// What the pool runs.
pub struct PoolConfig {
    /// The `respgw` binary to re-exec.
    pub exe: PathBuf,
    pub workers: usize,
    pub sockets: PublicSockets,
    /// `GatewayOptions` as JSON, handed to every worker.
    pub worker_config_json: String,
    /// The options `worker_config_json` encodes (their tenants change on SIGHUP).
    pub gateway: respgw_server::GatewayOptions,
    pub drain_timeout: Duration,
    /// The merged metrics view (shared with the MCP helper process, which adds its counts).
    pub merged: Arc<Mutex<MergedMetrics>>,
    /// The last hour of samples of `merged`, for the console's overview.
    pub overview: Arc<Mutex<OverviewHistory>>,
    /// The limit counters every worker maps.
    pub counters: SharedCounters,
}

impl PoolConfig {
    /// Workers re-exec this binary with `gateway` as their configuration.
    pub fn new(
        gateway: &respgw_server::GatewayOptions,
        workers: usize,
        sockets: PublicSockets,
        merged: Arc<Mutex<MergedMetrics>>,
    ) -> anyhow::Result<Self> {
        Ok(PoolConfig {
            exe: std::env::current_exe().context("cannot find the respgw binary to start workers")?,
            workers,
            sockets,
            worker_config_json: serde_json::to_string(gateway)?,
            gateway: gateway.clone(),
            drain_timeout: gateway.drain_timeout,
            merged,
            overview: Arc::new(Mutex::new(OverviewHistory::new(gateway.console_sample_seconds))),
            counters: SharedCounters::create().context("cannot create the shared limit counters")?,
        })
    }
}

/// Why the pool stopped.
#[derive(Debug)]
pub enum PoolStop {
    /// SIGTERM or SIGINT.
    Signal,
    /// The caller's stop condition fired with this exit code (integrated mode: the model server exited).
    External(i32),
}

enum Event {
    Ready(u32),
    Exited(u32, std::io::Result<ExitStatus>),
    RestartDue(usize),
}

struct Worker {
    slot: usize,
    /// Its row in the shared limit counters.
    row: usize,
    pid: u32,
    started: Instant,
    ready: bool,
    outbox: mpsc::Sender<Frame>,
}

struct Pool {
    config: PoolConfig,
    events: mpsc::UnboundedSender<Event>,
    merged: Arc<Mutex<MergedMetrics>>,
    next_id: u32,
    workers: HashMap<u32, Worker>,
    /// The serving worker of each slot.
    current: Vec<Option<u32>>,
    /// Consecutive quick crashes per slot, for back-off.
    failures: Vec<u32>,
    /// Rows of the limit counters no live worker holds.
    free_rows: Vec<usize>,
    /// Slots still to replace in a rolling restart, and the replacement in progress.
    rollover: VecDeque<usize>,
    replacing: Option<(usize, u32)>,
    announced: bool,
    stopping: bool,
}

/// Run the pool until a signal or `external_stop` resolves; returns why it stopped, after every
/// worker has exited.
pub async fn run(
    config: PoolConfig,
    on_ready: impl FnOnce(std::net::SocketAddr),
    external_stop: impl Future<Output = i32>,
) -> anyhow::Result<PoolStop> {
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    let mut hup = signal(SignalKind::hangup()).context("cannot listen for SIGHUP")?;
    let (events, mut event_rx) = mpsc::unbounded_channel();
    let slots = config.workers.max(1);
    let merged = Arc::clone(&config.merged);
    tokio::spawn(sample_overview(
        Arc::clone(&merged),
        Arc::downgrade(&config.overview),
        config.gateway.console_sample_seconds,
    ));
    let mut pool = Pool {
        config,
        events,
        merged,
        next_id: 0,
        workers: HashMap::new(),
        current: vec![None; slots],
        failures: vec![0; slots],
        free_rows: (0..WORKER_ROWS).rev().collect(),
        rollover: VecDeque::new(),
        replacing: None,
        announced: false,
        stopping: false,
    };
    for slot in 0..slots {
        let id = pool.spawn(slot)?;
        pool.current[slot] = Some(id);
    }
    let mut on_ready = Some(on_ready);
    tokio::pin!(external_stop);
    let mut stop = None;
    let mut kill_at: Option<tokio::time::Instant> = None;
    loop {
        if pool.stopping && pool.workers.is_empty() {
            return stop.context("the pool stopped without a reason");
        }
        let kill_deadline = async {
            match kill_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some(event) = event_rx.recv() => match event {
                Event::Ready(id) => {
                    pool.on_ready(id);
                    if !pool.announced && pool.all_current_ready() {
                        pool.announced = true;
                        notify::ready();
                        if let Some(f) = on_ready.take() {
                            f(pool.config.sockets.address());
                        }
                    }
                }
                Event::Exited(id, status) => pool.on_exit(id, status)?,
                Event::RestartDue(slot) => pool.restart(slot)?,
            },
            _ = term.recv(), if !pool.stopping => {
                stop = Some(PoolStop::Signal);
                kill_at = Some(pool.begin_stop("SIGTERM"));
            }
            _ = int.recv(), if !pool.stopping => {
                stop = Some(PoolStop::Signal);
                kill_at = Some(pool.begin_stop("SIGINT"));
            }
            _ = hup.recv(), if !pool.stopping => {
                pool.reload_api_keys();
                pool.begin_rollover()?;
            }
            code = &mut external_stop, if !pool.stopping => {
                stop = Some(PoolStop::External(code));
                kill_at = Some(pool.begin_stop("external stop"));
            }
            () = kill_deadline => {
                for worker in pool.workers.values() {
                    tracing::warn!(slot = worker.slot, pid = worker.pid, "worker did not drain in time; killing it");
                    let _ = nix::sys::signal::kill(Pid::from_raw(worker.pid as libc::pid_t), Signal::SIGKILL);
                }
                kill_at = None;
            }
        }
    }
}

/// Samples the merged view into the overview's ring now and every `step_seconds`, until the
/// pool (which holds the ring) is gone.
async fn sample_overview(merged: Arc<Mutex<MergedMetrics>>, overview: Weak<Mutex<OverviewHistory>>, step_seconds: u64) {
    let mut tick = tokio::time::interval(Duration::from_secs(step_seconds.max(1)));
    loop {
        tick.tick().await;
        let Some(overview) = overview.upgrade() else { return };
        let snapshot = merged.lock().unwrap_or_else(PoisonError::into_inner).merged();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        overview.lock().unwrap_or_else(PoisonError::into_inner).record(now, &snapshot);
    }
}

impl Pool {
    fn spawn(&mut self, slot: usize) -> anyhow::Result<u32> {
        let id = self.next_id;
        self.next_id += 1;
        let row = self.free_rows.pop().context("every row of the shared limit counters is taken")?;
        let (own_end, child_end) = respgw_ipc::socketpair().context("cannot create the IPC socketpair")?;
        let mut command = std::process::Command::new(&self.config.exe);
        command
            .arg("worker")
            .env(CONFIG_ENV, &self.config.worker_config_json)
            .env(SLOT_ENV, slot.to_string())
            .env(REGION_ROW_ENV, row.to_string())
            .stdin(std::process::Stdio::null());
        if let Some(fd) = self.config.counters.raw_fd() {
            command.env(REGION_FD_ENV, fd.to_string());
            inherit_fd(&mut command, fd);
        }
        let socket = self.config.sockets.for_slot(slot);
        inherit_listener(&mut command, &socket);
        respgw_ipc::inherit_in_child(&mut command, &child_end);
        die_with_parent(&mut command);
        let mut child = tokio::process::Command::from(command)
            .spawn()
            .with_context(|| format!("cannot start a worker from {}", self.config.exe.display()))?;
        drop(child_end);
        let pid = child.id().unwrap_or_default();
        let stream = respgw_ipc::into_tokio(own_end)?;
        let (mut reader, mut writer) = respgw_ipc::into_frame_halves(stream);
        let (outbox, mut outbox_rx) = mpsc::channel::<Frame>(64);

        tokio::spawn(async move {
            while let Some(frame) = outbox_rx.recv().await {
                if writer.write_frame(&frame).await.is_err() {
                    return;
                }
            }
        });
        let events = self.events.clone();
        let merged = Arc::clone(&self.merged);
        let overview = Arc::clone(&self.config.overview);
        let replies = outbox.clone();
        let reading = tokio::spawn(async move {
            loop {
                match reader.read_frame().await {
                    Ok(Some(Frame::Ready { .. })) => {
                        let _ = events.send(Event::Ready(id));
                    }
                    Ok(Some(Frame::Metrics(snapshot))) => {
                        merged.lock().unwrap_or_else(PoisonError::into_inner).update(id, 0, snapshot);
                    }
                    Ok(Some(Frame::ScrapeRequest { id: request })) => {
                        let snapshot = merged.lock().unwrap_or_else(PoisonError::into_inner).merged();
                        let _ = replies.send(Frame::ScrapeReply { id: request, snapshot }).await;
                    }
                    Ok(Some(Frame::OverviewRequest { id: request })) => {
                        let history = overview.lock().unwrap_or_else(PoisonError::into_inner).clone();
                        let _ = replies.send(Frame::OverviewReply { id: request, history }).await;
                    }
                    Ok(Some(other)) => tracing::warn!(frame = ?other, "unexpected frame from a worker"),
                    Ok(None) => return,
                    Err(e) => {
                        tracing::warn!(error = %e, "broken IPC from a worker");
                        return;
                    }
                }
            }
        });
        let events = self.events.clone();
        tokio::spawn(async move {
            let status = child.wait().await;
            // Read the worker's last frames (its final metrics) before reporting the exit.
            let _ = tokio::time::timeout(Duration::from_secs(2), reading).await;
            let _ = events.send(Event::Exited(id, status));
        });
        tracing::info!(slot, pid, "worker started");
        self.workers.insert(id, Worker { slot, row, pid, started: Instant::now(), ready: false, outbox });
        Ok(id)
    }

    fn all_current_ready(&self) -> bool {
        self.current.iter().all(|id| id.and_then(|id| self.workers.get(&id)).is_some_and(|w| w.ready))
    }

    fn on_ready(&mut self, id: u32) {
        let Some(worker) = self.workers.get_mut(&id) else { return };
        worker.ready = true;
        let slot = worker.slot;
        if self.replacing == Some((slot, id)) {
            if let Some(old) = self.current[slot].replace(id)
                && let Some(old_worker) = self.workers.get(&old)
            {
                tracing::info!(slot, old_pid = old_worker.pid, "replacement ready; draining the old worker");
                let _ = old_worker.outbox.try_send(Frame::Shutdown);
            }
            self.replacing = None;
            if let Err(e) = self.next_rollover() {
                tracing::error!(error = %e, "rolling restart stopped");
            }
        }
    }

    fn on_exit(&mut self, id: u32, status: std::io::Result<ExitStatus>) -> anyhow::Result<()> {
        self.merged.lock().unwrap_or_else(PoisonError::into_inner).worker_exited(id, 0);
        let Some(worker) = self.workers.remove(&id) else { return Ok(()) };
        self.config.counters.release_row(worker.row);
        self.free_rows.push(worker.row);
        let status = match status {
            Ok(s) => s.to_string(),
            Err(e) => format!("unknown status ({e})"),
        };
        if self.stopping {
            tracing::info!(slot = worker.slot, pid = worker.pid, %status, "worker stopped");
            return Ok(());
        }
        if self.replacing == Some((worker.slot, id)) {
            tracing::error!(slot = worker.slot, pid = worker.pid, %status, "replacement worker died before it was ready; keeping the old one");
            self.replacing = None;
            return self.next_rollover();
        }
        if self.current[worker.slot] != Some(id) {
            tracing::info!(slot = worker.slot, pid = worker.pid, %status, "replaced worker finished draining");
            return Ok(());
        }
        if !self.announced {
            bail!(
                "worker {} (pid {}) exited during start-up with {status}; see its log above",
                worker.slot,
                worker.pid
            );
        }
        let failures = &mut self.failures[worker.slot];
        *failures = if worker.started.elapsed() >= HEALTHY_UPTIME { 0 } else { *failures + 1 };
        let delay = RESTART_DELAY_MIN.saturating_mul(1 << (*failures).min(10)).min(RESTART_DELAY_MAX);
        tracing::error!(slot = worker.slot, pid = worker.pid, %status, delay_ms = delay.as_millis() as u64, "worker died; restarting it");
        self.current[worker.slot] = None;
        let events = self.events.clone();
        let slot = worker.slot;
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = events.send(Event::RestartDue(slot));
        });
        Ok(())
    }

    fn restart(&mut self, slot: usize) -> anyhow::Result<()> {
        if self.stopping || self.current[slot].is_some() {
            return Ok(());
        }
        let id = self.spawn(slot)?;
        self.current[slot] = Some(id);
        Ok(())
    }

    /// Read the API keys file again for the workers started from now on. An unreadable or
    /// invalid file is logged and the keys in use stay.
    fn reload_api_keys(&mut self) {
        let Some(path) = self.config.gateway.api_keys_file.clone() else { return };
        let tenants = match respgw_server::TenantTable::load(&path) {
            Ok(tenants) => tenants,
            Err(e) => {
                tracing::error!(error = %e, "SIGHUP: the API keys file was not reloaded; the keys in use stay");
                return;
            }
        };
        let mut gateway = self.config.gateway.clone();
        gateway.tenants = tenants;
        match serde_json::to_string(&gateway) {
            Ok(json) => {
                let names: Vec<&str> = gateway.tenants.tenants.iter().map(|t| t.name.as_str()).collect();
                tracing::info!(tenants = ?names, "SIGHUP: API keys file reloaded");
                self.config.worker_config_json = json;
                self.config.gateway = gateway;
            }
            Err(e) => tracing::error!(error = %e, "SIGHUP: the reloaded API keys could not be handed to workers"),
        }
    }

    fn begin_rollover(&mut self) -> anyhow::Result<()> {
        if self.replacing.is_some() || !self.rollover.is_empty() {
            // Workers replaced so far in this round started with the settings of before this
            // SIGHUP (the keys file may have changed): every slot is replaced once more.
            tracing::info!("SIGHUP: a rolling restart is in progress; every worker will be replaced again");
            self.rollover.clear();
            self.rollover.extend(0..self.current.len());
            return Ok(());
        }
        tracing::info!("SIGHUP: replacing workers one by one");
        self.rollover.extend(0..self.current.len());
        self.next_rollover()
    }

    fn next_rollover(&mut self) -> anyhow::Result<()> {
        while self.replacing.is_none() {
            let Some(slot) = self.rollover.pop_front() else {
                tracing::info!("rolling restart finished");
                return Ok(());
            };
            if self.current[slot].is_none() {
                continue; // Being restarted after a crash already.
            }
            let id = self.spawn(slot)?;
            self.replacing = Some((slot, id));
        }
        Ok(())
    }

    /// Tell every worker to drain; returns when to kill the ones still running.
    fn begin_stop(&mut self, why: &str) -> tokio::time::Instant {
        tracing::info!(why, workers = self.workers.len(), "stopping: draining workers");
        notify::stopping();
        self.stopping = true;
        self.rollover.clear();
        for worker in self.workers.values() {
            let _ = worker.outbox.try_send(Frame::Shutdown);
        }
        tokio::time::Instant::now() + self.config.drain_timeout + KILL_GRACE
    }
}

/// The worker started by `command` inherits `fd` (close-on-exec cleared in that child only).
fn inherit_fd(command: &mut std::process::Command, fd: std::os::fd::RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook runs in the forked child between fork and exec, where only async-signal-safe
    // calls are allowed: `clear_cloexec` makes at most two fcntl(2) system calls, builds its error
    // from errno, and allocates nothing and takes no locks.
    unsafe {
        command.pre_exec(move || respgw_ipc::clear_cloexec(fd));
    }
}

/// Workers get SIGTERM if the supervisor dies, so none is left serving on its own. (The
/// supervisor runs a single-threaded runtime: the death signal follows the forking thread.)
pub(crate) fn die_with_parent(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook runs in the forked child between fork and exec, where only async-signal-safe
    // calls are allowed: it makes one prctl(2) system call and builds its error from errno, without
    // allocating, locking or touching memory shared with other threads.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
