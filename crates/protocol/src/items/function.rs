//! `function_call` items and their outputs: calls of client functions, which the client runs.

use serde::{Deserialize, Serialize};

use super::{ContentPart, ItemStatus};

/// A tool call the model made to a client-executed function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCallItem {
    pub id: String,
    pub call_id: String,
    pub name: String,
    /// The `namespace` tool the function belongs to, for functions declared inside one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The arguments as the JSON text the model produced.
    pub arguments: String,
    pub status: ItemStatus,
}

/// The result of a function call, sent by the client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCallOutputItem {
    pub id: String,
    pub call_id: String,
    pub output: FunctionOutput,
    pub status: ItemStatus,
}

/// A function result: plain text, or content parts (text, images and files).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum FunctionOutput {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl<'de> Deserialize<'de> for FunctionOutput {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OutputVisitor;

        impl<'de> serde::de::Visitor<'de> for OutputVisitor {
            type Value = FunctionOutput;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or an array of content parts")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<FunctionOutput, E> {
                Ok(FunctionOutput::Text(text.to_owned()))
            }

            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<FunctionOutput, E> {
                Ok(FunctionOutput::Text(text))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<FunctionOutput, A::Error> {
                Vec::<ContentPart>::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))
                    .map(FunctionOutput::Parts)
            }
        }

        deserializer.deserialize_any(OutputVisitor)
    }
}
