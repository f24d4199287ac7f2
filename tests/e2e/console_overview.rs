//! `GET /v1/console/overview` on `respgw serve` with two workers and two tenants (alpha an admin):
//! the supervisor samples the merged metrics every second (`--console-sample-seconds 1`), and
//! whichever worker answers shows what both workers served — requests, client errors and tokens
//! per tenant and model as they were sent — an admin every tenant and the gateway-wide series, a
//! non-admin only itself; a bad `window` is a 400 in the error shape.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{ALPHA, BETA, Harness, assert_error_shape};
use respgw_testkit::gateway::http_client;
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

/// A client opening a new connection per request, so both workers serve the test.
fn fresh_connections() -> reqwest::Client {
    http_client();
    reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).build().expect("client")
}

/// One call as `key`: status, the worker that answered, and the JSON body.
async fn call(client: &reqwest::Client, request: reqwest::RequestBuilder, key: Option<&str>) -> (u16, String, Value) {
    let request = match key {
        Some(key) => request.bearer_auth(key),
        None => request,
    };
    let response = client.execute(request.build().expect("a request")).await.expect("request completes");
    let status = response.status().as_u16();
    let worker = response.headers().get("x-respgw-worker").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let text = response.text().await.expect("body reads");
    let json = serde_json::from_str(&text).unwrap_or_else(|_| panic!("non-JSON reply ({status}): {text}"));
    (status, worker, json)
}

/// The overview as `key` sees it, with `query`.
async fn overview(h: &Harness, client: &reqwest::Client, key: &str, query: &str) -> (u16, Value) {
    let (status, _, body) = call(client, client.get(h.url(&format!("/v1/console/overview{query}"))), Some(key)).await;
    (status, body)
}

/// Sums the points' per-tenant activity, to compare with `totals`.
fn summed_points(points: &[Value]) -> Value {
    let mut sums = serde_json::Map::new();
    for point in points {
        for (tenant, activity) in point["tenants"].as_object().expect("tenants") {
            let sum = sums
                .entry(tenant.clone())
                .or_insert_with(|| json!({"requests":0,"client_errors":0,"errors":0,"tokens":{}}));
            for key in ["requests", "client_errors", "errors"] {
                sum[key] = json!(sum[key].as_u64().unwrap_or(0) + activity[key].as_u64().unwrap_or(0));
            }
            for (model, tokens) in activity["tokens"].as_object().expect("tokens") {
                let entry = &mut sum["tokens"][model];
                for kind in ["input", "output"] {
                    entry[kind] = json!(entry[kind].as_u64().unwrap_or(0) + tokens[kind].as_u64().unwrap_or(0));
                }
            }
        }
    }
    Value::Object(sums)
}

#[tokio::test]
async fn the_overview_shows_both_workers_traffic_per_tenant_and_model_scoped_to_the_caller() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let keys = common::two_tenants(dir.path(), "admin = true");
    let h = Harness::start_with(
        &["--api-keys-file", &keys, "--gateway-workers", "2", "--console-sample-seconds", "1"],
        &[],
    )
    .await;
    h.upstream.add_repeating_scenario("alpha-model", Step::text(&["Hi."], "stop", Some((10, 2))));
    h.upstream.add_repeating_scenario("beta-model", Step::text(&["Hello."], "stop", Some((7, 3))));
    let client = fresh_connections();
    let post = |body: Value| client.post(h.url("/v1/responses")).json(&body);

    // Alpha until both workers have answered it (at least 2 requests), beta twice, and one bad
    // request of alpha's.
    let mut workers = BTreeSet::new();
    let mut alpha_requests = 0u64;
    while workers.len() < 2 || alpha_requests < 2 {
        assert!(alpha_requests < 40, "the same worker answered 40 new connections");
        let (status, worker, body) =
            call(&client, post(json!({"model":"alpha-model","input":"hi"})), Some(ALPHA)).await;
        assert_eq!(status, 200, "{body}");
        workers.insert(worker);
        alpha_requests += 1;
    }
    for _ in 0..2 {
        let (status, _, body) = call(&client, post(json!({"model":"beta-model","input":"hi"})), Some(BETA)).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, _, body) = call(&client, post(json!({"model":"alpha-model"})), Some(ALPHA)).await;
    assert_eq!(status, 400, "no input: {body}");

    // Wait until a sample holds everything sent: tokens are counted by nothing else.
    let expected_alpha_tokens = json!({"alpha-model":{"input":10 * alpha_requests,"output":2 * alpha_requests}});
    let expected_beta = json!({"requests":2,"client_errors":0,"errors":0,
                               "tokens":{"beta-model":{"input":14,"output":6}}});
    let started = Instant::now();
    let mut polls = 0u64;
    let admin_view = loop {
        let (status, body) = overview(&h, &client, ALPHA, "?window=600").await;
        assert_eq!(status, 200, "{body}");
        polls += 1;
        if body["totals"]["alpha"]["tokens"] == expected_alpha_tokens
            && body["totals"]["alpha"]["client_errors"] == 1
            && body["totals"]["beta"] == expected_beta
        {
            break body;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the overview never showed the traffic: {body:#}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };

    assert_eq!(admin_view["object"], "console.overview");
    assert_eq!((admin_view["step"].as_u64(), admin_view["window"].as_u64()), (Some(1), Some(600)));
    let now = admin_view["now"].as_u64().expect("now");
    let points = admin_view["points"].as_array().expect("points");
    let times: Vec<u64> = points.iter().map(|p| p["t"].as_u64().expect("t")).collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "oldest first, one per step: {times:?}");
    assert!(times.iter().all(|t| *t > now - 600 && *t <= now), "within the window: {times:?} (now {now})");
    // Alpha's own overview calls count as its requests once sampled; its other numbers are exact.
    let alpha = &admin_view["totals"]["alpha"];
    let requests = alpha["requests"].as_u64().expect("requests");
    assert!(
        (alpha_requests + 1..=alpha_requests + polls).contains(&requests),
        "{requests} requests: {alpha_requests} answered, 1 refused, up to {polls} overview calls"
    );
    assert_eq!(alpha["errors"], 0);
    assert_eq!(summed_points(points), admin_view["totals"], "totals are the sum of the points");
    for point in points {
        assert!(point["open_streams"].is_i64() && point["in_flight"].is_i64(), "gateway-wide gauges: {point}");
    }
    let latencies: Vec<&Value> = points.iter().map(|p| &p["latency_ms"]).filter(|l| !l.is_null()).collect();
    assert!(!latencies.is_empty(), "the requests' latency shows in some step");
    for latency in latencies {
        let (p50, p95) = (latency["p50"].as_f64().expect("p50"), latency["p95"].as_f64().expect("p95"));
        assert!(0.0 <= p50 && p50 <= p95, "{latency}");
    }

    // Beta sees only itself, and none of the gateway-wide series.
    let (status, beta_view) = overview(&h, &client, BETA, "").await;
    assert_eq!(status, 200, "{beta_view}");
    assert_eq!(beta_view["window"], 3600, "the default window is an hour");
    let beta_totals = beta_view["totals"].as_object().expect("totals");
    assert_eq!(beta_totals.keys().collect::<Vec<_>>(), ["beta"], "{beta_view:#}");
    assert_eq!(beta_view["totals"]["beta"]["tokens"], expected_beta["tokens"]);
    assert!(beta_view["totals"]["beta"]["requests"].as_u64().is_some_and(|n| n >= 2));
    for point in beta_view["points"].as_array().expect("points") {
        assert!(point["open_streams"].is_null() && point["in_flight"].is_null() && point["latency_ms"].is_null());
        assert!(point["tenants"].as_object().expect("tenants").keys().all(|t| t == "beta"), "{point}");
    }

    // Bad parameters, no key.
    for (query, param, code) in [
        ("?window=59", "window", "invalid_value"),
        ("?window=3601", "window", "invalid_value"),
        ("?window=ten", "window", "invalid_value"),
        ("?tenant=beta", "tenant", "unknown_parameter"),
    ] {
        let (status, body) = overview(&h, &client, ALPHA, query).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_error_shape(&body);
        assert_eq!((body["error"]["param"].as_str(), body["error"]["code"].as_str()), (Some(param), Some(code)));
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
    let (status, _, body) = call(&client, client.get(h.url("/v1/console/overview")), None).await;
    assert_eq!(status, 401, "{body}");
    assert_error_shape(&body);
}
