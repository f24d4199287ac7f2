//! The one redactor every log line passes through before it is written: whatever the target (our
//! crates, rmcp, reqwest, hyper, …), an event's message, its fields and the fields of the spans it
//! is in are formatted as usual and then cleaned of request credentials by [`redact`] as they are
//! written ([`RedactedWriter`] wraps the log layer's writer):
//!
//! - the userinfo of a URL (`https://user:password@host/` → `https://[redacted]@host/`);
//! - the value of a parameter whose name looks like a secret (`?api_key=…`, `&sig=…`,
//!   `token="…"`, `"access_token": "…"`; see [`is_secret_name`]), in a URL or a `name=value` field;
//! - the value of an `Authorization`-like header (`authorization`, `proxy-authorization`,
//!   `x-api-key`, `api-key`, `cookie`, `set-cookie`) after `:` or `=`, and the credentials after
//!   a `Bearer` or `Basic` scheme anywhere.
//!
//! A line with nothing to redact costs one scan of its bytes; only a line with a secret allocates
//! its cleaned form. What is redacted is matched by shape, not by value, so it
//! holds for secrets the gateway never saw in a setting (a Remote MCP `server_url`'s query);
//! `respgw_mcp::redact` also masks the known values in the texts our own code reports.

use std::borrow::Cow;
use std::io;
use std::ops::Range;

use tracing::Metadata;
use tracing_subscriber::fmt::MakeWriter;

/// What replaces a secret (the same mark as `respgw_mcp::redact`'s).
pub const MASK: &str = "[redacted]";

/// Authentication schemes whose credentials follow them after one space.
const SCHEMES: &[&str] = &["bearer", "basic"];

/// The shortest run after `Bearer `/`Basic ` taken for credentials when no header names it.
const MIN_CREDENTIALS: usize = 8;

/// Header names whose whole value is a credential (compared after [`normalize`]).
const SECRET_HEADERS: &[&str] =
    &["authorization", "proxy_authorization", "x_api_key", "api_key", "cookie", "set_cookie"];

/// Parameter names that are secrets by themselves (compared after [`normalize`]).
const SECRET_NAMES: &[&str] = &[
    "key",
    "apikey",
    "token",
    "secret",
    "password",
    "passwd",
    "pwd",
    "sig",
    "signature",
    "auth",
    "credential",
    "credentials",
];

/// Name endings that make a parameter a secret (`api_key`, `access_token`, `client_secret`,
/// `x-amz-signature`, …).
const SECRET_SUFFIXES: &[&str] = &["_key", "_token", "_secret", "_password", "_signature", "_credential"];

/// Wraps the log layer's writer (`fmt::layer().with_writer(RedactedWriter(std::io::stderr))`) so
/// that every line goes through [`redact`] on its way out. The log layer formats each event (its
/// message, its fields, and its spans' fields) into one buffer and hands it over in one
/// `write_all`, which [`Redacting::write`] takes whole: a secret is never split between two
/// writes.
#[derive(Debug, Clone, Copy, Default)]
pub struct RedactedWriter<M>(pub M);

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for RedactedWriter<M> {
    type Writer = Redacting<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        Redacting(self.0.make_writer())
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Self::Writer {
        Redacting(self.0.make_writer_for(meta))
    }
}

/// One event's writer: writes what it is given through [`redact`].
#[derive(Debug)]
pub struct Redacting<W>(W);

impl<W: io::Write> io::Write for Redacting<W> {
    /// Takes all of `buf` (one formatted event), redacted.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        match redact(&text) {
            // Unchanged (and valid UTF-8): the bytes as given.
            Cow::Borrowed(_) if matches!(text, Cow::Borrowed(_)) => self.0.write_all(buf)?,
            cleaned => self.0.write_all(cleaned.as_bytes())?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// `text` without request credentials (see the module's documentation); borrowed when it has
/// none.
pub fn redact(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let mut masks: Vec<Range<usize>> = Vec::new();
    for (at, &byte) in bytes.iter().enumerate() {
        match byte {
            b':' if bytes[at..].starts_with(b"://") => userinfo(bytes, at + 3, &mut masks),
            b'=' | b':' => after_name(bytes, at, &mut masks),
            b'b' | b'B' => after_scheme(bytes, at, &mut masks),
            _ => {}
        }
    }
    if masks.is_empty() {
        return Cow::Borrowed(text);
    }
    masks.sort_by_key(|range| range.start);
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for range in masks {
        if range.end <= copied {
            continue;
        }
        let start = range.start.max(copied);
        out.push_str(&text[copied..start]);
        if start == range.start {
            out.push_str(MASK);
        }
        copied = range.end;
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// A URL's userinfo: what comes between `://` (ending at `from`) and an `@` in its authority.
fn userinfo(bytes: &[u8], from: usize, masks: &mut Vec<Range<usize>>) {
    let authority = bytes[from..].iter().position(|&b| matches!(b, b'/' | b'?' | b'#' | b'@') || ends_value(b));
    if let Some(len) = authority
        && len > 0
        && bytes[from + len] == b'@'
    {
        masks.push(from..from + len);
    }
}

/// The value after the separator at `at` (`=` or `:`) when the name before it is a secret's.
fn after_name(bytes: &[u8], at: usize, masks: &mut Vec<Range<usize>>) {
    let Some((name, quoted)) = name_before(bytes, at) else { return };
    let name = normalize(name);
    let is_header = SECRET_HEADERS.contains(&name.as_str());
    // `name: value` is prose as often as a header; only a header's name, or a quoted name (JSON, a
    // `Debug` map), is taken as naming what follows.
    let secret = is_header || ((bytes[at] == b'=' || quoted) && is_secret_name(&name));
    if secret && let Some(value) = value_after(bytes, at + 1, is_header) {
        masks.push(value);
    }
}

/// The credentials after `Bearer ` or `Basic ` starting at `at`, when that is a word of its own
/// and what follows is long enough to be credentials rather than prose (`basic auth`).
fn after_scheme(bytes: &[u8], at: usize, masks: &mut Vec<Range<usize>>) {
    if at > 0 && is_name_byte(bytes[at - 1]) {
        return;
    }
    for scheme in SCHEMES {
        let end = at + scheme.len();
        if bytes.len() > end + 1 && bytes[at..end].eq_ignore_ascii_case(scheme.as_bytes()) && bytes[end] == b' ' {
            let token = token_len(&bytes[end + 1..]);
            if token >= MIN_CREDENTIALS {
                masks.push(end + 1..end + 1 + token);
            }
        }
    }
}

/// The name that ends just before `at` (skipping a closing quote and terminal colour codes), and
/// whether it was quoted.
fn name_before(bytes: &[u8], at: usize) -> Option<(&[u8], bool)> {
    let mut end = skip_ansi_back(bytes, at);
    let quoted = end > 0 && matches!(bytes[end - 1], b'"' | b'\'');
    if quoted {
        end -= 1;
    }
    let mut start = bytes[..end].iter().rposition(|&b| !is_name_byte(b)).map_or(0, |p| p + 1);
    if start >= 2 && bytes[start - 1] == b'[' && bytes[start - 2] == 0x1b {
        // A colour code before the name (`ESC [ 3 m name`): its digits and `m` are not the name's.
        let codes = bytes[start..end].iter().position(|&b| !(b.is_ascii_digit() || b == b';'));
        if let Some(len) = codes
            && bytes[start + len] == b'm'
        {
            start += len + 1;
        }
    }
    (start < end).then(|| (&bytes[start..end], quoted))
}

/// The value that starts at `from`: a quoted string's contents, or a token. A header's value may
/// be a scheme and its credentials (`Bearer abc`), taken whole.
fn value_after(bytes: &[u8], from: usize, is_header: bool) -> Option<Range<usize>> {
    let mut start = skip_ansi(bytes, from);
    while start < bytes.len() && bytes[start] == b' ' {
        start += 1;
    }
    let start = skip_ansi(bytes, start);
    let rest = bytes.get(start..)?;
    if let Some(&quote @ (b'"' | b'\'')) = rest.first() {
        let mut escaped = false;
        let len = rest[1..].iter().position(|&b| {
            let closes = b == quote && !escaped;
            escaped = b == b'\\' && !escaped;
            closes
        });
        let end = len.map_or(bytes.len(), |len| start + 1 + len);
        return (end > start + 1).then_some(start + 1..end);
    }
    let mut len = token_len(rest);
    if is_header && rest.get(len) == Some(&b' ') {
        let word = &rest[..len];
        if SCHEMES.iter().any(|s| word.eq_ignore_ascii_case(s.as_bytes())) {
            len += 1 + token_len(&rest[len + 1..]);
        }
    }
    (len > 0).then_some(start..start + len)
}

/// The length of the token at the start of `bytes`: up to whitespace, a quote, a separator of URL
/// parameters or fields, or a closing bracket.
fn token_len(bytes: &[u8]) -> usize {
    bytes.iter().position(|&b| b == b'&' || b == b'#' || ends_value(b)).unwrap_or(bytes.len())
}

/// Bytes that end a value or a URL's authority wherever it appears.
fn ends_value(b: u8) -> bool {
    b.is_ascii_whitespace()
        || matches!(
            b,
            b'"' | b'\'' | b'<' | b'>' | b'(' | b')' | b'[' | b']' | b'{' | b'}' | b',' | b';' | b'\\' | 0x1b
        )
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

/// A name lower-cased, with `-` and `.` as `_`.
fn normalize(name: &[u8]) -> String {
    name.iter().map(|&b| if matches!(b, b'-' | b'.') { '_' } else { char::from(b.to_ascii_lowercase()) }).collect()
}

/// Whether a parameter of this (normalized) name holds a secret: one of [`SECRET_NAMES`], or a
/// name ending in one of [`SECRET_SUFFIXES`].
pub fn is_secret_name(name: &str) -> bool {
    SECRET_NAMES.contains(&name) || SECRET_SUFFIXES.iter().any(|suffix| name.ends_with(suffix))
}

/// `at` moved back over the terminal colour codes (`ESC [ … m`) that end just before it.
fn skip_ansi_back(bytes: &[u8], mut at: usize) -> usize {
    while at >= 3 && bytes[at - 1] == b'm' {
        let codes = bytes[..at - 1].iter().rposition(|&b| !(b.is_ascii_digit() || b == b';'));
        match codes {
            Some(bracket) if bracket >= 1 && bytes[bracket] == b'[' && bytes[bracket - 1] == 0x1b => at = bracket - 1,
            _ => break,
        }
    }
    at
}

/// `at` moved forward over the terminal colour codes that start there.
fn skip_ansi(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at) == Some(&0x1b) && bytes.get(at + 1) == Some(&b'[') {
        match bytes[at + 2..].iter().position(|&b| !(b.is_ascii_digit() || b == b';')) {
            Some(len) if bytes[at + 2 + len] == b'm' => at += len + 3,
            _ => break,
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex, PoisonError};

    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    #[test]
    fn url_userinfo_is_redacted() {
        assert_eq!(
            redact("dialing https://user:pa55@mcp.example.com/x"),
            "dialing https://[redacted]@mcp.example.com/x"
        );
        assert_eq!(redact("postgres://app@db:5432/x"), "postgres://[redacted]@db:5432/x");
        assert_eq!(redact("see https://example.com/a@b"), "see https://example.com/a@b", "an @ in the path");
    }

    #[test]
    fn secret_query_parameters_are_redacted_and_the_others_kept() {
        assert_eq!(
            redact("error sending request for url (http://h/mcp?api_key=S1&region=eu&sig=S2#frag)"),
            "error sending request for url (http://h/mcp?api_key=[redacted]&region=eu&sig=[redacted]#frag)"
        );
        for name in ["key", "token", "access_token", "X-Amz-Signature", "client_secret", "password", "apiKey", "auth"] {
            let line = format!("GET /x?{name}=S3 HTTP/1.1");
            assert_eq!(redact(&line), format!("GET /x?{name}=[redacted] HTTP/1.1"), "{name}");
        }
        for kept in ["max_tokens=100", "input_tokens=7", "region=eu", "author=jane", "monkey=1"] {
            assert_eq!(redact(kept), kept);
        }
    }

    #[test]
    fn quoted_values_and_json_fields_are_redacted() {
        assert_eq!(redact(r#"token="a b c" next=1"#), r#"token="[redacted]" next=1"#);
        assert_eq!(redact(r#"{"api_key": "S4", "model": "m"}"#), r#"{"api_key": "[redacted]", "model": "m"}"#);
        assert_eq!(redact(r#"query: Some("token=S5&x=1")"#), r#"query: Some("token=[redacted]&x=1")"#);
    }

    #[test]
    fn authorization_like_values_are_redacted() {
        assert_eq!(redact(r#"{"authorization": "Bearer S6"}"#), r#"{"authorization": "[redacted]"}"#);
        assert_eq!(redact("authorization=Bearer S7 status=401"), "authorization=[redacted] status=401");
        assert_eq!(redact("X-Api-Key: S8"), "X-Api-Key: [redacted]");
        assert_eq!(redact("the server echoed Bearer sk-S9-secret."), "the server echoed Bearer [redacted]");
        assert_eq!(redact("basic auth is off: no secret here"), "basic auth is off: no secret here");
    }

    #[test]
    fn a_line_without_secrets_is_borrowed() {
        let line = "INFO respgw_supervisor::pool: worker started slot=0 pid=42 url=http://127.0.0.1:1/v1";
        assert!(matches!(redact(line), Cow::Borrowed(_)));
    }

    #[test]
    fn fields_between_terminal_colour_codes_are_redacted() {
        let line = "\x1b[3mtoken\x1b[0m\x1b[2m=\x1b[0mS10 \x1b[3mregion\x1b[0m\x1b[2m=\x1b[0meu";
        assert_eq!(redact(line), "\x1b[3mtoken\x1b[0m\x1b[2m=\x1b[0m[redacted] \x1b[3mregion\x1b[0m\x1b[2m=\x1b[0meu");
    }

    /// Collects what the log layer writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap_or_else(PoisonError::into_inner).extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;

        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    #[test]
    fn a_library_event_is_written_without_its_url_secrets() {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::fmt::layer().with_writer(RedactedWriter(captured.clone())).with_ansi(false));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("request", url = "https://u:p4ss@h/mcp?token=SPAN");
            let _entered = span.enter();
            // As rmcp logs a failed transport: the `Debug` of a reqwest error.
            tracing::error!(
                target: "rmcp::transport::worker",
                uri = %"http://h/mcp?api_key=FIELD&region=eu",
                "worker quit with fatal: {}",
                r#"reqwest::Error { kind: Request, url: "http://h/mcp?api_key=MESSAGE&region=eu" }"#
            );
        });
        let log = String::from_utf8(captured.0.lock().unwrap_or_else(PoisonError::into_inner).clone()).unwrap();
        assert!(log.contains("rmcp::transport::worker") && log.contains("worker quit with fatal"), "{log}");
        assert!(log.contains("region=eu"), "{log}");
        for secret in ["SPAN", "p4ss", "FIELD", "MESSAGE"] {
            assert!(!log.contains(secret), "{secret} in {log}");
        }
    }
}
