//! Gives a worker's freed memory back to the system after a burst.
//!
//! glibc's allocator keeps freed memory in its heap for reuse; only the part above the highest
//! live allocation goes back to the system by itself. After thousands of streams close, a worker
//! would stay at its peak size. So a worker looks every [`CHECK_INTERVAL`] at how much of its
//! resident memory the allocator holds free (resident size minus what the program has allocated)
//! and, once that grew by [`TRIM_AT_BYTES`] since the last look that trimmed, asks the allocator
//! to release every free page (`malloc_trim`). Steady traffic reuses what it frees and never gets
//! there. Other C libraries do nothing here.

use std::time::Duration;

/// How often the worker looks.
const CHECK_INTERVAL: Duration = Duration::from_secs(2);
/// Growth of resident free memory that is worth a trim.
const TRIM_AT_BYTES: u64 = 16 << 20;

/// Runs for the life of the worker.
pub async fn release_freed_memory() {
    let mut ticker = tokio::time::interval(CHECK_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut trimmer = Trimmer::default();
    loop {
        ticker.tick().await;
        trimmer.check();
    }
}

/// The resident free memory after the last trim (or the first look): the baseline it must grow
/// from before the next trim. It includes what is resident but never allocated (code, stacks).
#[derive(Default)]
struct Trimmer {
    baseline: Option<u64>,
}

impl Trimmer {
    fn check(&mut self) {
        let Some(slack) = resident_free_bytes() else { return };
        match self.baseline {
            Some(baseline) if slack >= baseline + TRIM_AT_BYTES => {
                trim();
                let after = resident_free_bytes().unwrap_or(slack);
                tracing::debug!(before = slack, after, "returned freed memory to the system");
                self.baseline = Some(after);
            }
            // Shrinking slack (memory reused) lowers the baseline, so a later burst is measured
            // from there.
            Some(baseline) => self.baseline = Some(baseline.min(slack)),
            None => self.baseline = Some(slack),
        }
    }
}

/// Resident bytes not allocated by the program: `VmRSS` minus the allocator's bytes in use.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn resident_free_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let resident_pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE).ok()??;
    let resident = resident_pages * u64::try_from(page).ok()?;
    // SAFETY: `mallinfo2` only reads the allocator's statistics, under its own locks; any thread
    // may call it.
    let info = unsafe { libc::mallinfo2() };
    // Bytes in use in the heaps plus those in chunks mapped on their own.
    let in_use = u64::try_from(info.uordblks.saturating_add(info.hblkhd)).ok()?;
    Some(resident.saturating_sub(in_use))
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: `malloc_trim` releases free pages of the allocator's heaps under its own locks;
    // any thread may call it at any time.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn resident_free_bytes() -> Option<u64> {
    None
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    #[test]
    fn a_freed_burst_is_given_back() {
        let mut trimmer = Trimmer::default();
        trimmer.check();
        let before = trimmer.baseline.expect("the first look sets the baseline");
        // 32 MiB in small blocks (below the size glibc maps on its own), touched, then all but
        // the last freed: the last pins the heap's top, so nothing goes back by itself.
        let mut blocks: Vec<Vec<u8>> = (0..2048).map(|_| vec![1u8; 16 << 10]).collect();
        let pin = vec![1u8; 16 << 10];
        blocks.clear();
        blocks.shrink_to_fit();
        let held = resident_free_bytes().expect("Linux with glibc reports it");
        assert!(held >= before + TRIM_AT_BYTES, "the freed blocks stay resident: {held} vs {before}");
        trimmer.check();
        let after = trimmer.baseline.expect("set");
        assert!(after + TRIM_AT_BYTES < held, "a trim gave memory back: {held} -> {after}");
        drop(pin);
    }
}
