//! Starting one sandboxed execution and supervising it: the bubblewrap command line, what the
//! forked child does before `exec` (session, rlimits, privilege drop), bounded reading of
//! stdout/stderr and of the runner's report, the wall-clock deadline, and killing the whole
//! process group.
//!
//! The container's files. `/mnt/data` in the sandbox is a tmpfs of
//! [`super::SandboxConfig::max_disk_bytes`] (bubblewrap's `--size`): a write past the limit fails
//! with ENOSPC inside the sandbox, and the host's disk is never touched while the code runs. The
//! container's host directory is handed to the runner as an open descriptor (`--data-fd`), never
//! mounted: the runner copies it in before the cell and writes the changes back after it (see
//! `runner.py`), within the same limit.
//!
//! Privileges. When the gateway runs as root, a sandbox whose processes have the real uid 0
//! (which is what `bwrap --unshare-user` run by root gives) would be exempt from
//! `RLIMIT_NPROC` (the kernel does not count root's processes) and would own everything it
//! creates as root. So the child switches to [`super::SandboxConfig::sandbox_uid`] before
//! exec'ing bubblewrap, which then runs unprivileged. bubblewrap resolves bind sources by path
//! as that uid, which cannot reach the venv (e.g. under `/root/.cache`) nor the work root (0700,
//! possibly under a 0700 home directory too). So, still as root, the child first makes itself a
//! private mount namespace, mounts a small tmpfs of its own on `/tmp` in it and bind-mounts the
//! venv and the work root's runtime directory onto `/tmp/venv` and `/tmp/runtime` there, from
//! descriptors it opened just before (so a venv or work root under the host's `/tmp` is found all
//! the same). bubblewrap binds the sandbox's files from those two paths. The mounts exist only in
//! that child's namespace (`MS_PRIVATE`): nothing changes on the host, and no other process, of
//! the sandbox uid or another, can reach anything under the work root.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::config::SandboxConfig;
use super::layout::Layout;

/// Where things are inside the sandbox.
pub(crate) const SANDBOX_VENV: &str = "/opt/venv";
pub(crate) const SANDBOX_DATA: &str = "/mnt/data";
const SANDBOX_RUNNER: &str = "/run/respgw/runner.py";
const SANDBOX_MPLCACHE: &str = "/run/respgw/mplcache";
/// Root mode: the child's own tmpfs, and the mount points in it bubblewrap binds the venv and the
/// runtime directory from (see the module doc).
const PRIVATE_TMPFS: &CStr = c"/tmp";
const PRIVATE_VENV: &CStr = c"/tmp/venv";
const PRIVATE_RUNTIME: &CStr = c"/tmp/runtime";
/// The uid/gid model code sees (`nobody`), whatever host uid it really is.
const SANDBOX_ID: &str = "65534";
/// The runner's report is small; anything bigger is not from the runner.
const MAX_REPORT_BYTES: usize = 1 << 20;
/// Time the runner gets past the wall-clock timeout to stop the cell and save its files before
/// the whole sandbox is killed (and the execution's changes are lost).
pub(crate) const SAVE_GRACE: Duration = Duration::from_secs(15);
/// After the sandbox exited, how long to wait for its pipes to close.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// What bubblewrap on this machine supports (probed at start-up).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BwrapFeatures {
    /// `--disable-userns` (0.8.0+): model code cannot create user namespaces of its own.
    pub disable_userns: bool,
}

impl BwrapFeatures {
    pub async fn probe(bwrap: &Path) -> Result<BwrapFeatures, String> {
        let out = tokio::process::Command::new(bwrap)
            .arg("--help")
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| format!("cannot run {} --help: {e}", bwrap.display()))?;
        let help = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        if !help.contains("--unshare-all") {
            return Err(format!("{} does not look like bubblewrap: {}", bwrap.display(), help.trim()));
        }
        // `--size` for `--tmpfs` (0.7.0+) is what bounds the container's files: required.
        if !help.contains("--size") {
            return Err(format!(
                "{} is too old: bubblewrap 0.7.0 or newer is needed (its --size option bounds the container's disk space)",
                bwrap.display()
            ));
        }
        Ok(BwrapFeatures { disable_userns: help.contains("--disable-userns") })
    }
}

/// Where bubblewrap, running as the sandbox's host uid, finds the venv and the runtime directory:
/// their own paths when the gateway is not root, the child's mount points in root mode.
#[derive(Debug)]
pub(crate) struct BindSources {
    pub venv: PathBuf,
    pub runtime: PathBuf,
}

impl BindSources {
    /// `path`, an entry of the layout's runtime directory, as bubblewrap sees it.
    fn runtime_entry(&self, layout: &Layout, path: &Path) -> PathBuf {
        self.runtime.join(path.strip_prefix(&layout.runtime).unwrap_or(path))
    }
}

/// Everything the process layer needs, fixed for a [`super::Sandbox`].
#[derive(Debug)]
pub(crate) struct Launcher {
    pub bwrap: PathBuf,
    pub venv: PathBuf,
    pub layout: Layout,
    pub features: BwrapFeatures,
    pub config: SandboxConfig,
}

/// Per-run options beyond the code.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RunOptions<'a> {
    /// Bind this host directory writable at the font-cache path and point MPLCONFIGDIR at it
    /// (the start-up probe builds matplotlib's font cache this way).
    pub build_mplcache: Option<&'a Path>,
    /// Override of the wall-clock timeout.
    pub timeout: Option<Duration>,
}

/// A line of the runner's report (see runner.py).
#[derive(Debug, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub(crate) enum Record {
    Started,
    Finished {
        child: ChildEnd,
        outcome: Option<Outcome>,
        /// The runner stopped the cell at the wall-clock timeout.
        #[serde(default)]
        timed_out: bool,
        /// Problems writing the container's files back to the host.
        #[serde(default)]
        save: Option<SaveReport>,
    },
    Failed {
        reason: String,
    },
}

/// What went wrong writing the container's files back (see runner.py).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct SaveReport {
    /// An error that stopped the copy (e.g. the host's disk is full).
    pub error: Option<String>,
    /// Entries not kept: past the file count or the size limit, or not copyable.
    #[serde(default)]
    pub skipped: u64,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ChildEnd {
    pub exit: Option<i32>,
    pub signal: Option<i32>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Outcome {
    pub kind: String,
    pub result: Option<String>,
    #[serde(rename = "type")]
    pub exc_type: Option<String>,
    pub limit: Option<String>,
}

/// Raw result of one sandbox run, before it becomes an [`super::Execution`].
#[derive(Debug)]
pub(crate) struct RunOutput {
    pub stdout: Captured,
    pub stderr: Captured,
    pub started: bool,
    pub finished: Option<(ChildEnd, Option<Outcome>)>,
    pub failed: Option<String>,
    /// The cell ran out of wall-clock time (stopped by the runner, or the whole sandbox killed).
    pub timed_out: bool,
    pub save: Option<SaveReport>,
    pub exit: Option<ExitStatus>,
    pub duration: Duration,
}

/// A bounded capture of one output stream.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    pub kept: Vec<u8>,
    pub total: u64,
}

impl Captured {
    /// The kept bytes as text (invalid UTF-8 replaced; a character cut by the bound dropped),
    /// with a marker saying how much was left out.
    pub fn into_text(self, max: usize) -> String {
        let mut kept = self.kept;
        let truncated = self.total > kept.len() as u64 || kept.len() > max;
        kept.truncate(max);
        if truncated
            && let Err(e) = std::str::from_utf8(&kept)
            && e.error_len().is_none()
        {
            kept.truncate(e.valid_up_to());
        }
        let mut text = String::from_utf8_lossy(&kept).into_owned();
        if truncated {
            let omitted = self.total.saturating_sub(kept.len() as u64);
            text.push_str(&format!("\n[output truncated: {omitted} more bytes not shown]\n"));
        }
        text
    }
}

/// Kills the sandbox's process group if the run is abandoned (future dropped) or times out.
struct GroupGuard {
    pgid: Option<libc::pid_t>,
}

impl GroupGuard {
    fn kill(&self) {
        if let Some(pgid) = self.pgid {
            // The group leader is our unreaped child, so the id cannot have been reused by
            // another group yet.
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

fn c_path(path: &CStr) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(path.to_bytes()))
}

fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::other("path contains a NUL byte"))
}

/// A pipe, both ends close-on-exec (`std::io::pipe` sets `O_CLOEXEC`).
fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let (reader, writer) = io::pipe()?;
    Ok((reader.into(), writer.into()))
}

impl Launcher {
    /// The bubblewrap arguments for one run, binding the venv and the runtime files from `sources`.
    pub fn bwrap_args(
        &self,
        sources: &BindSources,
        fds: RunnerFds,
        timeout: Duration,
        opts: &RunOptions<'_>,
    ) -> Vec<OsString> {
        let c = &self.config;
        let mut a: Vec<OsString> = Vec::new();
        let mut push = |items: &[&str]| a.extend(items.iter().map(OsString::from));
        // Namespaces: user (mandatory, not the "-try" variant of --unshare-all), ipc, pid, net
        // (only a loopback of its own: no network), uts, cgroup.
        push(&["--unshare-all", "--unshare-user"]);
        if self.features.disable_userns {
            push(&["--disable-userns"]);
        }
        push(&["--die-with-parent", "--new-session", "--cap-drop", "ALL"]);
        push(&["--uid", SANDBOX_ID, "--gid", SANDBOX_ID, "--hostname", "sandbox"]);
        // The system, read-only: /usr, and /bin, /lib… as on the host (symlinks into /usr on
        // merged-/usr systems, read-only binds otherwise). No /etc but what Python needs.
        push(&["--ro-bind", "/usr", "/usr"]);
        for top in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
            let host = Path::new("/").join(top);
            match std::fs::read_link(&host) {
                Ok(target) => {
                    a.push("--symlink".into());
                    a.push(target.into_os_string());
                    a.push(host.into_os_string());
                }
                Err(_) if host.is_dir() => {
                    a.push("--ro-bind".into());
                    a.push(host.clone().into_os_string());
                    a.push(host.into_os_string());
                }
                Err(_) => {}
            }
        }
        let mut push = |items: &[&str]| a.extend(items.iter().map(OsString::from));
        push(&["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]);
        push(&["--ro-bind-try", "/etc/fonts", "/etc/fonts"]);
        let mut bind = |flag: &str, src: &Path, dst: &str| {
            a.push(flag.into());
            a.push(src.as_os_str().to_owned());
            a.push(dst.into());
        };
        let layout = &self.layout;
        let runtime = |path: &Path| sources.runtime_entry(layout, path);
        bind("--ro-bind", &runtime(&layout.passwd), "/etc/passwd");
        bind("--ro-bind", &runtime(&layout.group), "/etc/group");
        bind("--ro-bind", &sources.venv, SANDBOX_VENV);
        bind("--ro-bind", &runtime(&layout.runner), SANDBOX_RUNNER);
        match opts.build_mplcache {
            Some(dir) => bind("--bind", &runtime(dir), SANDBOX_MPLCACHE),
            None if layout.mplcache_ready() => bind("--ro-bind", &runtime(&layout.mplcache), SANDBOX_MPLCACHE),
            None => {}
        }
        let mut push = |items: &[&str]| a.extend(items.iter().map(OsString::from));
        push(&["--proc", "/proc", "--dev", "/dev"]);
        // /tmp and /dev/shm are tmpfs, i.e. memory that RLIMIT_AS does not see: bound them. So is
        // /mnt/data, the container's files (filled by the runner from the host copy): its size
        // is the container's disk limit, enforced by the kernel at each write.
        let size = c.tmp_bytes.to_string();
        for dir in ["/tmp", "/dev/shm"] {
            push(&["--size", &size, "--tmpfs", dir]);
        }
        let data_size = c.max_disk_bytes.to_string();
        push(&["--size", &data_size, "--tmpfs", SANDBOX_DATA]);
        // Nothing else is writable: bubblewrap's root and /dev are tmpfs without a size limit.
        push(&["--remount-ro", "/dev", "--remount-ro", "/"]);
        push(&["--chdir", SANDBOX_DATA, "--clearenv"]);
        let mplconfig = if opts.build_mplcache.is_some() { SANDBOX_MPLCACHE } else { "/tmp/matplotlib" };
        let env: [(&str, &str); 17] = [
            ("PATH", "/opt/venv/bin:/usr/local/bin:/usr/bin:/bin"),
            ("HOME", SANDBOX_DATA),
            ("USER", "sandbox"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C.UTF-8"),
            ("TMPDIR", "/tmp"),
            ("VIRTUAL_ENV", SANDBOX_VENV),
            ("MPLBACKEND", "Agg"),
            ("MPLCONFIGDIR", mplconfig),
            ("XDG_CACHE_HOME", "/tmp/.cache"),
            ("PYTHONDONTWRITEBYTECODE", "1"),
            ("PYTHONUNBUFFERED", "1"),
            ("PYTHONIOENCODING", "utf-8"),
            // One thread per BLAS/OpenMP pool: threads count against the process limit, and CPU
            // is shared with the other executions.
            ("OMP_NUM_THREADS", "1"),
            ("OPENBLAS_NUM_THREADS", "1"),
            ("MKL_NUM_THREADS", "1"),
            ("NUMEXPR_NUM_THREADS", "1"),
        ];
        for (k, v) in env {
            push(&["--setenv", k, v]);
        }
        push(&["--", "/opt/venv/bin/python3", "-I", "-B", "-u", SANDBOX_RUNNER]);
        let status = fds.status.to_string();
        let data = fds.data.to_string();
        let nproc = c.max_processes.to_string();
        let timeout = format!("{:.3}", timeout.as_secs_f64());
        let max_files = c.max_files.to_string();
        push(&["--status-fd", &status, "--data-fd", &data, "--nproc", &nproc, "--timeout", &timeout]);
        push(&["--max-files", &max_files, "--max-bytes", &data_size]);
        a
    }

    /// Runs `code` in the sandbox with the container's files from the host directory `data_dir`
    /// (copied into /mnt/data and back by the runner).
    pub async fn run(&self, data_dir: &Path, code: &[u8], opts: RunOptions<'_>) -> io::Result<RunOutput> {
        let c = &self.config;
        let (status_r, status_w) = pipe_cloexec()?;
        let status_fd = status_w.as_raw_fd();
        let data = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(data_dir)?;
        let fds = RunnerFds { status: status_fd, data: data.as_raw_fd() };

        let (sources, privileged) = match self.layout.drop_to {
            None => (BindSources { venv: self.venv.clone(), runtime: self.layout.runtime.clone() }, None),
            Some((uid, gid)) => {
                let binds = [(cstring(&self.venv)?, PRIVATE_VENV), (cstring(&self.layout.runtime)?, PRIVATE_RUNTIME)];
                let sources = BindSources { venv: c_path(PRIVATE_VENV), runtime: c_path(PRIVATE_RUNTIME) };
                (sources, Some(Privileged { uid, gid, binds }))
            }
        };
        let timeout = opts.timeout.unwrap_or(c.timeout);
        let args = self.bwrap_args(&sources, fds, timeout, &opts);

        // Everything the child needs is allocated here, before fork: after fork only
        // async-signal-safe calls are allowed.
        let rlimits: Vec<(libc::__rlimit_resource_t, u64, u64)> = vec![
            (libc::RLIMIT_CPU, c.cpu_seconds, c.cpu_seconds.saturating_add(1)),
            (libc::RLIMIT_AS, c.memory_bytes, c.memory_bytes),
            (libc::RLIMIT_FSIZE, c.max_file_bytes, c.max_file_bytes),
            (libc::RLIMIT_NOFILE, c.max_open_files, c.max_open_files),
            (libc::RLIMIT_CORE, 0, 0),
        ];
        let parent_pid = std::process::id() as libc::pid_t;

        let mut cmd = tokio::process::Command::new(&self.bwrap);
        cmd.args(&args)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // SAFETY: the hook runs in the forked child between fork and exec, where only
        // async-signal-safe calls are allowed: `child_setup` makes only system calls, passes them
        // pointers into `rlimits` and `privileged`, which the closure owns and which were built
        // before the fork, and builds its errors without allocating.
        unsafe {
            cmd.pre_exec(move || child_setup(&rlimits, privileged.as_ref(), fds, parent_pid));
        }

        let started_at = Instant::now();
        let mut child = cmd.spawn()?;
        // Our copy of the write end must go, or the report pipe never reaches end-of-file.
        drop(status_w);
        drop(data);
        let guard = GroupGuard { pgid: child.id().map(|id| id as libc::pid_t) };

        let stdin = child.stdin.take();
        let code = code.to_vec();
        let stdin_task = AbortOnDrop(tokio::spawn(async move {
            if let Some(mut stdin) = stdin {
                // The runner may be gone already (killed): a broken pipe is not our problem.
                let _ = stdin.write_all(&code).await;
                let _ = stdin.shutdown().await;
            }
        }));
        let max = c.max_output_bytes;
        let stdout = child.stdout.take().map(|s| tokio::spawn(read_bounded(s, max)));
        let stderr = child.stderr.take().map(|s| tokio::spawn(read_bounded(s, max)));
        let report = tokio::net::unix::pipe::Receiver::from_owned_fd(status_r)?;
        let report_task = tokio::spawn(read_bounded(report, MAX_REPORT_BYTES));

        // The runner stops the cell at `timeout` and then saves its files; this deadline is the
        // backstop should it not manage.
        let mut timed_out = false;
        let exit = tokio::select! {
            status = child.wait() => status.ok(),
            _ = tokio::time::sleep(timeout + SAVE_GRACE) => {
                timed_out = true;
                guard.kill();
                child.wait().await.ok()
            }
        };
        let duration = started_at.elapsed();
        drop(stdin_task);
        // bwrap is reaped: the group id must not be signalled any more.
        let mut guard = guard;
        guard.pgid = None;

        let stdout = join_capture(stdout).await;
        let stderr = join_capture(stderr).await;
        let report = join_capture(Some(report_task)).await;

        let mut out = RunOutput {
            stdout,
            stderr,
            started: false,
            finished: None,
            failed: None,
            timed_out,
            save: None,
            exit,
            duration,
        };
        for line in report.kept.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            match serde_json::from_slice::<Record>(line) {
                Ok(Record::Started) => out.started = true,
                Ok(Record::Finished { child, outcome, timed_out, save }) if out.finished.is_none() => {
                    out.finished = Some((child, outcome));
                    out.timed_out |= timed_out;
                    out.save = save;
                }
                Ok(Record::Failed { reason }) => out.failed = Some(reason),
                _ => {}
            }
        }
        Ok(out)
    }
}

/// Aborts a helper task when the run ends or is abandoned (dropped future).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn join_capture(task: Option<tokio::task::JoinHandle<Captured>>) -> Captured {
    let Some(mut task) = task else { return Captured::default() };
    match tokio::time::timeout(DRAIN_GRACE, &mut task).await {
        Ok(Ok(c)) => c,
        _ => {
            task.abort();
            Captured::default()
        }
    }
}

/// Reads a stream to its end, keeping the first `max` bytes and counting the rest (draining it,
/// so that the writer never blocks on a full pipe).
async fn read_bounded<R: AsyncRead + Unpin>(mut r: R, max: usize) -> Captured {
    let mut out = Captured::default();
    let mut buf = vec![0u8; 16 << 10];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                out.total += n as u64;
                let room = max.saturating_sub(out.kept.len());
                out.kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    out
}

/// The descriptors the runner inherits: its report pipe and the container's host directory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunnerFds {
    pub status: RawFd,
    pub data: RawFd,
}

/// Root mode: the uid to become and the binds to make first.
struct Privileged {
    uid: u32,
    gid: u32,
    /// (host directory, mount point in the private tmpfs) pairs: the venv and the runtime
    /// directory.
    binds: [(CString, &'static CStr); 2],
}

/// Runs in the forked child, before exec'ing bubblewrap. Only async-signal-safe syscalls.
fn child_setup(
    rlimits: &[(libc::__rlimit_resource_t, u64, u64)],
    privileged: Option<&Privileged>,
    fds: RunnerFds,
    parent_pid: libc::pid_t,
) -> io::Result<()> {
    // SAFETY: this runs in the forked child (a `pre_exec` hook), which has only this thread: each
    // call is libc's thin wrapper of one system call, needing no lock or allocation (std's own
    // `Command::uid` makes setgroups/setuid calls there the same way), and errors are built from
    // errno or from a kind, never allocated. The pointers passed are null where the call allows it
    // (mount's source when changing propagation, its filesystem type and data; setgroups' list
    // with a count of 0), or point to a local `rlimit` or to NUL-terminated strings (C string
    // literals, the strings of `p.binds`) that outlive the call.
    unsafe {
        // Own session and process group: the timeout kills the whole group with one kill(-pgid).
        if libc::setsid() < 0 {
            return Err(io::Error::last_os_error());
        }
        // Limits inherit through exec into bubblewrap and everything it starts.
        for &(resource, soft, hard) in rlimits {
            let lim = libc::rlimit { rlim_cur: soft, rlim_max: hard };
            if libc::setrlimit(resource, &lim) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if let Some(p) = privileged {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(io::Error::last_os_error());
            }
            // Never propagate our mounts back to the host.
            let root = c"/".as_ptr();
            if libc::mount(std::ptr::null(), root, std::ptr::null(), libc::MS_REC | libc::MS_PRIVATE, std::ptr::null())
                != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The sources are opened before the tmpfs below may hide them (a venv under /tmp), and
            // in this namespace: a bind from a mount of another namespace is refused.
            let mut sources = [-1; 2];
            for (fd, (src, _)) in sources.iter_mut().zip(&p.binds) {
                *fd = libc::open(src.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC);
                if *fd < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            // A tmpfs of our own holds the mount points; it hides the host's /tmp from bubblewrap
            // (whose sandbox gets a /tmp of its own anyway).
            if libc::mount(
                c"tmpfs".as_ptr(),
                PRIVATE_TMPFS.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                c"mode=0755,size=64k".as_ptr().cast(),
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // Each source is bound from its descriptor, made the working directory (mount's ".").
            for (fd, (_, dst)) in sources.iter().zip(&p.binds) {
                if libc::mkdir(dst.as_ptr(), 0o755) != 0
                    || libc::fchdir(*fd) != 0
                    || libc::mount(
                        c".".as_ptr(),
                        dst.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    ) != 0
                    || libc::close(*fd) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
            if libc::chdir(c"/".as_ptr()) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setresgid(p.gid, p.gid, p.gid) != 0
                || libc::setresuid(p.uid, p.uid, p.uid) != 0
            {
                return Err(io::Error::last_os_error());
            }
            if libc::getuid() != p.uid || libc::geteuid() != p.uid {
                // The privileges were not dropped.
                return Err(failed_in_child());
            }
        }
        // If the gateway dies, bubblewrap dies, and with it (--die-with-parent) the sandbox.
        // Set after the uid change, which clears it. (The signal follows the *thread* that
        // spawned: a tokio worker, which lives as long as the runtime.)
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::getppid() != parent_pid {
            // The gateway exited before the death signal was set: nothing would kill the sandbox.
            return Err(failed_in_child());
        }
        // The report pipe and the container's directory are the descriptors (besides 0, 1, 2)
        // the sandbox inherits; the runner closes the latter before any model code runs.
        for fd in [fds.status, fds.data] {
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// The error of a check that failed in the forked child. It carries no message: building one
/// would allocate, which is not allowed between fork and exec, and only an errno reaches the
/// parent anyway (the spawn fails with EINVAL for an error that has none).
fn failed_in_child() -> io::Error {
    io::Error::from(io::ErrorKind::Other)
}

/// Human-readable size for messages.
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if n >= size && n.is_multiple_of(size) {
            return format!("{} {unit}", n / size);
        }
        if n >= size {
            return format!("{:.1} {unit}", n as f64 / size as f64);
        }
    }
    format!("{n} bytes")
}

/// A readable name for a signal number.
pub(crate) fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

/// The exit status of bubblewrap as text, for error messages.
pub(crate) fn describe_exit(status: Option<ExitStatus>) -> String {
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(sig)) => format!("killed by {}", signal_name(sig)),
            _ => "unknown status".to_string(),
        },
        None => "status unknown".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_whole_characters_and_says_how_much_is_missing() {
        let c = Captured { kept: "ab€".as_bytes().to_vec(), total: 10 };
        let t = c.into_text(4);
        assert!(t.starts_with("ab\n[output truncated: 8 more bytes"), "{t:?}");
        let c = Captured { kept: b"hello".to_vec(), total: 5 };
        assert_eq!(c.into_text(64), "hello");
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_bytes(2 << 30), "2 GiB");
        assert_eq!(human_bytes(100 << 20), "100 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(12), "12 bytes");
    }
}
