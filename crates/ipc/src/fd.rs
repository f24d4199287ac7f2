//! The socketpair and its file descriptor's trip across the worker's re-exec.
//!
//! Supervisor side: [`socketpair`] (both ends close-on-exec), [`inherit_in_child`] on the worker's
//! `Command` (clears close-on-exec in that child only and sets [`IPC_FD_ENV`]), spawn, drop the
//! child's end, [`into_tokio`] + [`into_frame_halves`] on the own end.
//! Worker side: [`inherited_from_env`] once at start-up, then [`into_frame_halves`].

use std::collections::BTreeSet;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::{Mutex, PoisonError};

use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use crate::stream::{FrameReader, FrameWriter};

/// Environment variable carrying the worker's IPC fd number across exec.
pub const IPC_FD_ENV: &str = "RESPGW_IPC_FD";

/// File descriptors already adopted by [`from_inherited_fd`] in this process.
static ADOPTED_FDS: Mutex<BTreeSet<RawFd>> = Mutex::new(BTreeSet::new());

/// A connected pair of Unix stream sockets (`UnixStream::pair`); both ends are close-on-exec.
pub fn socketpair() -> io::Result<(StdUnixStream, StdUnixStream)> {
    StdUnixStream::pair()
}

/// Registers a std stream with the tokio reactor (switching it to non-blocking mode).
/// Must be called from within a tokio runtime.
pub fn into_tokio(stream: StdUnixStream) -> io::Result<UnixStream> {
    stream.set_nonblocking(true)?;
    UnixStream::from_std(stream)
}

/// Splits a connected stream into a frame reader and a frame writer, usable from separate tasks.
pub fn into_frame_halves(stream: UnixStream) -> (FrameReader<OwnedReadHalf>, FrameWriter<OwnedWriteHalf>) {
    let (read_half, write_half) = stream.into_split();
    (FrameReader::new(read_half), FrameWriter::new(write_half))
}

/// Clears `FD_CLOEXEC` on `fd`, so the descriptor survives `exec`.
///
/// Only calls `fcntl`, which is async-signal-safe, so it may run in a `pre_exec` hook. Prefer
/// [`inherit_in_child`]: clearing the flag in the supervisor itself would let every child spawned
/// meanwhile (other workers, the MCP helper) inherit the descriptor too.
pub fn clear_cloexec(fd: RawFd) -> io::Result<()> {
    update_fd_flags(fd, |flags| flags & !libc::FD_CLOEXEC)
}

fn set_cloexec(fd: RawFd) -> io::Result<()> {
    update_fd_flags(fd, |flags| flags | libc::FD_CLOEXEC)
}

fn update_fd_flags(fd: RawFd, change: impl FnOnce(libc::c_int) -> libc::c_int) -> io::Result<()> {
    // SAFETY: fcntl(F_GETFD) takes no pointer and touches no memory: it returns the flags of
    // whatever `fd` names, or fails with EBADF when nothing is open there.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let wanted = change(flags);
    if wanted != flags {
        // SAFETY: fcntl(F_SETFD) takes an integer argument, no pointer: it only changes the
        // descriptor flags of `fd` (nothing but `FD_CLOEXEC` is defined), or fails with EBADF.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, wanted) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Prepares `command` (the worker's re-exec) to inherit `child_end`: sets [`IPC_FD_ENV`] to its fd
/// number and clears `FD_CLOEXEC` on it in the forked child only, just before exec.
///
/// Keep `child_end` open until the child is spawned, then drop it in the supervisor. Works for
/// `tokio::process::Command` too, via `tokio::process::Command::from(command)`.
pub fn inherit_in_child(command: &mut Command, child_end: &StdUnixStream) {
    let fd = child_end.as_raw_fd();
    command.env(IPC_FD_ENV, fd.to_string());
    // SAFETY: the hook runs in the forked child between fork and exec, where only async-signal-safe
    // calls are allowed: `clear_cloexec` makes at most two fcntl(2) system calls, builds its error
    // from errno, and allocates nothing and takes no locks.
    unsafe {
        command.pre_exec(move || clear_cloexec(fd));
    }
}

/// Adopts the IPC socket named by [`IPC_FD_ENV`], if the variable is set. Call once, early in the
/// worker, inside its tokio runtime.
pub fn inherited_from_env() -> io::Result<Option<UnixStream>> {
    let Some(value) = std::env::var_os(IPC_FD_ENV) else {
        return Ok(None);
    };
    let fd = value.to_str().and_then(|text| text.trim().parse::<RawFd>().ok()).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("{IPC_FD_ENV}={value:?} is not a file descriptor number"))
    })?;
    // SAFETY: the supervisor set `IPC_FD_ENV` to the number of the socketpair end it left open
    // across this process's exec (`inherit_in_child`), so no file opened since can have received
    // that number; no other code reads the variable to wrap that descriptor, and a second call
    // is refused (`ADOPTED_FDS`).
    unsafe { from_inherited_fd(fd) }.map(Some)
}

/// Takes ownership of the inherited socket `fd` and registers it with tokio (call inside a tokio
/// runtime). `FD_CLOEXEC` is set again so the worker's own children (code interpreter, …) do not
/// inherit it.
///
/// Checks before adopting: `fd` is above stdio (≥ 3), open, a socket of the Unix stream kind, and
/// not already adopted through this function in this process; otherwise an error is returned
/// and `fd` is left untouched.
///
/// # Safety
///
/// If `fd` passes those checks, nothing else in the process may own it: the returned stream takes
/// ownership and closes `fd` when dropped. A descriptor received across exec whose number came
/// from [`IPC_FD_ENV`] and that no other code has wrapped qualifies. A descriptor that fails the
/// checks (including one adopted before) is left alone, whoever owns it.
pub unsafe fn from_inherited_fd(fd: RawFd) -> io::Result<UnixStream> {
    if fd <= libc::STDERR_FILENO {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("fd {fd} is stdio, not an IPC socket")));
    }
    let mut adopted = ADOPTED_FDS.lock().unwrap_or_else(PoisonError::into_inner);
    if adopted.contains(&fd) {
        return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("fd {fd} was already adopted")));
    }
    ensure_unix_stream_socket(fd)?;
    set_cloexec(fd)?;
    adopted.insert(fd);
    drop(adopted);
    // SAFETY: `fd` is an open Unix stream socket not adopted before (checked above), so by this
    // function's contract nothing else owns it; `ADOPTED_FDS` keeps a later call from taking it
    // a second time.
    let stream = unsafe { StdUnixStream::from_raw_fd(fd) };
    into_tokio(stream)
}

/// Fails unless `fd` is an open `AF_UNIX` `SOCK_STREAM` socket.
fn ensure_unix_stream_socket(fd: RawFd) -> io::Result<()> {
    let not_ipc = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("fd {fd} is {what}"));

    // SAFETY: `libc::stat` is a C struct of integers, for which all-zero bytes are a valid value.
    let mut status: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `status` is a live, writable local `stat`; fstat writes one `stat` into it or fails
    // (EBADF when `fd` is not open) without writing.
    if unsafe { libc::fstat(fd, &mut status) } < 0 {
        return Err(io::Error::last_os_error());
    }
    if status.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(not_ipc("not a socket"));
    }

    let mut socket_type: libc::c_int = 0;
    let mut option_len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `socket_type` is a live local c_int and `option_len` holds its size, so SO_TYPE's
    // value (one c_int) fits; getsockopt writes no more than `option_len` bytes.
    let result = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE, (&raw mut socket_type).cast(), &mut option_len)
    };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    if socket_type != libc::SOCK_STREAM {
        return Err(not_ipc("not a stream socket"));
    }

    // SAFETY: `sockaddr_storage` is a C struct of integers, for which all-zero bytes are valid.
    let mut address: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut address_len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `address` is a live local `sockaddr_storage` and `address_len` holds its size;
    // getsockname writes at most that many bytes (it truncates a longer address).
    if unsafe { libc::getsockname(fd, (&raw mut address).cast(), &mut address_len) } < 0 {
        return Err(io::Error::last_os_error());
    }
    if libc::c_int::from(address.ss_family) != libc::AF_UNIX {
        return Err(not_ipc("not a Unix-domain socket"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::fd::IntoRawFd;
    use std::os::unix::net::UnixDatagram;

    use super::*;

    fn has_cloexec(fd: RawFd) -> bool {
        // SAFETY: fcntl(F_GETFD) takes no pointer: it returns the flags of `fd` or fails (EBADF).
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        flags >= 0 && flags & libc::FD_CLOEXEC != 0
    }

    #[test]
    fn socketpair_ends_are_cloexec_and_flag_can_be_cleared() {
        let (first, second) = socketpair().expect("pair");
        assert!(has_cloexec(first.as_raw_fd()) && has_cloexec(second.as_raw_fd()));
        clear_cloexec(first.as_raw_fd()).expect("clear");
        assert!(!has_cloexec(first.as_raw_fd()));
        assert!(has_cloexec(second.as_raw_fd()));
        assert!(clear_cloexec(-1).is_err());
    }

    #[test]
    fn inherit_in_child_sets_the_env_var() {
        let (_own_end, child_end) = socketpair().expect("pair");
        let mut command = Command::new("true");
        inherit_in_child(&mut command, &child_end);
        let fd = child_end.as_raw_fd().to_string();
        assert!(command.get_envs().any(|(key, value)| key == IPC_FD_ENV && value == Some(fd.as_ref())));
        assert!(has_cloexec(child_end.as_raw_fd()), "parent's copy stays close-on-exec");
    }

    /// The kind of error `from_inherited_fd` refuses `fd` with; for descriptors that fail its checks.
    fn refused(fd: RawFd, what: &str) -> io::ErrorKind {
        // SAFETY: every caller passes a descriptor that fails a check (stdio, not open, not a Unix
        // stream socket, adopted already), and a refused descriptor is left alone.
        let result = unsafe { from_inherited_fd(fd) };
        result.expect_err(what).kind()
    }

    #[tokio::test]
    async fn adopting_checks_the_descriptor_and_refuses_twice() {
        let (own_end, child_end) = socketpair().expect("pair");
        let fd = child_end.into_raw_fd();
        clear_cloexec(fd).expect("clear");
        // SAFETY: `into_raw_fd` gave up the socketpair end, so nothing else owns `fd`.
        let adopted = unsafe { from_inherited_fd(fd) }.expect("adopt");
        assert!(has_cloexec(fd), "adopted fd is close-on-exec again");
        assert_eq!(refused(fd, "second adoption"), io::ErrorKind::AlreadyExists);

        assert_eq!(refused(1, "stdout"), io::ErrorKind::InvalidInput);
        let _ = refused(1_000_000_000, "not open");

        let file = std::fs::File::open("/proc/self/exe").or_else(|_| std::fs::File::open("/")).expect("some file");
        assert_eq!(refused(file.as_raw_fd(), "file"), io::ErrorKind::InvalidInput);

        let (datagram, _other) = UnixDatagram::pair().expect("datagram pair");
        assert_eq!(refused(datagram.as_raw_fd(), "datagram"), io::ErrorKind::InvalidInput);

        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("tcp listener");
        let tcp = std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("tcp connect");
        assert_eq!(refused(tcp.as_raw_fd(), "tcp"), io::ErrorKind::InvalidInput);
        drop((adopted, own_end));
    }
}
