//! Requests captured from the real clients (by the `ClientLog` of `tests/codex_cli.rs` and
//! `tests/agents_sdk.rs`, stored in `tests/clients/`) pass the protocol layer as they are: Codex
//! CLI 0.169.0 and the OpenAI Agents SDK 0.24.0, one file per distinct request shape.

use respgw_protocol::items::{ContentPart, ImageDetail, Item, MessageRole};
use respgw_protocol::request::TextFormat;
use respgw_protocol::tools::ToolDeclaration;
use respgw_protocol::{Capabilities, CreateResponseRequest, ValidatedRequest};

fn load(name: &str) -> ValidatedRequest {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients").join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    CreateResponseRequest::from_slice(&bytes)
        .and_then(|r| r.validate(&Capabilities::default()))
        .unwrap_or_else(|e| panic!("{name} was refused: {e:?}"))
}

#[test]
fn codex_turn_with_namespaces_cached_web_search_and_output_schema() {
    let r = load("codex-0.169.0-output-schema.json");
    assert!(r.stream && !r.store);
    assert_eq!(r.include, ["reasoning.encrypted_content"]);
    assert!(r.prompt_cache_key.is_some());
    assert!(matches!(r.text.format, TextFormat::JsonSchema { .. }));
    assert!(r.tools.iter().any(|t| matches!(t, ToolDeclaration::Namespace(ns) if !ns.tools.is_empty())));
    assert!(r.tools.iter().any(|t| matches!(t, ToolDeclaration::OfflineWebSearch(_))));
    assert!(r.tools.iter().any(|t| matches!(t, ToolDeclaration::Function(f) if f.strict == Some(false))));
    let Item::Message(first) = &r.input[0] else { panic!("{:?}", r.input[0]) };
    assert_eq!(first.role, MessageRole::Developer);
    assert!(first.id.starts_with("msg_"), "Codex's own ids are kept");
}

#[test]
fn codex_tool_output_turn() {
    let r = load("codex-0.169.0-tool-output.json");
    let call = r.input.iter().find_map(|i| match i {
        Item::FunctionCall(f) => Some(f),
        _ => None,
    });
    let call = call.expect("the function_call is replayed");
    assert_eq!(call.name, "exec_command");
    assert!(r.input.iter().any(|i| matches!(i, Item::FunctionCallOutput(o) if o.call_id == call.call_id)));
}

#[test]
fn codex_resume_with_sealed_reasoning() {
    let r = load("codex-0.169.0-resume-sealed-reasoning.json");
    let reasoning = r.input.iter().find_map(|i| match i {
        Item::Reasoning(r) => Some(r),
        _ => None,
    });
    let blob = reasoning.and_then(|r| r.encrypted_content.as_deref()).expect("sealed reasoning replayed");
    assert!(blob.starts_with("rgw1."));
}

#[test]
fn codex_compaction_turn_without_tools() {
    let r = load("codex-0.169.0-compaction.json");
    assert!(r.tools.is_empty());
}

#[test]
fn codex_image_input() {
    let r = load("codex-0.169.0-image.json");
    let image = r.input.iter().find_map(|i| match i {
        Item::Message(m) => m.content.iter().find_map(|p| match p {
            ContentPart::InputImage { image_url, detail, .. } => Some((image_url.clone(), *detail)),
            _ => None,
        }),
        _ => None,
    });
    let (url, detail) = image.expect("an input_image part");
    assert!(url.starts_with("data:image/png;base64,"));
    assert_eq!(detail, ImageDetail::High, "Codex asks for full detail");
}

#[test]
fn agents_sdk_to_input_list_and_chaining() {
    let replay = load("openai-agents-0.24.0-to-input-list.json");
    assert!(replay.include.is_empty() && !replay.store);
    assert!(replay.input.iter().any(|i| matches!(i, Item::Reasoning(_))));
    assert!(replay.input.iter().any(|i| matches!(i, Item::FunctionCall(f) if f.id.starts_with("fc_"))));
    let chained = load("openai-agents-0.24.0-chained.json");
    assert!(chained.previous_response_id.is_some());
}
