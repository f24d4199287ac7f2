//! The process under test: the real `respgw` binary, or the bench's own floor proxy
//! ([`crate::floor`]), as a child process, plus what `/proc` says about it (resident memory, CPU
//! time). Both are started, watched and measured by the same code, so their figures compare.
//!
//! `respgw serve` is a supervisor that re-executes itself as worker processes, so every number
//! here is taken over the whole process tree: the child and all its descendants.

use std::collections::VecDeque;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, bail};
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, SysconfVar, sysconf};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long the child may take to print its `listening on` line.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Log lines kept for the error message if the child dies.
const LOG_TAIL: usize = 20;
/// Log lines forwarded to stderr per instance; the rest are counted (a flood of the same
/// warning under 10,000 streams would bury the table).
const LOG_FORWARD: usize = 10;

/// How long a stopped child may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The window over which [`Gateway::settle`] measures the tree's CPU use.
const SETTLE_WINDOW: Duration = Duration::from_millis(250);

/// Fraction of one core under which the tree counts as settled after start-up.
const SETTLED_CPU: f64 = 0.1;

/// How long [`Gateway::settle`] waits at most.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The open-files limit [`raise_open_files_limit`] aims for.
const WANTED_OPEN_FILES: u64 = 65_536;

/// A running gateway on `127.0.0.1:<free port>`: `respgw serve` with its store in a private
/// temp dir, or the floor proxy. Killed (SIGKILL) when dropped; [`Gateway::stop`] shuts it down
/// gracefully.
pub struct Gateway {
    /// What it is, in messages: `respgw` or `floor proxy`.
    name: &'static str,
    child: Child,
    pid: u32,
    base_url: String,
    /// The child's last log lines (stderr).
    log_tail: Arc<Mutex<VecDeque<String>>>,
    /// The task forwarding the child's log lines; returns how many there were.
    log_forwarder: Option<tokio::task::JoinHandle<usize>>,
    /// Holds respgw's SQLite file; removed on drop, after the child is gone.
    _dir: Option<tempfile::TempDir>,
}

impl Gateway {
    /// Start `binary serve --upstream <upstream> <extra_args>` and wait until it listens.
    pub async fn start(binary: &Path, upstream: &str, extra_args: &[String]) -> anyhow::Result<Self> {
        Self::start_on(binary, upstream, extra_args, None).await
    }

    /// [`Gateway::start`] with the store at `db` (`--db-path`; a SQLite file in the private temp
    /// dir when `None`).
    pub async fn start_on(
        binary: &Path,
        upstream: &str,
        extra_args: &[String],
        db: Option<&str>,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("respgw-bench-")
            .tempdir()
            .context("cannot create a temp dir for the response store")?;
        let db_path: std::ffi::OsString = match db {
            Some(db) => db.into(),
            None => dir.path().join("respgw.db").into_os_string(),
        };
        let mut command = Command::new(binary);
        command
            .arg("serve")
            .arg("--upstream")
            .arg(upstream)
            .args(["--gateway-host", "127.0.0.1", "--gateway-port", "0"])
            .arg("--db-path")
            .arg(&db_path)
            .args(extra_args)
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1")
            // No key: auth off. Make sure nothing from the caller's environment turns it on.
            .env_remove("GW_API_KEYS")
            .env_remove("GW_UPSTREAM_API_KEY");
        let cannot_start =
            format!("cannot start {} (build it with `cargo build --release -p respgw`)", binary.display());
        Self::spawn("respgw", command, &cannot_start, Some(dir)).await
    }

    /// Start the floor proxy (`<this executable> --serve-floor-proxy`, see [`crate::floor`]) in
    /// front of `upstream` and wait until it listens.
    pub async fn start_floor(upstream: &str) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("cannot find the respgw-bench executable")?;
        let mut command = Command::new(&exe);
        command.arg("--serve-floor-proxy").arg("--floor-upstream").arg(upstream);
        let cannot_start = format!("cannot start the floor proxy ({})", exe.display());
        Self::spawn("floor proxy", command, &cannot_start, None).await
    }

    /// Spawn `command` (stdout and stderr piped; `cannot_start` is the error if that fails),
    /// forward its log, wait for its `listening on` line and for its start-up work to settle.
    async fn spawn(
        name: &'static str,
        mut command: Command,
        cannot_start: &str,
        dir: Option<tempfile::TempDir>,
    ) -> anyhow::Result<Self> {
        let mut child = command
            // Loopback only: both upstream clients honour proxy variables.
            .env_remove("HTTP_PROXY")
            .env_remove("http_proxy")
            .env_remove("ALL_PROXY")
            .env_remove("all_proxy")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context(cannot_start.to_owned())?;
        let pid = child.id().with_context(|| format!("the {name} exited at once"))?;

        // Forward the child's log lines, minus respgw's expected "authentication is OFF"
        // warning, and keep the last few for an error message.
        let log_tail = Arc::new(Mutex::new(VecDeque::with_capacity(LOG_TAIL)));
        let mut log_forwarder = None;
        if let Some(stderr) = child.stderr.take() {
            let log_tail = Arc::clone(&log_tail);
            log_forwarder = Some(tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                let mut forwarded = 0usize;
                while let Ok(Some(line)) = lines.next_line().await {
                    if line.contains("authentication is OFF") {
                        continue;
                    }
                    forwarded += 1;
                    if forwarded <= LOG_FORWARD {
                        eprintln!("  {name}[{pid}]: {line}");
                    }
                    let mut tail = log_tail.lock().unwrap_or_else(PoisonError::into_inner);
                    if tail.len() == LOG_TAIL {
                        tail.pop_front();
                    }
                    tail.push_back(line);
                }
                forwarded
            }));
        }

        let stdout = child.stdout.take().with_context(|| format!("the {name}'s stdout is not piped"))?;
        let mut lines = BufReader::new(stdout).lines();
        let base_url = tokio::time::timeout(START_TIMEOUT, async {
            while let Some(line) = lines.next_line().await? {
                if let Some(url) = line.trim().strip_prefix("listening on ") {
                    return Ok(url.to_owned());
                }
            }
            bail!("the {name} exited before it was listening")
        })
        .await
        .with_context(|| format!("the {name} did not print `listening on` in time"))??;
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

        let mut gateway = Gateway { name, child, pid, base_url, log_tail, log_forwarder, _dir: dir };
        gateway.settle().await?;
        Ok(gateway)
    }

    /// Wait until the start-up work of the process tree is over (the code interpreter's sandbox
    /// check runs Python for about a second of CPU per process, right after `listening on`), so
    /// that it is not measured as, or competing with, the first test: until the tree uses less
    /// than [`SETTLED_CPU`] of one core over a [`SETTLE_WINDOW`], for at most [`SETTLE_TIMEOUT`].
    async fn settle(&mut self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + SETTLE_TIMEOUT;
        let mut before = self.total_cpu_ns().await?;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(SETTLE_WINDOW).await;
            let now = self.total_cpu_ns().await?;
            let used = now.saturating_sub(before) as f64 / SETTLE_WINDOW.as_nanos() as f64;
            if used < SETTLED_CPU {
                return Ok(());
            }
            before = now;
        }
        eprintln!(
            "respgw-bench: the {} was still busy {} s after start; measuring anyway",
            self.name,
            SETTLE_TIMEOUT.as_secs()
        );
        Ok(())
    }

    /// CPU time of the process tree including its reaped children (see [`tree_cpu_ns`]).
    async fn total_cpu_ns(&mut self) -> anyhow::Result<u64> {
        self.check_alive().await?;
        Ok(process_tree(self.pid).into_iter().map(tree_cpu_ns).sum())
    }

    /// `http://127.0.0.1:PORT`, without `/v1`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Fail if the child has exited, with its exit status and last log lines.
    pub async fn check_alive(&mut self) -> anyhow::Result<()> {
        let Some(status) = self.child.try_wait()? else {
            return Ok(());
        };
        // Let the log forwarder read what the child wrote last.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let tail = self.log_tail.lock().unwrap_or_else(PoisonError::into_inner);
        let log: Vec<&str> = tail.iter().map(String::as_str).collect();
        bail!(
            "the {} (pid {}) exited unexpectedly: {status}; its last log lines:\n{}",
            self.name,
            self.pid,
            if log.is_empty() { "(none)".to_owned() } else { log.join("\n") }
        )
    }

    /// Resident memory of the process tree in KiB (the sum of each process's `VmRSS`, so pages
    /// shared between the supervisor and its workers count once per process), and how many
    /// processes it has. Fails if the child has exited.
    pub async fn rss_kib(&mut self) -> anyhow::Result<(u64, usize)> {
        self.check_alive().await?;
        let tree = process_tree(self.pid);
        let mut total = 0;
        for &pid in &tree {
            // A process can exit between the listing and the read; only the root must be there.
            match rss_kib(pid) {
                Ok(kib) => total += kib,
                Err(e) if pid == self.pid => return Err(e),
                Err(_) => {}
            }
        }
        Ok((total, tree.len()))
    }

    /// CPU time used so far by the process tree's live threads, in ns (see [`cpu_ns`]). Fails
    /// if the child has exited.
    pub async fn cpu_ns(&mut self) -> anyhow::Result<u64> {
        self.check_alive().await?;
        Ok(process_tree(self.pid).into_iter().map(cpu_ns).sum())
    }

    /// CPU time used so far by the process tree's live threads named `name`, in ns (see
    /// [`named_threads_cpu_ns`]). Fails if the child has exited.
    pub async fn thread_cpu_ns(&mut self, name: &str) -> anyhow::Result<u64> {
        self.check_alive().await?;
        Ok(process_tree(self.pid).into_iter().map(|pid| named_threads_cpu_ns(pid, name)).sum())
    }

    /// CPU time used so far by the process tree, exited threads included, at clock-tick
    /// resolution (see [`stat_cpu_ns`]). Fails if the child has exited.
    pub async fn stat_cpu_ns(&mut self) -> anyhow::Result<u64> {
        self.check_alive().await?;
        Ok(process_tree(self.pid).into_iter().map(stat_cpu_ns).sum())
    }

    /// SIGTERM, wait for a graceful exit (bounded), SIGKILL if it did not come; reap.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let pid = libc::pid_t::try_from(self.pid).context("pid out of range")?;
        // `pid` is our own unreaped child, so it cannot have been recycled for another process.
        let sent = kill(Pid::from_raw(pid), Signal::SIGTERM).is_ok();
        if !sent || tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await.is_err() {
            self.child.start_kill().ok();
        }
        self.child.wait().await.with_context(|| format!("cannot reap the {}", self.name))?;
        if let Some(forwarder) = self.log_forwarder.take()
            && let Ok(Ok(lines)) = tokio::time::timeout(Duration::from_secs(1), forwarder).await
            && lines > LOG_FORWARD
        {
            eprintln!("  {}[{}]: ({} more log lines not shown)", self.name, self.pid, lines - LOG_FORWARD);
        }
        Ok(())
    }
}

/// `root` and all its descendants, from the parent ids in `/proc/*/stat`.
fn process_tree(root: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            // `pid (comm) state ppid …`; comm may contain spaces and parentheses.
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(ppid) = ppid {
                parents.push((pid, ppid));
            }
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(parents.iter().filter(|&&(_, pp)| pp == parent).map(|&(p, _)| p));
        i += 1;
    }
    tree
}

/// Resident set size of `pid` in KiB (`VmRSS` of `/proc/<pid>/status`).
fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("cannot read /proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no VmRSS in /proc/{pid}/status"))
}

/// CPU time used so far by all live threads of `pid`, in nanoseconds: the sum of the first field
/// of `/proc/<pid>/task/*/schedstat` (threads that already exited are not counted; respgw's
/// runtime and SQLite threads live as long as the process). 0 if the process is gone.
pub fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    let mut total = 0u64;
    for task in tasks.flatten() {
        // A thread can exit between the listing and the read.
        if let Ok(text) = std::fs::read_to_string(task.path().join("schedstat"))
            && let Some(ns) = text.split_whitespace().next().and_then(|v| v.parse::<u64>().ok())
        {
            total += ns;
        }
    }
    total
}

/// [`cpu_ns`] of the live threads of `pid` named `name` (`/proc/<pid>/task/*/comm`, which the
/// kernel cuts to 15 bytes: `sqlite-checkpoint` is `sqlite-checkpoi`).
fn named_threads_cpu_ns(pid: u32, name: &str) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    let mut total = 0u64;
    for task in tasks.flatten() {
        let named = std::fs::read_to_string(task.path().join("comm")).is_ok_and(|comm| comm.trim_end() == name);
        if named
            && let Ok(text) = std::fs::read_to_string(task.path().join("schedstat"))
            && let Some(ns) = text.split_whitespace().next().and_then(|v| v.parse::<u64>().ok())
        {
            total += ns;
        }
    }
    total
}

/// CPU time (user + system) of `pid` so far, in nanoseconds, from `/proc/<pid>/stat`: unlike
/// [`cpu_ns`] it includes threads that already exited, at clock-tick resolution (10 ms
/// usually), so it suits windows of seconds. 0 if the process is gone.
pub fn stat_cpu_ns(pid: u32) -> u64 {
    stat_ticks_ns(pid, &[11, 12])
}

/// The sum of some clock-tick fields of `/proc/<pid>/stat`, in nanoseconds; `fields` index the
/// fields after `pid (comm)` (0 is the state). 0 if the process is gone.
fn stat_ticks_ns(pid: u32, fields: &[usize]) -> u64 {
    let ticks_per_s = match sysconf(SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => t as u64,
        _ => 100,
    };
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // After `pid (comm)`: state is field 3; utime, stime, cutime, cstime are fields 14 to 17.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    let values: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.iter().filter_map(|&i| values.get(i).and_then(|f| f.parse::<u64>().ok())).sum();
    ticks * 1_000_000_000 / ticks_per_s
}

/// [`stat_cpu_ns`] plus the CPU time of the children `pid` has reaped (`cutime` and `cstime`), so
/// that a sum over a process tree does not drop when a short-lived child exits.
fn tree_cpu_ns(pid: u32) -> u64 {
    stat_ticks_ns(pid, &[11, 12, 13, 14])
}

/// Raise this process's open-files limit to 65,536 (children inherit it): both limits where the
/// process may raise its hard limit (root), else the soft limit as far as the hard one allows.
/// Returns the soft limit now in force.
pub fn raise_open_files_limit() -> anyhow::Result<u64> {
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limit) => limit,
        Err(errno) => bail!("getrlimit(RLIMIT_NOFILE) failed: {}", std::io::Error::from(errno)),
    };
    if soft >= WANTED_OPEN_FILES {
        return Ok(soft);
    }
    if hard < WANTED_OPEN_FILES && setrlimit(Resource::RLIMIT_NOFILE, WANTED_OPEN_FILES, WANTED_OPEN_FILES).is_ok() {
        return Ok(WANTED_OPEN_FILES);
    }
    let wanted = hard.min(WANTED_OPEN_FILES);
    if soft < wanted && setrlimit(Resource::RLIMIT_NOFILE, wanted, hard).is_ok() {
        return Ok(wanted);
    }
    Ok(soft)
}
