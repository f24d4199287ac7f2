//! Identifier generation: `<prefix>_<uuid v7>` in hyphenated form, as the reference gateway does
//! (`resp_01a20155-4c24-7201-9964-fe0cab7f3168`). UUIDv7 keeps ids time-ordered, which keeps the
//! store's primary-key index append-mostly.
//!
//! The ids of gateway tool calls also say which model turn they were made in ([`TurnStamp`]).

/// Prefixes of the ids this gateway mints, one per object kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    Response,
    Message,
    Reasoning,
    FunctionCall,
    FunctionCallOutput,
    CodeInterpreterCall,
    Container,
    McpCall,
    McpListTools,
    McpApprovalRequest,
    McpApprovalResponse,
    WebSearchCall,
    FileSearchCall,
    CustomToolCall,
    LocalShellCall,
    Conversation,
    Compaction,
    /// An uploaded file: `file-<uuid>`, with OpenAI's hyphen.
    File,
    VectorStore,
    FileBatch,
}

impl IdKind {
    fn prefix(self) -> &'static str {
        match self {
            IdKind::Response => "resp",
            IdKind::Message => "msg",
            IdKind::Reasoning => "rs",
            IdKind::FunctionCall => "fc",
            IdKind::FunctionCallOutput => "fco",
            IdKind::CodeInterpreterCall => "ci",
            IdKind::Container => "cntr",
            IdKind::McpCall => "mcp",
            IdKind::McpListTools => "mcpl",
            IdKind::McpApprovalRequest => "mcpr",
            IdKind::McpApprovalResponse => "mcpa",
            IdKind::WebSearchCall => "ws",
            IdKind::FileSearchCall => "fs",
            IdKind::CustomToolCall => "ctc",
            IdKind::LocalShellCall => "lsh",
            IdKind::Conversation => "conv",
            IdKind::Compaction => "cmp",
            IdKind::File => "file",
            IdKind::VectorStore => "vs",
            IdKind::FileBatch => "vsfb",
        }
    }

    /// What joins the prefix to the UUID: `-` for files (as OpenAI's `file-…`), `_` for the rest.
    fn separator(self) -> char {
        if self == IdKind::File { '-' } else { '_' }
    }
}

/// Whether `id` is one this gateway minted for `kind` (`<prefix>_<uuid>`). Clients may replay
/// ids of other systems (the reference API's `cntr_<48 hex>`); those are not ours to reuse.
pub fn is_own_id(kind: IdKind, id: &str) -> bool {
    id.strip_prefix(kind.prefix())
        .and_then(|rest| rest.strip_prefix(kind.separator()))
        .is_some_and(|uuid| uuid.len() == 36 && uuid::Uuid::parse_str(uuid).is_ok())
}

/// A fresh id of the given kind.
pub fn new_id(kind: IdKind) -> String {
    format!("{}{}{}", kind.prefix(), kind.separator(), uuid::Uuid::now_v7().hyphenated())
}

/// The model turn a gateway tool call was made in, carried inside the call's id.
///
/// A gateway tool's item (`web_search_call`, `code_interpreter_call`, `mcp_call`) holds a call
/// and its result, so two of them in a row do not say whether the model made the calls at once
/// or one after the other. The ids minted for the calls of one turn share the first 8 bytes of
/// their UUID — the turn's UUIDv7 timestamp, the version and 12 random bits — and differ in the
/// other 8, which are random per id. An id goes wherever its item goes (the store, a client that
/// sends the output back as input, another process), and the turn with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnStamp([u8; 8]);

impl TurnStamp {
    /// The stamp of a new model turn, never equal to `previous` (the turn before it).
    pub fn after(previous: Option<TurnStamp>) -> TurnStamp {
        loop {
            let mut head = [0; 8];
            head.copy_from_slice(&uuid::Uuid::now_v7().as_bytes()[..8]);
            // `now_v7` puts a counter after the version, which two turns in one millisecond may
            // share; random bits set the turns apart.
            let random = uuid::Uuid::new_v4();
            head[6] = 0x70 | (random.as_bytes()[0] & 0x0f);
            head[7] = random.as_bytes()[1];
            let stamp = TurnStamp(head);
            if Some(stamp) != previous {
                return stamp;
            }
        }
    }

    /// The stamp in an id of the shape `<prefix>_<hyphenated UUIDv7>`; `None` for other ids
    /// (another system's, or a client's own).
    pub fn of(id: &str) -> Option<TurnStamp> {
        let (_, hyphenated) = id.split_once('_').filter(|(_, rest)| rest.len() == 36)?;
        let uuid = uuid::Uuid::try_parse(hyphenated).ok().filter(|u| u.get_version_num() == 7)?;
        let mut head = [0; 8];
        head.copy_from_slice(&uuid.as_bytes()[..8]);
        Some(TurnStamp(head))
    }

    /// A fresh id of `kind` for a call made in this turn.
    pub fn new_id(self, kind: IdKind) -> String {
        // A v4 UUID's second half is random apart from the variant bits, which v7 shares.
        let mut bytes = *uuid::Uuid::new_v4().as_bytes();
        bytes[..8].copy_from_slice(&self.0);
        format!("{}_{}", kind.prefix(), uuid::Uuid::from_bytes(bytes).hyphenated())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_their_prefix_and_are_unique() {
        let a = new_id(IdKind::Response);
        let b = new_id(IdKind::Response);
        assert!(a.starts_with("resp_"));
        assert_eq!(a.len(), "resp_".len() + 36);
        assert_ne!(a, b);
        assert!(is_own_id(IdKind::Response, &a));
        assert!(!is_own_id(IdKind::Container, &a));
        assert!(!is_own_id(IdKind::Container, "cntr_6957f9a833d881988d1d5953f1dcffee09e72e9a3fe371da"));
        assert!(new_id(IdKind::FunctionCall).starts_with("fc_"));
    }

    #[test]
    fn file_ids_join_with_a_hyphen_as_openai_writes_them() {
        let file = new_id(IdKind::File);
        assert!(file.starts_with("file-") && is_own_id(IdKind::File, &file));
        assert!(!is_own_id(IdKind::File, &file.replacen('-', "_", 1)));
        assert!(new_id(IdKind::VectorStore).starts_with("vs_"));
        assert!(new_id(IdKind::FileBatch).starts_with("vsfb_"));
    }

    #[test]
    fn ids_of_one_turn_share_its_stamp_and_no_other() {
        let turn = TurnStamp::after(None);
        let (a, b) = (turn.new_id(IdKind::WebSearchCall), turn.new_id(IdKind::McpCall));
        assert_ne!(a, b);
        assert!(a.starts_with("ws_") && a.len() == "ws_".len() + 36, "{a}");
        let parsed = uuid::Uuid::parse_str(&a["ws_".len()..]).unwrap();
        assert_eq!(parsed.get_version_num(), 7);
        assert_eq!(parsed.get_variant(), uuid::Variant::RFC4122);
        assert_eq!((TurnStamp::of(&a), TurnStamp::of(&b)), (Some(turn), Some(turn)));

        let next = TurnStamp::after(Some(turn));
        assert_ne!(next, turn);
        assert_ne!(TurnStamp::of(&next.new_id(IdKind::WebSearchCall)), Some(turn));
    }

    #[test]
    fn foreign_ids_carry_no_stamp() {
        for id in ["ws_68c1f0e2a4b08190a1b2c3d4e5f6a7b8", "call_1", "ws_", "ws_not-a-uuid", "mcp_0190ab12cd34ef56"] {
            assert_eq!(TurnStamp::of(id), None, "{id}");
        }
        let v4 = format!("ws_{}", uuid::Uuid::new_v4().hyphenated());
        assert_eq!(TurnStamp::of(&v4), None);
    }
}
