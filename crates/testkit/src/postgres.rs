//! PostgreSQL for tests: a fresh schema per test on the developer/CI server (127.0.0.1:5432, trust
//! authentication, database `test`; `RESPGW_TEST_POSTGRES_URL` overrides it), dropped afterwards,
//! and a TCP proxy a test can cut to make the database unreachable for a moment.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Context;
use sqlx::{Connection, Executor, PgConnection};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// The server tests use unless `RESPGW_TEST_POSTGRES_URL` says otherwise.
pub const DEFAULT_SERVER_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The PostgreSQL server tests use.
pub fn server_url() -> String {
    std::env::var("RESPGW_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| DEFAULT_SERVER_URL.into())
}

/// A schema of its own for one test, on [`server_url`]; dropped (with everything in it) when this
/// value is dropped, even if the test panicked.
#[derive(Debug)]
pub struct TestSchema {
    name: String,
    server: String,
}

impl TestSchema {
    /// Create a uniquely named empty schema.
    pub async fn create() -> anyhow::Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let name = format!(
            "respgw_test_{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            nanos % 1_000_000_000
        );
        let server = server_url();
        let mut conn = PgConnection::connect(&server).await.with_context(|| {
            format!("cannot reach the test PostgreSQL server ({server}); is it running? (scripts/test starts it)")
        })?;
        conn.execute(format!("CREATE SCHEMA {name}").as_str()).await.context("cannot create a test schema")?;
        conn.close().await.ok();
        Ok(Self { name, server })
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A URL whose connections put this schema first on their `search_path`.
    pub fn url(&self) -> String {
        let mut url = url::Url::parse(&self.server).expect("the test server URL parses");
        url.query_pairs_mut().append_pair("options", &format!("-c search_path={}", self.name));
        url.to_string()
    }

    /// [`TestSchema::url`], but connecting through `addr` (e.g. a [`CutProxy`]).
    pub fn url_via(&self, addr: SocketAddr) -> String {
        let mut url = url::Url::parse(&self.url()).expect("the test server URL parses");
        url.set_host(Some(&addr.ip().to_string())).expect("a URL with a host");
        url.set_port(Some(addr.port())).expect("a URL with a host");
        url.to_string()
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        // Drop may run inside a runtime (or while panicking): use a thread with its own.
        let (name, server) = (self.name.clone(), self.server.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(async {
                let mut conn = PgConnection::connect(&server).await?;
                // A session of the test still holding a lock (the test's runtime is blocked in
                // this drop) must not hang the suite: give up and leave the schema behind.
                conn.execute("SET lock_timeout = '10s'").await?;
                conn.execute(format!("DROP SCHEMA IF EXISTS {name} CASCADE").as_str()).await?;
                conn.close().await?;
                anyhow::Ok(())
            })
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!("could not drop test schema {}: {e:#}", self.name);
        }
    }
}

/// A loopback TCP proxy to one address that a test can cut (every open connection closed, new
/// ones closed right after accept) and restore: what clients see while a database restarts.
pub struct CutProxy {
    addr: SocketAddr,
    state: Arc<ProxyState>,
    accept: AbortHandle,
}

#[derive(Default)]
struct ProxyState {
    cut: AtomicBool,
    connections: Mutex<Vec<AbortHandle>>,
}

impl CutProxy {
    /// Start forwarding a fresh loopback port to `target`.
    pub async fn start(target: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(ProxyState::default());
        let accept_state = Arc::clone(&state);
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if accept_state.cut.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let task = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                let mut connections = accept_state.connections.lock().unwrap_or_else(PoisonError::into_inner);
                connections.retain(|c| !c.is_finished());
                connections.push(task.abort_handle());
            }
        })
        .abort_handle();
        Ok(Self { addr, state, accept })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Close every open connection and refuse new ones until [`CutProxy::restore`].
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
        for connection in self.state.connections.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
            connection.abort();
        }
    }

    /// Forward new connections again.
    pub fn restore(&self) {
        self.state.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
