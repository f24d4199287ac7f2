//! Fuzz target: an arbitrary upstream body, cut into arbitrary chunks, through the gateway's
//! real SSE decoder and the turn state machine (`TurnState`), with gateway tools on the roster.
//! The first byte picks how the rest is split (0: at every `\x00` in the input, else every n
//! bytes), so both odd chunk boundaries and odd content are explored. Invariants: no panic, the
//! turn finishes (an error result is fine), every item is announced once at its own
//! `output_index` before it is done, every event serializes.

#![no_main]

use futures::StreamExt;
use libfuzzer_sys::fuzz_target;
use respgw_engine::tool_kinds::GatewayToolState;
use respgw_engine::turn::{OutputLog, TurnState};
use respgw_engine::upstream::{UpstreamError, UpstreamEvent, decode_stream};
use respgw_engine::{CallTarget, GatewayKind};
use respgw_protocol::ids::TurnStamp;

fn split(data: &[u8]) -> Vec<Vec<u8>> {
    let Some((&mode, rest)) = data.split_first() else { return Vec::new() };
    if mode == 0 {
        rest.split(|b| *b == 0).map(<[u8]>::to_vec).collect()
    } else {
        rest.chunks(usize::from(mode)).map(<[u8]>::to_vec).collect()
    }
}

fuzz_target!(|data: &[u8]| {
    let chunks = split(data);
    let targets = [
        ("code_interpreter".to_owned(), CallTarget::Gateway(GatewayKind::CodeInterpreter)),
        (
            "mcp__docs__search".to_owned(),
            CallTarget::Gateway(GatewayKind::Mcp { server_label: "docs".into(), tool_name: "search".into() }),
        ),
    ];
    let mut state = TurnState::new(
        TurnStamp::after(None),
        targets.into_iter().collect(),
        GatewayToolState::for_history(&[], "default"),
    );
    let mut log = OutputLog::default();
    let mut events = Vec::new();
    let stream = decode_stream(futures::stream::iter(chunks.into_iter().map(Ok::<_, UpstreamError>)));
    futures::executor::block_on(async {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(UpstreamEvent::Chunk(chunk)) => state.on_chunk(chunk, &mut log, &mut events),
                Ok(UpstreamEvent::Done) => {
                    state.on_done();
                    break;
                }
                // The engine ends the turn on a stream error; so does this harness.
                Err(_) => return,
            }
        }
        let _ = state.finish(&mut log, &mut events);
    });
    // Every item is announced once, at its own output_index, and finished at an announced one.
    let mut added = std::collections::BTreeSet::new();
    for event in &events {
        let event = serde_json::to_value(event).expect("every event serializes");
        let index = event["output_index"].as_u64();
        match event["type"].as_str() {
            Some("response.output_item.added") => {
                assert!(added.insert(index), "output_index {index:?} announced twice");
            }
            Some("response.output_item.done") => assert!(added.contains(&index), "done before added: {event}"),
            _ => {}
        }
    }
});
