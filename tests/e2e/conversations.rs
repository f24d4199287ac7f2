//! Conversations end to end: the `/v1/conversations` routes, responses created in a conversation
//! (what the upstream is sent, what the conversation holds afterwards), racing responses on one
//! conversation, and deleting a conversation under its stored responses — on both store backends,
//! and across two gateway processes sharing PostgreSQL. The SDK checks are in `conversations_sdk.rs`.

use crate::common;

use std::time::Duration;

use common::{Backend, Harness, assert_error_shape};
use respgw_testkit::gateway::{GatewayProcess, http_client, post_json};
use respgw_testkit::postgres::TestSchema;
use respgw_testkit::upstream::{ReplayUpstream, Step};
use serde_json::{Value, json};

fn text(t: &str) -> Step {
    Step::text(&[t], "stop", Some((10, 2)))
}

async fn post(h: &Harness, path: &str, body: Value) -> (u16, Value) {
    h.send(http_client().post(h.url(path)).json(&body)).await
}

fn ids(list: &Value) -> Vec<&str> {
    list["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data: {list}"))
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect()
}

/// The text of each message of a listing or an upstream request, in order.
fn texts(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .filter_map(|i| match &i["content"] {
            Value::String(s) => Some(s.clone()),
            Value::Array(parts) => parts.iter().find_map(|p| p["text"].as_str()).map(str::to_owned),
            _ => None,
        })
        .collect()
}

fn assert_not_found(status: u16, body: &Value, code: &str) {
    assert_eq!(status, 404, "{body}");
    assert_error_shape(body);
    assert_eq!(body["error"]["code"], code, "{body}");
}

crate::on_both_backends!(
    conversations_and_their_items_are_managed_like_the_reference,
    responses_in_a_conversation_read_and_extend_it,
    deleting_a_conversation_keeps_its_responses_whole,
    racing_responses_on_one_conversation_never_interleave,
    the_item_limit_per_conversation_refuses_additions_and_writes_nothing,
);

async fn conversations_and_their_items_are_managed_like_the_reference(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let (status, conv) = post(
        &h,
        "/v1/conversations",
        json!({"metadata": {"topic": "demo"}, "items": [
            {"type": "message", "role": "user", "content": "first"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "second"}]},
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{conv}");
    let id = conv["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("conv_"), "{conv}");
    assert_eq!(conv["object"], "conversation");
    assert_eq!(conv["metadata"], json!({"topic": "demo"}));
    assert!(conv["created_at"].as_i64().unwrap() > 1_700_000_000);

    let (status, got) = h.get(&format!("/v1/conversations/{id}")).await;
    assert_eq!((status, &got), (200, &conv));

    let (status, updated) = post(&h, &format!("/v1/conversations/{id}"), json!({"metadata": {"topic": "new"}})).await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["metadata"], json!({"topic": "new"}));
    assert_eq!(h.get(&format!("/v1/conversations/{id}")).await.1["metadata"], json!({"topic": "new"}));

    let (status, added) = post(
        &h,
        &format!("/v1/conversations/{id}/items"),
        json!({"items": [{"role": "user", "content": "third"}, {"role": "user", "content": "fourth"}]}),
    )
    .await;
    assert_eq!(status, 200, "{added}");
    assert_eq!(added["object"], "list");
    assert_eq!(texts(added["data"].as_array().unwrap()), ["third", "fourth"]);
    assert_eq!(added["first_id"], added["data"][0]["id"]);
    assert_eq!(added["has_more"], false);

    // Newest first by default; pages follow `after`.
    let (status, all) = h.get(&format!("/v1/conversations/{id}/items")).await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(texts(all["data"].as_array().unwrap()), ["fourth", "third", "second", "first"]);
    let (_, asc) = h.get(&format!("/v1/conversations/{id}/items?order=asc&limit=3")).await;
    assert_eq!(texts(asc["data"].as_array().unwrap()), ["first", "second", "third"]);
    assert_eq!((&asc["has_more"], &asc["last_id"]), (&json!(true), &asc["data"][2]["id"]));
    let after = asc["last_id"].as_str().unwrap();
    let (_, rest) = h.get(&format!("/v1/conversations/{id}/items?order=asc&after={after}")).await;
    assert_eq!(texts(rest["data"].as_array().unwrap()), ["fourth"]);
    assert_eq!(rest["has_more"], false);

    let second = ids(&asc)[1].to_owned();
    let (status, item) = h.get(&format!("/v1/conversations/{id}/items/{second}")).await;
    assert_eq!(status, 200, "{item}");
    assert_eq!((item["type"].as_str(), item["role"].as_str()), (Some("message"), Some("assistant")));
    let (status, after_delete) = h.delete(&format!("/v1/conversations/{id}/items/{second}")).await;
    assert_eq!(status, 200, "{after_delete}");
    assert_eq!(
        (after_delete["id"].as_str(), after_delete["object"].as_str()),
        (Some(id.as_str()), Some("conversation"))
    );
    let (status, body) = h.get(&format!("/v1/conversations/{id}/items/{second}")).await;
    assert_not_found(status, &body, "item_not_found");
    let (_, left) = h.get(&format!("/v1/conversations/{id}/items?order=asc")).await;
    assert_eq!(texts(left["data"].as_array().unwrap()), ["first", "third", "fourth"]);

    // Bad input: our words, the field named.
    let many: serde_json::Map<String, Value> = (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    let (status, body) = post(&h, "/v1/conversations", json!({ "metadata": many })).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("metadata")), "{body}");
    let items: Vec<Value> = (0..21).map(|i| json!({"role": "user", "content": format!("m{i}")})).collect();
    let (status, body) = post(&h, &format!("/v1/conversations/{id}/items"), json!({ "items": items })).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("items")), "{body}");
    let (status, body) = post(&h, "/v1/conversations", json!({"items": [{"type": "message", "role": "user"}]})).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["param"].as_str().unwrap_or_default().starts_with("items[0]"), "{body}");
    let (status, body) = h.get(&format!("/v1/conversations/{id}/items?limit=0")).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("limit")), "{body}");
    let (status, body) = h.get(&format!("/v1/conversations/{id}/items?include[]=nope")).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("include[0]")), "{body}");

    let (status, deleted) = h.delete(&format!("/v1/conversations/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(deleted, json!({"id": id, "object": "conversation.deleted", "deleted": true}));
    for path in [format!("/v1/conversations/{id}"), format!("/v1/conversations/{id}/items")] {
        let (status, body) = h.get(&path).await;
        assert_not_found(status, &body, "conversation_not_found");
    }
    let (status, body) = h.delete(&format!("/v1/conversations/{id}")).await;
    assert_not_found(status, &body, "conversation_not_found");
    let (status, body) =
        post(&h, "/v1/conversations/conv_nope/items", json!({"items": [{"role": "user", "content": "x"}]})).await;
    assert_not_found(status, &body, "conversation_not_found");
}

async fn responses_in_a_conversation_read_and_extend_it(backend: Backend) {
    let h = Harness::start_on(backend).await;
    h.scenario("m", vec![text("Paris."), text("Lyon."), text("Marseille.")]);
    let (_, conv) =
        post(&h, "/v1/conversations", json!({"items": [{"role": "developer", "content": "Answer in one word."}]}))
            .await;
    let id = conv["id"].as_str().unwrap().to_owned();

    let (status, first) = h.create(json!({"model": "m", "input": "Capital of France?", "conversation": id})).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["conversation"], json!({"id": id}));
    assert_eq!(first["previous_response_id"], Value::Null);

    // The object form, streamed: the events carry the conversation too.
    let events = h.stream(json!({"model": "m", "input": "Second city?", "conversation": {"id": id}})).await;
    let second = common::final_response(&events);
    assert_eq!(second["status"], "completed", "{second}");
    assert_eq!(second["conversation"], json!({"id": id}));

    let (status, third) =
        h.create(json!({"model": "m", "input": [{"role": "user", "content": "Third?"}], "conversation": id})).await;
    assert_eq!(status, 200, "{third}");

    // What the model saw: the conversation's items, then the new input, every time.
    let sent = h.upstream_messages("m");
    assert_eq!(texts(&sent[0]), ["Answer in one word.", "Capital of France?"]);
    assert_eq!(texts(&sent[1]), ["Answer in one word.", "Capital of France?", "Paris.", "Second city?"]);
    assert_eq!(
        texts(&sent[2]),
        ["Answer in one word.", "Capital of France?", "Paris.", "Second city?", "Lyon.", "Third?"]
    );
    common::assert_append_only(&sent);

    let (_, items) = h.get(&format!("/v1/conversations/{id}/items?order=asc")).await;
    assert_eq!(
        texts(items["data"].as_array().unwrap()),
        ["Answer in one word.", "Capital of France?", "Paris.", "Second city?", "Lyon.", "Third?", "Marseille."]
    );
    // The conversation holds the response's own items, ids and all.
    assert_eq!(items["data"][2]["id"], first["output"][0]["id"]);

    // A stored response of a conversation is continued like any other.
    h.scenario("n", vec![text("Nice.")]);
    let (status, next) = h.create(json!({"model": "n", "input": "Fourth?", "previous_response_id": third["id"]})).await;
    assert_eq!(status, 200, "{next}");
    assert_eq!(next["conversation"], Value::Null, "{next}");
    assert_eq!(texts(&h.upstream_messages("n")[0]).len(), 8);
    let (_, items) = h.get(&format!("/v1/conversations/{id}/items")).await;
    assert_eq!(items["data"].as_array().unwrap().len(), 7, "a continuation outside the conversation leaves it alone");

    // Requests that cannot run: no upstream call is made for any of them.
    let before = h.upstream.all_requests().len();
    let (status, body) = h.create(json!({"model": "m", "input": "x", "conversation": "conv_nope"})).await;
    assert_not_found(status, &body, "conversation_not_found");
    assert_eq!(body["error"]["param"], "conversation");
    let (status, body) =
        h.create(json!({"model": "m", "input": "x", "conversation": id, "previous_response_id": first["id"]})).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("conversation")), "{body}");
    let (status, body) = h.create(json!({"model": "m", "input": "x", "conversation": id, "store": false})).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("store")), "{body}");
    let (status, body) = h.create(json!({"model": "m", "input": "x", "conversation": 7})).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("conversation")), "{body}");
    let (status, body) = h.create(json!({"model": "m", "input": "x", "conversation": {"name": "c"}})).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("conversation.id")), "{body}");
    let (_, empty) = post(&h, "/v1/conversations", json!({})).await;
    let (status, body) = h.create(json!({"model": "m", "input": [], "conversation": empty["id"]})).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("input")), "{body}");
    assert_eq!(h.upstream.all_requests().len(), before);
}

async fn deleting_a_conversation_keeps_its_responses_whole(backend: Backend) {
    let h = Harness::start_on(backend).await;
    h.scenario("m", vec![text("one"), text("two"), text("three")]);
    let (_, conv) = post(&h, "/v1/conversations", json!({"items": [{"role": "user", "content": "seed"}]})).await;
    let id = conv["id"].as_str().unwrap().to_owned();
    let (_, first) = h.create(json!({"model": "m", "input": "a", "conversation": id})).await;
    let (_, second) = h.create(json!({"model": "m", "input": "b", "conversation": id})).await;

    // Remove items the responses' histories hold, delete the first response, then the conversation.
    let (_, items) = h.get(&format!("/v1/conversations/{id}/items?order=asc")).await;
    for item in ids(&items) {
        let (status, body) = h.delete(&format!("/v1/conversations/{id}/items/{item}")).await;
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(h.delete(&format!("/v1/responses/{}", first["id"].as_str().unwrap())).await.0, 200);
    assert_eq!(h.delete(&format!("/v1/conversations/{id}")).await.0, 200);

    let (status, got) = h.get(&format!("/v1/responses/{}", second["id"].as_str().unwrap())).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["conversation"], json!({"id": id}));
    let (status, next) = h.create(json!({"model": "m", "input": "c", "previous_response_id": second["id"]})).await;
    assert_eq!(status, 200, "{next}");
    assert_eq!(texts(&h.upstream_messages("m")[2]), ["seed", "a", "one", "b", "two", "c"]);

    // The deleted conversation takes no new responses.
    let (status, body) = h.create(json!({"model": "m", "input": "d", "conversation": id})).await;
    assert_not_found(status, &body, "conversation_not_found");
}

async fn racing_responses_on_one_conversation_never_interleave(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let slow = |t: &str| Step::slow_text(&[t.to_owned()], Duration::from_millis(300));
    h.scenario("m", vec![slow("first"), slow("second")]);
    let (_, conv) = post(&h, "/v1/conversations", json!({})).await;
    let id = conv["id"].as_str().unwrap().to_owned();

    let body = |input: &str| json!({"model": "m", "input": input, "conversation": id});
    let url = h.url("/v1/responses");
    let (body_a, body_b) = (body("A"), body("B"));
    let (a, b) = tokio::join!(post_json(&url, &body_a), post_json(&url, &body_b));
    let (a, b) = (a.unwrap(), b.unwrap());
    let mut statuses = [a.0, b.0];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409], "{} / {}", a.2, b.2);
    let (winner, loser) = if a.0 == 200 { (&a.2, &b.2) } else { (&b.2, &a.2) };
    assert_error_shape(loser);
    assert_eq!(loser["error"]["code"], "conversation_conflict", "{loser}");

    // The conversation holds the winner's input and output, and nothing of the loser.
    let (_, items) = h.get(&format!("/v1/conversations/{id}/items?order=asc")).await;
    let held = texts(items["data"].as_array().unwrap());
    assert_eq!(held.len(), 2, "{items}");
    assert_eq!(held[1], winner["output"][0]["content"][0]["text"].as_str().unwrap());

    // The loser retries and lands after the winner.
    h.scenario("m", vec![text("third")]);
    let retry_input = if held[0] == "A" { "B" } else { "A" };
    let (status, _) = h.create(body(retry_input)).await;
    assert_eq!(status, 200);
    let (_, items) = h.get(&format!("/v1/conversations/{id}/items?order=asc")).await;
    assert_eq!(texts(items["data"].as_array().unwrap()).len(), 4);
}

/// Two gateway processes on one PostgreSQL database: a conversation made on one is extended from
/// the other, and each sees the other's responses in it.
#[tokio::test]
async fn two_gateways_share_conversations_on_postgres() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::postgres());
    let schema = TestSchema::create().await.unwrap();
    let upstream = ReplayUpstream::start().await.unwrap();
    upstream.add_scenario("m", vec![text("Paris."), text("Lyon.")]);
    let url = schema.url();
    let start = || async {
        GatewayProcess::spawn(
            common::respgw_bin(),
            &common::serve_args(&upstream.base_url(), &["--db-path", &url]),
            &common::quiet_env(),
        )
        .await
        .expect("gateway starts")
    };
    let (a, b) = tokio::join!(start(), start());
    let send = |gw: &GatewayProcess, path: &str, body: Value| {
        let url = format!("{}{path}", gw.base_url());
        async move { post_json(&url, &body).await.expect("request completes") }
    };

    let (_, _, conv) = send(&a, "/v1/conversations", json!({"items": [{"role": "user", "content": "hi"}]})).await;
    let id = conv["id"].as_str().unwrap().to_owned();
    let (status, _, first) =
        send(&b, "/v1/responses", json!({"model": "m", "input": "France?", "conversation": id})).await;
    assert_eq!(status, 200, "{first}");
    let (status, _, second) =
        send(&a, "/v1/responses", json!({"model": "m", "input": "Again?", "conversation": id})).await;
    assert_eq!(status, 200, "{second}");
    let sent = upstream.requests("m");
    assert_eq!(texts(sent[1].body["messages"].as_array().unwrap()), ["hi", "France?", "Paris.", "Again?"]);

    let response =
        http_client().get(format!("{}/v1/conversations/{id}/items?order=asc", b.base_url())).send().await.unwrap();
    let items: Value = response.json().await.unwrap();
    assert_eq!(texts(items["data"].as_array().unwrap()), ["hi", "France?", "Paris.", "Again?", "Lyon."]);
}

/// An `input_file` added to a conversation is read once: the model gets its text on every turn,
/// and a client listing the conversation gets the part exactly as it was sent.
#[tokio::test]
async fn files_in_a_conversation_reach_the_model_and_are_listed_as_sent() {
    let h = Harness::start().await;
    h.scenario("m", vec![text("It says hello."), text("Still hello.")]);
    let data = "data:text/plain;base64,aGVsbG8gZnJvbSB0aGUgZmlsZQ=="; // "hello from the file"
    let part = json!({"type": "input_file", "filename": "note.txt", "file_data": data});
    let (status, conv) = post(
        &h,
        "/v1/conversations",
        json!({"items": [{"role": "user", "content": [{"type": "input_text", "text": "Read this."}, part]}]}),
    )
    .await;
    assert_eq!(status, 200, "{conv}");
    let id = conv["id"].as_str().unwrap();
    for input in ["What does it say?", "Again?"] {
        let (status, body) = h.create(json!({"model": "m", "input": input, "conversation": id})).await;
        assert_eq!(status, 200, "{body}");
    }
    for sent in h.upstream_messages("m") {
        assert!(sent[0].to_string().contains("hello from the file"), "{}", sent[0]);
    }
    let (_, items) = h.get(&format!("/v1/conversations/{id}/items?order=asc")).await;
    assert_eq!(items["data"][0]["content"][1], part, "{items}");
    assert!(!items.to_string().contains("hello from the file"), "{items}");
}

/// A background response created in a conversation extends it when it finishes, like any other.
#[tokio::test]
async fn a_background_response_extends_its_conversation() {
    let h = Harness::start().await;
    h.scenario("m", vec![Step::slow_text(&["Done.".to_owned()], Duration::from_millis(100))]);
    let (_, conv) = post(&h, "/v1/conversations", json!({"items": [{"role": "user", "content": "Start."}]})).await;
    let id = conv["id"].as_str().unwrap();
    let (status, queued) =
        h.create(json!({"model": "m", "input": "Work on it.", "conversation": id, "background": true})).await;
    assert_eq!(status, 200, "{queued}");
    assert_eq!(queued["conversation"], json!({"id": id}));
    let response_id = queued["id"].as_str().unwrap();
    let mut finished = Value::Null;
    for _ in 0..100 {
        let (_, got) = h.get(&format!("/v1/responses/{response_id}")).await;
        if got["status"] == "completed" {
            finished = got;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(finished["status"], "completed", "{finished}");
    let (_, items) = h.get(&format!("/v1/conversations/{id}/items?order=asc")).await;
    assert_eq!(texts(items["data"].as_array().unwrap()), ["Start.", "Work on it.", "Done."]);
    assert_eq!(texts(&h.upstream_messages("m")[0]), ["Start.", "Work on it."]);
}

/// What a conversation lists, oldest first.
async fn listed(h: &Harness, id: &str) -> Vec<String> {
    let (status, items) = h.get(&format!("/v1/conversations/{id}/items?order=asc")).await;
    assert_eq!(status, 200, "{items}");
    texts(items["data"].as_array().unwrap())
}

fn user(text: &str) -> Value {
    json!({"type": "message", "role": "user", "content": text})
}

fn assert_over_the_limit(status: u16, body: &Value, param: &str) {
    assert_eq!(status, 400, "{body}");
    assert_error_shape(body);
    assert_eq!(
        (body["error"]["code"].as_str(), body["error"]["param"].as_str()),
        (Some("limit_exceeded"), Some(param))
    );
    assert!(
        body["error"]["message"].as_str().unwrap_or_default().contains("limit of 3 items per conversation"),
        "{body}"
    );
}

async fn the_item_limit_per_conversation_refuses_additions_and_writes_nothing(backend: Backend) {
    let h = Harness::start_on_with(backend, &["--max-conversation-items", "3"]).await;
    h.scenario("m", vec![text("Paris.")]);
    let (status, body) =
        post(&h, "/v1/conversations", json!({"items": [user("a"), user("b"), user("c"), user("d")]})).await;
    assert_over_the_limit(status, &body, "items");

    let (status, conv) = post(&h, "/v1/conversations", json!({"items": [user("a"), user("b")]})).await;
    assert_eq!(status, 200, "{conv}");
    let id = conv["id"].as_str().unwrap().to_owned();
    let items_path = format!("/v1/conversations/{id}/items");
    let (status, body) = post(&h, &items_path, json!({"items": [user("c"), user("d")]})).await;
    assert_over_the_limit(status, &body, "items");
    assert_eq!(listed(&h, &id).await, ["a", "b"], "nothing was written");

    // A response whose input would pass the limit is refused before the model runs.
    let (status, body) = h.create(json!({"model": "m", "input": [user("c"), user("d")], "conversation": id})).await;
    assert_over_the_limit(status, &body, "input");
    assert!(h.upstream_bodies("m").is_empty(), "the upstream heard nothing");
    assert_eq!(listed(&h, &id).await, ["a", "b"]);

    // One that fits runs, and its output is kept whole even past the limit.
    let (status, first) = h.create(json!({"model": "m", "input": "c", "conversation": id})).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(listed(&h, &id).await, ["a", "b", "c", "Paris."]);
    let (status, body) = post(&h, &items_path, json!({"items": [user("e")]})).await;
    assert_over_the_limit(status, &body, "items");
    assert_eq!(listed(&h, &id).await, ["a", "b", "c", "Paris."]);
}

#[tokio::test]
async fn sealed_items_added_to_a_conversation_must_open() {
    let h = Harness::start().await;
    h.scenario("sum", vec![Step::text(&["The user greeted the assistant."], "stop", None)]);
    h.scenario("m", vec![text("Hello again.")]);
    let garbage_summary = json!({"type": "compaction", "encrypted_content": "rgw2c.k.AAAAAAAAAAAAAAAAAAAAAAAAAAAA"});
    let garbage_reasoning = json!({"type": "reasoning", "summary": [], "encrypted_content": "gAAAAABforeign"});
    for item in [&garbage_summary, &garbage_reasoning] {
        let (status, body) = post(&h, "/v1/conversations", json!({"items": [user("hi"), item]})).await;
        assert_eq!(status, 400, "{body}");
        assert_error_shape(&body);
        assert_eq!(body["error"]["param"], "items[1].encrypted_content", "{body}");
        assert_eq!(body["error"]["code"], "invalid_encrypted_content", "{body}");
    }
    let (status, conv) = post(&h, "/v1/conversations", json!({"items": [user("hi")]})).await;
    assert_eq!(status, 200, "{conv}");
    let id = conv["id"].as_str().unwrap().to_owned();
    let items_path = format!("/v1/conversations/{id}/items");
    for item in [&garbage_summary, &garbage_reasoning] {
        let (status, body) = post(&h, &items_path, json!({"items": [item]})).await;
        assert_eq!((status, body["error"]["param"].as_str()), (400, Some("items[0].encrypted_content")), "{body}");
    }
    assert_eq!(listed(&h, &id).await, ["hi"], "nothing was written");

    // A summary the gateway sealed opens, and the model gets it from the conversation.
    let (status, compacted) = post(&h, "/v1/responses/compact", json!({"model": "sum", "input": "hi"})).await;
    assert_eq!(status, 200, "{compacted}");
    let (status, body) = post(&h, &items_path, json!({"items": [compacted["output"][1]]})).await;
    assert_eq!(status, 200, "{body}");
    let (status, answer) = h.create(json!({"model": "m", "input": "Again?", "conversation": id})).await;
    assert_eq!(status, 200, "{answer}");
    let sent = texts(&h.upstream_messages("m")[0]).join("\n");
    assert!(sent.contains("The user greeted the assistant.") && !sent.contains("not available"), "{sent}");
}
