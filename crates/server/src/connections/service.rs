//! One connection's requests on their way to the router: each request body gets the stall
//! timeout and its connection's entry in the book ([`ConnectionEntry`]), and the book learns when
//! the connection is busy — from the parsed head until the response body has been sent — and when
//! it is idle again. After a switch to WebSocket (101) the WebSocket reports on it instead.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use futures::future::BoxFuture;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::Instant;
use tower::ServiceExt;
use tower_http::timeout::TimeoutBody;

use super::book::Book;
use super::upgraded::ConnectionEntry;

/// The hyper service of one connection.
#[derive(Clone)]
pub(super) struct ConnectionService {
    pub app: Router,
    pub book: Arc<Book>,
    pub id: u64,
    /// Longest pause while a request body is received.
    pub body_timeout: Duration,
}

impl hyper::service::Service<Request<Incoming>> for ConnectionService {
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let in_flight = InFlight::start(Arc::clone(&self.book), self.id);
        let body_timeout = self.body_timeout;
        let mut request = request.map(|body| Body::new(TimeoutBody::new(body_timeout, body)));
        request.extensions_mut().insert(ConnectionEntry::new(Arc::clone(&self.book), self.id));
        let app = self.app.clone();
        Box::pin(async move {
            let response = app.oneshot(request).await?;
            if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                in_flight.keep();
                return Ok(response);
            }
            Ok(response.map(|body| Body::new(CountedBody { body, _in_flight: in_flight })))
        })
    }
}

/// One request in flight, until dropped (with its response body, or with its handler when the
/// client went away first).
struct InFlight {
    book: Arc<Book>,
    id: u64,
    /// The connection was upgraded: it stays in flight.
    kept: bool,
}

impl InFlight {
    fn start(book: Arc<Book>, id: u64) -> Self {
        book.request_started(id);
        InFlight { book, id, kept: false }
    }

    fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.kept {
            self.book.request_finished(self.id, Instant::now());
        }
    }
}

/// A response body that keeps its request in flight until it is dropped.
struct CountedBody {
    body: Body,
    _in_flight: InFlight,
}

impl http_body::Body for CountedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
