//! [`GatewayProcess`]: runs the real `respgw` binary as a child process for end-to-end tests,
//! plus small HTTP client helpers ([`http_client`], [`post_json`], [`post_sse`]).
//!
//! The gateway is started with `--gateway-port 0`; it binds a free port and prints exactly one
//! line `listening on http://127.0.0.1:PORT` on stdout when ready (logs go to stderr). The harness
//! waits for that line, then keeps draining both pipes in background threads so the child never
//! blocks on a full pipe, and kills the child when dropped.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::header::HeaderMap;
use serde_json::Value;
use tempfile::TempDir;
use tokio::sync::oneshot;

/// How long the gateway may take to print its `listening on` line.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The stdout line prefix announcing readiness.
const LISTENING_PREFIX: &str = "listening on ";

/// A running gateway child process. Killed (and reaped) on drop.
pub struct GatewayProcess {
    child: Child,
    base_url: String,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    workdir: PathBuf,
    /// The per-gateway temporary working directory, deleted after the child is killed.
    _owned_workdir: Option<TempDir>,
}

impl GatewayProcess {
    /// Starts `bin` with `args` (e.g. `["serve", "--upstream", url, "--gateway-host", "127.0.0.1",
    /// "--gateway-port", "0"]`) and extra environment `envs`, in a fresh temporary working directory
    /// (so a default SQLite file lands there), and waits until it prints its `listening on` line.
    pub async fn spawn(bin: &Path, args: &[String], envs: &[(String, String)]) -> anyhow::Result<GatewayProcess> {
        let workdir = tempfile::tempdir().context("creating the gateway working directory")?;
        let mut gateway = Self::start(bin, args, envs, workdir.path()).await?;
        gateway._owned_workdir = Some(workdir);
        Ok(gateway)
    }

    /// Like [`GatewayProcess::spawn`], with `dir` as working directory (the caller owns it, e.g. to
    /// restart a gateway on the same database).
    pub async fn spawn_in(
        dir: &Path,
        bin: &Path,
        args: &[String],
        envs: &[(String, String)],
    ) -> anyhow::Result<GatewayProcess> {
        Self::start(bin, args, envs, dir).await
    }

    async fn start(
        bin: &Path,
        args: &[String],
        envs: &[(String, String)],
        workdir: &Path,
    ) -> anyhow::Result<GatewayProcess> {
        let mut child = Command::new(bin)
            .args(args)
            .envs(envs.iter().map(|(key, value)| (key, value)))
            .current_dir(workdir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let (ready_sender, ready) = oneshot::channel();
        drain_lines(child.stdout.take().context("child stdout")?, stdout.clone(), Some(ready_sender));
        let stderr_drained = drain_lines(child.stderr.take().context("child stderr")?, stderr.clone(), None);
        let mut gateway = GatewayProcess {
            child,
            base_url: String::new(),
            stdout,
            stderr,
            workdir: workdir.to_owned(),
            _owned_workdir: None,
        };
        match tokio::time::timeout(STARTUP_TIMEOUT, ready).await {
            Ok(Ok(base_url)) => {
                gateway.base_url = base_url;
                Ok(gateway)
            }
            Ok(Err(_stdout_closed)) => {
                // Let the child finish and its last stderr lines be read (the pipe ends with it).
                let status = wait_for_exit(&mut gateway.child, Duration::from_secs(2)).await;
                let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
                while !stderr_drained.is_finished() && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                bail!(
                    "{} exited before printing `listening on` (status: {status}); stdout:\n{}\nstderr:\n{}",
                    bin.display(),
                    gateway.stdout_text(),
                    gateway.stderr_text()
                )
            }
            Err(_elapsed) => {
                gateway.kill();
                bail!(
                    "{} did not print `listening on` within {STARTUP_TIMEOUT:?}; stdout:\n{}\nstderr:\n{}",
                    bin.display(),
                    gateway.stdout_text(),
                    gateway.stderr_text()
                )
            }
        }
    }

    /// The gateway's base URL, `http://127.0.0.1:PORT` (no trailing slash, no `/v1`).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The child's working directory (where its default SQLite file lands).
    pub fn workdir(&self) -> &Path {
        &self.workdir
    }

    /// Everything the child wrote to stderr so far (its logs), for diagnostics.
    pub fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Everything the child wrote to stdout so far.
    pub fn stdout_text(&self) -> String {
        self.stdout.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Kills the child and waits for it to exit. Does nothing if it already exited.
    pub fn kill(&mut self) {
        // Errors mean the child is already gone, which is the goal.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Copies `pipe` line by line into `buffer` on a background thread. If `ready` is given, the URL of
/// the first `listening on URL` line is sent to it.
fn drain_lines(
    pipe: impl Read + Send + 'static,
    buffer: Arc<Mutex<String>>,
    mut ready: Option<oneshot::Sender<String>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(pipe);
        let mut line = String::new();
        // Stops at end of file or on a read error (the child is gone either way).
        while reader.read_line(&mut line).is_ok_and(|read| read > 0) {
            if let Some(url) = line.trim_end().strip_prefix(LISTENING_PREFIX)
                && let Some(sender) = ready.take()
            {
                // The receiver may have given up (timeout); nothing to do then.
                let _ = sender.send(url.to_owned());
            }
            buffer.lock().unwrap_or_else(PoisonError::into_inner).push_str(&line);
            line.clear();
        }
    })
}

/// Waits up to `timeout` for `child` to exit and describes its status.
async fn wait_for_exit(child: &mut Child, timeout: Duration) -> String {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.to_string(),
            Ok(None) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(None) => return "still running".to_owned(),
            Err(error) => return format!("unknown ({error})"),
        }
    }
}

/// Overall per-request timeout of [`http_client`], so a stuck test fails instead of hanging.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// A shared reqwest client for plain-HTTP loopback calls (no proxy, [`CLIENT_TIMEOUT`]).
///
/// The workspace builds reqwest with `rustls-no-provider`, and reqwest refuses to build a client
/// without a process-wide rustls crypto provider even for plain HTTP; this installs the `ring`
/// provider first if none is installed. Tests that build their own clients should call this once
/// (or install a provider themselves) before.
pub fn http_client() -> reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            // Fails only if a provider is already installed, which is fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
            reqwest::Client::builder()
                .no_proxy()
                .timeout(CLIENT_TIMEOUT)
                .build()
                .expect("building the test HTTP client")
        })
        .clone()
}

/// POSTs `body` as JSON to `url` and returns the status, the headers and the JSON reply
/// (`Null` for an empty body; an error if the body is not JSON, quoting it).
pub async fn post_json(url: &str, body: &Value) -> anyhow::Result<(u16, HeaderMap, Value)> {
    let response = http_client().post(url).json(body).send().await.with_context(|| format!("POST {url}"))?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.with_context(|| format!("reading the reply of POST {url}"))?;
    if text.is_empty() {
        return Ok((status, headers, Value::Null));
    }
    let json =
        serde_json::from_str(&text).with_context(|| format!("POST {url} answered {status} with non-JSON: {text}"))?;
    Ok((status, headers, json))
}

/// POSTs `body` as JSON to `url` (set `"stream": true` in it yourself) and returns the status and
/// the whole reply text, read to the end.
pub async fn post_sse(url: &str, body: &Value) -> anyhow::Result<(u16, String)> {
    let response = http_client()
        .post(url)
        .header("accept", "text/event-stream")
        .json(body)
        .send()
        .await
        .with_context(|| format!("POST {url}"))?;
    let status = response.status().as_u16();
    let text = response.text().await.with_context(|| format!("reading the stream of POST {url}"))?;
    Ok((status, text))
}
