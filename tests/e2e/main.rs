//! respgw's end-to-end tests, one module per area, linked into one test binary. Each test starts
//! the real `respgw` binary (or several) on loopback ports chosen at run time, in front of the
//! scripted upstream (`respgw_testkit::upstream`), and asserts on what clients get and on what the
//! upstream received. Run one area with `cargo test --test e2e <module>::`.

mod common;

mod agents_sdk;
mod anthropic_sdk;
mod auth_and_passthrough;
mod background;
mod bad_input;
mod claude_code;
mod code_interpreter;
mod codex_cli;
mod compaction;
mod configuration;
mod console_api;
mod console_browser;
mod console_overview;
mod conversations;
mod conversations_sdk;
mod faults;
mod file_search;
mod files_api;
mod hardening;
mod input_file;
mod limits;
mod mcp;
mod mcp_approvals;
mod mcp_remote;
mod messages;
mod messages_replies;
mod messages_tools;
mod openai_sdk;
mod postgres;
mod process_model;
mod quickstart_model;
mod responses;
mod seed_parity;
mod store;
mod systemd;
mod tenants;
mod tokens_truncation;
mod tracing_otlp;
mod web_search;
mod websocket;
