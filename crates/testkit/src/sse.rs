//! Server-sent events: a parser ([`parse_sse`]) and the gateway's stream framing contract ([`check_stream`]).

use anyhow::{Context, bail, ensure};
use serde_json::Value;

/// One dispatched server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if the event had one.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Event types that end a response stream.
pub const TERMINAL_EVENT_TYPES: [&str; 3] = ["response.completed", "response.incomplete", "response.failed"];

/// Event types that carry the whole response object under `response`.
pub const LIFECYCLE_EVENT_TYPES: [&str; 6] = [
    "response.created",
    "response.queued",
    "response.in_progress",
    "response.completed",
    "response.incomplete",
    "response.failed",
];

/// Parses an SSE body with LF line endings (a CR anywhere is an error).
///
/// Follows the SSE line rules: `field: value` (one optional space after the colon), lines starting
/// with `:` are comments, `data` lines accumulate joined by `\n`, `event` sets the type, other fields
/// are ignored, a blank line dispatches the event if it has data. An unterminated final event is
/// discarded, as the SSE specification says.
pub fn parse_sse(raw: &str) -> anyhow::Result<Vec<SseEvent>> {
    if let Some(position) = raw.find('\r') {
        bail!("CR found at byte {position}: SSE lines must end with LF only");
    }
    let mut events = Vec::new();
    let mut event_type: Option<String> = None;
    let mut data_lines: Vec<&str> = Vec::new();
    let mut lines = raw.split('\n').collect::<Vec<_>>();
    // `split` yields one empty piece after the final LF; it is not a line.
    if raw.ends_with('\n') {
        lines.pop();
    }
    for line in lines {
        if line.is_empty() {
            if !data_lines.is_empty() {
                events.push(SseEvent { event: event_type.take(), data: data_lines.join("\n") });
            }
            event_type = None;
            data_lines.clear();
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => event_type = Some(value.to_owned()),
            "data" => data_lines.push(value),
            _ => {}
        }
    }
    Ok(events)
}

/// Checks a gateway `POST /v1/responses` stream against the framing contract and returns its JSON
/// events in order.
///
/// The contract: LF line endings only; every event except the final `data: [DONE]` has an `event:`
/// line equal to its data's `type`, and exactly one `data:` line holding one JSON object;
/// `sequence_number` starts at 0 and grows by exactly 1; exactly one terminal event
/// (`response.completed` | `response.incomplete` | `response.failed`) and it is the last JSON
/// event; the stream ends with `data: [DONE]` and a blank line; every lifecycle event carries the
/// same `response.id`.
pub fn check_stream(raw: &str) -> anyhow::Result<Vec<Value>> {
    let events = parse_sse(raw)?;
    ensure!(raw.ends_with("\n\n"), "stream does not end with a blank line");
    let Some((done, json_events)) = events.split_last() else {
        bail!("stream has no events");
    };
    ensure!(done.data == "[DONE]" && done.event.is_none(), "the final frame is {done:?}, not `data: [DONE]`");

    let mut parsed = Vec::with_capacity(json_events.len());
    for (index, event) in json_events.iter().enumerate() {
        parsed.push(parse_event(event).with_context(|| format!("event #{index}: {event:?}"))?);
    }
    check_sequence(&parsed)?;
    Ok(parsed)
}

/// Checks the events of one response, whatever carried them (an SSE stream, WebSocket frames):
/// `sequence_number` starts at 0 and grows by exactly 1; exactly one terminal event
/// (`response.completed` | `response.incomplete` | `response.failed`) and it is the last one;
/// every lifecycle event carries the same `response.id`.
pub fn check_sequence(events: &[Value]) -> anyhow::Result<()> {
    ensure!(!events.is_empty(), "the response has no events");
    let mut response_id: Option<&str> = None;
    for (index, value) in events.iter().enumerate() {
        let event_type = value["type"].as_str().unwrap_or_default();
        ensure!(
            value["sequence_number"].as_u64() == Some(index as u64),
            "event #{index} ({event_type}) has sequence_number {}, expected {index}",
            value["sequence_number"]
        );
        let is_terminal = TERMINAL_EVENT_TYPES.contains(&event_type);
        ensure!(
            is_terminal == (index + 1 == events.len()),
            "event #{index} is {event_type}: the terminal event must be exactly the last event"
        );
        if !LIFECYCLE_EVENT_TYPES.contains(&event_type) {
            continue;
        }
        let Some(id) = value["response"]["id"].as_str() else {
            bail!("lifecycle event #{index} ({event_type}) has no string response.id");
        };
        match response_id {
            None => response_id = Some(id),
            Some(first) => ensure!(
                first == id,
                "lifecycle event #{index} ({event_type}) has response.id {id}, earlier ones {first}"
            ),
        }
    }
    Ok(())
}

/// Checks one event's framing and parses its data.
fn parse_event(event: &SseEvent) -> anyhow::Result<Value> {
    ensure!(!event.data.contains('\n'), "event has several data lines");
    let value: Value = serde_json::from_str(&event.data).context("data is not JSON")?;
    ensure!(value.is_object(), "data is not a JSON object");
    let Some(event_type) = value["type"].as_str() else {
        bail!("data has no string `type`");
    };
    let Some(event_name) = &event.event else {
        bail!("event has no `event:` line");
    };
    ensure!(event_name == event_type, "`event: {event_name}` differs from data type `{event_type}`");
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seed_captures_dir;

    /// The seed capture without its leading `HTTP 200` status and header lines.
    fn seed_plain_text_stream() -> String {
        let capture = std::fs::read_to_string(seed_captures_dir().join("01_plain_text.sse")).unwrap();
        let (head, body) = capture.split_once("\n\n").unwrap();
        assert!(head.starts_with("HTTP 200\n"), "{head}");
        body.to_owned()
    }

    #[test]
    fn parses_fields_comments_and_multiline_data() {
        let raw = ": comment\nevent: a\ndata: {\"x\":1}\n\ndata:first\ndata: second\nid: 7\n\nevent: empty\n\ndata: unterminated\n";
        let events = parse_sse(raw).unwrap();
        assert_eq!(
            events,
            vec![
                SseEvent { event: Some("a".into()), data: "{\"x\":1}".into() },
                SseEvent { event: None, data: "first\nsecond".into() },
            ]
        );
        assert!(parse_sse("data: x\r\n\r\n").is_err());
    }

    #[test]
    fn seed_plain_text_capture_passes_the_contract() {
        let events = check_stream(&seed_plain_text_stream()).unwrap();
        let types: Vec<&str> = events.iter().map(|event| event["type"].as_str().unwrap()).collect();
        assert_eq!(types.first(), Some(&"response.created"));
        assert_eq!(types.last(), Some(&"response.completed"));
        assert!(types.contains(&"response.output_text.delta"));
    }

    #[test]
    fn sequence_gap_is_rejected() {
        let tampered = seed_plain_text_stream().replace(
            "\"type\":\"response.in_progress\",\"sequence_number\":1",
            "\"type\":\"response.in_progress\",\"sequence_number\":2",
        );
        let error = check_stream(&tampered).unwrap_err().to_string();
        assert!(error.contains("sequence_number 2, expected 1"), "{error}");
    }

    #[test]
    fn framing_violations_are_rejected() {
        let stream = seed_plain_text_stream();
        let cases = [
            (stream.replace("event: response.in_progress\n", "event: response.created\n"), "differs from data type"),
            (stream.replace("\n\ndata: [DONE]\n\n", "\n\n"), "not `data: [DONE]`"),
            (stream.replace('\n', "\r\n"), "CR found"),
            (stream.replace("event: response.completed\n", "event: response.completed\r\n"), "CR found"),
            (
                stream
                    .replace("\"type\":\"response.in_progress\"", "\"type\":\"response.completed\"")
                    .replace("event: response.in_progress\n", "event: response.completed\n"),
                "terminal event must be exactly the last",
            ),
            (stream.replacen("\"id\":\"resp_", "\"id\":\"resp_X", 1), "earlier ones resp_X"),
        ];
        for (tampered, expected) in cases {
            let error = format!("{:#}", check_stream(&tampered).unwrap_err());
            assert!(error.contains(expected), "{error} (expected {expected})");
        }
    }
}
