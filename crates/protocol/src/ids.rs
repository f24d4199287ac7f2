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
    WebSearchCall,
    CustomToolCall,
    LocalShellCall,
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
            IdKind::WebSearchCall => "ws",
            IdKind::CustomToolCall => "ctc",
            IdKind::LocalShellCall => "lsh",
        }
    }
}

/// Whether `id` is one this gateway minted for `kind` (`<prefix>_<uuid>`). Clients may replay
/// ids of other systems (the reference API's `cntr_<48 hex>`); those are not ours to reuse.
pub fn is_own_id(kind: IdKind, id: &str) -> bool {
    id.strip_prefix(kind.prefix())
        .and_then(|rest| rest.strip_prefix('_'))
        .is_some_and(|uuid| uuid.len() == 36 && uuid::Uuid::parse_str(uuid).is_ok())
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
        assert!(is_own_id(IdKind::Response, &a));
        assert!(!is_own_id(IdKind::Container, &a));
        assert!(!is_own_id(IdKind::Container, "cntr_6957f9a833d881988d1d5953f1dcffee09e72e9a3fe371da"));
        assert!(new_id(IdKind::FunctionCall).starts_with("fc_"));
    }
}
