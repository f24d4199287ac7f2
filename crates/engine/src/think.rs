//! Splits `<think>…</think>` spans out of streamed message text.
//!
//! Some model servers return reasoning inline in `content` instead of a `reasoning_content`
//! field. Tags can be cut anywhere by chunking (`"<thi"` + `"nk>"`), so the splitter holds back a
//! suffix that could still become a tag and releases it once the next chunk decides.

/// A piece of model text, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Reasoning(String),
    Text(String),
}

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// Streaming splitter state for one model turn.
#[derive(Debug, Default)]
pub struct ThinkSplitter {
    inside: bool,
    held: String,
}

impl ThinkSplitter {
    /// Feed a chunk of content; returns the segments that are certain so far.
    pub fn push(&mut self, chunk: &str) -> Vec<Segment> {
        let mut buf = std::mem::take(&mut self.held);
        buf.push_str(chunk);
        let mut out = Vec::new();
        let mut rest = buf.as_str();
        loop {
            let tag = if self.inside { CLOSE } else { OPEN };
            if let Some(pos) = rest.find(tag) {
                self.emit(&mut out, &rest[..pos]);
                self.inside = !self.inside;
                rest = &rest[pos + tag.len()..];
                continue;
            }
            let keep = partial_tag_suffix(rest, tag);
            self.emit(&mut out, &rest[..rest.len() - keep]);
            self.held = rest[rest.len() - keep..].to_owned();
            return out;
        }
    }

    /// End of the turn: whatever was held back is plain text of the current kind.
    pub fn finish(&mut self) -> Vec<Segment> {
        let held = std::mem::take(&mut self.held);
        let mut out = Vec::new();
        self.emit(&mut out, &held);
        out
    }

    fn emit(&self, out: &mut Vec<Segment>, text: &str) {
        if text.is_empty() {
            return;
        }
        out.push(if self.inside { Segment::Reasoning(text.to_owned()) } else { Segment::Text(text.to_owned()) });
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `tag`.
fn partial_tag_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len()).rev().find(|&n| text.ends_with(&tag[..n])).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(chunks: &[&str]) -> Vec<Segment> {
        let mut s = ThinkSplitter::default();
        let mut out: Vec<Segment> = chunks.iter().flat_map(|c| s.push(c)).collect();
        out.extend(s.finish());
        // Merge neighbours of the same kind, as the consumer sees them.
        out.into_iter().fold(Vec::new(), |mut acc, seg| {
            match (acc.last_mut(), seg) {
                (Some(Segment::Text(a)), Segment::Text(b)) | (Some(Segment::Reasoning(a)), Segment::Reasoning(b)) => {
                    a.push_str(&b)
                }
                (_, seg) => acc.push(seg),
            }
            acc
        })
    }

    #[test]
    fn plain_text_passes_through() {
        assert_eq!(run(&["Hello", " world"]), vec![Segment::Text("Hello world".into())]);
    }

    #[test]
    fn tags_split_across_chunks() {
        assert_eq!(
            run(&["<thi", "nk>plan", " it</th", "ink>Answer"]),
            vec![Segment::Reasoning("plan it".into()), Segment::Text("Answer".into())]
        );
    }

    #[test]
    fn a_lone_angle_bracket_is_released_at_the_end() {
        assert_eq!(run(&["a <", "b"]), vec![Segment::Text("a <b".into())]);
        assert_eq!(run(&["x <"]), vec![Segment::Text("x <".into())]);
    }

    #[test]
    fn text_before_and_after_reasoning() {
        assert_eq!(
            run(&["pre<think>r</think>post"]),
            vec![Segment::Text("pre".into()), Segment::Reasoning("r".into()), Segment::Text("post".into())]
        );
    }
}
