//! The limit counters every worker of one gateway shares: a memory region the supervisor makes
//! (a memfd, its descriptor handed to each worker across exec like the IPC socket) and every
//! worker maps. A worker started alone, or a router built in a test, maps a private anonymous
//! region of the same layout, so one code path counts in both cases.
//!
//! Layout: a table of [`TENANT_CELLS`] cells, one per tenant, found by the hash of the tenant's
//! name (open addressing, claimed with a compare-and-swap, so a tenant keeps its cell across keys
//! file reloads whatever the order of the file), then [`WORKER_ROWS`] rows of per-worker counts.
//! Every field is an atomic updated lock-free: no worker ever waits for another.
//!
//! - Requests per minute: GCRA — the cell holds the theoretical arrival time; a request is
//!   admitted when moving it one interval (a minute / limit) later keeps it within a minute of
//!   now (a burst of `limit` requests, then one every interval).
//! - Open streams and WebSockets: one gateway-wide count per tenant, claimed below the limit with a
//!   compare-and-swap, and the same count per worker row. When a worker dies, the supervisor
//!   subtracts its row from the gateway-wide counts and zeroes it ([`SharedCounters::release_row`]),
//!   so the streams of a crashed worker do not stay counted.
//! - Tokens per minute and per day: fixed windows, each an `AtomicU64` packing the window's number
//!   (minutes or days since the Unix epoch) in the high 32 bits and the tokens used in it in the
//!   low 32 bits, so a new window starts with one compare-and-swap.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use memmap2::{MmapMut, MmapOptions};
use sha2::{Digest, Sha256};

/// Tenant cells in the region (a keys file holds at most half as many tenants).
pub const TENANT_CELLS: usize = 4096;
/// Per-worker rows: every worker process alive at once (replacements during a rolling restart
/// included) has its own.
pub const WORKER_ROWS: usize = 256;

/// Environment variable carrying the region's descriptor number across a worker's exec.
pub const REGION_FD_ENV: &str = "RESPGW_LIMITS_FD";
/// Environment variable carrying the worker's row.
pub const REGION_ROW_ENV: &str = "RESPGW_LIMITS_ROW";

/// A minute in nanoseconds: the GCRA window.
const MINUTE_NS: u64 = 60_000_000_000;

/// One tenant's gateway-wide counters (64 bytes: one cache line).
#[repr(C, align(64))]
pub(crate) struct TenantCells {
    /// Non-zero hash of the tenant's name; 0: free.
    key: AtomicU64,
    /// GCRA theoretical arrival time, nanoseconds since the Unix epoch.
    tat: AtomicU64,
    /// Tokens used in the current minute (window number << 32 | tokens).
    tokens_minute: AtomicU64,
    /// Tokens used in the current day (window number << 32 | tokens).
    tokens_day: AtomicU64,
    /// Streams open now, all workers together.
    streams: AtomicU64,
    /// WebSockets open now, all workers together.
    websockets: AtomicU64,
}

/// What one worker has open of one tenant.
#[repr(C)]
struct RowCells {
    streams: AtomicU32,
    websockets: AtomicU32,
}

const TENANTS_BYTES: usize = TENANT_CELLS * size_of::<TenantCells>();
const ROW_BYTES: usize = TENANT_CELLS * size_of::<RowCells>();
/// Size of the region.
pub const REGION_BYTES: usize = TENANTS_BYTES + WORKER_ROWS * ROW_BYTES;

/// A mapped region and the row this process counts its own streams in.
pub struct SharedCounters {
    map: MmapMut,
    /// The memfd, kept by the supervisor to hand to the workers it starts.
    fd: Option<OwnedFd>,
    row: usize,
}

/// Which kind of open thing a count is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Open {
    Stream,
    WebSocket,
}

/// The outcome of a GCRA admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RateState {
    pub admitted: bool,
    /// Requests that could still be made at once.
    pub remaining: u64,
    /// Until the budget is whole again.
    pub reset: Duration,
    /// Until the next request is admitted (zero when admitted).
    pub retry_after: Duration,
}

impl SharedCounters {
    /// A region for this process alone (a worker started without a supervisor, tests).
    pub fn private() -> std::io::Result<SharedCounters> {
        Ok(SharedCounters { map: MmapMut::map_anon(REGION_BYTES)?, fd: None, row: 0 })
    }

    /// A new region to share with worker processes (the supervisor's): a memfd, zeroed.
    pub fn create() -> std::io::Result<SharedCounters> {
        let fd = nix::sys::memfd::memfd_create(c"respgw-limits", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
            .map_err(std::io::Error::from)?;
        let file = File::from(fd);
        file.set_len(REGION_BYTES as u64)?;
        let map = map_file(&file)?;
        Ok(SharedCounters { map, fd: Some(file.into()), row: 0 })
    }

    /// The descriptor a worker inherits (the supervisor's region only).
    pub fn raw_fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// The region a supervisor handed this process ([`REGION_FD_ENV`], [`REGION_ROW_ENV`]), or
    /// `None` when it was started without one.
    pub fn inherited_from_env() -> std::io::Result<Option<SharedCounters>> {
        let invalid = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_owned());
        let Some(fd) = std::env::var_os(REGION_FD_ENV) else { return Ok(None) };
        let fd: RawFd = fd
            .to_str()
            .and_then(|f| f.parse().ok())
            .filter(|f| *f > 2)
            .ok_or_else(|| invalid(&format!("{REGION_FD_ENV} is not a file descriptor number")))?;
        let row: usize = std::env::var(REGION_ROW_ENV)
            .ok()
            .and_then(|r| r.parse().ok())
            .filter(|r| *r < WORKER_ROWS)
            .ok_or_else(|| invalid(&format!("{REGION_ROW_ENV} is not a row below {WORKER_ROWS}")))?;
        // SAFETY: the supervisor set `REGION_FD_ENV` to the number of the memfd it left open across
        // this process's exec, and nothing else in this process reads the variable or owns that
        // descriptor: this is its only owner from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let file = File::from(fd);
        if file.metadata()?.len() != REGION_BYTES as u64 {
            return Err(invalid("the inherited limits region has the wrong size"));
        }
        // Children of this worker (the code interpreter) do not inherit it.
        nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))
            .map_err(std::io::Error::from)?;
        Ok(Some(SharedCounters { map: map_file(&file)?, fd: None, row }))
    }

    fn tenants(&self) -> &[TenantCells] {
        // SAFETY: the mapping is page-aligned, at least `REGION_BYTES` long and lives as long as
        // `self`; all-zero bytes are valid `AtomicU64`s, and every access to the shared memory goes
        // through these atomics (no `&mut` to it is ever made), so other processes writing it
        // concurrently is sound.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().cast::<TenantCells>(), TENANT_CELLS) }
    }

    fn row(&self, row: usize) -> &[RowCells] {
        let row = row.min(WORKER_ROWS - 1);
        // SAFETY: row `row` lies within the mapping (`row < WORKER_ROWS`), is 4-byte aligned (the
        // tenant table before it is a multiple of 64 bytes), and is only accessed through atomics,
        // as in `tenants`.
        unsafe {
            let start = self.map.as_ptr().add(TENANTS_BYTES + row * ROW_BYTES);
            std::slice::from_raw_parts(start.cast::<RowCells>(), TENANT_CELLS)
        }
    }

    /// The cell of tenant `name`, claiming a free one the first time; `None` when the table is full.
    pub(crate) fn cell(&self, name: &str) -> Option<usize> {
        let digest = Sha256::digest(name.as_bytes());
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&digest[..8]);
        let key = u64::from_le_bytes(bytes) | 1;
        let cells = self.tenants();
        let start = (key % TENANT_CELLS as u64) as usize;
        for probe in 0..TENANT_CELLS {
            let index = (start + probe) % TENANT_CELLS;
            let cell = &cells[index].key;
            match cell.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(index),
                Err(existing) if existing == key => return Some(index),
                Err(_) => {}
            }
        }
        None
    }

    /// Admit one request of the tenant in `cell` under `per_minute` (GCRA).
    pub(crate) fn take_request(&self, cell: usize, per_minute: u32) -> RateState {
        let interval = MINUTE_NS / u64::from(per_minute.max(1));
        let tat = &self.tenants()[cell].tat;
        let now = now_ns();
        let mut current = tat.load(Ordering::Acquire);
        loop {
            let next = current.max(now) + interval;
            let ahead = next - now;
            if ahead > MINUTE_NS {
                let reset = current.max(now) - now;
                return RateState {
                    admitted: false,
                    remaining: 0,
                    reset: Duration::from_nanos(reset),
                    retry_after: Duration::from_nanos(ahead - MINUTE_NS),
                };
            }
            match tat.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    return RateState {
                        admitted: true,
                        remaining: (MINUTE_NS - ahead) / interval,
                        reset: Duration::from_nanos(ahead),
                        retry_after: Duration::ZERO,
                    };
                }
                Err(seen) => current = seen,
            }
        }
    }

    /// Count one more open stream or WebSocket of the tenant in `cell` unless `limit` are open
    /// gateway-wide already; whether it was counted.
    pub(crate) fn open(&self, cell: usize, what: Open, limit: u32) -> bool {
        let tenant = &self.tenants()[cell];
        let global = match what {
            Open::Stream => &tenant.streams,
            Open::WebSocket => &tenant.websockets,
        };
        let limit = u64::from(limit);
        if global.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < limit).then_some(n + 1)).is_err() {
            return false;
        }
        let own = &self.row(self.row)[cell];
        match what {
            Open::Stream => own.streams.fetch_add(1, Ordering::AcqRel),
            Open::WebSocket => own.websockets.fetch_add(1, Ordering::AcqRel),
        };
        true
    }

    /// Count one stream or WebSocket [`SharedCounters::open`] counted as closed.
    pub(crate) fn close(&self, cell: usize, what: Open) {
        let own = &self.row(self.row)[cell];
        let tenant = &self.tenants()[cell];
        let (own, global) = match what {
            Open::Stream => (&own.streams, &tenant.streams),
            Open::WebSocket => (&own.websockets, &tenant.websockets),
        };
        own.fetch_sub(1, Ordering::AcqRel);
        subtract(global, 1);
    }

    /// How many streams or WebSockets of the tenant in `cell` are open gateway-wide.
    #[cfg(test)]
    pub(crate) fn open_now(&self, cell: usize, what: Open) -> u64 {
        let tenant = &self.tenants()[cell];
        match what {
            Open::Stream => tenant.streams.load(Ordering::Acquire),
            Open::WebSocket => tenant.websockets.load(Ordering::Acquire),
        }
    }

    /// Forget what the (dead) worker of `row` had open: subtract its counts from the
    /// gateway-wide ones and zero them, ready for the next worker given that row.
    pub fn release_row(&self, row: usize) {
        let tenants = self.tenants();
        for (own, tenant) in self.row(row).iter().zip(tenants) {
            subtract(&tenant.streams, u64::from(own.streams.swap(0, Ordering::AcqRel)));
            subtract(&tenant.websockets, u64::from(own.websockets.swap(0, Ordering::AcqRel)));
        }
    }

    /// Add `tokens` to the tenant's minute and day.
    pub(crate) fn charge_tokens(&self, cell: usize, tokens: u64) {
        let tenant = &self.tenants()[cell];
        let now = unix_seconds();
        let tokens = u32::try_from(tokens).unwrap_or(u32::MAX);
        charge_window(&tenant.tokens_minute, now / 60, tokens);
        charge_window(&tenant.tokens_day, now / 86_400, tokens);
    }

    /// Tokens the tenant used this minute and this day, with the time until each window ends.
    pub(crate) fn tokens_used(&self, cell: usize) -> TokensUsed {
        let tenant = &self.tenants()[cell];
        let now_ms = unix_millis();
        let now = now_ms / 1000;
        TokensUsed {
            minute: used_in(&tenant.tokens_minute, now / 60),
            day: used_in(&tenant.tokens_day, now / 86_400),
            minute_ends_in: Duration::from_millis(60_000 - now_ms % 60_000),
            day_ends_in: Duration::from_millis(86_400_000 - now_ms % 86_400_000),
        }
    }
}

/// A tenant's token use in the current windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TokensUsed {
    pub minute: u64,
    pub day: u64,
    pub minute_ends_in: Duration,
    pub day_ends_in: Duration,
}

fn map_file(file: &File) -> std::io::Result<MmapMut> {
    // SAFETY: the file is a memfd of exactly `REGION_BYTES` that is never truncated; other
    // processes change its bytes while it is mapped, which is why it is only read and written
    // through atomics (see `SharedCounters::tenants`).
    unsafe { MmapOptions::new().len(REGION_BYTES).map_mut(file) }
}

/// `counter -= amount`, stopping at 0.
fn subtract(counter: &AtomicU64, amount: u64) {
    let _ = counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| Some(n.saturating_sub(amount)));
}

fn charge_window(cell: &AtomicU64, window: u64, tokens: u32) {
    let _ = cell.fetch_update(Ordering::AcqRel, Ordering::Acquire, |packed| {
        let used = if packed >> 32 == window { (packed as u32).saturating_add(tokens) } else { tokens };
        Some(window << 32 | u64::from(used))
    });
}

fn used_in(cell: &AtomicU64, window: u64) -> u64 {
    let packed = cell.load(Ordering::Acquire);
    if packed >> 32 == window { u64::from(packed as u32) } else { 0 }
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

fn unix_millis() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn unix_seconds() -> u64 {
    unix_millis() / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_the_limit_then_one_per_interval() {
        let region = SharedCounters::private().unwrap();
        let cell = region.cell("alpha").unwrap();
        let admitted = (0..90).filter(|_| region.take_request(cell, 30).admitted).count();
        assert_eq!(admitted, 30);
        let refused = region.take_request(cell, 30);
        assert!(!refused.admitted);
        assert!(refused.retry_after <= Duration::from_secs(2) && refused.retry_after > Duration::ZERO);
        assert!(refused.reset > Duration::from_secs(58), "{:?}", refused.reset);
    }

    #[test]
    fn remaining_counts_down() {
        let region = SharedCounters::private().unwrap();
        let cell = region.cell("alpha").unwrap();
        assert_eq!(region.take_request(cell, 3).remaining, 2);
        assert_eq!(region.take_request(cell, 3).remaining, 1);
        assert_eq!(region.take_request(cell, 3).remaining, 0);
    }

    #[test]
    fn tenants_keep_their_cells_and_do_not_share_them() {
        let region = SharedCounters::private().unwrap();
        let (a, b) = (region.cell("alpha").unwrap(), region.cell("beta").unwrap());
        assert_ne!(a, b);
        assert_eq!(region.cell("alpha"), Some(a));
    }

    #[test]
    fn a_dead_workers_streams_are_released_with_its_row() {
        let mut worker = SharedCounters::private().unwrap();
        worker.row = 3;
        let cell = worker.cell("alpha").unwrap();
        assert!(worker.open(cell, Open::Stream, 2));
        assert!(worker.open(cell, Open::Stream, 2));
        assert!(!worker.open(cell, Open::Stream, 2), "the third is over the limit");
        assert!(worker.open(cell, Open::WebSocket, 1), "WebSockets are counted apart");
        worker.close(cell, Open::Stream);
        assert_eq!(worker.open_now(cell, Open::Stream), 1);
        worker.release_row(3);
        assert_eq!(worker.open_now(cell, Open::Stream), 0);
        assert_eq!(worker.open_now(cell, Open::WebSocket), 0);
        assert!(worker.open(cell, Open::Stream, 1));
    }

    #[test]
    fn tokens_add_up_within_their_windows() {
        let region = SharedCounters::private().unwrap();
        let cell = region.cell("alpha").unwrap();
        region.charge_tokens(cell, 100);
        region.charge_tokens(cell, 23);
        let used = region.tokens_used(cell);
        assert_eq!((used.minute, used.day), (123, 123));
        assert!(used.minute_ends_in <= Duration::from_secs(60));
        // A charge in an old window is forgotten by the next.
        let tenant = &region.tenants()[cell];
        tenant.tokens_minute.store((unix_seconds() / 60 - 1) << 32 | 500, Ordering::Release);
        assert_eq!(region.tokens_used(cell).minute, 0);
        region.charge_tokens(cell, 7);
        assert_eq!(region.tokens_used(cell).minute, 7);
    }

    #[test]
    fn workers_share_one_region_through_its_descriptor() {
        let region = SharedCounters::create().unwrap();
        let fd = region.raw_fd().unwrap();
        let dup = nix::unistd::dup(unsafe_free_borrow(fd)).unwrap();
        let other = SharedCounters { map: map_file(&File::from(dup)).unwrap(), fd: None, row: 1 };
        let cell = region.cell("alpha").unwrap();
        assert_eq!(other.cell("alpha"), Some(cell));
        assert!(region.take_request(cell, 2).admitted);
        assert!(other.take_request(cell, 2).admitted);
        assert!(!region.take_request(cell, 2).admitted, "both processes' requests count");
    }

    fn unsafe_free_borrow(fd: RawFd) -> std::os::fd::BorrowedFd<'static> {
        // SAFETY: the test keeps the region (and so the descriptor) open while the borrow is used.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }
    }
}
