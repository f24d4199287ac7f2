//! A Redis server of a test's own: `redis-server` on a free loopback port, without persistence,
//! that the test can stop and start again on the same port (a Redis outage and its end).

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// A running (or stopped) `redis-server` child process on one port.
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Start `redis-server` on a free loopback port and wait until it accepts connections.
    pub fn start() -> anyhow::Result<RedisServer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut server = RedisServer { port, child: None };
        server.resume()?;
        Ok(server)
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kill the server (its data is lost: it keeps none on disk).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start the server again on the same port.
    pub fn resume(&mut self) -> anyhow::Result<()> {
        self.stop();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start redis-server")?;
        self.child = Some(child);
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if start.elapsed() > Duration::from_secs(10) {
                bail!("redis-server did not listen on port {} within 10 s", self.port);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
