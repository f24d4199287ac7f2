//! The background checkpointer: keeps the WAL short without putting a checkpoint (and its fsyncs)
//! inside a request.
//!
//! SQLite's automatic checkpoint runs inside the commit that pushes the WAL past 1000 frames, so
//! about one request in a hundred paid for copying the WAL into the database file and syncing
//! both. The store's connections disable it (`PRAGMA wal_autocheckpoint = 0`); instead one thread
//! per store, with its own connection, runs `PRAGMA wal_checkpoint(PASSIVE)`:
//!
//! - every [`Config::checkpoint_interval`], and
//! - as soon as a commit of this process leaves [`Config::checkpoint_pages`] frames in the WAL (the
//!   writer's WAL hook records the count and, once per round, wakes the thread: no I/O in a commit).
//!
//! A PASSIVE checkpoint never waits for a lock and never blocks readers or writers: it copies what
//! it can and returns. Several processes on one file each run their own checkpointer, which is
//! safe: SQLite lets one checkpoint run at a time (another one gets `SQLITE_BUSY` at once and
//! retries on its next round), and every checkpoint copies frames written by any process.
//!
//! The WAL file starts over from its beginning (instead of growing) when a write transaction
//! begins while every frame has been copied back. A checkpoint running beside a busy writer always
//! finds new frames appended meanwhile, so under a sustained write load that moment may never
//! come. So when the WAL holds [`Config::catch_up_pages`] frames or more (as this process's last
//! commit saw it, or as the last checkpoint found it), the next checkpoint runs while holding this
//! process's writer: nothing is appended meanwhile, so it copies everything, and the next write
//! starts the WAL over (truncating its file to `journal_size_limit`). Writes wait for that
//! checkpoint, which is the back-pressure that bounds the WAL (to about the catch-up mark plus what
//! is written while one unlocked checkpoint runs), but only under a load heavy enough to outrun
//! the unlocked checkpoints.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::Duration;

use rusqlite::Connection;
use rusqlite::wal::CheckpointMode;

use super::connection::{Config, Stats};

/// Wakes the checkpointer thread: early (a long WAL), or for good (the store is gone).
#[derive(Debug, Default)]
pub(crate) struct Signal {
    state: Mutex<State>,
    wake: Condvar,
    /// Set by the first nudge after a checkpoint, so that later commits skip the lock and the
    /// wake-up until the checkpointer has run.
    nudged: AtomicBool,
    /// Frames in the WAL after this process's last commit.
    frames: AtomicI32,
}

#[derive(Debug, Default)]
struct State {
    nudged: bool,
    stop: bool,
}

impl Signal {
    /// Called from the writer's WAL hook after each commit (so: cheap, no I/O) with the number of
    /// frames now in the WAL; at `checkpoint_pages` or more, asks for a checkpoint soon.
    pub(crate) fn committed(&self, frames: i32, checkpoint_pages: i32) {
        self.frames.store(frames, Ordering::Relaxed);
        if frames >= checkpoint_pages && !self.nudged.swap(true, Ordering::AcqRel) {
            self.state.lock().unwrap_or_else(PoisonError::into_inner).nudged = true;
            self.wake.notify_one();
        }
    }

    fn stop(&self) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).stop = true;
        self.wake.notify_one();
    }

    /// Wait for a nudge, a stop or the interval; returns false when the thread should end.
    fn wait(&self, interval: Duration) -> bool {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut state, _) = self
            .wake
            .wait_timeout_while(state, interval, |s| !s.nudged && !s.stop)
            .unwrap_or_else(PoisonError::into_inner);
        state.nudged = false;
        self.nudged.store(false, Ordering::Release);
        !state.stop
    }
}

/// The running checkpointer of one store; dropping it stops the thread.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    signal: Arc<Signal>,
}

impl Checkpointer {
    /// Start the thread on its own connection. `writer` is held weakly: the thread must not keep
    /// the store's writer connection alive, and uses it only to catch up (see the module docs).
    pub(crate) fn start(
        conn: Connection,
        writer: Weak<tokio::sync::Mutex<Connection>>,
        signal: Arc<Signal>,
        config: Config,
        stats: Arc<Stats>,
        path: PathBuf,
    ) -> std::io::Result<Self> {
        let thread_signal = Arc::clone(&signal);
        // Detached, not joined on drop: a checkpoint in progress may take a while (it syncs files)
        // and the store may be dropped on an async runtime thread. The thread ends by itself as
        // soon as it sees the stop.
        std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || run(&conn, &writer, &thread_signal, &config, &stats, &path))?;
        Ok(Self { signal })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.signal.stop();
    }
}

/// The thread's loop.
fn run(
    conn: &Connection,
    writer: &Weak<tokio::sync::Mutex<Connection>>,
    signal: &Signal,
    config: &Config,
    stats: &Stats,
    path: &std::path::Path,
) {
    // Frames found by the last unlocked checkpoint (other processes' writes count too).
    let mut found = 0;
    let mut failures = 0u32;
    while signal.wait(config.checkpoint_interval) {
        let catch_up = signal.frames.load(Ordering::Relaxed).max(found) >= config.catch_up_pages;
        let result = if catch_up {
            // Hold the writer so that no frame of this process is appended during the checkpoint.
            let Some(writer) = writer.upgrade() else { break };
            let _writer = writer.blocking_lock();
            stats.catch_ups.fetch_add(1, Ordering::Relaxed);
            let result = checkpoint(conn);
            // Whatever this process had written is copied now; its next commit tells the new size.
            signal.frames.store(0, Ordering::Relaxed);
            found = 0;
            result
        } else {
            checkpoint(conn)
        };
        stats.checkpoints.fetch_add(1, Ordering::Relaxed);
        let (log, copied) = match result {
            Ok(frames) => frames,
            // `SQLITE_BUSY` is another process's checkpoint (or a WAL recovery) running now: its
            // checkpoint does our work too.
            Err(e) if super::connection::is_busy(&e) => (-1, -1),
            Err(e) => {
                failures += 1;
                // It would fail again every round: say so, but not every second.
                if failures == 1 || failures.is_power_of_two() {
                    tracing::warn!(
                        db = %path.display(),
                        error = %e,
                        failures,
                        "SQLite WAL checkpoint failed; the WAL file may grow until it succeeds"
                    );
                }
                (-1, -1)
            }
        };
        if log >= 0 {
            failures = 0;
        }
        *stats.last_checkpoint.lock().unwrap_or_else(PoisonError::into_inner) = (log, copied);
        if !catch_up {
            found = log;
        }
    }
}

/// One PASSIVE checkpoint: (frames in the WAL, frames copied into the database file).
fn checkpoint(conn: &Connection) -> rusqlite::Result<(i32, i32)> {
    conn.wal_checkpoint_v2(Some(rusqlite::MAIN_DB), CheckpointMode::PASSIVE)
}
