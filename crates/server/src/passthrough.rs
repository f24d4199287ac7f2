//! Pass-through routes: `GET /v1/models` and `POST /v1/chat/completions` forwarded to the model
//! server as they are — same method, query, body bytes and (non hop-by-hop) headers; the reply's
//! status, headers and body relayed unchanged, streams chunk by chunk as they arrive.
//!
//! Credentials: with an upstream key configured, it replaces the client's `Authorization` (and
//! `x-api-key`). With none, the client's headers are forwarded only while gateway auth is off —
//! otherwise they carry the gateway's own API key, which must never reach the upstream.
//!
//! Chat completions (`POST /v1/chat/completions`, and `POST /v1/completions` in integrated mode)
//! are admitted by their handler, which knows whether the request streams: a stream counts
//! against the tenant's open streams until its body ends. Their tokens are charged to the
//! tenant's budget when it has one (see [`crate::limits::relayed_usage`]): a stream that did not
//! ask for usage is sent asking for it, and that usage kept from the client.
//!
//! `GET /v1/models` from an Anthropic client (one sending `anthropic-version`) is answered in
//! Anthropic's list shape, made from the upstream's OpenAI-shaped list.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, Method, Uri, header};
use axum::response::{IntoResponse, Response};
use futures::{StreamExt, TryStreamExt};
use respgw_engine::{Engine, Upstream};
use respgw_protocol::ApiError;
use serde_json::{Value, json};

use crate::auth::{Admission, Tenant, X_API_KEY};
use crate::error::{HttpError, Relayed, body_rejection};
use crate::limits::{Open, OpenSlot, relayed_usage};

/// What the pass-through routes need.
#[derive(Clone)]
pub struct Passthrough {
    pub engine: Arc<Engine>,
    /// Whether gateway API-key auth is on (then the client's `Authorization` is ours, not the upstream's).
    pub gateway_auth: bool,
    /// Integrated mode: the model server's own base URL, for [`forward_any`].
    pub forward_base: Option<String>,
}

/// Connection-scoped headers (RFC 9110 §7.6.1) plus those the HTTP client sets itself.
const NOT_FORWARDED: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

fn forwardable(name: &str) -> bool {
    !NOT_FORWARDED.contains(&name)
}

/// Where a forwarded request goes.
enum Target<'a> {
    /// `{upstream base}{path}`, e.g. `/models` under `http://host:8000/v1`.
    UnderUpstreamBase(&'a str),
    /// The model server's own base URL plus the client's path, unchanged (integrated mode).
    Raw(&'a str),
}

/// A completion whose tokens are charged to its tenant.
struct Metered {
    tenant: Tenant,
    /// Its stream's usage was asked for by the gateway, not the client (kept from the client).
    strip_usage: bool,
}

/// What a forwarded completion's relayed body carries: its token meter, and the slot its stream
/// holds among the tenant's open streams (each `None` where there is none).
#[derive(Default)]
struct Relay {
    metered: Option<Metered>,
    slot: Option<OpenSlot>,
}

/// Forward one request; a completion's body is relayed with its [`Relay`].
async fn forward(
    state: &Passthrough,
    method: Method,
    target: Target<'_>,
    uri: &Uri,
    headers: HeaderMap,
    body: Bytes,
    Relay { metered, slot }: Relay,
) -> Response {
    let upstream = state.engine.upstream();
    // The client span of the forwarded call (disabled unless spans are exported); it ends with the body.
    let span = match target {
        Target::UnderUpstreamBase(path) => upstream.client_span(&method, path),
        Target::Raw(_) => upstream.client_span(&method, uri.path()),
    };
    let with_query = |path: &str| match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    let mut request = match target {
        Target::UnderUpstreamBase(path) => upstream.request(method, &with_query(path)),
        Target::Raw(base) => {
            upstream.raw_request(method, format!("{}{}", base.trim_end_matches('/'), with_query(uri.path())))
        }
    };
    let upstream_has_key = upstream.config().api_key.is_some();
    for (name, value) in &headers {
        let name_str = name.as_str();
        if !forwardable(name_str) {
            continue;
        }
        if (name == header::AUTHORIZATION || name == X_API_KEY) && (upstream_has_key || state.gateway_auth) {
            continue;
        }
        request = request.header(name, value);
    }
    // Our span's `traceparent` replaces the client's when spans are exported.
    request = Upstream::with_trace_context(request, &span);
    if !body.is_empty() {
        request = request.body(body);
    }
    let reply = match request.send().await {
        Ok(reply) => reply,
        Err(e) => {
            let error = Upstream::classify(e);
            Upstream::record_failure(&span, error.kind());
            return HttpError(error.to_api_error()).into_response();
        }
    };
    let status = reply.status();
    Upstream::record_status(&span, status);
    let mut out_headers = HeaderMap::new();
    for (name, value) in reply.headers() {
        if forwardable(name.as_str()) {
            out_headers.append(name, value.clone());
        }
    }
    let is_stream = reply
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/event-stream"));
    if is_stream {
        out_headers.insert("x-accel-buffering", axum::http::HeaderValue::from_static("no"));
    }
    // Relay bytes as they arrive; a transport failure mid-body ends the body with an error, which
    // closes the connection — the client sees exactly what the upstream did.
    let bytes = reply
        .bytes_stream()
        .inspect_err(move |e| {
            Upstream::record_failure(&span, "body_interrupted");
            tracing::warn!(error = %e, "pass-through body broke off");
        })
        .map_err(std::io::Error::other);
    let relayed: futures::stream::BoxStream<'static, std::io::Result<Bytes>> = match metered {
        Some(Metered { tenant, strip_usage }) => {
            Box::pin(relayed_usage::metered(bytes, is_stream, strip_usage, tenant))
        }
        None => Box::pin(bytes),
    };
    let body = match slot {
        // The slot goes with the body: dropped when the body ends or the client leaves.
        Some(slot) => Body::from_stream(relayed.inspect(move |_| {
            let _open = &slot;
        })),
        None => Body::from_stream(relayed),
    };
    let mut response = (status, out_headers, body).into_response();
    response.extensions_mut().insert(Relayed);
    response
}

/// `GET /v1/models`: relayed, or in Anthropic's shape for an Anthropic client.
pub async fn models(State(state): State<Passthrough>, uri: Uri, headers: HeaderMap) -> Response {
    if headers.contains_key("anthropic-version") {
        return match anthropic_models(&state).await {
            Ok(list) => axum::Json(list).into_response(),
            Err(error) => HttpError(error).into_response(),
        };
    }
    let target = Target::UnderUpstreamBase("/models");
    forward(&state, Method::GET, target, &uri, headers, Bytes::new(), Relay::default()).await
}

/// The upstream's models as Anthropic lists them: `{"data":[{"type":"model","id",
/// "display_name","created_at","lifecycle","max_input_tokens"}],"has_more":false,"first_id",
/// "last_id"}` (`created_at` RFC 3339 from the upstream's `created` seconds; the id stands in for a
/// display name; every model the upstream serves is `active`; `max_input_tokens` from vLLM's and
/// SGLang's `max_model_len`, `null` where the upstream does not say).
async fn anthropic_models(state: &Passthrough) -> Result<Value, ApiError> {
    let upstream = state.engine.upstream();
    let reply =
        upstream.request(Method::GET, "/models").send().await.map_err(|e| Upstream::classify(e).to_api_error())?;
    let status = reply.status();
    let body = reply.bytes().await.map_err(|e| Upstream::classify(e).to_api_error())?;
    if !status.is_success() {
        return Err(ApiError::upstream_unavailable(format!("the model server answered its model list with {status}")));
    }
    let listed: Value = serde_json::from_slice(&body)
        .map_err(|_| ApiError::upstream_unavailable("the model server's model list is not JSON"))?;
    let models: Vec<Value> = listed
        .get("data")
        .and_then(Value::as_array)
        .map(|data| {
            data.iter()
                .filter_map(|model| {
                    let id = model.get("id")?.as_str()?;
                    let created = model.get("created").and_then(Value::as_i64).unwrap_or(0);
                    // vLLM and SGLang say how long a prompt may be; others leave it out.
                    let context = model.get("max_model_len").and_then(Value::as_u64);
                    Some(json!({
                        "type": "model",
                        "id": id,
                        "display_name": id,
                        "created_at": rfc3339(created),
                        "lifecycle": "active",
                        "max_input_tokens": context,
                    }))
                })
                .collect()
        })
        .unwrap_or_default();
    let first_id = models.first().map(|m| m["id"].clone()).unwrap_or(Value::Null);
    let last_id = models.last().map(|m| m["id"].clone()).unwrap_or(Value::Null);
    Ok(json!({"data": models, "has_more": false, "first_id": first_id, "last_id": last_id}))
}

/// Unix seconds as an RFC 3339 UTC time (`1970-01-01T00:00:00Z`).
fn rfc3339(seconds: i64) -> String {
    let days = seconds.div_euclid(86_400);
    let in_day = seconds.rem_euclid(86_400);
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", in_day / 3600, in_day % 3600 / 60, in_day % 60)
}

/// The path of the chat completions route.
pub(crate) const CHAT_COMPLETIONS: &str = "/v1/chat/completions";
/// The path of the legacy completions route (served in integrated mode).
pub(crate) const COMPLETIONS: &str = "/v1/completions";

/// A completion request of `tenant`: the body to forward, metered when the tenant has a token
/// budget.
fn meter(tenant: Tenant, body: Bytes) -> (Bytes, Option<Metered>) {
    if !tenant.has_token_budget() {
        return (body, None);
    }
    let (body, strip_usage) = relayed_usage::ask_for_usage(body);
    (body, Some(Metered { tenant, strip_usage }))
}

/// Admit a completion request, as a stream when its body asks for one: the slot its stream
/// holds, or the refusal to answer with.
async fn admit_completion(admission: &Admission, body: &Bytes) -> Result<Option<OpenSlot>, Response> {
    let opens = relayed_usage::streams(body).then_some(Open::Stream);
    admission.admit(opens).await.map_err(IntoResponse::into_response)
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(state): State<Passthrough>,
    tenant: Tenant,
    admission: Admission,
    uri: Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match body {
        Ok(body) => {
            let slot = match admit_completion(&admission, &body).await {
                Ok(slot) => slot,
                Err(refused) => return refused,
            };
            let (body, metered) = meter(tenant, body);
            let target = Target::UnderUpstreamBase("/chat/completions");
            forward(&state, Method::POST, target, &uri, headers, body, Relay { metered, slot }).await
        }
        Err(rejection) => body_rejection(rejection).into_response(),
    }
}

/// Integrated mode: any request no gateway route serves, forwarded to the model server as it is
/// (a completion admitted, and its tokens charged, as on [`chat_completions`]).
pub async fn forward_any(
    State(state): State<Passthrough>,
    tenant: Tenant,
    admission: Option<Admission>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Some(base) = state.forward_base.clone() else {
        return HttpError(respgw_protocol::ApiError::route_not_found(method.as_str(), uri.path())).into_response();
    };
    match body {
        Ok(body) => {
            // `admission` is there exactly on the completion routes (`auth::admitted_by_handler`).
            let slot = match &admission {
                Some(admission) => match admit_completion(admission, &body).await {
                    Ok(slot) => slot,
                    Err(refused) => return refused,
                },
                None => None,
            };
            let (body, metered) = match admission {
                Some(_) => meter(tenant, body),
                None => (body, None),
            };
            forward(&state, method, Target::Raw(&base), &uri, headers, body, Relay { metered, slot }).await
        }
        Err(rejection) => body_rejection(rejection).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn unix_seconds_read_as_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }
}
