//! The operator console's JSON API (`/v1/console/…`, `docs/console-api.md`) end to end: a real
//! gateway with two tenants (`alpha` an admin, `beta` not) in front of the scripted upstream.
//! Records are made through the ordinary API — a `file_search` tool loop (two rounds), a function
//! call continued with its output, a conversation, a background run, a file and a vector store —
//! then every console route is read: the admin sees both tenants, `beta` only its own (lists and
//! by-id lookups alike), a wrong key is a 401, bad parameters a 400 naming them, pages chain with
//! `after`, a tool loop's rounds carry the tokens the upstream reported, the chain links a
//! continuation both ways, and only the admin cancels a background run.

use crate::common;

use std::time::{Duration, Instant};

use common::{ALPHA, BETA, Harness, assert_error_shape, assert_valid_response, tool_turn, two_tenants};
use respgw_testkit::gateway::http_client;
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

const HANDBOOK: &str = "Vacation policy. Every employee gets 25 vacation days per year.";

async fn get(h: &Harness, key: &str, path: &str) -> (u16, Value) {
    h.send(http_client().get(h.url(path)).bearer_auth(key)).await
}

async fn post(h: &Harness, key: &str, path: &str, body: Value) -> (u16, Value) {
    h.send(http_client().post(h.url(path)).bearer_auth(key).json(&body)).await
}

/// A 200 reply's body.
async fn ok(h: &Harness, key: &str, path: &str) -> Value {
    let (status, body) = get(h, key, path).await;
    assert_eq!(status, 200, "GET {path}: {body}");
    body
}

/// `POST /v1/responses` as `key`; the response object.
async fn respond(h: &Harness, key: &str, body: Value) -> Value {
    let (status, response) = post(h, key, "/v1/responses", body).await;
    assert_eq!(status, 200, "{response}");
    response
}

/// One scripted model turn calling `file_search`, reporting 10 input and 5 output tokens.
fn file_search_call() -> Step {
    let call = json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_fs","type":"function",
        "function":{"name":"file_search","arguments":"{\"queries\":[\"vacation days\"]}"}}]},
        "finish_reason":"tool_calls"}]});
    let usage = json!({"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}});
    Step::Sse(vec![format!("data: {call}\n\n"), format!("data: {usage}\n\n"), "data: [DONE]\n\n".into()])
}

/// Upload `text` as alpha's `handbook.md`, put it in a vector store and wait for its ingestion;
/// the file's and the store's ids.
async fn alphas_documents(h: &Harness) -> (String, String) {
    let boundary = "respgw-console-boundary";
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nassistants\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"handbook.md\"\r\n\
         Content-Type: text/plain\r\n\r\n{HANDBOOK}\r\n--{boundary}--\r\n"
    );
    let request = http_client()
        .post(h.url("/v1/files"))
        .bearer_auth(ALPHA)
        .header("content-type", format!("multipart/form-data; boundary={boundary}"))
        .body(body);
    let (status, file) = h.send(request).await;
    assert_eq!(status, 200, "upload: {file}");
    let file = file["id"].as_str().expect("a file id").to_owned();
    let (status, store) = post(h, ALPHA, "/v1/vector_stores", json!({"name": "docs", "file_ids": [file]})).await;
    assert_eq!(status, 200, "{store}");
    let store = store["id"].as_str().expect("a vector store id").to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let view = ok(h, ALPHA, &format!("/v1/vector_stores/{store}")).await;
        if view["file_counts"]["completed"] == 1 {
            return (file, store);
        }
        assert!(Instant::now() < deadline, "ingestion did not finish: {view}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The ids of a list reply's rows, after checking the list shape.
fn ids(list: &Value) -> Vec<&str> {
    assert_eq!(list["object"], "list", "{list}");
    assert!(list["has_more"].is_boolean(), "{list}");
    let data = list["data"].as_array().unwrap_or_else(|| panic!("no data: {list}"));
    let ids: Vec<&str> = data.iter().map(|row| row["id"].as_str().unwrap_or_else(|| panic!("no id: {row}"))).collect();
    assert_eq!(list["first_id"].as_str(), ids.first().copied(), "{list}");
    assert_eq!(list["last_id"].as_str(), ids.last().copied(), "{list}");
    ids
}

/// Every key of a response summary row, with the type it has.
fn assert_summary_shape(row: &Value) {
    assert_eq!(row["object"], "console.response_summary", "{row}");
    for key in ["id", "tenant", "model", "status", "input_preview", "output_preview"] {
        assert!(row[key].is_string(), "{key} in {row}");
    }
    assert!(row["created_at"].is_i64() && row["tool_calls"].is_u64() && row["background"].is_boolean(), "{row}");
    for key in ["previous_response_id", "conversation_id"] {
        assert!(row[key].is_string() || row[key].is_null(), "{key} in {row}");
    }
    assert!(row["usage"].is_null() || row["usage"]["total_tokens"].is_u64(), "{row}");
    assert!(row["duration_ms"].is_null() || row["duration_ms"].is_u64(), "{row}");
}

/// A 400 naming `param` with `code`, in the error shape.
async fn refused(h: &Harness, path: &str, param: &str, code: &str) {
    let (status, body) = get(h, ALPHA, path).await;
    assert_eq!(status, 400, "GET {path}: {body}");
    assert_error_shape(&body);
    assert_eq!(body["error"]["type"], "invalid_request_error", "{path}: {body}");
    assert_eq!((body["error"]["param"].as_str(), body["error"]["code"].as_str()), (Some(param), Some(code)), "{path}");
}

#[tokio::test]
async fn the_console_api_shows_each_tenant_its_own_and_the_admin_everything() {
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path(), "admin = true");
    let h = Harness::start_with(&["--api-keys-file", &keys], &[]).await;
    h.scenario("plain", (0..4).map(|_| Step::text(&["Paris is lovely."], "stop", Some((12, 6)))).collect());
    h.scenario("fs", vec![file_search_call(), Step::text(&["You get 25 days [1]."], "stop", Some((40, 12)))]);
    h.scenario(
        "fn",
        vec![tool_turn(&[("get_weather", json!({"city": "Paris"}))]), Step::text(&["It is sunny."], "stop", None)],
    );
    let parts: Vec<String> = (0..400).map(|i| format!("part{i} ")).collect();
    h.scenario("slow", vec![Step::slow_text(&parts, Duration::from_millis(50))]);

    // What the tenants store through the ordinary API.
    let (file, store) = alphas_documents(&h).await;
    let searched = respond(
        &h,
        ALPHA,
        json!({"model": "fs", "input": "How many vacation days?",
               "tools": [{"type": "file_search", "vector_store_ids": [store]}]}),
    )
    .await;
    let weather_tool = json!({"type": "function", "name": "get_weather",
                              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}});
    let called =
        respond(&h, ALPHA, json!({"model": "fn", "input": "Weather in PARIS?", "tools": [weather_tool.clone()]})).await;
    assert_eq!(called["output"][0]["type"], "function_call", "{called}");
    let call_id = called["output"][0]["call_id"].as_str().unwrap();
    let answered = respond(
        &h,
        ALPHA,
        json!({"model": "fn", "previous_response_id": called["id"], "tools": [weather_tool],
               "input": [{"type": "function_call_output", "call_id": call_id, "output": "22 degrees, 100% sun"}]}),
    )
    .await;
    let (status, conversation) = post(
        &h,
        ALPHA,
        "/v1/conversations",
        json!({"metadata": {"topic": "travel"}, "items": [{"type": "message", "role": "user", "content": "Hi"}]}),
    )
    .await;
    assert_eq!(status, 200, "{conversation}");
    let conversation = conversation["id"].as_str().unwrap().to_owned();
    let in_conversation =
        respond(&h, ALPHA, json!({"model": "plain", "input": "And Rome?", "conversation": conversation})).await;
    let betas = respond(&h, BETA, json!({"model": "plain", "input": "beta's own question"})).await;
    let background =
        respond(&h, ALPHA, json!({"model": "slow", "input": "Tell a long story", "background": true})).await;
    let background = background["id"].as_str().unwrap().to_owned();
    let id = |r: &Value| r["id"].as_str().unwrap().to_owned();
    let (searched, called, answered, in_conversation, betas) =
        (id(&searched), id(&called), id(&answered), id(&in_conversation), id(&betas));

    // Session.
    let session = ok(&h, ALPHA, "/v1/console/session").await;
    assert_eq!(
        session,
        json!({"object": "console.session", "tenant": "alpha", "admin": true, "authentication": true,
               "tenants": ["alpha", "beta"], "version": env!("CARGO_PKG_VERSION")})
    );
    let session = ok(&h, BETA, "/v1/console/session").await;
    assert_eq!((&session["admin"], &session["tenants"]), (&json!(false), &json!(["beta"])));
    for key in [None, Some("sk-wrong")] {
        let mut request = http_client().get(h.url("/v1/console/responses"));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let (status, body) = h.send(request).await;
        assert_eq!(status, 401, "{body}");
        assert_error_shape(&body);
    }

    // Responses: the admin sees both tenants, newest first; beta its own only.
    let all = ok(&h, ALPHA, "/v1/console/responses?limit=100").await;
    let stored = ids(&all);
    assert_eq!(stored.len(), 5, "{all:#}");
    for expected in [&searched, &called, &answered, &in_conversation, &betas] {
        assert!(stored.contains(&expected.as_str()), "{expected} in {stored:?}");
    }
    let rows = all["data"].as_array().unwrap();
    rows.iter().for_each(assert_summary_shape);
    let created: Vec<i64> = rows.iter().map(|r| r["created_at"].as_i64().unwrap()).collect();
    assert!(created.windows(2).all(|w| w[0] >= w[1]), "newest first: {created:?}");
    assert_eq!(ids(&ok(&h, ALPHA, "/v1/console/responses?tenant=beta").await), [betas.as_str()]);
    assert_eq!(ids(&ok(&h, BETA, "/v1/console/responses").await), [betas.as_str()]);
    assert!(ids(&ok(&h, BETA, "/v1/console/responses?tenant=alpha").await).is_empty());
    assert!(ids(&ok(&h, ALPHA, "/v1/console/responses?tenant=nobody").await).is_empty());

    // Pages of two chain through `after` to the same list.
    let mut paged = Vec::new();
    let mut after = String::new();
    loop {
        let page = ok(&h, ALPHA, &format!("/v1/console/responses?limit=2{after}")).await;
        paged.extend(ids(&page).into_iter().map(str::to_owned));
        if page["has_more"] == false {
            break;
        }
        after = format!("&after={}", page["last_id"].as_str().unwrap());
    }
    assert_eq!(paged, stored);
    assert!(ids(&ok(&h, ALPHA, "/v1/console/responses?after=resp_unknown").await).is_empty());

    // Filters: model, status, time, and the input's text (case-insensitive, `%` literal).
    assert_eq!(ids(&ok(&h, ALPHA, "/v1/console/responses?model=fs").await), [searched.as_str()]);
    assert!(ids(&ok(&h, ALPHA, "/v1/console/responses?status=failed").await).is_empty());
    assert_eq!(ids(&ok(&h, ALPHA, "/v1/console/responses?q=weather%20in%20paris").await), [called.as_str()]);
    assert_eq!(ids(&ok(&h, ALPHA, "/v1/console/responses?q=100%25%20SUN").await), [answered.as_str()]);
    assert!(ids(&ok(&h, ALPHA, "/v1/console/responses?q=1_0").await).is_empty());
    assert!(ids(&ok(&h, ALPHA, "/v1/console/responses?since=1&until=2").await).is_empty());
    let row = |id: &str| rows.iter().find(|r| r["id"] == id).unwrap().clone();
    let called_row = row(&called);
    assert_eq!((&called_row["tool_calls"], &called_row["input_preview"]), (&json!(1), &json!("Weather in PARIS?")));
    assert_eq!((&row(&betas)["tenant"], &row(&searched)["tenant"]), (&json!("beta"), &json!("alpha")));
    assert_eq!(row(&in_conversation)["conversation_id"], conversation.as_str());
    assert_eq!(row(&answered)["previous_response_id"], called.as_str());
    assert_eq!(row(&searched)["output_preview"], "You get 25 days [1].");

    // Bad parameters: 400 naming them.
    for (query, param, code) in [
        ("limit=0", "limit", "invalid_value"),
        ("limit=101", "limit", "invalid_value"),
        ("limit=many", "limit", "invalid_value"),
        ("status=done", "status", "invalid_value"),
        ("since=5&until=4", "since", "invalid_value"),
        ("until=yesterday", "until", "invalid_value"),
        ("colour=red", "colour", "unknown_parameter"),
    ] {
        refused(&h, &format!("/v1/console/responses?{query}"), param, code).await;
    }
    refused(&h, &format!("/v1/console/responses?q={}", "x".repeat(201)), "q", "invalid_value").await;
    refused(&h, "/v1/console/background?status=sleeping", "status", "invalid_value").await;
    refused(&h, "/v1/console/files?limit=0", "limit", "invalid_value").await;
    refused(&h, "/v1/console/conversations?order=asc", "order", "unknown_parameter").await;

    // One response: as GET returns it, its own input, its rounds and its chain.
    let detail = ok(&h, ALPHA, &format!("/v1/console/responses/{searched}")).await;
    assert_eq!(detail["object"], "console.response");
    assert_eq!(detail["response"], ok(&h, ALPHA, &format!("/v1/responses/{searched}")).await);
    assert_valid_response(&detail["response"]);
    assert_eq!((&detail["tenant"], &detail["inherited_items"]), (&json!("alpha"), &json!(0)));
    assert_eq!(detail["input_items"][0]["content"][0]["text"], "How many vacation days?");
    let rounds = detail["rounds"].as_array().expect("rounds");
    assert_eq!(rounds.len(), 2, "{detail:#}");
    let tokens: Vec<(u64, u64)> =
        rounds.iter().map(|r| (r["input_tokens"].as_u64().unwrap(), r["output_tokens"].as_u64().unwrap())).collect();
    assert_eq!(tokens, [(10, 5), (40, 12)]);
    let output_ids: Vec<&Value> = detail["response"]["output"].as_array().unwrap().iter().map(|i| &i["id"]).collect();
    assert_eq!(rounds[0]["item_ids"], json!([output_ids[0]]), "the first round made the search call");
    for round in rounds {
        for key in ["started_ms", "duration_ms", "tools_ms"] {
            assert!(round[key].is_u64(), "{key} in {round}");
        }
    }
    assert!(rounds[0]["started_ms"].as_u64() <= rounds[1]["started_ms"].as_u64());
    assert!(row(&searched)["duration_ms"].is_u64());

    let continued = ok(&h, ALPHA, &format!("/v1/console/responses/{answered}")).await;
    assert_eq!(continued["chain"], json!({"previous": [called], "next": []}));
    assert_eq!(continued["inherited_items"], 2, "the question and the call");
    assert_eq!(continued["input_items"][0]["type"], "function_call_output");
    let parent = ok(&h, ALPHA, &format!("/v1/console/responses/{called}")).await;
    assert_eq!(parent["chain"], json!({"previous": [], "next": [answered]}));
    assert_eq!(ok(&h, ALPHA, &format!("/v1/console/responses/{betas}")).await["tenant"], "beta");
    for path in [format!("/v1/console/responses/{searched}"), "/v1/console/responses/resp_unknown".into()] {
        let (status, body) = get(&h, BETA, &path).await;
        assert_eq!(status, 404, "{body}");
        assert_error_shape(&body);
    }

    // Conversations and their items.
    let conversations = ok(&h, ALPHA, "/v1/console/conversations").await;
    assert_eq!(ids(&conversations), [conversation.as_str()]);
    let summary = &conversations["data"][0];
    assert_eq!(summary["object"], "console.conversation_summary");
    assert_eq!((&summary["tenant"], &summary["items"], &summary["responses"]), (&json!("alpha"), &json!(3), &json!(1)));
    assert_eq!(summary["metadata"], json!({"topic": "travel"}));
    assert!(ids(&ok(&h, BETA, "/v1/console/conversations").await).is_empty());
    let items = ok(&h, ALPHA, &format!("/v1/console/conversations/{conversation}/items?order=asc&limit=2")).await;
    assert_eq!((ids(&items).len(), &items["has_more"]), (2, &json!(true)));
    assert_eq!(items["data"][0]["content"][0]["text"], "Hi");
    let (status, body) = get(&h, BETA, &format!("/v1/console/conversations/{conversation}/items")).await;
    assert_eq!(status, 404, "{body}");

    // Background: listed, its events polled while it runs; only the admin cancels it.
    let runs = ok(&h, ALPHA, "/v1/console/background").await;
    assert_eq!(ids(&runs), [background.as_str()]);
    let run = &runs["data"][0];
    assert_eq!(
        (&run["object"], &run["tenant"], &run["model"]),
        (&json!("console.background_run"), &json!("alpha"), &json!("slow"))
    );
    assert!(run["created_at"].is_i64() && run["events"].is_u64() && run["ended_at"].is_null(), "{run}");
    assert!(ids(&ok(&h, BETA, "/v1/console/background").await).is_empty());
    let (status, body) = get(&h, BETA, &format!("/v1/console/background/{background}")).await;
    assert_eq!(status, 404, "{body}");
    // Once the run streams, its log holds more than one page of two.
    let deadline = Instant::now() + Duration::from_secs(10);
    while ok(&h, ALPHA, &format!("/v1/console/background/{background}")).await["events"].as_u64() < Some(4) {
        assert!(Instant::now() < deadline, "the background run never streamed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let events = ok(&h, ALPHA, &format!("/v1/console/background/{background}/events?limit=2")).await;
    assert_eq!(events["data"][0]["sequence_number"], 0, "{events}");
    assert_eq!(events["data"][0]["type"], "response.created");
    assert_eq!(events["data"][0]["event"]["type"], "response.created");
    assert_eq!((&events["has_more"], &events["ended"]), (&json!(true), &json!(false)));
    let later = ok(&h, ALPHA, &format!("/v1/console/background/{background}/events?after=0&limit=1")).await;
    assert_eq!(later["data"][0]["sequence_number"], 1, "{later}");
    let (status, denied) = post(&h, BETA, &format!("/v1/console/background/{background}/cancel"), json!({})).await;
    assert_eq!(status, 403, "{denied}");
    assert_error_shape(&denied);
    assert_eq!(
        (&denied["error"]["type"], &denied["error"]["code"]),
        (&json!("permission_error"), &json!("permission_denied"))
    );
    let (status, cancelled) = post(&h, ALPHA, &format!("/v1/console/background/{background}/cancel"), json!({})).await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!((&cancelled["id"], &cancelled["status"]), (&json!(background), &json!("cancelled")));
    let detail = ok(&h, ALPHA, &format!("/v1/console/background/{background}")).await;
    assert_eq!((&detail["status"], &detail["response"]["status"]), (&json!("cancelled"), &json!("cancelled")));
    assert!(detail["ended_at"].is_i64(), "{detail}");
    let log = ok(&h, ALPHA, &format!("/v1/console/background/{background}/events?limit=100")).await;
    assert_eq!((&log["has_more"], &log["ended"]), (&json!(false), &json!(true)), "{log}");
    let last = log["data"].as_array().unwrap().last().unwrap();
    assert_eq!((&last["type"], &last["event"]["response"]["status"]), (&json!("response.failed"), &json!("cancelled")));
    assert!(ids(&ok(&h, ALPHA, "/v1/console/background?status=in_progress").await).is_empty());

    // Files and vector stores, with their tenant.
    let files = ok(&h, ALPHA, "/v1/console/files").await;
    assert_eq!(ids(&files), [file.as_str()]);
    assert_eq!((&files["data"][0]["object"], &files["data"][0]["tenant"]), (&json!("file"), &json!("alpha")));
    assert!(ids(&ok(&h, BETA, "/v1/console/files").await).is_empty());
    assert!(ids(&ok(&h, ALPHA, "/v1/console/files?purpose=user_data").await).is_empty());
    let stores = ok(&h, ALPHA, "/v1/console/vector_stores").await;
    assert_eq!(ids(&stores), [store.as_str()]);
    assert_eq!((&stores["data"][0]["object"], &stores["data"][0]["tenant"]), (&json!("vector_store"), &json!("alpha")));
    let in_store = ok(&h, ALPHA, &format!("/v1/console/vector_stores/{store}/files")).await;
    assert_eq!(ids(&in_store), [file.as_str()]);
    assert_eq!(in_store["data"][0]["object"], "vector_store.file");
    let (status, body) = get(&h, BETA, &format!("/v1/console/vector_stores/{store}/files")).await;
    assert_eq!((status, &body["error"]["code"]), (404, &json!("not_found")), "{body}");
}
