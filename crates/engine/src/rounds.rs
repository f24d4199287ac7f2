//! Per-round timings of a run, stored with the response (`NewResponse::rounds`) for the operator
//! console: for each upstream call (model turn), when it was sent, when its first and last chunks
//! arrived, the usage it reported, how long the gateway tools it called took, and the items it
//! produced. Times are milliseconds since the run started, on the monotonic clock.

use std::time::{Duration, Instant};

use respgw_protocol::{Item, Usage};
use respgw_store_api::RoundRecord;

/// The rounds of one run, in order.
#[derive(Debug)]
pub(crate) struct RoundLog {
    run_started: Instant,
    rounds: Vec<RoundRecord>,
}

/// A round being recorded: its upstream call is open or its gateway tools are running.
#[derive(Debug)]
pub(crate) struct OpenRound {
    sent: Instant,
    first_chunk: Option<Instant>,
    last_chunk: Option<Instant>,
    /// How many output items the run had when the round began: the round's items follow.
    first_item: usize,
    tools: Duration,
}

impl RoundLog {
    /// A log whose times count from now.
    pub(crate) fn start() -> RoundLog {
        RoundLog::started_at(Instant::now())
    }

    fn started_at(run_started: Instant) -> RoundLog {
        RoundLog { run_started, rounds: Vec::new() }
    }

    /// A round whose chat request is sent now; the run has produced `items_so_far` output items.
    pub(crate) fn begin(&self, items_so_far: usize) -> OpenRound {
        OpenRound::sent_at(Instant::now(), items_so_far)
    }

    /// Records `round`, ended now: `usage` is what its upstream call reported, `output` the run's
    /// output items so far (the round's are those after its `items_so_far`).
    pub(crate) fn end(&mut self, round: OpenRound, usage: Option<&Usage>, output: &[Item]) {
        self.end_at(round, Instant::now(), usage, output);
    }

    fn end_at(&mut self, round: OpenRound, now: Instant, usage: Option<&Usage>, output: &[Item]) {
        let last = round.last_chunk.unwrap_or(now);
        self.rounds.push(RoundRecord {
            started_ms: millis(round.sent.saturating_duration_since(self.run_started)),
            first_chunk_ms: round.first_chunk.map(|at| millis(at.saturating_duration_since(self.run_started))),
            duration_ms: millis(last.saturating_duration_since(round.sent)),
            input_tokens: usage.map_or(0, |u| u.input_tokens),
            output_tokens: usage.map_or(0, |u| u.output_tokens),
            tools_ms: millis(round.tools),
            item_ids: output.get(round.first_item..).unwrap_or_default().iter().map(|i| i.id().to_owned()).collect(),
        });
    }

    /// The rounds recorded so far, in order.
    pub(crate) fn rounds(&self) -> &[RoundRecord] {
        &self.rounds
    }
}

impl OpenRound {
    fn sent_at(sent: Instant, first_item: usize) -> OpenRound {
        OpenRound { sent, first_chunk: None, last_chunk: None, first_item, tools: Duration::ZERO }
    }

    /// A chunk (or the end-of-stream marker) of the upstream call arrived now.
    pub(crate) fn chunk_arrived(&mut self) {
        self.chunk_arrived_at(Instant::now());
    }

    fn chunk_arrived_at(&mut self, at: Instant) {
        self.first_chunk.get_or_insert(at);
        self.last_chunk = Some(at);
    }

    /// A gateway tool this round called ran for `took`.
    pub(crate) fn tool_ran(&mut self, took: Duration) {
        self.tools = self.tools.saturating_add(took);
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use respgw_protocol::Item;
    use serde_json::json;

    use super::*;

    fn message(id: &str) -> Item {
        serde_json::from_value(json!({"type":"message","id":id,"role":"assistant","status":"completed",
            "content":[{"type":"output_text","text":"hi","annotations":[]}]}))
        .expect("an output message item")
    }

    #[test]
    fn a_round_counts_from_the_run_start_and_lasts_to_its_last_chunk() {
        let run = Instant::now();
        let mut log = RoundLog::started_at(run);
        let mut round = OpenRound::sent_at(run + Duration::from_millis(5), 1);
        round.chunk_arrived_at(run + Duration::from_millis(30));
        round.chunk_arrived_at(run + Duration::from_millis(80));
        round.tool_ran(Duration::from_millis(7));
        round.tool_ran(Duration::from_millis(3));
        let usage = Usage { input_tokens: 12, output_tokens: 4, ..Usage::default() };
        let output = [message("msg_old"), message("msg_a"), message("msg_b")];
        log.end_at(round, run + Duration::from_millis(200), Some(&usage), &output);

        assert_eq!(
            log.rounds(),
            [RoundRecord {
                started_ms: 5,
                first_chunk_ms: Some(30),
                duration_ms: 75,
                input_tokens: 12,
                output_tokens: 4,
                tools_ms: 10,
                item_ids: vec!["msg_a".into(), "msg_b".into()],
            }]
        );
    }

    #[test]
    fn a_round_without_chunks_or_usage_lasts_until_it_ended() {
        let run = Instant::now();
        let mut log = RoundLog::started_at(run);
        let round = OpenRound::sent_at(run + Duration::from_millis(10), 0);
        log.end_at(round, run + Duration::from_millis(50), None, &[]);
        let record = &log.rounds()[0];
        assert_eq!((record.first_chunk_ms, record.duration_ms), (None, 40));
        assert_eq!((record.input_tokens, record.output_tokens, record.tools_ms), (0, 0, 0));
        assert!(record.item_ids.is_empty());
    }
}
