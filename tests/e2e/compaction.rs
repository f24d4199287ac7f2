//! Compaction: `POST /v1/responses/compact`, `compaction` items sent back as input, and
//! `context_management` compacting inside a response — each checked on what the client gets and
//! on what the upstream received (the summarisation request, then the compacted history). Also
//! the official Python SDK's view of all three (`tests/sdk/compaction_check.py`) on both store
//! backends.

use respgw_engine::compaction::SUMMARY_PROMPT;
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

use crate::common::{self, Backend, Harness, kinds};
use crate::on_both_backends;

/// `POST /v1/responses/compact`; a 200 body is checked against the schema supplement, any other
/// against the error shape.
async fn compact(h: &Harness, body: Value) -> (u16, Value) {
    let (status, _, json) =
        respgw_testkit::gateway::post_json(&h.url("/v1/responses/compact"), &body).await.expect("request completes");
    if status == 200 {
        common::assert_valid_compacted(&json);
    } else {
        common::assert_error_shape(&json);
    }
    (status, json)
}

/// The text of a chat message's content (a plain string in everything the gateway sends here).
fn text(message: &Value) -> &str {
    message["content"].as_str().unwrap_or_else(|| panic!("no text content: {message}"))
}

fn compactions(metrics: &str, trigger: &str, outcome: &str) -> f64 {
    common::sample(metrics, &format!("gw_responses_compactions_total{{outcome=\"{outcome}\",trigger=\"{trigger}\"}}"))
}

/// A stateless history with reasoning, a client function call and its output.
fn tool_history() -> Value {
    json!([
        {"role":"user","content":"What's the weather in Paris?"},
        {"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"I should call get_weather."}]},
        {"type":"function_call","call_id":"call_w","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
        {"type":"function_call_output","call_id":"call_w","output":"sunny, 24C"},
        {"type":"message","role":"assistant","content":"It is sunny and 24C in Paris."},
        {"role":"user","content":"And tomorrow?"},
        {"type":"message","role":"assistant","content":"Probably the same."}
    ])
}

#[tokio::test]
async fn compact_summarises_reasoning_and_tool_results_then_the_window_replaces_them() {
    let h = Harness::start().await;
    let summary = "Paris weather: sunny and warm today, likely the same tomorrow.";
    h.scenario(
        "cm",
        vec![Step::text(&[summary], "stop", Some((120, 18))), Step::text(&["Yes, take sunglasses."], "stop", None)],
    );

    let (status, compacted) =
        compact(&h, json!({"model":"cm","input":tool_history(),"instructions":"You are a weather bot."})).await;
    assert_eq!(status, 200, "{compacted}");
    assert_eq!(compacted["object"], "response.compaction");
    assert!(compacted["id"].as_str().is_some_and(|id| id.starts_with("resp_")), "{compacted}");
    assert_eq!(compacted["usage"]["input_tokens"], 120);
    assert_eq!(compacted["usage"]["output_tokens"], 18);
    assert_eq!(compacted["usage"]["total_tokens"], 138);
    let output = compacted["output"].as_array().unwrap();
    assert_eq!(kinds_of(output), ["message", "message", "compaction"], "{compacted:#}");
    assert_eq!(output[0]["content"][0]["text"], "What's the weather in Paris?");
    assert_eq!(output[1]["content"][0]["text"], "And tomorrow?");
    assert!(output.iter().take(2).all(|m| m["role"] == "user"));
    let blob = output[2]["encrypted_content"].as_str().unwrap();
    assert!(blob.starts_with("rgw2c.") && !blob.contains("sunny"), "{blob}");
    assert!(output[2]["id"].as_str().is_some_and(|id| id.starts_with("cmp_")));

    // The summarisation request: the whole history as the model sees it, then the prompt.
    let requests = h.upstream_messages("cm");
    let summarising = &requests[0];
    assert_eq!(
        common::turns(summarising),
        ["system", "user", "assistant(get_weather)", "tool", "assistant", "user", "assistant", "user"]
    );
    assert_eq!(text(&summarising[0]), "You are a weather bot.");
    assert_eq!(summarising[2]["reasoning_content"], "I should call get_weather.");
    assert_eq!(summarising[3], json!({"role":"tool","tool_call_id":"call_w","content":"sunny, 24C"}));
    assert_eq!(summarising[7], json!({"role":"user","content":SUMMARY_PROMPT}));
    assert!(h.upstream_bodies("cm")[0].get("tools").is_none());

    // Continuing from the compacted window: the user messages, the summary, the new input.
    let mut input = compacted["output"].as_array().unwrap().clone();
    input.push(json!({"role":"user","content":"Should I take sunglasses?"}));
    let (status, next) = h.create(json!({"model":"cm","input":input,"store":false})).await;
    assert_eq!(status, 200, "{next}");
    let continued = &h.upstream_messages("cm")[1];
    assert_eq!(common::turns(continued), ["user", "user", "user", "user"], "{continued:#?}");
    assert_eq!(text(&continued[0]), "What's the weather in Paris?");
    assert_eq!(text(&continued[1]), "And tomorrow?");
    assert!(text(&continued[2]).ends_with(&format!("\n\n{summary}")), "{continued:#?}");
    assert_eq!(text(&continued[3]), "Should I take sunglasses?");
    let sent = serde_json::to_string(continued).unwrap();
    for old in ["24C in Paris", "get_weather", "I should call", "Probably the same"] {
        assert!(!sent.contains(old), "'{old}' of the compacted turns reached the model: {sent}");
    }
    // The compaction item is shown back without the summary it carries.
    assert!(!next.to_string().contains(summary));

    let metrics = h.metrics().await;
    assert_eq!(compactions(&metrics, "endpoint", "ok"), 1.0, "{metrics}");
    assert_eq!(compactions(&metrics, "auto", "ok"), 0.0);
}

fn kinds_of(items: &[Value]) -> Vec<&str> {
    items.iter().map(|i| i["type"].as_str().unwrap_or("?")).collect()
}

#[tokio::test]
async fn tampered_forged_and_misused_blobs_are_refused_naming_the_item() {
    let h = Harness::start().await;
    h.scenario("cm", vec![Step::text(&["The user said hi."], "stop", None)]);
    let (status, compacted) = compact(&h, json!({"model":"cm","input":"hi"})).await;
    assert_eq!(status, 200, "{compacted}");
    let blob = compacted["output"][1]["encrypted_content"].as_str().unwrap().to_owned();

    // One character of the sealed body changed.
    let mut tampered = blob.clone().into_bytes();
    let middle = tampered.len() - 10;
    tampered[middle] = if tampered[middle] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let key_id = blob.split('.').nth(1).unwrap();
    let cases = [
        ("tampered", json!({"type":"compaction","encrypted_content":tampered})),
        (
            "forged",
            json!({"type":"compaction","encrypted_content":format!("rgw2c.{key_id}.AAAAAAAAAAAAAAAAAAAAAAAAAAAA")}),
        ),
        ("unknown key", json!({"type":"compaction","encrypted_content":"rgw2c.retired.AAAAAAAAAAAAAAAAAAAAAAAAAAAA"})),
        ("not ours", json!({"type":"compaction","encrypted_content":"gAAAAABo-openai-blob"})),
        ("a summary as reasoning", json!({"type":"reasoning","summary":[],"encrypted_content":blob})),
    ];
    for (what, item) in cases {
        let input = json!([{"role":"user","content":"hi"}, item]);
        let (status, body) = h.create(json!({"model":"cm","input":input.clone()})).await;
        assert_eq!(status, 400, "{what}: {body}");
        assert_eq!(body["error"]["param"], "input[1].encrypted_content", "{what}: {body}");
        assert_eq!(body["error"]["code"], "invalid_encrypted_content", "{what}: {body}");
        let (status, body) = compact(&h, json!({"model":"cm","input":input})).await;
        assert_eq!((status, body["error"]["param"].as_str()), (400, Some("input[1].encrypted_content")), "{what}");
    }
    // A reasoning blob is not a summary either.
    let as_reasoning = blob.replacen("rgw2c.", "rgw2.", 1);
    let input = json!([{"type":"compaction","encrypted_content":as_reasoning}]);
    let (status, body) = h.create(json!({"model":"cm","input":input})).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("input[0].encrypted_content")), "{body}");

    // Requests that cannot be compacted are refused before any upstream call.
    let (status, body) = compact(&h, json!({"model":"cm","previous_response_id":"resp_missing"})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("previous_response_not_found")), "{body}");
    let (status, body) = compact(&h, json!({"model":"cm"})).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("input")), "{body}");
    let (status, body) = compact(&h, json!({"input":"hi"})).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("model")), "{body}");
    assert_eq!(h.upstream_bodies("cm").len(), 1, "only the first compaction reached the upstream");
    let metrics = h.metrics().await;
    assert_eq!(compactions(&metrics, "endpoint", "ok"), 1.0, "{metrics}");
    assert_eq!(compactions(&metrics, "endpoint", "error"), 0.0, "{metrics}");
}

#[tokio::test]
async fn an_upstream_failure_while_compacting_maps_like_a_response_and_is_counted() {
    let h = Harness::start().await;
    h.scenario(
        "cm",
        vec![Step::Status { status: 404, body: json!({"error":{"message":"no such model","code":"model_not_found"}}) }],
    );
    let (status, body) = compact(&h, json!({"model":"cm","input":"hi"})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("model_not_found")), "{body}");
    let metrics = h.metrics().await;
    assert_eq!(compactions(&metrics, "endpoint", "error"), 1.0, "{metrics}");
}

/// A first stored turn, then a streamed continuation whose request crosses the threshold: it
/// compacts first, then answers; a continuation of it sees the compacted window.
async fn auto_compaction_then_continuation(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let summary = "The user is planning a week in Rome and asked for a first day.";
    h.scenario(
        "auto",
        vec![
            Step::text(&["Day 1: the Colosseum and the Forum."], "stop", Some((20, 9))),
            Step::text(&[summary], "stop", Some((40, 12))),
            Step::text(&["Day 2: the Vatican."], "stop", Some((30, 5))),
            Step::text(&["Day 3: Trastevere."], "stop", None),
        ],
    );
    let (status, first) = h.create(json!({"model":"auto","input":"Plan day 1 in Rome."})).await;
    assert_eq!(status, 200, "{first}");

    let events = h
        .stream(json!({"model":"auto","input":"And day 2?","previous_response_id":first["id"],
                       "context_management":[{"type":"compaction","compact_threshold":10}]}))
        .await;
    let sequence: Vec<u64> = events.iter().map(|e| e["sequence_number"].as_u64().unwrap()).collect();
    assert_eq!(sequence, (0..events.len() as u64).collect::<Vec<_>>());
    let names = kinds(&events);
    assert_eq!(
        names[..5],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.compaction.compacting",
            "response.output_item.done"
        ],
        "{names:?}"
    );
    let (added, compacting, done) = (&events[2], &events[3], &events[4]);
    assert_eq!(added["item"]["type"], "compaction");
    assert_eq!(added["item"]["encrypted_content"], "");
    assert_eq!(
        (compacting["item_id"].clone(), compacting["output_index"].clone()),
        (added["item"]["id"].clone(), json!(0))
    );
    assert_eq!(done["item"]["id"], added["item"]["id"]);
    assert!(done["item"]["encrypted_content"].as_str().is_some_and(|b| b.starts_with("rgw2c.")), "{done}");
    assert!(!done.to_string().contains(summary));
    let response = common::final_response(&events);
    assert_eq!(response["status"], "completed");
    assert_eq!(kinds_of(response["output"].as_array().unwrap()), ["compaction", "message"]);
    assert_eq!(response["output"][1]["content"][0]["text"], "Day 2: the Vatican.");
    // The summarisation call's usage is part of the response's.
    assert_eq!(
        (response["usage"]["input_tokens"].as_u64(), response["usage"]["output_tokens"].as_u64()),
        (Some(70), Some(17))
    );

    let requests = h.upstream_messages("auto");
    assert_eq!(requests.len(), 3);
    let summarising = &requests[1];
    assert_eq!(common::turns(summarising), ["user", "assistant", "user", "user"]);
    assert_eq!(text(&summarising[1]), "Day 1: the Colosseum and the Forum.");
    assert_eq!(text(&summarising[3]), SUMMARY_PROMPT);
    let answering = &requests[2];
    assert_eq!(common::turns(answering), ["user", "user", "user"], "{answering:#?}");
    assert_eq!((text(&answering[0]), text(&answering[1])), ("Plan day 1 in Rome.", "And day 2?"));
    assert!(text(&answering[2]).ends_with(&format!("\n\n{summary}")));

    // The stored response shows the item without its summary; a continuation sees the window.
    let (status, stored) = h.get(&format!("/v1/responses/{}", response["id"].as_str().unwrap())).await;
    assert_eq!(status, 200);
    assert_eq!(stored["output"][0]["encrypted_content"], response["output"][0]["encrypted_content"]);
    assert!(stored["output"][0].get("model_summary").is_none(), "{stored}");
    let (status, third) =
        h.create(json!({"model":"auto","input":"And day 3?","previous_response_id":response["id"]})).await;
    assert_eq!(status, 200, "{third}");
    let continued = &h.upstream_messages("auto")[3];
    assert_eq!(common::turns(continued), ["user", "user", "user", "assistant", "user"], "{continued:#?}");
    assert!(text(&continued[2]).ends_with(&format!("\n\n{summary}")));
    assert_eq!(text(&continued[3]), "Day 2: the Vatican.");
    assert!(!serde_json::to_string(continued).unwrap().contains("Colosseum"));

    let metrics = h.metrics().await;
    assert_eq!(compactions(&metrics, "auto", "ok"), 1.0, "{metrics}");
}

on_both_backends!(auto_compaction_then_continuation, the_python_sdk_compacts_and_continues);

#[tokio::test]
async fn a_failed_summarisation_fails_the_response_with_one_terminal_event() {
    let h = Harness::start().await;
    h.scenario("auto", vec![Step::Status { status: 500, body: json!({"error":{"message":"out of memory"}}) }]);
    let events = h
        .stream(json!({"model":"auto","input":"hi",
                       "context_management":[{"type":"compaction","compact_threshold":1}]}))
        .await;
    assert_eq!(
        kinds(&events),
        ["response.created", "response.in_progress", "response.output_item.added", "error", "response.failed"]
    );
    let failed = common::final_response(&events);
    assert_eq!(failed["output"], json!([]), "an unfinished compaction item is not output");
    assert_eq!(h.upstream_bodies("auto").len(), 1, "no answer without the summary");
    let metrics = h.metrics().await;
    assert_eq!(compactions(&metrics, "auto", "error"), 1.0, "{metrics}");
}

#[tokio::test]
async fn below_the_threshold_nothing_is_compacted() {
    let h = Harness::start().await;
    h.scenario("auto", vec![Step::text(&["Hello."], "stop", None)]);
    let (status, response) = h
        .create(json!({"model":"auto","input":"hi",
                       "context_management":[{"type":"compaction","compact_threshold":1_000_000}]}))
        .await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(kinds_of(response["output"].as_array().unwrap()), ["message"]);
    assert_eq!(h.upstream_messages("auto").len(), 1);
    for (entry, param) in [
        (json!({"type":"compaction","compact_threshold":0}), "context_management[0].compact_threshold"),
        (json!({"type":"compaction"}), "context_management[0].compact_threshold"),
        (json!({"type":"summarise","compact_threshold":5}), "context_management[0].type"),
    ] {
        let (status, body) = h.create(json!({"model":"auto","input":"hi","context_management":[entry]})).await;
        assert_eq!((status, body["error"]["param"].as_str()), (400, Some(param)), "{body}");
    }
    let metrics = h.metrics().await;
    assert_eq!(compactions(&metrics, "auto", "ok") + compactions(&metrics, "auto", "error"), 0.0, "{metrics}");
}

/// `tests/sdk/compaction_check.py`: compact a stored conversation plus new input, continue from
/// the window, a tampered blob, automatic compaction over SSE — through the SDK's typed objects.
async fn the_python_sdk_compacts_and_continues(backend: Backend) {
    respgw_testkit::skip_unless!(common::python_env());
    let h = Harness::start_on(backend).await;
    let summary = "Trip planning: Rome first (Colosseum), Florence to be added.";
    h.scenario(
        "cmp",
        vec![
            Step::text(&["Day 1: the Colosseum."], "stop", Some((12, 5))),
            Step::text(&[summary], "stop", Some((30, 7))),
            Step::text(&["Rome first."], "stop", None),
            Step::text(&["The user asks a long question."], "stop", Some((200, 6))),
            Step::text(&["Short answer."], "stop", Some((15, 3))),
        ],
    );
    let run = common::run_sdk_script("compaction_check.py", h.gateway.base_url(), &[]).await;
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    assert!(run.succeeded, "SDK checks failed:\n{stdout}\n{stderr}\n--- gateway log ---\n{}", h.gateway.stderr_text());
    assert!(stdout.contains("compaction checks passed"), "{stdout}");

    let requests = h.upstream_messages("cmp");
    assert_eq!(requests.len(), 5, "{requests:#?}");
    assert_eq!(common::turns(&requests[1]), ["user", "assistant", "user", "user"]);
    assert_eq!(text(&requests[1][3]), SUMMARY_PROMPT);
    let continued = &requests[2];
    assert_eq!(common::turns(continued), ["user", "user", "user", "user"], "{continued:#?}");
    assert_eq!((text(&continued[0]), text(&continued[1])), ("Plan a trip to Rome.", "Add Florence."));
    assert!(text(&continued[2]).ends_with(&format!("\n\n{summary}")));
    assert_eq!(text(&continued[3]), "Which city first?");
    assert!(!serde_json::to_string(continued).unwrap().contains("Day 1"));
    let answering = &requests[4];
    assert_eq!(common::turns(answering), ["user", "user"], "{answering:#?}");
    assert!(text(&answering[1]).ends_with("\n\nThe user asks a long question."));
}
