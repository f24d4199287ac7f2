//! The gateway under test: the real `respgw` binary as a child process, plus what `/proc` says
//! about it (resident memory, CPU time).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long `respgw serve` may take to print its `listening on` line.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `respgw serve` on `127.0.0.1:<free port>`, its store in a private temp dir.
/// Killed when dropped.
pub struct Gateway {
    child: Child,
    pid: u32,
    base_url: String,
    /// Holds the SQLite file; removed on drop, after the child is gone.
    _dir: tempfile::TempDir,
}

impl Gateway {
    /// Start `binary serve --upstream <upstream>` and wait until it listens.
    pub async fn start(binary: &Path, upstream: &str) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("respgw-bench-")
            .tempdir()
            .context("cannot create a temp dir for the response store")?;
        let db_path: PathBuf = dir.path().join("respgw.db");
        let mut child = Command::new(binary)
            .arg("serve")
            .arg("--upstream")
            .arg(upstream)
            .args(["--gateway-host", "127.0.0.1", "--gateway-port", "0"])
            .arg("--db-path")
            .arg(&db_path)
            .env("RUST_LOG", "warn")
            // No key: auth off. Make sure nothing from the caller's environment turns it on.
            .env_remove("GW_API_KEYS")
            .env_remove("GW_UPSTREAM_API_KEY")
            // Loopback only: respgw's upstream client honours proxy variables.
            .env_remove("HTTP_PROXY")
            .env_remove("http_proxy")
            .env_remove("ALL_PROXY")
            .env_remove("all_proxy")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| {
                format!("cannot start {} (build it with `cargo build --release -p respgw`)", binary.display())
            })?;
        let pid = child.id().context("respgw exited at once")?;

        // Forward respgw's log lines, minus the expected "authentication is OFF" warning.
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if !line.contains("authentication is OFF") {
                        eprintln!("  respgw[{pid}]: {line}");
                    }
                }
            });
        }

        let stdout = child.stdout.take().context("respgw stdout is not piped")?;
        let mut lines = BufReader::new(stdout).lines();
        let base_url = tokio::time::timeout(START_TIMEOUT, async {
            while let Some(line) = lines.next_line().await? {
                if let Some(url) = line.trim().strip_prefix("listening on ") {
                    return Ok(url.to_owned());
                }
            }
            bail!("respgw exited before it was listening")
        })
        .await
        .context("respgw did not print `listening on` in time")??;
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

        Ok(Gateway { child, pid, base_url, _dir: dir })
    }

    /// `http://127.0.0.1:PORT`, without `/v1`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Fail if the child has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait()? {
            Some(status) => bail!("respgw exited unexpectedly: {status}"),
            None => Ok(()),
        }
    }

    /// Kill the child and reap it.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.child.start_kill().ok();
        self.child.wait().await.context("cannot reap respgw")?;
        Ok(())
    }
}

/// Resident set size of `pid` in KiB (`VmRSS` of `/proc/<pid>/status`).
pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("cannot read /proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc/<pid>/status")
}

/// CPU time used so far by all live threads of `pid`, in nanoseconds: the sum of the first field
/// of `/proc/<pid>/task/*/schedstat` (threads that already exited are not counted; respgw's
/// runtime and SQLite threads live as long as the process).
pub fn cpu_ns(pid: u32) -> anyhow::Result<u64> {
    let mut total = 0u64;
    let tasks =
        std::fs::read_dir(format!("/proc/{pid}/task")).with_context(|| format!("cannot list /proc/{pid}/task"))?;
    for task in tasks {
        let path = task?.path().join("schedstat");
        // A thread can exit between the listing and the read.
        if let Ok(text) = std::fs::read_to_string(&path)
            && let Some(ns) = text.split_whitespace().next().and_then(|v| v.parse::<u64>().ok())
        {
            total += ns;
        }
    }
    Ok(total)
}

/// The soft limit on open files of this process (children inherit it), from `/proc/self/limits`.
pub fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}
