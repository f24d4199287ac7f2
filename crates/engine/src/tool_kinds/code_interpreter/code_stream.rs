//! Decodes the `code` string of a `code_interpreter` call while its JSON arguments stream in.
//!
//! The model writes `{"code": "import math\nmath.sqrt(2)"}` a few characters at a time; clients
//! want `code_interpreter_call_code.delta` events with the *decoded* code as it arrives. A full
//! JSON parser cannot help before the object is complete, so this scans for the `"code"` key and
//! decodes the string value incrementally, waiting whenever an escape sequence is cut off.

/// Incremental decoder state for one call's arguments.
#[derive(Debug, Default)]
pub struct CodeStream {
    buf: String,
    /// Byte offset in `buf` where undecoded string content starts, once the value was found.
    value_at: Option<usize>,
    done: bool,
    decoded: String,
}

const KEY: &str = "\"code\"";

impl CodeStream {
    /// Add an argument fragment; returns the code decoded by it (possibly empty).
    pub fn push(&mut self, fragment: &str) -> String {
        self.buf.push_str(fragment);
        if self.done {
            return String::new();
        }
        if self.value_at.is_none() {
            self.value_at = find_value_start(&self.buf);
        }
        let Some(start) = self.value_at else { return String::new() };
        let (text, consumed, closed) = decode_available(&self.buf[start..]);
        self.value_at = Some(start + consumed);
        self.done = closed;
        self.decoded.push_str(&text);
        text
    }

    /// The arguments are complete: the final code, and whatever of it was not yet emitted.
    /// If the arguments are not the expected object, the raw arguments are the code.
    pub fn finish(self, arguments: &str) -> (String, String) {
        let code = serde_json::from_str::<serde_json::Value>(arguments)
            .ok()
            .and_then(|v| v.get("code").and_then(|c| c.as_str()).map(str::to_owned))
            .unwrap_or_else(|| if self.decoded.is_empty() { arguments.to_owned() } else { self.decoded.clone() });
        let rest = code.strip_prefix(self.decoded.as_str()).map(str::to_owned).unwrap_or_default();
        (code, rest)
    }
}

/// Byte offset just after the opening quote of the `"code"` value, if it has arrived.
fn find_value_start(buf: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = buf[from..].find(KEY) {
        let after_key = from + at + KEY.len();
        let rest = &buf[after_key..];
        let trimmed = rest.trim_start();
        if let Some(after_colon) = trimmed.strip_prefix(':') {
            let value = after_colon.trim_start();
            if let Some(stripped) = value.strip_prefix('"') {
                return Some(buf.len() - stripped.len());
            }
            if value.is_empty() {
                return None; // The value has not arrived yet.
            }
        } else if trimmed.is_empty() {
            return None; // The colon has not arrived yet.
        }
        from = after_key;
    }
    None
}

/// Decode as much of a JSON string body as is complete: (text, bytes consumed, string closed).
fn decode_available(s: &str) -> (String, usize, bool) {
    let bytes = s.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => return (out, i + 1, true),
            b'\\' => {
                let Some(&esc) = bytes.get(i + 1) else { break };
                let simple = match esc {
                    b'"' => Some('"'),
                    b'\\' => Some('\\'),
                    b'/' => Some('/'),
                    b'b' => Some('\u{8}'),
                    b'f' => Some('\u{c}'),
                    b'n' => Some('\n'),
                    b'r' => Some('\r'),
                    b't' => Some('\t'),
                    _ => None,
                };
                if let Some(c) = simple {
                    out.push(c);
                    i += 2;
                    continue;
                }
                if esc != b'u' {
                    // Invalid escape: keep it literally rather than lose text.
                    out.push('\\');
                    i += 1;
                    continue;
                }
                let Some(unit) = hex4(s, i + 2) else { break };
                if (0xD800..0xDC00).contains(&unit) {
                    // A high surrogate needs its low half: \uD83D\uDE00.
                    if s.len() < i + 12 {
                        break;
                    }
                    match (s.get(i + 6..i + 8), hex4(s, i + 8)) {
                        (Some("\\u"), Some(low)) if (0xDC00..0xE000).contains(&low) => {
                            let c = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                            out.push(char::from_u32(c).unwrap_or('\u{fffd}'));
                            i += 12;
                        }
                        _ => {
                            out.push('\u{fffd}');
                            i += 6;
                        }
                    }
                } else {
                    out.push(char::from_u32(unit).unwrap_or('\u{fffd}'));
                    i += 6;
                }
            }
            _ => {
                // Copy a run of plain characters (whole UTF-8 sequences: the run ends at ASCII).
                let run_end = bytes[i..].iter().position(|&b| b == b'"' || b == b'\\').map_or(bytes.len(), |p| i + p);
                out.push_str(&s[i..run_end]);
                i = run_end;
            }
        }
    }
    (out, i, false)
}

fn hex4(s: &str, at: usize) -> Option<u32> {
    s.get(at..at + 4).and_then(|h| u32::from_str_radix(h, 16).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(fragments: &[&str]) -> (String, String) {
        let mut cs = CodeStream::default();
        let mut deltas = String::new();
        for f in fragments {
            deltas.push_str(&cs.push(f));
        }
        let (code, rest) = cs.finish(&fragments.concat());
        deltas.push_str(&rest);
        (deltas, code)
    }

    #[test]
    fn decodes_code_as_it_streams() {
        let (deltas, code) = stream(&["{\"co", "de\": \"import", " math\\", "nmath.sqrt(2", ")\"}"]);
        assert_eq!(code, "import math\nmath.sqrt(2)");
        assert_eq!(deltas, code);
    }

    #[test]
    fn escapes_cut_anywhere_are_waited_for() {
        let json = serde_json::json!({"code": "print(\"héllo 😀\\t\")\n"}).to_string();
        let json = json.replace('😀', "\\ud83d\\ude00").replace('é', "\\u00e9");
        for cut in 1..json.len() {
            if !json.is_char_boundary(cut) {
                continue;
            }
            let (deltas, code) = stream(&[&json[..cut], &json[cut..]]);
            assert_eq!(code, "print(\"héllo 😀\\t\")\n");
            assert_eq!(deltas, code, "cut at {cut}");
        }
    }

    #[test]
    fn other_keys_before_code_are_skipped() {
        let (deltas, code) = stream(&["{\"lang\":\"py\",", "\"code\":\"1+1\"}"]);
        assert_eq!((deltas.as_str(), code.as_str()), ("1+1", "1+1"));
    }

    #[test]
    fn non_json_arguments_are_the_code() {
        let (_, code) = stream(&["print(1)"]);
        assert_eq!(code, "print(1)");
    }
}
