//! Faults end to end, with real processes: a worker killed with SIGKILL under streaming load,
//! a client leaving mid-stream, an upstream going silent mid-stream. (The upstream dropping the
//! connection mid-stream is in `responses.rs`, the MCP helper killed in `mcp.rs`.)

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::Harness;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use respgw_testkit::sse::check_stream;
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

/// `n` text chunks `delay` apart, then the finish and `[DONE]`.
fn slow_stream(n: usize, delay: Duration) -> Step {
    Step::slow_text(&(0..n).map(|i| format!("part{i} ")).collect::<Vec<_>>(), delay)
}

/// A client that opens a new connection for every request, so SO_REUSEPORT spreads them.
fn fresh_connection_client() -> reqwest::Client {
    respgw_testkit::gateway::http_client(); // installs the TLS provider reqwest needs
    reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).build().expect("client")
}

/// Wait (bounded) until `condition` holds.
async fn eventually(what: &str, timeout: Duration, mut condition: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !condition().await {
        assert!(start.elapsed() < timeout, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn in_flight_gauges(h: &Harness) -> (f64, f64) {
    let text = fresh_connection_client().get(h.url("/metrics")).send().await.unwrap().text().await.unwrap();
    (
        common::sample(&text, "gw_responses_http_in_flight_requests"),
        common::sample(&text, "gw_responses_sse_connections_in_flight"),
    )
}

/// Open a stream and read until `needle` has been seen; returns the open response and the text so far.
async fn stream_until(client: &reqwest::Client, h: &Harness, body: Value, needle: &str) -> (reqwest::Response, String) {
    let mut response = client.post(h.url("/v1/responses")).json(&body).send().await.expect("the stream opens");
    assert_eq!(response.status(), 200);
    let mut text = String::new();
    while !text.contains(needle) {
        let bytes = response.chunk().await.expect("the stream reads").expect("the stream goes on");
        text.push_str(&String::from_utf8_lossy(&bytes));
    }
    (response, text)
}

fn response_id(sse_text: &str) -> String {
    let start = sse_text.find("\"id\":\"resp_").expect("response.created carries the id") + 6;
    sse_text[start..].split('"').next().unwrap().to_owned()
}

#[tokio::test]
async fn a_client_leaving_mid_stream_cancels_the_upstream_frees_everything_and_stores_nothing() {
    let h = Harness::start().await;
    h.scenario("slow", vec![slow_stream(40, Duration::from_millis(100))]);
    let client = fresh_connection_client();
    let body = json!({"model":"slow","input":"x","stream":true,"store":true});
    let (response, text) = stream_until(&client, &h, body, "response.output_text.delta").await;
    let id = response_id(&text);
    drop(response);

    // The gateway closes its upstream connection: the generation is not left running.
    eventually("the upstream sees the stream cancelled", Duration::from_secs(10), async || {
        h.upstream.unfinished_streams("slow") == 1
    })
    .await;
    // Nothing leaks: both in-flight gauges return to 0 (snapshots reach /metrics every second).
    eventually("the in-flight gauges return to 0", Duration::from_secs(10), async || {
        in_flight_gauges(&h).await == (0.0, 0.0)
    })
    .await;
    // The documented outcome: an abandoned response is not stored at all.
    assert_eq!(h.get(&format!("/v1/responses/{id}")).await.0, 404);
    assert!(h.wait_for_log("client disconnected; response abandoned").await);
    // The gateway is fine afterwards.
    h.scenario("after", vec![Step::text(&["ok"], "stop", None)]);
    assert_eq!(h.create(json!({"model":"after","input":"x"})).await.0, 200);
}

#[tokio::test]
async fn a_client_leaving_a_json_request_cancels_the_upstream() {
    let h = Harness::start().await;
    h.scenario("slow", vec![slow_stream(40, Duration::from_millis(100))]);
    respgw_testkit::gateway::http_client(); // installs the TLS provider reqwest needs
    let impatient = reqwest::Client::builder().no_proxy().timeout(Duration::from_millis(800)).build().unwrap();
    let gone = impatient.post(h.url("/v1/responses")).json(&json!({"model":"slow","input":"x"})).send().await;
    assert!(gone.is_err_and(|e| e.is_timeout()), "the client gives up first");
    eventually("the upstream sees the call cancelled", Duration::from_secs(10), async || {
        h.upstream.unfinished_streams("slow") == 1
    })
    .await;
    eventually("the in-flight gauges return to 0", Duration::from_secs(10), async || {
        in_flight_gauges(&h).await == (0.0, 0.0)
    })
    .await;
}

#[tokio::test]
async fn an_upstream_silent_mid_stream_fails_with_upstream_timeout_and_stores_nothing() {
    let h = Harness::start_with(&["--upstream-timeout", "0.5"], &[]).await;
    h.scenario("stall", vec![slow_stream(3, Duration::from_secs(3)), slow_stream(3, Duration::from_secs(3))]);
    let events = h.stream(json!({"model":"stall","input":"x"})).await;
    let kinds = common::kinds(&events);
    assert!(kinds.contains(&"response.output_text.delta"), "the first chunk arrived: {kinds:?}");
    assert_eq!(&kinds[kinds.len() - 2..], ["error", "response.failed"]);
    assert_eq!(events[kinds.len() - 2]["error"]["code"], "upstream_timeout");
    let failed = common::final_response(&events);
    assert_eq!(failed["error"]["code"], "upstream_timeout");
    assert_eq!(h.get(&format!("/v1/responses/{}", failed["id"].as_str().unwrap())).await.0, 404);
    // Non-stream: 504 in the error shape.
    let (status, body) = h.create(json!({"model":"stall","input":"x"})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (504, Some("upstream_timeout")));
    eventually("the upstream calls are closed", Duration::from_secs(10), async || {
        h.upstream.unfinished_streams("stall") == 2
    })
    .await;
}

/// One client stream in the kill test: which worker process served it and how it ended.
struct Outcome {
    pid: String,
    /// `Some(id)` when `response.completed` arrived.
    completed: Option<String>,
    /// Transport or framing error, if any.
    error: Option<String>,
}

/// Open a stream and return its worker pid and the rest of it, to be awaited later.
async fn open_stream(
    client: &reqwest::Client,
    h: &Harness,
) -> (String, tokio::task::JoinHandle<Result<Option<String>, String>>) {
    let body = json!({"model":"load","input":"x","stream":true,"store":true});
    let (mut response, mut text) = stream_until(client, h, body, "response.output_text.delta").await;
    let pid = response.headers()["x-respgw-worker-pid"].to_str().unwrap().to_owned();
    let rest = tokio::spawn(async move {
        loop {
            match response.chunk().await {
                Ok(Some(bytes)) => text.push_str(&String::from_utf8_lossy(&bytes)),
                Ok(None) => break,
                Err(e) => return Err(format!("{e:#}")),
            }
        }
        let events = check_stream(&text).map_err(|e| format!("{e:#}"))?;
        let last = events.last().ok_or("no events")?;
        Ok((last["type"] == "response.completed").then(|| last["response"]["id"].as_str().unwrap().to_owned()))
    });
    (pid, rest)
}

#[tokio::test]
async fn a_worker_killed_under_streaming_load_spares_the_other_worker_and_loses_nothing_completed() {
    let h = Harness::start_with(&["--gateway-workers", "2"], &[]).await;
    h.upstream.add_repeating_scenario("load", slow_stream(20, Duration::from_millis(100)));
    h.upstream.set_recording(false);
    let client = fresh_connection_client();

    // Streams in flight on both workers (new connections until each worker has at least three).
    let mut open = Vec::new();
    let mut per_pid: BTreeMap<String, usize> = BTreeMap::new();
    while per_pid.len() < 2 || per_pid.values().any(|n| *n < 3) {
        assert!(open.len() < 60, "SO_REUSEPORT never spread the connections: {per_pid:?}");
        let (pid, rest) = open_stream(&client, &h).await;
        *per_pid.entry(pid.clone()).or_default() += 1;
        open.push((pid, rest));
    }
    let victim: String = per_pid.keys().next().unwrap().clone();
    kill(Pid::from_raw(victim.parse::<libc::pid_t>().unwrap()), Signal::SIGKILL).expect("SIGKILL to a worker");
    // New streams keep arriving while the worker is down and restarted.
    let mut after_kill = Vec::new();
    for _ in 0..6 {
        after_kill.push(open_stream(&client, &h).await);
    }

    let mut outcomes = Vec::new();
    for (pid, rest) in open.into_iter().chain(after_kill) {
        let (completed, error) = match rest.await.unwrap() {
            Ok(completed) => (completed, None),
            Err(e) => (None, Some(e)),
        };
        outcomes.push(Outcome { pid, completed, error });
    }
    for o in &outcomes {
        if o.pid != victim {
            assert!(o.error.is_none(), "a client of worker {} saw an error: {:?}", o.pid, o.error);
            assert!(o.completed.is_some(), "a client of worker {} did not see completed", o.pid);
        }
    }
    assert!(outcomes.iter().any(|o| o.pid == victim && o.error.is_some()), "the killed worker's streams were cut");
    assert!(h.wait_for_log("worker died; restarting it").await);

    // Everything a client saw completed is retrievable, whichever worker answers.
    let completed: Vec<&String> = outcomes.iter().filter_map(|o| o.completed.as_ref()).collect();
    assert!(completed.len() >= 9, "{} completed", completed.len());
    for id in completed {
        let response = client.get(h.url(&format!("/v1/responses/{id}"))).send().await.unwrap();
        assert_eq!(response.status(), 200, "{id} is stored");
    }
}
