//! Conversations through real clients, on both store backends: the official `openai` Python SDK
//! (CRUD, items, `conversation=` turns, errors; every body parsed strictly by the SDK's models) and
//! the OpenAI Agents SDK (`OpenAIConversationsSession`, and runs bound with `conversation_id`) —
//! see `tests/sdk/conversations_check.py`. What each model turn was sent is read back from the
//! replay upstream's request log.

use crate::common;

use common::{Backend, Harness};
use respgw_testkit::upstream::Step;
use serde_json::Value;

fn text(t: &str) -> Step {
    Step::text(&[t], "stop", Some((12, 3)))
}

/// The text of every message of an upstream request, in order.
fn said(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("no messages: {body}"))
        .iter()
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join(" "),
            _ => String::new(),
        })
        .collect()
}

crate::on_both_backends!(the_sdks_keep_state_in_gateway_conversations);

async fn the_sdks_keep_state_in_gateway_conversations(backend: Backend) {
    respgw_testkit::skip_unless!(common::python_env());
    let h = Harness::start_on(backend).await;
    h.scenario("conv", vec![text("The code is 42."), text("Blue."), text("Code 42, colour blue.")]);
    h.scenario("session", vec![text("Hello Ada."), text("Your name is Ada.")]);
    h.scenario("conv-run", vec![text("Hello Grace."), text("Your name is Grace.")]);

    let run = common::run_sdk_script("conversations_check.py", h.gateway.base_url(), &[]).await;
    assert!(
        run.succeeded,
        "SDK checks failed:\n{}\n{}\n--- gateway log ---\n{}",
        run.stdout,
        run.stderr,
        h.gateway.stderr_text()
    );
    assert!(run.stdout.contains("checks passed"), "{}", run.stdout);
    let report: Value = run
        .stdout
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no report line: {}", run.stdout));

    // `conversation=`: every turn is sent the conversation's items, then its own input.
    let conv = h.upstream_bodies("conv");
    assert_eq!(conv.len(), 3);
    let seed = ["Remember: the code is 42.", "And the colour is blue."];
    assert_eq!(said(&conv[0]), [seed[0], seed[1], "What is the code?"]);
    assert_eq!(said(&conv[1]), [seed[0], seed[1], "What is the code?", "The code is 42.", "And the colour?"]);
    assert_eq!(said(&conv[2]).len(), 7);
    assert_eq!(report["conversation_turns"][2], "Code 42, colour blue.");

    // The Agents SDK session: the second run is sent the first run's exchange.
    let session = h.upstream_bodies("session");
    assert_eq!(session.len(), 2);
    let second = said(&session[1]);
    assert!(second.iter().any(|t| t == "My name is Ada.") && second.iter().any(|t| t == "Hello Ada."), "{second:?}");
    assert_eq!(report["session_outputs"][1], "Your name is Ada.");
    assert!(report["session_items"].as_u64().unwrap() >= 4, "{report}");

    // `conversation_id`: the gateway's conversation carries the history, not the client.
    let bound = h.upstream_bodies("conv-run");
    assert_eq!(bound.len(), 2);
    let second = said(&bound[1]);
    assert_eq!(second[1..], ["My name is Grace.", "Hello Grace.", "What is my name?"], "{second:?}");
    assert_eq!(report["conversation_run_items"], 4, "{report}");
}
