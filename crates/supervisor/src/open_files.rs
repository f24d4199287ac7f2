//! The open-files limit: raised to its hard limit at start (supervisor and workers alike; the
//! processes they start inherit it), and the client-connection cap a worker can hold under it.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Descriptors a worker keeps for everything but client connections and their upstream calls:
/// the store, IPC, the listener, MCP and web-search connections, sandbox pipes.
const RESERVED_DESCRIPTORS: u64 = 256;

/// Raise this process's soft `RLIMIT_NOFILE` to its hard limit and return the soft limit now in
/// force (`None` if it cannot be read). A failure to raise it is logged; the old limit stays.
pub fn raise_to_hard_limit() -> Option<u64> {
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limit) => limit,
        Err(errno) => {
            tracing::warn!(error = %std::io::Error::from(errno), "cannot read the open-files limit");
            return None;
        }
    };
    if soft >= hard {
        return Some(soft);
    }
    if let Err(errno) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        tracing::warn!(
            error = %std::io::Error::from(errno),
            soft,
            hard,
            "cannot raise the open-files limit to its hard limit"
        );
        return Some(soft);
    }
    tracing::debug!(from = soft, to = hard, "raised the open-files limit");
    Some(hard)
}

/// The client-connection cap that fits under `open_files`: each connection may hold two
/// descriptors (its socket and, while it streams, its upstream call), after a fixed reserve.
pub fn connection_cap(wanted: usize, open_files: u64) -> usize {
    let fits = open_files.saturating_sub(RESERVED_DESCRIPTORS) / 2;
    wanted.min(usize::try_from(fits).unwrap_or(usize::MAX)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_two_descriptors_per_connection_and_a_reserve() {
        assert_eq!(connection_cap(8192, 1_048_576), 8192);
        assert_eq!(connection_cap(10_000, 20_000), 9872);
        assert_eq!(connection_cap(8192, 1024), 384);
        assert_eq!(connection_cap(8192, 100), 1);
    }

    #[test]
    fn raising_leaves_the_soft_limit_at_the_hard_limit() {
        let soft = raise_to_hard_limit().expect("the limit is readable");
        let (now_soft, now_hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("the limit is readable");
        assert_eq!(soft, now_soft);
        assert_eq!(now_soft, now_hard);
    }
}
