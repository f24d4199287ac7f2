//! The cheap mock upstream, in its own process: `respgw-bench --serve-mock` (started by
//! [`MockProcess::start`]).
//!
//! Two tests need it rather than the in-process axum mock ([`crate::mock`]):
//!
//! - worker scaling: the machine's cores are shared by respgw, the load generator and the mock,
//!   so the mock must cost as little as possible. It speaks HTTP/1.1 through [`crate::rawhttp`]
//!   and answers `bench-K` with one pre-serialized byte blob (head and whole event stream, with
//!   `content-length`) in a single write, the same frames as the axum mock. Its CPU time is
//!   measured on its own process.
//! - 10,000 held streams: the bench process may not hold 20,000 sockets (open-files hard limit);
//!   here the mock's 10,000 upstream sockets live in this process instead.
//!
//! `hold` works as in the axum mock: role chunk and one delta (chunked encoding), then nothing
//! until released. Control is line-based on stdin/stdout: `holding` answers `holding N`,
//! `release` answers `released`, `arm` (later holds wait again) answers `armed`; end of stdin
//! ends the process.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::watch;

use crate::mock::{self, HOLD_MODEL};
use crate::rawhttp::{Conn, Request, find};

/// How long the mock process may take to print its address.
const START_TIMEOUT: Duration = Duration::from_secs(10);

struct State {
    /// Whole pre-serialized responses per delta count.
    blobs: Mutex<HashMap<usize, Bytes>>,
    models: Bytes,
    release: watch::Sender<bool>,
    hold_limit: Duration,
    holding: AtomicUsize,
}

/// Entry point of `respgw-bench --serve-mock`: serve on `127.0.0.1:0` until stdin closes.
pub fn serve_main(hold_limit: Duration) -> ExitCode {
    let run = || -> anyhow::Result<()> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (release, _) = watch::channel(false);
        let state = Arc::new(State {
            blobs: Mutex::new(HashMap::new()),
            models: response("application/json", &serde_json::to_vec(&mock::models_json()).context("models JSON")?),
            release,
            hold_limit,
            holding: AtomicUsize::new(0),
        });
        // The runtime runs on its own thread; this one reads the control lines.
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        {
            let state = Arc::clone(&state);
            std::thread::spawn(move || {
                let result: anyhow::Result<()> = runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
                    addr_tx.send(listener.local_addr()?)?;
                    loop {
                        match listener.accept().await {
                            Ok((stream, _)) => {
                                tokio::spawn(serve_conn(Conn::new(stream), Arc::clone(&state)));
                            }
                            // Out of file descriptors, typically: say so, wait, go on.
                            Err(e) => {
                                eprintln!("mock upstream: accept failed: {e}");
                                tokio::time::sleep(Duration::from_millis(10)).await;
                            }
                        }
                    }
                });
                if let Err(e) = result {
                    eprintln!("mock upstream: {e:#}");
                    std::process::exit(1);
                }
            });
        }
        let addr = addr_rx.recv().context("the mock's runtime thread failed")?;
        println!("listening on {addr}");
        for line in std::io::stdin().lock().lines() {
            let line = line?;
            let mut out = std::io::stdout().lock();
            match line.trim() {
                "holding" => writeln!(out, "holding {}", state.holding.load(Ordering::Relaxed))?,
                "release" => {
                    state.release.send_replace(true);
                    writeln!(out, "released")?;
                }
                "arm" => {
                    state.release.send_replace(false);
                    writeln!(out, "armed")?;
                }
                other => writeln!(out, "error unknown command {other:?}")?,
            }
            out.flush()?;
        }
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mock upstream: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A whole `200` response with a `content-length` body.
fn response(content_type: &str, body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(body.len() + 128);
    out.extend_from_slice(
        format!("HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n", body.len()).as_bytes(),
    );
    out.extend_from_slice(body);
    out.freeze()
}

/// One chunk of a chunked body.
fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

const NOT_FOUND: &[u8] = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n";
const CHUNKED_SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n";

/// The request's `model`: a substring search for the compact `"model":"…"` (what respgw sends),
/// falling back to a JSON parse.
fn model_of(body: &[u8]) -> String {
    const KEY: &[u8] = br#""model":""#;
    if let Some(i) = find(body, KEY) {
        let rest = &body[i + KEY.len()..];
        if let Some(end) = rest.iter().position(|&b| b == b'"') {
            return String::from_utf8_lossy(&rest[..end]).into_owned();
        }
    }
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["model"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Serve one connection until it closes. I/O errors (the peer went away) end it quietly;
/// anything else is reported.
async fn serve_conn(conn: Conn, state: Arc<State>) {
    if let Err(e) = serve_requests(conn, &state).await
        && e.downcast_ref::<std::io::Error>().is_none()
    {
        eprintln!("mock upstream: {e:#}");
    }
}

async fn serve_requests(mut conn: Conn, state: &State) -> anyhow::Result<()> {
    while let Some(Request { post, path, body }) = conn.read_request().await? {
        if !post && path.ends_with("/models") {
            conn.write_all(&state.models).await?;
        } else if post && path.ends_with("/chat/completions") {
            let model = model_of(&body);
            if model == HOLD_MODEL {
                hold(&mut conn, state).await?;
            } else {
                let deltas = model.strip_prefix("bench-").and_then(|k| k.parse::<usize>().ok()).unwrap_or(1);
                let blob = {
                    let mut blobs = state.blobs.lock().unwrap_or_else(PoisonError::into_inner);
                    blobs
                        .entry(deltas)
                        .or_insert_with(|| {
                            let frames: Vec<u8> = mock::build_frames(&mock::model_for(deltas), deltas).concat();
                            response("text/event-stream; charset=utf-8", &frames)
                        })
                        .clone()
                };
                conn.write_all(&blob).await?;
            }
        } else {
            conn.write_all(NOT_FOUND).await?;
        }
    }
    Ok(())
}

/// A `hold` reply: head frames now, the rest after the release (or the hold limit).
async fn hold(conn: &mut Conn, state: &State) -> anyhow::Result<()> {
    let [first, rest] = mock::held_frames();
    let mut head = CHUNKED_SSE_HEAD.to_vec();
    head.extend_from_slice(&chunk(&first));
    let mut release = state.release.subscribe();
    conn.write_all(&head).await?;
    state.holding.fetch_add(1, Ordering::Relaxed);
    let _ = tokio::time::timeout(state.hold_limit, release.wait_for(|released| *released)).await;
    state.holding.fetch_sub(1, Ordering::Relaxed);
    let mut tail = chunk(&rest);
    tail.extend_from_slice(b"0\r\n\r\n");
    conn.write_all(&tail).await?;
    Ok(())
}

/// The mock process, seen from the bench. Killed when dropped.
pub struct MockProcess {
    child: Child,
    pid: u32,
    addr: SocketAddr,
    control: tokio::sync::Mutex<(ChildStdin, Lines<BufReader<ChildStdout>>)>,
}

impl MockProcess {
    /// Start `<this executable> --serve-mock` and wait for its address.
    pub async fn start(hold_limit: Duration) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("cannot find the respgw-bench executable")?;
        let mut child = Command::new(exe)
            .arg("--serve-mock")
            .arg("--open-timeout")
            .arg(hold_limit.as_secs().max(1).to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start the mock upstream process")?;
        let pid = child.id().context("the mock upstream process exited at once")?;
        let stdin = child.stdin.take().context("mock stdin is not piped")?;
        let mut lines = BufReader::new(child.stdout.take().context("mock stdout is not piped")?).lines();
        let line = tokio::time::timeout(START_TIMEOUT, lines.next_line())
            .await
            .context("the mock upstream process did not start in time")??
            .context("the mock upstream process exited before listening")?;
        let addr = line
            .strip_prefix("listening on ")
            .and_then(|a| a.parse().ok())
            .with_context(|| format!("unexpected first line from the mock upstream: {line:?}"))?;
        Ok(MockProcess { child, pid, addr, control: tokio::sync::Mutex::new((stdin, lines)) })
    }

    /// Base URL including `/v1`, as respgw's `--upstream` wants it.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Send one control line and return the answer.
    async fn command(&self, command: &str) -> anyhow::Result<String> {
        let mut control = self.control.lock().await;
        let (stdin, lines) = &mut *control;
        stdin.write_all(format!("{command}\n").as_bytes()).await.context("the mock upstream process is gone")?;
        stdin.flush().await?;
        let answer = tokio::time::timeout(START_TIMEOUT, lines.next_line())
            .await
            .context("the mock upstream process did not answer")??
            .context("the mock upstream process is gone")?;
        if answer.starts_with("error") {
            bail!("mock upstream: {answer}");
        }
        Ok(answer)
    }

    /// Stop it (closing its stdin ends it) and reap it.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        drop(self.control);
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await.is_err() {
            self.child.start_kill().ok();
            self.child.wait().await?;
        }
        Ok(())
    }
}

impl crate::measure::HeldStreams for MockProcess {
    async fn holding(&self) -> anyhow::Result<usize> {
        let answer = self.command("holding").await?;
        answer
            .strip_prefix("holding ")
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("unexpected answer from the mock upstream: {answer:?}"))
    }

    async fn release(&self) -> anyhow::Result<()> {
        self.command("release").await.map(drop)
    }

    async fn arm(&self) -> anyhow::Result<()> {
        self.command("arm").await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::model_of;

    #[test]
    fn finds_the_model() {
        assert_eq!(model_of(br#"{"model":"bench-16","messages":[]}"#), "bench-16");
        assert_eq!(model_of(br#"{ "model" : "hold" }"#), "hold");
        assert_eq!(model_of(b"{}"), "");
    }
}
