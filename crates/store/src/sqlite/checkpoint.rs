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
//!   writer's WAL hook wakes the thread, once per round: no I/O in a commit).
//!
//! A PASSIVE checkpoint never waits for a lock and never blocks readers or writers: it copies what
//! it can and returns. Several processes on one file each run their own checkpointer, which is
//! safe: SQLite lets one checkpoint run at a time (another one gets `SQLITE_BUSY` at once and
//! retries on its next round), and every checkpoint copies frames written by any process.
//!
//! # Bounding the WAL
//!
//! The WAL file starts over from its beginning (instead of growing) when a write transaction
//! begins while every frame has been copied back. A checkpoint running beside a busy writer always
//! finds frames appended meanwhile, so under a write load that outruns the checkpoints (or while a
//! checkpoint is slowed down by a loaded disk) that moment may not come, and the WAL grows. So a
//! commit that leaves [`Config::max_wal_pages`] frames or more waits, still holding this process's
//! writer, until a checkpoint round that started after it has finished: nothing of this process
//! is appended meanwhile, so that round copies everything and the next write starts the WAL over
//! (truncating its file to `journal_size_limit`). This back-pressure is what SQLite's automatic
//! checkpoint did on every 1000th commit; here it only happens under overload.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::Connection;
use rusqlite::wal::CheckpointMode;

use super::connection::{Config, Stats, is_disk_full};
use super::reserve::Reserve;

/// Coordination between the writer's WAL hook and the checkpointer thread.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    state: Mutex<State>,
    /// The checkpointer waits on this for a nudge or a stop.
    wake: Condvar,
    /// Writers over the WAL limit wait on this for a checkpoint round to finish.
    done: Condvar,
    /// Set by the first nudge after a round started, so that later commits skip the lock and the
    /// wake-up until the checkpointer has run.
    nudged: AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    nudged: bool,
    stop: bool,
    /// Checkpoint rounds started and finished so far.
    started: u64,
    finished: u64,
}

impl Signal {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Called from the writer's WAL hook after each commit with the number of frames now in the
    /// WAL. Past `checkpoint_pages`, asks for a checkpoint (cheap); past `max_wal_pages`, waits
    /// (up to `max_wait`) for a checkpoint round that includes this commit. Returns whether it
    /// waited.
    pub(crate) fn committed(&self, frames: i32, config: &Config) -> bool {
        if frames >= config.max_wal_pages {
            let mut state = self.lock();
            // A round in progress may have started before this commit: wait for the next one.
            let target = state.started + 1;
            state.nudged = true;
            self.nudged.store(true, Ordering::Release);
            self.wake.notify_one();
            let (state, _) = self
                .done
                .wait_timeout_while(state, config.busy_budget, |s| s.finished < target && !s.stop)
                .unwrap_or_else(PoisonError::into_inner);
            drop(state);
            return true;
        }
        if frames >= config.checkpoint_pages && !self.nudged.swap(true, Ordering::AcqRel) {
            self.lock().nudged = true;
            self.wake.notify_one();
        }
        false
    }

    /// Ask for a checkpoint round now (the disk-space reserve was released).
    pub(crate) fn nudge(&self) {
        self.lock().nudged = true;
        self.nudged.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    fn stop(&self) {
        self.lock().stop = true;
        self.wake.notify_one();
        self.done.notify_all();
    }

    /// Wait for a nudge, a stop or the interval; returns false when the thread should end, else
    /// counts a round as started.
    fn start_round(&self, interval: Duration) -> bool {
        let state = self.lock();
        let (mut state, _) = self
            .wake
            .wait_timeout_while(state, interval, |s| !s.nudged && !s.stop)
            .unwrap_or_else(PoisonError::into_inner);
        if state.stop {
            return false;
        }
        state.nudged = false;
        self.nudged.store(false, Ordering::Release);
        state.started += 1;
        true
    }

    fn finish_round(&self) {
        self.lock().finished += 1;
        self.done.notify_all();
    }
}

/// The running checkpointer of one store; dropping it stops the thread.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    signal: Arc<Signal>,
}

impl Checkpointer {
    /// Start the thread on its own connection.
    pub(crate) fn start(
        conn: Connection,
        signal: Arc<Signal>,
        config: Config,
        stats: Arc<Stats>,
        path: PathBuf,
        reserve: Option<Arc<Reserve>>,
    ) -> std::io::Result<Self> {
        let thread_signal = Arc::clone(&signal);
        // Detached, not joined on drop: a checkpoint in progress may take a while (it syncs files)
        // and the store may be dropped on an async runtime thread. The thread ends by itself as
        // soon as it sees the stop.
        std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || run(&conn, &thread_signal, &config, &stats, &path, reserve.as_deref()))?;
        Ok(Self { signal })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.signal.stop();
    }
}

/// The thread's loop.
fn run(conn: &Connection, signal: &Signal, config: &Config, stats: &Stats, path: &Path, reserve: Option<&Reserve>) {
    let mut failures = 0u32;
    while signal.start_round(config.checkpoint_interval) {
        let mut released = reserve.is_some_and(Reserve::is_released);
        let mut result = checkpoint(conn, released);
        if let (Some(reserve), Err(e)) = (reserve, &result)
            && is_disk_full(e)
        {
            // No room to grow the database file for the WAL's pages: that is what the reserve is for.
            reserve.release();
            released = true;
            result = checkpoint(conn, released);
        }
        if released && let Some(reserve) = reserve {
            reserve.restore();
        }
        let (log, copied) = match result {
            Ok(frames) => {
                failures = 0;
                frames
            }
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
        stats.checkpoints.fetch_add(1, Ordering::Relaxed);
        *stats.last_checkpoint.lock().unwrap_or_else(PoisonError::into_inner) = (log, copied);
        signal.finish_round();
    }
}

/// One checkpoint: PASSIVE, or while the disk-space reserve is released TRUNCATE, which waits
/// (within the busy budget) for the writers and readers of every process to let it copy the whole
/// WAL, then truncates the WAL file to nothing so that its space goes back to the disk.
fn checkpoint(conn: &Connection, released: bool) -> rusqlite::Result<(i32, i32)> {
    let mode = if released { CheckpointMode::TRUNCATE } else { CheckpointMode::PASSIVE };
    conn.wal_checkpoint_v2(Some(rusqlite::MAIN_DB), mode)
}
