//! [`SandboxConfig`]: every limit and path of the code_interpreter sandbox, with documented
//! defaults ([`Default`]); [`SandboxSettings`]: the part an operator sets (`--code-interpreter-*`),
//! applied on top by [`SandboxConfig::from_settings`].

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Settings of a [`super::Sandbox`]. Every field is public and may be changed by the caller;
/// [`Default`] gives the documented defaults, [`SandboxConfig::from_settings`] applies the
/// operator's [`SandboxSettings`] on top.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxConfig {
    /// The bubblewrap binary. Default `bwrap`, resolved on `PATH` by [`super::Sandbox::new`].
    pub bwrap: PathBuf,
    /// The Python venv holding numpy, pandas and matplotlib (made by
    /// `scripts/setup-code-interpreter`), e.g. [`default_venv`]. Default
    /// `.cache/respgw/code-interpreter-venv` (relative: the gateway always sets it). Mounted
    /// read-only at `/opt/venv` in the sandbox.
    pub venv: PathBuf,
    /// Where container directories live: one directory per gateway instance, shared by its
    /// workers (`respgw serve` puts it beside the store; see [`WorkRootClaim`](super::WorkRootClaim)).
    /// Default `std::env::temp_dir()/respgw-containers-<euid>`. Created if
    /// missing; must be owned by the gateway's user and not writable by others.
    pub work_root: PathBuf,
    /// Wall-clock limit per execution; the whole process group is killed when it runs out.
    /// Default 30 s.
    pub timeout: Duration,
    /// `RLIMIT_CPU` of every sandboxed process, in seconds (soft limit; the hard limit is one
    /// second more). Default 30.
    pub cpu_seconds: u64,
    /// `RLIMIT_AS` (address space) of every sandboxed process. Default 2 GiB: importing numpy,
    /// pandas and matplotlib maps ~0.5 GiB of address space before any data.
    pub memory_bytes: u64,
    /// `RLIMIT_FSIZE`: the largest file a sandboxed process may write. Default 100 MiB.
    pub max_file_bytes: u64,
    /// Processes *and threads* one execution may have at once. Default 64.
    ///
    /// `RLIMIT_NPROC` is counted per (user namespace, real uid), and checked at every level of
    /// the namespace hierarchy against the limit in force when that namespace was made. Each
    /// bubblewrap sandbox has a user namespace of its own, so the runner sets this limit inside
    /// the sandbox, before any model code runs (which cannot raise it again): the count is then
    /// per execution, and a fork bomb in one execution does not starve another. The host-level
    /// limit of the uid is left as inherited: it is shared by every sandbox of every worker
    /// process (and, when the gateway is not root, by the gateway's own threads), so lowering it
    /// would make executions fail each other. A real uid of 0 is exempt from `RLIMIT_NPROC`
    /// altogether, which is one reason the sandbox never runs as host root (see
    /// [`SandboxConfig::sandbox_uid`]).
    pub max_processes: u64,
    /// `RLIMIT_NOFILE`. Default 256.
    pub max_open_files: u64,
    /// stdout and stderr kept per stream (the rest is counted and dropped, and a marker says how
    /// much). Default 64 KiB.
    pub max_output_bytes: usize,
    /// Executions running at once in this process. Default: the number of CPUs.
    pub max_concurrency: usize,
    /// Executions allowed to wait beyond [`SandboxConfig::max_concurrency`]; more are refused
    /// with [`super::SandboxError::Busy`]. Default 32.
    pub max_queued: usize,
    /// Longest wait of an admitted execution for its container and a run permit; then it fails
    /// with [`super::SandboxError::Busy`]. Default 30 s (one execution's timeout).
    pub queue_wait: Duration,
    /// A container directory unused for this long is deleted. Default 20 min.
    pub container_idle: Duration,
    /// Largest PNG returned as an image (larger ones are skipped). Default 8 MiB.
    pub max_image_bytes: usize,
    /// Most images returned by one execution (oldest first). Default 16.
    pub max_images: usize,
    /// Space one container's files may use. While code runs they are in a tmpfs of this size
    /// (memory: each running execution may use this much RAM on top of its address space), so a
    /// write past it fails with ENOSPC inside the sandbox; between executions they are on the
    /// host's disk, never more than this. Default 512 MiB.
    pub max_disk_bytes: u64,
    /// Files, directories and links one container keeps between executions (more are not saved,
    /// and the code is told). At most [`MAX_FILES_LIMIT`]. Default 10,000.
    pub max_files: u64,
    /// Space all containers of this gateway may hold together (idle ones at their size, ones in
    /// use at [`SandboxConfig::max_disk_bytes`]). An execution that does not fit evicts the least
    /// recently used idle containers, else fails. Default 8 GiB.
    pub max_total_disk_bytes: u64,
    /// Size of the sandbox's private `/tmp` and `/dev/shm` (tmpfs, i.e. memory). Default 256 MiB.
    pub tmp_bytes: u64,
    /// Host uid the sandbox runs as when the gateway runs as root. Default 65534 (`nobody`).
    /// Ignored when the gateway is not root: an unprivileged process cannot change its uid, and
    /// the sandbox then runs as the gateway's uid (mapped to 65534 inside the sandbox either way).
    /// Must not be 0.
    pub sandbox_uid: u32,
    /// Host gid the sandbox runs as when the gateway runs as root. Default 65534 (`nogroup`).
    pub sandbox_gid: u32,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            bwrap: PathBuf::from("bwrap"),
            venv: default_venv(None, None),
            work_root: default_work_root(),
            timeout: Duration::from_secs(30),
            cpu_seconds: 30,
            memory_bytes: 2 << 30,
            max_file_bytes: 100 << 20,
            max_processes: 64,
            max_open_files: 256,
            max_output_bytes: 64 << 10,
            max_concurrency: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            max_queued: 32,
            queue_wait: Duration::from_secs(DEFAULT_QUEUE_WAIT_SEC),
            container_idle: Duration::from_secs(20 * 60),
            max_image_bytes: 8 << 20,
            max_images: 16,
            max_disk_bytes: DEFAULT_DISK_MB << 20,
            max_files: DEFAULT_MAX_FILES,
            max_total_disk_bytes: DEFAULT_TOTAL_DISK_MB << 20,
            tmp_bytes: 256 << 20,
            sandbox_uid: 65534,
            sandbox_gid: 65534,
        }
    }
}

impl SandboxConfig {
    /// The defaults with the gateway's settings on top.
    pub fn from_settings(settings: &SandboxSettings) -> SandboxConfig {
        SandboxConfig {
            venv: settings.venv.clone(),
            work_root: settings.dir.clone(),
            timeout: settings.timeout,
            memory_bytes: settings.memory_mb.saturating_mul(1 << 20),
            cpu_seconds: settings.cpu_seconds,
            max_concurrency: settings.max_concurrency,
            max_queued: settings.max_queued,
            queue_wait: settings.queue_wait,
            container_idle: settings.container_idle,
            max_disk_bytes: settings.disk_mb.saturating_mul(1 << 20),
            max_total_disk_bytes: settings.total_disk_mb.saturating_mul(1 << 20),
            max_files: settings.max_files,
            ..SandboxConfig::default()
        }
    }

    /// Why this configuration cannot work, if it cannot.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.max_concurrency == 0 {
            return Err("max_concurrency must be at least 1".into());
        }
        if self.max_files == 0 || self.max_files > MAX_FILES_LIMIT {
            return Err(format!("the container file limit must be between 1 and {MAX_FILES_LIMIT}"));
        }
        if self.max_total_disk_bytes < self.max_disk_bytes {
            return Err(format!(
                "the total disk cap ({} MiB) is smaller than one container's limit ({} MiB)",
                self.max_total_disk_bytes >> 20,
                self.max_disk_bytes >> 20
            ));
        }
        Ok(())
    }
}

/// The sandbox settings the gateway takes on its command line (`--code-interpreter-*`), carried
/// to its workers; [`SandboxConfig::from_settings`] applies them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxSettings {
    /// [`SandboxConfig::venv`].
    pub venv: PathBuf,
    /// [`SandboxConfig::work_root`].
    pub dir: PathBuf,
    pub timeout: Duration,
    pub memory_mb: u64,
    pub cpu_seconds: u64,
    pub max_concurrency: usize,
    pub max_queued: usize,
    pub queue_wait: Duration,
    pub container_idle: Duration,
    pub disk_mb: u64,
    pub total_disk_mb: u64,
    pub max_files: u64,
}

/// Default of [`SandboxConfig::max_disk_bytes`], in MiB.
pub const DEFAULT_DISK_MB: u64 = 512;
/// Default of [`SandboxConfig::max_total_disk_bytes`], in MiB.
pub const DEFAULT_TOTAL_DISK_MB: u64 = 8192;
/// Default of [`SandboxConfig::max_files`].
pub const DEFAULT_MAX_FILES: u64 = 10_000;
/// Largest [`SandboxConfig::max_files`] (what one walk of a container looks at).
pub const MAX_FILES_LIMIT: u64 = super::fsscan::MAX_ENTRIES as u64;
/// Default of [`SandboxConfig::queue_wait`], in seconds.
pub const DEFAULT_QUEUE_WAIT_SEC: u64 = 30;

/// `${XDG_CACHE_HOME:-$HOME/.cache}/respgw/code-interpreter-venv` (the same rule as the setup
/// script), given the values of those two variables. Without either: relative to the current
/// directory, which `Sandbox::new` then reports as missing.
pub fn default_venv(xdg_cache_home: Option<std::ffi::OsString>, home: Option<std::ffi::OsString>) -> PathBuf {
    let cache = match (xdg_cache_home.filter(|v| !v.is_empty()), home.filter(|v| !v.is_empty())) {
        (Some(xdg), _) => PathBuf::from(xdg),
        (None, Some(home)) => PathBuf::from(home).join(".cache"),
        (None, None) => PathBuf::from(".cache"),
    };
    cache.join("respgw").join("code-interpreter-venv")
}

fn default_work_root() -> PathBuf {
    let uid = nix::unistd::geteuid();
    std::env::temp_dir().join(format!("respgw-containers-{uid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn venv_default_follows_xdg_then_home() {
        assert_eq!(
            default_venv(Some("/x".into()), Some("/h".into())),
            PathBuf::from("/x/respgw/code-interpreter-venv")
        );
        assert_eq!(default_venv(None, Some("/h".into())), PathBuf::from("/h/.cache/respgw/code-interpreter-venv"));
        assert_eq!(
            default_venv(Some("".into()), Some("/h".into())),
            PathBuf::from("/h/.cache/respgw/code-interpreter-venv")
        );
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let c = SandboxConfig::default();
        assert_eq!(c.timeout, Duration::from_secs(30));
        assert_eq!(c.memory_bytes, 2 * 1024 * 1024 * 1024);
        assert_eq!(c.max_file_bytes, 100 * 1024 * 1024);
        assert_eq!(c.max_output_bytes, 64 * 1024);
        assert_eq!(c.max_image_bytes, 8 * 1024 * 1024);
        assert_eq!(c.container_idle, Duration::from_secs(1200));
        assert_eq!(c.max_disk_bytes, 512 * 1024 * 1024);
        assert_eq!(c.max_total_disk_bytes, 8 * 1024 * 1024 * 1024);
        assert_eq!(c.queue_wait, Duration::from_secs(30));
        assert!(c.check().is_ok());
        assert!(c.max_concurrency >= 1);
        assert!(c.work_root.to_string_lossy().contains("respgw-containers-"));
    }
}
