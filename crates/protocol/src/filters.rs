//! Attribute filters of vector-store search and the `file_search` tool: comparisons (`eq ne gt
//! gte lt lte in nin`) over a file's `attributes`, and `and`/`or` compounds of them.
//!
//! SKELETON (issue 30): parsing and evaluation are being written.

use serde_json::Value;

use crate::ApiError;

/// A comparison's operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    Eq,
    Ne,
    Gt,
    Gte,
    Lt,
    Lte,
    In,
    Nin,
}

/// A parsed filter.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    Compare { key: String, op: Comparison, value: Value },
    And(Vec<Filter>),
    Or(Vec<Filter>),
}

impl Filter {
    /// Parse `value` (the client's `filters`), naming `param` (e.g. `filters`,
    /// `tools[0].filters`) and the path inside it in a 400.
    pub fn parse(_value: &Value, _param: &str) -> Result<Filter, ApiError> {
        todo!("issue 30: filters")
    }

    /// Whether a file with these `attributes` passes.
    pub fn matches(&self, _attributes: &Value) -> bool {
        todo!("issue 30: filters")
    }

    /// The filter as the client wrote it (stored in a `file_search` declaration).
    pub fn to_json(&self) -> Value {
        todo!("issue 30: filters")
    }
}
