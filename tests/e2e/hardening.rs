//! The HTTP edge under hostile clients, on real sockets against the real binary: silent,
//! slow-header, idle and stalled-body connections are closed after their timeouts (set small
//! here by flag); the connection cap makes room by closing idle connections and answers 503 when
//! every connection is busy — idle WebSockets give way too, busy ones do not, and a tenant's
//! WebSockets count toward its limit; moving SSE streams, slow-but-moving uploads and open
//! WebSockets are left alone; metric labels stay within a fixed set; every error reply of the
//! gateway's own has the error shape, 405s list the route's methods, and non-JSON bodies get 415.

use crate::common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{ALPHA, BETA, Harness, assert_error_shape, two_tenants};
use futures::{SinkExt, StreamExt};
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use reqwest::Method;
use respgw_testkit::gateway::http_client;
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

const TEXT: &str = "chat_completion/text-single-stream.yaml";
/// Small timeouts for the tests, in seconds.
const HEADER_TIMEOUT: f64 = 1.0;
const IDLE_TIMEOUT: f64 = 2.0;
const BODY_TIMEOUT: f64 = 1.0;
/// Slack for a loaded machine on top of a timeout, when waiting for a close.
const SLACK: Duration = Duration::from_secs(2);

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// A gateway with the small timeouts above (and `extra` arguments).
async fn gateway(extra: &[&str]) -> Harness {
    let (header, idle, body) = (HEADER_TIMEOUT.to_string(), IDLE_TIMEOUT.to_string(), BODY_TIMEOUT.to_string());
    let mut args =
        vec!["--client-header-timeout", &header, "--client-idle-timeout", &idle, "--client-body-timeout", &body];
    args.extend_from_slice(extra);
    Harness::start_with(&args, &[]).await
}

fn address(h: &Harness) -> SocketAddr {
    h.gateway.base_url().trim_start_matches("http://").parse().expect("the gateway's address")
}

/// This test process opens thousands of sockets: raise its soft open-files limit to the hard one.
fn raise_open_files_limit() {
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
    {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

/// A reqwest client that keeps no idle connections (each request opens its own).
fn unpooled_client() -> reqwest::Client {
    let _ = http_client(); // installs the rustls provider reqwest needs
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("a client")
}

/// Read until the server closes the connection (everything it sent is returned), or `None` if it
/// is still open at `deadline`.
async fn read_until_closed(stream: &mut TcpStream, deadline: Instant) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline.into(), stream.read(&mut buffer)).await {
            Err(_still_open) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(received),
            Ok(Ok(n)) => received.extend_from_slice(&buffer[..n]),
        }
    }
}

/// Read one response (head and a `content-length` body) from a kept-alive connection.
async fn read_response(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer))
            .await
            .expect("a reply in time")
            .expect("the reply reads");
        assert!(n > 0, "closed before a whole reply: {}", String::from_utf8_lossy(&received));
        received.extend_from_slice(&buffer[..n]);
        let text = String::from_utf8_lossy(&received).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= length {
                return text;
            }
        }
    }
}

/// Send `bytes` one at a time, `pause` apart, until the server closes the connection (or all are
/// sent); returns how long the connection lasted.
async fn trickle(address: SocketAddr, bytes: &[u8], pause: Duration) -> Duration {
    let mut stream = TcpStream::connect(address).await.expect("connects");
    let started = Instant::now();
    for byte in bytes {
        if stream.write_all(&[*byte]).await.is_err() {
            return started.elapsed();
        }
        // A closed connection shows as a read of 0 before the next write can fail.
        let mut probe = [0u8; 256];
        match tokio::time::timeout(pause, stream.read(&mut probe)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
            _ => {}
        }
    }
    started.elapsed()
}

fn status_of(reply: &str) -> u16 {
    reply.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn json_body_of(reply: &str) -> Value {
    let body = reply.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    serde_json::from_str(body).unwrap_or_else(|_| panic!("a JSON body: {reply}"))
}

// ---- 1. slow and idle connections ---------------------------------------------------------

#[tokio::test]
async fn silent_and_slowloris_connections_neither_delay_requests_nor_stay_open() {
    raise_open_files_limit();
    // Requests must be answered long before the header timeout would have freed anything: 3 s
    // against 6 s leaves room for a loaded CI machine without letting a stalled server pass.
    let h = Harness::start_with(&["--client-header-timeout", "6"], &[]).await;
    h.scenario("m", vec![Step::cassette(TEXT)]);
    let address = address(&h);
    let mut silent = Vec::new();
    for _ in 0..2000 {
        silent.push(TcpStream::connect(address).await.expect("connects"));
    }
    let slow_head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let slowloris = tokio::spawn(trickle(address, slow_head, Duration::from_secs(1)));
    let client = unpooled_client();
    for _ in 0..3 {
        let started = Instant::now();
        let reply = client.get(h.url("/health")).send().await.expect("health answers");
        assert_eq!(reply.status(), 200);
        assert!(started.elapsed() < Duration::from_secs(3), "/health took {:?}", started.elapsed());
    }
    let started = Instant::now();
    let (status, body) = h.create(json!({"model": "m", "input": "hi"})).await;
    assert_eq!(status, 200, "{body}");
    assert!(started.elapsed() < Duration::from_secs(3), "POST /v1/responses took {:?}", started.elapsed());

    // The header timeout (6 s from acceptance) closes every silent connection…
    let deadline = Instant::now() + Duration::from_secs(6) + SLACK;
    for (i, stream) in silent.iter_mut().enumerate() {
        let closed = read_until_closed(stream, deadline).await;
        assert_eq!(closed.as_deref(), Some(&b""[..]), "silent connection {i} is still open");
    }
    // …and the slowloris client, although it still sends a byte a second.
    let lasted = slowloris.await.expect("the slowloris task");
    assert!(lasted < Duration::from_secs(6) + SLACK, "a slowloris connection lasted {lasted:?}");
}

#[tokio::test]
async fn silent_slow_header_idle_and_stalled_body_connections_are_closed_after_their_timeouts() {
    let h = gateway(&[]).await;
    let address = address(&h);

    // Silent: the header timeout, from acceptance.
    let mut silent = TcpStream::connect(address).await.expect("connects");
    let started = Instant::now();
    assert!(read_until_closed(&mut silent, started + secs(HEADER_TIMEOUT) + SLACK).await.is_some(), "silent");
    assert!(started.elapsed() >= secs(HEADER_TIMEOUT) - Duration::from_millis(100), "closed early");

    // Slow header, 4 bytes a second: the header timeout counts the whole head, not pauses.
    let lasted = trickle(address, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", Duration::from_millis(250)).await;
    assert!(lasted < secs(HEADER_TIMEOUT) + SLACK, "a trickled head lasted {lasted:?}");

    // Kept alive: requests spaced under the idle timeout keep it; then the idle timeout (longer
    // than the header timeout) closes it.
    let mut kept = TcpStream::connect(address).await.expect("connects");
    for _ in 0..3 {
        kept.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").await.expect("request sent");
        assert_eq!(status_of(&read_response(&mut kept).await), 200);
        tokio::time::sleep(secs(HEADER_TIMEOUT) + Duration::from_millis(300)).await;
    }
    kept.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").await.expect("request sent");
    assert_eq!(
        status_of(&read_response(&mut kept).await),
        200,
        "still open after pauses longer than the header timeout"
    );
    let idle_from = Instant::now();
    assert!(read_until_closed(&mut kept, idle_from + secs(IDLE_TIMEOUT) + SLACK).await.is_some(), "idle connection");
    assert!(idle_from.elapsed() >= secs(IDLE_TIMEOUT) - Duration::from_millis(100), "closed before the idle timeout");

    // Kept alive, then a trickled second head: the header timeout runs from its first byte.
    let mut second = TcpStream::connect(address).await.expect("connects");
    second.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").await.expect("request sent");
    read_response(&mut second).await;
    second.write_all(b"GET /hea").await.expect("first bytes sent");
    let first_byte = Instant::now();
    assert!(read_until_closed(&mut second, first_byte + secs(HEADER_TIMEOUT) + SLACK).await.is_some(), "second head");
    assert!(first_byte.elapsed() < secs(IDLE_TIMEOUT), "the header timeout, not the idle one, closed it");

    // Stalled body: 408 in the error shape, and the connection closes.
    let mut stalled = TcpStream::connect(address).await.expect("connects");
    stalled
        .write_all(b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\"")
        .await
        .expect("head and a piece of the body sent");
    let started = Instant::now();
    let reply = read_until_closed(&mut stalled, started + secs(BODY_TIMEOUT) + SLACK).await.expect("closed");
    let reply = String::from_utf8_lossy(&reply);
    assert_eq!(status_of(&reply), 408, "{reply}");
    assert!(reply.to_ascii_lowercase().contains("connection: close"), "{reply}");
    let body = json_body_of(&reply);
    assert_error_shape(&body);
    assert_eq!(body["error"]["code"], "request_timeout");
}

#[tokio::test]
async fn moving_streams_uploads_and_open_websockets_outlive_the_timeouts() {
    let h = gateway(&[]).await;
    // An SSE stream of 4 s with an event every 400 ms: longer than every timeout.
    let parts: Vec<String> = (0..10).map(|i| format!("part{i} ")).collect();
    h.scenario("slow", vec![Step::slow_text(&parts, Duration::from_millis(400))]);
    let started = Instant::now();
    let events = h.stream(json!({"model": "slow", "input": "hi"})).await;
    assert!(started.elapsed() > secs(IDLE_TIMEOUT) + secs(HEADER_TIMEOUT), "the stream was long enough");
    assert_eq!(common::final_response(&events)["status"], "completed");
    let text: String = events.iter().filter_map(|e| e["delta"].as_str()).collect();
    assert_eq!(text, parts.concat());

    // An upload that pauses under the body timeout between pieces, for longer than it in all.
    h.scenario("m", vec![Step::cassette(TEXT)]);
    let body = json!({"model": "m", "input": "hi"}).to_string().into_bytes();
    let mut upload = TcpStream::connect(address(&h)).await.expect("connects");
    let head = format!(
        "POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    upload.write_all(head.as_bytes()).await.expect("head sent");
    for piece in body.chunks(body.len().div_ceil(5)) {
        tokio::time::sleep(secs(BODY_TIMEOUT) / 2).await;
        upload.write_all(piece).await.expect("piece sent");
    }
    assert_eq!(status_of(&read_response(&mut upload).await), 200, "a slow but moving upload is served");

    // A WebSocket left quiet for longer than every timeout is still usable.
    let url = h.url("/v1/responses").replacen("http://", "ws://", 1);
    let request = url.into_client_request().expect("a WebSocket request");
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.expect("upgraded");
    tokio::time::sleep(secs(IDLE_TIMEOUT) + secs(HEADER_TIMEOUT) + Duration::from_millis(500)).await;
    h.scenario("ws", vec![Step::cassette(TEXT)]);
    let create = json!({"type": "response.create", "model": "ws", "input": "hi"});
    socket.send(Message::text(create.to_string())).await.expect("frame sent");
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(30), socket.next())
            .await
            .expect("a frame in time")
            .expect("the WebSocket is open")
            .expect("the frame reads");
        let Message::Text(text) = frame else { continue };
        let event: Value = serde_json::from_str(&text).expect("a JSON frame");
        if event["type"] == "response.completed" {
            break;
        }
        assert_ne!(event["type"], "error", "{event}");
    }
}

#[tokio::test]
async fn at_the_connection_cap_idle_connections_make_room_for_new_clients() {
    let h = Harness::start_with(&["--max-client-connections", "20", "--client-header-timeout", "60"], &[]).await;
    let address = address(&h);
    let mut silent = Vec::new();
    for _ in 0..40 {
        silent.push(TcpStream::connect(address).await.expect("connects"));
    }
    let started = Instant::now();
    let reply = unpooled_client().get(h.url("/health")).send().await.expect("health answers");
    assert_eq!(reply.status(), 200);
    // Far below the 60 s header timeout, with room for a loaded CI machine.
    assert!(started.elapsed() < Duration::from_secs(10), "/health took {:?}", started.elapsed());
    // The longest-idle connections were closed to admit the newer ones; the newest stay.
    let deadline = Instant::now() + SLACK;
    for (i, stream) in silent.iter_mut().enumerate().take(15) {
        assert!(read_until_closed(stream, deadline).await.is_some(), "old idle connection {i} still open");
    }
    for (i, stream) in silent.iter_mut().enumerate().skip(30) {
        assert!(read_until_closed(stream, Instant::now()).await.is_none(), "new connection {i} was closed");
    }
    assert!(h.wait_for_log("connection cap reached").await, "{}", h.gateway.stderr_text());
}

#[tokio::test]
async fn at_the_connection_cap_with_every_connection_busy_new_clients_get_503() {
    let h = Harness::start_with(&["--max-client-connections", "2"], &[]).await;
    let parts: Vec<String> = (0..10).map(|i| format!("part{i} ")).collect();
    h.scenario("slow", vec![Step::slow_text(&parts, Duration::from_millis(300)); 2]);
    let client = unpooled_client();
    let mut streams = Vec::new();
    for _ in 0..2 {
        let mut stream = client
            .post(h.url("/v1/responses"))
            .json(&json!({"model": "slow", "input": "hi", "stream": true}))
            .send()
            .await
            .expect("a stream starts");
        assert_eq!(stream.status(), 200);
        stream.chunk().await.expect("the stream moves").expect("a first chunk");
        streams.push(stream);
    }
    let busy = client.get(h.url("/health")).send().await.expect("a reply");
    assert_eq!(busy.status(), 503);
    assert_eq!(busy.headers()["retry-after"], "1");
    let body: Value = busy.json().await.expect("a JSON body");
    assert_error_shape(&body);
    assert_eq!(body["error"]["code"], "server_busy");
    for stream in streams {
        let text = stream.text().await.expect("the stream completes");
        assert!(text.contains("response.completed"), "{text}");
    }
    // Room again once the streams ended.
    let mut answered = false;
    for _ in 0..50 {
        if client.get(h.url("/health")).send().await.is_ok_and(|r| r.status() == 200) {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(answered, "no room after the streams ended");
}

// ---- 1b. idle WebSockets at the connection cap, WebSockets per tenant ---------------------

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

async fn websocket(h: &Harness, key: &str) -> Result<Socket, tokio_tungstenite::tungstenite::Error> {
    let url = h.url("/v1/responses").replacen("http://", "ws://", 1);
    let mut request = url.into_client_request()?;
    request.headers_mut().insert("authorization", format!("Bearer {key}").parse().expect("header value"));
    tokio_tungstenite::connect_async(request).await.map(|(socket, _)| socket)
}

/// The next JSON text frame (pings skipped); `None` when the gateway closes the socket, with
/// the close frame's code.
async fn next_event(socket: &mut Socket) -> Result<Value, Option<CloseCode>> {
    loop {
        match tokio::time::timeout(Duration::from_secs(30), socket.next()).await.expect("a frame in time") {
            Some(Ok(Message::Text(text))) => return Ok(serde_json::from_str(&text).expect("a JSON frame")),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(Message::Close(frame))) => return Err(frame.map(|f| f.code)),
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn at_the_connection_cap_idle_websockets_make_room_and_one_with_a_response_in_flight_stays() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let keys = two_tenants(dir.path(), "");
    let h = Harness::start_with(&["--max-client-connections", "4", "--api-keys-file", &keys], &[]).await;
    let parts: Vec<String> = (0..20).map(|i| format!("part{i} ")).collect();
    h.scenario("slow", vec![Step::slow_text(&parts, Duration::from_millis(300))]);
    h.scenario("m", vec![Step::cassette(TEXT); 3]);
    // Alpha holds every connection: the oldest busy with a response of about 6 s, three idle.
    let mut busy = websocket(&h, ALPHA).await.expect("upgraded");
    busy.send(Message::text(json!({"type":"response.create","model":"slow","input":"x"}).to_string()))
        .await
        .expect("frame sent");
    assert_eq!(next_event(&mut busy).await.expect("an event")["type"], "response.created");
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(websocket(&h, ALPHA).await.expect("upgraded"));
    }

    // Beta's requests are served, each on a connection of its own that it keeps open: each made
    // room by closing the longest-idle connection, the idle WebSockets first.
    let body = json!({"model": "m", "input": "hi"}).to_string();
    let request = format!(
        "POST /v1/responses HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {BETA}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut kept_alive = Vec::new();
    for _ in 0..3 {
        let mut stream = TcpStream::connect(address(&h)).await.expect("connects");
        stream.write_all(request.as_bytes()).await.expect("request sent");
        let reply = read_response(&mut stream).await;
        assert_eq!(status_of(&reply), 200, "{reply}");
        kept_alive.push(stream);
    }
    for socket in &mut idle {
        assert_eq!(next_event(socket).await.err(), Some(Some(CloseCode::Again)), "an idle WebSocket gave way");
    }
    // The WebSocket with a response in flight was never chosen: its response completes.
    loop {
        let event = next_event(&mut busy).await.expect("the busy WebSocket stays open");
        assert_ne!(event["type"], "error", "{event}");
        if event["type"] == "response.completed" {
            break;
        }
    }
}

#[tokio::test]
async fn a_tenants_open_websockets_count_toward_its_limit() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let keys = two_tenants(dir.path(), "max_websockets = 2");
    let h = Harness::start_with(&["--api-keys-file", &keys], &[]).await;
    let first = websocket(&h, ALPHA).await.expect("upgraded");
    let _second = websocket(&h, ALPHA).await.expect("upgraded");
    match websocket(&h, ALPHA).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 429);
            assert_eq!(response.headers()["retry-after"], "1");
            let body: Value = serde_json::from_slice(response.body().as_deref().unwrap_or_default()).expect("JSON");
            assert_error_shape(&body);
            assert_eq!(body["error"]["code"], "rate_limit_exceeded");
        }
        other => panic!("a third WebSocket of alpha's was not refused: {:?}", other.map(|_| "upgraded")),
    }
    let _beta = websocket(&h, BETA).await.expect("another tenant is unaffected");
    // A closed WebSocket frees its place (the gateway notices the close a moment later).
    drop(first);
    let started = Instant::now();
    while websocket(&h, ALPHA).await.is_err() {
        assert!(started.elapsed() < Duration::from_secs(20), "the closed WebSocket's place was not freed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---- 2. bounded metric labels -------------------------------------------------------------

/// Some pseudo-random lowercase letters (no crate needed for this).
fn random_word(seed: u64) -> String {
    use std::hash::{BuildHasher, RandomState};
    let mut x = RandomState::new().hash_one(seed);
    (0..8)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            char::from(b'a' + ((x >> 59) % 26) as u8)
        })
        .collect()
}

/// Series lines (not comments) in a Prometheus text exposition.
fn series(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' ').map(|(name, _)| name.to_owned()))
        .collect()
}

#[tokio::test]
async fn random_methods_and_paths_create_no_new_metric_series() {
    let h = Harness::start_with(&["--api-key", "k1"], &[]).await;
    let client = http_client();
    let mut seed = 0;
    let mut round = || {
        let mut requests = Vec::new();
        for _ in 0..8 {
            seed += 1;
            let word = random_word(seed);
            let method = Method::from_bytes(word.to_ascii_uppercase().as_bytes()).expect("a method token");
            for path in [
                "/v1/responses".to_owned(),
                format!("/v1/responses/{word}"),
                format!("/v1/responses/{word}/input_items"),
                format!("/v1/{word}"),
                format!("/{word}"),
            ] {
                for authenticated in [true, false] {
                    for method in [method.clone(), Method::DELETE] {
                        let mut request = client.request(method, h.url(&path));
                        if authenticated {
                            request = request.bearer_auth("k1");
                        }
                        requests.push(request);
                    }
                }
            }
        }
        requests
    };
    let mut counts = Vec::new();
    for _ in 0..3 {
        for request in round() {
            let status = request.send().await.expect("a reply").status();
            assert!(status.is_client_error(), "{status}");
        }
        counts.push(series(&h.metrics().await));
    }
    let new_after = |round: usize| counts[round].difference(&counts[0]).cloned().collect::<Vec<_>>();
    assert_eq!(new_after(1), Vec::<String>::new(), "new series after the first round");
    assert_eq!(new_after(2), Vec::<String>::new(), "new series after the second round");
    assert!(counts[0].iter().any(|s| s.contains("method=\"OTHER\"")), "{:#?}", counts[0]);
    assert!(counts[0].iter().any(|s| s.contains("route=\"other\"")), "{:#?}", counts[0]);
}

// ---- 3. error bodies ----------------------------------------------------------------------

#[tokio::test]
async fn error_replies_of_the_gateway_have_the_error_shape() {
    let h = Harness::start().await;
    let client = http_client();
    for (method, path, status) in [
        (Method::POST, "/health", 405),
        (Method::POST, "/metrics", 405),
        (Method::GET, "/v1/responses/%FF", 400),
        (Method::DELETE, "/v1/responses/%FF", 400),
        (Method::GET, "/v1/responses/%FF/input_items", 400),
        (Method::GET, "/v1/mcp/servers/%FF/tools", 400),
        (Method::GET, "/v1/nope", 404),
    ] {
        let reply = client.request(method.clone(), h.url(path)).send().await.expect("a reply");
        assert_eq!(reply.status().as_u16(), status, "{method} {path}");
        assert_eq!(reply.headers()["content-type"], "application/json", "{method} {path}");
        let text = reply.text().await.expect("a body");
        let body: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{method} {path}: {text}"));
        assert_error_shape(&body);
    }
}

/// Replies hyper writes itself when a request cannot be parsed, before any handler runs: they
/// have an empty body and close the connection (the documented exceptions to the error shape).
#[tokio::test]
async fn unparsable_requests_are_refused_by_the_http_parser() {
    let h = Harness::start().await;
    let many_headers: String = (0..200).map(|i| format!("X-{i}: a\r\n")).collect();
    let long_uri = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(70_000));
    let cases: Vec<(String, u16)> = vec![
        ("POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}".into(), 400),
        ("GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n".into(), 400),
        (format!("GET /health HTTP/1.1\r\nHost: x\r\n{many_headers}\r\n"), 431),
        (long_uri, 414),
    ];
    for (request, status) in cases {
        let mut stream = TcpStream::connect(address(&h)).await.expect("connects");
        stream.write_all(request.as_bytes()).await.expect("request sent");
        let reply = read_until_closed(&mut stream, Instant::now() + Duration::from_secs(5)).await.expect("closed");
        let reply = String::from_utf8_lossy(&reply);
        assert_eq!(status_of(&reply), status, "{reply}");
        assert!(reply.to_ascii_lowercase().contains("content-length: 0"), "{reply}");
    }
}

// ---- 4. protocol edges --------------------------------------------------------------------

#[tokio::test]
async fn method_not_allowed_lists_the_routes_methods() {
    let h = Harness::start().await;
    let client = http_client();
    let methods = |list: &str| -> BTreeSet<String> { list.split(',').map(|m| m.trim().to_owned()).collect() };
    for (method, path, allowed) in [
        (Method::PATCH, "/health", "GET, HEAD"),
        (Method::PATCH, "/metrics", "GET, HEAD"),
        (Method::PATCH, "/v1/responses", "GET, POST"),
        (Method::GET, "/v1/responses", "GET, POST"),
        (Method::PUT, "/v1/responses/resp_x", "GET, HEAD, DELETE"),
        (Method::POST, "/v1/responses/resp_x/input_items", "GET, HEAD"),
        (Method::POST, "/v1/mcp/servers", "GET, HEAD"),
        (Method::POST, "/v1/mcp/servers/x/tools", "GET, HEAD"),
        (Method::POST, "/v1/models", "GET, HEAD"),
        (Method::GET, "/v1/chat/completions", "POST"),
    ] {
        let reply = client.request(method.clone(), h.url(path)).send().await.expect("a reply");
        assert_eq!(reply.status(), 405, "{method} {path}");
        let allow = reply.headers().get("allow").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        assert_eq!(methods(&allow), methods(allowed), "Allow of {method} {path}");
        let body: Value = reply.json().await.expect("a JSON body");
        assert_error_shape(&body);
        assert_eq!(body["error"]["code"], "method_not_allowed");
    }
}

#[tokio::test]
async fn bodies_not_declared_as_json_get_415() {
    let h = Harness::start().await;
    let client = http_client();
    let body = json!({"model": "m", "input": "hi"}).to_string();
    for content_type in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"] {
        let reply = client
            .post(h.url("/v1/responses"))
            .header("content-type", content_type)
            .body(body.clone())
            .send()
            .await
            .expect("a reply");
        assert_eq!(reply.status(), 415, "{content_type}");
        let error: Value = reply.json().await.expect("a JSON body");
        assert_error_shape(&error);
        assert_eq!(error["error"]["type"], "invalid_request_error");
        assert_eq!(error["error"]["code"], "unsupported_media_type");
        let message = error["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("application/json"), "{message}");
    }
    for content_type in [None, Some("application/json; charset=utf-8"), Some("application/vnd.example+json")] {
        h.scenario("m", vec![Step::cassette(TEXT)]);
        let mut request = client.post(h.url("/v1/responses")).body(body.clone());
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        let reply = request.send().await.expect("a reply");
        assert_eq!(reply.status(), 200, "{content_type:?}");
    }
    // Chat completions are forwarded as they are, content type included.
    h.scenario("chat", vec![Step::cassette(TEXT)]);
    let chat = json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "stream": true});
    let reply = client
        .post(h.url("/v1/chat/completions"))
        .header("content-type", "text/plain")
        .body(chat.to_string())
        .send()
        .await
        .expect("a reply");
    assert_eq!(reply.status(), 200);
    let received = h.upstream.requests("chat");
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].headers["content-type"], "text/plain");
}
