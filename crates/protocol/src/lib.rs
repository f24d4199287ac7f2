//! Responses API wire types for respgw.
//!
//! Everything a client or the store sees is defined here: the create-response request and its
//! validation ([`request`]), the items that make up history and output ([`items`]), the response
//! object ([`response`]), the stream events ([`events`]), WebSocket mode's frames ([`websocket`]),
//! the rules of `input_file` parts ([`input_file`]), the queries and bodies of reading stored
//! objects ([`listing`]), compaction's endpoint and `context_management` ([`compaction`]) and the
//! one error shape ([`error`]).
//!
//! Architecture invariant: this crate does no I/O and knows nothing of HTTP servers, upstreams
//! or storage engines; it is pure data plus the rules that make data valid.

pub mod compaction;
pub mod conversations;
pub mod error;
pub mod events;
pub mod ids;
pub mod input_file;
pub mod items;
pub mod limits;
pub mod listing;
pub mod request;
pub mod response;
pub mod tools;
pub mod websocket;

pub use error::{ApiError, ErrorType};
pub use events::{ResponseEvent, SseFrame};
pub use items::{ContentPart, Item, MessageRole};
pub use limits::RequestLimits;
pub use request::{CreateResponseRequest, ValidatedRequest};
pub use response::{ResponseObject, ResponseStatus, Usage};
pub use tools::choice::ToolChoice;
pub use tools::{Capabilities, ToolDeclaration};
