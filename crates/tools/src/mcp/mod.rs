//! MCP, the worker's side: [`McpHelperClient`], the worker's client of the MCP helper's loopback API
//! (Built-in MCP), and Remote MCP (servers a request declares, dialled by the worker itself).
//!
//! The config file, the loopback API's routes and JSON, and the rmcp client pieces shared with the
//! helper are in `respgw-mcp`.
//!
//! - [`helper_client`]: [`McpHelperClient`] and [`HelperError`].
//! - [`remote`]: Remote MCP sessions, their settings and the address policy against request forgery.

pub mod helper_client;
pub mod remote;

pub use helper_client::{HelperError, HelperTimeouts, McpHelperClient};
pub use remote::{RemoteMcp, RemoteMcpSettings, RemoteSession};
