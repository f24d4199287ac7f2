//! The legacy MCP HTTP+SSE client transport (protocol 2024-11-05), which rmcp does not ship.
//!
//! The protocol: `GET <sse url>` opens an event stream; its first `endpoint` event carries the URL (often
//! relative, with a session id in the query) to which the client POSTs each JSON-RPC message; the
//! server answers the POST with 202 and sends every JSON-RPC message of its own as a `message` event on
//! the stream. [`LegacySseTransport`] implements rmcp's [`Transport`], so a session over it is driven by
//! the same rmcp client code as stdio and streamable HTTP ones.
//!
//! The transport ends (`receive` yields `None`) when the event stream ends or breaks; the MCP helper then
//! reconnects with back-off like for any other dropped server (a Remote MCP session just ends with its
//! request). It never reconnects by itself: a new stream is a new MCP session, which needs a new
//! `initialize`.
//!
//! Used by the MCP helper (Built-in `"transport":"sse"` entries) and by Remote MCP (URLs whose path
//! ends in `/sse`), so it lives here rather than in either.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::redact::error_chain;

/// How long one POST of a message may take (the server only has to accept it; the reply comes on the
/// stream).
const POST_TIMEOUT: Duration = Duration::from_secs(30);
/// Messages buffered between the stream reader and the rmcp session.
const INCOMING_BUFFER: usize = 64;

/// Why the legacy SSE transport failed.
#[derive(Debug, thiserror::Error)]
pub enum LegacySseError {
    /// Opening the event stream failed.
    #[error("legacy SSE: GET {url}: {message}")]
    Connect {
        /// The SSE URL.
        url: String,
        /// What happened.
        message: String,
    },
    /// The stream did not announce a usable message endpoint.
    #[error("legacy SSE: {0}")]
    Endpoint(String),
    /// Posting a message failed.
    #[error("legacy SSE: POST of a message failed: {0}")]
    Send(String),
}

/// A connected legacy HTTP+SSE session.
pub struct LegacySseTransport {
    http: reqwest::Client,
    /// Where messages are POSTed (from the `endpoint` event, resolved against the SSE URL).
    post_url: reqwest::Url,
    /// Server messages parsed by the reader task.
    incoming: mpsc::Receiver<ServerJsonRpcMessage>,
    /// The task reading the event stream; aborted on close and drop.
    reader: JoinHandle<()>,
}

impl LegacySseTransport {
    /// Opens the event stream at `sse_url` and waits for its `endpoint` event. The caller bounds the
    /// time this takes (it is part of a server's start-up).
    pub async fn connect(http: reqwest::Client, sse_url: reqwest::Url) -> Result<Self, LegacySseError> {
        let connect_error = |message: String| LegacySseError::Connect { url: sse_url.to_string(), message };
        let response = http
            .get(sse_url.clone())
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await
            .map_err(|e| connect_error(error_chain(&e)))?;
        let status = response.status();
        if !status.is_success() {
            return Err(connect_error(format!("HTTP {status}")));
        }
        let mut events = response.bytes_stream().eventsource();
        let endpoint = loop {
            match events.next().await {
                Some(Ok(event)) if event.event == "endpoint" => break event.data,
                // Comments and keep-alives before the endpoint are harmless; a message would be a protocol
                // error, but ignoring it costs nothing either.
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(connect_error(format!("event stream broke: {e}"))),
                None => {
                    return Err(LegacySseError::Endpoint("the event stream ended before an \"endpoint\" event".into()));
                }
            }
        };
        let post_url = resolve_endpoint(&sse_url, endpoint.trim())?;
        let (tx, incoming) = mpsc::channel(INCOMING_BUFFER);
        let reader = tokio::spawn(async move {
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) if event.event == "message" => {
                        match serde_json::from_str::<ServerJsonRpcMessage>(&event.data) {
                            Ok(message) => {
                                if tx.send(message).await.is_err() {
                                    return;
                                }
                            }
                            Err(e) => tracing::warn!(error = %e, "legacy SSE: ignoring a message that is not JSON-RPC"),
                        }
                    }
                    // Other event kinds (pings, a repeated endpoint) carry nothing for the session.
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "legacy SSE: event stream broke");
                        return;
                    }
                }
            }
        });
        Ok(LegacySseTransport { http, post_url, incoming, reader })
    }

    /// The URL messages are POSTed to.
    pub fn post_url(&self) -> &reqwest::Url {
        &self.post_url
    }
}

/// The endpoint event's URL, resolved against the SSE URL. It must stay on the same origin: a server
/// must not be able to make the client POST (with its credentials) to some other host.
fn resolve_endpoint(sse_url: &reqwest::Url, endpoint: &str) -> Result<reqwest::Url, LegacySseError> {
    let url =
        sse_url.join(endpoint).map_err(|e| LegacySseError::Endpoint(format!("invalid endpoint {endpoint:?}: {e}")))?;
    if url.origin() != sse_url.origin() {
        return Err(LegacySseError::Endpoint(format!(
            "endpoint {endpoint:?} is on another origin than the SSE URL; refusing to send messages there"
        )));
    }
    Ok(url)
}

impl Transport<RoleClient> for LegacySseTransport {
    type Error = LegacySseError;

    fn send(&mut self, item: ClientJsonRpcMessage) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let http = self.http.clone();
        let url = self.post_url.clone();
        async move {
            let response = http
                .post(url)
                .timeout(POST_TIMEOUT)
                .json(&item)
                .send()
                .await
                .map_err(|e| LegacySseError::Send(error_chain(&e)))?;
            let status = response.status();
            if status.is_success() { Ok(()) } else { Err(LegacySseError::Send(format!("HTTP {status}"))) }
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<ServerJsonRpcMessage>> + Send {
        self.incoming.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.reader.abort();
        self.incoming.close();
        Ok(())
    }
}

impl Drop for LegacySseTransport {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> reqwest::Url {
        reqwest::Url::parse(s).expect("url")
    }

    #[test]
    fn resolves_relative_endpoints_against_the_sse_url() {
        let sse = url("http://127.0.0.1:8080/mcp/sse");
        assert_eq!(
            resolve_endpoint(&sse, "/messages?session_id=1").expect("ok").as_str(),
            "http://127.0.0.1:8080/messages?session_id=1"
        );
        assert_eq!(
            resolve_endpoint(&sse, "messages?x=1").expect("ok").as_str(),
            "http://127.0.0.1:8080/mcp/messages?x=1"
        );
        assert!(resolve_endpoint(&sse, "http://127.0.0.1:8080/m").is_ok());
    }

    #[test]
    fn refuses_endpoints_on_another_origin() {
        let sse = url("http://127.0.0.1:8080/sse");
        assert!(resolve_endpoint(&sse, "http://evil.example/messages").is_err());
        assert!(resolve_endpoint(&sse, "http://127.0.0.1:9999/messages").is_err());
        assert!(resolve_endpoint(&sse, "//other.example/messages").is_err());
    }
}
