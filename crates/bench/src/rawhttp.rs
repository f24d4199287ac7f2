//! A minimal HTTP/1.1 connection over tokio's `TcpStream`, for the two places where reqwest and
//! hyper would cost more CPU than the thing being measured: the load generator of the
//! worker-scaling test and the out-of-process mock upstream ([`crate::fastmock`]).
//!
//! It reads only what it must: the status line, `content-length`, `transfer-encoding` and, when
//! asked, `x-respgw-worker`; bodies are handed over as raw (de-chunked) pieces. Requests are
//! written as pre-serialized byte blobs. Keep-alive only; no pipelining, no `100-continue`.

use std::net::SocketAddr;

use anyhow::{Context, bail, ensure};
use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Read buffer growth step.
const READ_CHUNK: usize = 16 * 1024;
/// Largest header block accepted.
const MAX_HEAD: usize = 64 * 1024;

/// One HTTP/1.1 connection, either side.
pub struct Conn {
    stream: TcpStream,
    buf: BytesMut,
}

/// What the client reads of a response head.
pub struct ResponseHead {
    pub status: u16,
    /// `x-respgw-worker`, if asked for and present.
    pub worker: Option<u32>,
}

/// A request as the mock upstream sees it.
pub struct Request {
    pub post: bool,
    pub path: String,
    pub body: Bytes,
}

/// How a message body is delimited.
enum Length {
    Fixed(usize),
    Chunked,
}

impl Conn {
    pub fn new(stream: TcpStream) -> Self {
        // Best effort: without TCP_NODELAY only the latency suffers.
        let _ = stream.set_nodelay(true);
        Conn { stream, buf: BytesMut::with_capacity(READ_CHUNK) }
    }

    pub async fn connect(addr: SocketAddr) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(addr).await.with_context(|| format!("cannot connect to {addr}"))?;
        Ok(Conn::new(stream))
    }

    pub async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await
    }

    /// Read more bytes into the buffer; `Ok(false)` at end of file.
    async fn fill(&mut self) -> std::io::Result<bool> {
        self.buf.reserve(READ_CHUNK);
        Ok(self.stream.read_buf(&mut self.buf).await? > 0)
    }

    /// Wait for a complete header block and return its length (including the blank line), or
    /// `None` at a clean end of file before any byte of it.
    async fn head(&mut self) -> anyhow::Result<Option<usize>> {
        let mut searched = 0;
        loop {
            if let Some(i) = find(&self.buf[searched..], b"\r\n\r\n") {
                return Ok(Some(searched + i + 4));
            }
            searched = self.buf.len().saturating_sub(3);
            ensure!(self.buf.len() <= MAX_HEAD, "header block larger than {MAX_HEAD} bytes");
            if !self.fill().await? {
                ensure!(self.buf.is_empty(), "connection closed inside a header block");
                return Ok(None);
            }
        }
    }

    /// Hand the next `n` body bytes to `on_body`, piece by piece as they arrive.
    async fn body_bytes(&mut self, mut n: usize, on_body: &mut impl FnMut(&[u8])) -> anyhow::Result<()> {
        while n > 0 {
            if self.buf.is_empty() && !self.fill().await? {
                bail!("connection closed inside a body");
            }
            let take = n.min(self.buf.len());
            on_body(&self.buf[..take]);
            self.buf.advance(take);
            n -= take;
        }
        Ok(())
    }

    /// The next CRLF-terminated line (without the CRLF), consumed.
    async fn line(&mut self) -> anyhow::Result<Bytes> {
        loop {
            if let Some(i) = find(&self.buf, b"\r\n") {
                let line = self.buf.split_to(i).freeze();
                self.buf.advance(2);
                return Ok(line);
            }
            ensure!(self.buf.len() <= MAX_HEAD, "line longer than {MAX_HEAD} bytes");
            if !self.fill().await? {
                bail!("connection closed inside a chunked body");
            }
        }
    }

    /// Read a body of the given length, handing its (de-chunked) bytes to `on_body`.
    async fn body(&mut self, length: Length, mut on_body: impl FnMut(&[u8])) -> anyhow::Result<()> {
        match length {
            Length::Fixed(n) => self.body_bytes(n, &mut on_body).await,
            Length::Chunked => loop {
                let line = self.line().await?;
                let size = line.split(|&b| b == b';').next().unwrap_or_default();
                let size = std::str::from_utf8(size)
                    .ok()
                    .and_then(|s| usize::from_str_radix(s.trim(), 16).ok())
                    .context("bad chunk size line")?;
                if size == 0 {
                    // Trailers, up to the blank line.
                    while !self.line().await?.is_empty() {}
                    return Ok(());
                }
                self.body_bytes(size, &mut on_body).await?;
                ensure!(self.line().await?.is_empty(), "chunk not followed by CRLF");
            },
        }
    }

    /// Client side: read one response; its body goes to `on_body`. `want_worker` also reads
    /// `x-respgw-worker`.
    pub async fn read_response(
        &mut self,
        want_worker: bool,
        on_body: impl FnMut(&[u8]),
    ) -> anyhow::Result<ResponseHead> {
        let len = self.head().await?.context("connection closed before a response")?;
        let head = self.buf.split_to(len);
        let mut lines = head[..len - 4].split(|&b| b == b'\n');
        let status_line = lines.next().unwrap_or_default();
        let status = status_line
            .get(9..12)
            .and_then(|s| std::str::from_utf8(s).ok())
            .and_then(|s| s.parse::<u16>().ok())
            .with_context(|| format!("bad status line {:?}", String::from_utf8_lossy(status_line)))?;
        let (mut length, mut worker) = (None, None);
        for line in lines {
            let Some((name, value)) = split_header(line) else { continue };
            if name.eq_ignore_ascii_case(b"content-length") {
                length = Some(Length::Fixed(parse_usize(value).context("bad content-length")?));
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") && ends_with_chunked(value) {
                length = Some(Length::Chunked);
            } else if want_worker && name.eq_ignore_ascii_case(b"x-respgw-worker") {
                worker = parse_usize(value).and_then(|w| u32::try_from(w).ok());
            }
        }
        let length = match length {
            Some(l) => l,
            None if status == 204 || status == 304 || status < 200 => Length::Fixed(0),
            None => bail!("a {status} response without content-length or chunked encoding"),
        };
        self.body(length, on_body).await?;
        Ok(ResponseHead { status, worker })
    }

    /// Server side: read one request (content-length bodies only); `None` at a clean end of file.
    pub async fn read_request(&mut self) -> anyhow::Result<Option<Request>> {
        let Some(len) = self.head().await? else { return Ok(None) };
        let head = self.buf.split_to(len);
        let mut lines = head[..len - 4].split(|&b| b == b'\n');
        let request_line = lines.next().unwrap_or_default();
        let mut parts = request_line.split(|&b| b == b' ');
        let method = parts.next().unwrap_or_default();
        let path = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
        let mut length = 0;
        for line in lines {
            let Some((name, value)) = split_header(line) else { continue };
            if name.eq_ignore_ascii_case(b"content-length") {
                length = parse_usize(value).context("bad content-length")?;
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                bail!("chunked requests are not supported by the mock");
            }
        }
        let mut body = BytesMut::with_capacity(length);
        self.body(Length::Fixed(length), |piece| body.extend_from_slice(piece)).await?;
        Ok(Some(Request { post: method == b"POST", path, body: body.freeze() }))
    }
}

/// `name: value` of a header line (a trailing `\r` trimmed).
fn split_header(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let colon = line.iter().position(|&b| b == b':')?;
    Some((&line[..colon], line[colon + 1..].trim_ascii()))
}

fn ends_with_chunked(value: &[u8]) -> bool {
    value.len() >= 7 && value[value.len() - 7..].eq_ignore_ascii_case(b"chunked")
}

fn parse_usize(value: &[u8]) -> Option<usize> {
    std::str::from_utf8(value.trim_ascii()).ok()?.parse().ok()
}

/// First position of `needle` in `haystack`.
pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let first = *needle.first()?;
    let mut from = 0;
    while from + needle.len() <= haystack.len() {
        let i = from + haystack[from..=haystack.len() - needle.len()].iter().position(|&b| b == first)?;
        if &haystack[i..i + needle.len()] == needle {
            return Some(i);
        }
        from = i + 1;
    }
    None
}

/// A `POST` request with a JSON body, serialized once.
pub fn post_json(host: SocketAddr, path: &str, body: &serde_json::Value) -> Bytes {
    let body = body.to_string();
    Bytes::from(format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\naccept: */*\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds() {
        assert_eq!(find(b"abc\r\n\r\nx", b"\r\n\r\n"), Some(3));
        assert_eq!(find(b"aab", b"ab"), Some(1));
        assert_eq!(find(b"ab", b"abc"), None);
        assert_eq!(find(b"", b"a"), None);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn reads_chunked_and_fixed_responses() {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let mut conn = Conn::new(stream);
            let req = conn.read_request().await.unwrap().unwrap();
            assert!(req.post);
            assert_eq!(req.path, "/x");
            assert_eq!(&req.body[..], b"{\"a\":1}");
            conn.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Respgw-Worker: 1\r\n\r\n")
                .await
                .unwrap();
            conn.write_all(b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n").await.unwrap();
            conn.read_request().await.unwrap().unwrap();
            conn.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\nno").await.unwrap();
            assert!(conn.read_request().await.unwrap().is_none());
        });
        let mut conn = Conn::connect(addr).await.unwrap();
        let request = post_json(addr, "/x", &serde_json::json!({"a": 1}));
        conn.write_all(&request).await.unwrap();
        let mut body = Vec::new();
        let head = conn.read_response(true, |p| body.extend_from_slice(p)).await.unwrap();
        assert_eq!((head.status, head.worker, &body[..]), (200, Some(1), &b"abcde"[..]));
        conn.write_all(&request).await.unwrap();
        body.clear();
        let head = conn.read_response(false, |p| body.extend_from_slice(p)).await.unwrap();
        assert_eq!((head.status, head.worker, &body[..]), (404, None, &b"no"[..]));
        drop(conn);
        server.await.unwrap();
    }
}
