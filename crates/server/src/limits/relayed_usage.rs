//! Token charges for the completions the gateway relays as they are (`POST /v1/chat/completions`,
//! and `POST /v1/completions` in integrated mode): the tokens the upstream's `usage` reports — in a JSON reply, or in a stream's chunks — are charged to the
//! tenant's budget when the reply ends, before its body does.
//!
//! A streamed request that did not ask for usage is sent with `stream_options.include_usage`
//! set ([`ask_for_usage`]), so that the upstream reports it; the usage the client did not ask for
//! is then kept from it ([`metered`]): the final chunk with no choices is dropped, and a `usage`
//! on any other chunk removed. A stream is relayed event by event (an event once whole), a JSON
//! reply byte for byte as it arrives.

use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Map, Value};

use crate::auth::Tenant;

/// The most of a JSON reply kept to read its `usage` (a larger one is relayed, not charged).
const MAX_JSON_REPLY: usize = 32 << 20;

/// Whether a completion request's body asks for a stream (`"stream": true`); a body that is not
/// a JSON object does not (the upstream answers it).
pub(crate) fn streams(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Request {
        #[serde(default)]
        stream: Option<Value>,
    }
    // A struct also reads from a JSON array (its fields in order): only an object may stream.
    body.trim_ascii_start().starts_with(b"{")
        && serde_json::from_slice::<Request>(body).is_ok_and(|request| request.stream == Some(Value::Bool(true)))
}

/// The body to forward for a completion request, and whether the usage its stream will
/// carry was asked for by the gateway rather than the client. A body that is not a JSON object
/// is forwarded as it is (the upstream answers it).
pub(crate) fn ask_for_usage(body: Bytes) -> (Bytes, bool) {
    let Ok(mut request) = serde_json::from_slice::<Map<String, Value>>(&body) else { return (body, false) };
    if request.get("stream") != Some(&Value::Bool(true)) {
        return (body, false);
    }
    let options = request.entry("stream_options").or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(options) = options else { return (body, false) };
    if options.get("include_usage") == Some(&Value::Bool(true)) {
        return (body, false);
    }
    options.insert("include_usage".into(), Value::Bool(true));
    match serde_json::to_vec(&request) {
        Ok(rewritten) => (Bytes::from(rewritten), true),
        Err(_) => (body, false),
    }
}

/// How a reply's body is read.
enum Reading {
    /// A JSON reply: relayed as it arrives, kept (up to [`MAX_JSON_REPLY`]) to read at its end.
    Json { kept: Vec<u8>, too_large: bool },
    /// An event stream: relayed event by event; `pending` holds an event not yet whole.
    Events { pending: BytesMut, strip_usage: bool },
}

/// The usage an upstream reply reports, and the tenant it is charged to.
struct Meter {
    reading: Reading,
    /// The last usage seen, in tokens (a stream reporting usage on every chunk reports it
    /// cumulatively).
    tokens: Option<u64>,
    tenant: Tenant,
    charged: bool,
}

/// `upstream`, a reply body (an event stream when `streamed`), relayed with its tokens charged
/// to `tenant` when it ends (or, if the client leaves first, when it is dropped). With
/// `strip_usage`, the usage the gateway asked for is kept from the client.
pub(crate) fn metered<E: Send + 'static>(
    upstream: impl Stream<Item = Result<Bytes, E>> + Send + 'static,
    streamed: bool,
    strip_usage: bool,
    tenant: Tenant,
) -> impl Stream<Item = Result<Bytes, E>> + Send + 'static {
    let reading = if streamed {
        Reading::Events { pending: BytesMut::new(), strip_usage }
    } else {
        Reading::Json { kept: Vec::new(), too_large: false }
    };
    let meter = Meter { reading, tokens: None, tenant, charged: false };
    let upstream: Pin<Box<dyn Stream<Item = Result<Bytes, E>> + Send>> = Box::pin(upstream);
    futures::stream::unfold(Some((upstream, meter)), |state| async move {
        let (mut upstream, mut meter) = state?;
        loop {
            match upstream.next().await {
                Some(Ok(bytes)) => {
                    let relayed = meter.feed(bytes);
                    if !relayed.is_empty() {
                        return Some((Ok(relayed), Some((upstream, meter))));
                    }
                }
                Some(Err(e)) => return Some((Err(e), Some((upstream, meter)))),
                None => {
                    let rest = meter.finish();
                    meter.charge().await;
                    return (!rest.is_empty()).then_some((Ok(rest), None));
                }
            }
        }
    })
}

impl Meter {
    /// Take in `bytes` of the reply; what to relay now.
    fn feed(&mut self, bytes: Bytes) -> Bytes {
        match &mut self.reading {
            Reading::Json { kept, too_large } => {
                if !*too_large && kept.len() + bytes.len() <= MAX_JSON_REPLY {
                    kept.extend_from_slice(&bytes);
                } else if !*too_large {
                    *too_large = true;
                    kept.clear();
                    tracing::warn!(
                        "a chat completion reply is too large to read its usage; its tokens are not charged"
                    );
                }
                bytes
            }
            Reading::Events { pending, strip_usage } => {
                pending.extend_from_slice(&bytes);
                let strip = *strip_usage;
                let mut relayed = BytesMut::new();
                while let Some(end) = event_end(pending) {
                    let event = pending.split_to(end).freeze();
                    if let Some(kept) = read_event(event, strip, &mut self.tokens) {
                        relayed.extend_from_slice(&kept);
                    }
                }
                relayed.freeze()
            }
        }
    }

    /// The reply ended: read what is left; what to relay still.
    fn finish(&mut self) -> Bytes {
        match &mut self.reading {
            Reading::Json { kept, too_large } => {
                if !*too_large && let Some(tokens) = usage_tokens(kept) {
                    self.tokens = Some(tokens);
                }
                Bytes::new()
            }
            Reading::Events { pending, strip_usage } => {
                let strip = *strip_usage;
                let event = pending.split().freeze();
                if event.is_empty() {
                    return Bytes::new();
                }
                read_event(event, strip, &mut self.tokens).unwrap_or_default()
            }
        }
    }

    async fn charge(&mut self) {
        self.charged = true;
        if let Some(tokens) = self.tokens {
            self.tenant.charge_tokens(tokens).await;
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        // The client left before the reply ended: charge what the upstream reported so far.
        let (false, Some(tokens)) = (self.charged, self.tokens) else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let tenant = self.tenant.clone();
        runtime.spawn(async move { tenant.charge_tokens(tokens).await });
    }
}

/// Where the first whole event in `buffer` ends (after its blank line), if one is whole.
fn event_end(buffer: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = buffer[from..].iter().position(|b| *b == b'\n').map(|i| from + i) {
        let rest = &buffer[at + 1..];
        if rest.starts_with(b"\n") {
            return Some(at + 2);
        }
        if rest.starts_with(b"\r\n") {
            return Some(at + 3);
        }
        from = at + 1;
    }
    None
}

/// A chunk's usage and whether it has choices.
#[derive(Deserialize)]
struct Chunk {
    usage: Option<Usage>,
    choices: Option<Vec<IgnoredAny>>,
}

#[derive(Deserialize)]
struct Usage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    total_tokens: Option<u64>,
}

impl Usage {
    /// Input and output tokens together.
    fn tokens(&self) -> u64 {
        match (self.prompt_tokens, self.completion_tokens) {
            (None, None) => self.total_tokens.unwrap_or(0),
            (prompt, completion) => prompt.unwrap_or(0) + completion.unwrap_or(0),
        }
    }
}

/// The tokens a JSON reply's `usage` reports.
fn usage_tokens(reply: &[u8]) -> Option<u64> {
    serde_json::from_slice::<Chunk>(reply).ok()?.usage.map(|usage| usage.tokens())
}

/// Read one whole event: note the usage its chunk reports in `tokens`; the event to relay —
/// itself, or with `strip`, none for a usage-only chunk and the chunk without its usage for
/// another that reports one.
fn read_event(event: Bytes, strip: bool, tokens: &mut Option<u64>) -> Option<Bytes> {
    let Ok(text) = std::str::from_utf8(&event) else { return Some(event) };
    let data: String = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| data.strip_prefix(' ').unwrap_or(data))
        .collect::<Vec<_>>()
        .join("\n");
    if !data.contains("\"usage\"") {
        return Some(event);
    }
    let Ok(chunk) = serde_json::from_str::<Chunk>(&data) else { return Some(event) };
    let Some(usage) = chunk.usage else { return Some(event) };
    *tokens = Some(usage.tokens());
    if !strip {
        return Some(event);
    }
    if chunk.choices.as_ref().is_none_or(Vec::is_empty) {
        return None;
    }
    let Ok(mut chunk) = serde_json::from_str::<Map<String, Value>>(&data) else { return Some(event) };
    chunk.remove("usage");
    Some(Bytes::from(format!("data: {}\n\n", Value::Object(chunk))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(value: Value) -> Bytes {
        Bytes::from(value.to_string())
    }

    #[test]
    fn only_a_body_asking_for_a_stream_streams() {
        assert!(streams(br#"{"model":"m","messages":[],"stream":true}"#));
        for other in [&br#"{"stream":false}"#[..], br#"{"stream":"true"}"#, b"{}", b"[true]", b"not json", b""] {
            assert!(!streams(other), "{}", String::from_utf8_lossy(other));
        }
    }

    #[test]
    fn a_stream_that_did_not_ask_for_usage_is_sent_asking_for_it() {
        let (sent, ours) = ask_for_usage(body(json!({"model":"m","stream":true,"stream_options":{"x":1}})));
        assert!(ours);
        let sent: Value = serde_json::from_slice(&sent).unwrap();
        assert_eq!(sent["stream_options"], json!({"x":1,"include_usage":true}));
        let (_, ours) =
            ask_for_usage(body(json!({"model":"m","stream":true,"stream_options":{"include_usage":false}})));
        assert!(ours, "include_usage false is not asking");
    }

    #[test]
    fn other_requests_are_forwarded_as_they_are() {
        for request in [
            json!({"model":"m","stream":true,"stream_options":{"include_usage":true}}),
            json!({"model":"m"}),
            json!({"model":"m","stream":false}),
            json!({"model":"m","stream":true,"stream_options":"odd"}),
        ] {
            let original = body(request);
            let (sent, ours) = ask_for_usage(original.clone());
            assert_eq!((sent, ours), (original, false));
        }
        let (sent, ours) = ask_for_usage(Bytes::from_static(b"not json"));
        assert_eq!((sent.as_ref(), ours), (&b"not json"[..], false));
    }

    #[test]
    fn events_end_at_a_blank_line_in_either_line_ending() {
        assert_eq!(event_end(b"data: 1\n\ndata: 2"), Some(9));
        assert_eq!(event_end(b"data: 1\r\n\r\ndata: 2"), Some(11));
        assert_eq!(event_end(b"data: 1\ndata: 2\n"), None);
        assert_eq!(event_end(b""), None);
    }

    #[test]
    fn usage_chunks_are_read_and_stripped_only_when_the_gateway_asked() {
        let usage = Bytes::from(format!(
            "data: {}\n\n",
            json!({"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}})
        ));
        let mut tokens = None;
        assert_eq!(read_event(usage.clone(), false, &mut tokens), Some(usage.clone()));
        assert_eq!(tokens, Some(15));
        let mut tokens = None;
        assert_eq!(read_event(usage, true, &mut tokens), None);
        assert_eq!(tokens, Some(15));
        let with_choice = Bytes::from(format!(
            "data: {}\n\n",
            json!({"choices":[{"index":0,"delta":{}}],"usage":{"prompt_tokens":1,"completion_tokens":2}})
        ));
        let kept = read_event(with_choice, true, &mut tokens).unwrap();
        let kept: Value = serde_json::from_str(std::str::from_utf8(&kept).unwrap()[6..].trim()).unwrap();
        assert_eq!(kept, json!({"choices":[{"index":0,"delta":{}}]}));
        assert_eq!(tokens, Some(3));
        let done = Bytes::from_static(b"data: [DONE]\n\n");
        assert_eq!(read_event(done.clone(), true, &mut tokens), Some(done));
    }
}
