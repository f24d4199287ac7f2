//! The code_interpreter sandbox: runs model-written Python in `python3` from a dedicated venv
//! (numpy, pandas, matplotlib) under bubblewrap, with rlimits, a wall-clock timeout that kills
//! the whole process group, bounded concurrency and queueing time, and per-conversation
//! "containers" (a directory whose files persist between executions until it has been idle for
//! a while). Errors of the model's code (exceptions, timeouts, limits) are [`Execution`] results,
//! never [`SandboxError`]s.
//!
//! # Disk
//! While code runs, the container's files are in a tmpfs of the container's size at /mnt/data
//! (copied in from the host directory before, changes written back after, by the runner; see
//! `process.rs`): a write past the limit fails with ENOSPC in the sandbox, and the host holds at
//! most the limit per container. All containers of the gateway together are capped too
//! ([`SandboxConfig::max_total_disk_bytes`]): an execution that does not fit evicts the least
//! recently used idle containers, and fails with [`SandboxError::NoRoom`] when evicting is not
//! enough (every other container is in use).
//!
//! # The sandbox (defence in depth)
//! ```text
//! bwrap --unshare-all --unshare-user --disable-userns --die-with-parent --new-session
//!       --cap-drop ALL --uid 65534 --gid 65534 --hostname sandbox
//!       --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/sbin /sbin
//!       --symlink usr/lib /lib --symlink usr/lib64 /lib64          (as on the host)
//!       --ro-bind-try /etc/ld.so.cache /etc/ld.so.cache --ro-bind-try /etc/fonts /etc/fonts
//!       --ro-bind <runtime>/passwd /etc/passwd --ro-bind <runtime>/group /etc/group
//!       --ro-bind <venv> /opt/venv --ro-bind <runtime>/runner-<hash>.py /run/respgw/runner.py
//!       --ro-bind <runtime>/mplcache-<hash> /run/respgw/mplcache
//!       --proc /proc --dev /dev --size <tmp_bytes> --tmpfs /tmp
//!       --size <tmp_bytes> --tmpfs /dev/shm --size <max_disk_bytes> --tmpfs /mnt/data
//!       --remount-ro /dev --remount-ro /
//!       --chdir /mnt/data --clearenv --setenv PATH … HOME /mnt/data MPLBACKEND Agg …
//!       -- /opt/venv/bin/python3 -I -B -u /run/respgw/runner.py --status-fd N --data-fd N
//!          --nproc <max_processes> --timeout <s> --max-files <max_files> --max-bytes <max_disk_bytes>
//! ```
//! started with its own session (`setsid`) and rlimits (`RLIMIT_CPU`, `RLIMIT_AS`,
//! `RLIMIT_FSIZE`, `RLIMIT_NOFILE`, `RLIMIT_CORE`=0) set in the forked child before exec; as
//! the unprivileged `sandbox_uid` when the gateway is root (see `process.rs` for why and how).
//! `<venv>` and `<runtime>` (the work root's `.runtime`) are their own paths when the gateway is
//! not root; as root, `/tmp/venv` and `/tmp/runtime` in a mount namespace of the child's own,
//! so that the work root and the venv may sit where only root can reach them.
//! The runner (`runner.py`) sets the per-execution `RLIMIT_NPROC`, forks the cell into a child
//! and reports how it ended on a pipe only the runner holds.
//!
//! # Warm start
//! None: each execution is a fresh interpreter in a fresh sandbox (~30 ms for `print(1)` in an
//! empty container, plus the copy of the container's files: ~0.1 s per 100 MiB;
//! ~0.7 s when the cell imports numpy and matplotlib, ~1.2 s with pandas and pyplot too).
//! A pre-started interpreter would have to be bound to a container directory before the
//! container is known, and reusing one across executions would carry state (and whatever the
//! previous code left running) over; the only safe saving is matplotlib's font cache, which is
//! built once at start-up and copied into each sandbox (it saves 1–2 s per pyplot import).

mod config;
mod fsscan;
mod layout;
mod process;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

pub use config::{
    DEFAULT_DISK_MB, DEFAULT_MAX_FILES, DEFAULT_QUEUE_WAIT_SEC, DEFAULT_TOTAL_DISK_MB, MAX_FILES_LIMIT, SandboxConfig,
    SandboxSettings, default_venv,
};
pub use layout::{CONTAINER_PREFIX, WorkRootClaim};

use layout::Layout;
use process::{BwrapFeatures, Launcher, RunOptions, RunOutput};

/// Largest cell accepted (bytes of source). Larger code is an [`ExecutionStatus::Error`].
pub const MAX_CODE_BYTES: usize = 1 << 20;

/// The hint every "not set up" error carries.
const SETUP_HINT: &str = "run scripts/setup-code-interpreter (installs bubblewrap and the Python venv)";

/// Why the sandbox cannot serve a request. Not for errors of the model's code: those are
/// [`ExecutionStatus`]es of an [`Execution`].
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The sandbox cannot run here (bubblewrap missing or not working, venv missing or broken).
    /// The gateway must not offer the tool; it never runs code unsandboxed.
    #[error("code interpreter unavailable: {0}")]
    Unavailable(String),
    /// Too many executions are running and waiting already, or this one waited for a run permit longer
    /// than [`SandboxConfig::queue_wait`].
    #[error("code interpreter busy: too many executions running and queued")]
    Busy,
    /// The containers of this gateway hold all the disk space they may, and none is idle to
    /// evict.
    #[error(
        "code interpreter out of space: the containers of this gateway use all of their {cap} and are all in use; try again later"
    )]
    NoRoom {
        /// The total cap, readable (`8 GiB`).
        cap: String,
    },
    /// The container id is not one of ours (`cntr_` + a UUID v7). A client error.
    #[error("invalid container id {0:?}")]
    InvalidContainerId(String),
    /// Something on the host side failed (file system, spawning).
    #[error("code interpreter internal error: {0}")]
    Internal(String),
}

/// How an execution ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecutionStatus {
    /// The code ran to its end.
    Success,
    /// The code raised an exception (traceback in stderr) or exited with a non-zero status.
    Error,
    /// The wall-clock timeout ran out; the whole sandbox was killed.
    Timeout,
    /// A resource limit stopped the code (memory, CPU time, file size, processes, open files,
    /// disk); the text says which.
    ResourceLimit(String),
    /// The code was killed by a signal not explained by a limit; the text says which.
    Killed(String),
}

impl std::fmt::Display for ExecutionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExecutionStatus::Success => f.write_str("success"),
            ExecutionStatus::Error => f.write_str("the code raised an exception"),
            ExecutionStatus::Timeout => f.write_str("the execution timed out and was killed"),
            ExecutionStatus::ResourceLimit(what) => write!(f, "resource limit: {what}"),
            ExecutionStatus::Killed(why) => write!(f, "killed: {why}"),
        }
    }
}

/// The result of running one cell.
#[derive(Debug, Clone)]
pub struct Execution {
    pub status: ExecutionStatus,
    /// What the code printed, at most [`SandboxConfig::max_output_bytes`] (then a marker).
    pub stdout: String,
    /// Same for stderr; holds the traceback when [`ExecutionStatus::Error`].
    pub stderr: String,
    /// `repr()` of the value of a trailing expression (`2+2` → `"4"`), as in a notebook cell;
    /// `None` when the cell does not end with an expression, it is `None`, or it ends with `;`.
    pub result: Option<String>,
    /// PNG bytes of every `.png` the code wrote or modified under the container directory in
    /// this execution (matplotlib `savefig`, and `plt.show()`), oldest first; validated as PNG,
    /// bounded in size and count.
    pub images: Vec<Vec<u8>>,
    /// Wall time of the sandbox run (excluding time spent waiting for a run permit).
    pub duration: Duration,
}

/// Load of a [`Sandbox`] (for gauges).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxStats {
    /// Executions running now.
    pub running: usize,
    /// Executions admitted and waiting (for a run permit or for their container).
    pub queued: usize,
}

/// Runs code in sandboxed containers. Cheap to clone (one shared state); `Send + Sync`.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox").field("config", &self.inner.launcher.config).finish_non_exhaustive()
    }
}

struct Inner {
    launcher: Launcher,
    /// One permit per execution allowed to run at once (`max_concurrency`).
    run_permits: tokio::sync::Semaphore,
    /// Executions inside `execute` (running or waiting).
    admitted: AtomicUsize,
    /// Executions past admission: they have their container's room and are running.
    running: AtomicUsize,
    /// Held while one execution decides whether its container fits under the total disk cap,
    /// and, when it does not, until its container's lock is released: so that another execution
    /// of this process never counts a container that is about to be refused as in use.
    room: tokio::sync::Mutex<()>,
    /// One async mutex per container in use in this process (the flock serialises across
    /// processes; this avoids polling it within one).
    containers: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

/// Decrements a counter on drop (admission and running counts survive cancellation).
struct CountGuard<'a>(&'a AtomicUsize);

impl Drop for CountGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The start-up probe: the packages import, and the sandbox is what we think it is (the
/// unprivileged uid, no network interface but loopback, no capabilities).
const PROBE_CODE: &str = "import os\n\
import numpy, pandas, matplotlib\n\
import matplotlib.pyplot as plt\n\
assert os.getuid() == 65534, 'uid'\n\
ifaces = [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]]\n\
assert ifaces == ['lo'], 'network interfaces %r' % ifaces\n\
status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n\
assert int(status['CapEff'], 16) == 0, 'capabilities'\n\
print('respgw-probe-ok', numpy.__version__, pandas.__version__, matplotlib.__version__)\n";

impl Sandbox {
    /// Checks that the sandbox really works here and prepares it: bubblewrap present and able to
    /// create the sandbox, the venv's python importing numpy, pandas and matplotlib inside it (a
    /// real probe execution, which also builds matplotlib's font cache the first time). Any
    /// failure is [`SandboxError::Unavailable`] with the reason and what to run. Starts the idle
    /// container sweeper (needs a tokio runtime; it stops when the last clone is dropped).
    pub async fn new(config: SandboxConfig) -> Result<Sandbox, SandboxError> {
        let unavailable = |msg: String| SandboxError::Unavailable(msg);
        config.check().map_err(unavailable)?;
        let bwrap = resolve_program(&config.bwrap).ok_or_else(|| {
            unavailable(format!("bubblewrap ({}) not found on PATH; {SETUP_HINT}", config.bwrap.display()))
        })?;
        let python = config.venv.join("bin").join("python3");
        if !python.exists() {
            return Err(unavailable(format!(
                "no Python venv at {} ({} missing); {SETUP_HINT}, or point --code-interpreter-venv (GW_CODE_INTERPRETER_VENV) at one",
                config.venv.display(),
                python.display()
            )));
        }
        let venv = std::fs::canonicalize(&config.venv)
            .map_err(|e| unavailable(format!("cannot resolve the venv path {}: {e}", config.venv.display())))?;
        let drop_to = if nix::unistd::geteuid().is_root() {
            if config.sandbox_uid == 0 {
                return Err(unavailable("sandbox_uid must not be 0: the sandbox never runs as root".into()));
            }
            Some((config.sandbox_uid, config.sandbox_gid))
        } else {
            None
        };
        let features = BwrapFeatures::probe(&bwrap).await.map_err(unavailable)?;
        let layout = Layout::prepare(&config.work_root, &venv, drop_to).map_err(unavailable)?;

        let sandbox = Sandbox {
            inner: Arc::new(Inner {
                run_permits: tokio::sync::Semaphore::new(config.max_concurrency),
                admitted: AtomicUsize::new(0),
                running: AtomicUsize::new(0),
                room: tokio::sync::Mutex::new(()),
                containers: Mutex::new(HashMap::new()),
                launcher: Launcher { bwrap, venv, layout, features, config },
            }),
        };
        sandbox.probe().await?;
        sandbox.spawn_sweeper();
        Ok(sandbox)
    }

    /// One execution of [`PROBE_CODE`] in a throw-away container, in the real sandbox.
    async fn probe(&self) -> Result<(), SandboxError> {
        let launcher = &self.inner.launcher;
        let layout = &launcher.layout;
        let id = Self::new_container_id();
        let data = layout.ensure_container(&id).map_err(SandboxError::Unavailable)?;
        let staging = if layout.mplcache_ready() {
            None
        } else {
            Some(layout.new_mplcache_staging().map_err(SandboxError::Unavailable)?)
        };
        let timeout = launcher.config.timeout.max(Duration::from_secs(60));
        let run = launcher
            .run(
                &data,
                PROBE_CODE.as_bytes(),
                RunOptions { build_mplcache: staging.as_deref(), timeout: Some(timeout) },
            )
            .await;
        let _ = std::fs::remove_dir_all(layout.container_dir(&id));
        let run = match run {
            Ok(run) => run,
            Err(e) => {
                let root_hint = if layout.drop_to.is_some() {
                    " (as root the gateway needs CAP_SYS_ADMIN for a private mount namespace and CAP_SETUID/\
                     CAP_SETGID to switch to the sandbox uid)"
                } else {
                    ""
                };
                return Err(SandboxError::Unavailable(format!(
                    "cannot start bubblewrap ({}): {e}{root_hint}; {SETUP_HINT}",
                    launcher.bwrap.display()
                )));
            }
        };
        let ok = run.finished.as_ref().is_some_and(|(_, o)| o.as_ref().is_some_and(|o| o.kind == "ok"))
            && String::from_utf8_lossy(&run.stdout.kept).contains("respgw-probe-ok");
        if !ok {
            if let Some(dir) = &staging {
                let _ = std::fs::remove_dir_all(dir);
            }
            let stderr = String::from_utf8_lossy(&run.stderr.kept);
            let tail: String = stderr.chars().rev().take(2000).collect::<Vec<_>>().into_iter().rev().collect();
            let what = if !run.started {
                format!(
                    "bubblewrap could not start the sandbox ({}; unprivileged user namespaces disabled? \
                     see sysctl kernel.unprivileged_userns_clone and user.max_user_namespaces)",
                    process::describe_exit(run.exit)
                )
            } else if run.timed_out {
                format!("the probe timed out after {timeout:?}")
            } else {
                "the venv's python cannot import numpy, pandas and matplotlib in the sandbox, \
                 or the sandbox is not isolated as expected"
                    .to_string()
            };
            return Err(SandboxError::Unavailable(format!("{what}; {SETUP_HINT}. stderr: {}", tail.trim())));
        }
        if let Some(dir) = staging {
            layout.publish_mplcache(&dir);
        }
        Ok(())
    }

    fn spawn_sweeper(&self) {
        let weak = Arc::downgrade(&self.inner);
        let idle = self.inner.launcher.config.container_idle;
        let every = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(60));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(inner) = weak.upgrade() else { return };
                let sandbox = Sandbox { inner };
                sandbox.cleanup_idle().await;
            }
        });
    }

    /// A new container id: `cntr_` + a hyphenated UUID v7.
    pub fn new_container_id() -> String {
        layout::new_container_id()
    }

    /// Whether `id` is a container id this sandbox accepts.
    pub fn is_valid_container_id(id: &str) -> bool {
        layout::is_valid_container_id(id)
    }

    /// Current load.
    pub fn stats(&self) -> SandboxStats {
        let running = self.inner.running.load(Ordering::SeqCst);
        let admitted = self.inner.admitted.load(Ordering::SeqCst);
        SandboxStats { running, queued: admitted.saturating_sub(running) }
    }

    /// The configuration in force.
    pub fn config(&self) -> &SandboxConfig {
        &self.inner.launcher.config
    }

    /// The host directory holding a container's files (exists after its first execution).
    pub fn container_data_dir(&self, container_id: &str) -> Option<PathBuf> {
        layout::is_valid_container_id(container_id)
            .then(|| self.inner.launcher.layout.container_dir(container_id).join("data"))
    }

    /// Deletes containers idle for longer than [`SandboxConfig::container_idle`] now (the
    /// background sweeper does this periodically). Returns how many were deleted.
    pub async fn cleanup_idle(&self) -> usize {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let l = &inner.launcher;
            l.layout.sweep(l.config.container_idle)
        })
        .await
        .unwrap_or(0)
    }

    /// Runs `code` in container `container_id` (created on first use; its files persist between
    /// executions until it is idle for [`SandboxConfig::container_idle`]). Executions of one
    /// container run one at a time.
    pub async fn execute(&self, container_id: &str, code: &str) -> Result<Execution, SandboxError> {
        if !layout::is_valid_container_id(container_id) {
            return Err(SandboxError::InvalidContainerId(container_id.to_string()));
        }
        let inner = &self.inner;
        let config = &inner.launcher.config;
        let cap = config.max_concurrency.saturating_add(config.max_queued);
        if inner.admitted.fetch_add(1, Ordering::SeqCst) >= cap {
            inner.admitted.fetch_sub(1, Ordering::SeqCst);
            return Err(SandboxError::Busy);
        }
        let _admitted = CountGuard(&inner.admitted);

        if code.len() > MAX_CODE_BYTES {
            return Ok(Execution {
                status: ExecutionStatus::Error,
                stdout: String::new(),
                stderr: format!("the code is {} bytes long; at most {MAX_CODE_BYTES} are accepted\n", code.len()),
                result: None,
                images: Vec::new(),
                duration: Duration::ZERO,
            });
        }

        // Container first (no run permit is held while waiting for it), then a run permit, then the
        // container's lock across processes; waiting for all three is bounded.
        let layout = &inner.launcher.layout;
        let container_mutex = self.container_mutex(container_id);
        let waited = tokio::time::timeout(config.queue_wait, async {
            let container = container_mutex.lock().await;
            let permit =
                inner.run_permits.acquire().await.map_err(|_| SandboxError::Internal("sandbox closed".into()))?;
            let lock = layout.lock_container(container_id).await.map_err(SandboxError::Internal)?;
            Ok::<_, SandboxError>((container, permit, lock))
        })
        .await;
        let Ok(waited) = waited else {
            tracing::warn!(container = container_id, waited = ?config.queue_wait, "code_interpreter: an execution waited too long for a slot");
            self.forget_container_mutex(container_id, &container_mutex);
            return Err(SandboxError::Busy);
        };
        let (_container, _permit, lock) = waited?;
        let data = layout.ensure_container(container_id).map_err(SandboxError::Internal)?;
        layout.touch(container_id);
        let room = inner.room.lock().await;
        if let Err(refused) = self.make_room(container_id).await {
            drop(lock);
            drop(room);
            return Err(refused);
        }
        drop(room);
        let _lock = lock;
        inner.running.fetch_add(1, Ordering::SeqCst);
        let _running = CountGuard(&inner.running);

        let before = blocking({
            let data = data.clone();
            move || Ok(fsscan::png_snapshot(&data))
        })
        .await
        .map_err(SandboxError::Internal)?;

        let run = inner
            .launcher
            .run(&data, code.as_bytes(), RunOptions::default())
            .await
            .map_err(|e| SandboxError::Internal(format!("cannot start the sandbox: {e}")))?;

        let (max_bytes, max_count) = (config.max_image_bytes, config.max_images);
        let (pngs, usage) = blocking({
            let data = data.clone();
            move || {
                let pngs = fsscan::collect_pngs(&data, &before, max_bytes, max_count);
                // plt.show() output is an image, not a file of the container.
                let _ = std::fs::remove_dir_all(data.join(".respgw-show"));
                Ok((pngs, fsscan::usage(&data)))
            }
        })
        .await
        .map_err(SandboxError::Internal)?;
        // A walk cut short counts as a full container.
        layout.record_usage(container_id, usage.map_or(config.max_disk_bytes, |u| u.bytes));
        for (path, why) in &pngs.skipped {
            tracing::debug!(container = container_id, path = %path.display(), why, "code_interpreter: PNG not returned");
        }
        layout.touch(container_id);
        self.forget_container_mutex(container_id, &container_mutex);

        finish(run, pngs.images, config)
    }

    /// Keeps all containers within [`SandboxConfig::max_total_disk_bytes`] with room for
    /// `container_id` to fill up: evicts idle containers, least recently used first, as needed;
    /// [`SandboxError::NoRoom`] when that is not enough. Called with the container's lock held,
    /// so that other processes count it as in use.
    async fn make_room(&self, container_id: &str) -> Result<(), SandboxError> {
        let inner = Arc::clone(&self.inner);
        let me = container_id.to_string();
        blocking(move || {
            let config = &inner.launcher.config;
            let layout = &inner.launcher.layout;
            let (cap, need) = (config.max_total_disk_bytes, config.max_disk_bytes);
            let charges = layout.charges(&me, need);
            let mut total = charges.total.saturating_add(need);
            for idle in &charges.idle {
                if total <= cap {
                    break;
                }
                let last_use = idle.last_use;
                let unused_since = |lock: &Path| {
                    std::fs::metadata(lock).and_then(|m| m.modified()).is_ok_and(|t| t <= last_use)
                };
                if layout.delete_unless_in_use(&idle.id, unused_since) {
                    tracing::info!(container = %idle.id, bytes = idle.bytes, "code_interpreter: evicted an idle container (total disk cap)");
                    total = total.saturating_sub(idle.bytes);
                }
            }
            Ok(total <= cap)
        })
        .await
        .map_err(SandboxError::Internal)?
        .then_some(())
        .ok_or_else(|| SandboxError::NoRoom { cap: process::human_bytes(self.inner.launcher.config.max_total_disk_bytes) })
    }

    fn container_mutex(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.inner.containers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = map.get(id).and_then(Weak::upgrade) {
            return m;
        }
        let m = Arc::new(tokio::sync::Mutex::new(()));
        map.insert(id.to_string(), Arc::downgrade(&m));
        m
    }

    fn forget_container_mutex(&self, id: &str, mine: &Arc<tokio::sync::Mutex<()>>) {
        let mut map = self.inner.containers.lock().unwrap_or_else(|p| p.into_inner());
        // Only the last user removes the entry (others still hold a strong reference).
        if Arc::strong_count(mine) == 1 {
            map.remove(id);
        }
        map.retain(|_, w| w.strong_count() > 0);
    }
}

/// Turns a raw run into an [`Execution`], deciding the status. Order matters: what the gateway
/// observed itself (timeout, disk) wins over what the sandbox reported.
fn finish(run: RunOutput, images: Vec<Vec<u8>>, config: &SandboxConfig) -> Result<Execution, SandboxError> {
    use process::{human_bytes, signal_name};
    let max = config.max_output_bytes;
    let mut result = None;
    let status = if run.timed_out {
        ExecutionStatus::Timeout
    } else if !run.started {
        // Before the runner wrote its first line no model code has run: this is ours.
        let stderr = String::from_utf8_lossy(&run.stderr.kept).trim().to_string();
        return Err(SandboxError::Internal(format!(
            "the sandbox did not start ({}): {stderr}",
            process::describe_exit(run.exit)
        )));
    } else if let Some(reason) = &run.failed {
        return Err(SandboxError::Internal(format!("the sandbox runner failed: {reason}")));
    } else {
        match &run.finished {
            None => ExecutionStatus::Killed("the sandbox's runner process was killed".into()),
            Some((child, outcome)) => match (child.signal, outcome) {
                (Some(sig), _) if sig == libc::SIGXCPU => {
                    ExecutionStatus::ResourceLimit(format!("CPU time ({} s) exceeded", config.cpu_seconds))
                }
                (Some(sig), _) if sig == libc::SIGXFSZ => ExecutionStatus::ResourceLimit(format!(
                    "file size: a file grew past {}",
                    human_bytes(config.max_file_bytes)
                )),
                (Some(sig), _) => ExecutionStatus::Killed(format!("the code was killed by {}", signal_name(sig))),
                // The outcome counts only when it agrees with the exit status (the runner exits
                // 0 after "ok" and 1 after "exception"), so model code that writes a fake one and
                // leaves through os._exit gains nothing.
                (None, Some(o)) if o.kind == "ok" && child.exit == Some(0) => {
                    result = o.result.clone();
                    ExecutionStatus::Success
                }
                (None, Some(o)) if o.kind == "exception" && child.exit == Some(1) => match o.limit.as_deref() {
                    Some(limit) => ExecutionStatus::ResourceLimit(limit_message(limit, config, o.exc_type.as_deref())),
                    None => ExecutionStatus::Error,
                },
                // The cell left through os._exit: its exit status tells.
                (None, _) if child.exit == Some(0) => ExecutionStatus::Success,
                (None, _) => ExecutionStatus::Error,
            },
        }
    };
    let result = result.map(|r| {
        let total = r.len() as u64;
        process::Captured { kept: r.into_bytes(), total }.into_text(max)
    });
    let mut stderr = run.stderr.into_text(max);
    if let Some(save) = &run.save {
        if let Some(error) = &save.error {
            tracing::warn!(error, "code_interpreter: the container's files could not all be saved");
            stderr.push_str(&format!("[the container's files could not all be saved: {error}]\n"));
        }
        if save.skipped > 0 {
            stderr.push_str(&format!(
                "[{} files were not kept: a container keeps at most {} files and {}]\n",
                save.skipped,
                config.max_files,
                human_bytes(config.max_disk_bytes)
            ));
        }
    }
    Ok(Execution { status, stdout: run.stdout.into_text(max), stderr, result, images, duration: run.duration })
}

fn limit_message(limit: &str, config: &SandboxConfig, exc: Option<&str>) -> String {
    use process::human_bytes;
    let exc = exc.map(|e| format!(" ({e})")).unwrap_or_default();
    match limit {
        "memory" => format!("memory: the address space limit of {} was reached{exc}", human_bytes(config.memory_bytes)),
        "file_size" => format!("file size: a file grew past {}{exc}", human_bytes(config.max_file_bytes)),
        "processes" => format!("processes: at most {} processes and threads{exc}", config.max_processes),
        "open_files" => format!("open files: at most {}{exc}", config.max_open_files),
        "disk" => format!(
            "disk space: no space left on device (the container's files may use {}, /tmp {}){exc}",
            human_bytes(config.max_disk_bytes),
            human_bytes(config.tmp_bytes)
        ),
        other => format!("{other}{exc}"),
    }
}

/// Runs blocking file-system work off the async runtime.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, String> + Send + 'static) -> Result<T, String> {
    tokio::task::spawn_blocking(f).await.map_err(|e| format!("blocking task failed: {e}"))?
}

/// `bwrap` → the first executable `bwrap` on PATH; a path with a slash is taken as it is.
fn resolve_program(program: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let is_exec = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.components().count() > 1 || program.is_absolute() {
        return is_exec(program).then(|| program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| is_exec(p))
}
