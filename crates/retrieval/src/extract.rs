//! Text out of files: the one extractor behind `input_file` parts (respgw-tools) and vector-store
//! ingestion.
//!
//! A file's [`Format`] comes from its name's extension (the text, markdown, code, JSON, HTML and
//! PDF types `input_file` accepts, see `respgw_protocol::input_file`), else from its leading bytes
//! (`%PDF-`, or text that decodes). Then:
//! - text (plain, markdown, code, JSON): decoded in the declared charset, else the one its BOM
//!   names, else UTF-8 (invalid sequences replaced); bytes with NULs and no UTF-16 BOM are not
//!   text;
//! - HTML: decoded so, then rendered to plain text (html2text);
//! - PDF: its text extracted with `pdf-extract`, page by page; a PDF whose cross-reference table
//!   is missing or broken is read through a rebuilt one (`extract/pdf_recovery.rs`); a PDF whose
//!   streams would inflate past [`MAX_PDF_INFLATED_BYTES`] is refused before extraction.
//!
//! Failures are an [`ExtractError`]: `unsupported_file` for a type the gateway cannot read text
//! from, `invalid_file` for a supported type whose content cannot be read. PDF extraction is
//! CPU-heavy and may panic on malformed files: callers run it on a blocking thread, and
//! [`extract`] turns a panic into `invalid_file`.

mod pdf_recovery;

use std::borrow::Cow;
use std::fmt;

use respgw_protocol::input_file::{self, FileKind};

/// How a file's text is obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Plain text, markdown, source code, JSON and other structured text: decoded as is.
    Text,
    /// Decoded, then rendered to plain text.
    Html,
    /// Text extracted from its pages.
    Pdf,
}

/// Why a file's text could not be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtractError {
    /// A type the gateway cannot read text from (images, office documents, archives …).
    Unsupported(String),
    /// A supported type whose content is damaged or not what it claims to be.
    Invalid(String),
}

impl ExtractError {
    /// The code OpenAI reports in a vector-store file's `last_error`.
    pub fn code(&self) -> &'static str {
        match self {
            ExtractError::Unsupported(_) => "unsupported_file",
            ExtractError::Invalid(_) => "invalid_file",
        }
    }

    /// What is wrong, for the client (no final period).
    pub fn message(&self) -> &str {
        match self {
            ExtractError::Unsupported(message) | ExtractError::Invalid(message) => message,
        }
    }
}

impl fmt::Display for ExtractError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for ExtractError {}

/// Most bytes the streams of one PDF may decompress to, all together. pdf-extract decompresses
/// each stream it reads whole, in memory, so a small file of highly compressed streams (a
/// "decompression bomb") is refused first, by decompressing into a bounded buffer.
pub const MAX_PDF_INFLATED_BYTES: usize = 128 << 20;

/// Longest output one LZW code can produce: 12-bit codes, so at most 4,096 entries, each one byte
/// longer than the entry it extends. Bounds an LZW stream's size without decoding it.
const LZW_MAX_EXPANSION: usize = 4096;

/// Leading bytes looked at to tell text from binary.
const SNIFF_BYTES: usize = 8192;

/// The format of a file named `filename` whose content starts with `prefix`: by extension when it
/// has a known one, else by content (`%PDF-`, or text); `None` when unsupported.
pub fn format_of(filename: &str, prefix: &[u8]) -> Option<Format> {
    match input_file::file_type(None, Some(filename)) {
        Ok(file_type) => match file_type.kind {
            FileKind::Pdf => Some(Format::Pdf),
            FileKind::Image => None,
            FileKind::Text if file_type.media_type == "text/html" => Some(Format::Html),
            FileKind::Text => Some(Format::Text),
        },
        Err(_) if prefix.starts_with(b"%PDF-") => Some(Format::Pdf),
        Err(_) if has_extension(filename) => None,
        Err(_) => looks_like_text(prefix).then_some(Format::Text),
    }
}

/// Whether a file named `filename` starting with `bytes_prefix` is of a type whose text the
/// gateway extracts (for upload-time checks; the content is only fully checked when extracted).
pub fn is_supported(filename: &str, bytes_prefix: &[u8]) -> bool {
    match format_of(filename, bytes_prefix) {
        Some(Format::Pdf) => contains_pdf_header(bytes_prefix),
        Some(Format::Text | Format::Html) => looks_like_text(bytes_prefix),
        None => false,
    }
}

/// The whole text of a file named `filename` (for ingestion). Blocking and CPU-heavy for a PDF:
/// run it on a blocking thread.
pub fn extract(filename: &str, bytes: &[u8]) -> Result<String, ExtractError> {
    let prefix = &bytes[..bytes.len().min(SNIFF_BYTES)];
    let Some(format) = format_of(filename, prefix) else {
        return Err(unsupported(filename));
    };
    let text = match format {
        Format::Text => decode_text(bytes, None, "text")?,
        Format::Html => html_to_text(&decode_text(bytes, None, "HTML")?)?,
        Format::Pdf => {
            let extracted = std::panic::catch_unwind(|| extract_pdf(bytes, usize::MAX, usize::MAX))
                .map_err(|_| ExtractError::Invalid("the PDF could not be read (it is malformed)".to_owned()))??;
            if extracted.text.trim().is_empty() {
                return Err(ExtractError::Invalid(
                    "the PDF has no extractable text (a scanned PDF needs OCR, which this gateway does not do)"
                        .to_owned(),
                ));
            }
            extracted.text
        }
    };
    Ok(text)
}

fn unsupported(filename: &str) -> ExtractError {
    ExtractError::Unsupported(format!(
        "the type of '{filename}' is not supported: file search reads text, markdown, code, JSON, HTML and PDF files"
    ))
}

fn has_extension(filename: &str) -> bool {
    filename.rsplit('/').next().and_then(|name| name.rsplit_once('.')).is_some_and(|(_, ext)| !ext.is_empty())
}

fn contains_pdf_header(prefix: &[u8]) -> bool {
    prefix.windows(5).any(|w| w == b"%PDF-")
}

/// Whether `prefix` reads as text: a UTF-16 BOM, or no NUL byte.
fn looks_like_text(prefix: &[u8]) -> bool {
    let utf16 = encoding_rs::Encoding::for_bom(prefix)
        .is_some_and(|(encoding, _)| encoding == encoding_rs::UTF_16LE || encoding == encoding_rs::UTF_16BE);
    utf16 || !prefix[..prefix.len().min(SNIFF_BYTES)].contains(&0)
}

/// Text in `charset` when given (a label such as `windows-1252`), else the one its BOM names,
/// else UTF-8 (invalid sequences replaced). Bytes with NULs and no UTF-16 BOM are not text: the
/// error says the file was taken for `declared_as` (a media type or a kind).
pub fn decode_text(bytes: &[u8], charset: Option<&str>, declared_as: &str) -> Result<String, ExtractError> {
    let declared = charset.and_then(|label| encoding_rs::Encoding::for_label(label.as_bytes()));
    let bom = encoding_rs::Encoding::for_bom(bytes).map(|(encoding, _)| encoding);
    let encoding = declared.or(bom).unwrap_or(encoding_rs::UTF_8);
    let utf16 = encoding == encoding_rs::UTF_16LE || encoding == encoding_rs::UTF_16BE;
    if !utf16 && bytes[..bytes.len().min(SNIFF_BYTES)].contains(&0) {
        return Err(ExtractError::Invalid(format!(
            "the file is declared as {declared_as} but its content is not text"
        )));
    }
    let (text, _, _) = encoding.decode(bytes);
    Ok(text.into_owned())
}

/// Width html2text wraps lines at: wide, so paragraphs stay whole for chunking.
const HTML_TEXT_WIDTH: usize = 10_000;

/// An HTML document's visible text (no decoration, links as footnotes).
pub fn html_to_text(html: &str) -> Result<String, ExtractError> {
    html2text::config::plain_no_decorate()
        .string_from_read(html.as_bytes(), HTML_TEXT_WIDTH)
        .map(|text| text.trim().to_owned())
        .map_err(|e| ExtractError::Invalid(format!("the HTML could not be rendered as text ({e})")))
}

/// A PDF's text, page by page.
#[derive(Debug)]
pub struct PdfText {
    pub text: String,
    /// Pages whose text is in `text`.
    pub pages_read: usize,
    /// Pages the document has.
    pub total_pages: usize,
}

/// Extract the text of at most `max_pages` pages, stopping once more than `max_bytes` of text is
/// in hand (the caller cuts it). pdf-extract panics on some malformed files: run it on a blocking
/// thread whose failure the caller handles, or under `catch_unwind` as [`extract`] does.
pub fn extract_pdf(bytes: &[u8], max_pages: usize, max_bytes: usize) -> Result<PdfText, ExtractError> {
    let unreadable = || ExtractError::Invalid("the PDF could not be read (it is damaged, or not a PDF)".to_owned());
    let mut document = load_pdf(bytes).ok_or_else(unreadable)?;
    if document.is_encrypted() && document.decrypt("").is_err() {
        return Err(ExtractError::Invalid("the PDF is encrypted with a password".to_owned()));
    }
    check_inflated_size(&document, MAX_PDF_INFLATED_BYTES)?;
    let pages: Vec<u32> = document.get_pages().keys().copied().collect();
    let mut text = String::new();
    let mut pages_read = 0;
    for page in pages.iter().take(max_pages) {
        let mut page_text = String::new();
        let mut output = pdf_extract::PlainTextOutput::new(&mut page_text);
        pdf_extract::output_doc_page(&document, &mut output, *page).map_err(|_| unreadable())?;
        text.push_str(&page_text);
        pages_read += 1;
        if text.len() > max_bytes {
            break;
        }
    }
    Ok(PdfText { text, pages_read, total_pages: pages.len() })
}

/// The document in `bytes`: as its cross-reference table has it when that leads to its pages,
/// else through a rebuilt table; a document that loads without pages and cannot be recovered
/// stays as it loaded (it then has no text).
fn load_pdf(bytes: &[u8]) -> Option<pdf_extract::Document> {
    let loaded = pdf_extract::Document::load_mem(bytes).ok();
    if loaded.as_ref().is_some_and(|document| !document.get_pages().is_empty()) {
        return loaded;
    }
    pdf_recovery::recover(bytes).filter(|document| !document.get_pages().is_empty()).or(loaded)
}

/// Refuse `document` when its streams (images aside: their pixels are never decoded for text)
/// would decompress to more than `limit` bytes together.
fn check_inflated_size(document: &pdf_extract::Document, limit: usize) -> Result<(), ExtractError> {
    let too_large = || {
        ExtractError::Invalid(format!(
            "the PDF's compressed content expands to more than {} MiB, more than the gateway reads",
            limit >> 20
        ))
    };
    let mut budget = limit;
    for object in document.objects.values() {
        let Ok(stream) = object.as_stream() else { continue };
        let is_image = stream.dict.get(b"Subtype").and_then(pdf_extract::Object::as_name).is_ok_and(|n| n == b"Image");
        if is_image {
            continue;
        }
        let filters = stream.filters().unwrap_or_default();
        let mut data = Cow::Borrowed(stream.content.as_slice());
        for filter in filters {
            data = match filter {
                b"FlateDecode" => Cow::Owned(inflate_at_most(&data, budget).ok_or_else(too_large)?),
                b"LZWDecode" if data.len().saturating_mul(LZW_MAX_EXPANSION) > budget => return Err(too_large()),
                // Bounded above: decoded by pdf-extract as usual. ASCII85 shrinks its input.
                _ => break,
            };
        }
        budget = budget.checked_sub(data.len()).ok_or_else(too_large)?;
    }
    Ok(())
}

/// `input` inflated (zlib, else raw deflate as pdf-extract retries), or `None` when it would be
/// longer than `limit`. Corrupt data gives what decoded before the error, as pdf-extract reads it.
fn inflate_at_most(input: &[u8], limit: usize) -> Option<Vec<u8>> {
    use std::io::Read;
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    let mut output = Vec::new();
    let zlib = flate2::read::ZlibDecoder::new(input).take(cap).read_to_end(&mut output);
    if zlib.is_err() && output.is_empty() && input.len() > 2 {
        let _ = flate2::read::DeflateDecoder::new(&input[2..]).take(cap).read_to_end(&mut output);
    }
    (output.len() <= limit).then_some(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_come_from_the_extension_then_the_content() {
        assert_eq!(format_of("notes.md", b"# hi"), Some(Format::Text));
        assert_eq!(format_of("main.rs", b"fn main() {}"), Some(Format::Text));
        assert_eq!(format_of("data.JSON", b"{}"), Some(Format::Text));
        assert_eq!(format_of("page.html", b"<html>"), Some(Format::Html));
        assert_eq!(format_of("paper.pdf", b"%PDF-1.4"), Some(Format::Pdf));
        assert_eq!(format_of("README", b"plain words"), Some(Format::Text));
        assert_eq!(format_of("blob", b"%PDF-1.7"), Some(Format::Pdf));
        assert_eq!(format_of("blob", b"\x00\x01\x02"), None);
        assert_eq!(format_of("photo.png", b"\x89PNG"), None);
        assert_eq!(format_of("slides.pptx", b"PK\x03\x04"), None);
    }

    #[test]
    fn support_checks_the_leading_bytes_too() {
        assert!(is_supported("a.txt", b"hello"));
        assert!(is_supported("a.pdf", b"%PDF-1.4\n"));
        assert!(!is_supported("a.txt", b"PK\x03\x04\x00\x00"));
        assert!(!is_supported("a.pdf", b"not a pdf"));
        assert!(!is_supported("a.docx", b"PK\x03\x04"));
        assert!(is_supported("utf16.txt", b"\xff\xfeh\x00i\x00"));
    }

    #[test]
    fn text_is_decoded_in_its_charset_and_binary_is_refused() {
        assert_eq!(decode_text(b"caf\xe9", Some("windows-1252"), "text/plain").unwrap(), "café");
        assert_eq!(decode_text(b"\xff\xfeh\x00i\x00", None, "text/plain").unwrap(), "hi");
        assert_eq!(
            decode_text(b"PK\x03\x04\x00\x00", None, "text/plain"),
            Err(ExtractError::Invalid("the file is declared as text/plain but its content is not text".into()))
        );
    }

    #[test]
    fn html_becomes_its_visible_text() {
        let html = b"<html><head><title>T</title><style>p{}</style></head><body><h1>Refunds</h1>\
                     <p>Refunds take <b>five</b> days.</p></body></html>";
        let text = extract("policy.html", html).unwrap();
        assert!(text.contains("Refunds take five days."), "{text}");
        assert!(!text.contains("<p>") && !text.contains("p{}"), "{text}");
    }

    #[test]
    fn unsupported_and_invalid_files_have_their_codes() {
        let unsupported = extract("photo.png", b"\x89PNG\r\n").unwrap_err();
        assert_eq!(unsupported.code(), "unsupported_file");
        assert!(unsupported.message().contains("'photo.png' is not supported"), "{unsupported}");
        let invalid = extract("a.pdf", b"%PDF-1.4 garbage").unwrap_err();
        assert_eq!(invalid.code(), "invalid_file");
        assert_eq!(extract("a.txt", b"x\x00y").unwrap_err().code(), "invalid_file");
    }

    #[test]
    fn a_pdf_is_read_whole() {
        let pdf = respgw_testkit::pdf::document(&objects_saying("Quarterly revenue grew"));
        assert_eq!(extract("report.pdf", &pdf).unwrap().trim(), "Quarterly revenue grew");
    }

    /// A one-page PDF whose page content is `content` compressed with FlateDecode.
    fn pdf_with_deflated_content(content: &[u8]) -> Vec<u8> {
        respgw_testkit::pdf::document(&objects_with_deflated_content(content))
    }

    /// The objects of [`pdf_with_deflated_content`].
    fn objects_with_deflated_content(content: &[u8]) -> Vec<Vec<u8>> {
        use std::io::Write;
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(content).expect("compress");
        let stream = encoder.finish().expect("compress");
        let mut objects: Vec<Vec<u8>> = vec![
            b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>".to_vec(),
        ];
        let mut body = format!("<< /Length {} /Filter /FlateDecode >>\nstream\n", stream.len()).into_bytes();
        body.extend_from_slice(&stream);
        body.extend_from_slice(b"\nendstream");
        objects.push(body);
        objects
    }

    #[test]
    fn a_pdf_whose_streams_inflate_past_the_limit_is_refused_before_extraction() {
        // 64 MiB of spaces compress to about 64 KiB: small on the wire, large in memory.
        let bomb = pdf_with_deflated_content(&vec![b' '; 64 << 20]);
        assert!(bomb.len() < 1 << 20, "{} bytes", bomb.len());
        let document = pdf_extract::Document::load_mem(&bomb).expect("a valid PDF");
        match check_inflated_size(&document, 16 << 20) {
            Err(ExtractError::Invalid(message)) => assert!(message.contains("more than 16 MiB"), "{message}"),
            other => panic!("not refused: {other:?}"),
        }
        assert!(check_inflated_size(&document, 128 << 20).is_ok(), "within the limit it is read");
        let small = pdf_with_deflated_content(b"BT /F1 12 Tf 72 712 Td (Hello) Tj ET");
        let document = pdf_extract::Document::load_mem(&small).expect("a valid PDF");
        assert!(check_inflated_size(&document, 1024).is_ok());
    }

    #[test]
    fn malformed_pdfs_are_an_error_not_a_crash() {
        for bytes in [&b"%PDF-1.4 garbage"[..], b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog", b"not a PDF"] {
            match extract_pdf(bytes, 10, 1000) {
                Err(ExtractError::Invalid(message)) => {
                    assert_eq!(message, "the PDF could not be read (it is damaged, or not a PDF)")
                }
                other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bytes)),
            }
        }
    }

    /// A one-page PDF saying `text`, with a correct cross-reference table.
    fn pdf_saying(text: &str) -> Vec<u8> {
        respgw_testkit::pdf::document(&objects_saying(text))
    }

    /// The objects of a one-page PDF saying `text`.
    fn objects_saying(text: &str) -> Vec<Vec<u8>> {
        let stream = format!("BT /F1 12 Tf 72 712 Td ({text}) Tj ET");
        [
            "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
            "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_owned(),
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> >> \
             /Contents 4 0 R >>"
                .to_owned(),
            format!("<< /Length {} >>\nstream\n{stream}\nendstream", stream.len()),
            "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_owned(),
        ]
        .into_iter()
        .map(String::into_bytes)
        .collect()
    }

    #[test]
    fn a_pdf_without_a_cross_reference_table_is_read_through_a_rebuilt_one() {
        let pdf = respgw_testkit::pdf::document_without_xref(&objects_saying("Recovered text"));
        assert!(pdf_extract::Document::load_mem(&pdf).is_err(), "lopdf alone refuses it");
        let extracted = extract_pdf(&pdf, 10, 1000).expect("recovered");
        assert_eq!(extracted.text.trim(), "Recovered text");
        assert_eq!((extracted.pages_read, extracted.total_pages), (1, 1));
    }

    #[test]
    fn a_pdf_whose_table_is_at_the_wrong_place_or_points_to_the_wrong_places_is_read() {
        let pdf = pdf_saying("Still readable");
        let text = String::from_utf8(pdf.clone()).unwrap();
        let startxref = text.rfind("startxref\n").unwrap() + "startxref\n".len();
        let wrong_start = format!("{}3\n%%EOF\n", &text[..startxref]);
        // Every entry of the table 5 bytes off.
        let mut wrong_offsets = String::new();
        for line in text.lines() {
            match line.strip_suffix(" 00000 n ").and_then(|offset| offset.parse::<usize>().ok()) {
                Some(offset) => wrong_offsets.push_str(&format!("{:010} 00000 n \n", offset + 5)),
                None => wrong_offsets.push_str(&format!("{line}\n")),
            }
        }
        for broken in [wrong_start, wrong_offsets] {
            let extracted = extract_pdf(broken.as_bytes(), 10, 1000).expect("recovered");
            assert_eq!(extracted.text.trim(), "Still readable");
        }
    }

    #[test]
    fn a_recovered_pdf_is_held_to_the_same_inflation_limit() {
        let bomb = respgw_testkit::pdf::document_without_xref(&objects_with_deflated_content(&vec![b' '; 64 << 20]));
        let document = load_pdf(&bomb).expect("recovered");
        match check_inflated_size(&document, 16 << 20) {
            Err(ExtractError::Invalid(message)) => assert!(message.contains("more than 16 MiB"), "{message}"),
            other => panic!("not refused: {other:?}"),
        }
    }
}
