//! web_search end to end: the real gateway runs the tool's actions against loopback fixtures that
//! speak each backend's wire format (DuckDuckGo's HTML result page, SearXNG's JSON, Brave's JSON,
//! an MCP server standing in for Exa) and serve pages (one in windows-1252, a huge one, redirects
//! to private addresses). The replay upstream drives the tool calls with scripted steps shaped
//! like recorded streams; items and events are compared with the reference API's cassettes.

use crate::common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use common::{Harness, assert_append_only, assert_results_follow_their_calls, final_response, kinds, turns};
use respgw_testkit::cassette::Cassette;
use respgw_testkit::sse::parse_sse;
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

const BRAVE_KEY: &str = "brave-test-key";

/// What a fixture server saw: `path?query` of each request, and Brave's token header.
type Seen = Arc<Mutex<Vec<String>>>;

/// The backends' and pages' loopback server.
struct Fixture {
    base: String,
    seen: Seen,
    /// A second server that must never be reached (the target of refused redirects).
    trap_port: u16,
    trap_seen: Seen,
}

impl Fixture {
    async fn start() -> Fixture {
        let (trap_port, trap_seen) = serve(None).await;
        let (port, seen) = serve(Some(trap_port)).await;
        Fixture { base: format!("http://127.0.0.1:{port}"), seen, trap_port, trap_seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().expect("lock").clone()
    }
}

/// Serve the fixture routes (or, without a trap port, a trap that only records) on a free port.
async fn serve(trap_port: Option<u16>) -> (u16, Seen) {
    let seen: Seen = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let app = axum::Router::new().fallback(route).with_state((seen.clone(), trap_port, port));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, seen)
}

async fn route(State((seen, trap_port, port)): State<(Seen, Option<u16>, u16)>, request: Request) -> Response {
    let uri = request.uri().clone();
    let query: Vec<(String, String)> = uri.query().map(url_pairs).unwrap_or_default();
    let param = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()).unwrap_or_default();
    let headers: HeaderMap = request.headers().clone();
    let token = headers.get("x-subscription-token").and_then(|v| v.to_str().ok()).unwrap_or("-").to_owned();
    seen.lock().expect("lock").push(format!("{} token={token}", uri));
    let Some(trap_port) = trap_port else { return (StatusCode::OK, "trapped").into_response() };
    let base = format!("http://127.0.0.1:{port}");
    let html = |body: Vec<u8>, charset: &str| {
        ([(header::CONTENT_TYPE, format!("text/html; charset={charset}"))], body).into_response()
    };
    let json_reply = |status: StatusCode, value: Value| {
        (status, [(header::CONTENT_TYPE, "application/json")], value.to_string()).into_response()
    };
    match uri.path() {
        // DuckDuckGo's HTML endpoint: an ad, a redirect-wrapped result, a direct result.
        "/ddg/html/" => {
            let target = format!("{base}/pages/vllm");
            let wrapped: String = url_encode(&target);
            html(
                format!(
                    r#"<!DOCTYPE html><html><body><div id="links" class="results">
                    <div class="result results_links results_links_deep result--ad"><div class="links_main links_deep result__body">
                      <h2 class="result__title"><a rel="nofollow" class="result__a" href="https://duckduckgo.com/y.js?ad_domain=ads.example">Sponsored</a></h2></div></div>
                    <div class="result results_links results_links_deep web-result"><div class="links_main links_deep result__body">
                      <h2 class="result__title"><a rel="nofollow" class="result__a" href="//duckduckgo.com/l/?uddg={wrapped}&amp;rut=abc">vLLM <b>docs</b></a></h2>
                      <a class="result__snippet" href="//duckduckgo.com/l/?uddg={wrapped}">Welcome to <b>vLLM</b>: easy, fast serving.</a></div></div>
                    <div class="result results_links results_links_deep web-result"><div class="links_main links_deep result__body">
                      <h2 class="result__title"><a rel="nofollow" class="result__a" href="https://github.com/vllm-project/vllm">GitHub - vllm-project/vllm</a></h2>
                      <a class="result__snippet" href="https://github.com/vllm-project/vllm">A high-throughput engine. q={q}</a></div></div>
                    </div></body></html>"#,
                    q = param("q")
                )
                .into_bytes(),
                "utf-8",
            )
        }
        // SearXNG answers JSON only when asked for it (403 otherwise, like an instance without it).
        "/searxng/search" if param("format") == "json" => json_reply(
            StatusCode::OK,
            json!({"query": param("q"), "number_of_results": 1, "results": [
                {"url": "https://searxng.example/hit", "title": format!("SearXNG hit for {}", param("q")),
                 "content": "From the JSON API.", "engine": "duckduckgo", "score": 1.0}]}),
        ),
        "/searxng/search" => (StatusCode::FORBIDDEN, "format not allowed").into_response(),
        "/brave/search" if token != BRAVE_KEY => json_reply(
            StatusCode::UNAUTHORIZED,
            json!({"type": "ErrorResponse", "error": {"code": "SUBSCRIPTION_TOKEN_INVALID", "status": 401}}),
        ),
        "/brave/search" if param("q") == "outage" => (StatusCode::SERVICE_UNAVAILABLE, "down").into_response(),
        "/brave/search" => json_reply(
            StatusCode::OK,
            json!({"type": "search", "query": {"original": param("q")}, "web": {"type": "search", "results": [
                {"title": format!("Brave hit for {}", param("q")), "url": "https://brave.example/hit",
                 "description": format!("<strong>{}</strong> described", param("q")), "language": "en"}]}}),
        ),
        // A page in windows-1252 (é is 0xE9), declared only in the HTTP header.
        "/pages/vllm" => {
            let mut body = b"<html><head><title>vLLM - Easy, fast LLM serving</title></head><body><nav>Menu</nav>\
                <h1>vLLM</h1><p>vLLM is a fast library for LLM inference. Caf"
                .to_vec();
            body.push(0xE9);
            body.extend_from_slice(
                b" included.</p><p>PagedAttention is best for memory efficiency.</p>\
                <script>var tracking = 1;</script></body></html>",
            );
            html(body, "windows-1252")
        }
        "/pages/huge" => {
            let mut body = b"<html><body><p>".to_vec();
            body.extend(std::iter::repeat_n(b"lorem ipsum ".as_slice(), 300_000).flatten());
            html(body, "utf-8")
        }
        "/pages/to-metadata" => redirect("http://169.254.169.254/latest/meta-data/"),
        "/pages/to-localhost" => redirect(&format!("http://localhost:{trap_port}/secret")),
        _ => (StatusCode::NOT_FOUND, "no such fixture").into_response(),
    }
}

fn redirect(to: &str) -> Response {
    (StatusCode::FOUND, [(header::LOCATION, to.to_owned())], "").into_response()
}

fn url_pairs(query: &str) -> Vec<(String, String)> {
    query.split('&').filter_map(|pair| pair.split_once('=')).map(|(k, v)| (decode(k), decode(v))).collect()
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap_or(b'?'));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// One scripted model turn calling `web_search` with these arguments (in parallel), chunked like
/// the recorded streams: the name first with empty arguments, then the arguments, then
/// `finish_reason: tool_calls`, usage and `[DONE]`.
fn web_search_calls(calls: &[Value]) -> Step {
    let chunk = |delta: Value, finish: Value| {
        json!({"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",
               "choices":[{"index":0,"delta":delta,"finish_reason":finish}]})
    };
    let mut events = vec![chunk(json!({"role":"assistant","content":""}), Value::Null)];
    for (i, arguments) in calls.iter().enumerate() {
        events.push(chunk(
            json!({"tool_calls":[{"id":format!("call_ws{i}"),"type":"function","index":i,
                                   "function":{"name":"web_search","arguments":""}}]}),
            Value::Null,
        ));
        events.push(chunk(
            json!({"tool_calls":[{"index":i,"function":{"arguments":arguments.to_string()}}]}),
            Value::Null,
        ));
    }
    events.push(chunk(json!({}), json!("tool_calls")));
    events.push(json!({"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],
                       "usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}));
    let mut chunks: Vec<String> = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    chunks.push("data: [DONE]\n\n".to_owned());
    Step::Sse(chunks)
}

/// The tool results (parsed) the model was sent in the upstream request `n` (0-based).
fn tool_results(h: &Harness, model: &str, n: usize) -> Vec<Value> {
    let bodies = h.upstream_bodies(model);
    bodies[n]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| serde_json::from_str(m["content"].as_str().expect("text")).expect("JSON result"))
        .collect()
}

/// The reference API's web_search stream: its events as JSON.
fn reference_events() -> Vec<Value> {
    let cassette =
        Cassette::load(respgw_testkit::cassettes_dir().join("responses/builtin-tool-web_search-stream.yaml"))
            .expect("cassette");
    let raw = String::from_utf8(cassette.sse_bytes().expect("a stream")).expect("utf-8");
    parse_sse(&raw).expect("events").iter().filter_map(|e| serde_json::from_str(&e.data).ok()).collect()
}

/// The events of one item, by id (item events carry `item_id`, item frames `item.id`).
fn item_events<'a>(events: &'a [Value], id: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["item_id"] == id || e["item"]["id"] == id).collect()
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default()
}

fn web_search_tool() -> Value {
    json!({"type": "web_search"})
}

#[tokio::test]
async fn search_open_page_and_find_in_page_stream_like_the_reference_api() {
    let fixture = Fixture::start().await;
    let ddg = format!("{}/ddg/html/", fixture.base);
    let h = Harness::start_with(
        &["--web-search-profile", "duckduckgo_plus_fetch", "--web-search-duckduckgo-url", &ddg],
        &[("GW_WEB_SEARCH_ALLOW_PRIVATE_ADDRESSES", "true")],
    )
    .await;
    let page = format!("{}/pages/vllm", fixture.base);
    h.scenario(
        "ws",
        vec![
            // The synthetic recording: `{"action": "search", "query": "vllm docs"}`.
            Step::cassette("synthetic/zz-ws-step1-stream.yaml"),
            web_search_calls(&[json!({"action": "open_page", "url": page})]),
            web_search_calls(&[json!({"action": "find_in_page", "url": page, "pattern": "IS BEST FOR"})]),
            Step::text(
                &[
                    "vLLM serves fast. ",
                    "([127.0.0.1](",
                    page.as_str(),
                    "))",
                    " Also ",
                    "[GitHub](https://example.com/).",
                ],
                "stop",
                Some((40, 12)),
            ),
            Step::text(&["Again."], "stop", None),
        ],
    );
    let events = h
        .stream_unchecked(json!({"model": "ws", "input": "find vllm docs", "tools": [web_search_tool()],
                                 "include": ["web_search_call.action.sources"]}))
        .await;
    let response = final_response(&events);
    assert_eq!(response["status"], "completed", "{response:#}");

    // Every web_search_call goes through the reference API's sequence, with its payload keys.
    let reference = reference_events();
    let reference_ws = reference
        .iter()
        .find(|e| e["type"] == "response.output_item.added" && e["item"]["type"] == "web_search_call")
        .expect("the reference has a web_search_call");
    let reference_seq = item_events(&reference, reference_ws["item"]["id"].as_str().unwrap());
    let calls: Vec<&Value> =
        response["output"].as_array().unwrap().iter().filter(|i| i["type"] == "web_search_call").collect();
    assert_eq!(calls.len(), 3);
    for call in &calls {
        let ours = item_events(&events, call["id"].as_str().unwrap());
        assert_eq!(
            kinds(&ours.iter().map(|e| (*e).clone()).collect::<Vec<_>>()),
            kinds(&reference_seq.iter().map(|e| (*e).clone()).collect::<Vec<_>>())
        );
        for (mine, theirs) in ours.iter().zip(&reference_seq) {
            assert_eq!(keys(mine), keys(theirs), "{mine}");
            assert_eq!(keys(&mine["item"]), keys(&theirs["item"]), "{mine}");
        }
        assert!(call["id"].as_str().unwrap().starts_with("ws_"));
        assert_eq!(call["status"], "completed");
        assert!(call.get("model_result").is_none(), "the model's result is never shown: {call}");
    }
    assert_eq!(
        calls[0]["action"],
        json!({"type": "search", "query": "vllm docs", "queries": ["vllm docs"], "sources": [
            {"type": "url", "url": page}, {"type": "url", "url": "https://github.com/vllm-project/vllm"}]})
    );
    assert_eq!(calls[1]["action"], json!({"type": "open_page", "url": page}));
    assert_eq!(calls[2]["action"], json!({"type": "find_in_page", "url": page, "pattern": "IS BEST FOR"}));

    // The model got DuckDuckGo's results (ad skipped, redirect unwrapped), the page as text in its
    // declared charset, and the match with its context.
    let results = &tool_results(&h, "ws", 1)[0];
    assert_eq!(
        results["results"][0],
        json!({"url": page, "title": "vLLM docs", "snippet": "Welcome to vLLM: easy, fast serving."})
    );
    assert_eq!(results["results"].as_array().unwrap().len(), 2);
    let opened = &tool_results(&h, "ws", 2)[1]["page"];
    assert_eq!(opened["title"], "vLLM - Easy, fast LLM serving");
    let text = opened["text"].as_str().unwrap();
    assert!(text.contains("Café included.") && !text.contains("tracking"), "{text}");
    let found = &tool_results(&h, "ws", 3)[2];
    assert_eq!(found["matches"].as_array().unwrap().len(), 1, "{found}");
    assert!(found["matches"][0]["text"].as_str().unwrap().contains("PagedAttention is best for memory"), "{found}");
    assert!(
        fixture
            .seen()
            .iter()
            .any(|s| s.starts_with("/ddg/html/?q=vllm+docs") || s.starts_with("/ddg/html/?q=vllm%20docs")),
        "{:?}",
        fixture.seen()
    );

    // The answer cites the opened page (the link and its parentheses), like the reference API;
    // a link to a page web_search never showed is not a citation.
    let message = response["output"].as_array().unwrap().iter().find(|i| i["type"] == "message").unwrap();
    let answer = message["content"][0]["text"].as_str().unwrap();
    let annotations = message["content"][0]["annotations"].as_array().unwrap();
    assert_eq!(annotations.len(), 1, "{annotations:?}");
    let (start, end) = (
        annotations[0]["start_index"].as_u64().unwrap() as usize,
        annotations[0]["end_index"].as_u64().unwrap() as usize,
    );
    let span: String = answer.chars().skip(start).take(end - start).collect();
    assert_eq!(span, format!("([127.0.0.1]({page}))"));
    assert_eq!(annotations[0]["title"], "vLLM - Easy, fast LLM serving");
    let added: Vec<&Value> = events.iter().filter(|e| e["type"] == "response.output_text.annotation.added").collect();
    assert_eq!(added.len(), 1);
    assert_eq!(added[0]["annotation"], annotations[0]);
    let reference_added = reference.iter().find(|e| e["type"] == "response.output_text.annotation.added").unwrap();
    assert_eq!(keys(added[0]), keys(reference_added));
    assert_eq!(keys(&added[0]["annotation"]), keys(&reference_added["annotation"]));
    // Sent once the citation was complete: after the delta closing it, before the text is done.
    let at = |kind: &str| events.iter().position(|e| e["type"] == kind).unwrap();
    let closing = events.iter().position(|e| e["type"] == "response.output_text.delta" && e["delta"] == "))").unwrap();
    assert!(
        closing < at("response.output_text.annotation.added")
            && at("response.output_text.annotation.added") < at("response.output_text.done")
    );

    // A continuation replays the calls with the very results the model saw (kept in the store,
    // never shown to clients).
    let (status, _) = h
        .create(json!({"model": "ws", "input": "again", "previous_response_id": response["id"], "tools": [web_search_tool()]}))
        .await;
    assert_eq!(status, 200);
    let replayed = tool_results(&h, "ws", 4);
    assert_eq!(replayed.len(), 3);
    assert_eq!(replayed[..], tool_results(&h, "ws", 3)[..]);
    let (_, stored) = h.get(&format!("/v1/responses/{}", response["id"].as_str().unwrap())).await;
    assert!(!stored.to_string().contains("model_result"), "{stored}");

    let text = h.metrics().await;
    for series in [
        r#"gw_responses_tool_calls_requested_total{tool_type="web_search"} 3"#,
        r#"gw_responses_tool_calls_executed_total{tool_type="web_search"} 3"#,
        r#"gw_responses_tool_execution_duration_seconds_count{tool_type="web_search"} 3"#,
    ] {
        assert!(text.contains(series), "missing {series}\n{text}");
    }
    assert!(!text.contains(r#"gw_responses_tool_errors_total{tool_type="web_search"}"#));
}

#[tokio::test]
async fn each_search_round_is_its_own_assistant_turn_in_every_later_request() {
    let fixture = Fixture::start().await;
    let ddg = format!("{}/ddg/html/", fixture.base);
    let h = Harness::start_with(
        &["--web-search-profile", "duckduckgo_plus_fetch", "--web-search-duckduckgo-url", &ddg],
        &[("GW_WEB_SEARCH_ALLOW_PRIVATE_ADDRESSES", "true")],
    )
    .await;
    let page = format!("{}/pages/vllm", fixture.base);
    h.scenario(
        "turns",
        vec![
            web_search_calls(&[json!({"action": "search", "query": "vllm docs"})]),
            web_search_calls(&[json!({"action": "open_page", "url": page})]),
            Step::text(&["vLLM is fast."], "stop", None),
            Step::text(&["Again."], "stop", None),
            Step::text(&["Again."], "stop", None),
        ],
    );
    let (status, response) =
        h.create(json!({"model": "turns", "input": "find vllm docs", "tools": [web_search_tool()]})).await;
    assert_eq!(status, 200, "{response}");

    // Round 2 sees the search and its result; round 3 the search, its result, then the opened
    // page and its result: the model's turns as it took them.
    let sent = h.upstream_messages("turns");
    assert_eq!(sent.len(), 3);
    assert_eq!(turns(&sent[1]), ["user", "assistant(web_search)", "tool"]);
    assert_eq!(turns(&sent[2]), ["user", "assistant(web_search)", "tool", "assistant(web_search)", "tool"]);
    let action = |m: &Value| {
        let arguments = m["tool_calls"][0]["function"]["arguments"].as_str().expect("arguments");
        serde_json::from_str::<Value>(arguments).expect("JSON arguments")["action"].clone()
    };
    assert_eq!((action(&sent[2][1]), action(&sent[2][3])), (json!("search"), json!("open_page")));
    assert_results_follow_their_calls(&sent[2]);
    assert_append_only(&sent);

    // A continuation starts with the last round's messages and the answer.
    let (status, _) = h
        .create(json!({"model": "turns", "input": "again", "previous_response_id": response["id"],
                       "tools": [web_search_tool()]}))
        .await;
    assert_eq!(status, 200);
    let sent = h.upstream_messages("turns");
    let mut expected = sent[2].clone();
    expected.push(json!({"role": "assistant", "content": "vLLM is fast."}));
    expected.push(json!({"role": "user", "content": "again"}));
    assert_eq!(sent[3], expected);
    assert_append_only(&sent[..4]);

    // A stateless client sending the output back gets the same turns; only the results differ,
    // as the result web_search gave the model is never shown to clients.
    let mut input = vec![json!({"role": "user", "content": "find vllm docs"})];
    input.extend(response["output"].as_array().expect("output").iter().cloned());
    input.push(json!({"role": "user", "content": "again"}));
    let (status, _) =
        h.create(json!({"model": "turns", "input": input, "store": false, "tools": [web_search_tool()]})).await;
    assert_eq!(status, 200);
    let sent = h.upstream_messages("turns");
    let without_results = |messages: &[Value]| -> Vec<Value> {
        messages
            .iter()
            .map(|m| {
                let mut m = m.clone();
                if m["role"] == "tool" {
                    m["content"] = Value::Null;
                }
                m
            })
            .collect()
    };
    assert_eq!(without_results(&sent[4]), without_results(&sent[3]));
}

#[tokio::test]
async fn open_page_keeps_to_the_address_rules_the_size_limit_and_allowed_domains() {
    let fixture = Fixture::start().await;
    // The address rules are on; only the fixture's own host is exempt, so the redirects it sends
    // to a metadata address and to localhost are what the rules must stop.
    let h = Harness::start_with(
        &[
            "--web-search-profile",
            "duckduckgo_plus_fetch",
            "--web-search-fetch-exempt-host",
            "127.0.0.1",
            "--web-search-fetch-max-kb",
            "64",
        ],
        &[],
    )
    .await;
    let base = &fixture.base;
    let trap = format!("http://localhost:{}/direct", fixture.trap_port);
    h.scenario(
        "guard",
        vec![
            web_search_calls(&[
                json!({"action": "open_page", "url": format!("{base}/pages/to-metadata")}),
                json!({"action": "open_page", "url": format!("{base}/pages/to-localhost")}),
                json!({"url": trap}),
                json!({"action": "open_page", "url": format!("{base}/pages/huge")}),
                json!({"pattern": "vLLM", "url": format!("{base}/pages/vllm")}),
                json!({"action": "open_page", "url": "https://example.com/"}),
            ]),
            Step::text(&["Done."], "stop", None),
        ],
    );
    let (status, body) = h
        .create(json!({"model": "guard", "input": "open them", "store": false,
                       "tools": [{"type": "web_search", "filters": {"allowed_domains": ["127.0.0.1", "localhost"]}}]}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "completed");
    let calls: Vec<&Value> =
        body["output"].as_array().unwrap().iter().filter(|i| i["type"] == "web_search_call").collect();
    assert_eq!(calls.len(), 6);
    assert!(calls.iter().all(|c| c["status"] == "completed"), "a failed action still completes its item");
    assert_eq!(
        calls[2]["action"],
        json!({"type": "open_page", "url": trap}),
        "the action is inferred from the arguments"
    );
    assert_eq!(calls[4]["action"]["type"], "find_in_page");

    let results = tool_results(&h, "guard", 1);
    let error =
        |i: usize| results[i]["error"].as_str().unwrap_or_else(|| panic!("no error: {}", results[i])).to_owned();
    assert!(error(0).contains("169.254.169.254") && error(0).contains("the address is not allowed"), "{}", error(0));
    assert!(!error(0).contains("link-local"), "the model is not told why an address is refused: {}", error(0));
    assert!(error(1).contains("localhost"), "{}", error(1));
    assert!(error(2).contains("localhost"), "{}", error(2));
    assert!(fixture.trap_seen.lock().unwrap().is_empty(), "no refused target was ever contacted");
    let huge = &results[3]["page"];
    assert_eq!(huge["truncated"], true, "{huge}");
    assert_eq!(huge["text"].as_str().unwrap().chars().count(), 20_000, "medium context shows 20k characters");
    assert!(error(4).contains("not available in the request-local web_search page cache"), "{}", error(4));
    assert!(error(5).contains("allowed_domains"), "{}", error(5));

    let text = h.metrics().await;
    assert!(text.contains(r#"gw_responses_tool_calls_executed_total{tool_type="web_search"} 6"#), "{text}");
    assert!(text.contains(r#"gw_responses_tool_errors_total{tool_type="web_search"} 5"#), "{text}");
}

/// A binary built next to `respgw` by `cargo test --workspace` / `cargo build --workspace --bins`.
fn sibling_bin(name: &str) -> PathBuf {
    let bin = common::respgw_bin().with_file_name(name);
    assert!(bin.exists(), "{} is missing: run `cargo build --workspace --bins` first", bin.display());
    bin
}

/// The Exa stand-in (`respgw-mcp-test-http --exa`) on a free port; killed on drop.
struct ExaStandIn(Child, String);

impl ExaStandIn {
    fn start() -> ExaStandIn {
        let mut child = Command::new(sibling_bin("respgw-mcp-test-http"))
            .args(["--port", "0", "--exa"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the Exa stand-in starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("its first line");
        let base = line.trim().strip_prefix("listening on ").expect("its address").to_owned();
        ExaStandIn(child, base)
    }
}

impl Drop for ExaStandIn {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn searxng_brave_and_exa_profiles_speak_their_wire_formats() {
    let fixture = Fixture::start().await;
    let exa = ExaStandIn::start();
    let searxng_url = format!("{}/searxng", fixture.base);
    let brave_url = format!("{}/brave/search", fixture.base);
    let exa_url = format!("{}/mcp?tools=web_search_exa,crawling_exa", exa.1);
    // (profile, flags, environment)
    let profiles = [
        ("searxng", vec!["--web-search-searxng-url", searxng_url.as_str()], vec![]),
        ("brave", vec!["--web-search-brave-url", brave_url.as_str()], vec![("BRAVE_API_KEY", BRAVE_KEY)]),
        ("exa_mcp", vec!["--web-search-exa-mcp-url", exa_url.as_str()], vec![("EXA_API_KEY", "exa-test-key")]),
    ];
    for (profile, flags, env) in profiles {
        let mut args = vec!["--web-search-profile", profile];
        args.extend(flags);
        let h = Harness::start_with(&args, &env).await;
        let mut calls =
            vec![json!({"action": "search", "query": "vllm"}), json!({"action": "search", "query": "outage"})];
        if profile == "exa_mcp" {
            // Exa opens pages itself (crawling_exa).
            calls.push(json!({"action": "open_page", "url": "https://docs.vllm.ai/en/latest/"}));
        }
        h.scenario("b", vec![web_search_calls(&calls), Step::text(&["Done."], "stop", None)]);
        let tools = if profile == "exa_mcp" {
            json!([{"type": "web_search", "filters": {"allowed_domains": ["docs.vllm.ai"]}, "search_context_size": "low"}])
        } else {
            json!([web_search_tool()])
        };
        let (status, body) = h.create(json!({"model": "b", "input": "search", "tools": tools})).await;
        assert_eq!((status, body["status"].as_str()), (200, Some("completed")), "{profile}: {body}");
        let calls: Vec<&Value> =
            body["output"].as_array().unwrap().iter().filter(|i| i["type"] == "web_search_call").collect();
        assert!(calls.iter().all(|c| c["status"] == "completed"), "{profile}: {body}");
        assert!(calls[0]["action"].get("sources").is_none(), "sources only with the include: {}", calls[0]);
        let results = tool_results(&h, "b", 1);
        let seen = fixture.seen();
        match profile {
            "searxng" => {
                assert_eq!(results[0]["results"][0]["title"], "SearXNG hit for vllm", "{}", results[0]);
                assert!(
                    seen.iter().any(|s| s.starts_with("/searxng/search?") && s.contains("format=json")),
                    "{seen:?}"
                );
            }
            "brave" => {
                assert_eq!(
                    results[0]["results"][0],
                    json!({"url": "https://brave.example/hit", "title": "Brave hit for vllm", "snippet": "vllm described"})
                );
                assert!(
                    seen.iter().any(|s| s.starts_with("/brave/search?")
                        && s.contains("count=8")
                        && s.ends_with(&format!("token={BRAVE_KEY}"))),
                    "{seen:?}"
                );
                assert!(results[1]["error"].as_str().unwrap().contains("HTTP 503"), "{}", results[1]);
            }
            _ => {
                // includeDomains and numResults (low context: 5) reached Exa; its text blocks were read.
                let hits = results[0]["results"].as_array().unwrap();
                assert_eq!(hits.len(), 5, "{}", results[0]);
                assert_eq!(
                    hits[0],
                    json!({"url": "https://docs.vllm.ai/vllm/1", "title": "vllm result 1", "snippet": "About vllm, part 1."})
                );
                assert!(results[1]["error"].as_str().unwrap().contains("Exa search is unavailable"), "{}", results[1]);
                assert_eq!(
                    results[2]["page"]["text"],
                    "Title: Crawled page\nURL: https://docs.vllm.ai/en/latest/\nText: Crawled text of https://docs.vllm.ai/en/latest/."
                );
            }
        }
    }
}

#[test]
fn an_unknown_profile_is_a_start_up_error_listing_the_choices() {
    for args in [
        vec!["serve", "--upstream", "http://127.0.0.1:9/v1", "--web-search-profile", "google"],
        vec!["integrated", "--responses-web-search-profile", "google", "--", "true"],
    ] {
        let output = Command::new(common::respgw_bin()).args(&args).output().expect("respgw runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(
                "unknown web search profile 'google'; expected one of: duckduckgo_plus_fetch, exa_mcp, searxng, brave"
            ),
            "{stderr}"
        );
    }
}
