//! `POST /v1/responses/input_tokens`: how many tokens the model would be sent for a would-be
//! `POST /v1/responses` body — its history, instructions, tools and the chat template included.
//!
//! The request is prepared exactly as a response would be ([`Engine::prepare`]: history from
//! `previous_response_id`, files read, gateway tools resolved), and the chat request of its first
//! model turn is built as the run would build it. The upstream then counts it, with the first of
//! these it serves:
//! 1. vLLM's `POST /tokenize` with `messages` (and `tools`) at the server's root — the chat
//!    template applied by the server, `count` read from the reply;
//! 2. llama.cpp's `POST /apply-template` (the whole chat request) then `POST /tokenize` of the
//!    prompt it returns, with the special tokens the completion path adds;
//! 3. otherwise the chat request itself, non-streaming with `max_tokens: 1`, and its
//!    `usage.prompt_tokens` (any OpenAI-compatible server; costs one token of generation).
//!
//! The server's root is the upstream base URL without its trailing `/v1`. A method the upstream
//! does not serve (404, 405 or 501, or a reply of another shape) is skipped; one that refuses the
//! body (400, 422 — SGLang's own `/tokenize` takes a `prompt`) is skipped for this request. The
//! first method that counts is remembered for the process, unless a method before it refused
//! (then the next request probes again); a remembered method that later answers as absent is
//! forgotten.

use std::sync::{Arc, Mutex, PoisonError};

use respgw_protocol::{ApiError, ValidatedRequest};
use serde_json::{Map, Value, json};

use crate::engine::Engine;
use crate::upstream::{Upstream, UpstreamError};

/// How the upstream counts a chat request's prompt tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountMethod {
    /// vLLM: `POST /tokenize` with `messages`.
    TokenizeMessages,
    /// llama.cpp: `POST /apply-template`, then `POST /tokenize` with `content`.
    ApplyTemplate,
    /// Any server: a one-token chat completion's `usage.prompt_tokens`.
    CompletionUsage,
}

/// The counting method found for this process's upstream (none until a count succeeded).
#[derive(Debug, Default)]
pub struct InputTokenCounter {
    method: Mutex<Option<CountMethod>>,
}

/// What one counting method made of a request.
enum Attempt {
    Counted(u64),
    /// The upstream does not serve this method.
    Absent,
    /// The upstream serves the route but refused this body.
    Refused,
}

impl Engine {
    /// Tokens the upstream model would be sent for `request`'s first model turn. Fails like
    /// [`Engine::prepare`] (400 `previous_response_not_found`, 422 for tools that do not
    /// resolve) and like a response's upstream call.
    pub async fn count_input_tokens(
        self: &Arc<Self>,
        owner: &str,
        request: ValidatedRequest,
        upstream_headers: Vec<(&'static str, String)>,
    ) -> Result<u64, ApiError> {
        let prepared = self.prepare(owner, request, upstream_headers).await?;
        let body = prepared.first_turn_request();
        self.input_token_counter()
            .count(self.upstream(), &body, prepared.upstream_headers())
            .await
            .map_err(|e| e.to_api_error())
    }
}

impl InputTokenCounter {
    /// The method remembered for this process, if any.
    pub fn method(&self) -> Option<CountMethod> {
        *self.method.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn remember(&self, method: Option<CountMethod>) {
        *self.method.lock().unwrap_or_else(PoisonError::into_inner) = method;
    }

    /// Count the prompt tokens of the chat request `body`.
    async fn count(&self, upstream: &Upstream, body: &Value, headers: &[(&str, String)]) -> Result<u64, UpstreamError> {
        if let Some(method) = self.method() {
            match method.attempt(upstream, body, headers).await? {
                Attempt::Counted(n) => return Ok(n),
                Attempt::Refused => {
                    return match CountMethod::CompletionUsage.attempt(upstream, body, headers).await? {
                        Attempt::Counted(n) => Ok(n),
                        Attempt::Absent | Attempt::Refused => Err(no_usage()),
                    };
                }
                Attempt::Absent => self.remember(None),
            }
        }
        let mut all_absent = true;
        for method in [CountMethod::TokenizeMessages, CountMethod::ApplyTemplate, CountMethod::CompletionUsage] {
            match method.attempt(upstream, body, headers).await? {
                Attempt::Counted(n) => {
                    if all_absent {
                        tracing::info!(method = ?method, "input tokens: counting with this upstream method");
                        self.remember(Some(method));
                    }
                    return Ok(n);
                }
                Attempt::Absent => {}
                Attempt::Refused => all_absent = false,
            }
        }
        Err(no_usage())
    }
}

fn no_usage() -> UpstreamError {
    UpstreamError::Protocol("the chat completion reply carries no usage.prompt_tokens".into())
}

impl CountMethod {
    async fn attempt(
        self,
        upstream: &Upstream,
        body: &Value,
        headers: &[(&str, String)],
    ) -> Result<Attempt, UpstreamError> {
        let root = server_root(&upstream.config().base_url);
        match self {
            CountMethod::TokenizeMessages => {
                let mut request = Map::new();
                for key in ["model", "messages", "tools"] {
                    if let Some(value) = body.get(key) {
                        request.insert(key.into(), value.clone());
                    }
                }
                request.insert("add_generation_prompt".into(), json!(true));
                let reply =
                    post(upstream, &format!("{root}/tokenize"), "/tokenize", &Value::Object(request), headers).await?;
                Ok(probed(reply, |body| body.get("count").and_then(Value::as_u64))?.into())
            }
            CountMethod::ApplyTemplate => {
                let mut request = body.clone();
                if let Some(fields) = request.as_object_mut() {
                    fields.remove("stream");
                    fields.remove("stream_options");
                }
                let reply =
                    post(upstream, &format!("{root}/apply-template"), "/apply-template", &request, headers).await?;
                let prompt = match probed(reply, |body| body.get("prompt").and_then(Value::as_str).map(str::to_owned))?
                {
                    Found::Yes(prompt) => prompt,
                    Found::Absent => return Ok(Attempt::Absent),
                    Found::Refused => return Ok(Attempt::Refused),
                };
                // The completion path tokenizes the prompt with the model's special tokens (BOS).
                let request = json!({"content": prompt, "add_special": true, "parse_special": true});
                let reply = post(upstream, &format!("{root}/tokenize"), "/tokenize", &request, headers).await?;
                Ok(probed(reply, |body| body.get("tokens").and_then(Value::as_array).map(|t| t.len() as u64))?.into())
            }
            CountMethod::CompletionUsage => {
                let mut request = body.clone();
                if let Some(fields) = request.as_object_mut() {
                    fields.remove("stream_options");
                    fields.remove("max_completion_tokens");
                    fields.insert("stream".into(), json!(false));
                    fields.insert("max_tokens".into(), json!(1));
                }
                let base = &upstream.config().base_url;
                let (status, reply) =
                    post(upstream, &format!("{base}/chat/completions"), "/chat/completions", &request, headers).await?;
                if !(200..300).contains(&status) {
                    return Err(UpstreamError::Status { status, body: reply });
                }
                reply.pointer("/usage/prompt_tokens").and_then(Value::as_u64).map(Attempt::Counted).ok_or_else(no_usage)
            }
        }
    }
}

/// What a probing call found.
enum Found<T> {
    Yes(T),
    Absent,
    Refused,
}

impl From<Found<u64>> for Attempt {
    fn from(found: Found<u64>) -> Attempt {
        match found {
            Found::Yes(n) => Attempt::Counted(n),
            Found::Absent => Attempt::Absent,
            Found::Refused => Attempt::Refused,
        }
    }
}

/// Read a probing call's reply: `read` on a 2xx (absent when it finds nothing there), absent on
/// 404/405/501, refused on 400/422; any other status is the upstream's error.
fn probed<T>(reply: (u16, Value), read: impl FnOnce(&Value) -> Option<T>) -> Result<Found<T>, UpstreamError> {
    match reply {
        (200..=299, body) => Ok(read(&body).map_or(Found::Absent, Found::Yes)),
        (404 | 405 | 501, _) => Ok(Found::Absent),
        (400 | 422, _) => Ok(Found::Refused),
        (status, body) => Err(UpstreamError::Status { status, body }),
    }
}

/// The model server's root: the base URL without its trailing `/v1` (vLLM and llama.cpp serve
/// their tokenizer routes there).
fn server_root(base_url: &str) -> &str {
    let base = base_url.trim_end_matches('/');
    base.strip_suffix("/v1").unwrap_or(base)
}

/// `POST` `body` to `url` with the upstream's credentials and `headers`, in a client span named
/// after `path`: the reply's status and JSON body (a JSON string holding the text when it is not
/// JSON).
async fn post(
    upstream: &Upstream,
    url: &str,
    path: &str,
    body: &Value,
    headers: &[(&str, String)],
) -> Result<(u16, Value), UpstreamError> {
    let span = upstream.client_span(&reqwest::Method::POST, path);
    let mut request = upstream.raw_request(reqwest::Method::POST, url).json(body);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let request = Upstream::with_trace_context(request, &span);
    let failed = |e: reqwest::Error| {
        let error = Upstream::classify(e);
        Upstream::record_failure(&span, error.kind());
        error
    };
    let response = request.send().await.map_err(failed)?;
    let status = response.status();
    Upstream::record_status(&span, status);
    let bytes = response.bytes().await.map_err(failed)?;
    let body =
        serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Ok((status.as_u16(), body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_root_is_the_base_url_without_v1() {
        assert_eq!(server_root("http://127.0.0.1:8000/v1"), "http://127.0.0.1:8000");
        assert_eq!(server_root("http://127.0.0.1:8000/v1/"), "http://127.0.0.1:8000");
        assert_eq!(server_root("http://host/api"), "http://host/api");
    }

    #[test]
    fn probing_tells_absent_from_refused() {
        let count = |body: &Value| body.get("count").and_then(Value::as_u64);
        assert!(matches!(probed((200, json!({"count": 7})), count), Ok(Found::Yes(7))));
        // llama.cpp's `/tokenize` answers a body without `content` with no count.
        assert!(matches!(probed((200, json!({"tokens": []})), count), Ok(Found::Absent)));
        assert!(matches!(probed((404, json!({})), count), Ok(Found::Absent)));
        assert!(matches!(probed((422, json!({})), count), Ok(Found::Refused)));
        assert!(matches!(probed((503, json!({})), count), Err(UpstreamError::Status { status: 503, .. })));
    }
}
