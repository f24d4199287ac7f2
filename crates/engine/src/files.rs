//! `input_file` and `input_image` parts as the engine sees them: before the first model turn,
//! every file of the request's own input is read once by a [`FileReader`] (implemented in
//! `respgw-tools`: fetching a `file_url`, reading the tenant's uploaded file of a `file_id`,
//! extracting a PDF's text) and what the model gets is kept
//! on the part (`model_content`), so the chat request, the store and every continuation use the
//! same content. An `input_image` whose `image_url` is not a `data:` URL is fetched the same way
//! and kept as one (`model_image_url`): the model server is never handed a URL to fetch.

use async_trait::async_trait;
use respgw_protocol::ApiError;
use respgw_protocol::input_file::FileError;
use respgw_protocol::items::{FileContent, InputFile, Item};

use crate::chat::is_data_url;

/// Reads `input_file` parts for the model.
#[async_trait]
pub trait FileReader: Send + Sync {
    /// What the model gets for `file`, or why it cannot have it. May do network I/O (`file_url`)
    /// or read the store (`file_id`: one of `owner`'s uploaded files; another tenant's is
    /// unknown, like a missing one).
    async fn read(&self, owner: &str, file: &InputFile) -> Result<FileContent, FileError>;

    /// The image at `url` (an `input_image`'s `image_url` that is not a `data:` URL) as a
    /// `data:` URL, or why the model cannot have it. Does network I/O.
    async fn read_image(&self, url: &str) -> Result<String, FileError>;
}

/// Fill in `model_content` of every `input_file` and `model_image_url` of every `input_image`
/// given by URL in `input` (this request's own items; inherited ones were read when their request
/// arrived), for the request's tenant `owner`. A file or image that cannot be read is a 400
/// naming its part (`input[0].content[1]`); without a reader, any `input_file` or image URL is.
pub async fn read_input_files(
    reader: Option<&dyn FileReader>,
    owner: &str,
    input: &mut [Item],
) -> Result<(), ApiError> {
    read_files(reader, owner, input, "input").await
}

/// [`read_input_files`] for items that arrive under another field (`items` of the Conversations
/// API), so an error names it (`items[0].content[1]`).
pub async fn read_files(
    reader: Option<&dyn FileReader>,
    owner: &str,
    items: &mut [Item],
    field: &str,
) -> Result<(), ApiError> {
    for (i, item) in items.iter_mut().enumerate() {
        for (part, file) in item.input_files_mut() {
            let param = format!("{field}[{i}].{part}");
            let Some(reader) = reader else {
                return Err(ApiError::invalid(
                    param.clone(),
                    format!("{param}: input_file parts are not supported by this gateway."),
                ));
            };
            file.model_content = Some(reader.read(owner, file).await.map_err(|e| e.into_api_error(&param))?);
        }
        for (part, image_url, fetched) in item.input_images_mut() {
            if is_data_url(image_url) {
                continue;
            }
            let param = format!("{field}[{i}].{part}");
            let Some(reader) = reader else {
                return Err(ApiError::invalid(
                    param.clone(),
                    format!(
                        "{param}: input_image URLs are not supported by this gateway; send the image as a data: URL."
                    ),
                ));
            };
            *fetched = Some(reader.read_image(image_url).await.map_err(|e| e.into_api_error(&param))?);
        }
    }
    Ok(())
}
