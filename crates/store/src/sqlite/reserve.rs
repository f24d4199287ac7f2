//! The disk-space reserve of a file store: a way out when the disk holding the database fills up.
//!
//! A full disk stops every SQLite write, deletes included (in WAL mode a delete appends pages to
//! the WAL), and the checkpoint that would copy the WAL into the database and give its space back
//! needs room to grow the database file. So the store keeps a file of allocated blocks next to the
//! database (`<database>-reserve`, `--db-reserve-mb`, 64 MiB by default: the WAL's largest size,
//! so a checkpoint of the fullest WAL fits). When a write fails because the disk is full, the
//! store deletes that file ([`Reserve::release`]). From then on, while the file is missing:
//!
//! - writes that store something new (responses, items, conversations, background runs and their
//!   events) are refused at once with [`StoreError::Full`] (503 to clients), so they cannot eat
//!   the space released — unless the database's own free pages (what deletes freed, which SQLite
//!   reuses without growing the file) hold at least the reserve's size: then they run, into those
//!   pages, and stop again when fewer are left ([`Reserve::admits_new_data`]);
//! - deletes (and lease renewals, which rewrite rows in place) still run, on that space;
//! - every checkpoint round is a `wal_checkpoint(TRUNCATE)`, which copies the WAL into the
//!   database and truncates the WAL file to nothing, giving its space back to the disk;
//! - each checkpoint round also checks whether the disk itself has room again for the reserve and
//!   a quarter more (room for the WAL): then the file is made again ([`Reserve::restore`]) and
//!   everything is as before.
//!
//! So while the reserve is released, the database never grows, and the disk keeps about the
//! reserve's size free for the WAL of deletes and checkpoints. A database file does not shrink
//! when rows are deleted (its free pages are reused instead): disk space comes back when the WAL
//! is truncated, or when the operator frees some elsewhere.
//!
//! The file's presence is the state, shared by every process on the database: any one of them
//! releases it, each one sees it gone before its next write, and whichever checkpointer finds space
//! first makes it again (as a temporary file renamed into place, so a half-made reserve is never
//! taken for one). A reserve of 0 turns all this off.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::fcntl::posix_fallocate;
use rusqlite::Connection;

use super::checkpoint::Signal;
use crate::StoreError;

/// The size of the reserve when none is configured (`--db-reserve-mb`).
pub const DEFAULT_RESERVE_BYTES: u64 = 64 << 20;

/// The reserve of one database file, shared by its writer and its checkpointer.
#[derive(Debug)]
pub(crate) struct Reserve {
    /// `<database>-reserve`.
    path: PathBuf,
    /// Its size.
    bytes: u64,
    /// Woken when the reserve is released, so that the WAL is checkpointed into the space at once.
    checkpointer: Arc<Signal>,
}

impl Reserve {
    /// The reserve of the database at `database`, of `bytes` (none for 0). Makes the file if it is
    /// missing and there is space for it.
    pub(crate) fn open(database: &Path, bytes: u64, checkpointer: Arc<Signal>) -> Option<Self> {
        if bytes == 0 {
            return None;
        }
        let mut path = database.as_os_str().to_owned();
        path.push("-reserve");
        let reserve = Self { path: PathBuf::from(path), bytes, checkpointer };
        if reserve.is_released() && !reserve.restore() {
            tracing::warn!(
                db = %database.display(),
                reserve_mib = bytes >> 20,
                "too little disk space for the SQLite store's reserve: nothing new is stored until space is freed"
            );
        }
        Some(reserve)
    }

    /// Whether the reserve is gone (released by this or another process, or never made): new data
    /// is refused until it is made again.
    pub(crate) fn is_released(&self) -> bool {
        !self.path.exists()
    }

    /// What a write that would store something new gets while the reserve is released.
    pub(crate) fn refusal() -> StoreError {
        StoreError::Full(
            "the disk holding the database is full: nothing new is stored until space is freed (deleting stored \
             responses or conversations frees some)"
                .into(),
        )
    }

    /// A write failed for want of space: give the reserve's space to deletes and checkpoints, and
    /// wake the checkpointer.
    pub(crate) fn release(&self) {
        match std::fs::remove_file(&self.path) {
            Ok(()) => tracing::warn!(
                reserve = %self.path.display(),
                reserve_mib = self.bytes >> 20,
                "the disk holding the SQLite database is full: released the reserve so that deletes and WAL \
                 checkpoints can run; new responses are refused (503) until space is back"
            ),
            // Released already (by another process, or an earlier failure).
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::error!(reserve = %self.path.display(), error = %e, "cannot release the disk-space reserve")
            }
        }
        self.checkpointer.nudge();
    }

    /// Whether a write that stores something new may run: the reserve is in place, or the
    /// database's free pages hold at least its size (the write reuses them instead of growing the
    /// file). `conn` is the writer's connection, between transactions.
    pub(crate) fn admits_new_data(&self, conn: &Connection) -> bool {
        !self.is_released() || free_pages_bytes(conn).is_ok_and(|free| free >= self.bytes)
    }

    /// Make the reserve again if the disk has room for it and a quarter more (room for the WAL).
    /// Returns whether it is in place.
    pub(crate) fn restore(&self) -> bool {
        let dir = self.path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let free_on_disk = match nix::sys::statvfs::statvfs(dir) {
            Ok(fs) => fs.blocks_available().saturating_mul(fs.fragment_size()),
            Err(_) => 0,
        };
        if free_on_disk < self.bytes.saturating_add(self.bytes / 4) {
            return false;
        }
        match self.make() {
            Ok(()) => {
                tracing::info!(reserve = %self.path.display(), "disk space is back: the SQLite store accepts new data");
                true
            }
            Err(e) => {
                tracing::debug!(reserve = %self.path.display(), error = %e, "cannot make the disk-space reserve yet");
                false
            }
        }
    }

    /// Write the file under a temporary name with its blocks allocated, then rename it into place.
    fn make(&self) -> io::Result<()> {
        let mut temporary = self.path.as_os_str().to_owned();
        temporary.push(format!(".{}.tmp", std::process::id()));
        let temporary = PathBuf::from(temporary);
        let made = allocate(&temporary, self.bytes).and_then(|()| std::fs::rename(&temporary, &self.path));
        if made.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        made
    }
}

/// A file of `bytes` whose blocks are allocated (not a sparse file, which would hold no space).
fn allocate(path: &Path, bytes: u64) -> io::Result<()> {
    let file: File = OpenOptions::new().write(true).create(true).truncate(true).open(path)?;
    let len = i64::try_from(bytes).map_err(|_| io::Error::other("reserve size out of range"))?;
    posix_fallocate(&file, 0, len).map_err(io::Error::from)?;
    file.sync_all()
}

/// The bytes of the database's free pages (what deletes freed, reused by later writes).
fn free_pages_bytes(conn: &Connection) -> rusqlite::Result<u64> {
    let pages: i64 = conn.query_row("PRAGMA freelist_count", [], |row| row.get(0))?;
    let size: i64 = conn.query_row("PRAGMA page_size", [], |row| row.get(0))?;
    Ok(u64::try_from(pages.saturating_mul(size)).unwrap_or(0))
}
