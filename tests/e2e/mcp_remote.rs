//! Remote MCP end to end: requests declare `{"type":"mcp","server_url":…}` servers, which the
//! real gateway dials itself. The servers are the project's own `respgw-mcp-test-http` (streamable
//! HTTP at `/mcp`, legacy SSE at `/sse`, optionally behind a bearer token), started per test on
//! loopback — so most gateways here run with `GW_MCP_REQUEST_REMOTE_URL_CHECKS=false`; the URL
//! checks themselves are tested with the default (on). The TLS test puts an HTTPS front with a
//! certificate made at test time (rcgen) before the test server.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use common::{Harness, final_response, kinds};
use respgw_testkit::gateway::{GatewayProcess, post_sse};
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

const TOKEN: &str = "sk-remote-SECRET-123";
const HEADER_SECRET: &str = "hdr-SECRET-456";

/// A binary built next to `respgw` by `cargo test --workspace` / `cargo build --workspace --bins`.
fn sibling_bin(name: &str) -> PathBuf {
    let bin = common::respgw_bin().with_file_name(name);
    assert!(bin.exists(), "{} is missing: run `cargo build --workspace --bins` first", bin.display());
    bin
}

/// `respgw-mcp-test-http` on a free loopback port; killed on drop.
pub(crate) struct McpServer {
    child: Child,
    /// `http://127.0.0.1:PORT`
    base: String,
}

impl McpServer {
    pub(crate) fn start(extra: &[&str]) -> McpServer {
        let mut child = Command::new(sibling_bin("respgw-mcp-test-http"))
            .args(["--port", "0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the MCP test server starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("its first line");
        let base =
            line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("unexpected: {line:?}")).to_owned();
        McpServer { child, base }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn addr(&self) -> SocketAddr {
        self.base.trim_start_matches("http://").parse().expect("address")
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A gateway for loopback servers (URL checks off), with extra environment.
pub(crate) async fn gateway(extra_env: &[(&str, &str)]) -> Harness {
    let mut env = vec![("GW_MCP_REQUEST_REMOTE_URL_CHECKS", "false")];
    env.extend_from_slice(extra_env);
    Harness::start_with(&[], &env).await
}

fn remote(label: &str, url: &str) -> Value {
    json!({"type":"mcp","server_label":label,"server_url":url,"require_approval":"never"})
}

/// A model turn that calls `function` with `arguments`, then a final answer.
fn calls(function: &str, arguments: Value) -> Vec<Step> {
    let call = json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function",
        "function":{"name":function,"arguments":arguments.to_string()}}]},"finish_reason":"tool_calls"}]});
    vec![Step::Sse(vec![format!("data: {call}\n\n"), "data: [DONE]\n\n".into()]), Step::text(&["Done."], "stop", None)]
}

fn item<'a>(response: &'a Value, kind: &str) -> &'a Value {
    response["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind}: {response}"))
}

/// The types of the events about one item, in order.
fn item_events<'a>(events: &'a [Value], item_id: &str) -> Vec<&'a str> {
    events
        .iter()
        .filter(|e| e["item_id"] == item_id || e["item"]["id"] == item_id)
        .map(|e| e["type"].as_str().unwrap_or("?"))
        .collect()
}

fn assert_422(status: u16, body: &Value, param: &str, needle: &str) {
    eprintln!("{status} {body}");
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["type"], "bad_input", "{body}");
    assert_eq!(body["error"]["param"], param, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(needle), "expected {needle:?} in {message:?}");
}

fn assert_no_secret(what: &str, text: &str) {
    for secret in [TOKEN, HEADER_SECRET, "SECRET"] {
        assert!(!text.contains(secret), "{what} contains {secret:?}:\n{text}");
    }
}

#[tokio::test]
async fn a_remote_call_over_streamable_http_streams_the_builtin_events_with_the_request_local_label() {
    let server = McpServer::start(&[]);
    let h = gateway(&[]).await;
    h.scenario("m", calls("mcp__docs__echo", json!({"text":"hello remote"})));
    let mut tool = remote("docs", &server.url("/mcp"));
    tool["allowed_tools"] = json!(["echo", "add"]);
    let events = h.stream_unchecked(json!({"model":"m","input":"echo it","tools":[tool]})).await;
    let k = kinds(&events);
    let listing: Vec<&str> = k.iter().copied().filter(|t| t.contains("mcp_list_tools")).collect();
    assert_eq!(listing, ["response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed"]);

    let response = final_response(&events);
    assert_eq!(response["status"], "completed", "{response}");
    let listed: Vec<&str> = item(response, "mcp_list_tools")["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["add", "echo"], "allowed_tools filters the listing");
    let call = item(response, "mcp_call");
    assert_eq!((call["server_label"].as_str(), call["name"].as_str()), (Some("docs"), Some("echo")));
    assert_eq!((call["status"].as_str(), call["output"].as_str()), (Some("completed"), Some("hello remote")));
    assert!(call["error"].is_null());

    // The same events, in the same order, as a Built-in call.
    let per_item = item_events(&events, call["id"].as_str().unwrap());
    assert_eq!(per_item.first(), Some(&"response.output_item.added"));
    assert_eq!(per_item[1], "response.mcp_call.in_progress");
    assert!(per_item[2..per_item.len() - 3].iter().all(|t| *t == "response.mcp_call_arguments.delta"));
    assert!(per_item.len() > 5, "at least one arguments delta: {per_item:?}");
    assert_eq!(
        &per_item[per_item.len() - 3..],
        ["response.mcp_call_arguments.done", "response.mcp_call.completed", "response.output_item.done"]
    );

    // The model was offered the allowed tools only, and saw the result.
    let sent = h.upstream_bodies("m");
    let offered: Vec<&str> =
        sent[0]["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(offered, ["mcp__docs__add", "mcp__docs__echo"]);
    let tool_message = sent[1]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool_message["content"], "hello remote");

    // The echo of the declaration: the URL, never credentials.
    let echoed = &response["tools"][0];
    assert_eq!(echoed["server_url"], server.url("/mcp"));
    assert!(echoed.get("authorization").is_none() && echoed["headers"].is_null(), "{echoed}");
}

#[tokio::test]
async fn a_legacy_sse_remote_works_and_failures_are_failed_items() {
    let server = McpServer::start(&[]);
    let h = gateway(&[("GW_MCP_REQUEST_REMOTE_TOOL_TIMEOUT_SEC", "1")]).await;
    let mut steps = calls("mcp__old__echo", json!({"text":"over sse"}));
    steps.extend(calls("mcp__old__fail", json!({"message":"the remote tool broke"})));
    steps.extend(calls("mcp__old__add", json!({"a":"not a number","b":2})));
    steps.extend(calls("mcp__old__slow", json!({"ms":3000})));
    h.scenario("m", steps);
    let tools = json!([remote("old", &server.url("/sse"))]);

    let (status, response) = h.create(json!({"model":"m","input":"x","tools":tools})).await;
    assert_eq!(status, 200, "{response}");
    let call = item(&response, "mcp_call");
    assert_eq!((call["status"].as_str(), call["output"].as_str()), (Some("completed"), Some("over sse")), "{call}");

    for expected in ["the remote tool broke", "do not match the input schema", "timed out after 1s"] {
        let events = h.stream_unchecked(json!({"model":"m","input":"x","tools":tools})).await;
        assert!(kinds(&events).contains(&"response.mcp_call.failed"), "{expected}");
        let response = final_response(&events);
        assert_eq!(response["status"], "completed");
        let call = item(response, "mcp_call");
        assert_eq!(call["status"], "failed");
        assert!(call["error"].as_str().unwrap().contains(expected), "{call}");
    }
}

#[tokio::test]
async fn a_bearer_token_opens_the_server_and_a_wrong_one_is_a_422_without_the_token() {
    let server = McpServer::start(&["--require-token", "T-good-token"]);
    let h = gateway(&[]).await;
    h.scenario("m", calls("mcp__auth__echo", json!({"text":"authorized"})));
    let mut tool = remote("auth", &server.url("/mcp"));
    tool["authorization"] = json!("T-good-token");
    let (status, response) = h.create(json!({"model":"m","input":"x","tools":[tool]})).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(item(&response, "mcp_call")["output"], "authorized");

    // The same credential as a plain header works too (headers are sent as given).
    h.scenario("h", calls("mcp__auth__echo", json!({"text":"by header"})));
    let mut tool = remote("auth", &server.url("/mcp"));
    tool["headers"] = json!({"Authorization": "Bearer T-good-token"});
    let (status, response) = h.create(json!({"model":"h","input":"x","tools":[tool]})).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(item(&response, "mcp_call")["output"], "by header");

    for url in [server.url("/mcp"), server.url("/sse")] {
        let mut tool = remote("auth", &url);
        tool["authorization"] = json!("T-wrong-SECRET-token");
        let (status, body) = h.create(json!({"model":"m","input":"x","tools":[tool]})).await;
        assert_422(status, &body, "tools[0].server_url", "MCP tool inventory resolution failed for server 'auth'");
        assert!(!body.to_string().contains("T-wrong-SECRET-token"), "{body}");
        let (status, body) = h.create(json!({"model":"m","input":"x","tools":[remote("auth", &url)]})).await;
        assert_eq!(status, 422, "no token: {body}");
    }
}

#[tokio::test]
async fn remote_credentials_are_never_stored_echoed_or_logged() {
    let server = McpServer::start(&["--require-token", TOKEN]);
    // Debug logs: whatever the gateway logs about a session must still hold no secret.
    let h = gateway(&[("RUST_LOG", "debug")]).await;
    let mut steps = calls("mcp__sec__echo", json!({"text":"streamed"}));
    steps.extend(calls("mcp__sec__echo", json!({"text":"json"})));
    steps.push(Step::text(&["Continued."], "stop", None));
    h.scenario("m", steps);
    let mut tool = remote("sec", &server.url("/mcp"));
    tool["authorization"] = json!(TOKEN);
    tool["headers"] = json!({"X-Api-Key": HEADER_SECRET});
    let mut seen: Vec<(String, String)> = Vec::new();

    // A streamed and a JSON response.
    let (status, sse) =
        post_sse(&h.url("/v1/responses"), &json!({"model":"m","input":"one","stream":true,"tools":[tool]}))
            .await
            .unwrap();
    assert_eq!(status, 200, "{sse}");
    assert!(sse.contains("streamed") && sse.contains("response.completed"), "{sse}");
    seen.push(("SSE reply".into(), sse));
    let (status, first) = h.create(json!({"model":"m","input":"two","tools":[tool]})).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(item(&first, "mcp_call")["output"], "json");
    seen.push(("JSON reply".into(), first.to_string()));
    let id = first["id"].as_str().unwrap().to_owned();

    // Retrieval and input items.
    let (status, stored) = h.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(stored["tools"][0]["server_url"], server.url("/mcp"));
    seen.push(("GET".into(), stored.to_string()));
    let (status, input_items) = h.get(&format!("/v1/responses/{id}/input_items")).await;
    assert_eq!(status, 200);
    seen.push(("input_items".into(), input_items.to_string()));

    // Failures quoting the credentials: a wrong path, a wrong token.
    let mut wrong_path = tool.clone();
    wrong_path["server_url"] = json!(server.url("/nope"));
    let (status, body) = h.create(json!({"model":"m","input":"x","tools":[wrong_path]})).await;
    assert_eq!(status, 422, "{body}");
    seen.push(("422 wrong path".into(), body.to_string()));
    let mut wrong_token = tool.clone();
    wrong_token["authorization"] = json!(format!("{TOKEN}-but-wrong"));
    let (status, body) = h.create(json!({"model":"m","input":"x","tools":[wrong_token]})).await;
    assert_eq!(status, 422, "{body}");
    seen.push(("422 wrong token".into(), body.to_string()));

    // Continuations: tools are not inherited, so the server is out of reach without credentials…
    let (status, body) = h
        .create(
            json!({"model":"m","input":"three","previous_response_id":id,"tools":[remote("sec", &server.url("/mcp"))]}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    seen.push(("422 continuation".into(), body.to_string()));
    // …and a continuation without tools sees the history, but no credential anywhere.
    let (status, next) = h.create(json!({"model":"m","input":"three","previous_response_id":id})).await;
    assert_eq!(status, 200, "{next}");
    seen.push(("continuation".into(), next.to_string()));
    let (_, next_items) = h.get(&format!("/v1/responses/{}/input_items", next["id"].as_str().unwrap())).await;
    seen.push(("continuation input_items".into(), next_items.to_string()));
    seen.push(("what the model saw".into(), Value::Array(h.upstream_bodies("m")).to_string()));

    for (what, text) in &seen {
        assert_no_secret(what, text);
    }

    // The SQLite files (database, WAL, shared memory) and the log.
    let db = h.gateway.workdir().join("respgw.db");
    let mut bytes = Vec::new();
    for suffix in ["", "-wal", "-shm"] {
        if let Ok(b) = std::fs::read(format!("{}{suffix}", db.display())) {
            bytes.extend(b);
        }
    }
    let haystack = String::from_utf8_lossy(&bytes);
    assert!(haystack.contains(&id), "the grep reads the gateway's database ({})", db.display());
    assert!(haystack.contains(&server.url("/mcp")), "the declaration is stored, without credentials");
    assert_no_secret("the SQLite files", &haystack);
    let log = h.gateway.stderr_text();
    assert!(log.contains("DEBUG"), "debug logging is on");
    assert_no_secret("the gateway's log", &log);
}

#[tokio::test]
async fn a_server_url_query_is_used_but_never_echoed_nor_stored_and_userinfo_is_refused() {
    const QUERY_SECRET: &str = "query-SECRET-789";
    let server = McpServer::start(&[]);
    let h = gateway(&[("RUST_LOG", "debug")]).await;
    h.scenario("m", calls("mcp__q__echo", json!({"text":"with a query"})));
    let url = format!("{}?token={QUERY_SECRET}&region=eu", server.url("/mcp"));
    let (status, created) = h.create(json!({"model":"m","input":"one","tools":[remote("q", &url)]})).await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(item(&created, "mcp_call")["output"], "with a query");
    assert_eq!(created["tools"][0]["server_url"], server.url("/mcp"), "echoed without its query");
    let id = created["id"].as_str().unwrap().to_owned();
    let (status, stored) = h.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(stored["tools"][0]["server_url"], server.url("/mcp"));
    assert!(!stored.to_string().contains(QUERY_SECRET), "{stored}");
    let db = h.gateway.workdir().join("respgw.db");
    let mut bytes = Vec::new();
    for suffix in ["", "-wal", "-shm"] {
        if let Ok(b) = std::fs::read(format!("{}{suffix}", db.display())) {
            bytes.extend(b);
        }
    }
    let haystack = String::from_utf8_lossy(&bytes);
    assert!(haystack.contains(&id), "the grep reads the gateway's database ({})", db.display());
    assert!(!haystack.contains(QUERY_SECRET), "the database holds no query secret");
    assert!(!h.gateway.stderr_text().contains(QUERY_SECRET), "the log holds no query secret");

    // Credentials in the URL itself are refused, whatever the scheme of the rest.
    let with_userinfo = server.url("/mcp").replace("http://", "http://user:pa55@");
    let (status, body) = h.create(json!({"model":"m","input":"x","tools":[remote("u", &with_userinfo)]})).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("tools[0].server_url")), "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("authorization") && !message.contains("pa55"), "{message}");
}

#[tokio::test]
async fn with_url_checks_on_local_and_literal_hosts_are_refused() {
    let server = McpServer::start(&[]);
    let port = server.addr().port();
    let h = Harness::start_with(&[], &[]).await;
    let refuse = |url: String, param: &'static str, needle: &'static str| {
        let h = &h;
        async move {
            let mut tool = remote("r", &url);
            tool["authorization"] = json!(TOKEN);
            let (status, body) = h.create(json!({"model":"m","input":"x","tools":[tool]})).await;
            assert_422(status, &body, param, needle);
            assert_no_secret(&url, &body.to_string());
        }
    };
    // Validation: the URL rules.
    refuse(server.url("/mcp"), "tools[0].server_url", "https").await;
    refuse("http://mcp.example.com/mcp".into(), "tools[0].server_url", "https").await;
    refuse(format!("https://localhost:{port}/mcp"), "tools[0].server_url", "localhost").await;
    refuse(format!("https://api.localhost:{port}/mcp"), "tools[0].server_url", "localhost").await;
    refuse(format!("https://127.0.0.1:{port}/mcp"), "tools[0].server_url", "IP-literal").await;
    refuse(format!("https://[::1]:{port}/mcp"), "tools[0].server_url", "IP-literal").await;
    // Hosts that only a URL parser sees as addresses: caught when the URL is dialled.
    refuse(format!("https://2130706433:{port}/mcp"), "tools[0].server_url", "IP-literal").await;
    refuse(format!("https://0x7f.1:{port}/mcp"), "tools[0].server_url", "IP-literal").await;
    // A name that resolves to loopback (an /etc/hosts alias), refused by the guarded resolver.
    if let Some(alias) = loopback_alias() {
        refuse(format!("https://{alias}:{port}/mcp"), "tools[0].server_url", "is not an allowed destination").await;
    } else {
        eprintln!("no loopback alias in /etc/hosts: the resolver case is covered by the unit tests only");
    }
    assert!(h.upstream_bodies("m").is_empty(), "nothing reached the model");
}

/// A name from /etc/hosts that maps to a loopback address and is not `localhost`.
fn loopback_alias() -> Option<String> {
    let hosts = std::fs::read_to_string("/etc/hosts").ok()?;
    hosts.lines().find_map(|line| {
        let mut fields = line.split('#').next()?.split_whitespace();
        let address: std::net::IpAddr = fields.next()?.parse().ok()?;
        if !address.is_loopback() {
            return None;
        }
        fields
            .find(|name| {
                let lower = name.to_ascii_lowercase();
                lower != "localhost" && !lower.ends_with(".localhost") && lower.parse::<std::net::IpAddr>().is_err()
            })
            .map(str::to_owned)
    })
}

#[tokio::test]
async fn remote_mcp_disabled_rejects_every_remote_declaration() {
    let server = McpServer::start(&[]);
    let h = gateway(&[("GW_MCP_REQUEST_REMOTE_ENABLED", "off")]).await;
    for url in [server.url("/mcp"), "https://mcp.example.com/mcp".to_owned()] {
        let (status, body) = h.create(json!({"model":"m","input":"x","tools":[remote("r", &url)]})).await;
        assert_422(status, &body, "tools[0].server_url", "disabled");
    }
}

#[tokio::test]
async fn an_unreachable_server_is_a_422_before_anything_streams() {
    let server = McpServer::start(&[]);
    let h = gateway(&[]).await;
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let (status, body) = h
        .create(json!({"model":"m","input":"x","stream":true,
            "tools":[remote("r", &format!("http://127.0.0.1:{dead}/mcp"))]}))
        .await;
    assert_422(status, &body, "tools[0].server_url", "MCP tool inventory resolution failed for server 'r'");
    let mut tool = remote("r", &server.url("/mcp"));
    tool["allowed_tools"] = json!(["no_such_tool"]);
    let (status, body) = h.create(json!({"model":"m","input":"x","tools":[tool]})).await;
    assert_422(status, &body, "tools[0].allowed_tools", "no tools left");
}

#[tokio::test]
async fn invalid_remote_settings_are_a_clear_start_up_error() {
    for (key, value) in
        [("GW_MCP_REQUEST_REMOTE_URL_CHECKS", "maybe"), ("GW_MCP_REQUEST_REMOTE_CA_FILE", "/nonexistent/ca.pem")]
    {
        let env = vec![(key.to_owned(), value.to_owned()), ("GW_CODE_INTERPRETER".into(), "disabled".into())];
        let args = common::serve_args("http://127.0.0.1:9", &[]);
        let error = match GatewayProcess::spawn(common::respgw_bin(), &args, &env).await {
            Ok(_) => panic!("{key}={value} must stop the start"),
            Err(e) => format!("{e:#}"),
        };
        assert!(error.contains(key), "{error}");
    }
}

/// An HTTPS front on loopback for a plain MCP server: TLS with a leaf certificate for `localhost`
/// and `127.0.0.1`, issued by a CA made for this test, then bytes copied to the backend.
struct TlsFront {
    addr: SocketAddr,
    ca_pem: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn tls_front(backend: SocketAddr) -> TlsFront {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "respgw test CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that refuses the certificate ends the handshake: nothing to forward.
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let Ok(mut plain) = tokio::net::TcpStream::connect(backend).await else { return };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    TlsFront { addr, ca_pem: ca.pem(), task }
}

#[tokio::test]
async fn a_self_signed_https_server_needs_its_ca_in_the_remote_ca_file() {
    let server = McpServer::start(&["--require-token", TOKEN]);
    let front = tls_front(server.addr()).await;
    let url = format!("https://localhost:{}/mcp", front.addr.port());
    let mut tool = remote("tls", &url);
    tool["authorization"] = json!(TOKEN);

    // Not trusted: a clear certificate error, no secret.
    let h = gateway(&[]).await;
    let (status, body) = h.create(json!({"model":"m","input":"x","tools":[tool]})).await;
    assert_422(status, &body, "tools[0].server_url", "certificate");
    assert_no_secret("TLS failure", &body.to_string());
    drop(h);

    // Trusted through GW_MCP_REQUEST_REMOTE_CA_FILE: works end to end.
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &front.ca_pem).unwrap();
    let h = gateway(&[("GW_MCP_REQUEST_REMOTE_CA_FILE", path_str(&ca_file))]).await;
    h.scenario("m", calls("mcp__tls__echo", json!({"text":"over tls"})));
    let (status, response) = h.create(json!({"model":"m","input":"x","tools":[tool]})).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(item(&response, "mcp_call")["output"], "over tls");
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

#[tokio::test]
async fn a_remote_server_is_listed_once_per_conversation() {
    let server = McpServer::start(&[]);
    let h = gateway(&[]).await;
    let mut steps = calls("mcp__r__echo", json!({"text":"first"}));
    steps.push(Step::text(&["Second answer."], "stop", None));
    h.scenario("m", steps);
    let tools = json!([remote("r", &server.url("/mcp"))]);
    let (_, first) = h.create(json!({"model":"m","input":"one","tools":tools})).await;
    assert!(first["output"].as_array().unwrap().iter().any(|i| i["type"] == "mcp_list_tools"));
    let (status, second) =
        h.create(json!({"model":"m","input":"two","tools":tools,"previous_response_id":first["id"]})).await;
    assert_eq!(status, 200, "{second}");
    assert!(second["output"].as_array().unwrap().iter().all(|i| i["type"] != "mcp_list_tools"), "{second}");
    let messages = h.upstream_bodies("m")[2]["messages"].to_string();
    assert!(messages.contains("mcp__r__echo") && messages.contains("first"), "{messages}");
}

#[tokio::test]
async fn library_log_lines_never_carry_a_server_url_query_secret() {
    const API_KEY: &str = "apikey-SECRET-321";
    let h = gateway(&[]).await;
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{dead}/mcp?api_key={API_KEY}&region=eu");
    let (status, body) = h.create(json!({"model":"m","input":"x","tools":[remote("r", &url)]})).await;
    assert_eq!(status, 422, "{body}");
    // The MCP client library logs the failed connection with the URL it dialled.
    assert!(h.wait_for_log(&format!("127.0.0.1:{dead}/mcp?")).await, "{}", h.gateway.stderr_text());
    let log = h.gateway.stderr_text();
    assert!(log.contains("region=eu"), "only the secret is taken out of the URL:\n{log}");
    assert!(!log.contains(API_KEY), "the gateway's log holds the query secret:\n{log}");
}
