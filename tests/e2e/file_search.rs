//! file_search end to end: files uploaded through `POST /v1/files`, put in vector stores and
//! ingested by the real gateway, then searched by the model through the `file_search` tool. The
//! scripted upstream plays the model (it calls `file_search`, then answers citing `[1]`); the tests
//! assert on what it was offered and what the tool results it received said, on the
//! `file_search_call` items, their events and the `file_citation` annotations, on continuations, on
//! tenants (another tenant's vector store is "not found", and its text never reaches the model)
//! and on bad declarations. The official `openai` SDK and the Agents SDK's `FileSearchTool` run
//! the same flows in `tests/sdk/file_search_check.py` and `tests/sdk/agents_file_search_check.py`.

use crate::common;

use std::time::{Duration, Instant};

use common::{ALPHA, BETA, Backend, Harness, assert_error_shape, assert_valid_event, assert_valid_response, kinds};
use respgw_testkit::gateway::http_client;
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

const HANDBOOK: &str = "Vacation policy. Every employee gets 25 vacation days per year. Unused vacation days \
    carry over to the next year, up to 5 days.";
const PRICING: &str = "Pricing. The basic plan costs 5 euros per month and the team plan costs 12 euros per \
    month per seat.";

/// One scripted model turn calling `file_search` with `{"queries": queries}`, chunked like the
/// recorded streams: the name with empty arguments, then the arguments, `finish_reason:
/// tool_calls`, usage and `[DONE]`.
fn file_search_call(queries: &[&str]) -> Step {
    let chunk = |delta: Value, finish: Value| {
        json!({"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",
               "choices":[{"index":0,"delta":delta,"finish_reason":finish}]})
    };
    let events = [
        chunk(json!({"role":"assistant","content":""}), Value::Null),
        chunk(
            json!({"tool_calls":[{"id":"call_fs0","type":"function","index":0,
                                   "function":{"name":"file_search","arguments":""}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls":[{"index":0,"function":{"arguments":json!({"queries": queries}).to_string()}}]}),
            Value::Null,
        ),
        chunk(json!({}), json!("tool_calls")),
        json!({"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],
               "usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}),
    ];
    let mut chunks: Vec<String> = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    chunks.push("data: [DONE]\n\n".to_owned());
    Step::Sse(chunks)
}

/// A tenant's client of one gateway.
struct Client<'a> {
    h: &'a Harness,
    key: &'a str,
}

impl Client<'_> {
    async fn send(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        self.h.send(request.bearer_auth(self.key)).await
    }

    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send(http_client().post(self.h.url(path)).json(body)).await
    }

    /// Upload `text` as `filename` (`purpose: assistants`); the file's id.
    async fn upload(&self, filename: &str, text: &str) -> String {
        let boundary = "respgw-file-search-boundary";
        let body = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nassistants\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n\
             Content-Type: text/plain\r\n\r\n{text}\r\n--{boundary}--\r\n"
        );
        let request = http_client()
            .post(self.h.url("/v1/files"))
            .header("content-type", format!("multipart/form-data; boundary={boundary}"))
            .body(body);
        let (status, file) = self.send(request).await;
        assert_eq!(status, 200, "upload: {file}");
        file["id"].as_str().expect("a file id").to_owned()
    }

    /// A vector store holding these files (`(file_id, attributes)`), once they are all ingested.
    async fn vector_store(&self, files: &[(&str, Value)]) -> String {
        let (status, store) = self.post("/v1/vector_stores", &json!({"name": "docs"})).await;
        assert_eq!(status, 200, "{store}");
        let id = store["id"].as_str().expect("a vector store id").to_owned();
        for (file_id, attributes) in files {
            let path = format!("/v1/vector_stores/{id}/files");
            let (status, added) = self.post(&path, &json!({"file_id": file_id, "attributes": attributes})).await;
            assert_eq!(status, 200, "{added}");
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, store) = self.send(http_client().get(self.h.url(&format!("/v1/vector_stores/{id}")))).await;
            if store["file_counts"]["completed"] == files.len() {
                return id;
            }
            assert!(store["file_counts"]["failed"] == 0, "ingestion failed: {store}");
            assert!(Instant::now() < deadline, "ingestion did not finish: {store}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Upload the handbook (`team: hr`) and the price list (`team: sales`) into one vector store.
    async fn docs(&self) -> (String, String, String) {
        let handbook = self.upload("handbook.md", HANDBOOK).await;
        let pricing = self.upload("pricing.md", PRICING).await;
        let store = self
            .vector_store(&[(handbook.as_str(), json!({"team": "hr"})), (pricing.as_str(), json!({"team": "sales"}))])
            .await;
        (store, handbook, pricing)
    }
}

/// The tool results the model received in the upstream request `n` (0-based) of `model`.
fn tool_results(h: &Harness, model: &str, n: usize) -> Vec<String> {
    h.upstream_messages(model)[n]
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().expect("text").to_owned())
        .collect()
}

fn file_search(store: &str) -> Value {
    json!({"type": "file_search", "vector_store_ids": [store]})
}

/// Results, citations, events and a continuation, on one backend.
async fn searches_cites_and_continues(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let client = Client { h: &h, key: "sk-test" };
    let (store, handbook, _) = client.docs().await;
    h.scenario(
        "fs",
        vec![
            file_search_call(&["vacation days per year"]),
            Step::text(&["Employees get 25 vacation days a year ", "[1", "]."], "stop", Some((40, 12))),
            Step::text(&["Yes, up to 5 carry over [1]."], "stop", None),
        ],
    );
    let events = h
        .stream(json!({"model": "fs", "input": "How many vacation days do I get?", "tools": [file_search(&store)],
                       "include": ["file_search_call.results"]}))
        .await;
    let response = common::final_response(&events);
    assert_valid_response(response);
    assert_eq!(response["status"], "completed", "{response:#}");

    // The call's item and events, in the reference API's order.
    let call = &response["output"][0];
    assert_eq!(call["type"], "file_search_call");
    assert!(call["id"].as_str().unwrap().starts_with("fs_"), "{call}");
    assert_eq!((&call["status"], &call["queries"]), (&json!("completed"), &json!(["vacation days per year"])));
    assert!(call.get("model_result").is_none(), "the model's text is never shown: {call}");
    let results = call["results"].as_array().expect("results, as include asked");
    assert_eq!(results[0]["file_id"], handbook.as_str());
    assert_eq!(results[0]["filename"], "handbook.md");
    assert_eq!(results[0]["attributes"], json!({"team": "hr"}));
    assert!(results[0]["text"].as_str().unwrap().contains("25 vacation days"), "{call}");
    let id = call["id"].as_str().unwrap();
    let of_call: Vec<Value> = events.iter().filter(|e| e["item_id"] == id || e["item"]["id"] == id).cloned().collect();
    assert_eq!(
        kinds(&of_call),
        [
            "response.output_item.added",
            "response.file_search_call.in_progress",
            "response.file_search_call.searching",
            "response.file_search_call.completed",
            "response.output_item.done"
        ]
    );

    // The model was offered the search function, and given the numbered results with their files.
    let bodies = h.upstream_bodies("fs");
    let offered = &bodies[0]["tools"][0]["function"];
    assert_eq!(offered["name"], "file_search");
    assert_eq!(offered["parameters"]["required"], json!(["queries"]));
    let told = &tool_results(&h, "fs", 1)[0];
    assert!(told.contains(&format!("[1] handbook.md (file_id: {handbook})")), "{told}");
    assert!(told.contains("Every employee gets 25 vacation days per year."), "{told}");

    // The answer's `[1]` is a citation of the handbook, announced once the marker closed.
    let message = &response["output"][1];
    let text = message["content"][0]["text"].as_str().unwrap();
    let annotations = message["content"][0]["annotations"].as_array().unwrap();
    let index = text.chars().position(|c| c == '[').unwrap();
    assert_eq!(
        annotations[..],
        [json!({"type": "file_citation", "file_id": handbook, "filename": "handbook.md", "index": index})]
    );
    let added: Vec<&Value> = events.iter().filter(|e| e["type"] == "response.output_text.annotation.added").collect();
    assert_eq!(added.len(), 1);
    assert_eq!(added[0]["annotation"], annotations[0]);
    let at = |kind: &str| events.iter().position(|e| e["type"] == kind).unwrap();
    let closing = events.iter().position(|e| e["type"] == "response.output_text.delta" && e["delta"] == "].").unwrap();
    assert!(closing < at("response.output_text.annotation.added"));
    assert!(at("response.output_text.annotation.added") < at("response.output_text.done"));

    // A continuation replays the call and the very text the model was given; the new answer's
    // `[1]` still cites the handbook.
    let (status, next) = h
        .create(json!({"model": "fs", "input": "Do unused days carry over?", "previous_response_id": response["id"],
                       "tools": [file_search(&store)]}))
        .await;
    assert_eq!(status, 200, "{next}");
    assert_valid_response(&next);
    assert_eq!(tool_results(&h, "fs", 2), tool_results(&h, "fs", 1));
    let replayed = &h.upstream_messages("fs")[2][1];
    assert_eq!(replayed["tool_calls"][0]["function"]["arguments"], r#"{"queries":["vacation days per year"]}"#);
    assert_eq!(next["output"][0]["content"][0]["annotations"][0]["file_id"], handbook.as_str());

    // Stored, the call shows no results without `include`.
    let (_, stored) =
        client.send(http_client().get(h.url(&format!("/v1/responses/{}", response["id"].as_str().unwrap())))).await;
    assert!(!stored.to_string().contains("model_result"), "{stored}");

    let metrics = h.metrics().await;
    for series in [
        r#"gw_responses_tool_calls_requested_total{tool_type="file_search"} 1"#,
        r#"gw_responses_tool_calls_executed_total{tool_type="file_search"} 1"#,
    ] {
        assert!(metrics.contains(series), "missing {series}\n{metrics}");
    }
}

crate::on_both_backends!(searches_cites_and_continues);

#[tokio::test]
async fn results_are_null_without_include() {
    let h = Harness::start().await;
    let client = Client { h: &h, key: "sk-test" };
    let (store, _, _) = client.docs().await;
    h.scenario("plain", vec![file_search_call(&["pricing"]), Step::text(&["5 euros [1]."], "stop", None)]);
    let (status, response) =
        h.create(json!({"model": "plain", "input": "Price?", "tools": [file_search(&store)]})).await;
    assert_eq!(status, 200, "{response}");
    assert_valid_response(&response);
    assert_eq!(response["output"][0]["results"], Value::Null);
    assert_eq!(response["output"][0]["status"], "completed");
    assert!(tool_results(&h, "plain", 1)[0].contains("[1] pricing.md"));
}

#[tokio::test]
async fn filters_restrict_what_is_searched() {
    let h = Harness::start().await;
    let client = Client { h: &h, key: "sk-test" };
    let (store, _, pricing) = client.docs().await;
    h.scenario("filtered", vec![file_search_call(&["vacation days euros"]), Step::text(&["Done."], "stop", None)]);
    let tool = json!({"type": "file_search", "vector_store_ids": [store],
                      "filters": {"type": "eq", "key": "team", "value": "sales"}});
    let (status, response) = h
        .create(json!({"model": "filtered", "input": "?", "tools": [tool], "include": ["file_search_call.results"]}))
        .await;
    assert_eq!(status, 200, "{response}");
    assert_valid_response(&response);
    assert_eq!(response["tools"][0]["filters"], json!({"type": "eq", "key": "team", "value": "sales"}));
    let results = response["output"][0]["results"].as_array().unwrap();
    assert!(results.iter().all(|r| r["file_id"] == pricing.as_str()), "{results:?}");
    let told = &tool_results(&h, "filtered", 1)[0];
    assert!(told.contains("pricing.md") && !told.contains("handbook.md"), "{told}");
}

#[tokio::test]
async fn another_tenants_vector_store_is_not_found_and_never_searched() {
    let dir = tempfile::tempdir().expect("temp dir");
    let keys = common::two_tenants(dir.path(), "");
    let h = Harness::start_with(&["--api-keys-file", &keys], &[]).await;
    let alpha = Client { h: &h, key: ALPHA };
    let beta = Client { h: &h, key: BETA };
    let (alphas, _, _) = alpha.docs().await;
    let own = beta.upload("notes.md", "Beta's own notes about the garden.").await;
    let betas = beta.vector_store(&[(own.as_str(), json!({}))]).await;
    h.scenario("stolen", vec![file_search_call(&["vacation"]), Step::text(&["No."], "stop", None)]);

    for (tools, param) in [
        (json!([file_search(&alphas)]), "tools[0].vector_store_ids[0]"),
        (
            json!([{"type": "function", "name": "f"}, {"type": "file_search", "vector_store_ids": [betas, alphas]}]),
            "tools[1].vector_store_ids[1]",
        ),
        (json!([file_search("vs_00000000-0000-7000-8000-000000000000")]), "tools[0].vector_store_ids[0]"),
    ] {
        let (status, body) =
            beta.post("/v1/responses", &json!({"model": "stolen", "input": "?", "tools": tools})).await;
        assert_eq!(status, 404, "{body}");
        assert_error_shape(&body);
        assert_eq!(body["error"]["param"], param, "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("not found"), "{body}");
    }
    // The model was never asked, so it never saw alpha's text.
    assert!(h.upstream_bodies("stolen").is_empty());
    for request in h.upstream.all_requests() {
        assert!(!request.body.to_string().contains("vacation days per year"), "{:?}", request.body);
    }
    // Alpha's own request searches it.
    let (status, response) =
        alpha.post("/v1/responses", &json!({"model": "stolen", "input": "?", "tools": [file_search(&alphas)]})).await;
    assert_eq!(status, 200, "{response}");
    assert!(tool_results(&h, "stolen", 1)[0].contains("handbook.md"));
}

#[tokio::test]
async fn tool_choice_forces_the_search() {
    let h = Harness::start().await;
    let client = Client { h: &h, key: "sk-test" };
    let (store, _, _) = client.docs().await;
    h.scenario("forced", vec![file_search_call(&["plan"]), Step::text(&["12 euros [1]."], "stop", None)]);
    let (status, response) = h
        .create(json!({"model": "forced", "input": "Team plan?", "tools": [file_search(&store)],
                       "tool_choice": {"type": "file_search"}}))
        .await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["tool_choice"], json!({"type": "file_search"}));
    let first = &h.upstream_bodies("forced")[0];
    assert_eq!(first["tool_choice"], json!({"type": "function", "function": {"name": "file_search"}}));
}

#[tokio::test]
async fn bad_declarations_are_400s_naming_the_field() {
    let h = Harness::start().await;
    for (tool, param) in [
        (json!({"type": "file_search"}), "tools[0].vector_store_ids"),
        (json!({"type": "file_search", "vector_store_ids": []}), "tools[0].vector_store_ids"),
        (
            json!({"type": "file_search", "vector_store_ids": ["vs_1"], "max_num_results": 0}),
            "tools[0].max_num_results",
        ),
        (
            json!({"type": "file_search", "vector_store_ids": ["vs_1"], "max_num_results": 51}),
            "tools[0].max_num_results",
        ),
        (
            json!({"type": "file_search", "vector_store_ids": ["vs_1"], "filters": {"type": "eq", "value": 1}}),
            "tools[0].filters.key",
        ),
        (
            json!({"type": "file_search", "vector_store_ids": ["vs_1"],
                   "filters": {"type": "and", "filters": [{"type": "near", "key": "a", "value": 1}]}}),
            "tools[0].filters.filters[0].type",
        ),
        (
            json!({"type": "file_search", "vector_store_ids": ["vs_1"], "ranking_options": {"score_threshold": 2}}),
            "tools[0].ranking_options.score_threshold",
        ),
    ] {
        let (status, body) = h.create(json!({"model": "m", "input": "?", "tools": [tool]})).await;
        assert_eq!(status, 400, "{tool}: {body}");
        assert_eq!(body["error"]["param"], param, "{tool}: {body}");
    }
    let asked = h.upstream.all_requests().into_iter().filter(|r| r.path.ends_with("/chat/completions")).count();
    assert_eq!(asked, 0, "the model was never asked");
}

#[tokio::test]
async fn a_failed_search_is_a_failed_call_the_model_is_told_about() {
    let h = Harness::start_with(&["--embedding-model", "embedder"], &[]).await;
    let client = Client { h: &h, key: "sk-test" };
    let (store, _, _) = client.docs().await;
    h.upstream.fail_embeddings(100, 500);
    h.scenario("down", vec![file_search_call(&["vacation"]), Step::text(&["Sorry."], "stop", None)]);
    let events = h.stream(json!({"model": "down", "input": "?", "tools": [file_search(&store)]})).await;
    for event in &events {
        assert_valid_event(event);
    }
    let response = common::final_response(&events);
    assert_eq!(response["status"], "completed", "a tool failure never fails the response: {response:#}");
    assert_eq!(response["output"][0]["status"], "failed");
    let told = &tool_results(&h, "down", 1)[0];
    assert!(told.starts_with("File search failed:"), "{told}");
    let metrics = h.metrics().await;
    assert!(metrics.contains(r#"gw_responses_tool_errors_total{tool_type="file_search"}"#), "{metrics}");
}

#[tokio::test]
async fn the_openai_sdk_searches_streams_and_continues() {
    respgw_testkit::skip_unless!(common::python_env());
    let h = Harness::start_with(&["--embedding-model", "embedder"], &[]).await;
    for model in ["sdk-include", "sdk-plain", "sdk-stream"] {
        h.scenario(
            model,
            vec![
                file_search_call(&["vacation days"]),
                Step::text(&["You get 25 days [1]."], "stop", None),
                Step::text(&["Up to 5 carry over [1]."], "stop", None),
            ],
        );
    }
    let run = common::run_sdk_script("file_search_check.py", h.gateway.base_url(), &[]).await;
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    assert!(
        run.succeeded && stdout.contains("file_search checks passed"),
        "SDK checks failed:\n{stdout}\n{stderr}\n--- gateway log ---\n{}",
        h.gateway.stderr_text()
    );
    // What the model received: the handbook's text under its number and name, and in the
    // continuation the same text again.
    let told = &tool_results(&h, "sdk-include", 1)[0];
    assert!(told.contains("[1] handbook.md") && told.contains("25 vacation days"), "{told}");
    assert_eq!(tool_results(&h, "sdk-include", 2), tool_results(&h, "sdk-include", 1));
    // Queries were embedded with the configured model.
    let embedded = h.upstream.embedding_requests();
    assert!(embedded.iter().any(|r| r.body["input"].to_string().contains("vacation days")), "{embedded:?}");
}

#[tokio::test]
async fn the_agents_sdk_file_search_tool_runs_end_to_end() {
    respgw_testkit::skip_unless!(common::python_env());
    let h = Harness::start().await;
    h.scenario(
        "agents-fs",
        vec![file_search_call(&["seat price"]), Step::text(&["12 euros per seat [1]."], "stop", None)],
    );
    let run = common::run_sdk_script(
        "agents_file_search_check.py",
        h.gateway.base_url(),
        &[("OPENAI_AGENTS_DISABLE_TRACING", "1")],
    )
    .await;
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    assert!(
        run.succeeded && stdout.contains("agents file_search checks passed"),
        "Agents SDK run failed:\n{stdout}\n{stderr}\n--- gateway log ---\n{}",
        h.gateway.stderr_text()
    );
    let bodies = h.upstream_bodies("agents-fs");
    assert_eq!(bodies[0]["tools"][0]["function"]["name"], "file_search");
    let told = &tool_results(&h, "agents-fs", 1)[0];
    assert!(told.contains("pricing.md") && told.contains("12 euros per month per seat"), "{told}");
}
