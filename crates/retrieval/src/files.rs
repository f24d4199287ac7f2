//! The Files API's operations, for one owner: store an upload, list, retrieve, read and delete
//! files (see [`Retrieval::files`]). Another owner's file is "not found", found with the same one
//! lookup; a file past its `expires_at` is gone too.

use std::time::{SystemTime, UNIX_EPOCH};

use respgw_protocol::ApiError;
use respgw_protocol::files::{CheckedUpload, FileObject, PageQuery};
use respgw_protocol::ids::{IdKind, new_id};
use respgw_protocol::input_file::{self, FileKind};
use respgw_protocol::listing::{Deleted, ListPage};
use respgw_store_api::retrieval::{FileRecord, Page};

use crate::Retrieval;

/// Files per page when a list names no `limit`, and the largest `limit` (as OpenAI's).
pub const DEFAULT_FILE_PAGE: usize = 10_000;

/// An upload as the server received it: its name, checked form fields and bytes.
#[derive(Debug)]
pub struct Upload {
    /// From [`respgw_protocol::files::check_filename`].
    pub filename: String,
    pub fields: CheckedUpload,
    pub content: Vec<u8>,
}

/// The Files API for one owner (see [`Retrieval::files`]).
pub struct Files<'a> {
    retrieval: &'a Retrieval,
    /// The tenant asking: it sees and changes its own files only.
    owner: &'a str,
}

impl Retrieval {
    /// The Files API as `owner` sees it.
    pub fn files<'a>(&'a self, owner: &'a str) -> Files<'a> {
        Files { retrieval: self, owner }
    }
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// 404 for a file id the owner has no file under; `param` names where the id came from.
pub fn file_not_found(id: &str, param: &str) -> ApiError {
    ApiError {
        status: 404,
        error_type: respgw_protocol::ErrorType::InvalidRequestError,
        message: format!("No file found with id '{id}'."),
        param: Some(param.to_owned()),
        code: Some("not_found".to_owned()),
    }
}

/// Whether a stored file has expired (its `expires_at` has passed): it is then gone for clients.
pub fn is_expired(record: &FileRecord, now: i64) -> bool {
    record.expires_at.is_some_and(|at| at <= now)
}

/// Whether an upload of this name and content can be used: a file retrieval extracts text from,
/// or, for `user_data`, an image an `input_file` sends the model.
pub fn is_usable_upload(filename: &str, purpose: &str, content: &[u8]) -> bool {
    if crate::extract::is_supported(filename, &content[..content.len().min(8192)]) {
        return true;
    }
    purpose == "user_data"
        && input_file::file_type(None, Some(filename))
            .is_ok_and(|t| t.kind == FileKind::Image && input_file::check_signature(&t, content).is_ok())
}

/// A stored file as the Files API shows it.
pub fn object(record: FileRecord) -> FileObject {
    FileObject::new(record.id, record.bytes, record.created_at, record.expires_at, record.filename, record.purpose)
}

impl Files<'_> {
    /// Store an upload: not empty, of a type the gateway reads (400 `unsupported_file`
    /// otherwise); nothing is stored when it is refused.
    pub async fn create(&self, upload: Upload) -> Result<FileObject, ApiError> {
        if upload.content.is_empty() {
            return Err(ApiError::invalid("file", "The uploaded file is empty."));
        }
        if !is_usable_upload(&upload.filename, &upload.fields.purpose, &upload.content) {
            return Err(ApiError::invalid(
                "file",
                format!(
                    "'{}' is not a file type this gateway can read: upload text (plain text, Markdown, code, \
                     JSON, HTML) or PDF{}.",
                    upload.filename,
                    if upload.fields.purpose == "user_data" { ", or an image (PNG, JPEG, GIF, WebP)" } else { "" }
                ),
            )
            .with_code("unsupported_file"));
        }
        let created_at = unix_now();
        let record = FileRecord {
            id: new_id(IdKind::File),
            owner: self.owner.to_owned(),
            filename: upload.filename,
            purpose: upload.fields.purpose,
            bytes: upload.content.len() as u64,
            created_at,
            expires_at: upload.fields.expires_after_seconds.map(|s| created_at + s),
        };
        self.retrieval.store().create_file(record.clone(), upload.content).await?;
        Ok(object(record))
    }

    /// A page of the owner's files, by purpose when given.
    pub async fn list(&self, query: PageQuery, purpose: Option<String>) -> Result<ListPage<FileObject>, ApiError> {
        let page =
            Page { after: query.after, before: query.before, limit: query.limit, newest_first: query.newest_first };
        let listed = self.retrieval.store().files(self.owner, purpose.as_deref(), &page).await?;
        let now = unix_now();
        let data = listed.data.into_iter().filter(|f| !is_expired(f, now)).map(object).collect();
        Ok(ListPage::new(data, listed.has_more, |f: &FileObject| &f.id))
    }

    /// The file `id`'s record; 404 when the owner has none. An expired file found here is
    /// deleted.
    async fn record(&self, id: &str) -> Result<FileRecord, ApiError> {
        match self.retrieval.store().file(self.owner, id).await? {
            Some(record) if !is_expired(&record, unix_now()) => Ok(record),
            Some(_) => {
                self.retrieval.store().delete_file(self.owner, id).await?;
                Err(file_not_found(id, "file_id"))
            }
            None => Err(file_not_found(id, "file_id")),
        }
    }

    pub async fn retrieve(&self, id: &str) -> Result<FileObject, ApiError> {
        self.record(id).await.map(object)
    }

    /// The file's name and bytes.
    pub async fn content(&self, id: &str) -> Result<(String, Vec<u8>), ApiError> {
        let record = self.record(id).await?;
        let bytes = self.retrieval.store().file_content(self.owner, id).await?;
        bytes.map(|b| (record.filename, b)).ok_or_else(|| file_not_found(id, "file_id"))
    }

    /// Delete a file, and it from every vector store of the owner.
    pub async fn delete(&self, id: &str) -> Result<Deleted, ApiError> {
        if self.retrieval.store().delete_file(self.owner, id).await? {
            Ok(Deleted::new(id.to_owned(), "file"))
        } else {
            Err(file_not_found(id, "file_id"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(expires_at: Option<i64>) -> FileRecord {
        FileRecord {
            id: "file-1".into(),
            owner: "o".into(),
            filename: "a.md".into(),
            purpose: "assistants".into(),
            bytes: 1,
            created_at: 0,
            expires_at,
        }
    }

    #[test]
    fn a_file_expires_at_its_time() {
        assert!(is_expired(&record(Some(5)), 5));
        assert!(!is_expired(&record(Some(6)), 5));
        assert!(!is_expired(&record(None), i64::MAX));
    }

    #[test]
    fn images_are_uploads_for_input_file_only() {
        let png = b"\x89PNG\r\n\x1a\nrest";
        assert!(is_usable_upload("a.png", "user_data", png));
        assert!(!is_usable_upload("a.png", "assistants", png));
        assert!(!is_usable_upload("a.png", "user_data", b"not a png"));
        assert!(is_usable_upload("notes.md", "assistants", b"# notes"));
        assert!(!is_usable_upload("tool.exe", "user_data", b"MZ\x90\x00"));
    }
}
