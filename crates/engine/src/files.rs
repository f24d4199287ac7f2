//! `input_file` parts as the engine sees them: before the first model turn, every file of the
//! request's own input is read once by a [`FileReader`] (implemented in `respgw-tools`: fetching a
//! `file_url`, extracting a PDF's text) and what the model gets is kept on the part
//! (`model_content`), so the chat request, the store and every continuation use the same content.

use async_trait::async_trait;
use respgw_protocol::ApiError;
use respgw_protocol::input_file::FileError;
use respgw_protocol::items::{FileContent, InputFile, Item};

/// Reads `input_file` parts for the model.
#[async_trait]
pub trait FileReader: Send + Sync {
    /// What the model gets for `file`, or why it cannot have it. May do network I/O (`file_url`).
    async fn read(&self, file: &InputFile) -> Result<FileContent, FileError>;
}

/// Fill in `model_content` of every `input_file` in `input` (this request's own items; inherited
/// ones were read when their request arrived). A file that cannot be read is a 400 naming its
/// part (`input[0].content[1]`); without a reader, any `input_file` is.
pub async fn read_input_files(reader: Option<&dyn FileReader>, input: &mut [Item]) -> Result<(), ApiError> {
    read_files(reader, input, "input").await
}

/// [`read_input_files`] for items that arrive under another field (`items` of the Conversations
/// API), so an error names it (`items[0].content[1]`).
pub async fn read_files(reader: Option<&dyn FileReader>, items: &mut [Item], field: &str) -> Result<(), ApiError> {
    for (i, item) in items.iter_mut().enumerate() {
        for (part, file) in item.input_files_mut() {
            let param = format!("{field}[{i}].{part}");
            let Some(reader) = reader else {
                return Err(ApiError::invalid(
                    param.clone(),
                    format!("{param}: input_file parts are not supported by this gateway."),
                ));
            };
            file.model_content = Some(reader.read(file).await.map_err(|e| e.into_api_error(&param))?);
        }
    }
    Ok(())
}
