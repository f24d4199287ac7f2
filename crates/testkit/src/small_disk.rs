//! A small file system of its own, for tests that fill a disk: a tmpfs of a chosen size mounted
//! on a fresh temporary directory, unmounted when dropped. Mounting needs root (CI runs as root);
//! [`SmallDisk::mount`]'s error is the reason a test gives to `skip_unless!`.

use std::path::Path;
use std::process::Command;

use tempfile::TempDir;

/// A mounted tmpfs; unmounted (and its directory removed) on drop.
pub struct SmallDisk {
    dir: TempDir,
}

impl SmallDisk {
    /// Mount a tmpfs of `bytes` (rounded up to whole pages).
    pub fn mount(bytes: u64) -> Result<SmallDisk, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("cannot make a mount point: {e}"))?;
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run `mount` ({e}); a small tmpfs needs root and util-linux"))?;
        if !mounted.status.success() {
            return Err(format!(
                "cannot mount a {bytes}-byte tmpfs (needs root): {}",
                String::from_utf8_lossy(&mounted.stderr).trim()
            ));
        }
        Ok(SmallDisk { dir })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // Lazy: a store's threads may still be closing their files; the tmpfs goes once they have.
        let _ = Command::new("umount").arg("--lazy").arg(self.dir.path()).status();
    }
}
