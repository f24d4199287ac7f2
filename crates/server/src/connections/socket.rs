//! A client socket as the HTTP server reads and writes it. It holds the connection's place under
//! the cap until it is closed — after an upgrade too, when the WebSocket owns it — and tells the
//! book when the first byte of a new request arrives on a kept-alive connection.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::book::{Book, Slot};

pub(super) struct ClientSocket {
    stream: TcpStream,
    /// The place under the cap; given back when the socket is dropped.
    _slot: Slot,
    book: Arc<Book>,
    id: u64,
    /// Raised by the book while the connection waits for its next request.
    awaiting_request: Arc<AtomicBool>,
}

impl ClientSocket {
    pub(super) fn new(
        stream: TcpStream,
        slot: Slot,
        book: Arc<Book>,
        id: u64,
        awaiting_request: Arc<AtomicBool>,
    ) -> Self {
        ClientSocket { stream, _slot: slot, book, id, awaiting_request }
    }
}

impl AsyncRead for ClientSocket {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if buf.filled().len() > before && this.awaiting_request.swap(false, Ordering::Relaxed) {
            this.book.request_head_started(this.id, Instant::now());
        }
        polled
    }
}

impl AsyncWrite for ClientSocket {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
