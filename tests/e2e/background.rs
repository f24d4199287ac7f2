//! Background responses end to end, with real processes: two workers of one gateway on SQLite
//! and two gateways on one PostgreSQL database. Each call that matters lands on another process
//! than the one running the response (the `x-respgw-worker-pid` reply header says which worker
//! answered; a fresh connection is tried until it differs): create and poll, cancel mid-run (the
//! scripted upstream sees its connection closed), resume a dropped stream with `starting_after`,
//! a worker SIGKILLed mid-run, queueing beyond the per-worker limit, metrics, and the official
//! Python SDK.

use crate::common;

use std::time::{Duration, Instant};

use common::{ALPHA, BETA, Harness, assert_error_shape, assert_valid_event, assert_valid_response, two_tenants};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use respgw_testkit::gateway::GatewayProcess;
use respgw_testkit::postgres::TestSchema;
use respgw_testkit::sse::{check_sequence, parse_sse};
use respgw_testkit::upstream::{ReplayUpstream, Step};
use serde_json::{Value, json};

/// The lease the tests run with: a dead worker's run is failed within 4/3 of it.
const LEASE_SECONDS: &str = "2";

/// Bound on waits; generous for a loaded CI machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// `n` text chunks `delay` apart, then the finish and `[DONE]`.
fn slow_stream(n: usize, delay: Duration) -> Step {
    Step::slow_text(&(0..n).map(|i| format!("part{i} ")).collect::<Vec<_>>(), delay)
}

fn quick() -> Step {
    Step::text(&["Paris", " is the capital."], "stop", Some((12, 6)))
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
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One reply: the worker that answered, the status and the JSON body.
struct Reply {
    pid: String,
    status: u16,
    body: Value,
    retry_after: Option<String>,
}

async fn reply(response: reqwest::Response) -> Reply {
    let pid = response.headers().get("x-respgw-worker-pid").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let text = response.text().await.expect("body reads");
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("non-JSON reply ({status}): {text}"));
    if status == 200 {
        assert_valid_response(&body);
    } else {
        assert_error_shape(&body);
    }
    Reply { pid, status, body, retry_after }
}

/// Send `request` (built anew each try) on fresh connections until a worker other than
/// `not_pid` answers.
async fn elsewhere(not_pid: &str, request: impl Fn(&reqwest::Client) -> reqwest::RequestBuilder) -> Reply {
    let client = fresh_connection_client();
    for _ in 0..100 {
        let r = reply(request(&client).send().await.expect("request completes")).await;
        if r.pid != not_pid {
            return r;
        }
    }
    panic!("SO_REUSEPORT never sent a request to a worker other than {not_pid}");
}

/// `POST /v1/responses` with `background: true` (JSON reply).
async fn create(base: &str, body: Value) -> Reply {
    let mut body = body;
    body["background"] = json!(true);
    reply(fresh_connection_client().post(format!("{base}/v1/responses")).json(&body).send().await.unwrap()).await
}

/// Poll response `id` from workers other than `not_pid` until its status is `status`.
async fn poll_until(base: &str, not_pid: &str, id: &str, status: &str) -> Value {
    let start = Instant::now();
    loop {
        let r = elsewhere(not_pid, |c| c.get(format!("{base}/v1/responses/{id}"))).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["background"], true, "{}", r.body);
        if r.body["status"] == status {
            return r.body;
        }
        assert!(start.elapsed() < PATIENCE, "{id} never became {status}: {}", r.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A streamed reply read until `needle` or its end; the response, its worker and the text so far.
async fn read_until(mut response: reqwest::Response, needle: &str) -> (reqwest::Response, String, String) {
    assert_eq!(response.status(), 200);
    let pid = response.headers()["x-respgw-worker-pid"].to_str().unwrap().to_owned();
    let mut text = String::new();
    while !text.contains(needle) {
        match response.chunk().await.expect("the stream reads") {
            Some(bytes) => text.push_str(&String::from_utf8_lossy(&bytes)),
            None => break,
        }
    }
    (response, pid, text)
}

/// The complete events of an SSE text (a stream cut short is read up to its last complete
/// frame), each schema-valid. Numbering is checked by the callers: a resumed stream starts past 0.
fn complete_events(text: &str) -> Vec<Value> {
    let text = text.strip_suffix("data: [DONE]\n\n").unwrap_or(text);
    let cut = text.rfind("\n\n").map_or("", |end| &text[..end + 2]);
    let frames = parse_sse(cut).unwrap_or_else(|e| panic!("bad framing: {e:#}\n{cut}"));
    let events: Vec<Value> = frames
        .iter()
        .map(|frame| {
            let event: Value = serde_json::from_str(&frame.data).expect("event data is JSON");
            assert_eq!(frame.event.as_deref(), event["type"].as_str(), "the event line names the type");
            event
        })
        .collect();
    for event in &events {
        assert_valid_event(event);
    }
    events
}

/// Resume `id`'s stream after `after` (or from the start) on a worker other than `not_pid`, read
/// to its end.
async fn resume(base: &str, not_pid: &str, id: &str, after: Option<u64>) -> Vec<Value> {
    let query = after.map_or_else(|| "stream=true".to_owned(), |n| format!("stream=true&starting_after={n}"));
    let client = fresh_connection_client();
    for _ in 0..100 {
        let response = client.get(format!("{base}/v1/responses/{id}?{query}")).send().await.unwrap();
        let (_, pid, text) = read_until(response, "data: [DONE]").await;
        if pid == not_pid {
            continue;
        }
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        return complete_events(&text);
    }
    panic!("never resumed on a worker other than {not_pid}");
}

fn terminal_count(events: &[Value]) -> usize {
    events
        .iter()
        .filter(|e| {
            matches!(e["type"].as_str(), Some("response.completed" | "response.incomplete" | "response.failed"))
        })
        .count()
}

async fn metrics(base: &str) -> String {
    fresh_connection_client().get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap()
}

#[tokio::test]
async fn created_on_one_worker_polled_to_completed_on_another() {
    let h = Harness::start_with(&["--gateway-workers", "2"], &[]).await;
    h.scenario("quick", vec![quick()]);
    let base = h.gateway.base_url();
    let created = create(base, json!({"model":"quick","input":"Capital of France?"})).await;
    assert_eq!(created.status, 200, "{}", created.body);
    assert_eq!(created.body["background"], true);
    assert!(matches!(created.body["status"].as_str(), Some("queued" | "in_progress")), "{}", created.body);
    let id = created.body["id"].as_str().unwrap().to_owned();

    let done = poll_until(base, &created.pid, &id, "completed").await;
    assert_eq!(done["output"][0]["content"][0]["text"], "Paris is the capital.");
    assert_eq!(done["usage"]["total_tokens"], 18);
    // It is a stored response: it can be continued and listed like any other.
    h.scenario("next", vec![quick()]);
    let (status, next) = h.create(json!({"model":"next","input":"And Italy?","previous_response_id": id})).await;
    assert_eq!(status, 200, "{next}");
    assert_eq!(h.upstream_messages("next")[0].len(), 3, "the background response's conversation is continued");
    // Background needs store.
    let (status, body) = h.create(json!({"model":"quick","input":"x","background":true,"store":false})).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("background")));
}

#[tokio::test]
async fn cancelled_mid_run_from_another_worker_closes_the_upstream_and_is_idempotent() {
    let h = Harness::start_with(&["--gateway-workers", "2"], &[]).await;
    h.scenario("slow", vec![slow_stream(200, Duration::from_millis(50))]);
    let base = h.gateway.base_url();
    let created = create(base, json!({"model":"slow","input":"x"})).await;
    let id = created.body["id"].as_str().unwrap().to_owned();
    poll_until(base, "", &id, "in_progress").await;
    eventually("the upstream call is streaming", PATIENCE, async || h.upstream_bodies("slow").len() == 1).await;

    let cancel = |c: &reqwest::Client| c.post(format!("{base}/v1/responses/{id}/cancel"));
    let cancelled = elsewhere(&created.pid, cancel).await;
    assert_eq!((cancelled.status, cancelled.body["status"].as_str()), (200, Some("cancelled")), "{}", cancelled.body);
    assert_eq!(cancelled.body["background"], true);
    // The worker running it learns and closes its upstream connection; no further turn starts.
    eventually("the upstream sees its stream closed", PATIENCE, async || h.upstream.unfinished_streams("slow") == 1)
        .await;
    assert_eq!(h.upstream_bodies("slow").len(), 1);
    // The worker that ran it logs what happened: a cancel, not a client gone.
    assert!(h.wait_for_log("background response cancelled by a client").await, "{}", h.gateway.stderr_text());
    assert!(!h.gateway.stderr_text().contains("client disconnected"), "{}", h.gateway.stderr_text());
    // Cancelling again answers the same; GET shows it; its stream ends with one terminal event.
    let again = elsewhere(&cancelled.pid, cancel).await;
    assert_eq!((again.status, again.body["status"].as_str()), (200, Some("cancelled")));
    assert_eq!(poll_until(base, "", &id, "cancelled").await["status"], "cancelled");
    let events = resume(base, "", &id, None).await;
    check_sequence(&events).unwrap();
    assert_eq!(common::final_response(&events)["status"], "cancelled");

    // A finished one, a plain stored one and an unknown one cannot be cancelled.
    h.scenario("quick", vec![quick(), quick()]);
    let finished = create(base, json!({"model":"quick","input":"x"})).await;
    let finished_id = finished.body["id"].as_str().unwrap().to_owned();
    poll_until(base, "", &finished_id, "completed").await;
    let r = elsewhere("", |c| c.post(format!("{base}/v1/responses/{finished_id}/cancel"))).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let (_, plain) = h.create(json!({"model":"quick","input":"x"})).await;
    let plain_id = plain["id"].as_str().unwrap();
    let r = elsewhere("", |c| c.post(format!("{base}/v1/responses/{plain_id}/cancel"))).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = elsewhere("", |c| c.post(format!("{base}/v1/responses/resp_nope/cancel"))).await;
    assert_eq!(r.status, 404, "{}", r.body);
    // A plain response has no stream to resume.
    let r = elsewhere("", |c| c.get(format!("{base}/v1/responses/{plain_id}?stream=true"))).await;
    assert_eq!(r.status, 400, "{}", r.body);

    // Workers send their metrics to the supervisor every second.
    eventually("the cancel is counted", PATIENCE, async || {
        common::sample(&metrics(base).await, "gw_responses_background_cancels_total") == 1.0
    })
    .await;
}

#[tokio::test]
async fn a_stream_dropped_and_resumed_elsewhere_joins_into_the_uninterrupted_stream() {
    let h = Harness::start_with(&["--gateway-workers", "2"], &[]).await;
    h.scenario("slow", vec![slow_stream(30, Duration::from_millis(40))]);
    let base = h.gateway.base_url();
    let body = json!({"model":"slow","input":"x","background":true,"stream":true});
    let response = fresh_connection_client().post(format!("{base}/v1/responses")).json(&body).send().await.unwrap();
    let (response, pid, text) = read_until(response, "part5").await;
    // The client goes away mid-stream; the run goes on.
    drop(response);
    let seen = complete_events(&text);
    let kinds = common::kinds(&seen);
    assert_eq!(&kinds[..3], ["response.created", "response.queued", "response.in_progress"], "{kinds:?}");
    assert_eq!(seen[0]["response"]["status"], "queued");
    let id = seen[0]["response"]["id"].as_str().unwrap().to_owned();
    let last = seen.last().unwrap()["sequence_number"].as_u64().unwrap();

    let rest = resume(base, &pid, &id, Some(last)).await;
    assert_eq!(rest[0]["sequence_number"].as_u64(), Some(last + 1));
    let joined: Vec<Value> = seen.into_iter().chain(rest).collect();
    check_sequence(&joined).unwrap();
    assert_eq!(terminal_count(&joined), 1);
    assert_eq!(common::final_response(&joined)["status"], "completed");
    // The same as the whole stream, replayed from the start once it ended.
    let whole = resume(base, &pid, &id, None).await;
    assert_eq!(joined, whole);
    assert_eq!(h.upstream.unfinished_streams("slow"), 0, "the client leaving did not cut the run");
    let deltas: String = whole.iter().filter_map(|e| e["delta"].as_str()).collect();
    assert_eq!(poll_until(base, "", &id, "completed").await["output"][0]["content"][0]["text"], deltas.as_str());
    // Resuming after the terminal event gives nothing more.
    let after_end = resume(base, "", &id, Some(whole.len() as u64 - 1)).await;
    assert!(after_end.is_empty(), "{after_end:?}");
    // Deleted, it is gone for every reader, its stream included.
    assert_eq!(h.delete(&format!("/v1/responses/{id}")).await.0, 200);
    let r = elsewhere("", |c| c.get(format!("{base}/v1/responses/{id}?stream=true"))).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(h.get(&format!("/v1/responses/{id}")).await.0, 404);
}

#[tokio::test]
async fn a_worker_killed_mid_run_leaves_a_failed_response_and_a_resumable_end() {
    let h = Harness::start_with(&["--gateway-workers", "2", "--background-lease", LEASE_SECONDS], &[]).await;
    h.scenario("slow", vec![slow_stream(400, Duration::from_millis(50))]);
    let base = h.gateway.base_url();
    let body = json!({"model":"slow","input":"x","background":true,"stream":true});
    let response = fresh_connection_client().post(format!("{base}/v1/responses")).json(&body).send().await.unwrap();
    let (response, pid, text) = read_until(response, "part3").await;
    let seen = complete_events(&text);
    let id = seen[0]["response"]["id"].as_str().unwrap().to_owned();
    let last = seen.last().unwrap()["sequence_number"].as_u64().unwrap();

    let killed = Instant::now();
    kill(Pid::from_raw(pid.parse::<libc::pid_t>().unwrap()), Signal::SIGKILL).expect("SIGKILL to the worker");
    drop(response);
    let failed = poll_until(base, &pid, &id, "failed").await;
    let bound = Duration::from_secs_f64(LEASE_SECONDS.parse::<f64>().unwrap() * 4.0 / 3.0);
    assert!(killed.elapsed() < bound + Duration::from_secs(10), "failed after {:?}", killed.elapsed());
    assert_eq!(failed["error"]["code"], "server_error", "{failed}");

    // A client resuming where it was gets the rest of what was logged, then the failure.
    let rest = resume(base, &pid, &id, Some(last)).await;
    let joined: Vec<Value> = seen.into_iter().chain(rest).collect();
    check_sequence(&joined).unwrap();
    let kinds = common::kinds(&joined);
    assert_eq!(&kinds[kinds.len() - 2..], ["error", "response.failed"], "{kinds:?}");
    assert_eq!(common::final_response(&joined)["status"], "failed");
    eventually("the lost run is counted", PATIENCE, async || {
        common::sample(&metrics(base).await, "gw_responses_background_lost_total") == 1.0
    })
    .await;
}

#[tokio::test]
async fn runs_beyond_the_per_worker_limit_wait_queued() {
    let h = Harness::start_with(&["--background-max-running", "1"], &[]).await;
    h.scenario("first", vec![slow_stream(40, Duration::from_millis(50))]);
    h.scenario("second", vec![quick()]);
    let base = h.gateway.base_url();
    let first = create(base, json!({"model":"first","input":"x"})).await;
    let first_id = first.body["id"].as_str().unwrap().to_owned();
    poll_until(base, "", &first_id, "in_progress").await;
    let second = create(base, json!({"model":"second","input":"x"})).await;
    assert_eq!(second.body["status"], "queued");
    let second_id = second.body["id"].as_str().unwrap().to_owned();

    // While the first runs, the second waits: it stays queued and its model is not called.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, waiting) = h.get(&format!("/v1/responses/{second_id}")).await;
    assert_eq!(waiting["status"], "queued", "{waiting}");
    assert!(h.upstream_bodies("second").is_empty());
    eventually("the gauges show one running, one queued", PATIENCE, async || {
        let text = metrics(base).await;
        common::sample(&text, "gw_responses_background_running") == 1.0
            && common::sample(&text, "gw_responses_background_queued") == 1.0
    })
    .await;

    poll_until(base, "", &first_id, "completed").await;
    poll_until(base, "", &second_id, "completed").await;
    eventually("the gauges return to 0", PATIENCE, async || {
        let text = metrics(base).await;
        common::sample(&text, "gw_responses_background_running") == 0.0
            && common::sample(&text, "gw_responses_background_queued") == 0.0
    })
    .await;
}

async fn gateway_on(upstream: &ReplayUpstream, db: &str) -> GatewayProcess {
    let args = common::serve_args(&upstream.base_url(), &["--db-path", db, "--background-lease", LEASE_SECONDS]);
    GatewayProcess::spawn(common::respgw_bin(), &args, &common::quiet_env()).await.expect("gateway starts")
}

#[tokio::test]
async fn two_gateways_on_postgres_poll_cancel_resume_and_fail_each_others_runs() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::postgres());
    let schema = TestSchema::create().await.unwrap();
    let upstream = ReplayUpstream::start().await.unwrap();
    let url = schema.url();
    let (a, b) = tokio::join!(gateway_on(&upstream, &url), gateway_on(&upstream, &url));
    let (a_base, b_base) = (a.base_url(), b.base_url());

    // Created on A, completed as seen from B.
    upstream.add_scenario("quick", vec![quick()]);
    let created = create(a_base, json!({"model":"quick","input":"x"})).await;
    let id = created.body["id"].as_str().unwrap().to_owned();
    poll_until(b_base, "", &id, "completed").await;

    // Streamed from A, dropped, resumed on B: the same events as the whole stream.
    upstream.add_scenario("stream", vec![slow_stream(30, Duration::from_millis(40))]);
    let body = json!({"model":"stream","input":"x","background":true,"stream":true});
    let response = fresh_connection_client().post(format!("{a_base}/v1/responses")).json(&body).send().await.unwrap();
    let (response, _, text) = read_until(response, "part5").await;
    drop(response);
    let seen = complete_events(&text);
    let stream_id = seen[0]["response"]["id"].as_str().unwrap().to_owned();
    let last = seen.last().unwrap()["sequence_number"].as_u64().unwrap();
    let joined: Vec<Value> = seen.into_iter().chain(resume(b_base, "", &stream_id, Some(last)).await).collect();
    check_sequence(&joined).unwrap();
    assert_eq!(joined, resume(b_base, "", &stream_id, None).await);

    // Running on A, cancelled on B: A closes its upstream call (told by NOTIFY).
    upstream.add_scenario("slow", vec![slow_stream(400, Duration::from_millis(50))]);
    let running = create(a_base, json!({"model":"slow","input":"x"})).await;
    let running_id = running.body["id"].as_str().unwrap().to_owned();
    eventually("the upstream call is streaming", PATIENCE, async || upstream.requests("slow").len() == 1).await;
    let cancelled = reply(
        fresh_connection_client().post(format!("{b_base}/v1/responses/{running_id}/cancel")).send().await.unwrap(),
    )
    .await;
    assert_eq!(cancelled.body["status"], "cancelled", "{}", cancelled.body);
    eventually("A closes the upstream stream", PATIENCE, async || upstream.unfinished_streams("slow") == 1).await;

    // Running on A when A's worker is killed: B fails it within the bound.
    upstream.add_scenario("doomed", vec![slow_stream(400, Duration::from_millis(50))]);
    let doomed = create(a_base, json!({"model":"doomed","input":"x"})).await;
    let doomed_id = doomed.body["id"].as_str().unwrap().to_owned();
    eventually("the upstream call is streaming", PATIENCE, async || upstream.requests("doomed").len() == 1).await;
    kill(Pid::from_raw(doomed.pid.parse::<libc::pid_t>().unwrap()), Signal::SIGKILL).expect("SIGKILL to A's worker");
    let failed = poll_until(b_base, "", &doomed_id, "failed").await;
    assert_eq!(failed["error"]["code"], "server_error");
    let events = resume(b_base, "", &doomed_id, None).await;
    check_sequence(&events).unwrap();
    assert_eq!(common::kinds(&events).last(), Some(&"response.failed"));
    drop((a, b));
}

#[tokio::test]
async fn the_official_python_sdk_runs_background_responses() {
    respgw_testkit::skip_unless!(common::python_env());
    let h = Harness::start_with(&["--gateway-workers", "2"], &[]).await;
    h.scenario("quick", vec![quick()]);
    h.scenario("slow", vec![slow_stream(30, Duration::from_millis(40))]);
    h.scenario("endless", vec![slow_stream(400, Duration::from_millis(50))]);
    let run = common::run_sdk_script("background_check.py", h.gateway.base_url(), &[]).await;
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    assert!(run.succeeded, "SDK checks failed:\n{stdout}\n{stderr}\n--- gateway log ---\n{}", h.gateway.stderr_text());
    assert!(stdout.contains("background checks passed"), "{stdout}");
    eventually("the SDK's cancel closes the upstream call", PATIENCE, async || {
        h.upstream.unfinished_streams("endless") == 1
    })
    .await;
}

#[tokio::test]
async fn a_stopping_gateway_lets_its_background_runs_finish_within_the_drain_timeout() {
    let upstream = ReplayUpstream::start().await.unwrap();
    upstream.add_scenario("slow", vec![slow_stream(20, Duration::from_millis(50))]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db").display().to_string();
    let stopping = gateway_on(&upstream, &db).await;
    let staying = gateway_on(&upstream, &db).await;
    let created = create(stopping.base_url(), json!({"model":"slow","input":"x"})).await;
    let id = created.body["id"].as_str().unwrap().to_owned();
    eventually("the upstream call is streaming", PATIENCE, async || upstream.requests("slow").len() == 1).await;
    kill(Pid::from_raw(stopping.pid() as libc::pid_t), Signal::SIGTERM).expect("SIGTERM to the gateway");
    // The other gateway on the same file sees it finish: the stopping one drained it.
    let done = poll_until(staying.base_url(), "", &id, "completed").await;
    assert_eq!(done["output"][0]["content"][0]["text"].as_str().map(|t| t.matches("part").count()), Some(20));
    assert_eq!(upstream.unfinished_streams("slow"), 0);
}

/// `POST /v1/responses` with `background: true` as the tenant of `key`.
async fn create_as(base: &str, key: &str, body: Value) -> Reply {
    let mut body = body;
    body["background"] = json!(true);
    let request = fresh_connection_client().post(format!("{base}/v1/responses")).bearer_auth(key).json(&body);
    reply(request.send().await.unwrap()).await
}

/// Poll response `id` as the tenant of `key` until its status is `status`.
async fn poll_as(base: &str, key: &str, id: &str, status: &str) {
    let client = fresh_connection_client();
    eventually(&format!("{id} becomes {status}"), PATIENCE, async || {
        let r = reply(client.get(format!("{base}/v1/responses/{id}")).bearer_auth(key).send().await.unwrap()).await;
        r.body["status"] == status
    })
    .await;
}

#[tokio::test]
async fn queued_runs_are_bounded_per_gateway_and_per_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path(), "");
    let h = Harness::start_with(
        &[
            "--api-keys-file",
            &keys,
            "--background-max-running",
            "1",
            "--background-max-queued",
            "3",
            "--background-max-queued-per-tenant",
            "2",
        ],
        &[],
    )
    .await;
    h.scenario("slow", (0..4).map(|_| slow_stream(400, Duration::from_millis(50))).collect());
    let base = h.gateway.base_url();
    let running = create_as(base, ALPHA, json!({"model":"slow","input":"x"})).await;
    poll_as(base, ALPHA, running.body["id"].as_str().unwrap(), "in_progress").await;
    for _ in 0..2 {
        assert_eq!(create_as(base, ALPHA, json!({"model":"slow","input":"x"})).await.status, 200);
    }
    // Alpha has two queued: its third is refused, beta's first is not.
    let refused = create_as(base, ALPHA, json!({"model":"slow","input":"x"})).await;
    assert_eq!((refused.status, refused.body["error"]["code"].as_str()), (429, Some("rate_limit_exceeded")));
    assert!(refused.body["error"]["message"].as_str().unwrap().contains("tenant"), "{}", refused.body);
    assert_eq!(refused.retry_after.as_deref(), Some("5"), "a refusal says when to retry");
    assert_eq!(create_as(base, BETA, json!({"model":"slow","input":"x"})).await.status, 200);
    // Three queued in all: the gateway's bound refuses beta's second.
    let refused = create_as(base, BETA, json!({"model":"slow","input":"x"})).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(refused.body["error"]["message"].as_str().unwrap().contains("gateway"), "{}", refused.body);
    assert_eq!(refused.retry_after.as_deref(), Some("5"), "a refusal says when to retry");
    assert_eq!(h.upstream_bodies("slow").len(), 1, "refused runs never reach the model");
}

#[tokio::test]
async fn one_tenants_backlog_does_not_delay_another_tenants_run() {
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path(), "");
    let h = Harness::start_with(&["--api-keys-file", &keys, "--background-max-running", "1"], &[]).await;
    h.scenario("backlog", (0..4).map(|_| slow_stream(40, Duration::from_millis(50))).collect());
    h.scenario("quick", vec![quick()]);
    let base = h.gateway.base_url();
    let first = create_as(base, ALPHA, json!({"model":"backlog","input":"x"})).await;
    poll_as(base, ALPHA, first.body["id"].as_str().unwrap(), "in_progress").await;
    for _ in 0..3 {
        assert_eq!(create_as(base, ALPHA, json!({"model":"backlog","input":"x"})).await.status, 200);
    }
    let beta = create_as(base, BETA, json!({"model":"quick","input":"x"})).await;
    assert_eq!(beta.body["status"], "queued", "{}", beta.body);
    poll_as(base, BETA, beta.body["id"].as_str().unwrap(), "completed").await;
    // Beta's run took the first free slot: at most alpha's first and the one after beta's had
    // started (first come, first served would have run all four of alpha's first).
    let alphas_started = h.upstream_bodies("backlog").len();
    assert!(alphas_started <= 2, "beta's run waited behind {alphas_started} of alpha's");
}

#[tokio::test]
async fn resumed_streams_count_toward_the_tenants_open_streams() {
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path(), "max_open_streams = 2");
    let h = Harness::start_with(&["--api-keys-file", &keys], &[]).await;
    h.scenario("slow", vec![slow_stream(400, Duration::from_millis(50))]);
    let base = h.gateway.base_url();
    // The run holds one of alpha's two open streams; a resumed stream takes the other.
    let created = create_as(base, ALPHA, json!({"model":"slow","input":"x"})).await;
    let id = created.body["id"].as_str().unwrap().to_owned();
    let client = fresh_connection_client();
    let resume = || client.get(format!("{base}/v1/responses/{id}?stream=true")).bearer_auth(ALPHA).send();
    let open = resume().await.unwrap();
    let (open, _, _) = read_until(open, "response.queued").await;
    let refused = resume().await.unwrap();
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = refused.json().await.unwrap();
    assert_error_shape(&body);
    assert_eq!(body["error"]["code"], "rate_limit_exceeded", "{body}");
    // Closing the open one frees its place.
    drop(open);
    eventually("a resumed stream is accepted again", PATIENCE, async || resume().await.unwrap().status() == 200).await;
}

#[tokio::test]
async fn starting_after_past_the_last_event_is_a_400_naming_the_parameter() {
    let h = Harness::start().await;
    h.scenario("quick", vec![quick()]);
    h.scenario("slow", vec![slow_stream(400, Duration::from_millis(50))]);
    let base = h.gateway.base_url();
    let done = create(base, json!({"model":"quick","input":"x"})).await;
    let done_id = done.body["id"].as_str().unwrap().to_owned();
    poll_until(base, "", &done_id, "completed").await;
    let all = resume(base, "", &done_id, None).await;
    let last = all.last().unwrap()["sequence_number"].as_u64().unwrap();
    let live = create(base, json!({"model":"slow","input":"x"})).await;
    let live_id = live.body["id"].as_str().unwrap().to_owned();
    for (id, after) in [(&done_id, last + 1), (&done_id, u64::MAX), (&live_id, 100_000)] {
        let r = elsewhere("", |c| c.get(format!("{base}/v1/responses/{id}?stream=true&starting_after={after}"))).await;
        assert_eq!((r.status, r.body["error"]["param"].as_str()), (400, Some("starting_after")), "{}", r.body);
    }
    // The last event itself is a valid cursor: nothing follows it.
    assert!(resume(base, "", &done_id, Some(last)).await.is_empty());
}

/// Read `response` (an SSE body) to its end, or fail after `PATIENCE`.
async fn read_to_end(mut response: reqwest::Response, mut text: String) -> String {
    let start = Instant::now();
    while let Some(bytes) = tokio::time::timeout(PATIENCE, response.chunk()).await.expect("the stream moves").unwrap() {
        text.push_str(&String::from_utf8_lossy(&bytes));
        assert!(start.elapsed() < PATIENCE * 2, "the stream never ended: {text}");
    }
    text
}

#[tokio::test]
async fn a_background_stream_open_when_the_drain_times_out_ends_saying_how_to_resume() {
    let upstream = ReplayUpstream::start().await.unwrap();
    upstream.add_scenario("slow", vec![slow_stream(200, Duration::from_millis(50))]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db").display().to_string();
    let args = common::serve_args(
        &upstream.base_url(),
        &["--db-path", &db, "--background-lease", LEASE_SECONDS, "--drain-timeout", "1"],
    );
    let stopping = GatewayProcess::spawn(common::respgw_bin(), &args, &common::quiet_env()).await.unwrap();
    let staying = gateway_on(&upstream, &db).await;
    let body = json!({"model":"slow","input":"x","background":true,"stream":true});
    let url = format!("{}/v1/responses", stopping.base_url());
    let response = fresh_connection_client().post(url).json(&body).send().await.unwrap();
    let (response, _, text) = read_until(response, "part3").await;
    kill(Pid::from_raw(stopping.pid() as libc::pid_t), Signal::SIGTERM).expect("SIGTERM to the gateway");
    let text = read_to_end(response, text).await;
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let seen = complete_events(&text);
    let (cut, seen) = seen.split_last().unwrap();
    let id = seen[0]["response"]["id"].as_str().unwrap().to_owned();
    let last = seen.last().unwrap()["sequence_number"].as_u64().unwrap();
    assert_eq!((cut["type"].as_str(), cut["code"].as_str()), (Some("error"), Some("stream_interrupted")), "{cut}");
    let message = cut["message"].as_str().unwrap();
    let resume_at = format!("GET /v1/responses/{id}?stream=true&starting_after={last}");
    assert!(message.contains(&resume_at), "{message}");
    // Resumed as told on the other gateway: the rest, to exactly one terminal event.
    let rest = resume(staying.base_url(), "", &id, Some(last)).await;
    let joined: Vec<Value> = seen.iter().cloned().chain(rest).collect();
    check_sequence(&joined).unwrap();
    assert_eq!(terminal_count(&joined), 1);
}

#[tokio::test]
async fn a_store_outage_longer_than_the_lease_keeps_the_stream_alive_and_fails_the_run_saying_why() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::postgres());
    let schema = TestSchema::create().await.unwrap();
    let server = {
        let url = url::Url::parse(&respgw_testkit::postgres::server_url()).unwrap();
        let host = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432));
        tokio::net::lookup_host(host).await.unwrap().next().unwrap()
    };
    let proxy = respgw_testkit::postgres::CutProxy::start(server).await.unwrap();
    let upstream = ReplayUpstream::start().await.unwrap();
    upstream.add_scenario("slow", vec![slow_stream(1000, Duration::from_millis(50))]);
    let args = common::serve_args(
        &upstream.base_url(),
        &[
            "--db-path",
            &schema.url_via(proxy.addr()),
            "--background-lease",
            LEASE_SECONDS,
            "--background-keep-alive",
            "0.2",
        ],
    );
    let gateway = GatewayProcess::spawn(common::respgw_bin(), &args, &common::quiet_env()).await.unwrap();
    let body = json!({"model":"slow","input":"x","background":true,"stream":true});
    let url = format!("{}/v1/responses", gateway.base_url());
    let response = fresh_connection_client().post(url).json(&body).send().await.unwrap();
    let (response, _, text) = read_until(response, "part3").await;
    let id = complete_events(&text)[0]["response"]["id"].as_str().unwrap().to_owned();

    proxy.cut();
    // The stream stays alive through the outage.
    let (response, _, text) = read_until(response, ": keep-alive\n\n").await;
    // Well past the lease, then the store comes back.
    tokio::time::sleep(Duration::from_secs(8)).await;
    proxy.restore();
    let text = read_to_end(response, text).await;
    let events = complete_events(&text);
    let kinds = common::kinds(&events);
    assert_eq!(&kinds[kinds.len() - 2..], ["error", "response.failed"], "{kinds:?}");
    let message = events[events.len() - 2]["error"]["message"].as_str().unwrap();
    assert!(message.contains("store could not be reached"), "{message}");
    assert!(!message.contains("stopped before it finished"), "{message}");
    let failed =
        reply(fresh_connection_client().get(format!("{}/v1/responses/{id}", gateway.base_url())).send().await.unwrap())
            .await;
    assert_eq!(failed.body["status"], "failed", "{}", failed.body);
    // The run was stopped: its upstream call was closed.
    assert_eq!(upstream.unfinished_streams("slow"), 1);
}
