//! Stopping the helper stops its stdio servers and everything they started. A test binary of its own:
//! it inspects this process's children, which other tests running in parallel would disturb.

mod common;

use std::time::{Duration, Instant};

use common::{Helper, STDIO_BIN, test_settings};
use serde_json::json;

/// A `sleep` duration no other process on the machine is likely to use, to recognise our grandchild.
const MARKER_SECS: &str = "3217";

/// Live (not zombie) processes whose command line satisfies `pred`.
fn live_processes(pred: impl Fn(&[String]) -> bool) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|stat| stat.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
            .unwrap_or(true);
        if !zombie && pred(&args) {
            found.push(pid);
        }
    }
    found
}

fn is_marker_sleep(args: &[String]) -> bool {
    args.len() == 2 && args[0].ends_with("sleep") && args[1] == MARKER_SECS
}

fn is_stdio_server(args: &[String]) -> bool {
    args.first().is_some_and(|a| a == STDIO_BIN)
}

async fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One test function: the two phases count processes and must not see each other's.
#[tokio::test]
async fn stdio_servers_and_their_children_never_outlive_their_session() {
    stopping_the_helper_stops_stdio_servers_and_their_children().await;
    a_restarted_server_leaves_no_children_behind().await;
}

async fn stopping_the_helper_stops_stdio_servers_and_their_children() {
    // The server's shell starts a long `sleep` in the background, then becomes the MCP server.
    let script = format!("sleep {MARKER_SECS} & exec \"$0\"");
    let helper = Helper::start_ready(
        json!({"mcpServers": {
            "plain": {"command": STDIO_BIN},
            "forking": {"command": "sh", "args": ["-c", script, STDIO_BIN]},
        }}),
        test_settings(Duration::from_secs(5)),
    )
    .await;
    assert!(helper.status("plain").await.available);
    assert!(helper.status("forking").await.available);
    assert_eq!(live_processes(is_stdio_server).len(), 2, "both servers run");
    assert_eq!(live_processes(is_marker_sleep).len(), 1, "the grandchild runs");

    helper.stop().await;
    wait_until("the servers are gone", || live_processes(is_stdio_server).is_empty()).await;
    wait_until("the grandchild is gone", || live_processes(is_marker_sleep).is_empty()).await;
}

async fn a_restarted_server_leaves_no_children_behind() {
    let script = format!("sleep {MARKER_SECS}1 & exec \"$0\"");
    let helper = Helper::start_ready(
        json!({"mcpServers": {"forking": {"command": "sh", "args": ["-c", script, STDIO_BIN]}}}),
        test_settings(Duration::from_secs(5)),
    )
    .await;
    let marker =
        |args: &[String]| args.len() == 2 && args[0].ends_with("sleep") && args[1] == format!("{MARKER_SECS}1");
    assert_eq!(live_processes(marker).len(), 1);
    let crash = helper.client.call("forking", "crash", json!({})).await.expect("crash");
    assert!(!crash.ok);
    helper.wait_for("forking", "restarted", |s| s.available && s.startup_ok_count >= 2).await;
    // The old grandchild was killed with its group; the new server started exactly one.
    wait_until("one grandchild is left", || live_processes(marker).len() == 1).await;
    helper.stop().await;
    wait_until("no grandchild is left", || live_processes(marker).is_empty()).await;
}
