//! An incremental decoder of a server-sent-events body into the `data` of each event.
//!
//! Bytes are pushed in whatever chunks the network delivers; [`SseDecoder::next_data`] hands out
//! the data of each complete event as a slice of the decoder's buffer, with no allocation when
//! the event has one `data:` line (the upstream's chat chunks always do). Written by hand because
//! this runs once per streamed token and the SSE crates allocate a `String` per event (and per
//! field); it follows the WHATWG event-stream grammar: lines end with LF, CRLF or CR; a leading
//! BOM is dropped; `data:` with or without one space after the colon; several `data` lines are
//! joined with `\n`; comments and other fields (`event`, `id`, `retry`, …) are ignored; a blank
//! line ends the event, and an event without data is not dispatched. An event the body ends
//! before (no blank line after it) is dropped.

use std::ops::Range;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The data of the event being read.
#[derive(Debug, Default)]
enum Data {
    /// No `data` line yet.
    #[default]
    None,
    /// One `data` line: its value's place in `buf`.
    Line(Range<usize>),
    /// Several lines, joined in `joined`.
    Joined,
}

/// Decodes an event stream pushed to it chunk by chunk.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes received and not yet dropped: read lines (kept while a `Data::Line` points into
    /// them) followed by an incomplete line.
    buf: Vec<u8>,
    /// Where the next line starts in `buf`.
    pos: usize,
    data: Data,
    /// The data of an event with several `data` lines.
    joined: Vec<u8>,
    /// The last line ended with CR: an LF that follows belongs to that line end.
    after_cr: bool,
    /// The stream's start was read (and its BOM, if any, dropped).
    started: bool,
}

impl SseDecoder {
    /// Add the next bytes of the body.
    pub fn push(&mut self, bytes: &[u8]) {
        let keep_from = match &self.data {
            Data::Line(range) => range.start.min(self.pos),
            _ => self.pos,
        };
        if keep_from > 0 {
            self.buf.drain(..keep_from);
            self.pos -= keep_from;
            if let Data::Line(range) = &mut self.data {
                *range = range.start - keep_from..range.end - keep_from;
            }
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The data of the next complete event, if the bytes pushed so far end one.
    pub fn next_data(&mut self) -> Option<&[u8]> {
        let data = self.next_event()?;
        Some(match data {
            Data::Line(range) => &self.buf[range],
            Data::Joined => &self.joined,
            Data::None => &[],
        })
    }

    fn next_event(&mut self) -> Option<Data> {
        if !self.started {
            let head = &self.buf[..self.buf.len().min(BOM.len())];
            if head.len() < BOM.len() && BOM.starts_with(head) {
                return None;
            }
            if head == BOM {
                self.pos = BOM.len();
            }
            self.started = true;
        }
        loop {
            let rest = &self.buf[self.pos..];
            if self.after_cr {
                match rest.first() {
                    None => return None,
                    Some(b'\n') => self.pos += 1,
                    Some(_) => {}
                }
                self.after_cr = false;
                continue;
            }
            let end = memchr::memchr2(b'\n', b'\r', rest)?;
            let line = self.pos..self.pos + end;
            self.after_cr = rest[end] == b'\r';
            self.pos += end + 1;
            if line.is_empty() {
                match std::mem::take(&mut self.data) {
                    Data::None => continue,
                    data => return Some(data),
                }
            }
            self.field(line);
        }
    }

    /// One non-blank line of the current event.
    fn field(&mut self, line: Range<usize>) {
        let bytes = &self.buf[line.clone()];
        let (name, value) = match memchr::memchr(b':', bytes) {
            // A comment.
            Some(0) => return,
            Some(colon) => {
                let skip = if bytes.get(colon + 1) == Some(&b' ') { 2 } else { 1 };
                (&bytes[..colon], line.start + colon + skip..line.end)
            }
            None => (bytes, line.end..line.end),
        };
        if name != b"data" {
            return;
        }
        match &self.data {
            Data::None => self.data = Data::Line(value),
            Data::Line(first) => {
                self.joined.clear();
                self.joined.extend_from_slice(&self.buf[first.clone()]);
                self.joined.push(b'\n');
                self.joined.extend_from_slice(&self.buf[value]);
                self.data = Data::Joined;
            }
            Data::Joined => {
                self.joined.push(b'\n');
                self.joined.extend_from_slice(&self.buf[value]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    /// Every event's data, the body pushed in `chunks`.
    fn decode(chunks: &[&[u8]]) -> Vec<String> {
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        for chunk in chunks {
            decoder.push(chunk);
            while let Some(data) = decoder.next_data() {
                out.push(String::from_utf8_lossy(data).into_owned());
            }
        }
        out
    }

    /// The same through eventsource-stream.
    fn reference(chunks: &[&[u8]]) -> Vec<String> {
        use eventsource_stream::Eventsource;
        let stream = futures::stream::iter(chunks.iter().map(|c| Ok::<_, std::convert::Infallible>(c.to_vec())));
        futures::executor::block_on(stream.eventsource().map(|event| event.map(|e| e.data)).collect::<Vec<_>>())
            .into_iter()
            .map(|event| event.unwrap_or_else(|e| panic!("reference failed: {e}")))
            .collect()
    }

    /// Every split of `body` into two and three chunks decodes as `expected`, and as
    /// eventsource-stream decodes it.
    fn check(body: &[u8], expected: &[&str]) {
        assert_eq!(reference(&[body]), expected, "reference, whole body");
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(reference(&bytes), expected, "reference, byte by byte");
        check_splits(body, expected);
    }

    /// Every split of `body` into two and three chunks, and byte by byte, decodes as `expected`.
    fn check_splits(body: &[u8], expected: &[&str]) {
        assert_eq!(decode(&[body]), expected, "whole body");
        for i in 0..=body.len() {
            let two = [&body[..i], &body[i..]];
            assert_eq!(decode(&two), expected, "split at {i}");
            for j in i..=body.len() {
                let three = [&body[..i], &body[i..j], &body[j..]];
                assert_eq!(decode(&three), expected, "split at {i} and {j}");
            }
        }
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(decode(&bytes), expected, "byte by byte");
    }

    #[test]
    fn line_ends_lf_crlf_and_cr() {
        check(b"data: {\"a\":1}\n\ndata: [DONE]\n\n", &["{\"a\":1}", "[DONE]"]);
        check(b"data: {\"a\":1}\r\n\r\ndata: b\r\n\r\n", &["{\"a\":1}", "b"]);
        check(b"data: a\r\rdata: b\r\r: end\n", &["a", "b"]);
        check(b"data: a\r\n\rdata: b\n\r\n", &["a", "b"]);
    }

    #[test]
    fn data_with_or_without_a_space_and_joined_lines() {
        check(b"data:a\n\ndata:  b\n\n", &["a", " b"]);
        check(b"data: one\ndata:two\r\ndata\ndata: four\n\n", &["one\ntwo\n\nfour"]);
        check(b"data\n\ndata:\n\n", &["", ""]);
    }

    #[test]
    fn comments_other_fields_and_empty_events_are_skipped() {
        check(
            b": keep-alive\n\nevent: message\nid: 7\nretry: 10\ndata: x\n: between\nfoo\n\n\n\nid: 8\n\ndata: y\n\n",
            &["x", "y"],
        );
        // Not compared: eventsource-stream 0.2 panics on a leading BOM (it slices one byte off
        // the three-byte character).
        check_splits(b"\xEF\xBB\xBFdata: bom\n\n", &["bom"]);
        // A broken BOM belongs to the first line, whose field is then not `data`.
        check_splits(b"\xEF\xBBdata: x\n\ndata: y\n\n", &["y"]);
        check("data: é ☃ 🦀\n\n".as_bytes(), &["é ☃ 🦀"]);
    }

    #[test]
    fn an_unfinished_event_at_the_end_is_dropped() {
        check(b"data: a\n\ndata: b\n", &["a"]);
        check(b"data: a\n\ndata: b", &["a"]);
    }

    #[test]
    fn a_pending_data_line_survives_more_pushes() {
        let mut decoder = SseDecoder::default();
        decoder.push(b"data: {\"long\":");
        assert!(decoder.next_data().is_none());
        decoder.push(b"true}\n: comment\n");
        assert!(decoder.next_data().is_none());
        decoder.push(b"id: 1\n");
        assert!(decoder.next_data().is_none());
        decoder.push(b"\ndata: next\n\n");
        assert_eq!(decoder.next_data(), Some(&b"{\"long\":true}"[..]));
        assert_eq!(decoder.next_data(), Some(&b"next"[..]));
        assert_eq!(decoder.next_data(), None);
    }
}
