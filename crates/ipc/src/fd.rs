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
    // SAFETY: F_GETFD/F_SETFD only read and write the descriptor's flags; an invalid fd yields EBADF.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let wanted = change(flags);
    if wanted != flags {
        // SAFETY: as above.
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
    // SAFETY: the hook runs between fork and exec and only calls fcntl (async-signal-safe); it
    // allocates nothing and takes no locks.
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
    from_inherited_fd(fd).map(Some)
}

/// Takes ownership of the inherited socket `fd` and registers it with tokio (call inside a tokio
/// runtime). `FD_CLOEXEC` is set again so the worker's own children (code interpreter, …) do not
/// inherit it.
///
/// Checks before adopting: `fd` is above stdio (≥ 3), open, a socket of the Unix stream kind, and
/// not already adopted through this function in this process; otherwise an error is returned
/// and `fd` is left untouched.
///
/// Ownership: internally this uses `unsafe` `FromRawFd`, and the returned stream closes `fd` when
/// dropped. The caller must make sure nothing else in the process owns `fd` — true for a
/// descriptor received across exec whose number came from [`IPC_FD_ENV`] and that no other code
/// has wrapped. Double adoption through this function is refused.
pub fn from_inherited_fd(fd: RawFd) -> io::Result<UnixStream> {
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
    // SAFETY: `fd` is open and a Unix stream socket (checked above); per this function's contract
    // nothing else owns it, and the set above prevents adopting it twice through this function.
    let stream = unsafe { StdUnixStream::from_raw_fd(fd) };
    into_tokio(stream)
}

/// Fails unless `fd` is an open `AF_UNIX` `SOCK_STREAM` socket.
fn ensure_unix_stream_socket(fd: RawFd) -> io::Result<()> {
    let not_ipc = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("fd {fd} is {what}"));

    // SAFETY: an all-zero `stat` is a valid value; fstat writes into it or fails with EBADF.
    let mut status: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `status` is a valid, writable `stat`.
    if unsafe { libc::fstat(fd, &mut status) } < 0 {
        return Err(io::Error::last_os_error());
    }
    if status.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(not_ipc("not a socket"));
    }

    let mut socket_type: libc::c_int = 0;
    let mut option_len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: SO_TYPE writes one c_int into `socket_type`; `option_len` holds its size.
    let result = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE, (&raw mut socket_type).cast(), &mut option_len)
    };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    if socket_type != libc::SOCK_STREAM {
        return Err(not_ipc("not a stream socket"));
    }

    // SAFETY: an all-zero `sockaddr_storage` is a valid value.
    let mut address: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut address_len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: getsockname writes at most `address_len` bytes into `address`.
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
        // SAFETY: reading descriptor flags.
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

    #[tokio::test]
    async fn adopting_checks_the_descriptor_and_refuses_twice() {
        let (own_end, child_end) = socketpair().expect("pair");
        let fd = child_end.into_raw_fd();
        clear_cloexec(fd).expect("clear");
        let adopted = from_inherited_fd(fd).expect("adopt");
        assert!(has_cloexec(fd), "adopted fd is close-on-exec again");
        assert_eq!(from_inherited_fd(fd).expect_err("second adoption").kind(), io::ErrorKind::AlreadyExists);

        assert_eq!(from_inherited_fd(1).expect_err("stdout").kind(), io::ErrorKind::InvalidInput);
        assert!(from_inherited_fd(1_000_000_000).is_err(), "not open");

        let file = std::fs::File::open("/proc/self/exe").or_else(|_| std::fs::File::open("/")).expect("some file");
        assert_eq!(from_inherited_fd(file.as_raw_fd()).expect_err("file").kind(), io::ErrorKind::InvalidInput);

        let (datagram, _other) = UnixDatagram::pair().expect("datagram pair");
        assert_eq!(from_inherited_fd(datagram.as_raw_fd()).expect_err("datagram").kind(), io::ErrorKind::InvalidInput);

        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("tcp listener");
        let tcp = std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("tcp connect");
        assert_eq!(from_inherited_fd(tcp.as_raw_fd()).expect_err("tcp").kind(), io::ErrorKind::InvalidInput);
        drop((adopted, own_end));
    }
}
