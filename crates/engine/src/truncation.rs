//! `truncation: "auto"`: when the upstream says a model turn's request does not fit the model's
//! context window, drop the oldest whole turns of the conversation and send it again.
//!
//! A *turn* here is a conversation turn (not a model turn): a user message and every item after
//! it up to the next user message: the
//! assistant's reasoning, text and tool calls, the gateway tools' calls with their results, and
//! the client's function outputs. Two things are never dropped: the system and developer
//! messages before the first turn (and the request's `instructions`, which are not history), and
//! the last turn — the one the model is answering. A cut never falls between a client call and
//! its output: a turn boundary that would separate them is not one.
//!
//! How much to drop: when the upstream's error says how many tokens were requested and how many
//! fit, turns are dropped oldest first until their estimated share of the request (by the size of
//! the messages they render, against the size of the whole body) covers the excess; otherwise one
//! turn, then twice as many as the time before. The last attempt drops every turn that may go, so
//! after [`MAX_ATTEMPTS`] the answer is either a fit or `context_length_exceeded`. What is dropped
//! stays dropped for the later model turns of the same response (they only get longer).

use respgw_protocol::ApiError;
use respgw_protocol::items::{Item, MessageRole};
use respgw_protocol::response::TruncationDetails;

use crate::chat;
use crate::tool_kinds::client;
use crate::upstream::ContextOverflow;

/// Upstream calls one model turn may make, the first included, before truncation gives up.
pub(crate) const MAX_ATTEMPTS: usize = 6;

/// Where one response's conversation may be cut, and how much of it is cut so far.
#[derive(Debug, Default)]
pub(crate) struct TurnDropper {
    /// History items that always stay: the system and developer messages before the first turn.
    kept_prefix: usize,
    /// Start (in history) of each turn that may be dropped, oldest first.
    turn_starts: Vec<usize>,
    /// Start of the last turn, which always stays (the history's length when there is none).
    last_turn_start: usize,
    /// Rendered size in bytes of each droppable turn (its chat messages as JSON).
    turn_bytes: Vec<usize>,
    /// How many of the droppable turns are dropped.
    dropped: usize,
}

impl TurnDropper {
    /// The turns of `history` (inherited items followed by the request's input).
    pub(crate) fn new(history: &[Item], max_tool_output_bytes: usize) -> Self {
        let kept_prefix = history.iter().take_while(|item| is_system(item)).count();
        let mut starts: Vec<usize> = std::iter::once(kept_prefix)
            .chain((kept_prefix + 1..history.len()).filter(|&i| is_user(&history[i])))
            .filter(|&i| i < history.len())
            .collect();
        // A boundary between a client call and its output is not a turn boundary.
        for (output_at, item) in history.iter().enumerate() {
            let Some(call_id) = client::answered_call_id(item) else { continue };
            if let Some(call_at) = history[..output_at].iter().rposition(|i| client::call_id(i) == Some(call_id)) {
                starts.retain(|&s| s <= call_at || s > output_at);
            }
        }
        let last_turn_start = starts.pop().unwrap_or(history.len());
        let turn_bytes = starts
            .iter()
            .enumerate()
            .map(|(k, &start)| {
                let end = starts.get(k + 1).copied().unwrap_or(last_turn_start);
                chat::messages(None, &history[start..end], max_tool_output_bytes)
                    .iter()
                    .map(|m| m.to_string().len())
                    .sum()
            })
            .collect();
        TurnDropper { kept_prefix, turn_starts: starts, last_turn_start, turn_bytes, dropped: 0 }
    }

    /// The history items the model is sent: the kept prefix, then the turns not dropped.
    pub(crate) fn kept<'a>(&self, history: &'a [Item]) -> impl Iterator<Item = &'a Item> + Clone {
        let resume = self.turn_starts.get(self.dropped).copied().unwrap_or(self.last_turn_start);
        let resume = if self.dropped == 0 { self.kept_prefix } else { resume };
        history[..self.kept_prefix].iter().chain(&history[resume.min(history.len())..])
    }

    /// Drop more turns after the upstream refused a request of `body_bytes` bytes for `overflow`
    /// on attempt `attempt` (0 for the first call of the model turn). Fails with
    /// `context_length_exceeded` when no turn is left to drop.
    pub(crate) fn drop_more(
        &mut self,
        overflow: &ContextOverflow,
        body_bytes: usize,
        attempt: usize,
    ) -> Result<(), ApiError> {
        let remaining = self.turn_starts.len() - self.dropped;
        if remaining == 0 {
            return Err(overflow.to_api_error_after_truncation());
        }
        let wanted = if attempt + 2 >= MAX_ATTEMPTS {
            remaining
        } else {
            match (overflow.excess(), overflow.requested) {
                (Some(excess), Some(requested)) if body_bytes > 0 => {
                    self.turns_covering(excess as f64 * body_bytes as f64 / requested.max(1) as f64)
                }
                _ => 1 << attempt,
            }
        };
        self.dropped += wanted.clamp(1, remaining);
        Ok(())
    }

    /// How many more of the oldest remaining turns add up to at least `bytes`.
    fn turns_covering(&self, bytes: f64) -> usize {
        let mut covered = 0.0;
        let mut count = 0;
        for size in &self.turn_bytes[self.dropped..] {
            count += 1;
            covered += *size as f64;
            if covered >= bytes {
                break;
            }
        }
        count
    }

    /// What was dropped, for the response; `None` when nothing was.
    pub(crate) fn details(&self) -> Option<TruncationDetails> {
        if self.dropped == 0 {
            return None;
        }
        let resume = self.turn_starts.get(self.dropped).copied().unwrap_or(self.last_turn_start);
        Some(TruncationDetails {
            dropped_turns: self.dropped as u64,
            dropped_items: (resume - self.kept_prefix) as u64,
        })
    }
}

fn is_system(item: &Item) -> bool {
    matches!(item, Item::Message(m) if matches!(m.role, MessageRole::System | MessageRole::Developer))
}

fn is_user(item: &Item) -> bool {
    matches!(item, Item::Message(m) if m.role == MessageRole::User)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn item(v: Value) -> Item {
        serde_json::from_value(v).expect("an item")
    }

    fn message(role: &str, text: &str) -> Item {
        item(json!({"type":"message","id":format!("msg_{text}"),"role":role,"status":"completed",
                    "content":[{"type":"input_text","text":text}]}))
    }

    fn call(call_id: &str) -> Item {
        item(json!({"type":"function_call","id":format!("fc_{call_id}"),"call_id":call_id,"name":"f",
                    "arguments":"{}","status":"completed"}))
    }

    fn output(call_id: &str) -> Item {
        item(json!({"type":"function_call_output","id":format!("fco_{call_id}"),"call_id":call_id,
                    "output":"done","status":"completed"}))
    }

    /// The ids of the items kept.
    fn kept(dropper: &TurnDropper, history: &[Item]) -> Vec<String> {
        dropper.kept(history).map(|i| i.id().to_owned()).collect()
    }

    fn unknown_sizes() -> ContextOverflow {
        ContextOverflow { limit: None, requested: None }
    }

    #[test]
    fn the_oldest_turns_go_first_and_leading_system_messages_stay() {
        let history = [
            message("developer", "rules"),
            message("user", "u1"),
            message("assistant", "a1"),
            message("user", "u2"),
            message("assistant", "a2"),
            message("user", "u3"),
        ];
        let mut dropper = TurnDropper::new(&history, usize::MAX);
        assert_eq!(kept(&dropper, &history).len(), 6);
        dropper.drop_more(&unknown_sizes(), 0, 0).unwrap();
        assert_eq!(kept(&dropper, &history), ["msg_rules", "msg_u2", "msg_a2", "msg_u3"]);
        assert_eq!(dropper.details(), Some(TruncationDetails { dropped_turns: 1, dropped_items: 2 }));
        dropper.drop_more(&unknown_sizes(), 0, 1).unwrap();
        assert_eq!(kept(&dropper, &history), ["msg_rules", "msg_u3"]);
        // The last turn is never dropped.
        let e = dropper.drop_more(&unknown_sizes(), 0, 2).unwrap_err();
        assert_eq!(e.code.as_deref(), Some("context_length_exceeded"));
        assert!(e.message.contains("every earlier turn"), "{}", e.message);
    }

    #[test]
    fn a_call_and_its_output_are_never_separated() {
        // A user message between a call and its output does not start a turn.
        let history = [
            message("user", "u1"),
            call("c1"),
            message("user", "meanwhile"),
            output("c1"),
            message("assistant", "a1"),
            message("user", "u2"),
        ];
        let mut dropper = TurnDropper::new(&history, usize::MAX);
        dropper.drop_more(&unknown_sizes(), 0, 0).unwrap();
        assert_eq!(kept(&dropper, &history), ["msg_u2"]);
        assert_eq!(dropper.details(), Some(TruncationDetails { dropped_turns: 1, dropped_items: 5 }));
    }

    #[test]
    fn without_numbers_each_retry_drops_twice_as_many_and_the_last_drops_all() {
        let history: Vec<Item> = (0..40).map(|i| message("user", &format!("u{i}"))).collect();
        let mut dropper = TurnDropper::new(&history, usize::MAX);
        let mut dropped = Vec::new();
        for attempt in 0..MAX_ATTEMPTS - 1 {
            dropper.drop_more(&unknown_sizes(), 0, attempt).unwrap();
            dropped.push(dropper.details().map_or(0, |d| d.dropped_turns));
        }
        assert_eq!(dropped, [1, 3, 7, 15, 39]);
        assert_eq!(kept(&dropper, &history), ["msg_u39"]);
    }

    #[test]
    fn with_numbers_enough_turns_go_at_once_to_cover_the_excess() {
        let history: Vec<Item> = (0..10).map(|i| message("user", &format!("turn {i} {}", "x".repeat(90)))).collect();
        let mut dropper = TurnDropper::new(&history, usize::MAX);
        let turn = dropper.turn_bytes[0];
        // A body of 10 turns' bytes that is 1000 tokens: 100 tokens a turn; 250 too many → 3 turns.
        let overflow = ContextOverflow { limit: Some(751), requested: Some(1000) };
        dropper.drop_more(&overflow, turn * 10, 0).unwrap();
        assert_eq!(dropper.details().map(|d| d.dropped_turns), Some(3));
    }

    #[test]
    fn without_a_user_message_nothing_can_be_dropped() {
        let history = [call("c1"), output("c1")];
        let mut dropper = TurnDropper::new(&history, usize::MAX);
        assert!(dropper.drop_more(&unknown_sizes(), 0, 0).is_err());
        assert_eq!(kept(&dropper, &history).len(), 2);
        assert_eq!(dropper.details(), None);
    }

    #[test]
    fn items_before_the_first_user_message_are_a_turn_of_their_own() {
        let history = [message("system", "s"), message("assistant", "hello"), message("user", "u1")];
        let mut dropper = TurnDropper::new(&history, usize::MAX);
        dropper.drop_more(&unknown_sizes(), 0, 0).unwrap();
        assert_eq!(kept(&dropper, &history), ["msg_s", "msg_u1"]);
    }
}
