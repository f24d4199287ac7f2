//! What some tests need from outside the repository — a PostgreSQL server, the code
//! interpreter's sandbox, the test Python environment, npm packages, the Codex CLI,
//! llama-server, promtool, systemd's tools, headless Chromium and chromedriver — and what a
//! test does when one is missing.
//!
//! `scripts/test` installs all of them and sets [`REQUIRE_ALL_ENV`]: there, a missing
//! prerequisite fails the test. Under plain `cargo test` (a fresh clone with only Rust), the test
//! is skipped instead: it writes one line, `skipped <test>: <what is missing> (<how to get it>)`,
//! to stderr past the test harness's output capture, so the skip is seen, and returns at once.
//! A check is an `Err` with that reason when the prerequisite is missing; [`skip_unless!`]
//! turns it into the early return.

use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Set to `1` by `scripts/test`: every prerequisite must be present.
pub const REQUIRE_ALL_ENV: &str = "RESPGW_TEST_ALL";

/// Return from the calling test when `$check` (a `Result<(), String>`) says a prerequisite is
/// missing and skipping is allowed; fail it when [`REQUIRE_ALL_ENV`] is set.
#[macro_export]
macro_rules! skip_unless {
    ($check:expr) => {
        if !$crate::prerequisites::present($check) {
            return;
        }
    };
}

/// `true` when `check` passed; otherwise skip (print the reason, `false`) or, when every
/// prerequisite is required, panic with the reason.
pub fn present(check: Result<(), String>) -> bool {
    let Err(reason) = check else { return true };
    if std::env::var(REQUIRE_ALL_ENV).is_ok_and(|v| v == "1") {
        panic!("{REQUIRE_ALL_ENV}=1 but a prerequisite is missing: {reason}");
    }
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    // Written to the process's stderr itself, not through `eprintln!`, which the test harness
    // captures (and shows only for failing tests).
    let _ = writeln!(std::io::stderr(), "skipped {test}: {reason}");
    false
}

/// The PostgreSQL server of the store tests accepts connections.
pub fn postgres() -> Result<(), String> {
    let url = crate::postgres::server_url();
    let (host, port) = url::Url::parse(&url)
        .map(|u| (u.host_str().unwrap_or("127.0.0.1").to_owned(), u.port().unwrap_or(5432)))
        .map_err(|e| format!("RESPGW_TEST_POSTGRES_URL is not a URL: {e}"))?;
    let reachable = (host.as_str(), port)
        .to_socket_addrs()
        .is_ok_and(|mut addresses| addresses.any(|a| TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok()));
    if reachable {
        Ok(())
    } else {
        Err(format!("no PostgreSQL server at {host}:{port} (scripts/setup-postgres starts one)"))
    }
}

/// `redis-server` is installed (tests start their own, on a free port).
pub fn redis_server() -> Result<(), String> {
    program("redis-server", "scripts/test installs Debian's redis-server; or apt-get install redis-server")
}

/// Headless Chromium and its WebDriver server, for the console's browser tests
/// ([`crate::browser`]).
pub fn chromium() -> Result<(), String> {
    const REMEDY: &str = "scripts/setup-browser installs Debian's chromium and chromium-driver";
    program("chromium", REMEDY)?;
    program("chromedriver", REMEDY)
}

/// `name` is an executable on `PATH`.
pub fn program(name: &str, remedy: &str) -> Result<(), String> {
    let found = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| is_executable(&dir.join(name))));
    if found { Ok(()) } else { Err(format!("`{name}` is not on PATH ({remedy})")) }
}

/// `path` exists.
pub fn file(path: &Path, remedy: &str) -> Result<(), String> {
    if path.exists() { Ok(()) } else { Err(format!("{} is missing ({remedy})", path.display())) }
}

/// The code interpreter's sandbox can be set up: bubblewrap and the sandbox's Python
/// environment (`GW_CODE_INTERPRETER_VENV`, else the cache path `scripts/setup-code-interpreter`
/// installs to).
pub fn code_interpreter_sandbox() -> Result<(), String> {
    const REMEDY: &str = "scripts/setup-code-interpreter installs bubblewrap and the Python venv";
    program("bwrap", REMEDY)?;
    let venv = std::env::var_os("GW_CODE_INTERPRETER_VENV").map(PathBuf::from).unwrap_or_else(|| {
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
            .unwrap_or_default();
        cache.join("respgw/code-interpreter-venv")
    });
    file(&venv.join("bin/python3"), REMEDY)
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_present_prerequisite_passes_and_a_missing_one_names_its_remedy() {
        assert!(program("sh", "part of every Unix").is_ok());
        let missing = program("respgw-no-such-program", "install it").unwrap_err();
        assert!(missing.contains("respgw-no-such-program") && missing.contains("install it"), "{missing}");
        assert!(file(Path::new("/nonexistent/respgw"), "make it").unwrap_err().contains("make it"));
    }
}
