//! WebSocket mode end to end: `GET /v1/responses` upgraded, `response.create` frames in, the
//! SSE events out as text frames — several responses over one connection, checked frame by
//! frame against the Open Responses schema and the framing rules of one response (numbers from 0
//! per response, exactly one terminal event, the last). Idle connections time out, the gateway
//! pings, and connection-local state stays within its bounds (set small here by flag).

use crate::common;

use std::time::{Duration, Instant};

use common::{Harness, assert_error_shape, assert_valid_event, kinds};
use futures::{SinkExt, StreamExt};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use respgw_testkit::sse::check_sequence;
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

const TEXT: &str = "chat_completion/text-single-stream.yaml";
/// The header the reference API's WebSocket clients (Codex) send.
const BETA: &str = "responses_websockets=2026-02-06";
/// A guard against a hung test, not a timing assertion.
const FRAME_WAIT: Duration = Duration::from_secs(60);

async fn connect(h: &Harness, api_key: Option<&str>) -> Result<Socket, tungstenite::Error> {
    let url = h.url("/v1/responses").replacen("http://", "ws://", 1);
    let mut request = url.into_client_request()?;
    request.headers_mut().insert("openai-beta", BETA.parse().expect("header value"));
    if let Some(key) = api_key {
        request.headers_mut().insert("authorization", format!("Bearer {key}").parse().expect("header value"));
    }
    tokio_tungstenite::connect_async(request).await.map(|(socket, _)| socket)
}

async fn send(socket: &mut Socket, frame: Value) {
    socket.send(Message::text(frame.to_string())).await.expect("frame sent");
}

/// The next text frame, as JSON.
async fn next_frame(socket: &mut Socket) -> Value {
    loop {
        let message = tokio::time::timeout(FRAME_WAIT, socket.next())
            .await
            .expect("a frame arrives")
            .expect("the connection is open")
            .expect("the frame reads");
        match message {
            Message::Text(text) => return serde_json::from_str(&text).expect("a frame is JSON"),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected frame {other:?}"),
        }
    }
}

/// An `error` frame answering a frame that started no response: a numbered error event of its
/// own, with the HTTP status the request would have had.
fn assert_rejection(frame: &Value, status: u16) {
    assert_eq!(frame["type"], "error", "{frame}");
    assert_eq!(frame["status"], status, "{frame}");
    assert_eq!(frame["sequence_number"], 0, "{frame}");
    assert_error_shape(frame);
    assert_valid_event(frame);
}

/// Frames until one response's terminal event; every event is schema-valid and the response
/// obeys the framing rules. Rejection frames (they carry a `status`) met on the way are returned
/// apart.
async fn read_response(socket: &mut Socket) -> (Vec<Value>, Vec<Value>) {
    read_rest_of_response(socket, Vec::new()).await
}

/// [`read_response`] for a response whose first `events` were already read.
async fn read_rest_of_response(socket: &mut Socket, mut events: Vec<Value>) -> (Vec<Value>, Vec<Value>) {
    let mut rejections = Vec::new();
    loop {
        let frame = next_frame(socket).await;
        assert_valid_event(&frame);
        if frame.get("status").is_some() {
            rejections.push(frame);
            continue;
        }
        let terminal =
            matches!(frame["type"].as_str(), Some("response.completed" | "response.incomplete" | "response.failed"));
        events.push(frame);
        if terminal {
            check_sequence(&events).unwrap_or_else(|e| panic!("bad response framing: {e:#}\n{events:#?}"));
            return (events, rejections);
        }
    }
}

fn terminal(events: &[Value]) -> &Value {
    &events.last().expect("events")["response"]
}

#[tokio::test]
async fn two_responses_over_one_connection_chain_with_previous_response_id() {
    let h = Harness::start().await;
    h.scenario(
        "text",
        vec![Step::cassette(TEXT), Step::text(&["Ber", "lin."], "stop", Some((30, 3))), Step::cassette(TEXT)],
    );
    let mut socket = connect(&h, None).await.expect("upgraded");

    send(&mut socket, json!({"type":"response.create","model":"text","input":"Capital of France?"})).await;
    let (first, rejections) = read_response(&mut socket).await;
    assert!(rejections.is_empty());
    let first_id = terminal(&first)["id"].as_str().expect("id").to_owned();
    assert_eq!(terminal(&first)["status"], "completed");
    assert_eq!(terminal(&first)["output"][0]["content"][0]["text"], "Paris.");

    send(
        &mut socket,
        json!({"type":"response.create","model":"text","previous_response_id":first_id,"input":"And Germany?"}),
    )
    .await;
    let (second, _) = read_response(&mut socket).await;
    let response = terminal(&second);
    assert_eq!(response["status"], "completed");
    assert_eq!(response["previous_response_id"], first_id.as_str());
    assert_eq!(response["output"][0]["content"][0]["text"], "Berlin.");
    assert_eq!(response["usage"]["input_tokens"], 30);
    assert_ne!(response["id"], first_id.as_str());

    // The continuation reached the model with the whole conversation.
    let upstream = h.upstream_bodies("text");
    let messages: Vec<(&str, &str)> = upstream[1]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| (m["role"].as_str().unwrap_or("?"), m["content"].as_str().unwrap_or("?")))
        .collect();
    assert_eq!(messages, [("user", "Capital of France?"), ("assistant", "Paris."), ("user", "And Germany?")]);
    // Stored like any response: readable over HTTP on the same path.
    let (status, stored) = h.get(&format!("/v1/responses/{}", response["id"].as_str().unwrap())).await;
    assert_eq!((status, &stored["output"]), (200, &response["output"]));

    // The same events, in the same order, as over SSE.
    let streamed = h.stream(json!({"model":"text","input":"Capital of France?"})).await;
    assert_eq!(kinds(&first), kinds(&streamed));
}

#[tokio::test]
async fn store_false_responses_continue_from_connection_local_state() {
    let h = Harness::start().await;
    h.scenario(
        "local",
        vec![
            Step::cassette(TEXT),
            Step::text(&["Ber", "lin."], "stop", None),
            Step::text(&["Rome."], "stop", None),
            Step::text(&["Madrid."], "stop", None),
        ],
    );
    let mut socket = connect(&h, None).await.expect("upgraded");
    let create = |input: &str, previous: Option<&str>, store: bool| json!({"type":"response.create","model":"local","store":store,"input":input,"previous_response_id":previous});

    send(&mut socket, create("Capital of France?", None, false)).await;
    let first_id = terminal(&read_response(&mut socket).await.0)["id"].as_str().expect("id").to_owned();
    assert_eq!(h.get(&format!("/v1/responses/{first_id}")).await.0, 404, "store:false is not stored");

    // The connection still holds it: a store:false continuation works without any store.
    send(&mut socket, create("And Germany?", Some(&first_id), false)).await;
    let (second, _) = read_response(&mut socket).await;
    assert_eq!(terminal(&second)["status"], "completed");
    assert_eq!(terminal(&second)["previous_response_id"], first_id.as_str());
    let second_id = terminal(&second)["id"].as_str().expect("id").to_owned();

    // Only the most recent response is kept: the first one is gone now.
    send(&mut socket, create("And Spain?", Some(&first_id), false)).await;
    let rejection = next_frame(&mut socket).await;
    assert_rejection(&rejection, 400);
    assert_eq!(rejection["error"]["code"], "previous_response_not_found", "{rejection}");

    // A store:true continuation of it is stored with the connection-local history as its input,
    // so it can be continued over plain HTTP later.
    send(&mut socket, create("And Italy?", Some(&second_id), true)).await;
    let third_id = terminal(&read_response(&mut socket).await.0)["id"].as_str().expect("id").to_owned();
    let (status, _) = h.get(&format!("/v1/responses/{third_id}")).await;
    assert_eq!(status, 200);
    let (status, fourth) =
        h.create(json!({"model":"local","previous_response_id":third_id,"input":"And Spain?"})).await;
    assert_eq!((status, &fourth["status"]), (200, &json!("completed")), "{fourth}");

    let bodies = h.upstream_bodies("local");
    let conversation = |n: usize| -> Vec<String> {
        bodies[n]["messages"].as_array().expect("messages").iter().map(|m| m["content"].to_string()).collect()
    };
    assert_eq!(conversation(1).len(), 3, "France, Paris, Germany: {:?}", conversation(1));
    assert_eq!(conversation(3).len(), 7, "the whole conversation over HTTP: {:?}", conversation(3));
    assert!(conversation(3)[0].contains("France") && conversation(3)[6].contains("Spain"));
}

#[tokio::test]
async fn upgrade_needs_the_api_key_like_http() {
    let h = Harness::start_with(&["--api-key", "sk-ws"], &[]).await;
    for key in [None, Some("sk-wrong")] {
        match connect(&h, key).await {
            Err(tungstenite::Error::Http(response)) => {
                assert_eq!(response.status(), 401);
                let body: Value = serde_json::from_slice(response.body().as_deref().unwrap_or_default()).expect("JSON");
                assert_error_shape(&body);
                assert_eq!(body["error"]["type"], "authentication_error");
            }
            other => panic!("key {key:?}: expected a 401 before any upgrade, got {other:?}"),
        }
    }
    h.scenario("text", vec![Step::cassette(TEXT)]);
    let mut socket = connect(&h, Some("sk-ws")).await.expect("upgraded with the key");
    send(&mut socket, json!({"type":"response.create","model":"text","input":"x"})).await;
    assert_eq!(terminal(&read_response(&mut socket).await.0)["status"], "completed");
}

#[tokio::test]
async fn bad_frames_get_an_error_frame_and_the_connection_stays_usable() {
    let h = Harness::start().await;
    h.scenario("text", vec![Step::cassette(TEXT)]);
    let mut socket = connect(&h, None).await.expect("upgraded");

    socket.send(Message::text("{not json")).await.expect("sent");
    let frame = next_frame(&mut socket).await;
    assert_rejection(&frame, 400);
    assert!(frame["error"]["message"].as_str().unwrap().contains("not valid JSON"), "{frame}");

    send(&mut socket, json!({"type":"response.cancel"})).await;
    let frame = next_frame(&mut socket).await;
    assert_rejection(&frame, 400);
    assert_eq!(frame["error"]["param"], "type");

    send(&mut socket, json!({"type":"response.create","model":"text"})).await;
    let frame = next_frame(&mut socket).await;
    assert_rejection(&frame, 400);
    assert_eq!(frame["error"]["param"], "input");

    send(&mut socket, json!({"type":"response.create","model":"text","input":"x","previous_response_id":"resp_nope"}))
        .await;
    let frame = next_frame(&mut socket).await;
    assert_rejection(&frame, 400);
    assert_eq!(frame["error"]["code"], "previous_response_not_found");

    send(&mut socket, json!({"type":"response.create","model":"text","input":"x","background":true})).await;
    let frame = next_frame(&mut socket).await;
    assert_rejection(&frame, 400);
    assert_eq!(frame["error"]["param"], "background");

    send(&mut socket, json!({"type":"response.create","model":"text","input":"x","tool_choice":"required"})).await;
    assert_rejection(&next_frame(&mut socket).await, 422);

    send(&mut socket, json!({"type":"response.create","model":"text","input":"Capital of France?"})).await;
    let (events, _) = read_response(&mut socket).await;
    assert_eq!(terminal(&events)["status"], "completed");

    let text = h.metrics().await;
    let series = |status: &str| {
        format!(r#"gw_responses_http_requests_total{{method="WEBSOCKET",route="/v1/responses",status="{status}"}}"#)
    };
    assert_eq!(common::sample(&text, &series("200")), 1.0, "{text}");
    assert_eq!(common::sample(&text, &series("400")), 5.0, "{text}");
    assert_eq!(common::sample(&text, &series("422")), 1.0, "{text}");
    assert_eq!(
        common::sample(&text, r#"gw_responses_http_requests_total{method="GET",route="/v1/responses",status="101"}"#),
        1.0,
        "{text}"
    );
    assert_eq!(common::sample(&text, "gw_responses_http_in_flight_requests"), 0.0);
    assert_eq!(common::sample(&text, "gw_responses_sse_connections_in_flight"), 0.0);
}

#[tokio::test]
async fn a_second_create_while_one_runs_is_rejected_and_upstream_failures_end_like_sse() {
    let h = Harness::start_with(&["--upstream-timeout", "1"], &[]).await;
    let chunk = |text: &str| {
        format!("data: {}\n\n", json!({"choices":[{"index":0,"delta":{"content":text},"finish_reason":null}]}))
    };
    h.scenario("hang", vec![Step::Hang]);
    h.scenario("drop", vec![Step::SseThenDrop { chunks: vec![chunk("Hel"), chunk("lo")] }]);
    h.scenario("text", vec![Step::cassette(TEXT)]);
    let mut socket = connect(&h, None).await.expect("upgraded");

    // The upstream never answers, so the response is still running when the second frame comes.
    send(&mut socket, json!({"type":"response.create","model":"hang","input":"x"})).await;
    let created = next_frame(&mut socket).await;
    assert_eq!(created["type"], "response.created");
    send(&mut socket, json!({"type":"response.create","model":"text","input":"y"})).await;
    let (events, rejections) = read_rest_of_response(&mut socket, vec![created]).await;
    assert_eq!(rejections.len(), 1, "{rejections:#?}");
    assert_rejection(&rejections[0], 409);
    assert_eq!(rejections[0]["error"]["code"], "response_already_in_flight");
    // The running response went on to its own end, its numbering untouched by the rejection.
    assert_eq!(kinds(&events[events.len() - 2..]), ["error", "response.failed"]);
    assert_eq!(events[events.len() - 2]["error"]["code"], "upstream_timeout");
    assert!(h.upstream_bodies("text").is_empty(), "the rejected frame reached no model");

    // An upstream that breaks mid-stream: error + response.failed, as over SSE.
    send(&mut socket, json!({"type":"response.create","model":"drop","input":"x"})).await;
    let (events, _) = read_response(&mut socket).await;
    let k = kinds(&events);
    assert!(k.contains(&"response.output_text.delta"));
    assert_eq!(&k[k.len() - 2..], ["error", "response.failed"]);
    assert_eq!(events[k.len() - 2]["error"]["code"], "upstream_unavailable");

    // And the connection still serves the next response.
    send(&mut socket, json!({"type":"response.create","model":"text","input":"Capital of France?"})).await;
    assert_eq!(terminal(&read_response(&mut socket).await.0)["status"], "completed");
}

#[tokio::test]
async fn a_client_leaving_mid_response_cancels_the_upstream_call() {
    let h = Harness::start().await;
    let parts: Vec<String> = (0..40).map(|i| format!("part{i} ")).collect();
    h.scenario("slow", vec![Step::slow_text(&parts, Duration::from_millis(250))]);
    let mut socket = connect(&h, None).await.expect("upgraded");
    send(&mut socket, json!({"type":"response.create","model":"slow","input":"x"})).await;
    let mut response_id = None;
    loop {
        let frame = next_frame(&mut socket).await;
        if frame["type"] == "response.created" {
            response_id = frame["response"]["id"].as_str().map(str::to_owned);
        }
        if frame["type"] == "response.output_text.delta" {
            break;
        }
    }
    assert_eq!(h.upstream.unfinished_streams("slow"), 0, "the upstream is still streaming");
    drop(socket);

    let start = Instant::now();
    while h.upstream.unfinished_streams("slow") == 0 {
        assert!(start.elapsed() < Duration::from_secs(20), "the upstream stream was not cancelled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let id = response_id.expect("response.created came first");
    assert_eq!(h.get(&format!("/v1/responses/{id}")).await.0, 404, "a cancelled response is not stored");
    let text = h.metrics().await;
    assert_eq!(common::sample(&text, "gw_responses_sse_connections_in_flight"), 0.0, "{text}");
}

#[tokio::test]
async fn clients_that_do_not_upgrade_keep_using_http() {
    let h = Harness::start().await;
    let (status, body) = h.get("/v1/responses").await;
    assert_eq!(status, 405);
    assert_error_shape(&body);
    assert_eq!(body["error"]["code"], "method_not_allowed");
    // An upgrade request without a WebSocket key is a broken handshake, not WebSocket mode.
    let request = respgw_testkit::gateway::http_client()
        .get(h.url("/v1/responses"))
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13");
    let (status, body) = h.send(request).await;
    assert_eq!(status, 400);
    assert_error_shape(&body);
    h.scenario("text", vec![Step::cassette(TEXT)]);
    assert_eq!(h.create(json!({"model":"text","input":"x"})).await.0, 200);
}

#[tokio::test]
async fn sigterm_lets_the_running_response_finish_then_closes_going_away() {
    let h = Harness::start_with(&["--drain-timeout", "20"], &[]).await;
    let parts: Vec<String> = (0..6).map(|i| format!("part{i} ")).collect();
    h.scenario("slow", vec![Step::slow_text(&parts, Duration::from_millis(300))]);
    let mut idle = connect(&h, None).await.expect("upgraded");
    let mut busy = connect(&h, None).await.expect("upgraded");
    send(&mut busy, json!({"type":"response.create","model":"slow","input":"x"})).await;
    let created = next_frame(&mut busy).await;
    assert_eq!(created["type"], "response.created");

    kill(Pid::from_raw(h.gateway.pid() as libc::pid_t), Signal::SIGTERM).expect("SIGTERM to the gateway");
    let (events, _) = read_rest_of_response(&mut busy, vec![created]).await;
    assert_eq!(terminal(&events)["status"], "completed");
    assert!(terminal(&events)["output"][0]["content"][0]["text"].as_str().unwrap().contains("part5"));
    for socket in [&mut busy, &mut idle] {
        match tokio::time::timeout(FRAME_WAIT, socket.next()).await.expect("the gateway closes the socket") {
            Some(Ok(Message::Close(Some(frame)))) => {
                assert_eq!(frame.code, tungstenite::protocol::frame::coding::CloseCode::Away)
            }
            other => panic!("expected a close frame (going away), got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_frame_larger_than_the_body_limit_ends_only_its_connection() {
    let h = Harness::start_with(&["--max-body-mb", "1"], &[]).await;
    h.scenario("text", vec![Step::cassette(TEXT)]);
    let mut socket = connect(&h, None).await.expect("upgraded");
    let big = "x".repeat(2 * 1024 * 1024);
    let _ = socket.send(Message::text(json!({"type":"response.create","model":"text","input":big}).to_string())).await;
    match tokio::time::timeout(FRAME_WAIT, socket.next()).await.expect("the gateway ends the connection") {
        None | Some(Err(_)) | Some(Ok(Message::Close(_))) => {}
        Some(Ok(other)) => panic!("the oversized frame was answered: {other:?}"),
    }
    assert!(h.upstream_bodies("text").is_empty());
    let mut socket = connect(&h, None).await.expect("the gateway still upgrades");
    send(&mut socket, json!({"type":"response.create","model":"text","input":"x"})).await;
    assert_eq!(terminal(&read_response(&mut socket).await.0)["status"], "completed");
}

#[tokio::test]
async fn a_response_that_compacts_continues_from_its_compacted_window_on_the_connection() {
    let h = Harness::start().await;
    h.scenario(
        "compacting",
        vec![
            Step::text(&["The user asked about Paris."], "stop", None),
            Step::text(&["Paris."], "stop", None),
            Step::text(&["Berlin."], "stop", None),
        ],
    );
    let mut socket = connect(&h, None).await.expect("upgraded");
    send(
        &mut socket,
        json!({"type":"response.create","model":"compacting","store":false,"input":"Capital of France?",
               "context_management":[{"type":"compaction","compact_threshold":1}]}),
    )
    .await;
    let (events, _) = read_response(&mut socket).await;
    assert!(kinds(&events).contains(&"response.compaction.compacting"), "{:?}", kinds(&events));
    assert_eq!(terminal(&events)["output"][0]["type"], "compaction");
    let first_id = terminal(&events)["id"].as_str().expect("id").to_owned();

    send(
        &mut socket,
        json!({"type":"response.create","model":"compacting","store":false,"input":"And Germany?",
               "previous_response_id":first_id}),
    )
    .await;
    let (second, _) = read_response(&mut socket).await;
    assert_eq!(terminal(&second)["status"], "completed");
    let continued = &h.upstream_messages("compacting")[2];
    assert_eq!(common::turns(continued), ["user", "user", "assistant", "user"], "{continued:#?}");
    assert!(continued[1]["content"].as_str().is_some_and(|c| c.ends_with("\n\nThe user asked about Paris.")));
    assert_eq!(continued[2]["content"], "Paris.");
}

/// Frames until the gateway's close frame (pings are skipped, any other frame is a failure);
/// the close frame's code and reason.
async fn closed_by_gateway(socket: &mut Socket) -> (CloseCode, String) {
    loop {
        match tokio::time::timeout(FRAME_WAIT, socket.next()).await.expect("the gateway closes the socket") {
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(Message::Close(Some(frame)))) => return (frame.code, frame.reason.to_string()),
            other => panic!("expected a close frame, got {other:?}"),
        }
    }
}

/// One `store:false` response on `socket`, whose input is `input`; its id.
async fn unstored_response(socket: &mut Socket, model: &str, input: &str) -> String {
    send(socket, json!({"type":"response.create","model":model,"store":false,"input":input})).await;
    let (events, _) = read_response(socket).await;
    assert_eq!(terminal(&events)["status"], "completed");
    terminal(&events)["id"].as_str().expect("id").to_owned()
}

/// Continue `previous` with a `store:false` response on `socket`: the terminal event, or the
/// rejection frame.
async fn continue_unstored(socket: &mut Socket, model: &str, previous: &str) -> Value {
    send(
        socket,
        json!({"type":"response.create","model":model,"store":false,"input":"And then?","previous_response_id":previous}),
    )
    .await;
    let frame = next_frame(socket).await;
    if frame.get("status").is_some() {
        return frame;
    }
    let (events, _) = read_rest_of_response(socket, vec![frame]).await;
    events.last().expect("a terminal event").clone()
}

fn assert_unknown_previous_response(frame: &Value) {
    assert_rejection(frame, 400);
    assert_eq!(frame["error"]["code"], "previous_response_not_found", "{frame}");
    assert_eq!(frame["error"]["param"], "previous_response_id", "{frame}");
}

#[tokio::test]
async fn an_idle_websocket_is_closed_after_the_idle_timeout_counted_from_its_last_response() {
    let h = Harness::start_with(&["--websocket-idle-timeout", "1"], &[]).await;
    // A response of about 3 s: longer than the idle timeout, which does not run while it does.
    let parts: Vec<String> = (0..10).map(|i| format!("part{i} ")).collect();
    h.scenario("slow", vec![Step::slow_text(&parts, Duration::from_millis(300))]);
    let mut socket = connect(&h, None).await.expect("upgraded");
    send(&mut socket, json!({"type":"response.create","model":"slow","input":"x"})).await;
    let (events, _) = read_response(&mut socket).await;
    assert_eq!(terminal(&events)["status"], "completed");

    let idle_from = Instant::now();
    let (code, reason) = closed_by_gateway(&mut socket).await;
    assert_eq!(code, CloseCode::Away);
    assert!(reason.contains("Idle for 1 s"), "{reason}");
    assert!(idle_from.elapsed() >= Duration::from_millis(900), "closed after {:?}", idle_from.elapsed());

    // A socket that never started a response times out too.
    let mut silent = connect(&h, None).await.expect("upgraded");
    assert_eq!(closed_by_gateway(&mut silent).await.0, CloseCode::Away);
}

#[tokio::test]
async fn the_gateway_pings_open_websockets_and_keeps_those_that_answer() {
    let h = Harness::start_with(&["--websocket-ping-interval", "0.3"], &[]).await;
    h.scenario("text", vec![Step::cassette(TEXT)]);
    let mut socket = connect(&h, None).await.expect("upgraded");
    // Reading answers each ping (the client library replies on its own).
    let mut pings = 0;
    while pings < 5 {
        match tokio::time::timeout(FRAME_WAIT, socket.next()).await.expect("a ping in time") {
            Some(Ok(Message::Ping(_))) => pings += 1,
            other => panic!("expected a ping, got {other:?}"),
        }
    }
    send(&mut socket, json!({"type":"response.create","model":"text","input":"Capital of France?"})).await;
    assert_eq!(terminal(&read_response(&mut socket).await.0)["status"], "completed");
}

#[tokio::test]
async fn a_peer_that_answers_no_ping_is_closed() {
    let h = Harness::start_with(&["--websocket-ping-interval", "0.3"], &[]).await;
    let mut socket = connect(&h, None).await.expect("upgraded");
    // Not reading: the pings go unanswered.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (code, reason) = closed_by_gateway(&mut socket).await;
    assert_eq!(code, CloseCode::Away);
    assert_eq!(reason, "No answer to ping.");
}

#[tokio::test]
async fn a_conversation_larger_than_the_per_connection_bound_cannot_be_continued() {
    let h = Harness::start_with(&["--websocket-local-state-max-kb", "16"], &[]).await;
    h.scenario("local", vec![Step::text(&["Noted."], "stop", None); 3]);
    let mut socket = connect(&h, None).await.expect("upgraded");

    let small = unstored_response(&mut socket, "local", "A short question.").await;
    assert_eq!(continue_unstored(&mut socket, "local", &small).await["response"]["status"], "completed");

    let large = unstored_response(&mut socket, "local", &"x".repeat(32 * 1024)).await;
    assert_unknown_previous_response(&continue_unstored(&mut socket, "local", &large).await);
    assert_eq!(h.upstream_bodies("local").len(), 3, "the refused continuation never reached the model");
}

#[tokio::test]
async fn past_the_per_worker_bound_the_oldest_kept_conversation_cannot_be_continued() {
    // Three conversations of a little over 24 KiB each: two fit, the third pushes out the first.
    let h = Harness::start_with(&["--websocket-local-state-worker-max-kb", "64"], &[]).await;
    h.scenario("local", vec![Step::text(&["Noted."], "stop", None); 5]);
    let mut sockets = Vec::new();
    let mut ids = Vec::new();
    for n in 0..3 {
        let mut socket = connect(&h, None).await.expect("upgraded");
        ids.push(unstored_response(&mut socket, "local", &format!("{n}{}", "x".repeat(24 * 1024))).await);
        sockets.push(socket);
    }
    assert_unknown_previous_response(&continue_unstored(&mut sockets[0], "local", &ids[0]).await);
    for n in [1, 2] {
        let terminal = continue_unstored(&mut sockets[n], "local", &ids[n]).await;
        assert_eq!(terminal["response"]["status"], "completed", "{terminal}");
    }
}
