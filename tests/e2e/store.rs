//! Stored responses end to end: retrieval, `store:false`, `previous_response_id` continuation,
//! delete, input items, and durability before the terminal event and across restarts.

use crate::common;

use common::{Backend, Harness, assert_append_only, assert_valid_response, final_response, tool_turn, turns};
use respgw_testkit::gateway::GatewayProcess;
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

crate::on_both_backends!(
    a_stored_response_is_retrievable_with_every_key,
    the_terminal_event_is_sent_only_after_the_response_is_stored,
    store_false_is_not_retrievable_nor_continuable,
    unknown_response_id_is_404_response_not_found,
    continuation_replays_history_without_instructions_or_tools,
    a_function_call_is_continued_with_its_output,
    input_items_lists_the_response_own_input,
    delete_removes_a_response_but_not_its_continuations,
    a_previous_response_deleted_while_its_continuation_runs,
    stored_responses_survive_a_restart_on_the_same_database,
    a_tool_loop_is_continued_with_the_same_turns_after_a_restart,
    nul_characters_are_stored_and_returned_faithfully,
);

fn text(t: &str) -> Step {
    Step::text(&[t], "stop", Some((10, 2)))
}

async fn a_stored_response_is_retrievable_with_every_key(backend: Backend) {
    let h = Harness::start_on(backend).await;
    h.scenario("m", vec![text("Paris.")]);
    let (_, created) = h.create(json!({"model":"m","input":"capital?","metadata":{"k":"v"}})).await;
    let id = created["id"].as_str().unwrap();
    let (status, got) = h.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(status, 200);
    assert_valid_response(&got);
    assert_eq!(got, created, "GET returns exactly what the create call returned");
}

async fn the_terminal_event_is_sent_only_after_the_response_is_stored(backend: Backend) {
    let h = Harness::start_on(backend).await;
    h.scenario("m", (0..10).map(|_| text("x")).collect());
    for _ in 0..10 {
        let events = h.stream(json!({"model":"m","input":"hi"})).await;
        let id = final_response(&events)["id"].as_str().unwrap().to_owned();
        // Immediately after the terminal event, the response must be readable.
        let (status, got) = h.get(&format!("/v1/responses/{id}")).await;
        assert_eq!(status, 200);
        assert_eq!(got["status"], "completed");
    }
}

async fn store_false_is_not_retrievable_nor_continuable(backend: Backend) {
    let h = Harness::start_on(backend).await;
    h.scenario("m", vec![text("a")]);
    let (_, created) = h.create(json!({"model":"m","input":"hi","store":false})).await;
    assert_eq!(created["store"], false);
    let id = created["id"].as_str().unwrap();
    let (status, body) = h.get(&format!("/v1/responses/{id}")).await;
    assert_eq!((status, body["error"]["type"].as_str()), (404, Some("invalid_request_error")));
    let (status, body) = h.create(json!({"model":"m","input":"more","previous_response_id":id})).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "previous_response_not_found");
    assert_eq!(body["error"]["param"], "previous_response_id");
}

async fn unknown_response_id_is_404_response_not_found(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let (status, body) = h.get("/v1/responses/resp_missing").await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "response_not_found");
}

async fn continuation_replays_history_without_instructions_or_tools(backend: Backend) {
    let h = Harness::start_on(backend).await;
    h.scenario("m", vec![text("Paris."), text("About 2 million."), text("Yes.")]);
    let tool = json!({"type":"function","name":"lookup","parameters":{"type":"object"}});
    let (_, first) = h
        .create(json!({"model":"m","input":"Capital of France?","instructions":"Be brief.","tools":[tool],"tool_choice":"auto"}))
        .await;
    let (status, second) =
        h.create(json!({"model":"m","input":"Population?","previous_response_id":first["id"]})).await;
    assert_eq!(status, 200);
    assert_eq!(second["previous_response_id"], first["id"]);
    assert!(second["instructions"].is_null(), "instructions are not carried");
    assert_eq!(second["tools"], json!([]), "tools are not carried");
    assert_eq!(second["tool_choice"], "auto");
    let (_, third) = h.create(json!({"model":"m","input":"Sure?","previous_response_id":second["id"]})).await;
    assert_eq!(third["status"], "completed");

    let sent = h.upstream_bodies("m");
    assert_eq!(
        sent[1]["messages"],
        json!([
            {"role":"user","content":"Capital of France?"},
            {"role":"assistant","content":"Paris."},
            {"role":"user","content":"Population?"}
        ])
    );
    assert!(sent[1].get("tools").is_none());
    assert_eq!(sent[2]["messages"].as_array().unwrap().len(), 5, "the whole chain, flattened");
}

async fn a_function_call_is_continued_with_its_output(backend: Backend) {
    let h = Harness::start_on(backend).await;
    h.scenario(
        "ci",
        vec![
            Step::cassette("chat_completion/vllm-code_interpreter-step1-stream.yaml"),
            Step::cassette("chat_completion/vllm-code_interpreter-step2-stream.yaml"),
        ],
    );
    let tool = json!({"type":"function","name":"code_interpreter","parameters":{"type":"object","properties":{"code":{"type":"string"}}}});
    let (_, first) = h.create(json!({"model":"ci","input":"compute 2+2","tools":[tool]})).await;
    let call = first["output"].as_array().unwrap().iter().find(|i| i["type"] == "function_call").unwrap().clone();
    let (status, second) = h
        .create(json!({"model":"ci","previous_response_id":first["id"],"tools":[tool],
            "input":[{"type":"function_call_output","call_id":call["call_id"],"output":"{\"result\":\"4\"}"}]}))
        .await;
    assert_eq!(status, 200);
    assert!(second["output"].as_array().unwrap().iter().any(|i| i["type"] == "message"));

    let messages = h.upstream_bodies("ci")[1]["messages"].as_array().unwrap().clone();
    let assistant = messages.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(assistant["tool_calls"][0]["id"], call["call_id"]);
    assert!(assistant["reasoning_content"].as_str().is_some_and(|r| !r.is_empty()), "reasoning is replayed");
    let tool_msg = messages.last().unwrap();
    assert_eq!(tool_msg, &json!({"role":"tool","tool_call_id":call["call_id"],"content":"{\"result\":\"4\"}"}));
}

async fn input_items_lists_the_response_own_input(backend: Backend) {
    let h = Harness::start_on(backend).await;
    h.scenario("m", vec![text("a"), text("b")]);
    let (_, first) = h.create(json!({"model":"m","input":"one"})).await;
    let (_, second) = h
        .create(json!({"model":"m","previous_response_id":first["id"],
            "input":[{"role":"user","content":"two"},{"role":"user","content":"three"}]}))
        .await;
    let id = second["id"].as_str().unwrap();
    let (status, list) = h.get(&format!("/v1/responses/{id}/input_items?order=asc")).await;
    assert_eq!(status, 200);
    assert_eq!(list["object"], "list");
    let texts: Vec<&str> =
        list["data"].as_array().unwrap().iter().map(|i| i["content"][0]["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["two", "three"]);
    assert_eq!(list["has_more"], false);
    assert_eq!(list["first_id"], list["data"][0]["id"]);

    let (_, page) = h.get(&format!("/v1/responses/{id}/input_items?limit=1")).await;
    assert_eq!(page["data"].as_array().unwrap().len(), 1);
    assert_eq!(page["data"][0]["content"][0]["text"], "three", "default order is newest first");
    assert_eq!(page["has_more"], true);
    let (status, _) = h.get(&format!("/v1/responses/{id}/input_items?limit=0")).await;
    assert_eq!(status, 400);
    assert_eq!(h.get("/v1/responses/resp_nope/input_items").await.0, 404);
}

async fn delete_removes_a_response_but_not_its_continuations(backend: Backend) {
    let h = Harness::start_on(backend).await;
    h.scenario("m", vec![text("a"), text("b"), text("c")]);
    let (_, first) = h.create(json!({"model":"m","input":"one"})).await;
    let (_, second) = h.create(json!({"model":"m","input":"two","previous_response_id":first["id"]})).await;
    let first_id = first["id"].as_str().unwrap();
    let (status, body) = h.delete(&format!("/v1/responses/{first_id}")).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"id": first_id, "object":"response", "deleted": true}));
    assert_eq!(h.get(&format!("/v1/responses/{first_id}")).await.0, 404);
    assert_eq!(h.delete(&format!("/v1/responses/{first_id}")).await.0, 404);
    // The continuation keeps its whole history.
    let (status, _) = h.create(json!({"model":"m","input":"three","previous_response_id":second["id"]})).await;
    assert_eq!(status, 200);
    assert_eq!(h.upstream_bodies("m")[2]["messages"].as_array().unwrap().len(), 5);
}

/// The response being continued is deleted while the continuation streams (the upstream pauses
/// 2 s mid-answer, far longer than the delete takes even on a loaded machine): the continuation
/// ends with `previous_response_not_found` and nothing of it is stored.
async fn a_previous_response_deleted_while_its_continuation_runs(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let slow = Step::slow_text(&["slow answer".into()], std::time::Duration::from_secs(2));
    h.scenario("m", vec![text("a"), slow]);
    let (_, first) = h.create(json!({"model":"m","input":"one"})).await;
    let first_id = first["id"].as_str().unwrap();
    let delete_while_it_streams = async {
        while h.upstream.requests("m").len() < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        h.delete(&format!("/v1/responses/{first_id}")).await.0
    };
    let (events, deleted) = tokio::join!(
        h.stream(json!({"model":"m","input":"two","previous_response_id":first_id})),
        delete_while_it_streams
    );
    assert_eq!(deleted, 200);
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(kinds[kinds.len() - 2..], ["error", "response.failed"], "{kinds:?}");
    let failed = final_response(&events);
    assert_eq!(failed["error"]["code"], "previous_response_not_found", "{failed}");
    let id = failed["id"].as_str().unwrap();
    assert_eq!(h.get(&format!("/v1/responses/{id}")).await.0, 404);
}

async fn stored_responses_survive_a_restart_on_the_same_database(backend: Backend) {
    let upstream = respgw_testkit::upstream::ReplayUpstream::start().await.unwrap();
    upstream.add_scenario("m", vec![text("kept"), text("again")]);
    let dir = tempfile::tempdir().unwrap();
    let schema = match backend {
        Backend::Sqlite => None,
        Backend::Postgres => Some(respgw_testkit::postgres::TestSchema::create().await.unwrap()),
    };
    let db = match &schema {
        Some(schema) => schema.url(),
        None => dir.path().join("store.db").display().to_string(),
    };
    let args = common::serve_args(&upstream.base_url(), &["--db-path", &db]);
    let id = {
        let gw = GatewayProcess::spawn_in(dir.path(), common::respgw_bin(), &args, &common::quiet_env()).await.unwrap();
        let (_, _, body) = respgw_testkit::gateway::post_json(
            &format!("{}/v1/responses", gw.base_url()),
            &json!({"model":"m","input":"x"}),
        )
        .await
        .unwrap();
        body["id"].as_str().unwrap().to_owned()
    };
    let gw = GatewayProcess::spawn_in(dir.path(), common::respgw_bin(), &args, &common::quiet_env()).await.unwrap();
    let got: Value = respgw_testkit::gateway::http_client()
        .get(format!("{}/v1/responses/{id}", gw.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got["output"][0]["content"][0]["text"], "kept");
    let (status, _, _) = respgw_testkit::gateway::post_json(
        &format!("{}/v1/responses", gw.base_url()),
        &json!({"model":"m","input":"y","previous_response_id":id}),
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
}

async fn a_tool_loop_is_continued_with_the_same_turns_after_a_restart(backend: Backend) {
    let upstream = respgw_testkit::upstream::ReplayUpstream::start().await.unwrap();
    let echo = |text: &str| ("mcp__local__echo", json!({"text": text}));
    upstream.add_scenario(
        "m",
        vec![tool_turn(&[echo("a"), echo("b")]), tool_turn(&[echo("c")]), text("Done."), text("again")],
    );
    let dir = tempfile::tempdir().unwrap();
    let schema = match backend {
        Backend::Sqlite => None,
        Backend::Postgres => Some(respgw_testkit::postgres::TestSchema::create().await.unwrap()),
    };
    let db = match &schema {
        Some(schema) => schema.url(),
        None => dir.path().join("store.db").display().to_string(),
    };
    let mcp_server = common::respgw_bin().with_file_name("respgw-mcp-test-stdio");
    let mcp_config = dir.path().join("mcp.json");
    std::fs::write(&mcp_config, json!({"mcpServers": {"local": {"command": mcp_server}}}).to_string()).unwrap();
    let args = common::serve_args(
        &upstream.base_url(),
        &["--db-path", &db, "--mcp-config", &mcp_config.display().to_string()],
    );
    let tools = json!([{"type":"mcp","server_label":"local","require_approval":"never"}]);
    let id = {
        let gw = GatewayProcess::spawn_in(dir.path(), common::respgw_bin(), &args, &common::quiet_env()).await.unwrap();
        let (status, _, body) = respgw_testkit::gateway::post_json(
            &format!("{}/v1/responses", gw.base_url()),
            &json!({"model":"m","input":"x","tools":tools}),
        )
        .await
        .unwrap();
        assert_eq!(status, 200, "{body}");
        body["id"].as_str().unwrap().to_owned()
    };
    // A new process: the conversation comes from the database, not from a cache.
    let gw = GatewayProcess::spawn_in(dir.path(), common::respgw_bin(), &args, &common::quiet_env()).await.unwrap();
    let (status, _, body) = respgw_testkit::gateway::post_json(
        &format!("{}/v1/responses", gw.base_url()),
        &json!({"model":"m","input":"y","tools":tools,"previous_response_id":id}),
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let sent: Vec<Vec<Value>> =
        upstream.requests("m").into_iter().map(|r| r.body["messages"].as_array().unwrap().clone()).collect();
    assert_eq!(sent.len(), 4);
    assert_eq!(
        turns(&sent[3]),
        [
            "user",
            "assistant(mcp__local__echo,mcp__local__echo)",
            "tool",
            "tool",
            "assistant(mcp__local__echo)",
            "tool",
            "assistant",
            "user"
        ]
    );
    assert_append_only(&sent);
}

#[tokio::test]
async fn gw_db_path_chooses_the_database_file() {
    let upstream = respgw_testkit::upstream::ReplayUpstream::start().await.unwrap();
    upstream.add_scenario("m", vec![text("x")]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("from-env.db");
    let mut envs = common::quiet_env();
    envs.push(("GW_DB_PATH".to_owned(), format!("sqlite://{}", db.display())));
    let gw = GatewayProcess::spawn(common::respgw_bin(), &common::serve_args(&upstream.base_url(), &[]), &envs)
        .await
        .unwrap();
    let (status, _, _) = respgw_testkit::gateway::post_json(
        &format!("{}/v1/responses", gw.base_url()),
        &json!({"model":"m","input":"x"}),
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
    assert!(db.exists(), "the store file is where GW_DB_PATH says");
}

async fn nul_characters_are_stored_and_returned_faithfully(backend: Backend) {
    let h = Harness::start_on(backend).await;
    h.scenario("nul", vec![text("out\u{0}put"), text("again")]);
    let input = json!([{"role":"user","id":"msg_\u{0}1","content":[{"type":"input_text","text":"in\u{0}put"}]}]);
    let (status, created) =
        h.create(json!({"model":"nul","input":input,"instructions":"be\u{0}brief","metadata":{"k":"v\u{0}w"}})).await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["output"][0]["content"][0]["text"], "out\u{0}put");
    let id = created["id"].as_str().unwrap();
    let (status, got) = h.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got, created, "GET returns the NULs as they were");
    assert_eq!(got["metadata"]["k"], "v\u{0}w");
    assert_eq!(got["instructions"], "be\u{0}brief");
    let (status, items) = h.get(&format!("/v1/responses/{id}/input_items")).await;
    assert_eq!(status, 200, "{items}");
    assert_eq!(items["data"][0]["content"][0]["text"], "in\u{0}put");
    assert_eq!(items["data"][0]["id"], "msg_\u{0}1", "a client's item id with a NUL is kept as given");
    let (status, next) = h.create(json!({"model":"nul","input":"more","previous_response_id":id})).await;
    assert_eq!(status, 200, "{next}");
    let sent = &h.upstream_bodies("nul")[1]["messages"];
    assert_eq!(sent[0]["content"], "in\u{0}put", "{sent}");
    assert_eq!(sent[1]["content"], "out\u{0}put", "{sent}");
    // Ids a client makes up with a NUL in them are simply unknown, on every route.
    let (status, body) = h.get("/v1/responses/resp_%00x").await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("response_not_found")), "{body}");
    let (status, body) = h.get(&format!("/v1/responses/{id}/input_items?after=msg_%00")).await;
    assert!(status == 200 || status == 404, "{status} {body}");
    let (status, body) = h.delete("/v1/responses/resp_%00x").await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = h.create(json!({"model":"nul","input":"x","previous_response_id":"resp_\u{0}"})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("previous_response_not_found")), "{body}");
}
