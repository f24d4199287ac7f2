//! The engine value: [`Engine`], shared by every response a process serves — the upstream
//! client, the store, the gateway's tools, the metrics, the operator's [`Limits`] and the optional
//! parts (reasoning seal, file reader, background runs) — built once with its `with_*` methods.
//! Running one response is `run.rs`'s.

use std::sync::Arc;

use respgw_protocol::RequestLimits;
use respgw_store_api::ResponseStore;
use respgw_telemetry::Metrics;
use serde::{Deserialize, Serialize};

use crate::background::BackgroundRuns;
use crate::conversations::Conversations;
use crate::files::FileReader;
use crate::gateway_tool::ToolResolver;
use crate::input_tokens::InputTokenCounter;
use crate::meter::TokenMeter;
use crate::sealed::ReasoningSeal;
use crate::stored::StoredResponses;
use crate::upstream::Upstream;

/// Operator caps on what one response may ask of the gateway (`GW_MAX_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Size caps checked when the request is validated.
    pub request: RequestLimits,
    /// Rounds of gateway tool calls one response may take (the loop guard): after this many, one
    /// more model turn is sent with `tool_choice: "none"`, so the model has to answer instead of
    /// calling another tool.
    pub max_tool_rounds: usize,
    /// Longest gateway tool result sent back to the model, in bytes; longer ones are cut with a
    /// note saying so (the item the client sees keeps the whole output).
    pub max_tool_output_bytes: usize,
    /// Most items one conversation may hold, counted in the store: items added past it are
    /// refused (nothing written), and so is a response whose input would take it past it.
    pub max_conversation_items: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            request: RequestLimits::default(),
            max_tool_rounds: 15,
            max_tool_output_bytes: 64 * 1024,
            max_conversation_items: 5000,
        }
    }
}

/// Shared, process-wide engine: the upstream client, the store, the gateway's tools and the
/// metrics it records into.
pub struct Engine {
    pub(crate) upstream: Upstream,
    pub(crate) store: Arc<dyn ResponseStore>,
    pub(crate) tools: Arc<dyn ToolResolver>,
    pub(crate) metrics: Metrics,
    pub(crate) limits: Limits,
    /// Seals reasoning for `include: ["reasoning.encrypted_content"]` and compaction summaries,
    /// and opens both on replay; without one, no reasoning is sealed, nothing can be compacted
    /// and sealed input is refused.
    pub(crate) seal: Option<ReasoningSeal>,
    /// Reads `input_file` parts; without one, they are refused.
    pub(crate) files: Option<Arc<dyn FileReader>>,
    /// How this process's upstream counts input tokens, once found.
    counter: InputTokenCounter,
    /// Background responses; without them, `background: true` is refused.
    background: Option<Arc<BackgroundRuns>>,
    /// Told the tokens of every upstream call; without one, they are only counted in metrics.
    meter: Option<Arc<dyn TokenMeter>>,
}

impl Engine {
    pub fn new(
        upstream: Upstream,
        store: Arc<dyn ResponseStore>,
        tools: Arc<dyn ToolResolver>,
        metrics: Metrics,
    ) -> Self {
        Engine {
            upstream,
            store,
            tools,
            metrics,
            limits: Limits::default(),
            seal: None,
            files: None,
            counter: InputTokenCounter::default(),
            background: None,
            meter: None,
        }
    }

    /// The same engine under `limits` instead of the defaults.
    pub fn with_limits(self, limits: Limits) -> Self {
        Engine { limits, ..self }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Seal and open `reasoning.encrypted_content` with these keys.
    pub fn with_reasoning_seal(mut self, seal: ReasoningSeal) -> Self {
        self.seal = Some(seal);
        self
    }

    /// Read `input_file` parts with `files`.
    pub fn with_file_reader(mut self, files: Arc<dyn FileReader>) -> Self {
        self.files = Some(files);
        self
    }

    /// Run `background: true` responses on `runs`.
    pub fn with_background(mut self, runs: Arc<BackgroundRuns>) -> Self {
        self.background = Some(runs);
        self
    }

    /// Report the tokens of every upstream call to `meter`.
    pub fn with_token_meter(mut self, meter: Arc<dyn TokenMeter>) -> Self {
        self.meter = Some(meter);
        self
    }

    /// Charge `owner` the input and output tokens of one upstream call.
    pub(crate) async fn charge_tokens(&self, owner: &str, usage: &respgw_protocol::Usage) {
        if let Some(meter) = &self.meter {
            meter.charge(owner, usage.input_tokens.saturating_add(usage.output_tokens)).await;
        }
    }

    /// The background runs, when background responses are on.
    pub fn background(&self) -> Option<&Arc<BackgroundRuns>> {
        self.background.as_ref()
    }

    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// Reads and deletes of `owner`'s responses in the store.
    pub fn stored<'a>(&'a self, owner: &'a str) -> StoredResponses<'a> {
        StoredResponses {
            store: self.store.as_ref(),
            owner,
            background: self.background.as_deref().map(BackgroundRuns::store),
        }
    }

    /// Reads and writes of `owner`'s conversations and their items.
    pub fn conversations<'a>(&'a self, owner: &'a str) -> Conversations<'a> {
        Conversations {
            store: self.store.as_ref(),
            owner,
            files: self.files.as_deref(),
            seal: self.seal.as_ref(),
            max_items: self.limits.max_conversation_items,
        }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// How input tokens are counted on this process's upstream.
    pub fn input_token_counter(&self) -> &InputTokenCounter {
        &self.counter
    }

    /// Which gateway tools requests may declare.
    pub fn capabilities(&self) -> respgw_protocol::Capabilities {
        self.tools.capabilities()
    }
}
