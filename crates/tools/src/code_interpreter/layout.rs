//! The host-side file layout of the sandbox: the work root, the runtime files bound read-only
//! into every sandbox, container directories (create, lock, touch, expire) and container ids.
//!
//! ```text
//! <work_root>/                    0700; one per gateway instance, shared by its worker processes
//!   .instance.lock                flock'ed by the instance that owns the work root (see
//!                                 [`WorkRootClaim`])
//!   .runtime/                     0755  runner-<hash>.py, passwd, group, mplcache-<hash>/
//!   cntr_<uuid v7>/               0700, owned by the gateway
//!     lock                        flock'ed while an execution runs (across worker processes);
//!                                 its mtime is the container's last use
//!     usage                       bytes `data/` used after the last execution (decimal)
//!     data/                       the container's files, copied in and out of the sandbox's
//!                                 /mnt/data by the runner (never mounted)
//!   .trash-…                      a container being deleted
//! ```
//! The container directory is never visible in the sandbox, so model code cannot fake its
//! last-use time, its usage or swap the lock file. Nothing here is reached by path by another
//! uid (see `process.rs`), so the work root may sit anywhere its owner can reach, e.g. under a
//! 0700 home directory.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::unistd::{getegid, geteuid};
use sha2::{Digest, Sha256};

/// The in-sandbox runner (see its docstring).
pub(crate) const RUNNER_PY: &str = include_str!("runner.py");

/// Prefix of container ids.
pub const CONTAINER_PREFIX: &str = "cntr_";

/// A fresh container id: `cntr_` + a hyphenated UUID v7 (time-ordered, 74 random bits).
pub(crate) fn new_container_id() -> String {
    format!("{CONTAINER_PREFIX}{}", uuid::Uuid::now_v7().hyphenated())
}

/// Whether `id` is a container id of our own format: `cntr_` + a lowercase hyphenated UUID v7.
/// Anything else (other formats, `..`, `/`, upper case) is refused, so an id can be used as a
/// directory name as it is.
pub(crate) fn is_valid_container_id(id: &str) -> bool {
    let Some(rest) = id.strip_prefix(CONTAINER_PREFIX) else { return false };
    match uuid::Uuid::try_parse(rest) {
        Ok(u) => u.get_version_num() == 7 && u.hyphenated().to_string() == rest,
        Err(_) => false,
    }
}

/// Paths and ownership of one [`super::Sandbox`]'s files.
#[derive(Debug)]
pub(crate) struct Layout {
    pub work_root: PathBuf,
    /// `.runtime`: the files below and the font cache, bound read-only into every sandbox.
    pub runtime: PathBuf,
    pub runner: PathBuf,
    pub passwd: PathBuf,
    pub group: PathBuf,
    /// matplotlib's font cache, built by the start-up probe (see [`Layout::mplcache_ready`]).
    pub mplcache: PathBuf,
    /// `Some((uid, gid))` when the gateway runs as root and the sandbox as this host uid.
    pub drop_to: Option<(u32, u32)>,
}

impl Layout {
    /// Creates (or checks) the work root and writes the runtime files.
    pub fn prepare(work_root: &Path, venv: &Path, drop_to: Option<(u32, u32)>) -> Result<Layout, String> {
        let work_root = absolute(work_root)?;
        create_dir_checked(&work_root, 0o700)?;
        let runtime = work_root.join(".runtime");
        create_dir_checked(&runtime, 0o755)?;

        let runner = runtime.join(format!("runner-{}.py", short_hash(RUNNER_PY.as_bytes())));
        write_if_changed(&runner, RUNNER_PY.as_bytes())?;
        // The sandbox's own /etc/passwd and /etc/group: the host's are never visible, but some
        // libraries look the current uid up.
        let passwd = runtime.join("passwd");
        write_if_changed(&passwd, b"sandbox:x:65534:65534:sandbox:/mnt/data:/usr/sbin/nologin\n")?;
        let group = runtime.join("group");
        write_if_changed(&group, b"sandbox:x:65534:\n")?;

        // The font cache depends on the venv (matplotlib version, font files): key it by the venv.
        let mut venv_id = Sha256::new();
        venv_id.update(venv.as_os_str().as_encoded_bytes());
        for f in ["pyvenv.cfg", ".respgw-requirements.sha256"] {
            venv_id.update(fs::read(venv.join(f)).unwrap_or_default());
        }
        let digest = venv_id.finalize();
        let mplcache = runtime.join(format!("mplcache-{}", hex(&digest[..8])));

        Ok(Layout { work_root, runtime, runner, passwd, group, mplcache, drop_to })
    }

    /// Whether the font cache has been built (a `fontlist*.json` in it).
    pub fn mplcache_ready(&self) -> bool {
        fs::read_dir(&self.mplcache)
            .map(|rd| rd.flatten().any(|e| e.file_name().to_str().is_some_and(|n| n.starts_with("fontlist"))))
            .unwrap_or(false)
    }

    /// A fresh, empty directory for the probe to build the font cache in (writable by the
    /// sandbox uid); [`Layout::publish_mplcache`] moves it into place.
    pub fn new_mplcache_staging(&self) -> Result<PathBuf, String> {
        let dir = self.mplcache.with_extension(format!("tmp-{}", uuid::Uuid::now_v7().simple()));
        self.create_sandbox_owned_dir(&dir)?;
        Ok(dir)
    }

    /// Moves a built font cache into place (another process may have won the race: fine). It
    /// was written by the sandbox uid; from now on it belongs to the gateway and is read-only to
    /// everyone else, keeping only the plain files matplotlib wrote.
    pub fn publish_mplcache(&self, staging: &Path) {
        let (uid, gid) = (geteuid().as_raw(), getegid().as_raw());
        let seal = || -> std::io::Result<()> {
            for entry in fs::read_dir(staging)? {
                let path = entry?.path();
                if fs::symlink_metadata(&path)?.is_file() {
                    std::os::unix::fs::lchown(&path, Some(uid), Some(gid))?;
                    fs::set_permissions(&path, fs::Permissions::from_mode(0o644))?;
                } else if fs::symlink_metadata(&path)?.is_dir() {
                    fs::remove_dir_all(&path)?;
                } else {
                    fs::remove_file(&path)?;
                }
            }
            std::os::unix::fs::lchown(staging, Some(uid), Some(gid))?;
            fs::set_permissions(staging, fs::Permissions::from_mode(0o755))
        };
        if seal().is_err() || fs::rename(staging, &self.mplcache).is_err() {
            let _ = fs::remove_dir_all(staging);
        }
    }

    pub fn container_dir(&self, id: &str) -> PathBuf {
        self.work_root.join(id)
    }

    /// Creates the container's directories if missing (first use) and returns its data dir.
    pub fn ensure_container(&self, id: &str) -> Result<PathBuf, String> {
        let dir = self.container_dir(id);
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
        }
        let data = dir.join("data");
        if !data.is_dir() {
            self.create_sandbox_owned_dir(&data)?;
        }
        Ok(data)
    }

    /// A 0700 directory owned by the uid the sandbox runs as.
    fn create_sandbox_owned_dir(&self, dir: &Path) -> Result<(), String> {
        match fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
        }
        if let Some((uid, gid)) = self.drop_to {
            std::os::unix::fs::chown(dir, Some(uid), Some(gid))
                .map_err(|e| format!("cannot chown {} to {uid}:{gid}: {e}", dir.display()))?;
        }
        Ok(())
    }

    /// Takes the container's cross-process lock (polling `flock`, so that a dropped future
    /// never leaves a thread blocked on it). The lock is on a file the sandbox cannot see.
    pub async fn lock_container(&self, id: &str) -> Result<ContainerLock, String> {
        let dir = self.container_dir(id);
        loop {
            match fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
            }
            let path = dir.join("lock");
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
                .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            loop {
                if file.try_lock().is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // The sweeper may have moved the directory away while we waited: then this lock
            // guards nothing, start over.
            let same = match (fs::metadata(&path), file.metadata()) {
                (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
                _ => false,
            };
            if same {
                return Ok(ContainerLock { _file: file });
            }
        }
    }

    /// Marks the container as used now (its idle clock restarts): the mtime of its lock file,
    /// which only the gateway can reach, is the last use.
    pub fn touch(&self, id: &str) {
        let lock = self.container_dir(id).join("lock");
        let _ = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&lock)
            .and_then(|f| f.set_modified(SystemTime::now()));
    }

    /// Deletes containers unused for longer than `idle` (and leftovers of interrupted
    /// deletions). Returns how many containers were deleted. Blocking: run off the runtime.
    pub fn sweep(&self, idle: Duration) -> usize {
        let Ok(entries) = fs::read_dir(&self.work_root) else { return 0 };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with(".trash-") {
                let _ = fs::remove_dir_all(entry.path());
                continue;
            }
            if is_valid_container_id(name)
                && is_idle(&entry.path().join("lock"), idle)
                && self.delete_unless_in_use(name, |lock| is_idle(lock, idle))
            {
                removed += 1;
            }
        }
        removed
    }

    /// Deletes container `id` if no execution holds it and `still` (checked under its lock)
    /// agrees. Returns whether it was deleted. Blocking.
    pub fn delete_unless_in_use(&self, id: &str, still: impl Fn(&Path) -> bool) -> bool {
        let dir = self.container_dir(id);
        let lock_path = dir.join("lock");
        let Some(lock) = try_lock(&lock_path) else { return false };
        // Re-check under the lock: an execution may have used it meanwhile.
        if !still(&lock_path) {
            return false;
        }
        let trash = self.work_root.join(format!(".trash-{id}-{}", uuid::Uuid::now_v7().simple()));
        if fs::rename(&dir, &trash).is_err() {
            return false;
        }
        drop(lock);
        // Symlink-safe: std's remove_dir_all never follows links the sandbox made.
        if let Err(e) = fs::remove_dir_all(&trash) {
            tracing::warn!(path = %trash.display(), error = %e, "code_interpreter: cannot delete a container");
        }
        true
    }

    /// Records how much a container's files use (after an execution, under its lock).
    pub fn record_usage(&self, id: &str, bytes: u64) {
        let _ = write_if_changed(&self.container_dir(id).join("usage"), bytes.to_string().as_bytes());
    }

    /// What the containers other than `me` hold, for the total disk cap: containers in use count
    /// `in_use_charge` each (an execution may fill its container to the limit), idle ones their
    /// recorded usage; the idle ones are listed least recently used first. Blocking.
    pub fn charges(&self, me: &str, in_use_charge: u64) -> Charges {
        let mut charges = Charges::default();
        let Ok(entries) = fs::read_dir(&self.work_root) else { return charges };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name == me || !is_valid_container_id(name) {
                continue;
            }
            let lock_path = entry.path().join("lock");
            let Some(lock) = try_lock(&lock_path) else {
                charges.total = charges.total.saturating_add(in_use_charge);
                continue;
            };
            let recorded = fs::read_to_string(entry.path().join("usage")).ok().and_then(|s| s.trim().parse().ok());
            let bytes = match recorded {
                Some(bytes) => bytes,
                None => super::fsscan::usage(&entry.path().join("data")).map_or(in_use_charge, |u| u.bytes),
            };
            let last_use = fs::metadata(&lock_path).and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH);
            drop(lock);
            charges.total = charges.total.saturating_add(bytes);
            charges.idle.push(IdleContainer { id: name.to_string(), last_use, bytes });
        }
        charges.idle.sort_by_key(|c| c.last_use);
        charges
    }
}

/// See [`Layout::charges`].
#[derive(Debug, Default)]
pub(crate) struct Charges {
    pub total: u64,
    pub idle: Vec<IdleContainer>,
}

#[derive(Debug)]
pub(crate) struct IdleContainer {
    pub id: String,
    pub last_use: SystemTime,
    pub bytes: u64,
}

/// The lock file of a container, locked, or `None` when an execution holds it (or it cannot be
/// opened).
fn try_lock(lock_path: &Path) -> Option<File> {
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(lock_path)
        .ok()?;
    lock.try_lock().is_ok().then_some(lock)
}

/// A gateway instance's hold on its work root: while it lives no other instance can use the
/// directory. Taking it deletes the containers a previous run of the instance left behind;
/// dropping it deletes this run's.
#[derive(Debug)]
pub struct WorkRootClaim {
    work_root: PathBuf,
    _lock: File,
}

impl WorkRootClaim {
    /// Creates `work_root` (0700) if missing, takes it for this instance, and empties it of
    /// containers. Fails when another live instance has it.
    pub fn take(work_root: &Path) -> Result<WorkRootClaim, String> {
        let work_root = absolute(work_root)?;
        create_dir_checked(&work_root, 0o700)?;
        let lock = try_lock(&work_root.join(".instance.lock")).ok_or_else(|| {
            format!(
                "the code interpreter directory {} is in use by another respgw; give each instance its own \
                 (--code-interpreter-dir)",
                work_root.display()
            )
        })?;
        let claim = WorkRootClaim { work_root, _lock: lock };
        let removed = claim.delete_containers();
        if removed > 0 {
            tracing::info!(removed, dir = %claim.work_root.display(), "code_interpreter: deleted the containers of a previous run");
        }
        Ok(claim)
    }

    /// Deletes every container (and unfinished deletion). Returns how many containers it deleted.
    fn delete_containers(&self) -> usize {
        let Ok(entries) = fs::read_dir(&self.work_root) else { return 0 };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if (is_valid_container_id(name) || name.starts_with(".trash-")) && fs::remove_dir_all(entry.path()).is_ok()
            {
                removed += usize::from(is_valid_container_id(name));
            }
        }
        removed
    }
}

impl Drop for WorkRootClaim {
    fn drop(&mut self) {
        self.delete_containers();
    }
}

/// Held while an execution uses a container; released on drop.
pub(crate) struct ContainerLock {
    _file: File,
}

/// Whether the file's mtime (a container's last use) is older than `idle`. A container without
/// a lock file yet (being created) is not idle; creating it in the sweep makes it fresh.
fn is_idle(lock: &Path, idle: Duration) -> bool {
    fs::symlink_metadata(lock)
        .and_then(|m| m.modified())
        .map(|t| SystemTime::now().duration_since(t).map(|age| age > idle).unwrap_or(false))
        .unwrap_or(false)
}

fn absolute(p: &Path) -> Result<PathBuf, String> {
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    std::env::current_dir().map(|d| d.join(p)).map_err(|e| format!("cannot resolve {}: {e}", p.display()))
}

/// Creates `dir` with `mode` if missing; an existing one must be a real directory owned by us and
/// not writable by others (a directory in a shared temp dir may have been planted by someone
/// else). Its mode is then set to `mode`.
fn create_dir_checked(dir: &Path, mode: u32) -> Result<(), String> {
    match fs::DirBuilder::new().recursive(false).mode(mode).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    let meta = fs::symlink_metadata(dir).map_err(|e| format!("cannot stat {}: {e}", dir.display()))?;
    let me = geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me {
        return Err(format!(
            "{} exists but is not a directory owned by uid {me} (remove it or choose another work root)",
            dir.display()
        ));
    }
    if meta.mode() & 0o7777 != mode {
        fs::set_permissions(dir, fs::Permissions::from_mode(mode))
            .map_err(|e| format!("cannot chmod {}: {e}", dir.display()))?;
    }
    Ok(())
}

/// Writes `content` to `path` atomically (temp file + rename) unless it is already there.
fn write_if_changed(path: &Path, content: &[u8]) -> Result<(), String> {
    if fs::read(path).is_ok_and(|old| old == content) {
        return Ok(());
    }
    let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::now_v7().simple()));
    let result = (|| {
        let mut f = OpenOptions::new().create_new(true).write(true).mode(0o644).open(&tmp)?;
        f.write_all(content)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(format!("cannot write {}: {e}", path.display()));
    }
    Ok(())
}

fn short_hash(data: &[u8]) -> String {
    hex(&Sha256::digest(data)[..8])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_are_validated_strictly() {
        let id = new_container_id();
        assert!(is_valid_container_id(&id), "{id}");
        assert!(id.starts_with("cntr_") && id.len() == 5 + 36);
        for bad in [
            "",
            "cntr_",
            "cntr_../../etc",
            "cntr_/tmp",
            "../cntr_x",
            &id.to_uppercase(),
            &id.replace('-', ""),
            &format!("{id}/.."),
            &format!("{id}\0"),
            "cntr_697327a546688198b1609ca847bcfa5c04c032c66792ccfd",
            // a valid UUID, but v4
            "cntr_3f8e3b52-1c1a-4d5e-9b1c-2a6f1e0b9c7d",
        ] {
            assert!(!is_valid_container_id(bad), "{bad:?} accepted");
        }
    }

    #[test]
    fn sweep_deletes_only_idle_unlocked_containers() {
        let tmp = tempfile::tempdir().unwrap();
        let layout = Layout::prepare(&tmp.path().join("root"), tmp.path(), None).unwrap();
        let (a, b) = (new_container_id(), new_container_id());
        let data_a = layout.ensure_container(&a).unwrap();
        layout.ensure_container(&b).unwrap();
        fs::write(data_a.join("f"), b"x").unwrap();
        // b is fresh; a is made old.
        let old = SystemTime::now() - Duration::from_secs(3600);
        let lock_a = layout.container_dir(&a).join("lock");
        File::create(&lock_a).unwrap().set_modified(old).unwrap();
        File::create(layout.container_dir(&b).join("lock")).unwrap();
        assert_eq!(layout.sweep(Duration::from_secs(60)), 1);
        assert!(!layout.container_dir(&a).exists());
        assert!(layout.container_dir(&b).exists());
        // Not the runtime files.
        assert!(layout.runner.exists());
    }

    #[test]
    fn a_planted_work_root_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("file");
        fs::write(&f, b"").unwrap();
        assert!(Layout::prepare(&f, tmp.path(), None).is_err());
    }
}
