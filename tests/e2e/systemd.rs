//! The shipped systemd units pass `systemd-analyze verify`, and socket activation works for
//! real: `systemd-socket-activate` hands respgw a listening socket (`LISTEN_FDS`), which all its
//! workers then serve.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::respgw_bin;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use respgw_testkit::gateway::http_client;
use respgw_testkit::upstream::{ReplayUpstream, Step};
use serde_json::json;

/// Where systemd's tools come from.
const SYSTEMD_REMEDY: &str = "Debian package systemd; scripts/test installs it";

fn units_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/systemd")
}

/// The shipped units, by file name (drop-ins under their `…service.d/` folder).
fn shipped(name: &str) -> String {
    std::fs::read_to_string(units_dir().join(name)).unwrap()
}

/// `systemd-analyze verify` on the gateway's unit (`service_text`), its socket, the MCP helper's
/// unit (`helper_text`) and the gateway's helper drop-in (`drop_in_text`, applied from
/// `respgw.service.d/`), with `ExecStart` pointing at the built binary; returns the combined
/// output (empty when the units are clean) and whether it succeeded.
fn verify_all(service_text: &str, helper_text: &str, drop_in_text: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let binary = |text: &str| text.replace("/usr/local/bin/respgw", respgw_bin().to_str().unwrap());
    std::fs::write(dir.path().join("respgw.service"), binary(service_text)).unwrap();
    std::fs::write(dir.path().join("respgw-mcp-helper.service"), binary(helper_text)).unwrap();
    std::fs::create_dir(dir.path().join("respgw.service.d")).unwrap();
    std::fs::write(dir.path().join("respgw.service.d/mcp-helper.conf"), drop_in_text).unwrap();
    std::fs::copy(units_dir().join("respgw.socket"), dir.path().join("respgw.socket")).unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(dir.path().join("respgw.service"))
        .arg(dir.path().join("respgw.socket"))
        .arg(dir.path().join("respgw-mcp-helper.service"))
        .output()
        .expect("systemd-analyze is installed (Debian package systemd; scripts/test installs it)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn the_units_pass_systemd_analyze_verify() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::program("systemd-analyze", SYSTEMD_REMEDY));
    let (service, helper, drop_in) =
        (shipped("respgw.service"), shipped("respgw-mcp-helper.service"), shipped("respgw.service.d/mcp-helper.conf"));
    let (ok, output) = verify_all(&service, &helper, &drop_in);
    assert!(ok && output.trim().is_empty(), "systemd-analyze verify complained:\n{output}");
    // The check itself catches mistakes, in each of the three files: a misspelt key is reported.
    for (which, (s, h, d)) in [
        ("respgw.service", (service.replace("Type=notify", "Typo=notify"), helper.clone(), drop_in.clone())),
        ("respgw-mcp-helper.service", (service.clone(), helper.replace("Type=exec", "Typo=exec"), drop_in.clone())),
        ("the drop-in", (service.clone(), helper.clone(), drop_in.replace("Wants=", "Wnats="))),
    ] {
        let (_, output) = verify_all(&s, &h, &d);
        assert!(output.contains("Unknown key"), "a broken {which} must not pass silently: {output}");
    }
}

#[tokio::test]
async fn socket_activation_serves_on_the_socket_systemd_passes() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::program("systemd-socket-activate", SYSTEMD_REMEDY));
    let upstream = ReplayUpstream::start().await.unwrap();
    upstream.add_repeating_scenario("m", Step::text(&["ok"], "stop", None));
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new("systemd-socket-activate")
        .arg("-l")
        .arg(format!("127.0.0.1:{port}"))
        .arg(respgw_bin())
        .args(["serve", "--upstream", &upstream.base_url(), "--gateway-workers", "2", "--gateway-port", "1"])
        .arg("--db-path")
        .arg(dir.path().join("sa.db"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("systemd-socket-activate is installed (Debian package systemd; scripts/test installs it)");
    // The first connection makes systemd-socket-activate start respgw; it waits in the backlog.
    let url = format!("http://127.0.0.1:{port}/v1/responses");
    let mut last_error = String::new();
    let mut served = None;
    for _ in 0..100 {
        match http_client().post(&url).json(&json!({"model":"m","input":"x"})).send().await {
            Ok(response) => {
                served = Some(response.status());
                break;
            }
            Err(e) => last_error = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(served, Some(reqwest::StatusCode::OK), "no answer on the activated socket: {last_error}");
    let _ = kill(Pid::from_raw(child.id().unwrap() as libc::pid_t), Signal::SIGTERM);
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait()).await.expect("exits").unwrap();
    assert!(out.success(), "{out}");
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).await.unwrap();
    assert!(stderr.contains("using the socket passed by systemd"), "{stderr}");
}
