//! The respgw engine: turns one validated request into a response.
//!
//! Data flows one way: [`Engine::prepare`] resolves history from the store →
//! [`PreparedResponse::run`] builds the upstream chat request ([`chat`]), streams it
//! ([`upstream`]), turns chunks into items and events ([`turn`]), runs the gateway tools the model
//! called (one module per tool kind: [`tool_kinds`]), persists the result and emits the terminal
//! event. A non-stream request awaits [`PreparedResponse::run`] for the outcome; a streaming one
//! gets the events of [`PreparedResponse::spawn`] — the same run either way. A background one
//! (`background: true`) is handed to [`BackgroundRuns`] with `PreparedResponse::start_background`:
//! the same run again, detached from the request, its events logged in the store for any process
//! to poll, cancel or resume ([`background`]). Stored responses are read and deleted through
//! [`Engine::stored`]. Compaction — `POST /v1/responses/compact` ([`Engine::compact`]) and
//! `context_management` inside a run — is [`compaction`]; [`Engine::count_input_tokens`] has the
//! upstream count what a response's first model turn would send; conversations are managed
//! through [`Engine::conversations`].
//!
//! # Files
//!
//! - `engine.rs`: [`Engine`], the process-wide engine value (upstream, store, tools, metrics,
//!   seal, file reader, background runs), its `with_*` builder and [`Limits`]. `sink.rs`:
//!   `EventSink`, the only difference between JSON, SSE/WebSocket and background replies.
//! - `run.rs`: [`Engine::prepare`] (history, tool resolution, input files) and
//!   [`PreparedResponse::run`]: the tool loop (turn → gateway tools → turn …), persistence, the
//!   terminal event. Each model
//!   turn's upstream call is opened by `open_turn`, where `truncation: "auto"` retries.
//!   [`Engine::prepare_continuing`] and `spawn.rs`'s `spawn_keeping_conversation` serve WebSocket
//!   mode's connection-local state ([`LocalConversation`]: a finished `store:false` response's
//!   whole conversation, continued without the store). [`Limits`] holds the loop guard
//!   (`max_tool_rounds`: after that many gateway tool rounds, one last turn with
//!   `tool_choice: "none"`), the cut of gateway tool results fed back to the model
//!   (`max_tool_output_bytes`; the item keeps the whole output) and the cap on a conversation's
//!   items (`max_conversation_items`).
//! - `rounds.rs`: each upstream call of a run timed (sent, first and last chunk, its tools' time,
//!   its usage and items), stored with the response for the operator console.
//! - `spawn.rs`: [`PreparedResponse::spawn`] — a streaming run on its own task; a panic is caught
//!   and the stream still ends with `error` + `response.failed`.
//! - [`chat`]: history items → chat messages, one assistant message per model turn (reasoning
//!   replayed as `reasoning_content`, gateway tool calls followed by their results in call order;
//!   where a turn ends is decided from the items alone, `AssistantTurn::is_followed_by_turn_of`),
//!   so each round's request extends the previous one's and prefix caches are reused; the upstream
//!   request body (a real `tool_choice`, never prompt text) and the chunk types.
//! - `offer.rs`: which functions each turn offers and the `tool_choice` sent (forcing choices on the
//!   first turn only; `allowed_tools` narrows every turn; the last turn gets `none`).
//! - [`upstream`]: the pooled reqwest client, the streaming call, error classification
//!   ([`UpstreamError`]) and its single mapping to `ApiError`, including the one place that
//!   recognises a context-window overflow in vLLM's, SGLang's, llama.cpp's and OpenAI-style wording
//!   ([`ContextOverflow`]) and makes it 400 `context_length_exceeded`.
//! - `sse_decoder.rs`: the upstream's event stream decoded in place, chunk by chunk (the data of a
//!   one-line event is a slice of the buffer, no allocation per token).
//! - [`turn`]: `TurnState`, the stream state machine; `OutputLog` allocates `output_index`
//!   response-wide. It handles one generic call (`OpenCall`, routed by [`CallTarget`]) and knows no
//!   tool kind. [`think`]: `<think>…</think>` splitting across chunk boundaries.
//! - [`tool_kinds`]: one module per kind of tool call (`client`, `code_interpreter`, `web_search`,
//!   `file_search`, `mcp` with its approval flow). The rest of the engine reaches the kinds through three files:
//!   `tool_kinds/mod.rs` (the generic call and the `match`es that hand over to the kinds;
//!   `GatewayToolState`, each kind's per-response state, which the turn carries unopened and
//!   executors are given; `GatewayReplay`, how their items are told to the model),
//!   `tool_kinds/hooks.rs` (`RunHooks`: what the kinds show and run before the first model turn
//!   and count after each) and `tool_kinds/choice.rs` (`tool_choice` in the kinds' terms).
//!   [`gateway_tool`]: the executor interface `respgw-tools` implements ([`GatewayTool`],
//!   [`ToolResolver`]) — what the engine needs from it, nothing more.
//! - `tool_kinds/web_search/cite.rs`: `url_citation` annotations — markdown links in the answer
//!   to pages `web_search` showed the model, found incrementally so `annotation.added` goes out
//!   as soon as a citation is complete. `tool_kinds/file_search/cite.rs`: `file_citation`
//!   annotations — the numbered markers (`[2]`) citing results `file_search` showed the model,
//!   found the same way.
//! - `truncation.rs`: `truncation: "auto"` — the history split into conversation turns, the oldest
//!   dropped when the upstream refuses a model turn for its context window (enough at once when the
//!   refusal gives sizes, else doubling); what was dropped is the response's `truncation_details`.
//! - `input_tokens.rs`: [`Engine::count_input_tokens`] — `prepare` as for a response, the first model
//!   turn's chat request built as the run builds it, then counted by the upstream (vLLM `/tokenize`,
//!   llama.cpp `/apply-template` + `/tokenize`, else a one-token completion's usage); the method that
//!   worked is remembered per process ([`InputTokenCounter`]).
//! - [`files`]: [`FileReader`], the engine's view of input files: each `input_file` part of a
//!   request's own input is read once in `prepare`, and what the model gets is kept on the part
//!   (`model_content`, stored, never shown to clients), so a continuation sees the same file.
//! - [`sealed`]: `reasoning.encrypted_content` and compaction summaries — AES-256-GCM with the
//!   blob's purpose and tenant as associated data, so neither kind opens as the other and a blob
//!   opens only for the tenant it was sealed for; `open_sealed_items` opens a request's sealed items
//!   once, when they arrive (a blob that does not open is a 400 naming the item).
//! - [`compaction`]: the summarisation call, [`Engine::compact`], `context_management` inside a run,
//!   and the replay rule applied by `chat::messages`: the latest compaction item stands for
//!   everything before it except the user messages. Items are never dropped from history or the
//!   store; the rule only decides what the model is sent.
//! - `stored.rs`: [`Engine::stored`] — retrieve, delete and input items of a tenant's stored
//!   responses (a background response is read from its run's record until it is stored).
//! - `conversations.rs`: [`Engine::conversations`] — the Conversations API. A response created in a
//!   conversation is `run.rs`'s: `prepare` reads the conversation's items and version, and the save
//!   appends to it only if that version is still current (else 409 `conversation_conflict`, nothing
//!   stored).
//! - [`background`]: background responses. `background/mod.rs` holds the process's runs, their stop
//!   signals and the upkeep loop (lease renewal, expired leases of any process failed, runs ended
//!   elsewhere stopped, event logs purged); `start.rs` records a run and waits for a run slot;
//!   `sink.rs` numbers events and writes them in group-commit batches, the save riding with the
//!   terminal event; `follow.rs` reads the event log and follows it to the terminal event;
//!   `closing.rs` ends a run from outside (cancel, lease expiry, unwritable log) in one store
//!   transaction.
//!
//! Architecture invariant: the engine knows nothing of HTTP servers or processes; it talks to
//! the model server through [`Upstream`] and to storage through `respgw_store_api::ResponseStore`.
//! It owns the end of every response stream: exactly one terminal event, even when a run panics.
//!
//! Architecture invariant: outside `tool_kinds/`, the engine names no tool kind: the run, the
//! turn, the offer and the replay handle one generic call, one opaque per-kind state and one
//! hook object, and every `match` over kinds is exhaustive (no fallback arm), so the compiler
//! points at every place a new kind needs.
//!
//! Architecture invariant: a background run's status and event log live in the store, and every
//! change of them is one transaction under the run's row lock (an owner's batch, a cancel, a lease
//! expiry); a client only ever reads committed events, so whichever process answers, the stream it
//! replays has the original numbers and exactly one terminal event.

pub mod background;
pub mod chat;
pub mod compaction;
mod conversations;
mod engine;
pub mod files;
pub mod gateway_tool;
mod input_tokens;
mod meter;
mod offer;
mod rounds;
mod run;
pub mod sealed;
mod sink;
mod spawn;
mod sse_decoder;
mod stored;
pub mod think;
pub mod tool_kinds;
mod truncation;
pub mod turn;
pub mod upstream;

pub use background::{BackgroundRuns, BackgroundSettings, ResumeFrom};
pub use conversations::Conversations;
pub use engine::{Engine, Limits};
pub use files::FileReader;
pub use gateway_tool::{FunctionSpec, GatewayCall, GatewayTool, ResolvedTools, ToolResolver};
pub use input_tokens::{CountMethod, InputTokenCounter};
pub use meter::TokenMeter;
pub use respgw_store_api::background::StoredEvent;
pub use run::{LocalConversation, PreparedResponse, RunOutcome};
pub use stored::StoredResponses;
pub use tool_kinds::{
    CallTarget, CitableSource, ClientCallShape, CodeInterpreterOutcome, FileSearchOutcome, GatewayKind, GatewayOutcome,
    WebSearchOutcome,
};
pub use upstream::{ContextOverflow, DEFAULT_MAX_IDLE_CONNECTIONS, Upstream, UpstreamConfig, UpstreamError};
