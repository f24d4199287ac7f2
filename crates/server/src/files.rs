//! The `/v1/files` routes: upload (multipart), list, retrieve, download and delete a file.
//!
//! The upload is read from the body as it streams (`multer`), counting the file's bytes against
//! `--max-file-bytes`: past it the answer is 413 and nothing is stored. The rest of such a body
//! is read and dropped (up to [`DRAIN_BYTES`] more), so a client that sends its whole body before
//! reading the reply still gets the 413; a bigger one has its connection closed after the reply.
//! The rest is [`respgw_retrieval::files`]' for the request's tenant.

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use respgw_protocol::files::{PageQuery, UploadFields, check_filename};
use respgw_protocol::{ApiError, ErrorType};
use respgw_retrieval::Retrieval;
use respgw_retrieval::files::{DEFAULT_FILE_PAGE, Upload};

use crate::auth::Tenant;
use crate::error::{HttpError, path_rejection};

/// What the Files and vector-store routes need.
#[derive(Clone)]
pub struct RetrievalState {
    pub retrieval: Retrieval,
    /// Largest upload accepted, in bytes (`--max-file-bytes`).
    pub max_file_bytes: usize,
}

/// Bytes of a text field of the upload form (`purpose`, `expires_after[…]`) read at most.
const MAX_FIELD_BYTES: usize = 1024;
/// Bytes of form fields besides the file (names, boundaries, unknown fields) a body may carry.
const FORM_OVERHEAD_BYTES: usize = 64 * 1024;
/// Bytes of a too-large upload read and dropped after the limit, before the 413 is sent.
pub const DRAIN_BYTES: usize = 64 * 1024 * 1024;

fn malformed(e: &multer::Error) -> HttpError {
    let detail = match e {
        multer::Error::IncompleteStream | multer::Error::IncompleteFieldData { .. } => {
            "the body ended before the form was complete"
        }
        _ => "it is not valid multipart/form-data",
    };
    HttpError(ApiError::invalid_body(format!("Could not read the upload: {detail}.")))
}

fn too_large(limit: usize) -> HttpError {
    HttpError(ApiError {
        status: 413,
        error_type: ErrorType::InvalidRequestError,
        message: format!("The file is larger than this gateway's upload limit of {limit} bytes."),
        param: Some("file".to_owned()),
        code: Some("file_too_large".to_owned()),
    })
}

/// The upload form, read: its text fields and the file part (its name and bytes).
struct Form {
    fields: UploadFields,
    file: Option<(Option<String>, Vec<u8>)>,
}

/// Why reading the form stopped.
enum FormError {
    Invalid(HttpError),
    /// The file passed the limit; the body was drained to its end (`true`) or not.
    TooLarge {
        drained: bool,
    },
}

impl From<HttpError> for FormError {
    fn from(e: HttpError) -> Self {
        FormError::Invalid(e)
    }
}

/// Read the form, holding the file to `max_file_bytes` and everything else to
/// [`FORM_OVERHEAD_BYTES`].
async fn read_form(multipart: &mut multer::Multipart<'static>, max_file_bytes: usize) -> Result<Form, FormError> {
    let mut form = Form { fields: UploadFields::default(), file: None };
    let mut other_bytes = 0usize;
    while let Some(mut field) = multipart.next_field().await.map_err(|e| malformed(&e))? {
        let name = field.name().unwrap_or_default().to_owned();
        if name == "file" {
            if form.file.is_some() {
                return Err(HttpError(ApiError::invalid("file", "Send one 'file' part per upload.")).into());
            }
            let filename = field.file_name().map(str::to_owned);
            let mut bytes = Vec::new();
            while let Some(chunk) = field.chunk().await.map_err(|e| malformed(&e))? {
                if bytes.len() + chunk.len() > max_file_bytes {
                    drop(bytes);
                    let drained = drain(multipart, field).await;
                    return Err(FormError::TooLarge { drained });
                }
                bytes.extend_from_slice(&chunk);
            }
            form.file = Some((filename, bytes));
            continue;
        }
        let keep = UploadFields::knows(&name);
        let mut value = Vec::new();
        while let Some(chunk) = field.chunk().await.map_err(|e| malformed(&e))? {
            other_bytes += chunk.len();
            if other_bytes > FORM_OVERHEAD_BYTES || (keep && value.len() + chunk.len() > MAX_FIELD_BYTES) {
                return Err(HttpError(ApiError::invalid(
                    name.as_str(),
                    format!("The upload's form field '{name}' is too long."),
                ))
                .into());
            }
            if keep {
                value.extend_from_slice(&chunk);
            }
        }
        if keep {
            let Ok(text) = String::from_utf8(value) else {
                return Err(HttpError(ApiError::invalid(name.as_str(), format!("'{name}' must be UTF-8 text."))).into());
            };
            form.fields.set(&name, text);
        }
    }
    Ok(form)
}

/// Read and drop the rest of the body (the rest of `field`, then every further field), at most
/// [`DRAIN_BYTES`]; whether it ended.
async fn drain(multipart: &mut multer::Multipart<'static>, field: multer::Field<'static>) -> bool {
    let mut dropped = 0usize;
    let mut current = Some(field);
    loop {
        // Each field is dropped before the next is asked for, as multer requires.
        if let Some(mut field) = current.take() {
            loop {
                match field.chunk().await {
                    Ok(Some(chunk)) => {
                        dropped += chunk.len();
                        if dropped > DRAIN_BYTES {
                            return false;
                        }
                    }
                    Ok(None) => break,
                    Err(_) => return false,
                }
            }
        }
        current = match multipart.next_field().await {
            Ok(Some(next)) => Some(next),
            Ok(None) => return true,
            Err(_) => return false,
        };
    }
}

/// `POST /v1/files`: `multipart/form-data` with `file`, `purpose` and optionally
/// `expires_after[anchor]`/`expires_after[seconds]`.
pub async fn upload(
    State(state): State<RetrievalState>,
    tenant: Tenant,
    request: Request,
) -> Result<Response, HttpError> {
    let boundary = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| multer::parse_boundary(v).ok())
        .ok_or_else(|| {
            HttpError(ApiError::invalid_body(
                "An upload must be sent as multipart/form-data with a 'file' part and a 'purpose' field.",
            ))
        })?;
    let mut multipart = multer::Multipart::new(request.into_body().into_data_stream(), boundary);
    let form = match read_form(&mut multipart, state.max_file_bytes).await {
        Ok(form) => form,
        Err(FormError::Invalid(e)) => return Err(e),
        Err(FormError::TooLarge { drained }) => {
            let mut response = too_large(state.max_file_bytes).into_response();
            if !drained {
                response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            return Ok(response);
        }
    };
    let fields = form.fields.check()?;
    let Some((filename, content)) = form.file else {
        return Err(HttpError(
            ApiError::invalid("file", "Missing required parameter: 'file'.").with_code("missing_required_parameter"),
        ));
    };
    let filename = check_filename(filename.as_deref())?;
    let upload = Upload { filename, fields, content };
    Ok(Json(state.retrieval.files(tenant.name()).create(upload).await?).into_response())
}

/// `GET /v1/files`: `purpose`, `limit` (1 to 10000), `order`, `after`.
pub async fn list(
    State(state): State<RetrievalState>,
    tenant: Tenant,
    RawQuery(query): RawQuery,
) -> Result<Response, HttpError> {
    let (query, filters) = PageQuery::parse(query.as_deref(), DEFAULT_FILE_PAGE, DEFAULT_FILE_PAGE, &["purpose"])?;
    let purpose = filters.into_iter().next().flatten();
    Ok(Json(state.retrieval.files(tenant.name()).list(query, purpose).await?).into_response())
}

/// `GET /v1/files/{file_id}`.
pub async fn retrieve(
    State(state): State<RetrievalState>,
    tenant: Tenant,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, HttpError> {
    let Path(id) = id.map_err(|_| path_rejection("file_id"))?;
    Ok(Json(state.retrieval.files(tenant.name()).retrieve(&id).await?).into_response())
}

/// `DELETE /v1/files/{file_id}`.
pub async fn delete(
    State(state): State<RetrievalState>,
    tenant: Tenant,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, HttpError> {
    let Path(id) = id.map_err(|_| path_rejection("file_id"))?;
    Ok(Json(state.retrieval.files(tenant.name()).delete(&id).await?).into_response())
}

/// `GET /v1/files/{file_id}/content`: the bytes, typed by the file's name, as an attachment.
pub async fn content(
    State(state): State<RetrievalState>,
    tenant: Tenant,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, HttpError> {
    let Path(id) = id.map_err(|_| path_rejection("file_id"))?;
    let (filename, bytes) = state.retrieval.files(tenant.name()).content(&id).await?;
    let media_type = respgw_protocol::input_file::file_type(None, Some(&filename))
        .map(|t| t.media_type)
        .unwrap_or_else(|_| "application/octet-stream".to_owned());
    let mut response = Body::from(bytes).into_response();
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&media_type) {
        headers.insert(header::CONTENT_TYPE, value);
    }
    if let Ok(value) = HeaderValue::from_str(&content_disposition(&filename)) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    Ok(response)
}

/// `attachment` with the name twice: plain ASCII (other characters and quotes as `_`) and
/// percent-encoded UTF-8 (RFC 6266 `filename*`).
fn content_disposition(filename: &str) -> String {
    let ascii: String = filename
        .chars()
        .map(|c| if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' { c } else { '_' })
        .collect();
    let mut encoded = String::new();
    for byte in filename.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    format!("attachment; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDARY: &str = "b0undary";

    /// A multipart form of `parts` (`(name, filename, bytes)`), delivered in 1 KiB pieces.
    fn form(parts: &[(&str, Option<&str>, &[u8])]) -> multer::Multipart<'static> {
        let mut body = Vec::new();
        for (name, filename, bytes) in parts {
            let file = filename.map(|f| format!("; filename=\"{f}\"")).unwrap_or_default();
            body.extend_from_slice(
                format!("--{BOUNDARY}\r\ncontent-disposition: form-data; name=\"{name}\"{file}\r\n\r\n").as_bytes(),
            );
            body.extend_from_slice(bytes);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
        let pieces: Vec<Result<bytes::Bytes, std::io::Error>> =
            body.chunks(1024).map(|c| Ok(bytes::Bytes::copy_from_slice(c))).collect();
        multer::Multipart::new(futures::stream::iter(pieces), BOUNDARY)
    }

    #[tokio::test]
    async fn a_form_gives_its_fields_and_file() {
        let mut m = form(&[("purpose", None, b"assistants"), ("x", None, b"ignored"), ("file", Some("a.md"), b"# hi")]);
        let form = read_form(&mut m, 100).await.ok().expect("a form");
        assert_eq!(form.fields.check().unwrap().purpose, "assistants");
        assert_eq!(form.file, Some((Some("a.md".to_owned()), b"# hi".to_vec())));
    }

    #[tokio::test]
    async fn a_file_past_the_limit_is_refused_after_the_body_is_drained() {
        let big = vec![b'a'; 10_000];
        let mut m = form(&[("file", Some("a.txt"), &big), ("purpose", None, b"assistants")]);
        assert!(matches!(read_form(&mut m, 9_999).await, Err(FormError::TooLarge { drained: true })));
        let mut m = form(&[("file", Some("a.txt"), &big)]);
        assert!(read_form(&mut m, 10_000).await.is_ok(), "exactly at the limit");
    }

    #[tokio::test]
    async fn long_fields_and_second_files_are_refused() {
        let long = vec![b'a'; MAX_FIELD_BYTES + 1];
        let mut m = form(&[("purpose", None, &long)]);
        let Err(FormError::Invalid(HttpError(e))) = read_form(&mut m, 100).await else { panic!("accepted") };
        assert_eq!(e.param.as_deref(), Some("purpose"));
        let mut m = form(&[("file", Some("a.md"), b"1"), ("file", Some("b.md"), b"2")]);
        let Err(FormError::Invalid(HttpError(e))) = read_form(&mut m, 100).await else { panic!("accepted") };
        assert_eq!(e.param.as_deref(), Some("file"));
    }

    #[test]
    fn the_download_names_the_file_in_ascii_and_utf8() {
        assert_eq!(content_disposition("a b.txt"), "attachment; filename=\"a b.txt\"; filename*=UTF-8''a%20b.txt");
        assert_eq!(content_disposition("é\"x.md"), "attachment; filename=\"__x.md\"; filename*=UTF-8''%C3%A9%22x.md");
    }
}
