//! `respgw integrated`: respgw owns the model server's public port. The model server runs as a
//! supervised child on a private loopback port (its command line's `{port}` is replaced by that
//! port); the workers serve the Responses routes and forward every other request to it
//! unchanged. When the model server exits, respgw drains and exits with its code; when respgw is
//! told to stop, it drains its workers first, then stops the model server.

use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use respgw_server::GatewayOptions;
use std::sync::{Arc, Mutex};

use respgw_telemetry::MergedMetrics;
use tokio::sync::watch;

use crate::pool::{self, PoolConfig, PoolStop};
use crate::sockets::PublicSockets;

/// Everything `respgw integrated` needs.
pub struct IntegratedOptions {
    pub host: String,
    pub port: u16,
    pub workers: usize,
    /// Gateway settings; the upstream and forwarding addresses are filled in here.
    pub gateway: GatewayOptions,
    /// The model server's command line; `{port}` stands for its private port.
    pub model_command: Vec<String>,
    /// How long the model server may take to answer `GET /v1/models` (loading weights is slow).
    pub model_ready_timeout: Duration,
    /// The Built-in MCP helper, if any.
    pub mcp: crate::McpSetup,
}

/// How long the model server gets to stop after SIGTERM before it is killed.
const MODEL_STOP_GRACE: Duration = Duration::from_secs(30);

/// Run integrated mode to the end; the result is the process exit code.
pub fn run(mut options: IntegratedOptions) -> anyhow::Result<i32> {
    crate::open_files::raise_to_hard_limit();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        if !options.model_command.iter().any(|a| a.contains("{port}")) {
            bail!("the model server command must contain '{{port}}' where its listening port goes");
        }
        let private_port = crate::free_loopback_port()?;
        let args: Vec<String> =
            options.model_command.iter().map(|a| a.replace("{port}", &private_port.to_string())).collect();
        let child_base = format!("http://127.0.0.1:{private_port}");
        let (model_pid, mut model_exit) = spawn_model_server(&args)?;

        wait_for_model_server(&child_base, options.model_ready_timeout, &mut model_exit).await?;
        options.gateway.upstream.base_url = format!("{child_base}/v1");
        options.gateway.forward_other_routes_to = Some(child_base);
        crate::check_store(&options.gateway).await?;
        // Held until the workers have stopped; dropping it deletes this run's containers.
        let _containers = crate::check_code_interpreter(&mut options.gateway).await;
        let merged = Arc::new(Mutex::new(MergedMetrics::new()));
        let helper = match crate::mcp_helper_process::start(&options.mcp, Arc::clone(&merged)).await {
            Ok(helper) => helper,
            Err(e) => {
                stop_model_server(model_pid, &mut model_exit).await;
                return Err(e);
            }
        };
        options.gateway.mcp_helper_url = helper.as_ref().map(|h| h.url.clone());
        let sockets = PublicSockets::open(&options.host, options.port, options.workers)?;
        crate::log_auth(&options.gateway);
        let config = PoolConfig::new(&options.gateway, options.workers, sockets, merged)?;
        let mut exit_watch = model_exit.clone();
        let model_exited = async move {
            loop {
                if let Some(code) = *exit_watch.borrow() {
                    return code;
                }
                if exit_watch.changed().await.is_err() {
                    return 1;
                }
            }
        };
        let stop = pool::run(
            config,
            |address| {
                tracing::info!(%address, "respgw integrated serving");
                println!("listening on http://{address}");
            },
            model_exited,
        )
        .await;
        if let Some(helper) = helper {
            helper.stop().await;
        }
        match stop {
            Ok(PoolStop::External(code)) => {
                tracing::error!(code, "the model server exited; respgw exits with its code");
                Ok(code)
            }
            Ok(PoolStop::Signal) => {
                stop_model_server(model_pid, &mut model_exit).await;
                Ok(0)
            }
            Err(e) => {
                stop_model_server(model_pid, &mut model_exit).await;
                Err(e)
            }
        }
    })
}

/// Start the model server in its own process group (so a terminal's Ctrl-C reaches respgw, which
/// then stops it in order). Its exit code arrives on the returned watch.
fn spawn_model_server(args: &[String]) -> anyhow::Result<(u32, watch::Receiver<Option<i32>>)> {
    let (program, rest) = args.split_first().context("no model server command given after `--`")?;
    let mut command = std::process::Command::new(program);
    // respgw's stdout carries one line, its own `listening on …`; the model server logs to stderr.
    let stderr = std::io::stderr().as_fd().try_clone_to_owned().context("cannot duplicate stderr")?;
    command.args(rest).stdin(std::process::Stdio::null()).stdout(stderr).process_group(0);
    // SAFETY: the hook runs in the forked child between fork and exec, where only async-signal-safe
    // calls are allowed: it makes one prctl(2) system call and builds its error from errno, without
    // allocating, locking or touching memory shared with other threads.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = tokio::process::Command::from(command)
        .spawn()
        .with_context(|| format!("cannot start the model server '{program}'"))?;
    let pid = child.id().unwrap_or_default();
    tracing::info!(pid, command = %args.join(" "), "model server started");
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let code = match child.wait().await {
            Ok(status) => exit_code(status),
            Err(e) => {
                tracing::error!(error = %e, "cannot wait for the model server");
                1
            }
        };
        let _ = tx.send(Some(code));
    });
    Ok((pid, rx))
}

/// The shell's convention: the exit code, or 128 + the signal that ended the process.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(1)
}

async fn wait_for_model_server(
    base: &str,
    timeout: Duration,
    model_exit: &mut watch::Receiver<Option<i32>>,
) -> anyhow::Result<()> {
    let url = format!("{base}/v1/models");
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
    let started = Instant::now();
    let mut last_log = started;
    loop {
        if let Some(code) = *model_exit.borrow() {
            bail!("the model server exited with code {code} before it was ready");
        }
        if let Ok(response) = client.get(&url).send().await
            && response.status().is_success()
        {
            tracing::info!(waited_s = started.elapsed().as_secs_f64(), "model server is ready");
            return Ok(());
        }
        if started.elapsed() >= timeout {
            bail!("the model server did not answer {url} within {} s", timeout.as_secs());
        }
        if last_log.elapsed() >= Duration::from_secs(10) {
            tracing::info!(waited_s = started.elapsed().as_secs(), "waiting for the model server");
            last_log = Instant::now();
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = model_exit.changed() => {}
        }
    }
}

async fn stop_model_server(pid: u32, model_exit: &mut watch::Receiver<Option<i32>>) {
    if model_exit.borrow().is_some() {
        return;
    }
    tracing::info!(pid, "stopping the model server");
    // The model server leads its own process group (`process_group(0)`): signal all of it.
    let group = Pid::from_raw(pid as libc::pid_t);
    let _ = killpg(group, Signal::SIGTERM);
    let exited = tokio::time::timeout(MODEL_STOP_GRACE, async {
        while model_exit.borrow().is_none() {
            if model_exit.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
    if exited.is_err() {
        tracing::warn!(pid, "the model server did not stop in time; killing it");
        let _ = killpg(group, Signal::SIGKILL);
    }
}
