//! `input_file` parts read for the model: the engine's [`FileReader`].
//!
//! A file comes from `file_data` (decoded by `respgw_protocol::input_file`), from `file_url`,
//! fetched by the web_search page fetcher ([`PageFetcher`]: the request-forgery address policy on
//! every hop, a time limit, at most `max_bytes` read), or from `file_id`: the request tenant's
//! uploaded file, read from the store ([`InputFiles::with_uploads`]; at most `max_bytes`, typed
//! by its name and checked against its leading bytes; another tenant's id is unknown, like a
//! missing one). Then, by type:
//! - text (text/*, JSON, CSV, Markdown, source code): decoded (declared charset, else BOM, else
//!   UTF-8) and headed with the file's name;
//! - PDF: its text extracted with `pdf-extract` on a blocking thread, at most `max_pdf_pages`
//!   pages; a PDF whose cross-reference table is missing or broken is read through a rebuilt one
//!   (`pdf_recovery.rs`); a PDF without extractable text (a scan) is refused rather than sent
//!   empty;
//! - images (PNG, JPEG, GIF, WebP): a `data:` URL, sent like an `input_image`.
//!
//! An `input_image` given by URL is fetched the same way (same policy and limits) and must be one
//! of those image types; the model gets it as a `data:` URL.
//!
//! Text longer than `max_text_bytes` is cut at a character boundary, and the model is told so.
//! Every failure is a sentence for the client (the engine names the part).

mod pdf_recovery;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use respgw_engine::FileReader;
use respgw_protocol::input_file::{self, DecodedFile, FileError, FileKind, FileType};
use respgw_protocol::items::{FileContent, InputFile};
use respgw_store_api::RetrievalStore;
use serde::{Deserialize, Serialize};

use crate::web_search::{FetchSettings, PageFetcher};

/// Limits of input files and of the fetches of `file_url`s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputFileSettings {
    /// Bytes of one file (decoded `file_data`, or a fetched body).
    pub max_bytes: usize,
    /// Bytes of text the model gets from one file (a text file's, or a PDF's extracted text).
    pub max_text_bytes: usize,
    /// Pages of a PDF whose text is extracted.
    pub max_pdf_pages: usize,
    /// One `file_url` fetch: connect, redirects, body.
    pub fetch_timeout: Duration,
    /// Let `file_url` name loopback, private and link-local addresses.
    pub allow_private_addresses: bool,
    /// Hosts a `file_url` may name despite the address rules.
    #[serde(default)]
    pub exempt_hosts: Vec<String>,
}

impl Default for InputFileSettings {
    fn default() -> Self {
        InputFileSettings {
            max_bytes: respgw_protocol::limits::DEFAULT_MAX_INPUT_FILE_BYTES,
            max_text_bytes: 512 * 1024,
            max_pdf_pages: 100,
            fetch_timeout: Duration::from_secs(20),
            allow_private_addresses: false,
            exempt_hosts: Vec::new(),
        }
    }
}

/// The gateway's reader of input files (one per process; cheap to clone).
#[derive(Clone)]
pub struct InputFiles {
    fetcher: PageFetcher,
    settings: InputFileSettings,
    /// Where uploaded files are read for a `file_id`; `None`: a `file_id` is refused.
    uploads: Option<Arc<dyn RetrievalStore>>,
}

impl InputFiles {
    pub fn new(settings: InputFileSettings) -> Result<Self, String> {
        let fetcher = PageFetcher::new(FetchSettings {
            timeout: settings.fetch_timeout,
            max_bytes: settings.max_bytes,
            allow_private_addresses: settings.allow_private_addresses,
            exempt_hosts: settings.exempt_hosts.clone(),
        })?;
        Ok(InputFiles { fetcher, settings, uploads: None })
    }

    /// Read `file_id`s from these uploaded files.
    pub fn with_uploads(mut self, uploads: Arc<dyn RetrievalStore>) -> Self {
        self.uploads = Some(uploads);
        self
    }

    /// The file's bytes and type, from `file_data`, by fetching `file_url`, or from `owner`'s
    /// uploads (then with the name it was uploaded under).
    async fn load(&self, owner: &str, file: &InputFile) -> Result<(DecodedFile, Option<String>), FileError> {
        let filename = file.filename.as_deref();
        if let Some(data) = &file.file_data {
            return Ok((input_file::decode_file_data(data, filename, self.settings.max_bytes)?, None));
        }
        if let Some(id) = &file.file_id {
            return self.load_upload(owner, id).await.map(|(decoded, name)| (decoded, Some(name)));
        }
        let Some(url) = &file.file_url else {
            return Err(FileError::Invalid("an input_file needs file_data or file_url".to_owned()));
        };
        Ok((self.fetch(url, filename, "*/*", ("input_file", "file_url")).await?, None))
    }

    /// `owner`'s uploaded file `id`: its bytes, typed by its name, and the name.
    async fn load_upload(&self, owner: &str, id: &str) -> Result<(DecodedFile, String), FileError> {
        let unknown = || FileError::Invalid(format!("no uploaded file has the id '{id}'"));
        let Some(uploads) = &self.uploads else {
            return Err(FileError::Invalid("input_file.file_id is not supported by this gateway".to_owned()));
        };
        let unavailable = |e: respgw_store_api::StoreError| {
            tracing::warn!(error = %e, "an uploaded input file could not be read");
            FileError::Invalid(format!("the uploaded file '{id}' could not be read right now; retry the request"))
        };
        let record = uploads.file(owner, id).await.map_err(unavailable)?.ok_or_else(unknown)?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        if record.expires_at.is_some_and(|at| at <= now) {
            return Err(unknown());
        }
        if record.bytes > self.settings.max_bytes as u64 {
            return Err(FileError::TooLarge {
                bytes: usize::try_from(record.bytes).unwrap_or(usize::MAX),
                limit: self.settings.max_bytes,
            });
        }
        let bytes = uploads.file_content(owner, id).await.map_err(unavailable)?.ok_or_else(unknown)?;
        let file_type = input_file::file_type(None, Some(&record.filename))?;
        input_file::check_signature(&file_type, &bytes)?;
        Ok((DecodedFile { file_type, bytes }, record.filename))
    }

    /// Fetch `url` (`field` of a `part` type) under the address policy and the size limit; its
    /// type from the declared content type, else `filename`, else the URL's path, checked against
    /// its leading bytes.
    async fn fetch(
        &self,
        url: &str,
        filename: Option<&str>,
        accept: &'static str,
        (part, field): (&str, &str),
    ) -> Result<DecodedFile, FileError> {
        let body =
            self.fetcher.fetch_body(url, accept, part).await.map_err(|e| {
                FileError::Invalid(format!("{field} could not be fetched: {}", e.trim_end_matches('.')))
            })?;
        if body.truncated {
            return Err(FileError::TooLarge { bytes: body.bytes.len() + 1, limit: self.settings.max_bytes });
        }
        let path = reqwest::Url::parse(&body.final_url).map(|u| u.path().to_owned()).unwrap_or_default();
        let named = filename.or(Some(path.as_str()));
        let declared = Some(body.content_type.as_str()).filter(|t| !t.is_empty());
        let file_type = input_file::file_type(declared, named)?;
        input_file::check_signature(&file_type, &body.bytes)?;
        Ok(DecodedFile { file_type, bytes: body.bytes })
    }
}

/// `bytes` of media type `media_type` as a `data:` URL.
fn data_url(media_type: &str, bytes: &[u8]) -> String {
    format!("data:{media_type};base64,{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

#[async_trait]
impl FileReader for InputFiles {
    async fn read(&self, owner: &str, file: &InputFile) -> Result<FileContent, FileError> {
        let (decoded, uploaded_name) = self.load(owner, file).await?;
        let name = match uploaded_name {
            Some(uploaded) if file.filename.as_deref().is_none_or(|f| f.trim().is_empty()) => uploaded,
            _ => display_name(file),
        };
        let max_text = self.settings.max_text_bytes;
        match decoded.file_type.kind {
            FileKind::Image => {
                Ok(FileContent::Image { image_url: data_url(&decoded.file_type.media_type, &decoded.bytes) })
            }
            FileKind::Text => {
                let text = decode_text(&decoded.bytes, &decoded.file_type)?;
                Ok(FileContent::Text { text: framed(&name, &text, max_text, None) })
            }
            FileKind::Pdf => {
                let max_pages = self.settings.max_pdf_pages;
                let bytes = decoded.bytes;
                let extracted =
                    tokio::task::spawn_blocking(move || extract_pdf(&bytes, max_pages, max_text))
                        .await
                        .map_err(|_| FileError::Invalid("the PDF could not be read (it is malformed)".to_owned()))??;
                if extracted.text.trim().is_empty() {
                    return Err(FileError::Invalid(
                        "the PDF has no extractable text (a scanned PDF needs OCR, which this gateway does not do)"
                            .to_owned(),
                    ));
                }
                let pages = (extracted.pages_read < extracted.total_pages).then(|| {
                    format!(
                        "[the gateway extracted the text of the first {} of {} pages]",
                        extracted.pages_read, extracted.total_pages
                    )
                });
                Ok(FileContent::Text { text: framed(&name, &extracted.text, max_text, pages) })
            }
        }
    }

    async fn read_image(&self, url: &str) -> Result<String, FileError> {
        let decoded = self.fetch(url, None, IMAGE_TYPES, ("input_image", "image_url")).await?;
        if decoded.file_type.kind != FileKind::Image {
            return Err(FileError::Invalid(format!(
                "image_url is {}, not an image of a supported type (PNG, JPEG, GIF or WebP)",
                decoded.file_type.media_type
            )));
        }
        Ok(data_url(&decoded.file_type.media_type, &decoded.bytes))
    }
}

/// The `Accept` header of an `image_url` fetch: the image types a model is sent.
const IMAGE_TYPES: &str = "image/png,image/jpeg,image/gif,image/webp";

/// The name the model sees: `filename`, else the last segment of `file_url`, else "file".
fn display_name(file: &InputFile) -> String {
    let from_url = file.file_url.as_deref().and_then(|url| {
        let path = url.split(['?', '#']).next().unwrap_or_default();
        path.rsplit('/').next().filter(|s| !s.is_empty()).map(str::to_owned)
    });
    file.filename.clone().filter(|f| !f.trim().is_empty()).or(from_url).unwrap_or_else(|| "file".to_owned())
}

/// A file's text as the model gets it: headed with its name, cut to `max_bytes` (the model is
/// told), with a note (pages left out) when there is one.
fn framed(name: &str, text: &str, max_bytes: usize, note: Option<String>) -> String {
    let text = text.trim_matches(['\n', '\r']);
    let mut shown = text;
    let mut cut_note = None;
    if text.len() > max_bytes {
        let mut cut = max_bytes;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        shown = &text[..cut];
        cut_note =
            Some(format!("[the gateway cut this file's text: the first {cut} of {} bytes are shown]", text.len()));
    }
    let mut out = format!("--- file: {name} ---\n{shown}\n");
    for note in [cut_note, note].into_iter().flatten() {
        out.push_str(&note);
        out.push('\n');
    }
    out.push_str(&format!("--- end of file: {name} ---"));
    out
}

/// Text in the declared charset, else the one its BOM names, else UTF-8 (invalid sequences
/// replaced). Bytes with NULs and no UTF-16 BOM are not text.
fn decode_text(bytes: &[u8], file_type: &FileType) -> Result<String, FileError> {
    let declared = file_type.charset.as_deref().and_then(|label| encoding_rs::Encoding::for_label(label.as_bytes()));
    let bom = encoding_rs::Encoding::for_bom(bytes).map(|(encoding, _)| encoding);
    let encoding = declared.or(bom).unwrap_or(encoding_rs::UTF_8);
    let utf16 = encoding == encoding_rs::UTF_16LE || encoding == encoding_rs::UTF_16BE;
    if !utf16 && bytes[..bytes.len().min(8192)].contains(&0) {
        return Err(FileError::Invalid(format!(
            "the file is declared as {} but its content is not text",
            file_type.media_type
        )));
    }
    let (text, _, _) = encoding.decode(bytes);
    Ok(text.into_owned())
}

/// A PDF's text, page by page.
#[derive(Debug)]
struct PdfText {
    text: String,
    pages_read: usize,
    total_pages: usize,
}

/// Extract the text of at most `max_pages` pages, stopping once more than `max_bytes` of text is
/// in hand (the caller cuts it). Runs on a blocking thread: pdf-extract panics on some malformed
/// files, which the caller sees as a failed task.
fn extract_pdf(bytes: &[u8], max_pages: usize, max_bytes: usize) -> Result<PdfText, FileError> {
    let unreadable = || FileError::Invalid("the PDF could not be read (it is damaged, or not a PDF)".to_owned());
    let mut document = load_pdf(bytes).ok_or_else(unreadable)?;
    if document.is_encrypted() && document.decrypt("").is_err() {
        return Err(FileError::Invalid("the PDF is encrypted with a password".to_owned()));
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

/// Most bytes the streams of one PDF may decompress to, all together. pdf-extract decompresses
/// each stream it reads whole, in memory, so a small file of highly compressed streams (a
/// "decompression bomb") is refused here first, by decompressing into a bounded buffer.
const MAX_PDF_INFLATED_BYTES: usize = 128 << 20;

/// Longest output one LZW code can produce: 12-bit codes, so at most 4,096 entries, each one byte
/// longer than the entry it extends. Bounds an LZW stream's size without decoding it.
const LZW_MAX_EXPANSION: usize = 4096;

/// Refuse `document` when its streams (images aside: their pixels are never decoded for text)
/// would decompress to more than `limit` bytes together.
fn check_inflated_size(document: &pdf_extract::Document, limit: usize) -> Result<(), FileError> {
    let too_large = || {
        FileError::Invalid(format!(
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
        let mut data = std::borrow::Cow::Borrowed(stream.content.as_slice());
        for filter in filters {
            data = match filter {
                b"FlateDecode" => std::borrow::Cow::Owned(inflate_at_most(&data, budget).ok_or_else(too_large)?),
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
    fn text_is_headed_with_the_name_and_cut_on_a_character_boundary() {
        assert_eq!(framed("a.md", "\nhello\n", 100, None), "--- file: a.md ---\nhello\n--- end of file: a.md ---");
        let cut = framed("a.txt", "abcé and more", 4, Some("[note]".into()));
        assert_eq!(
            cut,
            "--- file: a.txt ---\nabc\n[the gateway cut this file's text: the first 3 of 14 bytes are shown]\n[note]\n\
             --- end of file: a.txt ---"
        );
    }

    #[test]
    fn text_is_decoded_in_its_charset_and_binary_is_refused() {
        let t = |charset: Option<&str>| FileType {
            media_type: "text/plain".into(),
            kind: FileKind::Text,
            charset: charset.map(str::to_owned),
        };
        assert_eq!(decode_text(b"caf\xe9", &t(Some("windows-1252"))).unwrap(), "café");
        assert_eq!(decode_text(b"\xff\xfeh\x00i\x00", &t(None)).unwrap(), "hi");
        assert!(decode_text(b"PK\x03\x04\x00\x00", &t(None)).is_err());
    }

    #[test]
    fn a_file_without_a_name_is_named_by_its_url() {
        let file = |name: Option<&str>, url: Option<&str>| InputFile {
            filename: name.map(str::to_owned),
            file_data: None,
            file_url: url.map(str::to_owned),
            file_id: None,
            model_content: None,
        };
        assert_eq!(display_name(&file(None, Some("https://x.org/docs/r.pdf?sig=1"))), "r.pdf");
        assert_eq!(display_name(&file(Some("mine.pdf"), Some("https://x.org/r.pdf"))), "mine.pdf");
        assert_eq!(display_name(&file(None, None)), "file");
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
            Err(FileError::Invalid(message)) => assert!(message.contains("more than 16 MiB"), "{message}"),
            other => panic!("not refused: {other:?}"),
        }
        assert!(check_inflated_size(&document, 128 << 20).is_ok(), "within the limit it is read");
        let small = pdf_with_deflated_content(b"BT /F1 12 Tf 72 712 Td (Hello) Tj ET");
        let document = pdf_extract::Document::load_mem(&small).expect("a valid PDF");
        assert!(check_inflated_size(&document, 1024).is_ok());
    }

    #[tokio::test]
    async fn image_urls_on_loopback_or_private_addresses_are_refused_before_any_connection() {
        let files = InputFiles::new(InputFileSettings::default()).unwrap();
        for url in ["http://127.0.0.1:9/cat.png", "http://[::1]/cat.png", "http://10.0.0.1/cat.png"] {
            match files.read_image(url).await {
                Err(FileError::Invalid(message)) => {
                    assert!(message.starts_with("image_url could not be fetched"), "{url}: {message}")
                }
                other => panic!("{url} not refused: {other:?}"),
            }
        }
        assert!(matches!(files.read_image("file:///etc/passwd").await, Err(FileError::Invalid(_))));
    }

    #[test]
    fn malformed_pdfs_are_an_error_not_a_crash() {
        for bytes in [&b"%PDF-1.4 garbage"[..], b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog", b"not a PDF"] {
            match extract_pdf(bytes, 10, 1000) {
                Err(FileError::Invalid(message)) => {
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
            Err(FileError::Invalid(message)) => assert!(message.contains("more than 16 MiB"), "{message}"),
            other => panic!("not refused: {other:?}"),
        }
    }
}
