//! A streaming response on a task of its own, its events into a channel for the connection.
//!
//! The engine owns the end of every stream: the channel carries exactly one terminal event
//! (`response.completed`, `response.incomplete` or `response.failed`) whatever happens in the run
//! — a panic included, which is caught here and answered with `error` + `response.failed`
//! (unless the terminal event had already gone out). The connection only frames and numbers
//! what comes out of the channel; dropping the receiver cancels the run.

use std::any::Any;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use respgw_protocol::{ApiError, ResponseEvent};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::run::{LocalConversation, PreparedResponse, end_failed};
use crate::sink::EventSink;

/// What a client is told when a run dies.
pub(crate) const RUN_DIED: &str = "The gateway stopped producing this response unexpectedly.";

impl PreparedResponse {
    /// Run on a task of its own (in the current tracing span); its events come out of the
    /// returned channel, which holds up to `buffer` of them before the run waits for the client.
    pub fn spawn(self, buffer: usize) -> mpsc::Receiver<ResponseEvent> {
        let (tx, rx) = mpsc::channel(buffer);
        tokio::spawn(self.run_guarded(tx, false).in_current_span());
        rx
    }

    /// [`PreparedResponse::spawn`], the task also giving back the conversation of a
    /// `store:false` response that finished, for a connection to continue from.
    pub fn spawn_keeping_conversation(
        self,
        buffer: usize,
    ) -> (mpsc::Receiver<ResponseEvent>, JoinHandle<Option<LocalConversation>>) {
        let (tx, rx) = mpsc::channel(buffer);
        let task = tokio::spawn(self.run_guarded(tx, true).in_current_span());
        (rx, task)
    }

    /// Run to the terminal event, sending events to `tx`; a panic ends the stream as failed, with
    /// the response as the run left it.
    async fn run_guarded(
        mut self,
        tx: mpsc::Sender<ResponseEvent>,
        keep_conversation: bool,
    ) -> Option<LocalConversation> {
        let mut sink = EventSink::channel(tx);
        match AssertUnwindSafe(self.run_to_end(&mut sink, keep_conversation)).catch_unwind().await {
            Ok((_, conversation)) => conversation,
            Err(panic) => {
                let response = self.response_mut();
                tracing::error!(response_id = %response.id, panic = panic_text(panic.as_ref()), "the response's run panicked; it ends as failed");
                if !sink.ended() {
                    end_failed(response, &ApiError::internal(RUN_DIED), &mut sink).await;
                }
                None
            }
        }
    }
}

/// The message a panic was raised with.
pub(crate) fn panic_text(panic: &(dyn Any + Send)) -> &str {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => text,
        (None, Some(text)) => text,
        (None, None) => "(no message)",
    }
}

#[cfg(test)]
mod tests {
    //! A real run against a one-shot upstream on loopback and a store whose save panics.

    use std::sync::Arc;
    use std::time::Duration;

    use async_trait::async_trait;
    use respgw_protocol::{CreateResponseRequest, Item, ValidatedRequest};
    use respgw_store_api::{
        ConversationHistory, ConversationItemLookup, ConversationRecord, InputItemsList, InputItemsPage,
        NewConversation, NewResponse, ResponseStore, StoreError,
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::gateway_tool::{ResolvedTools, ToolResolver};
    use crate::{Engine, Upstream, UpstreamConfig};

    /// A store that panics when a response is saved.
    struct PanickingStore;

    #[async_trait]
    impl ResponseStore for PanickingStore {
        async fn save(&self, _: NewResponse) -> Result<(), StoreError> {
            panic!("the store blew up")
        }
        async fn response(&self, _: &str, _: &str) -> Result<Option<serde_json::Value>, StoreError> {
            Ok(None)
        }
        async fn history(&self, _: &str, _: &str) -> Result<Option<Vec<Item>>, StoreError> {
            Ok(None)
        }
        async fn input_items(&self, _: &str, _: &str, _: InputItemsPage) -> Result<Option<InputItemsList>, StoreError> {
            Ok(None)
        }
        async fn delete(&self, _: &str, _: &str) -> Result<bool, StoreError> {
            Ok(false)
        }
        async fn create_conversation(&self, _: NewConversation) -> Result<(), StoreError> {
            Ok(())
        }
        async fn conversation(&self, _: &str, _: &str) -> Result<Option<ConversationRecord>, StoreError> {
            Ok(None)
        }
        async fn update_conversation(
            &self,
            _: &str,
            _: &str,
            _: serde_json::Map<String, serde_json::Value>,
        ) -> Result<Option<ConversationRecord>, StoreError> {
            Ok(None)
        }
        async fn delete_conversation(&self, _: &str, _: &str) -> Result<bool, StoreError> {
            Ok(false)
        }
        async fn conversation_history(&self, _: &str, _: &str) -> Result<Option<ConversationHistory>, StoreError> {
            Ok(None)
        }
        async fn conversation_items(
            &self,
            _: &str,
            _: &str,
            _: InputItemsPage,
        ) -> Result<Option<InputItemsList>, StoreError> {
            Ok(None)
        }
        async fn append_conversation_items(
            &self,
            _: &str,
            _: &str,
            _: Vec<Item>,
            _: usize,
        ) -> Result<Option<()>, StoreError> {
            Ok(None)
        }
        async fn conversation_item(
            &self,
            _: &str,
            _: &str,
            _: &str,
        ) -> Result<ConversationItemLookup<Item>, StoreError> {
            Ok(ConversationItemLookup::NoConversation)
        }
        async fn delete_conversation_item(
            &self,
            _: &str,
            _: &str,
            _: &str,
        ) -> Result<ConversationItemLookup<ConversationRecord>, StoreError> {
            Ok(ConversationItemLookup::NoConversation)
        }
    }

    struct NoTools;

    #[async_trait]
    impl ToolResolver for NoTools {
        fn capabilities(&self) -> respgw_protocol::Capabilities {
            respgw_protocol::Capabilities::default()
        }
        async fn resolve(&self, _: &ValidatedRequest, _: &[Item], _: &str) -> Result<ResolvedTools, ApiError> {
            Ok(ResolvedTools::default())
        }
    }

    /// An upstream that answers one chat request with a short streamed answer; its base URL.
    async fn one_answer_upstream() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            // Read the head and the body it announces before answering.
            loop {
                let n = socket.read(&mut buf).await.unwrap();
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request);
                if let Some(head_end) = text.find("\r\n\r\n") {
                    let length = text[..head_end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned())
                        })
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(0);
                    if request.len() >= head_end + 4 + length {
                        break;
                    }
                }
                assert!(n > 0, "the request ended early");
            }
            let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi.\"},\"finish_reason\":\"stop\"}]}\n\n\
                        data: [DONE]\n\n";
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            socket.write_all(head.as_bytes()).await.unwrap();
            socket.write_all(body.as_bytes()).await.unwrap();
            socket.shutdown().await.unwrap();
        });
        format!("http://{address}/v1")
    }

    #[tokio::test]
    async fn a_panicking_run_still_ends_with_exactly_one_terminal_event() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let upstream = Upstream::new(UpstreamConfig {
            base_url: one_answer_upstream().await,
            api_key: None,
            connect_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(5),
            max_idle_connections: 32,
        })
        .unwrap();
        let engine = Arc::new(Engine::new(
            upstream,
            Arc::new(PanickingStore),
            Arc::new(NoTools),
            respgw_telemetry::Metrics::new(),
        ));
        let request = CreateResponseRequest::from_slice(br#"{"model":"m","input":"hi","store":true}"#)
            .unwrap()
            .validate(&Default::default())
            .unwrap();
        let prepared = engine.prepare("default", request, Vec::new()).await.unwrap();

        let mut events = prepared.spawn(8);
        let mut seen = Vec::new();
        while let Some(event) = tokio::time::timeout(Duration::from_secs(10), events.recv()).await.unwrap() {
            seen.push(event);
        }

        let kinds: Vec<&str> = seen.iter().map(ResponseEvent::kind).collect();
        assert_eq!(kinds.first(), Some(&"response.created"));
        assert_eq!(kinds.iter().rev().take(2).rev().copied().collect::<Vec<_>>(), ["error", "response.failed"]);
        assert_eq!(seen.iter().filter(|e| e.terminal_response().is_some()).count(), 1, "{kinds:?}");
        let Some(ResponseEvent::Failed { response }) = seen.last() else { panic!("{kinds:?}") };
        assert_eq!(response.error.as_ref().map(|e| e.code.as_str()), Some("internal_error"));
        assert!(kinds.contains(&"response.output_text.delta"), "the run got as far as the answer: {kinds:?}");
    }
}
