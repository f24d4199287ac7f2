//! The public listening sockets and their trip into worker processes.
//!
//! Standalone mode binds one `SO_REUSEPORT` socket per worker slot, so the kernel spreads new
//! connections over the workers. The supervisor keeps every socket open for its whole life: a
//! worker that dies or is replaced leaves its socket (and the connections queued on it) to its
//! successor, so no connection is refused. Under systemd socket activation (`LISTEN_FDS`) the
//! given socket is shared by all slots instead.

use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;

use anyhow::{Context, bail};
use socket2::{Domain, Protocol, Socket, Type};

/// Environment variable carrying the listening socket's fd number into a worker.
pub const LISTEN_FD_ENV: &str = "RESPGW_LISTEN_FD";

/// First fd systemd passes (`SD_LISTEN_FDS_START`).
const SD_LISTEN_FDS_START: RawFd = 3;

/// The listening sockets, one per worker slot (possibly the same socket repeated).
pub struct PublicSockets {
    sockets: Vec<std::sync::Arc<OwnedFd>>,
    address: SocketAddr,
}

impl PublicSockets {
    /// Use systemd's sockets when this process was socket-activated, else bind `host:port`.
    pub fn open(host: &str, port: u16, slots: usize) -> anyhow::Result<PublicSockets> {
        match from_systemd(slots)? {
            Some(sockets) => Ok(sockets),
            None => Self::bind(host, port, slots),
        }
    }

    /// Bind `slots` `SO_REUSEPORT` sockets to `host:port`; port 0 picks one free port for all.
    pub fn bind(host: &str, port: u16, slots: usize) -> anyhow::Result<PublicSockets> {
        let mut address = (host, port)
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve --gateway-host '{host}'"))?
            .next()
            .with_context(|| format!("'{host}' resolves to no address"))?;
        let mut sockets = Vec::with_capacity(slots);
        for _ in 0..slots.max(1) {
            let socket = reuseport_listener(address).with_context(|| format!("cannot listen on {address}"))?;
            if address.port() == 0 {
                address = socket.local_addr()?.as_socket().context("listener has no IP address")?;
            }
            sockets.push(std::sync::Arc::new(OwnedFd::from(socket)));
        }
        Ok(PublicSockets { sockets, address })
    }

    /// The address clients connect to.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The socket of a worker slot.
    pub fn for_slot(&self, slot: usize) -> std::sync::Arc<OwnedFd> {
        std::sync::Arc::clone(&self.sockets[slot % self.sockets.len()])
    }
}

fn reuseport_listener(address: SocketAddr) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(address), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_cloexec(true)?;
    socket.bind(&address.into())?;
    socket.listen(1024)?;
    Ok(socket)
}

/// The socket systemd passed (`LISTEN_PID` is us, `LISTEN_FDS` ≥ 1), shared by every slot.
fn from_systemd(slots: usize) -> anyhow::Result<Option<PublicSockets>> {
    let pid_matches = std::env::var("LISTEN_PID").ok().and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id());
    let count = std::env::var("LISTEN_FDS").ok().and_then(|n| n.parse::<i32>().ok()).unwrap_or(0);
    if !pid_matches || count < 1 {
        return Ok(None);
    }
    if count > 1 {
        tracing::warn!(count, "systemd passed several sockets; serving on the first one");
    }
    // SAFETY: `LISTEN_PID` is this process and `LISTEN_FDS` ≥ 1, so by the socket-activation
    // protocol systemd passed fd 3 (`SD_LISTEN_FDS_START`) open across exec for this process to
    // own: no file opened since can have received that number, and the supervisor opens its
    // sockets once, so nothing else wraps it.
    let fd = unsafe { OwnedFd::from_raw_fd(SD_LISTEN_FDS_START) };
    let socket = Socket::from(fd);
    if socket.r#type()? != Type::STREAM {
        bail!("the socket systemd passed is not a stream socket");
    }
    socket.set_cloexec(true)?;
    let address = socket.local_addr()?.as_socket().context("the socket systemd passed is not a TCP socket")?;
    let shared = std::sync::Arc::new(OwnedFd::from(socket));
    tracing::info!(%address, "using the socket passed by systemd");
    Ok(Some(PublicSockets { sockets: vec![shared; slots.max(1)], address }))
}

/// Let the child spawned from `command` inherit `socket` as the fd named by [`LISTEN_FD_ENV`].
/// Close-on-exec is cleared in the forked child only, so no other child inherits it.
pub fn inherit_listener(command: &mut std::process::Command, socket: &OwnedFd) {
    let fd = socket.as_raw_fd();
    command.env(LISTEN_FD_ENV, fd.to_string());
    // SAFETY: the hook runs in the forked child between fork and exec, where only async-signal-safe
    // calls are allowed: `clear_cloexec` makes at most two fcntl(2) system calls, builds its error
    // from errno and allocates nothing.
    unsafe {
        command.pre_exec(move || respgw_ipc::clear_cloexec(fd));
    }
}

/// In a worker: adopt the listening socket named by [`LISTEN_FD_ENV`].
pub fn inherited_listener() -> anyhow::Result<TcpListener> {
    let raw = std::env::var(LISTEN_FD_ENV).with_context(|| format!("{LISTEN_FD_ENV} is not set"))?;
    let fd: RawFd = raw.trim().parse().with_context(|| format!("{LISTEN_FD_ENV}='{raw}' is not an fd number"))?;
    if fd <= libc::STDERR_FILENO {
        bail!("{LISTEN_FD_ENV}={fd} names a standard stream, not a socket");
    }
    // SAFETY: the supervisor set `LISTEN_FD_ENV` to the number of the socket it left open across
    // this worker's exec (`inherit_listener`), so no file opened since can have received that
    // number; this function is the only code that wraps it, and the worker calls it once, at
    // start-up. The socket is owned from here on and closed when the listener is dropped.
    let socket = unsafe { Socket::from_raw_fd(fd) };
    if socket.r#type()? != Type::STREAM {
        bail!("{LISTEN_FD_ENV}={fd} is not a stream socket");
    }
    socket.set_cloexec(true)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_share_one_port_and_each_accepts() {
        let sockets = PublicSockets::bind("127.0.0.1", 0, 3).unwrap();
        let address = sockets.address();
        assert_ne!(address.port(), 0);
        for slot in 0..3 {
            let fd = sockets.for_slot(slot);
            let socket = Socket::from(fd.try_clone().unwrap());
            let local = socket.local_addr().unwrap().as_socket().unwrap();
            assert_eq!(local, address);
        }
        // A client can connect while nobody accepts yet: the backlog holds it.
        std::net::TcpStream::connect(address).unwrap();
    }
}
