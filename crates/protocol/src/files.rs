//! The Files API's wire types: the fields of an upload (`POST /v1/files`, multipart) with their
//! checks, the query of a list (`purpose`, `limit`, `order`, `after`, `before`), and the file
//! object clients get back.
//!
//! The file's bytes never pass through here: the server streams them, and the retrieval crate
//! stores them.

use serde::Serialize;

use crate::ApiError;

/// The purposes an upload may name: files for `file_search` and for `input_file`.
pub const PURPOSES: &[&str] = &["assistants", "user_data"];

/// Longest file name kept, in characters.
pub const MAX_FILENAME_CHARS: usize = 255;

/// Shortest and longest `expires_after.seconds` of an upload (one hour to thirty days, as OpenAI).
const EXPIRY_SECONDS: std::ops::RangeInclusive<i64> = 3600..=2_592_000;

/// The text fields of an upload form, as they arrived (the `file` part is the server's).
#[derive(Debug, Default)]
pub struct UploadFields {
    purpose: Option<String>,
    expires_anchor: Option<String>,
    expires_seconds: Option<String>,
}

/// An upload's fields, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedUpload {
    /// One of [`PURPOSES`].
    pub purpose: String,
    /// Seconds after creation the file is deleted; `None`: kept until deleted.
    pub expires_after_seconds: Option<i64>,
}

impl UploadFields {
    /// Whether a form field of this name is one of the upload's text fields.
    pub fn knows(name: &str) -> bool {
        matches!(name, "purpose" | "expires_after[anchor]" | "expires_after[seconds]")
    }

    /// Keep a text field (one [`UploadFields::knows`]); others are ignored.
    pub fn set(&mut self, name: &str, value: String) {
        match name {
            "purpose" => self.purpose = Some(value),
            "expires_after[anchor]" => self.expires_anchor = Some(value),
            "expires_after[seconds]" => self.expires_seconds = Some(value),
            _ => {}
        }
    }

    /// Check the fields: `purpose` is required and one of [`PURPOSES`]; `expires_after` is
    /// `anchor` `created_at` with `seconds` from 3600 to 2592000, both or neither.
    pub fn check(self) -> Result<CheckedUpload, ApiError> {
        let purpose = match self.purpose {
            None => {
                return Err(ApiError::invalid("purpose", "Missing required parameter: 'purpose'.")
                    .with_code("missing_required_parameter"));
            }
            Some(p) if PURPOSES.contains(&p.as_str()) => p,
            Some(p) => {
                return Err(ApiError::invalid(
                    "purpose",
                    format!("'purpose' must be one of {} on this gateway; got '{}'.", PURPOSES.join(", "), clip(&p)),
                ));
            }
        };
        let expires_after_seconds = match (self.expires_anchor, self.expires_seconds) {
            (None, None) => None,
            (anchor, seconds) => {
                if anchor.as_deref() != Some("created_at") {
                    return Err(ApiError::invalid(
                        "expires_after.anchor",
                        "'expires_after.anchor' must be 'created_at'.",
                    ));
                }
                let seconds = seconds.as_deref().and_then(|s| s.trim().parse::<i64>().ok());
                match seconds {
                    Some(s) if EXPIRY_SECONDS.contains(&s) => Some(s),
                    _ => {
                        return Err(ApiError::invalid(
                            "expires_after.seconds",
                            "'expires_after.seconds' must be an integer from 3600 (one hour) to 2592000 (30 days).",
                        ));
                    }
                }
            }
        };
        Ok(CheckedUpload { purpose, expires_after_seconds })
    }
}

/// The name an upload is kept under: the last segment of the name the client gave (no
/// directories), which must not be blank; 400 naming `file` otherwise.
pub fn check_filename(name: Option<&str>) -> Result<String, ApiError> {
    let base = name.unwrap_or_default().rsplit(['/', '\\']).next().unwrap_or_default().trim();
    if base.is_empty() {
        return Err(ApiError::invalid("file", "The uploaded 'file' part needs a file name (e.g. notes.md)."));
    }
    if base.chars().count() > MAX_FILENAME_CHARS || base.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "file",
            format!("The file name must be at most {MAX_FILENAME_CHARS} characters, without control characters."),
        ));
    }
    Ok(base.to_owned())
}

/// The query of a list endpoint here: `limit`, `order`, `after`, `before`, and the endpoint's
/// own filters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageQuery {
    pub after: Option<String>,
    pub before: Option<String>,
    pub limit: usize,
    /// `order=desc` (the default).
    pub newest_first: bool,
}

impl PageQuery {
    /// Parse a raw query string: `limit` an integer from 1 to `max_limit` (default
    /// `default_limit`), `order` `asc` or `desc`; the values of the keys in `filters` are returned
    /// in that order (the last one given wins); other keys are ignored.
    pub fn parse(
        raw: Option<&str>,
        default_limit: usize,
        max_limit: usize,
        filters: &[&str],
    ) -> Result<(PageQuery, Vec<Option<String>>), ApiError> {
        let mut query = PageQuery { after: None, before: None, limit: default_limit, newest_first: true };
        let mut values = vec![None; filters.len()];
        for (key, value) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
            match key.as_ref() {
                "after" => query.after = Some(value.into_owned()).filter(|v| !v.is_empty()),
                "before" => query.before = Some(value.into_owned()).filter(|v| !v.is_empty()),
                "limit" => {
                    query.limit =
                        value.parse::<usize>().ok().filter(|n| (1..=max_limit).contains(n)).ok_or_else(|| {
                            ApiError::invalid("limit", format!("'limit' must be an integer between 1 and {max_limit}."))
                        })?;
                }
                "order" => {
                    query.newest_first = match value.as_ref() {
                        "desc" => true,
                        "asc" => false,
                        _ => return Err(ApiError::invalid("order", "'order' must be 'asc' or 'desc'.")),
                    };
                }
                other => {
                    if let Some(i) = filters.iter().position(|f| *f == other) {
                        values[i] = Some(value.into_owned());
                    }
                }
            }
        }
        Ok((query, values))
    }
}

/// A file as clients see it (`object: "file"`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileObject {
    pub id: String,
    object: &'static str,
    pub bytes: u64,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub filename: String,
    pub purpose: String,
    /// Always `processed`: an upload is usable once stored.
    status: &'static str,
    status_details: Option<String>,
}

impl FileObject {
    pub fn new(
        id: String,
        bytes: u64,
        created_at: i64,
        expires_at: Option<i64>,
        filename: String,
        purpose: String,
    ) -> Self {
        FileObject {
            id,
            object: "file",
            bytes,
            created_at,
            expires_at,
            filename,
            purpose,
            status: "processed",
            status_details: None,
        }
    }
}

/// At most 64 characters of a client's value in a message.
fn clip(value: &str) -> String {
    if value.chars().count() <= 64 {
        value.to_owned()
    } else {
        format!("{}…", value.chars().take(64).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> UploadFields {
        let mut f = UploadFields::default();
        for (k, v) in pairs {
            assert!(UploadFields::knows(k));
            f.set(k, (*v).to_owned());
        }
        f
    }

    #[test]
    fn purpose_is_required_and_limited_to_retrieval_purposes() {
        let e = fields(&[]).check().unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("purpose")));
        let e = fields(&[("purpose", "fine-tune")]).check().unwrap_err();
        assert!(e.message.contains("assistants, user_data"), "{}", e.message);
        assert_eq!(fields(&[("purpose", "user_data")]).check().unwrap().purpose, "user_data");
    }

    #[test]
    fn expiry_needs_the_created_at_anchor_and_seconds_in_range() {
        let ok = fields(&[
            ("purpose", "assistants"),
            ("expires_after[anchor]", "created_at"),
            ("expires_after[seconds]", "3600"),
        ]);
        assert_eq!(ok.check().unwrap().expires_after_seconds, Some(3600));
        let e = fields(&[("purpose", "assistants"), ("expires_after[seconds]", "3600")]).check().unwrap_err();
        assert_eq!(e.param.as_deref(), Some("expires_after.anchor"));
        let e = fields(&[
            ("purpose", "assistants"),
            ("expires_after[anchor]", "created_at"),
            ("expires_after[seconds]", "5"),
        ])
        .check()
        .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("expires_after.seconds"));
    }

    #[test]
    fn file_names_lose_their_directories_and_must_not_be_blank() {
        assert_eq!(check_filename(Some("../a/b/notes.md")).unwrap(), "notes.md");
        assert_eq!(check_filename(Some("C:\\docs\\x.txt")).unwrap(), "x.txt");
        for bad in [None, Some(""), Some("dir/"), Some("  ")] {
            assert_eq!(check_filename(bad).unwrap_err().param.as_deref(), Some("file"), "{bad:?}");
        }
        assert!(check_filename(Some("a\nb.txt")).is_err());
    }

    #[test]
    fn page_queries_check_limit_and_order_and_collect_filters() {
        let (q, f) =
            PageQuery::parse(Some("limit=5&order=asc&after=file-1&purpose=assistants&x=1"), 20, 100, &["purpose"])
                .unwrap();
        assert_eq!(q, PageQuery { after: Some("file-1".into()), before: None, limit: 5, newest_first: false });
        assert_eq!(f, [Some("assistants".to_owned())]);
        let (q, f) = PageQuery::parse(None, 20, 100, &["filter"]).unwrap();
        assert_eq!((q.limit, q.newest_first, f), (20, true, vec![None]));
        for bad in ["limit=0", "limit=101", "limit=x", "order=up"] {
            let e = PageQuery::parse(Some(bad), 20, 100, &[]).unwrap_err();
            assert_eq!(e.status, 400, "{bad}");
        }
    }

    #[test]
    fn a_file_object_reads_as_openai_writes_it() {
        let o = FileObject::new("file-1".into(), 3, 10, None, "a.txt".into(), "assistants".into());
        assert_eq!(
            serde_json::to_value(o).unwrap(),
            serde_json::json!({"id":"file-1","object":"file","bytes":3,"created_at":10,"expires_at":null,
                "filename":"a.txt","purpose":"assistants","status":"processed","status_details":null})
        );
    }
}
