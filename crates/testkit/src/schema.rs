//! Validation of gateway output against the Open Responses OpenAPI document (`openresponses-openapi.json`).
//!
//! [`SchemaValidator`] checks response objects against `#/components/schemas/ResponseResource` and
//! stream events against the `*StreamingEvent` schema whose `type` enum holds the event's `type`.
//! An event type that no schema defines is an error, so tests notice events the spec does not know.
//!
//! OpenAPI 3.1 schemas are JSON Schema 2020-12. Each root is compiled as
//! `{"$ref": "#/components/schemas/<root>", "components": <components>}` so every `$ref` of the
//! document resolves. A few defects of the document are patched first (see [`patch_known_defects`]).
//! The document does not define compaction or file search yet: `openresponses-supplement.json`
//! adds exactly the `compaction` item (to the `ItemField` union), the `response.compaction.compacting`
//! event and the `response.compaction` object ([`SchemaValidator::validate_compacted_response`]),
//! and the `file_search` tool (to `Tool`), the `file_search_call` item (to `ItemField`), its
//! `response.file_search_call.*` events and the `file_citation` annotation (to `Annotation`); a
//! supplement schema that would replace one of the document's is an error.
//! The compiled validators are built once per process and shared.

use std::collections::HashMap;
use std::sync::OnceLock;

use anyhow::{Context, bail};
use jsonschema::error::ValidationErrorKind;
use jsonschema::{Draft, ValidationError, Validator};
use serde_json::{Value, json};

use crate::{openapi_path, supplement_path};

/// Validates responses and stream events against the OpenAPI document. Cheap to copy.
#[derive(Clone, Copy)]
pub struct SchemaValidator {
    compiled: &'static CompiledSchemas,
}

struct CompiledSchemas {
    response: Validator,
    compacted: Validator,
    /// Event `type` → (schema name, validator).
    events: HashMap<String, (String, Validator)>,
}

static COMPILED: OnceLock<CompiledSchemas> = OnceLock::new();

impl SchemaValidator {
    /// Loads and compiles the OpenAPI document (once per process; later calls reuse it).
    pub fn load() -> anyhow::Result<SchemaValidator> {
        if let Some(compiled) = COMPILED.get() {
            return Ok(SchemaValidator { compiled });
        }
        let path = openapi_path();
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let mut document: Value = serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let path = supplement_path();
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let supplement: Value = serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        add_supplement(&mut document, supplement)?;
        let compiled = compile(document)?;
        // Another thread may have won the race; its result is equivalent.
        let compiled = COMPILED.get_or_init(|| compiled);
        Ok(SchemaValidator { compiled })
    }

    /// Validates a response object against `ResponseResource`. The error lists every violation
    /// with its instance path.
    pub fn validate_response(&self, response: &Value) -> Result<(), String> {
        check(&self.compiled.response, response)
    }

    /// Validates the reply of `POST /v1/responses/compact` against the supplement's
    /// `CompactedResource`.
    pub fn validate_compacted_response(&self, compacted: &Value) -> Result<(), String> {
        check(&self.compiled.compacted, compacted)
    }

    /// Validates a stream event against the `*StreamingEvent` schema of its `type`.
    pub fn validate_event(&self, event: &Value) -> Result<(), String> {
        let Some(event_type) = event.get("type").and_then(Value::as_str) else {
            return Err("event has no string `type`".to_owned());
        };
        let Some((schema_name, validator)) = self.compiled.events.get(event_type) else {
            return Err(format!("no *StreamingEvent schema of the OpenAPI document defines event type `{event_type}`"));
        };
        check(validator, event).map_err(|errors| format!("{event_type} ({schema_name}): {errors}"))
    }

    /// The name of the schema that defines `event_type`, if any.
    pub fn event_schema_name(&self, event_type: &str) -> Option<&str> {
        self.compiled.events.get(event_type).map(|(name, _)| name.as_str())
    }
}

fn compile(mut document: Value) -> anyhow::Result<CompiledSchemas> {
    let components = document.get_mut("components").context("the OpenAPI document has no `components`")?;
    patch_known_defects(components)?;
    let components = components.take();
    let build = |schema_name: &str| -> anyhow::Result<Validator> {
        let root = json!({
            "$ref": format!("#/components/schemas/{schema_name}"),
            "components": components,
        });
        jsonschema::options()
            .with_draft(Draft::Draft202012)
            .build(&root)
            .map_err(|error| anyhow::anyhow!("compiling {schema_name}: {error}"))
    };

    let Some(schemas) = components["schemas"].as_object() else {
        bail!("the OpenAPI document has no `components.schemas`");
    };
    let mut events = HashMap::new();
    for (schema_name, schema) in schemas {
        if !schema_name.ends_with("StreamingEvent") {
            continue;
        }
        let Some(event_types) = schema["properties"]["type"]["enum"].as_array() else {
            bail!("{schema_name} has no `type` enum");
        };
        for event_type in event_types {
            let event_type = event_type.as_str().with_context(|| format!("{schema_name} has a non-string `type`"))?;
            let previous = events.insert(event_type.to_owned(), (schema_name.clone(), build(schema_name)?));
            if let Some((other, _)) = previous {
                bail!("event type `{event_type}` is defined by both {other} and {schema_name}");
            }
        }
    }
    Ok(CompiledSchemas { response: build("ResponseResource")?, compacted: build("CompactedResource")?, events })
}

/// Adds the supplement's schemas to the document's, and its entries to the `oneOf` of the unions
/// it names. Nothing of the document is replaced.
fn add_supplement(document: &mut Value, supplement: Value) -> anyhow::Result<()> {
    let schemas = document
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
        .context("the OpenAPI document has no `components.schemas`")?;
    let added = supplement["schemas"].as_object().context("the supplement has no `schemas`")?;
    for (name, schema) in added {
        if schemas.insert(name.clone(), schema.clone()).is_some() {
            bail!("the supplement's schema {name} would replace the document's");
        }
    }
    let extensions = supplement["extend_one_of"].as_object().context("the supplement has no `extend_one_of`")?;
    for (union, references) in extensions {
        let one_of = schemas
            .get_mut(union)
            .and_then(|u| u.get_mut("oneOf"))
            .and_then(Value::as_array_mut)
            .with_context(|| format!("the supplement extends {union}, which is not a oneOf of the document"))?;
        let references = references.as_array().with_context(|| format!("extend_one_of.{union} is not a list"))?;
        one_of.extend(references.iter().map(|reference| json!({"$ref": reference})));
    }
    Ok(())
}

/// Fixes defects of the OpenAPI document that would reject correct output.
///
/// Each patch replaces the defective schema only while it still has its defective form (so a fixed
/// document is used as is) and fails if the location disappeared (so the patch list stays honest).
fn patch_known_defects(components: &mut Value) -> anyhow::Result<()> {
    let patches = [
        // `text.format.schema` of a `json_schema` response format echoes the caller's JSON Schema,
        // which is an object (OpenAI's own schema declares it as an object). The document declares
        // it as `anyOf: [{type: null}]`, which would reject every real echoed schema: allow any
        // object or null.
        (
            "/schemas/JsonSchemaResponseFormat/properties/schema",
            json!({"anyOf": [{"type": "null"}]}),
            json!({"anyOf": [{"type": "object"}, {"type": "null"}]}),
        ),
    ];
    for (pointer, defective, fixed) in patches {
        let target = components
            .pointer_mut(pointer)
            .with_context(|| format!("schema patch target #/components{pointer} is missing"))?;
        if *target == defective {
            *target = fixed;
        }
    }
    Ok(())
}

/// Runs `validator` and renders every violation as `at <instance path>: <message>`.
fn check(validator: &Validator, instance: &Value) -> Result<(), String> {
    let errors: Vec<String> = validator.iter_errors(instance).map(|e| describe(&e)).collect();
    if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
}

/// Longest message kept per violation; messages quote the failing value, which can be a whole response.
const MAX_MESSAGE_CHARS: usize = 240;

fn describe(error: &ValidationError<'_>) -> String {
    let mut text = format!("at {}: {}", display_path(error), shorten(&error.to_string()));
    // For `anyOf`/`oneOf`, the violations that got deepest into the value usually say what is wrong.
    if let ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } = error.kind() {
        let mut nested = Vec::new();
        collect_nested(context, &mut nested);
        if let Some(depth) = nested.iter().map(|e| path_depth(e)).max() {
            let closest: Vec<String> = nested
                .iter()
                .filter(|e| path_depth(e) == depth)
                .take(3)
                .map(|e| format!("at {}: {}", display_path(e), shorten(&e.to_string())))
                .collect();
            text.push_str(&format!(" (closest branches: {})", closest.join(" | ")));
        }
    }
    text
}

fn collect_nested<'a>(branches: &'a [Vec<ValidationError<'static>>], out: &mut Vec<&'a ValidationError<'static>>) {
    for error in branches.iter().flatten() {
        out.push(error);
        if let ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } = error.kind() {
            collect_nested(context, out);
        }
    }
}

fn display_path(error: &ValidationError<'_>) -> String {
    match error.instance_path().as_str() {
        "" => "/".to_owned(),
        path => path.to_owned(),
    }
}

fn path_depth(error: &ValidationError<'_>) -> usize {
    error.instance_path().as_str().matches('/').count()
}

fn shorten(message: &str) -> String {
    if message.chars().count() <= MAX_MESSAGE_CHARS {
        return message.to_owned();
    }
    let kept: String = message.chars().take(MAX_MESSAGE_CHARS).collect();
    format!("{kept}…")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cassette::Cassette;
    use crate::sse::parse_sse;
    use crate::{cassettes_dir, seed_captures_dir};

    fn validator() -> SchemaValidator {
        SchemaValidator::load().unwrap()
    }

    fn json_events(raw_stream: &str) -> Vec<Value> {
        parse_sse(raw_stream)
            .unwrap()
            .into_iter()
            .filter(|event| event.data != "[DONE]")
            .map(|event| serde_json::from_str(&event.data).unwrap())
            .collect()
    }

    fn cassette_events(relative_path: &str) -> Vec<Value> {
        let cassette = Cassette::load(cassettes_dir().join(relative_path)).unwrap();
        json_events(&String::from_utf8(cassette.sse_bytes().unwrap()).unwrap())
    }

    fn seed_events(file: &str) -> Vec<Value> {
        let capture = std::fs::read_to_string(seed_captures_dir().join(file)).unwrap();
        let (_http_head, body) = capture.split_once("\n\n").unwrap();
        json_events(body)
    }

    fn is_lifecycle(event: &Value) -> bool {
        crate::sse::LIFECYCLE_EVENT_TYPES.contains(&event["type"].as_str().unwrap())
    }

    /// Checks every event of a reference stream: the excluded ones must fail with every expected
    /// fragment in the error (so each exclusion stays justified), all others must validate.
    fn check_reference_stream(
        name: &str,
        events: &[Value],
        excluded: impl Fn(&Value) -> Option<&'static [&'static str]>,
    ) {
        let validator = validator();
        assert!(!events.is_empty(), "{name} has no events");
        for event in events {
            let outcome = validator.validate_event(event);
            match excluded(event) {
                None => outcome.unwrap_or_else(|e| panic!("{name}: {e}")),
                Some(expected_fragments) => {
                    let error = outcome.expect_err("an excluded event validated");
                    for fragment in expected_fragments {
                        assert!(error.contains(fragment), "{name}: {error}");
                    }
                }
            }
        }
    }

    // OpenAI's reference streams recorded in January 2026: every non-lifecycle event (message,
    // output_text, function_call_arguments, reasoning_summary_part/text, output_item for message,
    // reasoning and function_call items) is within the schema's scope and validates. Excluded:
    // * lifecycle events of `text-single-stream` and `tool-function-stream`: those recordings predate
    //   OpenAI's `presence_penalty`/`frequency_penalty` response fields, which `ResponseResource`
    //   requires (the later `text-max_output_tokens-incomplete-stream` has them and validates fully);
    // * additionally in `tool-function-stream`: `tools[0]` is a `code_interpreter` tool; the schema
    //   only knows function tools.
    const OLD_RECORDING: &[&str] = &[
        "at /response: \"presence_penalty\" is a required property",
        "at /response: \"frequency_penalty\" is a required property",
    ];
    const OLD_RECORDING_WITH_CODE_INTERPRETER: &[&str] = &[
        "at /response: \"presence_penalty\" is a required property",
        "at /response/tools/0/type: \"code_interpreter\" is not one of \"function\"",
    ];

    #[test]
    fn openai_reference_text_stream_validates() {
        check_reference_stream("text-single-stream", &cassette_events("responses/text-single-stream.yaml"), |event| {
            is_lifecycle(event).then_some(OLD_RECORDING)
        });
    }

    #[test]
    fn openai_reference_function_stream_validates() {
        let events = cassette_events("responses/tool-function-stream.yaml");
        assert!(events.iter().any(|e| e["type"] == "response.reasoning_summary_text.delta"));
        assert!(events.iter().any(|e| e["type"] == "response.function_call_arguments.done"));
        check_reference_stream("tool-function-stream", &events, |event| {
            is_lifecycle(event).then_some(OLD_RECORDING_WITH_CODE_INTERPRETER)
        });
    }

    #[test]
    fn openai_reference_incomplete_stream_validates_entirely() {
        let events = cassette_events("responses/text-max_output_tokens-incomplete-stream.yaml");
        assert_eq!(events.last().unwrap()["type"], "response.incomplete");
        check_reference_stream("text-max_output_tokens-incomplete-stream", &events, |_| None);
    }

    #[test]
    fn seed_plain_text_capture_validates_entirely() {
        check_reference_stream("01_plain_text.sse", &seed_events("01_plain_text.sse"), |_| None);
    }

    #[test]
    fn reference_response_bodies_validate() {
        let validator = validator();
        for file in [
            "responses/text-max_output_tokens-incomplete.yaml",
            "responses/tool-function-tool_loop-step1.yaml",
            "responses/tool-function-tool_loop-step2-omit-tools.yaml",
        ] {
            let cassette = Cassette::load(cassettes_dir().join(file)).unwrap();
            let crate::cassette::ResponsePayload::Json(body) = &cassette.response.payload else {
                panic!("{file} is not a JSON reply");
            };
            validator.validate_response(body).unwrap_or_else(|e| panic!("{file}: {e}"));
        }
        for file in ["01b_plain_text_followup_nonstream.json", "06b_incomplete_nonstream.json"] {
            let text = std::fs::read_to_string(seed_captures_dir().join(file)).unwrap();
            let body: Value = serde_json::from_str(&text).unwrap();
            validator.validate_response(&body).unwrap_or_else(|e| panic!("{file}: {e}"));
        }
    }

    fn seed_completed_response() -> Value {
        let events = seed_events("01_plain_text.sse");
        let completed = events.last().unwrap();
        assert_eq!(completed["type"], "response.completed");
        completed["response"].clone()
    }

    #[test]
    fn response_without_usage_is_rejected() {
        let mut response = seed_completed_response();
        response.as_object_mut().unwrap().remove("usage");
        let error = validator().validate_response(&response).unwrap_err();
        assert!(error.contains("at /: \"usage\" is a required property"), "{error}");
    }

    #[test]
    fn errors_name_the_instance_path() {
        let mut response = seed_completed_response();
        response["output"][0]["content"][0]["text"] = json!(5);
        let error = validator().validate_response(&response).unwrap_err();
        assert!(error.contains("at /output/0:"), "{error}");
        assert!(error.contains("at /output/0/content/0/text: 5 is not of type \"string\""), "{error}");
    }

    #[test]
    fn output_text_delta_without_logprobs_is_rejected() {
        let mut delta = seed_events("01_plain_text.sse")
            .into_iter()
            .find(|event| event["type"] == "response.output_text.delta")
            .unwrap();
        validator().validate_event(&delta).unwrap();
        delta.as_object_mut().unwrap().remove("logprobs");
        let error = validator().validate_event(&delta).unwrap_err();
        assert!(error.contains("\"logprobs\" is a required property"), "{error}");
        assert!(error.contains("ResponseOutputTextDeltaStreamingEvent"), "{error}");
    }

    #[test]
    fn the_supplement_adds_the_compaction_item_event_and_object_only() {
        let validator = validator();
        let item = json!({"type":"compaction","id":"cmp_1","encrypted_content":"rgw1c.k.AAAA"});
        let mut response = seed_completed_response();
        response["output"] = json!([item]);
        validator.validate_response(&response).unwrap();
        let done = json!({"type":"response.output_item.done","sequence_number":3,"output_index":0,"item":item});
        validator.validate_event(&done).unwrap();
        let compacting =
            json!({"type":"response.compaction.compacting","sequence_number":2,"item_id":"cmp_1","output_index":0});
        validator.validate_event(&compacting).unwrap();
        let compacted = json!({"id":"resp_1","object":"response.compaction","created_at":1,"output":[item],
                               "usage":response["usage"]});
        validator.validate_compacted_response(&compacted).unwrap();
        // What the gateway keeps for the model must never reach a client.
        response["output"][0]["model_summary"] = json!("the summary");
        assert!(validator.validate_response(&response).is_err());
        assert!(
            validator.validate_event(&json!({"type":"response.compaction.compacting","sequence_number":2})).is_err()
        );
        assert!(
            validator.validate_event(&json!({"type":"response.compaction.completed","sequence_number":2})).is_err()
        );
    }

    #[test]
    fn validator_can_be_shared_across_threads() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<SchemaValidator>();
    }

    #[test]
    fn event_types_outside_the_spec_are_rejected() {
        let validator = validator();
        let event = json!({"type": "response.code_interpreter_call.in_progress", "sequence_number": 3});
        let error = validator.validate_event(&event).unwrap_err();
        assert!(error.contains("response.code_interpreter_call.in_progress"), "{error}");
        assert!(validator.validate_event(&json!({"sequence_number": 3})).is_err());
        assert_eq!(
            validator.event_schema_name("response.reasoning_summary_text.delta"),
            Some("ResponseReasoningSummaryDeltaStreamingEvent")
        );
    }

    #[test]
    fn echoed_json_schema_text_format_is_accepted() {
        let mut response = seed_completed_response();
        response["text"]["format"] = json!({
            "type": "json_schema",
            "name": "answer",
            "description": null,
            "schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "strict": true,
        });
        validator().validate_response(&response).unwrap();
    }
}
