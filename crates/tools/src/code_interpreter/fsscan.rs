//! Walking a container's data directory from the host, which is hostile ground: model code
//! decides what is in it. The walk never follows a symbolic link (each directory is opened with
//! `O_NOFOLLOW` relative to its parent's descriptor, through `/proc/self/fd/N/<name>`), never
//! blocks on a FIFO, and is bounded in entries and depth. Used to measure a container's usage (for the
//! total disk cap) and to find the PNGs an execution wrote.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// Most directory entries one walk looks at.
pub(crate) const MAX_ENTRIES: usize = 20_000;
/// Deepest directory level one walk enters.
pub(crate) const MAX_DEPTH: usize = 16;

const PNG_MAGIC: &[u8; 8] = b"\x89PNG\r\n\x1a\n";

/// Identity of a file version: size and modification time. Each execution's changes are copied
/// back to the host as new files (new inode, new ctime) with the mtime the code left, so an
/// unchanged file keeps its key and a written one gets a new mtime (model code that sets it back
/// on purpose only keeps its own picture from being shown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileKey {
    size: u64,
    mtime: (i64, i64),
}

/// The PNG files present before an execution, by path relative to the data dir.
pub(crate) type PngSnapshot = HashMap<PathBuf, FileKey>;

/// Disk usage of a directory tree (allocated blocks, so sparse files count for what they use).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Usage {
    pub bytes: u64,
    pub entries: usize,
}

fn open_dir_nofollow(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC).open(path)
}

fn fd_path(dir: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()))
}

/// Depth-first walk; `visit(rel_path, parent_dir, entry_name, metadata)` for every entry.
/// Returns false if the walk stopped at [`MAX_ENTRIES`].
fn walk(root: &Path, visit: &mut dyn FnMut(&Path, &File, &std::ffi::OsStr, &fs::Metadata)) -> bool {
    let Ok(dir) = open_dir_nofollow(root) else { return true };
    let mut seen = 0usize;
    walk_dir(&dir, Path::new(""), 0, &mut seen, visit)
}

fn walk_dir(
    dir: &File,
    rel: &Path,
    depth: usize,
    seen: &mut usize,
    visit: &mut dyn FnMut(&Path, &File, &std::ffi::OsStr, &fs::Metadata),
) -> bool {
    let here = fd_path(dir);
    let Ok(entries) = fs::read_dir(&here) else { return true };
    for entry in entries.flatten() {
        *seen += 1;
        if *seen > MAX_ENTRIES {
            return false;
        }
        // DirEntry::metadata is an fstatat(AT_SYMLINK_NOFOLLOW) on the directory stream.
        let Ok(meta) = entry.metadata() else { continue };
        let name = entry.file_name();
        let child_rel = rel.join(&name);
        visit(&child_rel, dir, &name, &meta);
        if meta.is_dir() && depth + 1 < MAX_DEPTH {
            let Ok(sub) = open_dir_nofollow(&here.join(&name)) else { continue };
            if !walk_dir(&sub, &child_rel, depth + 1, seen, visit) {
                return false;
            }
        }
    }
    true
}

/// Disk usage of the tree at `root`. `None` when it has more than [`MAX_ENTRIES`] entries.
pub(crate) fn usage(root: &Path) -> Option<Usage> {
    let mut usage = Usage::default();
    let complete = walk(root, &mut |_, _, _, meta| {
        usage.bytes = usage.bytes.saturating_add(meta.blocks().saturating_mul(512));
        usage.entries += 1;
    });
    complete.then_some(usage)
}

fn is_png_name(name: &std::ffi::OsStr) -> bool {
    name.to_str().is_some_and(|n| n.len() > 4 && n[n.len() - 4..].eq_ignore_ascii_case(".png"))
}

fn key_of(meta: &fs::Metadata) -> FileKey {
    FileKey { size: meta.size(), mtime: (meta.mtime(), meta.mtime_nsec()) }
}

/// The PNGs under `root` before an execution.
pub(crate) fn png_snapshot(root: &Path) -> PngSnapshot {
    let mut snap = PngSnapshot::new();
    walk(root, &mut |rel, _, name, meta| {
        if meta.is_file() && is_png_name(name) {
            snap.insert(rel.to_path_buf(), key_of(meta));
        }
    });
    snap
}

/// What [`collect_pngs`] found.
#[derive(Debug, Default)]
pub(crate) struct Pngs {
    /// PNG bytes, oldest first.
    pub images: Vec<Vec<u8>>,
    /// Files named `*.png` that were new or changed but were not returned (too large, not a PNG,
    /// past the count limit), with the reason.
    pub skipped: Vec<(PathBuf, &'static str)>,
}

/// Every regular `*.png` file under `root` that is new or changed since `before`, validated by
/// its magic number and bounded in size and count.
pub(crate) fn collect_pngs(root: &Path, before: &PngSnapshot, max_bytes: usize, max_count: usize) -> Pngs {
    struct Candidate {
        mtime: (i64, i64),
        rel: PathBuf,
        file: File,
    }
    let mut out = Pngs::default();
    let mut candidates: Vec<Candidate> = Vec::new();
    // Keep descriptors bounded; the rest are reported as skipped.
    let open_cap = max_count.saturating_mul(4).max(8);
    walk(root, &mut |rel, dir, name, meta| {
        if !(meta.is_file() && is_png_name(name)) || before.get(rel) == Some(&key_of(meta)) {
            return;
        }
        if meta.size() > max_bytes as u64 {
            out.skipped.push((rel.to_path_buf(), "larger than the image size limit"));
            return;
        }
        if candidates.len() >= open_cap {
            out.skipped.push((rel.to_path_buf(), "more images than the limit"));
            return;
        }
        // O_NOFOLLOW|O_NONBLOCK: never a link, never hang on a FIFO swapped in after the stat.
        let opened = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(fd_path(dir).join(name));
        match opened {
            Ok(file) if file.metadata().is_ok_and(|m| m.is_file()) => {
                candidates.push(Candidate { mtime: (meta.mtime(), meta.mtime_nsec()), rel: rel.to_path_buf(), file })
            }
            _ => out.skipped.push((rel.to_path_buf(), "not a readable regular file")),
        }
    });
    candidates.sort_by(|a, b| a.mtime.cmp(&b.mtime).then_with(|| a.rel.cmp(&b.rel)));
    for c in candidates {
        if out.images.len() >= max_count {
            out.skipped.push((c.rel, "more images than the limit"));
            continue;
        }
        let mut bytes = Vec::new();
        // Read one byte past the limit to notice a file that grew after the stat.
        match (&c.file).take(max_bytes as u64 + 1).read_to_end(&mut bytes) {
            Ok(_) if bytes.len() > max_bytes => out.skipped.push((c.rel, "larger than the image size limit")),
            Ok(_) if bytes.starts_with(PNG_MAGIC) => out.images.push(bytes),
            Ok(_) => out.skipped.push((c.rel, "not a PNG")),
            Err(_) => out.skipped.push((c.rel, "not a readable regular file")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(extra: &[u8]) -> Vec<u8> {
        let mut v = PNG_MAGIC.to_vec();
        v.extend_from_slice(extra);
        v
    }

    #[test]
    fn finds_new_and_changed_pngs_only_and_never_follows_links() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("data");
        fs::create_dir_all(root.join("sub/deeper")).unwrap();
        fs::write(root.join("old.png"), png(b"old")).unwrap();
        fs::write(root.join("changed.png"), png(b"v1")).unwrap();
        let before = png_snapshot(&root);
        assert_eq!(before.len(), 2);

        std::thread::sleep(std::time::Duration::from_millis(20));
        fs::write(root.join("changed.png"), png(b"v2")).unwrap();
        fs::write(root.join("sub/deeper/new.PNG"), png(b"new")).unwrap();
        fs::write(root.join("fake.png"), b"GIF89a").unwrap();
        fs::write(root.join("big.png"), png(&[0u8; 100])).unwrap();
        // A host file the sandbox would love to exfiltrate as an "image".
        let secret = tmp.path().join("secret.png");
        fs::write(&secret, png(b"secret")).unwrap();
        std::os::unix::fs::symlink(&secret, root.join("link.png")).unwrap();
        std::os::unix::fs::symlink(tmp.path(), root.join("linkdir")).unwrap();

        let found = collect_pngs(&root, &before, 50, 10);
        let mut images = found.images.clone();
        images.sort();
        assert_eq!(images, vec![png(b"new"), png(b"v2")]);
        let skipped: Vec<_> = found.skipped.iter().map(|(p, _)| p.to_string_lossy().into_owned()).collect();
        assert!(skipped.contains(&"fake.png".to_string()), "{skipped:?}");
        assert!(skipped.contains(&"big.png".to_string()), "{skipped:?}");
        assert!(!found.images.contains(&png(b"secret")));

        let max_one = collect_pngs(&root, &before, 50, 1);
        assert_eq!(max_one.images.len(), 1);
    }

    #[test]
    fn usage_counts_allocated_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("a"), vec![1u8; 100_000]).unwrap();
        let u = usage(tmp.path()).unwrap();
        assert!(u.bytes >= 100_000, "{u:?}");
        assert_eq!(u.entries, 1);
    }
}
