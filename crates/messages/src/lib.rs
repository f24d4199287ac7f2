//! The Anthropic Messages API face (`POST /v1/messages`): its wire types and the translation
//! into the engine's request and out of the engine's events. No I/O: the server's
//! `messages` module calls this around the one engine that serves Responses too.
//!
//! - [`request`] — a Messages request as it arrives, parsed and checked.
//! - [`into_engine`] — a Messages request as the engine's request, plus its [`shape::ReplyShape`].
//! - [`reply`] — a finished engine response as a `message` body.
//! - [`stream`] — engine events as Anthropic's stream events.
//! - [`server_tools`] — Anthropic's server tools and MCP connector on the gateway's own tools.
//! - [`error`] — errors in Anthropic's shape and statuses.

pub mod error;
pub mod into_engine;
pub mod reply;
pub mod request;
pub mod server_tools;
pub mod shape;
pub mod stream;
