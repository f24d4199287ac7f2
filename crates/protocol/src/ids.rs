//! Identifier generation: `<prefix>_<uuid v7>` in hyphenated form, as the reference gateway does
//! (`resp_01a20155-4c24-7201-9964-fe0cab7f3168`). UUIDv7 keeps ids time-ordered, which keeps the
//! store's primary-key index append-mostly.

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
        }
    }
}

/// A fresh id of the given kind.
pub fn new_id(kind: IdKind) -> String {
    format!("{}_{}", kind.prefix(), uuid::Uuid::now_v7().hyphenated())
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
        assert!(new_id(IdKind::FunctionCall).starts_with("fc_"));
    }
}
