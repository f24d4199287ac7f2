//! The process's one writer: a thread that owns the writer connection and runs every write of this
//! process in arrival order, committing the writes that wait at the same time together (group
//! commit).
//!
//! A write is a job sent over a channel; its caller awaits its result on a oneshot channel. The
//! thread takes every job waiting (up to [`MAX_GROUP`]), opens one `BEGIN IMMEDIATE` transaction
//! (where a write lock held by another process is waited for, in the busy handler), runs each job
//! inside its own `SAVEPOINT` and commits once. A job that fails is rolled back to its savepoint
//! alone: the others of the group are committed, and its caller gets its own error. When the
//! transaction itself fails (its `BEGIN` past the busy budget, its `COMMIT`, or an error after which
//! SQLite rolled the whole transaction back), every job it held gets that error and nothing of
//! theirs is kept; jobs of the group not run yet get a new transaction.
//!
//! While the disk-space reserve is released (the disk is full, see the `reserve` module), jobs that
//! store something new ([`Growth::Adds`]) are answered with [`StoreError::Full`] without running,
//! unless the database's free pages can take them; the others run. A job or a transaction that fails because the disk is full releases it.
//!
//! So this process's writes never race each other for SQLite's write lock (they never meet the busy
//! handler among themselves), no write needs a thread of tokio's blocking pool, and under load one
//! commit (one WAL append of the shared pages, one WAL hook) serves many writes. A group of one job
//! runs it without a savepoint, as a transaction of its own.

use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::connection::{Stats, map_err};
use super::reserve::Reserve;
use crate::StoreError;

/// The most jobs one transaction takes: a long queue is committed in several transactions, so that
/// the first of them is not answered only after the last has run.
const MAX_GROUP: usize = 64;

/// What a write does to the database's size, which decides whether it runs while the disk is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Growth {
    /// Stores something new (a response, items, a conversation, a background run or its events):
    /// refused while the disk-space reserve is released.
    Adds,
    /// Deletes, or rewrites a few rows in place (a lease renewal): runs on the reserve's space.
    Bounded,
}

/// One write waiting for, or done by, the writer thread.
trait Job: Send {
    /// Whether it may run while the disk is full.
    fn growth(&self) -> Growth;
    /// Run the write inside the open transaction; whether it succeeded (its changes are to be
    /// kept).
    fn run(&mut self, conn: &Connection) -> bool;
    /// Whether it failed because the disk is full.
    fn found_disk_full(&self) -> bool;
    /// Answer the caller once the transaction has ended: `group` is its outcome (committed, or the
    /// error that lost it).
    fn finish(self: Box<Self>, group: Result<(), StoreError>);
}

/// A job from a closure, with where its result goes.
struct Pending<T, F> {
    growth: Growth,
    f: Option<F>,
    result: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Job for Pending<T, F>
where
    T: Send,
    F: FnOnce(&Connection) -> Result<T, StoreError> + Send,
{
    fn growth(&self) -> Growth {
        self.growth
    }

    fn found_disk_full(&self) -> bool {
        matches!(self.result, Some(Err(StoreError::Full(_))))
    }

    fn run(&mut self, conn: &Connection) -> bool {
        let result = match self.f.take() {
            Some(f) => f(conn),
            None => Err(StoreError::Unavailable("a write ran twice".into())),
        };
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn finish(self: Box<Self>, group: Result<(), StoreError>) {
        let result = match (self.result, group) {
            (Some(Err(e)), _) => Err(e),
            (Some(Ok(value)), Ok(())) => Ok(value),
            (Some(Ok(_)), Err(e)) | (None, Err(e)) => Err(e),
            (None, Ok(())) => Err(StoreError::Unavailable("a write was not run".into())),
        };
        // The caller may have gone (its request was dropped): the write stands all the same.
        let _ = self.reply.send(result);
    }
}

/// The sending side of the writer thread; the thread ends (closing the connection) when the last
/// clone is dropped.
#[derive(Clone)]
pub(crate) struct Writer {
    jobs: mpsc::Sender<Box<dyn Job>>,
}

impl Writer {
    /// Start the thread that owns `conn`, with the database's disk-space reserve (none in memory).
    pub(crate) fn start(conn: Connection, stats: Arc<Stats>, reserve: Option<Arc<Reserve>>) -> std::io::Result<Self> {
        let (jobs, receiver) = mpsc::channel();
        // Detached: it ends by itself once every sender is gone and the jobs sent are done.
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || serve(&conn, &receiver, &stats, reserve.as_deref()))?;
        Ok(Self { jobs })
    }

    /// Run `f` on the writer connection inside a transaction, after this process's earlier writes.
    /// Its changes are committed if it returns `Ok` (and its result is returned only then), rolled
    /// back if it returns an error. Once sent, the job runs to its end even if the returned
    /// future is dropped. A write that [`Growth::Adds`] fails with [`StoreError::Full`] without
    /// running while the disk-space reserve is released.
    pub(crate) async fn write<T, F>(&self, growth: Growth, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, result) = oneshot::channel();
        let job = Box::new(Pending { growth, f: Some(f), result: None, reply });
        self.jobs.send(job).map_err(|_| StoreError::Unavailable("the store's writer thread is gone".into()))?;
        result.await.map_err(|_| StoreError::Unavailable("the store's writer thread stopped during a write".into()))?
    }
}

/// The thread's loop: one group of waiting jobs per transaction.
fn serve(conn: &Connection, jobs: &mpsc::Receiver<Box<dyn Job>>, stats: &Stats, reserve: Option<&Reserve>) {
    let mut group = Vec::with_capacity(MAX_GROUP);
    while let Ok(job) = jobs.recv() {
        group.push(job);
        group.extend(jobs.try_iter().take(MAX_GROUP - 1));
        if let Some(reserve) = reserve {
            refuse_new_data_if_full(conn, &mut group, reserve);
        }
        if group.is_empty() {
            continue;
        }
        let disk_full = run_group(conn, &mut group, stats);
        if disk_full && let Some(reserve) = reserve {
            reserve.release();
        }
    }
}

/// While the reserve is released, answer the jobs of `group` that would store something new
/// (unless the database's free pages can take them, see [`Reserve::admits_new_data`]).
fn refuse_new_data_if_full(conn: &Connection, group: &mut Vec<Box<dyn Job>>, reserve: &Reserve) {
    if !group.iter().any(|job| job.growth() == Growth::Adds) || reserve.admits_new_data(conn) {
        return;
    }
    for job in std::mem::take(group) {
        if job.growth() == Growth::Adds {
            job.finish(Err(Reserve::refusal()));
        } else {
            group.push(job);
        }
    }
}

/// Run the jobs of `group` (emptying it) in as few transactions as possible: one, unless SQLite
/// rolls one back by itself. Returns whether a job or a transaction failed because the disk is
/// full.
fn run_group(conn: &Connection, group: &mut Vec<Box<dyn Job>>, stats: &Stats) -> bool {
    let mut disk_full = false;
    let savepoints = group.len() > 1;
    let mut pending = group.drain(..);
    let mut ran: Vec<Box<dyn Job>> = Vec::new();
    loop {
        if !conn.is_autocommit() {
            // A transaction left open (its rollback failed, e.g. on an I/O error) would make every
            // later `BEGIN` fail: end it first.
            let _ = conn.execute_batch("ROLLBACK");
        }
        stats.write_transactions.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = execute(conn, "BEGIN IMMEDIATE") {
            let e = map_err(e);
            for job in pending {
                job.finish(Err(copy(&e)));
            }
            return disk_full || matches!(e, StoreError::Full(_));
        }
        let mut kept = false;
        let mut lost = None;
        for mut job in pending.by_ref() {
            if savepoints && let Err(e) = execute(conn, "SAVEPOINT job") {
                let e = map_err(e);
                job.finish(Err(copy(&e)));
                lost = Some(e);
                break;
            }
            let ok = job.run(conn);
            disk_full |= job.found_disk_full();
            if conn.is_autocommit() {
                // SQLite rolled the whole transaction back (a full disk, an I/O error…): the
                // jobs run before this one are lost with it.
                lost = Some(rolled_back());
                job.finish(Err(rolled_back()));
                break;
            }
            if savepoints {
                let ended = if ok {
                    execute(conn, "RELEASE job")
                } else {
                    execute(conn, "ROLLBACK TO job").and_then(|()| execute(conn, "RELEASE job"))
                };
                if let Err(e) = ended {
                    lost = Some(map_err(e));
                    ran.push(job);
                    break;
                }
            }
            kept |= ok;
            ran.push(job);
        }
        let outcome = match lost {
            Some(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                Err(e)
            }
            // Nothing to keep (every job failed, or a single one did): roll back, commit nothing.
            None if !kept => execute(conn, "ROLLBACK").map_err(map_err),
            None => execute(conn, "COMMIT").map_err(map_err),
        };
        let failed = outcome.is_err();
        disk_full |= matches!(outcome, Err(StoreError::Full(_)));
        for job in ran.drain(..) {
            job.finish(outcome.as_ref().map(|_| ()).map_err(copy));
        }
        if !failed || pending.as_slice().is_empty() {
            return disk_full;
        }
    }
}

/// Run one transaction-control statement (prepared once per connection).
fn execute(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

/// The error a lost transaction gives each of its jobs.
fn copy(e: &StoreError) -> StoreError {
    match e {
        StoreError::Corrupt(m) => StoreError::Corrupt(m.clone()),
        StoreError::Full(m) => StoreError::Full(m.clone()),
        other => StoreError::Unavailable(other.to_string()),
    }
}

/// What the jobs of a transaction SQLite rolled back by itself get.
fn rolled_back() -> StoreError {
    StoreError::Unavailable("the write transaction was rolled back by SQLite".into())
}
