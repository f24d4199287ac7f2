//! The console in a real browser: headless Chromium (`respgw_testkit::browser`, through
//! chromedriver) drives `/console/` of a real `respgw serve` with two tenants — `alpha`, an admin,
//! and `beta` — in front of the scripted upstream. Data is seeded through the API (plain
//! responses of both tenants, one with a function call, a continuation, a conversation, a
//! background run still streaming, a file in a vector store); then a wrong key sees an error and
//! no data, the admin finds a response with the text filter, opens the one with the function call
//! (name, arguments, rounds), follows a chain, sees tokens per tenant, the conversations, a live
//! background run it cancels, the files and vector stores; the other tenant sees only its own.
//! A screenshot of each view is kept under `$CARGO_TARGET_DIR/console-screenshots/`, and the
//! browser's console must report no Content-Security-Policy violation and no script error.

use crate::common;

use std::time::Duration;

use common::{ALPHA, BETA, Harness, two_tenants};
use respgw_testkit::browser::Browser;
use respgw_testkit::gateway::http_client;
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

/// The admin tenant's extra keys-file line.
const ADMIN: &str = "admin = true";

/// One API call as a tenant: status and JSON body.
async fn call(h: &Harness, key: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let request = match body {
        Some(body) => http_client().post(h.url(path)).json(&body),
        None => http_client().get(h.url(path)),
    };
    let reply = request.bearer_auth(key).send().await.expect("the gateway answers");
    let status = reply.status().as_u16();
    let text = reply.text().await.expect("the body reads");
    (status, serde_json::from_str(&text).unwrap_or_else(|_| panic!("non-JSON reply ({status}): {text}")))
}

/// `POST path` as `key`; the created object's id (the call must succeed).
async fn create(h: &Harness, key: &str, path: &str, body: Value) -> String {
    let (status, reply) = call(h, key, path, Some(body)).await;
    assert_eq!(status, 200, "POST {path}: {reply}");
    reply["id"].as_str().unwrap_or_else(|| panic!("no id in {reply}")).to_owned()
}

/// Upload `bytes` as `filename` (purpose `assistants`) for `key`; the file's id.
async fn upload(h: &Harness, key: &str, filename: &str, bytes: &[u8]) -> String {
    let boundary = "respgw-console-browser-boundary";
    let mut body = format!(
        "--{boundary}\r\ncontent-disposition: form-data; name=\"purpose\"\r\n\r\nassistants\r\n\
         --{boundary}\r\ncontent-disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n\
         content-type: text/plain\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let reply = http_client()
        .post(h.url("/v1/files"))
        .bearer_auth(key)
        .header("content-type", format!("multipart/form-data; boundary={boundary}"))
        .body(body)
        .send()
        .await
        .expect("the upload completes");
    let status = reply.status().as_u16();
    let reply: Value = reply.json().await.expect("a JSON reply");
    assert_eq!(status, 200, "upload: {reply}");
    reply["id"].as_str().expect("a file id").to_owned()
}

/// What the tenants stored before the browser opens.
struct Seeded {
    /// Alpha's plain response, its input mentions lighthouses.
    lighthouse: String,
    /// Alpha's response that called `get_weather`.
    weather: String,
    /// Alpha's continuation of `lighthouse`.
    follow_up: String,
    conversation: String,
    /// Alpha's background run, streaming slowly.
    background: String,
    file: String,
    vector_store: String,
    /// Beta's only response.
    beta_response: String,
}

async fn seed(h: &Harness) -> Seeded {
    let text = |t: &'static str, usage: (u64, u64)| Step::text(&[t], "stop", Some(usage));
    h.upstream.add_repeating_scenario("alpha-m", text("Lighthouses guide ships.", (21, 4)));
    h.upstream.add_repeating_scenario("beta-m", text("Volcanoes erupt.", (17, 3)));
    let weather_call = Step::recorded_tool_call(
        "chat_completion/vllm-code_interpreter-step1-stream.yaml",
        "get_weather",
        r#"{"city": "Paris"}"#,
    )
    .expect("the tool-call stream loads");
    h.scenario("tool-m", vec![weather_call]);
    let parts: Vec<String> = (0..120).map(|i| format!("part{i} ")).collect();
    h.scenario("bg-m", vec![Step::slow_text(&parts, Duration::from_millis(500))]);

    let lighthouse =
        create(h, ALPHA, "/v1/responses", json!({"model": "alpha-m", "input": "Tell me about lighthouses"})).await;
    let weather = create(
        h,
        ALPHA,
        "/v1/responses",
        json!({
            "model": "tool-m",
            "input": "What is the weather in Paris?",
            "tools": [{
                "type": "function",
                "name": "get_weather",
                "description": "The weather in a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            }],
        }),
    )
    .await;
    let follow_up = create(
        h,
        ALPHA,
        "/v1/responses",
        json!({"model": "alpha-m", "input": "And their keepers?", "previous_response_id": lighthouse}),
    )
    .await;
    let conversation = create(
        h,
        ALPHA,
        "/v1/conversations",
        json!({"items": [{"type": "message", "role": "user", "content": "Plan a trip to the harbour"}]}),
    )
    .await;
    create(
        h,
        ALPHA,
        "/v1/responses",
        json!({"model": "alpha-m", "input": "Which harbour?", "conversation": conversation}),
    )
    .await;
    let background = create(
        h,
        ALPHA,
        "/v1/responses",
        json!({"model": "bg-m", "input": "A long background story", "background": true}),
    )
    .await;
    let file = upload(h, ALPHA, "harbour-notes.txt", b"The harbour master keeps the lighthouse logs.").await;
    let vector_store = create(h, ALPHA, "/v1/vector_stores", json!({"name": "harbour docs", "file_ids": [file]})).await;
    let beta_response =
        create(h, BETA, "/v1/responses", json!({"model": "beta-m", "input": "Tell me about volcanoes"})).await;
    Seeded { lighthouse, weather, follow_up, conversation, background, file, vector_store, beta_response }
}

/// The browser console's entries so far must hold no CSP violation and no script error.
async fn assert_clean_console(browser: &Browser, view: &str) {
    let log = browser.console_log().await.expect("the console log reads");
    let bad: Vec<_> = log
        .iter()
        .filter(|(_, message)| {
            message.contains("Content Security Policy")
                || message.contains("Uncaught")
                || message.contains("SyntaxError")
        })
        .collect();
    assert!(bad.is_empty(), "{view}: the browser reported {bad:?}");
}

/// Open `#/<route>` and wait until the view says it is drawn.
async fn open(browser: &mut Browser, base: &str, route: &str) {
    browser.goto(&format!("{base}/console/#/{route}")).await.expect("the console loads");
    let path = route.split('?').next().unwrap_or(route);
    browser
        .wait_for(&format!("#view[data-route=\"{path}\"][data-state=\"ready\"]"))
        .await
        .unwrap_or_else(|e| panic!("#/{route} is drawn: {e}"));
}

/// The `data-id`s of the elements matching `selector`.
async fn ids(browser: &Browser, selector: &str) -> Vec<String> {
    let found = browser
        .execute(
            "return Array.from(document.querySelectorAll(arguments[0])).map((e) => e.dataset.id);",
            vec![json!(selector)],
        )
        .await
        .expect("the script runs");
    serde_json::from_value(found).expect("a list of ids")
}

/// How many elements match `selector`.
async fn count(browser: &Browser, selector: &str) -> u64 {
    let found = browser
        .execute("return document.querySelectorAll(arguments[0]).length;", vec![json!(selector)])
        .await
        .expect("the script runs");
    found.as_u64().expect("a count")
}

/// Sign in with `key` on the sign-in form (the page is at the console).
async fn sign_in(browser: &mut Browser, key: &str) {
    browser.fill("#api-key", key).await.expect("the key field");
    browser.click("#sign-in-submit").await.expect("the sign-in button");
}

#[tokio::test]
async fn console_in_chromium_shows_each_tenant_its_own_and_the_admin_everything() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::chromium());
    let dir = tempfile::tempdir().expect("a temporary directory");
    let keys = two_tenants(dir.path(), ADMIN);
    let h = Harness::start_with(&["--api-keys-file", &keys], &[]).await;
    let seeded = seed(&h).await;
    let base = h.gateway.base_url().to_owned();
    let mut browser = Browser::start("console_browser").await.expect("chromium starts");

    // A wrong key: an error on the sign-in form, no navigation, no data.
    browser.goto(&format!("{base}/console/")).await.expect("the console loads");
    sign_in(&mut browser, "sk-not-a-key-0123456789").await;
    let refused = browser.wait_for_text("#sign-in-error", "refused").await.expect("the refusal shows");
    assert!(!refused.is_empty());
    let page = browser.page_text().await.expect("the page's text");
    for secret in ["lighthouses", &seeded.lighthouse, "volcanoes", "Overview"] {
        assert!(!page.contains(secret), "a wrong key sees {secret:?}:\n{page}");
    }
    let nav_hidden = browser.execute("return document.getElementById('nav').hidden;", vec![]).await.expect("runs");
    assert_eq!(nav_hidden, json!(true), "no navigation for a wrong key");
    browser.screenshot("wrong-key").await.expect("screenshot");

    // The admin signs in: its tenant and admin rights are named.
    sign_in(&mut browser, ALPHA).await;
    browser.wait_for_text("[data-testid=session-tenant]", "alpha").await.expect("signed in as alpha");
    let shown = browser.wait_for_text("[data-testid=session-tenant]", "admin").await.expect("admin");
    assert!(shown.contains("alpha"), "{shown}");
    let stored_key =
        browser.execute("return sessionStorage.getItem('respgw.console.apiKey');", vec![]).await.expect("runs");
    assert_eq!(stored_key, json!(ALPHA), "the key is kept in sessionStorage");
    let url = browser.client().current_url().await.expect("a URL").to_string();
    assert!(!url.contains(ALPHA), "the key never goes into a URL: {url}");

    // Responses: every tenant's, and the text filter finds the lighthouse question only.
    open(&mut browser, &base, "responses").await;
    browser.wait_for("[data-testid=response-row]").await.expect("rows");
    let listed = ids(&browser, "[data-testid=response-row]").await;
    for id in [&seeded.lighthouse, &seeded.weather, &seeded.follow_up, &seeded.beta_response] {
        assert!(listed.contains(id), "the admin's list lacks {id}: {listed:?}");
    }
    browser.wait_for("#filter-tenant").await.expect("admins filter by tenant");
    browser.fill("#filter-q", "LIGHTHOUSES").await.expect("the text filter");
    browser.click("[data-testid=filter-apply]").await.expect("apply");
    browser
        .wait_for("#view[data-route=responses][data-state=ready] [data-testid=response-row]")
        .await
        .expect("filtered");
    browser.wait_for_text("[data-testid=responses-table]", &seeded.lighthouse).await.expect("the lighthouse row");
    let url = browser.client().current_url().await.expect("a URL").to_string();
    assert!(url.contains("q=LIGHTHOUSES"), "the filter is in the route: {url}");
    assert_eq!(ids(&browser, "[data-testid=response-row]").await, vec![seeded.lighthouse.clone()]);
    browser.screenshot("responses-filtered").await.expect("screenshot");

    // The response with a function call: its name, its arguments, its rounds.
    browser.fill("#filter-q", "weather in Paris").await.expect("the text filter");
    browser.click("[data-testid=filter-apply]").await.expect("apply");
    browser.wait_for_text("[data-testid=responses-table]", &seeded.weather).await.expect("the weather row");
    browser
        .click(&format!("[data-testid=response-row][data-id=\"{}\"] [data-testid=response-link]", seeded.weather))
        .await
        .expect("open it");
    browser
        .wait_for(&format!("[data-testid=response-detail][data-id=\"{}\"]", seeded.weather))
        .await
        .expect("the detail");
    browser.wait_for_text("[data-testid=function-name]", "get_weather").await.expect("the function's name");
    let arguments = browser.wait_for_text("[data-testid=function-arguments]", "Paris").await.expect("the arguments");
    assert!(arguments.contains("city"), "{arguments}");
    let rounds = browser.wait_for("[data-testid=rounds] tbody tr").await.expect("a round row");
    assert!(!rounds.text().await.expect("text").is_empty());
    browser.wait_for("[data-testid=usage]").await.expect("usage");
    browser.screenshot("response-function-call").await.expect("screenshot");

    // The continuation links back along its chain.
    open(&mut browser, &base, &format!("responses/{}", seeded.follow_up)).await;
    browser.wait_for_text("[data-testid=chain-previous]", &seeded.lighthouse).await.expect("the chain");
    browser.wait_for("[data-testid=rounds] tbody tr").await.expect("the follow-up's round");
    browser.screenshot("response-chain").await.expect("screenshot");
    assert_clean_console(&browser, "responses").await;

    // Conversations: the list and the conversation's items.
    open(&mut browser, &base, "conversations").await;
    browser
        .wait_for(&format!("[data-testid=conversation-row][data-id=\"{}\"]", seeded.conversation))
        .await
        .expect("row");
    browser.screenshot("conversations").await.expect("screenshot");
    browser
        .click(&format!("[data-testid=conversation-row][data-id=\"{}\"] a", seeded.conversation))
        .await
        .expect("open");
    browser.wait_for_text("[data-testid=conversation-items]", "Plan a trip to the harbour").await.expect("its items");
    browser.wait_for_text("[data-testid=conversation-items]", "Which harbour?").await.expect("the response's input");
    browser.screenshot("conversation-items").await.expect("screenshot");

    // Background runs: the running one streams into the live view; the admin cancels it.
    open(&mut browser, &base, "background").await;
    browser.wait_for(&format!("[data-testid=background-row][data-id=\"{}\"]", seeded.background)).await.expect("row");
    browser.screenshot("background-runs").await.expect("screenshot");
    open(&mut browser, &base, &format!("background/{}", seeded.background)).await;
    browser.wait_for_text("[data-testid=live-output]", "part1 ").await.expect("the live output grows");
    browser.screenshot("background-live").await.expect("screenshot");
    browser.click("[data-testid=cancel-run]").await.expect("the cancel button");
    browser.wait_for("[data-testid=background-detail][data-status=cancelled]").await.expect("cancelled");
    browser.wait_for_absence("[data-testid=cancel-run]").await.expect("no cancel button once it ended");
    let (status, run) = call(&h, ALPHA, &format!("/v1/responses/{}", seeded.background), None).await;
    assert_eq!((status, run["status"].as_str()), (200, Some("cancelled")), "{run}");
    browser.wait_for_text("[data-testid=live-state]", "ended").await.expect("the live view stops");
    browser.screenshot("background-cancelled").await.expect("screenshot");

    // Files and vector stores.
    open(&mut browser, &base, "files").await;
    browser
        .wait_for_text(&format!("[data-testid=file-row][data-id=\"{}\"]", seeded.file), "harbour-notes.txt")
        .await
        .expect("file");
    browser.screenshot("files").await.expect("screenshot");
    open(&mut browser, &base, "vector_stores").await;
    browser
        .wait_for_text(&format!("[data-testid=vector-store-row][data-id=\"{}\"]", seeded.vector_store), "harbour docs")
        .await
        .expect("the vector store");
    browser
        .click(&format!("[data-testid=vector-store-row][data-id=\"{}\"] a", seeded.vector_store))
        .await
        .expect("open");
    browser
        .wait_for(&format!("[data-testid=vector-store-file-row][data-id=\"{}\"]", seeded.file))
        .await
        .expect("its file");
    browser.screenshot("vector-store").await.expect("screenshot");
    assert_clean_console(&browser, "conversations, background, files").await;

    // Overview: tokens per tenant, both tenants for the admin (sampled every 10 s: wait for it).
    open(&mut browser, &base, "overview").await;
    browser.set_wait(Duration::from_secs(45));
    let alpha_row = browser
        .wait_for_text("[data-testid=tokens-per-tenant] [data-testid=tenant-row][data-tenant=alpha]", "alpha")
        .await
        .expect("alpha's tokens row");
    let beta_row = browser
        .wait_for_text("[data-testid=tokens-per-tenant] [data-testid=tenant-row][data-tenant=beta]", "beta")
        .await
        .expect("beta's tokens row");
    browser.set_wait(respgw_testkit::browser::DEFAULT_WAIT);
    // Beta's one response counted 17 input and 3 output tokens: 20 in all.
    assert!(beta_row.contains("17") && beta_row.contains("20"), "beta's tokens: {beta_row}");
    assert!(alpha_row.chars().any(|c| c.is_ascii_digit()), "alpha's tokens: {alpha_row}");
    browser.wait_for("[data-testid=chart-tokens-tenant] svg").await.expect("the tokens chart");
    browser.screenshot("overview-admin").await.expect("screenshot");
    assert_clean_console(&browser, "overview").await;

    // Sign out: the key is gone; beta signs in and sees only its own.
    browser.click("[data-testid=sign-out]").await.expect("sign out");
    browser.wait_for("#api-key").await.expect("the sign-in form");
    let stored_key =
        browser.execute("return sessionStorage.getItem('respgw.console.apiKey');", vec![]).await.expect("runs");
    assert_eq!(stored_key, Value::Null, "signing out forgets the key");
    sign_in(&mut browser, BETA).await;
    browser.wait_for_text("[data-testid=session-tenant]", "beta").await.expect("signed in as beta");
    open(&mut browser, &base, "responses").await;
    browser.wait_for("[data-testid=response-row]").await.expect("beta's row");
    assert_eq!(ids(&browser, "[data-testid=response-row]").await, vec![seeded.beta_response.clone()]);
    let page = browser.page_text().await.expect("the page's text");
    assert!(!page.contains("lighthouses") && !page.contains(&seeded.lighthouse), "beta sees alpha's data:\n{page}");
    assert_eq!(count(&browser, "#filter-tenant").await, 0, "no tenant filter for a non-admin");
    browser.screenshot("responses-beta").await.expect("screenshot");
    browser.goto(&format!("{base}/console/#/responses/{}", seeded.lighthouse)).await.expect("the console loads");
    let error = browser.wait_for_text("#view[data-state=error] [data-testid=error]", "404").await.expect("not found");
    assert!(!error.contains("lighthouses"), "{error}");
    let page = browser.page_text().await.expect("the page's text");
    assert!(!page.contains("Tell me about lighthouses"), "beta sees alpha's input:\n{page}");
    browser.screenshot("response-of-another-tenant").await.expect("screenshot");
    for (route, row) in [("conversations", "conversation-row"), ("background", "background-row"), ("files", "file-row")]
    {
        open(&mut browser, &base, route).await;
        assert_eq!(count(&browser, &format!("[data-testid={row}]")).await, 0, "beta sees alpha's {route}");
    }
    open(&mut browser, &base, "overview").await;
    browser.wait_for("[data-testid=tenant-row][data-tenant=beta]").await.expect("beta's own tokens");
    assert_eq!(count(&browser, "[data-testid=tenant-row][data-tenant=alpha]").await, 0, "beta sees alpha's tokens");
    browser.screenshot("overview-beta").await.expect("screenshot");
    assert_clean_console(&browser, "beta's views").await;
    browser.close().await.expect("the browser closes");
}
