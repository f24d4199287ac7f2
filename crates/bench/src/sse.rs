//! A minimal, allocation-light SSE frame splitter for counting events on the client side.
//!
//! The same splitter reads both the direct upstream stream and respgw's stream, so the client's
//! cost is the same on both sides of every ratio. It only finds frame boundaries (`\n\n`) and
//! hands each frame to a classifier; it does not parse JSON.

/// Splits a byte stream into SSE frames (the text between blank lines).
#[derive(Default)]
pub struct FrameSplitter {
    buf: Vec<u8>,
    /// Bytes of `buf` already searched for a boundary.
    scanned: usize,
}

impl FrameSplitter {
    /// Feed bytes; `on_frame` gets each complete frame (without its closing blank line).
    pub fn feed(&mut self, bytes: &[u8], mut on_frame: impl FnMut(&[u8])) {
        self.buf.extend_from_slice(bytes);
        let mut start = 0;
        // A boundary can straddle two feeds: resume one byte early.
        let mut i = self.scanned.saturating_sub(1).max(start);
        while i + 1 < self.buf.len() {
            if self.buf[i] == b'\n' && self.buf[i + 1] == b'\n' {
                on_frame(&self.buf[start..i]);
                start = i + 2;
                i = start;
            } else {
                i += 1;
            }
        }
        self.buf.drain(..start);
        self.scanned = self.buf.len();
    }
}

/// What a frame is, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// A content delta: an upstream chunk with `"delta":{"content":"…"}` or a respgw
    /// `response.output_text.delta` event.
    Delta,
    /// The end: upstream `data: [DONE]` or respgw `response.completed`.
    End,
    /// Anything else.
    Other,
}

/// Classify a direct upstream (`chat.completion.chunk`) frame.
pub fn classify_upstream(frame: &[u8]) -> Frame {
    if frame == b"data: [DONE]" {
        Frame::End
    } else if contains(frame, br#""delta":{"content":""#) {
        Frame::Delta
    } else {
        Frame::Other
    }
}

/// Classify a respgw Responses event frame.
pub fn classify_responses(frame: &[u8]) -> Frame {
    if frame.starts_with(b"event: response.output_text.delta\n") {
        Frame::Delta
    } else if frame.starts_with(b"event: response.completed\n") {
        Frame::End
    } else {
        Frame::Other
    }
}

/// Substring test, searching from the end (a chunk's delta sits near its end) and comparing a
/// window only when its first byte matches, so it costs about one byte compare per position.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    let Some(&first) = needle.first() else {
        return true;
    };
    haystack.windows(needle.len()).rev().any(|w| w[0] == first && w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_frames_across_feeds() {
        let wire = b"data: a\n\ndata: b\n\nevent: x\ndata: c\n\n";
        for cut in 0..wire.len() {
            let mut s = FrameSplitter::default();
            let mut frames: Vec<Vec<u8>> = Vec::new();
            s.feed(&wire[..cut], |f| frames.push(f.to_vec()));
            s.feed(&wire[cut..], |f| frames.push(f.to_vec()));
            assert_eq!(frames, [&b"data: a"[..], b"data: b", b"event: x\ndata: c"], "cut at {cut}");
        }
    }

    #[test]
    fn classifies() {
        assert_eq!(classify_upstream(br#"data: {"choices":[{"delta":{"content":" hi"}}]}"#), Frame::Delta);
        assert_eq!(
            classify_upstream(br#"data: {"choices":[{"delta":{"role":"assistant","content":""}}]}"#),
            Frame::Other
        );
        assert_eq!(classify_upstream(b"data: [DONE]"), Frame::End);
        assert_eq!(classify_responses(b"event: response.output_text.delta\ndata: {}"), Frame::Delta);
        assert_eq!(classify_responses(b"event: response.completed\ndata: {}"), Frame::End);
    }
}
