//! Messages and their content parts (text, images, files, refusals).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ItemStatus;

/// Who speaks in a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageRole {
    User,
    Assistant,
    System,
    Developer,
}

/// A message with typed content parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageItem {
    pub id: String,
    pub role: MessageRole,
    pub status: ItemStatus,
    pub content: Vec<ContentPart>,
}

/// How closely the model should look at an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageDetail {
    Low,
    High,
    #[default]
    Auto,
}

/// One part of a message's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    InputText {
        text: String,
    },
    InputImage {
        /// A URL or a `data:` URL (an image is not named by `file_id`).
        image_url: String,
        #[serde(default)]
        detail: ImageDetail,
        /// The image as the model gets it when `image_url` is not a `data:` URL: the gateway
        /// fetched it (under its address policy) when the request arrived and keeps it here as a
        /// `data:` URL, so the model server is never handed a URL to fetch and a continuation
        /// sends the same image. Stored with the item; never shown to clients (see
        /// [`Item::client_view`](super::Item::client_view)).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model_image_url: Option<String>,
    },
    InputFile(InputFile),
    OutputText {
        text: String,
        #[serde(default)]
        annotations: Vec<Value>,
        #[serde(default)]
        logprobs: Vec<Value>,
    },
    Refusal {
        refusal: String,
    },
}

/// `{"type":"input_file",…}`: a file the client sent, by content (`file_data`), by address
/// (`file_url`) or as an uploaded file (`file_id`), kept as sent, plus what the gateway made of
/// it for the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// Base64, or a `data:<media type>;base64,…` URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_url: Option<String>,
    /// An uploaded file (`POST /v1/files`) of the request's tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_id: Option<String>,
    /// What the model is given for this file, made once when the request arrived (the file
    /// fetched, its text extracted), so that a continuation shows the model the same thing
    /// without fetching again. Stored with the item; never shown to clients (see
    /// [`Item::client_view`](super::Item::client_view)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_content: Option<FileContent>,
}

/// What the model gets for an `input_file`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FileContent {
    /// The file's text (a text file's, or a PDF's extracted text), headed with its name.
    Text { text: String },
    /// An image file, as a `data:` URL (sent like an `input_image`).
    Image { image_url: String },
}

impl ContentPart {
    /// An `output_text` part with empty annotations and logprobs, as the gateway emits them.
    pub fn output_text(text: impl Into<String>) -> Self {
        ContentPart::OutputText { text: text.into(), annotations: Vec::new(), logprobs: Vec::new() }
    }
}
