//! `input_file` parts: which files the gateway can give the model, and the checks that need no
//! I/O — one source (see `items`), a `file_data` that decodes, a supported type, the size cap.
//!
//! A file's type comes from its declared media type (the `data:` URL's, or the `Content-Type` a
//! `file_url` answered with), else from its name's extension. Three kinds are supported: text
//! (text/*, JSON, CSV, Markdown, XML, YAML, source code), PDF, and PNG/JPEG/GIF/WebP images; an
//! image's bytes must carry its format's signature. Reading the file (fetching a `file_url`,
//! extracting a PDF's text) is the engine's and the tools' job; this module is shared with them.

use base64::Engine as _;

use crate::error::ApiError;
use crate::items::InputFile;

/// What the gateway accepts, as told to clients.
pub const SUPPORTED_FILE_TYPES: &str = "text files (text/*, JSON, CSV, Markdown, XML, YAML, source code), \
     PDF (application/pdf), and PNG, JPEG, GIF or WebP images";

/// How a file reaches the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// Decoded as text.
    Text,
    /// Its text is extracted.
    Pdf,
    /// Sent as an image.
    Image,
}

/// A file's type: its media type (lower-case, without parameters) and kind, and the charset its
/// declaration named, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileType {
    pub media_type: String,
    pub kind: FileKind,
    pub charset: Option<String>,
}

/// A `file_data` decoded: its bytes and type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedFile {
    pub file_type: FileType,
    pub bytes: Vec<u8>,
}

/// Why a file cannot be given to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileError {
    /// Malformed, unreadable or of an unsupported type: what is wrong, for the client.
    Invalid(String),
    /// Larger than the operator's cap.
    TooLarge { bytes: usize, limit: usize },
}

impl FileError {
    /// The 400 naming the part at `param` (e.g. `input[0].content[1]`).
    pub fn into_api_error(self, param: &str) -> ApiError {
        match self {
            FileError::Invalid(reason) => ApiError::invalid(param, format!("{param}: {reason}.")),
            FileError::TooLarge { bytes, limit } => ApiError::invalid(
                param,
                format!(
                    "{param}: the file is {bytes} bytes; this gateway accepts input files of at most {limit} bytes \
                     (the input file size limit)."
                ),
            )
            .with_code("limit_exceeded"),
        }
    }
}

/// Text media types beyond `text/*` (structured text and source code).
const TEXT_MEDIA_TYPES: &[&str] = &[
    "application/json",
    "application/ld+json",
    "application/x-ndjson",
    "application/jsonl",
    "application/xml",
    "application/yaml",
    "application/x-yaml",
    "application/toml",
    "application/javascript",
    "application/x-javascript",
    "application/typescript",
    "application/x-sh",
    "application/x-shellscript",
    "application/x-python",
    "application/x-python-code",
    "application/sql",
    "application/x-tex",
    "application/x-latex",
    "application/csv",
    "application/x-httpd-php",
];

/// Extensions of text files (structured text, documentation and source code).
const TEXT_EXTENSIONS: &[&str] = &[
    "txt",
    "text",
    "md",
    "markdown",
    "rst",
    "adoc",
    "org",
    "csv",
    "tsv",
    "json",
    "jsonl",
    "ndjson",
    "xml",
    "yaml",
    "yml",
    "toml",
    "ini",
    "cfg",
    "conf",
    "env",
    "log",
    "html",
    "htm",
    "css",
    "scss",
    "js",
    "mjs",
    "cjs",
    "ts",
    "tsx",
    "jsx",
    "py",
    "pyi",
    "rs",
    "go",
    "java",
    "kt",
    "kts",
    "scala",
    "c",
    "h",
    "cc",
    "cpp",
    "cxx",
    "hpp",
    "hh",
    "cs",
    "fs",
    "swift",
    "m",
    "mm",
    "rb",
    "php",
    "pl",
    "pm",
    "lua",
    "r",
    "jl",
    "sh",
    "bash",
    "zsh",
    "fish",
    "ps1",
    "sql",
    "graphql",
    "proto",
    "tex",
    "bib",
    "diff",
    "patch",
    "vue",
    "svelte",
    "dart",
    "ex",
    "exs",
    "erl",
    "hs",
    "ml",
    "clj",
    "elm",
    "zig",
    "nim",
    "v",
    "sv",
    "vhd",
    "cmake",
    "mk",
    "dockerfile",
    "gradle",
    "properties",
    "srt",
    "vtt",
];

/// Image media types and their extensions.
const IMAGE_TYPES: &[(&str, &[&str])] =
    &[("image/png", &["png"]), ("image/jpeg", &["jpg", "jpeg"]), ("image/gif", &["gif"]), ("image/webp", &["webp"])];

/// Media types that say nothing about the content; the name decides then.
const GENERIC_MEDIA_TYPES: &[&str] = &["", "application/octet-stream", "binary/octet-stream", "application/unknown"];

/// The type of a file declared as `declared` (a media type, parameters allowed) and named
/// `name` (a file name or URL path; its extension counts). The declaration wins unless it is
/// generic (`application/octet-stream`).
pub fn file_type(declared: Option<&str>, name: Option<&str>) -> Result<FileType, FileError> {
    let declared = declared.unwrap_or_default();
    let mut params = declared.split(';');
    let media_type = params.next().unwrap_or_default().trim().to_ascii_lowercase();
    let charset = params
        .filter_map(|p| p.trim().split_once('='))
        .find(|(key, _)| key.trim().eq_ignore_ascii_case("charset"))
        .map(|(_, value)| value.trim().trim_matches('"').to_owned());
    if !GENERIC_MEDIA_TYPES.contains(&media_type.as_str()) {
        return match kind_of_media_type(&media_type) {
            Some(kind) => Ok(FileType { media_type, kind, charset }),
            None => Err(unsupported(&media_type, name)),
        };
    }
    let extension = name.and_then(extension_of);
    match extension.as_deref().and_then(kind_of_extension) {
        Some((media_type, kind)) => Ok(FileType { media_type, kind, charset }),
        None => Err(unsupported(&media_type, name)),
    }
}

fn unsupported(media_type: &str, name: Option<&str>) -> FileError {
    let what = match (media_type.is_empty() || GENERIC_MEDIA_TYPES.contains(&media_type), name) {
        (true, Some(name)) => format!("the type of '{}' is not supported", clip(name)),
        (true, None) => {
            "the file's type is unknown (give a filename with an extension, or a data: URL with a media type)"
                .to_owned()
        }
        (false, _) => format!("file type '{}' is not supported", clip(media_type)),
    };
    FileError::Invalid(format!("{what}; supported: {SUPPORTED_FILE_TYPES}"))
}

fn kind_of_media_type(media_type: &str) -> Option<FileKind> {
    if media_type == "application/pdf" {
        Some(FileKind::Pdf)
    } else if IMAGE_TYPES.iter().any(|(t, _)| *t == media_type) {
        Some(FileKind::Image)
    } else if media_type.starts_with("text/")
        || TEXT_MEDIA_TYPES.contains(&media_type)
        || media_type.ends_with("+json")
        || media_type.ends_with("+xml")
    {
        Some(FileKind::Text)
    } else {
        None
    }
}

fn kind_of_extension(extension: &str) -> Option<(String, FileKind)> {
    if extension == "pdf" {
        return Some(("application/pdf".to_owned(), FileKind::Pdf));
    }
    if let Some((media_type, _)) = IMAGE_TYPES.iter().find(|(_, exts)| exts.contains(&extension)) {
        return Some(((*media_type).to_owned(), FileKind::Image));
    }
    let media_type = match extension {
        "json" => "application/json",
        "md" | "markdown" => "text/markdown",
        "csv" => "text/csv",
        "html" | "htm" => "text/html",
        _ if TEXT_EXTENSIONS.contains(&extension) => "text/plain",
        _ => return None,
    };
    Some((media_type.to_owned(), FileKind::Text))
}

/// The lower-case extension of a file name or URL path (without query or fragment).
fn extension_of(name: &str) -> Option<String> {
    let path = name.split(['?', '#']).next().unwrap_or_default();
    let file = path.rsplit('/').next().unwrap_or_default();
    let (_, extension) = file.rsplit_once('.')?;
    (!extension.is_empty()).then(|| extension.to_ascii_lowercase())
}

fn clip(value: &str) -> String {
    if value.chars().count() <= 80 {
        value.to_owned()
    } else {
        format!("{}…", value.chars().take(80).collect::<String>())
    }
}

/// Base64 as clients send it: standard or URL-safe alphabet, padded or not.
fn base64_engine(url_safe: bool) -> base64::engine::GeneralPurpose {
    let config = base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true);
    let alphabet = if url_safe { &base64::alphabet::URL_SAFE } else { &base64::alphabet::STANDARD };
    base64::engine::GeneralPurpose::new(alphabet, config)
}

/// Decode a `file_data` — a `data:<media type>;base64,<data>` URL, or bare base64 typed by
/// `filename` — refusing more than `max_bytes` before decoding.
pub fn decode_file_data(file_data: &str, filename: Option<&str>, max_bytes: usize) -> Result<DecodedFile, FileError> {
    let (declared, encoded) = match file_data.strip_prefix("data:") {
        Some(rest) => {
            let (header, data) = rest.split_once(',').ok_or_else(|| {
                FileError::Invalid("file_data is a data: URL without a ',' before its data".to_owned())
            })?;
            let Some(media_type) = header.strip_suffix(";base64").or_else(|| header.strip_suffix(";BASE64")) else {
                return Err(FileError::Invalid(
                    "file_data must be a base64 data: URL (data:<type>;base64,…)".to_owned(),
                ));
            };
            (Some(media_type), data)
        }
        None if filename.is_some_and(|f| !f.trim().is_empty()) => (None, file_data),
        None => {
            return Err(FileError::Invalid(
                "file_data must be a data: URL (data:<type>;base64,…), or base64 with a filename that tells its type"
                    .to_owned(),
            ));
        }
    };
    let file_type = file_type(declared, filename)?;
    let compact: std::borrow::Cow<'_, str> = if encoded.bytes().any(|b| b.is_ascii_whitespace()) {
        encoded.chars().filter(|c| !c.is_ascii_whitespace()).collect::<String>().into()
    } else {
        encoded.into()
    };
    let estimate = compact.len() / 4 * 3;
    if estimate > max_bytes.saturating_add(3) {
        return Err(FileError::TooLarge { bytes: estimate, limit: max_bytes });
    }
    let url_safe = compact.contains(['-', '_']);
    let bytes = base64_engine(url_safe)
        .decode(compact.as_bytes())
        .map_err(|e| FileError::Invalid(format!("file_data is not valid base64 ({})", base64_reason(&e))))?;
    if bytes.is_empty() {
        return Err(FileError::Invalid("file_data holds no bytes".to_owned()));
    }
    if bytes.len() > max_bytes {
        return Err(FileError::TooLarge { bytes: bytes.len(), limit: max_bytes });
    }
    check_signature(&file_type, &bytes)?;
    Ok(DecodedFile { file_type, bytes })
}

fn base64_reason(error: &base64::DecodeError) -> String {
    match error {
        base64::DecodeError::InvalidByte(offset, _) => format!("an invalid character at offset {offset}"),
        base64::DecodeError::InvalidLength(_) => "its length is not a whole number of base64 groups".to_owned(),
        base64::DecodeError::InvalidLastSymbol(offset, _) => format!("an invalid last character at offset {offset}"),
        base64::DecodeError::InvalidPadding => "invalid padding".to_owned(),
    }
}

/// Images and PDFs must start with their format's signature (a mislabelled file would reach the
/// model as garbage, or make the upstream fail the whole response).
pub fn check_signature(file_type: &FileType, bytes: &[u8]) -> Result<(), FileError> {
    let ok = match (file_type.kind, file_type.media_type.as_str()) {
        (FileKind::Image, "image/png") => bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        (FileKind::Image, "image/jpeg") => bytes.starts_with(&[0xff, 0xd8, 0xff]),
        (FileKind::Image, "image/gif") => bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a"),
        (FileKind::Image, "image/webp") => bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP",
        (FileKind::Pdf, _) => bytes[..bytes.len().min(1024)].windows(5).any(|w| w == b"%PDF-"),
        _ => true,
    };
    if ok { Ok(()) } else { Err(FileError::Invalid(format!("the file's content is not {}", file_type.media_type))) }
}

/// The checks of one `input_file` part that need no I/O: a `file_data` decodes to a supported
/// type within `max_bytes`; a `file_url` is an http(s) URL.
pub fn check(file: &InputFile, max_bytes: usize) -> Result<(), FileError> {
    if let Some(data) = &file.file_data {
        decode_file_data(data, file.filename.as_deref(), max_bytes)?;
    }
    if let Some(url) = &file.file_url {
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        if !matches!(scheme.as_deref(), Some("http" | "https")) {
            return Err(FileError::Invalid("file_url must be an http or https URL".to_owned()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn types_come_from_the_declaration_then_the_name() {
        let t = file_type(Some("text/csv; charset=windows-1252"), Some("x.bin")).unwrap();
        assert_eq!(
            (t.media_type.as_str(), t.kind, t.charset.as_deref()),
            ("text/csv", FileKind::Text, Some("windows-1252"))
        );
        assert_eq!(file_type(Some("application/octet-stream"), Some("main.rs")).unwrap().kind, FileKind::Text);
        assert_eq!(file_type(None, Some("Report.PDF")).unwrap().kind, FileKind::Pdf);
        assert_eq!(file_type(None, Some("https://x.org/a/photo.jpeg?sig=1")).unwrap().media_type, "image/jpeg");
        assert_eq!(file_type(Some("application/vnd.api+json"), None).unwrap().kind, FileKind::Text);
        let FileError::Invalid(e) = file_type(Some("application/zip"), Some("x.zip")).unwrap_err() else { panic!() };
        assert!(e.contains("'application/zip' is not supported") && e.contains("PDF"), "{e}");
        assert!(file_type(None, Some("archive.tar")).is_err());
        assert!(file_type(None, None).is_err());
    }

    #[test]
    fn file_data_is_a_data_url_or_base64_with_a_name() {
        let pdf = b"%PDF-1.4 tiny";
        let d = decode_file_data(&format!("data:application/pdf;base64,{}", b64(pdf)), None, 100).unwrap();
        assert_eq!((d.file_type.kind, d.bytes.as_slice()), (FileKind::Pdf, pdf.as_slice()));
        let d = decode_file_data(&b64(b"hello"), Some("notes.txt"), 100).unwrap();
        assert_eq!(d.bytes, b"hello");
        // Unpadded, URL-safe and wrapped base64 are all read.
        assert_eq!(decode_file_data("aGk", Some("a.txt"), 100).unwrap().bytes, b"hi");
        assert_eq!(decode_file_data("_-8=", Some("a.txt"), 100).unwrap().bytes, vec![0xff, 0xef]);
        assert_eq!(decode_file_data("aGVs\nbG8=", Some("a.txt"), 100).unwrap().bytes, b"hello");
        let invalid = |r: Result<DecodedFile, FileError>| match r {
            Err(FileError::Invalid(e)) => e,
            other => panic!("{other:?}"),
        };
        assert!(invalid(decode_file_data(&b64(b"x"), None, 100)).contains("filename"));
        assert!(invalid(decode_file_data("data:text/plain,hello", None, 100)).contains("base64"));
        assert!(invalid(decode_file_data("data:text/plain;base64,@@@@", None, 100)).contains("not valid base64"));
        assert!(
            invalid(decode_file_data(&format!("data:image/png;base64,{}", b64(b"not a png")), None, 100))
                .contains("not image/png")
        );
    }

    #[test]
    fn oversize_files_are_refused_before_decoding() {
        let data = format!("data:text/plain;base64,{}", b64(&[b'a'; 300]));
        assert_eq!(decode_file_data(&data, None, 300).map(|d| d.bytes.len()), Ok(300));
        assert!(matches!(decode_file_data(&data, None, 299), Err(FileError::TooLarge { bytes: 300, limit: 299 })));
        let data = format!("data:text/plain;base64,{}", b64(&[b'a'; 3000]));
        assert!(matches!(decode_file_data(&data, None, 10), Err(FileError::TooLarge { bytes: 3000, .. })));
        let e = FileError::TooLarge { bytes: 3000, limit: 10 }.into_api_error("input[0].content[1]");
        assert_eq!((e.param.as_deref(), e.code.as_deref()), (Some("input[0].content[1]"), Some("limit_exceeded")));
    }
}
