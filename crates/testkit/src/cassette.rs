//! Recorded HTTP exchanges ("cassettes"): one YAML file per request/response pair.
//!
//! Format (see `tests/fixtures/cassettes/README.md`): `request {method, path, headers, body}` and
//! `response {status_code, headers, body | sse}`, where `sse` is the list of raw wire chunks in
//! arrival order (`"data: {...}\n"`, `"\n"`, ...).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::Value;

/// One recorded exchange.
#[derive(Debug, Clone)]
pub struct Cassette {
    /// The recorded request.
    pub request: CassetteRequest,
    /// The recorded response.
    pub response: CassetteResponse,
}

/// The request half of a cassette.
#[derive(Debug, Clone)]
pub struct CassetteRequest {
    /// HTTP method, e.g. `POST`.
    pub method: String,
    /// Request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Whitelisted request headers (absent in the synthetic cassettes).
    pub headers: BTreeMap<String, String>,
    /// The parsed JSON request body.
    pub body: Value,
}

/// The response half of a cassette.
#[derive(Debug, Clone)]
pub struct CassetteResponse {
    /// HTTP status code.
    pub status: u16,
    /// Recorded response headers (lower-case names).
    pub headers: BTreeMap<String, String>,
    /// The body: a JSON document or a list of raw SSE chunks.
    pub payload: ResponsePayload,
}

/// The recorded response body.
#[derive(Debug, Clone)]
pub enum ResponsePayload {
    /// A JSON reply (non-streaming replies and error replies).
    Json(Value),
    /// A streamed reply: raw SSE chunks in arrival order; concatenated they are the wire bytes.
    Sse(Vec<String>),
}

impl Cassette {
    /// Reads and parses a cassette YAML file.
    pub fn load(path: impl AsRef<Path>) -> anyhow::Result<Cassette> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).with_context(|| format!("reading cassette {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("parsing cassette {}", path.display()))
    }

    /// Parses cassette YAML text.
    pub fn parse(yaml: &str) -> anyhow::Result<Cassette> {
        let raw: RawCassette = serde_yaml::from_str(yaml)?;
        let payload = match (raw.response.body, raw.response.sse) {
            (Some(body), None) => ResponsePayload::Json(body),
            (None, Some(chunks)) => ResponsePayload::Sse(chunks),
            (Some(_), Some(_)) => bail!("response has both `body` and `sse`"),
            (None, None) => bail!("response has neither `body` nor `sse`"),
        };
        Ok(Cassette {
            request: CassetteRequest {
                method: raw.request.method,
                path: raw.request.path,
                headers: raw.request.headers,
                body: raw.request.body,
            },
            response: CassetteResponse { status: raw.response.status_code, headers: raw.response.headers, payload },
        })
    }

    /// The recorded SSE chunks concatenated into the wire bytes, or `None` for a JSON reply.
    pub fn sse_bytes(&self) -> Option<Vec<u8>> {
        match &self.response.payload {
            ResponsePayload::Sse(chunks) => Some(chunks.concat().into_bytes()),
            ResponsePayload::Json(_) => None,
        }
    }

    /// The recorded `content-type` response header, if any.
    pub fn content_type(&self) -> Option<&str> {
        self.response.headers.get("content-type").map(String::as_str)
    }
}

#[derive(Deserialize)]
struct RawCassette {
    request: RawRequest,
    response: RawResponse,
}

#[derive(Deserialize)]
struct RawRequest {
    method: String,
    path: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: Value,
}

#[derive(Deserialize)]
struct RawResponse {
    status_code: u16,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    body: Option<Value>,
    sse: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cassettes_dir;

    fn yaml_files_under(dir: &Path, found: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                yaml_files_under(&path, found);
            } else if path.extension().is_some_and(|ext| ext == "yaml") {
                found.push(path);
            }
        }
    }

    #[test]
    fn every_cassette_parses() {
        for folder in ["chat_completion", "synthetic", "responses", "upstream_responses"] {
            let mut files = Vec::new();
            yaml_files_under(&cassettes_dir().join(folder), &mut files);
            assert!(!files.is_empty(), "no cassettes found in {folder}");
            for file in files {
                let cassette = Cassette::load(&file).unwrap_or_else(|e| panic!("{e:#}"));
                assert_eq!(cassette.request.method, "POST", "{}", file.display());
                assert!(cassette.request.body.is_object(), "request body of {}", file.display());
            }
        }
    }

    #[test]
    fn streamed_cassette_concatenates_chunks() {
        let cassette = Cassette::load(cassettes_dir().join("chat_completion/text-single-stream.yaml")).unwrap();
        assert_eq!(cassette.response.status, 200);
        assert_eq!(cassette.content_type(), Some("text/event-stream; charset=utf-8"));
        assert_eq!(cassette.request.body["model"], "gpt-5-nano");
        let wire = String::from_utf8(cassette.sse_bytes().unwrap()).unwrap();
        assert!(wire.starts_with("data: {\"id\":\"chatcmpl-"));
        assert!(wire.ends_with("\n\ndata: [DONE]\n\n"));
        assert!(wire.contains("\"content\":\"Paris\""));
    }

    #[test]
    fn json_cassette_keeps_body_and_status() {
        let cassette = Cassette::load(cassettes_dir().join("chat_completion/model-not-found-stream.yaml")).unwrap();
        assert_eq!(cassette.response.status, 404);
        assert!(cassette.sse_bytes().is_none());
        let ResponsePayload::Json(body) = &cassette.response.payload else {
            panic!("expected a JSON body");
        };
        assert_eq!(body["error"]["type"], "NotFoundError");
    }
}
