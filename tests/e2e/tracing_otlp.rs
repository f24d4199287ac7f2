//! Tracing end to end: the real binary exports its spans over OTLP/gRPC to a real collector
//! (a tonic server implementing `opentelemetry-proto`'s `TraceService`, on loopback, inside this
//! test). The caller's W3C trace continues through the gateway's server span, the upstream call is a
//! client span under it, and the upstream receives that client span's `traceparent`. No prompt,
//! output text or API key appears in any attribute.
//!
//! Decided here: with tracing disabled (the default) the gateway propagates no trace context on
//! `/v1/responses` — the upstream sees no `traceparent` even if the client sent one.
//! Pass-through routes forward the client's headers as they are, so there the client's own
//! `traceparent` is relayed unchanged; with tracing on it is replaced by the gateway's.

use crate::common;

use common::{Harness, respgw_bin, serve_args};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use respgw_testkit::gateway::http_client;
use respgw_testkit::upstream::{ReplayUpstream, Step};
use serde_json::{Value, json};

/// The prompt sent by every request here; it must not show up in any span.
const PROMPT: &str = "Tell me the secret of the zebra-unicorn-7781";
/// Model output; must not show up in any span either.
const REPLY: [&str; 2] = ["walrus-", "reply-5512"];
const API_KEY: &str = "sk-tracing-test-key-0042";
/// The caller's span id in every `traceparent` sent here.
const CALLER_SPAN_ID: &str = "00f067aa0ba902b7";

fn traceparent(trace_id: &str) -> String {
    format!("00-{trace_id}-{CALLER_SPAN_ID}-01")
}

/// `POST path` with the caller's `traceparent`; returns the status and the whole reply text.
async fn post_traced(h: &Harness, path: &str, body: &Value, traceparent: &str) -> (u16, String) {
    let response = http_client()
        .post(h.url(path))
        .bearer_auth(API_KEY)
        .header("traceparent", traceparent)
        .json(body)
        .send()
        .await
        .expect("request completes");
    let status = response.status().as_u16();
    (status, response.text().await.expect("reply reads"))
}

/// Run `respgw serve` (in front of a working upstream) with `env`; it must exit at start-up.
/// Returns its exit code and stderr.
async fn serve_exit(env: (&str, &str)) -> (Option<i32>, String) {
    let upstream = ReplayUpstream::start().await.expect("replay upstream starts");
    let workdir = tempfile::tempdir().expect("temporary directory");
    let child = tokio::process::Command::new(respgw_bin())
        .args(serve_args(&upstream.base_url(), &[]))
        .env(env.0, env.1)
        .current_dir(workdir.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("respgw starts");
    let output = tokio::time::timeout(std::time::Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("`respgw serve` with {}={} kept running", env.0, env.1))
        .expect("respgw output");
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[tokio::test]
async fn out_of_range_sample_ratio_stops_serve_at_start_up() {
    let (code, stderr) = serve_exit(("GW_TRACING_SAMPLE_RATIO", "1.5")).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("GW_TRACING_SAMPLE_RATIO='1.5'"), "{stderr}");
}

#[tokio::test]
async fn without_tracing_no_trace_context_reaches_the_upstream() {
    let h = Harness::start_with(&["--api-key", API_KEY], &[]).await;
    h.scenario("untraced", vec![Step::text(&REPLY, "stop", None)]);
    let body = json!({"model": "untraced", "input": PROMPT});
    let (status, text) =
        post_traced(&h, "/v1/responses", &body, &traceparent("0af7651916cd43dd8448eb211c80319c")).await;
    assert_eq!(status, 200, "{text}");
    let requests = h.upstream.requests("untraced");
    assert_eq!(requests.len(), 1);
    assert!(requests[0].headers.get("traceparent").is_none(), "{:?}", requests[0].headers);
}

#[cfg(not(feature = "otlp"))]
#[tokio::test]
async fn enabling_tracing_in_a_binary_built_without_it_is_a_start_up_error() {
    let (code, stderr) = serve_exit(("GW_TRACING_ENABLED", "true")).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("built without tracing support"), "{stderr}");
}

#[cfg(feature = "otlp")]
mod exported {
    use std::net::SocketAddr;
    use std::sync::{Arc, Mutex, PoisonError};
    use std::time::Duration;

    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
    use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
    use opentelemetry_proto::tonic::trace::v1::Span;
    use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
    use serde_json::json;
    use tokio::task::JoinHandle;

    use super::*;

    /// A span as the collector received it, with its resource's attributes.
    #[derive(Clone, Debug)]
    struct Received {
        resource: Vec<KeyValue>,
        span: Span,
    }

    /// The OTLP/gRPC trace receiver: stores every export request.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<ExportTraceServiceRequest>>>);

    #[tonic::async_trait]
    impl TraceService for Sink {
        async fn export(
            &self,
            request: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            self.0.lock().unwrap_or_else(PoisonError::into_inner).push(request.into_inner());
            Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
        }
    }

    /// A collector on `127.0.0.1:<free port>`, stopped when dropped.
    struct Collector {
        addr: SocketAddr,
        sink: Sink,
        server: JoinHandle<()>,
    }

    impl Collector {
        async fn start() -> Collector {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("collector binds");
            let addr = listener.local_addr().expect("collector address");
            let sink = Sink::default();
            let service = TraceServiceServer::new(sink.clone());
            let server = tokio::spawn(async move {
                tonic::transport::Server::builder()
                    .add_service(service)
                    .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                    .await
                    .expect("collector serves");
            });
            Collector { addr, sink, server }
        }

        /// The gateway's environment to export here, with every trace sampled.
        fn gateway_env(&self, schedule_delay_ms: u64) -> Vec<(String, String)> {
            [
                ("GW_TRACING_ENABLED", "true".to_owned()),
                ("GW_TRACING_SAMPLE_RATIO", "1.0".to_owned()),
                ("GW_OPENTELEMETRY_HOST", self.addr.ip().to_string()),
                ("GW_OPENTELEMETRY_PORT", self.addr.port().to_string()),
                ("GW_OTEL_SERVICE_NAME", "respgw-test".to_owned()),
                ("OTEL_BSP_SCHEDULE_DELAY", schedule_delay_ms.to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect()
        }

        fn spans(&self) -> Vec<Received> {
            let requests = self.sink.0.lock().unwrap_or_else(PoisonError::into_inner).clone();
            let mut spans = Vec::new();
            for resource_spans in requests.into_iter().flat_map(|r| r.resource_spans) {
                let resource = resource_spans.resource.map(|r| r.attributes).unwrap_or_default();
                for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
                    spans.push(Received { resource: resource.clone(), span });
                }
            }
            spans
        }

        /// Wait (bounded) until `done` holds for the received spans.
        async fn wait_for(&self, what: &str, done: impl Fn(&[Received]) -> bool) -> Vec<Received> {
            for _ in 0..200 {
                let spans = self.spans();
                if done(&spans) {
                    return spans;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("the collector did not receive {what} within 20 s; got:\n{:#?}", summary(&self.spans()));
        }
    }

    impl Drop for Collector {
        fn drop(&mut self) {
            self.server.abort();
        }
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn text(value: &Option<AnyValue>) -> String {
        match value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(any_value::Value::StringValue(s)) => s.clone(),
            Some(any_value::Value::IntValue(i)) => i.to_string(),
            Some(any_value::Value::BoolValue(b)) => b.to_string(),
            Some(any_value::Value::DoubleValue(d)) => d.to_string(),
            other => format!("{other:?}"),
        }
    }

    fn attr(attributes: &[KeyValue], key: &str) -> Option<String> {
        attributes.iter().find(|kv| kv.key == key).map(|kv| text(&kv.value))
    }

    /// One line per span, for failure messages.
    fn summary(spans: &[Received]) -> Vec<String> {
        spans
            .iter()
            .map(|r| {
                let s = &r.span;
                format!(
                    "{:?} {}..{} kind={} trace={} span={} parent={} attrs={:?}",
                    s.name,
                    s.start_time_unix_nano % 1_000_000_000_000,
                    s.end_time_unix_nano % 1_000_000_000_000,
                    s.kind,
                    hex(&s.trace_id),
                    hex(&s.span_id),
                    hex(&s.parent_span_id),
                    s.attributes.iter().map(|kv| format!("{}={}", kv.key, text(&kv.value))).collect::<Vec<_>>()
                )
            })
            .collect()
    }

    fn find<'a>(spans: &'a [Received], trace_id: &str, name: &str) -> Option<&'a Received> {
        spans.iter().find(|r| hex(&r.span.trace_id) == trace_id && r.span.name == name)
    }

    /// The server span of a request in trace `trace_id` and the client span of its upstream call.
    fn server_and_client<'a>(
        spans: &'a [Received],
        trace_id: &str,
        server_name: &str,
        client_name: &str,
    ) -> (&'a Received, &'a Received) {
        let all = summary(spans);
        let server = find(spans, trace_id, server_name).unwrap_or_else(|| panic!("no {server_name:?}: {all:#?}"));
        let client = find(spans, trace_id, client_name).unwrap_or_else(|| panic!("no {client_name:?}: {all:#?}"));
        (server, client)
    }

    /// The server span continues the caller's trace, the client span is its child, and the
    /// upstream received the client span's `traceparent` (one header, not the caller's).
    fn assert_linked(server: &Received, client: &Received, upstream_traceparent: &str, route: &str) {
        let (s, c) = (&server.span, &client.span);
        assert_eq!(s.kind, SpanKind::Server as i32, "{s:?}");
        assert_eq!(hex(&s.parent_span_id), CALLER_SPAN_ID, "the server span's parent is the caller's span");
        assert_eq!(attr(&s.attributes, "http.request.method").as_deref(), Some("POST"));
        assert_eq!(attr(&s.attributes, "http.route").as_deref(), Some(route));
        assert_eq!(attr(&s.attributes, "url.path").as_deref(), Some(route));
        assert_eq!(attr(&s.attributes, "http.response.status_code").as_deref(), Some("200"));
        assert!(attr(&s.attributes, "request_id").is_some(), "{s:?}");

        assert_eq!(c.kind, SpanKind::Client as i32, "{c:?}");
        assert_eq!(c.trace_id, s.trace_id);
        assert_eq!(c.parent_span_id, s.span_id, "the upstream call is a child of the server span");
        assert_eq!(attr(&c.attributes, "server.address").as_deref(), Some("127.0.0.1"));
        assert_eq!(attr(&c.attributes, "http.request.method").as_deref(), Some("POST"));
        assert_eq!(attr(&c.attributes, "http.response.status_code").as_deref(), Some("200"));
        assert!(
            c.start_time_unix_nano >= s.start_time_unix_nano && c.end_time_unix_nano <= s.end_time_unix_nano,
            "server {}..{} client {}..{}",
            s.start_time_unix_nano,
            s.end_time_unix_nano,
            c.start_time_unix_nano,
            c.end_time_unix_nano
        );

        assert_eq!(upstream_traceparent, format!("00-{}-{}-01", hex(&c.trace_id), hex(&c.span_id)));
    }

    fn only_traceparent(headers: &reqwest::header::HeaderMap) -> String {
        let values: Vec<_> = headers.get_all("traceparent").iter().collect();
        assert_eq!(values.len(), 1, "exactly one traceparent upstream: {headers:?}");
        values[0].to_str().expect("ASCII traceparent").to_owned()
    }

    #[tokio::test]
    async fn spans_reach_the_collector_with_the_callers_trace_and_parent_links() {
        let collector = Collector::start().await;
        let env = collector.gateway_env(100);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let h = Harness::start_with(&["--api-key", API_KEY], &env).await;
        h.scenario("traced", vec![Step::text(&REPLY, "stop", Some((7, 2))), Step::text(&REPLY, "stop", Some((7, 2)))]);
        h.scenario("traced-passthrough", vec![Step::text(&REPLY, "stop", None)]);
        let (json_trace, sse_trace, passthrough_trace) = (
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "5bf92f3577b34da6a3ce929d0e0e4737",
            "6bf92f3577b34da6a3ce929d0e0e4738",
        );

        let (status, reply) =
            post_traced(&h, "/v1/responses", &json!({"model": "traced", "input": PROMPT}), &traceparent(json_trace))
                .await;
        assert_eq!(status, 200, "{reply}");
        let body = json!({"model": "traced", "input": PROMPT, "stream": true});
        let (status, reply) = post_traced(&h, "/v1/responses", &body, &traceparent(sse_trace)).await;
        assert_eq!(status, 200, "{reply}");
        assert!(reply.contains("response.completed"), "{reply}");
        let body =
            json!({"model": "traced-passthrough", "stream": true, "messages": [{"role": "user", "content": PROMPT}]});
        let (status, reply) = post_traced(&h, "/v1/chat/completions", &body, &traceparent(passthrough_trace)).await;
        assert_eq!(status, 200, "{reply}");

        let responses = "HTTP POST /v1/responses";
        let chat = "HTTP POST /v1/chat/completions";
        let upstream_call = "POST /chat/completions";
        let spans = collector
            .wait_for("the server and client spans of three requests", |spans| {
                [(json_trace, responses), (sse_trace, responses), (passthrough_trace, chat)].iter().all(
                    |(trace, name)| find(spans, trace, name).is_some() && find(spans, trace, upstream_call).is_some(),
                )
            })
            .await;

        let upstream = h.upstream.requests("traced");
        assert_eq!(upstream.len(), 2);
        let (server, client) = server_and_client(&spans, json_trace, responses, upstream_call);
        assert_linked(server, client, &only_traceparent(&upstream[0].headers), "/v1/responses");
        // The streamed reply: the server span lasts until the stream ends, the call inside it.
        let (server, client) = server_and_client(&spans, sse_trace, responses, upstream_call);
        assert_linked(server, client, &only_traceparent(&upstream[1].headers), "/v1/responses");
        // Pass-through: the gateway's traceparent replaces the caller's.
        let upstream = h.upstream.requests("traced-passthrough");
        let (server, client) = server_and_client(&spans, passthrough_trace, chat, upstream_call);
        assert_linked(server, client, &only_traceparent(&upstream[0].headers), "/v1/chat/completions");

        let resource = &spans[0].resource;
        assert_eq!(attr(resource, "service.name").as_deref(), Some("respgw-test"));
        assert!(attr(resource, "service.instance.id").is_some_and(|id| !id.is_empty()), "{resource:?}");
        assert!(spans.iter().all(|r| attr(&r.resource, "service.name").as_deref() == Some("respgw-test")));

        // Nothing of the prompt, the model's reply or the API key in any name or attribute.
        for received in &spans {
            let span = &received.span;
            let attributes = span.attributes.iter().chain(span.events.iter().flat_map(|e| e.attributes.iter()));
            let texts: Vec<String> = attributes
                .chain(received.resource.iter())
                .flat_map(|kv| [kv.key.clone(), text(&kv.value)])
                .chain([span.name.clone()])
                .chain(span.events.iter().map(|e| e.name.clone()))
                .collect();
            for needle in ["zebra-unicorn", "walrus-", "reply-5512", API_KEY] {
                assert!(texts.iter().all(|t| !t.contains(needle)), "{needle:?} leaked into a span: {texts:?}");
            }
        }
    }

    #[tokio::test]
    async fn a_stopping_gateway_flushes_its_queued_spans() {
        let collector = Collector::start().await;
        // Batches would wait ten minutes: only the shutdown flush can deliver them in time.
        let env = collector.gateway_env(600_000);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let h = Harness::start_with(&["--api-key", API_KEY], &env).await;
        h.scenario("flushed", vec![Step::text(&REPLY, "stop", None)]);
        let trace_id = "7bf92f3577b34da6a3ce929d0e0e4739";
        let (status, reply) =
            post_traced(&h, "/v1/responses", &json!({"model": "flushed", "input": PROMPT}), &traceparent(trace_id))
                .await;
        assert_eq!(status, 200, "{reply}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(collector.spans().is_empty(), "nothing is exported before the batch delay or a shutdown");

        // Our own child's pid; the harness reaps it when dropped.
        kill(Pid::from_raw(h.gateway.pid() as libc::pid_t), Signal::SIGTERM).expect("SIGTERM to the gateway");
        collector
            .wait_for("the spans flushed on shutdown", |spans| {
                find(spans, trace_id, "HTTP POST /v1/responses").is_some()
                    && find(spans, trace_id, "POST /chat/completions").is_some()
            })
            .await;
    }
}
