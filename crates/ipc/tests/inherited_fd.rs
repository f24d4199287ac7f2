//! The socket's trip across exec: this test binary re-runs itself as a child that adopts its end
//! through `RESPGW_IPC_FD`, like a re-exec'd worker does.
//!
//! With `RESPGW_IPC_TEST_CHILD=1` the test `child_role_announces_ready_and_echoes_scrapes` plays the
//! worker; in a normal run it returns at once.

use std::process::{Command, Stdio};
use std::time::Duration;

use respgw_ipc::{Frame, inherit_in_child, inherited_from_env, into_frame_halves, into_tokio, socketpair};
use respgw_telemetry::{Metrics, MetricsSnapshot};
use tokio::time::timeout;

const CHILD_ENV: &str = "RESPGW_IPC_TEST_CHILD";
const CHILD_TEST: &str = "child_role_announces_ready_and_echoes_scrapes";
const PATIENCE: Duration = Duration::from_secs(30);

fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some_and(|value| value == "1")
}

fn reply_snapshot() -> MetricsSnapshot {
    let metrics = Metrics::new();
    metrics.record_request("GET", "/v1/responses/{response_id}", 200, Duration::from_millis(1));
    metrics.snapshot()
}

/// The child side: adopt the inherited fd, send Ready, answer scrapes until Shutdown.
#[tokio::test]
async fn child_role_announces_ready_and_echoes_scrapes() {
    if !is_child() {
        return;
    }
    let stream = inherited_from_env().expect("adopt inherited fd").expect("RESPGW_IPC_FD is set");
    let (mut reader, mut writer) = into_frame_halves(stream);
    writer.write_frame(&Frame::Ready { pid: std::process::id() }).await.expect("send ready");
    loop {
        match reader.read_frame().await.expect("read") {
            Some(Frame::ScrapeRequest { id }) => {
                writer.write_frame(&Frame::ScrapeReply { id, snapshot: reply_snapshot() }).await.expect("reply");
            }
            Some(Frame::Shutdown) | None => break,
            Some(other) => panic!("child got unexpected frame {other:?}"),
        }
    }
}

/// The parent side: pass one end to a child process and talk to it.
#[tokio::test]
async fn fd_passed_to_child_process_carries_frames() {
    if is_child() {
        return;
    }
    let (parent_end, child_end) = socketpair().expect("socketpair");
    let mut command = Command::new(std::env::current_exe().expect("current test binary"));
    command
        .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    inherit_in_child(&mut command, &child_end);
    let child = tokio::process::Command::from(command).kill_on_drop(true).spawn().expect("spawn child");
    drop(child_end);
    let child_pid = child.id().expect("child pid");

    let (mut reader, mut writer) = into_frame_halves(into_tokio(parent_end).expect("tokio stream"));
    let ready = timeout(PATIENCE, reader.read_frame()).await.expect("no Ready in time").expect("read ready");
    assert_eq!(ready, Some(Frame::Ready { pid: child_pid }));

    for id in [42, 43] {
        writer.write_frame(&Frame::ScrapeRequest { id }).await.expect("send scrape request");
        let reply = timeout(PATIENCE, reader.read_frame()).await.expect("no reply in time").expect("read reply");
        assert_eq!(reply, Some(Frame::ScrapeReply { id, snapshot: reply_snapshot() }));
    }

    writer.write_frame(&Frame::Shutdown).await.expect("send shutdown");
    let end = timeout(PATIENCE, reader.read_frame()).await.expect("child did not close").expect("clean close");
    assert_eq!(end, None);

    let output = timeout(PATIENCE, child.wait_with_output()).await.expect("child did not exit").expect("wait");
    let log = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "child failed: {}\n{log}", output.status);
    assert!(log.contains("1 passed"), "the child ran its role:\n{log}");
}
