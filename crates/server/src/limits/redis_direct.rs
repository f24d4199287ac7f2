//! The admissions' direct connection to Redis: an admission that finds it idle makes its call on
//! it from its own task — the packed `EVALSHA` written, the reply read — and gives it back once
//! the reply is whole; admissions that find it busy go through redis-rs's multiplexed connection.
//!
//! Why both: redis-rs's multiplexed connection hands every call to a driver task and the reply
//! back through a channel, which costs a lone admission more CPU than the call itself; but when
//! several admissions are in flight at once it writes their commands in one go and reads their
//! replies in one go, which a connection per call cannot. `scripts/bench --limits` measured the
//! direct call cheaper one request at a time and redis-rs cheaper eight at a time; a lone
//! admission always finds the direct connection idle, concurrent ones mostly do not.
//! redis-rs's reply parser has no async entry that does not take combine's decoder types, and
//! the replies read here are of the admission script's one shape — an array of integers, or an
//! error line — so the reader here is written for that shape; redis-rs still packs the commands.
//!
//! The connection is opened in the background when an admission finds none (no admission waits
//! for a connect); a failed connect waits [`RECONNECT_PAUSE`] before the next try. A connection
//! whose call fails, times out or is abandoned midway is closed, never given back.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

/// The wait after a failed connect before the next.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);
/// A connect, with its `AUTH` and `SELECT`, may take this long.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// A byte stream to Redis: TCP or a Unix socket.
trait Wire: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Wire for T {}

/// The connection, its reply buffer, and the flag saying it exists (cleared when it is closed).
pub struct Connection {
    wire: BufReader<Pin<Box<dyn Wire>>>,
    line: Vec<u8>,
    exists: Arc<AtomicBool>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.exists.store(false, Ordering::Release);
    }
}

/// What Redis answered a call.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    Integers(Vec<i64>),
    /// An error reply (`-NOSCRIPT …`, `-ERR …`), without its `-`.
    Error(String),
}

/// Why a call failed: the connection is then closed.
#[derive(Debug)]
pub struct Broken(pub String);

/// The direct connection to one Redis: idle, in use by an admission, being opened, or none.
pub struct DirectConnection {
    info: ConnectionInfo,
    idle: Mutex<Option<Connection>>,
    /// Whether the connection is open (idle or in use).
    exists: Arc<AtomicBool>,
    connecting: AtomicBool,
}

impl DirectConnection {
    /// The direct connection to `info`; `None` for an address it cannot open (TLS).
    pub fn new(info: ConnectionInfo) -> Option<Arc<DirectConnection>> {
        if !matches!(info.addr(), ConnectionAddr::Tcp(..) | ConnectionAddr::Unix(_)) {
            return None;
        }
        Some(Arc::new(DirectConnection {
            info,
            idle: Mutex::new(None),
            exists: Arc::new(AtomicBool::new(false)),
            connecting: AtomicBool::new(false),
        }))
    }

    /// The connection when it is idle; else `None` — and when there is none, it is opened in
    /// the background (unless it is being opened).
    pub fn take(self: &Arc<Self>) -> Option<Connection> {
        if let Some(connection) = self.idle.lock().unwrap_or_else(PoisonError::into_inner).take() {
            return Some(connection);
        }
        if !self.exists.load(Ordering::Acquire)
            && !self.connecting.swap(true, Ordering::AcqRel)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(Arc::clone(self).open());
        }
        None
    }

    /// Give the connection back after a call answered whole.
    pub fn give_back(&self, connection: Connection) {
        *self.idle.lock().unwrap_or_else(PoisonError::into_inner) = Some(connection);
    }

    /// Open the connection; after a failure, pause before the next try may start.
    async fn open(self: Arc<Self>) {
        match tokio::time::timeout(CONNECT_TIMEOUT, self.connect()).await {
            Ok(Ok(connection)) => self.give_back(connection),
            failed => {
                let why = match failed {
                    Ok(Err(Broken(why))) => why,
                    _ => format!("no connection within {} ms", CONNECT_TIMEOUT.as_millis()),
                };
                tracing::debug!(error = why, "a direct connection to Redis could not be opened");
                tokio::time::sleep(RECONNECT_PAUSE).await;
            }
        }
        self.connecting.store(false, Ordering::Release);
    }

    /// Connect, authenticate and select the database as the URL says.
    async fn connect(&self) -> Result<Connection, Broken> {
        let broken = |e: std::io::Error| Broken(e.to_string());
        let wire: Pin<Box<dyn Wire>> = match self.info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                let stream = tokio::net::TcpStream::connect((host.as_str(), *port)).await.map_err(broken)?;
                stream.set_nodelay(true).map_err(broken)?;
                Box::pin(stream)
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => Box::pin(tokio::net::UnixStream::connect(path).await.map_err(broken)?),
            _ => return Err(Broken("only TCP and Unix-socket addresses are opened directly".into())),
        };
        self.exists.store(true, Ordering::Release);
        let mut connection =
            Connection { wire: BufReader::new(wire), line: Vec::with_capacity(64), exists: Arc::clone(&self.exists) };
        let settings = self.info.redis_settings();
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(username) = settings.username() {
                auth.arg(username);
            }
            connection.expect_ok(&auth.arg(password).get_packed_command()).await?;
        }
        if settings.db() != 0 {
            connection.expect_ok(&redis::cmd("SELECT").arg(settings.db()).get_packed_command()).await?;
        }
        Ok(connection)
    }
}

impl Connection {
    /// Send one packed command and read its reply.
    pub async fn call(&mut self, command: &[u8]) -> Result<Reply, Broken> {
        self.wire.get_mut().write_all(command).await.map_err(|e| Broken(e.to_string()))?;
        self.read_reply().await
    }

    /// A command that must answer `+OK`.
    async fn expect_ok(&mut self, command: &[u8]) -> Result<(), Broken> {
        self.wire.get_mut().write_all(command).await.map_err(|e| Broken(e.to_string()))?;
        match self.read_line().await? {
            b"+OK" => Ok(()),
            [b'-', error @ ..] => Err(Broken(String::from_utf8_lossy(error).into_owned())),
            other => Err(Broken(format!("unexpected reply {:?}", String::from_utf8_lossy(other)))),
        }
    }

    /// One reply: an array of integers or an error.
    async fn read_reply(&mut self) -> Result<Reply, Broken> {
        let header = self.read_line().await?;
        let count = match header {
            [b'-', error @ ..] => return Ok(Reply::Error(String::from_utf8_lossy(error).into_owned())),
            [b'*', count @ ..] => number(count)?,
            other => return Err(Broken(format!("unexpected reply {:?}", String::from_utf8_lossy(other)))),
        };
        let count = usize::try_from(count).map_err(|_| Broken(format!("an array of {count} elements")))?;
        let mut values = Vec::with_capacity(count);
        for _ in 0..count {
            match self.read_line().await? {
                [b':', value @ ..] => values.push(number(value)?),
                other => return Err(Broken(format!("unexpected element {:?}", String::from_utf8_lossy(other)))),
            }
        }
        Ok(Reply::Integers(values))
    }

    /// The next line, without its `\r\n`.
    async fn read_line(&mut self) -> Result<&[u8], Broken> {
        self.line.clear();
        let read = self.wire.read_until(b'\n', &mut self.line).await.map_err(|e| Broken(e.to_string()))?;
        match self.line.strip_suffix(b"\r\n") {
            Some(line) if read > 0 => Ok(line),
            _ => Err(Broken("the connection closed mid-reply".into())),
        }
    }
}

/// An integer of a reply line.
fn number(digits: &[u8]) -> Result<i64, Broken> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| Broken(format!("{:?} is not an integer", String::from_utf8_lossy(digits))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection whose Redis answers `replies`, all at once, then closes (the calls of these
    /// tests send nothing).
    fn answering(replies: &[u8]) -> Connection {
        let (ours, mut theirs) = tokio::io::duplex(4096);
        let replies = replies.to_vec();
        tokio::spawn(async move {
            let _ = theirs.write_all(&replies).await;
        });
        let wire: Pin<Box<dyn Wire>> = Box::pin(ours);
        Connection { wire: BufReader::new(wire), line: Vec::new(), exists: Arc::new(AtomicBool::new(true)) }
    }

    #[tokio::test]
    async fn an_array_of_integers_is_read_whole_and_the_next_reply_after_it() {
        let mut connection = answering(b"*3\r\n:0\r\n:-5\r\n:1200\r\n*0\r\n-NOSCRIPT No matching script\r\n");
        assert_eq!(connection.call(b"").await.unwrap(), Reply::Integers(vec![0, -5, 1200]));
        assert_eq!(connection.call(b"").await.unwrap(), Reply::Integers(vec![]));
        assert_eq!(connection.call(b"").await.unwrap(), Reply::Error("NOSCRIPT No matching script".into()));
    }

    #[tokio::test]
    async fn any_other_shape_breaks_the_connection() {
        for reply in [&b"+OK\r\n"[..], b"*2\r\n:1\r\n$1\r\nx\r\n", b"*1\r\n:one\r\n", b"*2\r\n:1\r\n", b"*1\r\n:1"] {
            let mut connection = answering(reply);
            let answer = connection.call(b"").await;
            assert!(answer.is_err(), "{:?} gave {answer:?}", String::from_utf8_lossy(reply));
        }
    }

    #[tokio::test]
    async fn the_connection_is_handed_out_once_until_given_back() {
        let info = redis::Client::open("redis://127.0.0.1:1/").unwrap().get_connection_info().clone();
        let direct = DirectConnection::new(info.clone()).unwrap();
        let mut connection = answering(b"");
        connection.exists = Arc::clone(&direct.exists);
        direct.exists.store(true, Ordering::Release);
        direct.give_back(connection);
        let taken = direct.take().expect("idle");
        assert!(direct.take().is_none(), "in use");
        drop(taken);
        assert!(!direct.exists.load(Ordering::Acquire), "a dropped connection is closed");
        let tls = ConnectionAddr::TcpTls { host: "h".into(), port: 1, insecure: false, tls_params: None };
        assert!(DirectConnection::new(info.set_addr(tls)).is_none(), "TLS goes through redis-rs");
    }
}
