//! The embedder: an OpenAI-compatible `POST {base_url}/embeddings` (OpenAI, vLLM, llama.cpp's
//! server, Ollama …), called in batches of `batch_size` inputs.
//!
//! A batch that fails with 429, a 5xx, a timeout or a connection error is retried up to
//! [`MAX_ATTEMPTS`] times in all, after a growing pause (or the server's `Retry-After`, within
//! bounds); any other failure ends the call at once with what the server said. Every vector of a
//! call must have the same length; each is L2-normalised, so a dot product is their cosine.

use std::sync::OnceLock;
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;
use serde_json::json;

use crate::EmbeddingSettings;

/// Requests per batch, the first included, before a transient failure is final.
pub const MAX_ATTEMPTS: u32 = 4;
/// The pause before the first retry; each next one doubles.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest pause before a retry, whatever `Retry-After` asks.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Connecting to the embedding server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// One whole `/embeddings` request (a batch of long chunks on a CPU server is slow).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// Why texts could not be embedded: a sentence for a vector-store file's `last_error` or a
/// search's error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedError(pub String);

impl std::fmt::Display for EmbedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The client of one embedding endpoint. Cheap to clone.
#[derive(Clone)]
pub struct Embedder {
    settings: EmbeddingSettings,
    url: String,
    client: std::sync::Arc<OnceLock<Result<reqwest::Client, String>>>,
}

#[derive(Deserialize)]
struct EmbeddingList {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    index: usize,
    embedding: EmbeddingData,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum EmbeddingData {
    Floats(Vec<f32>),
    Base64(String),
}

impl Embedder {
    pub fn new(settings: EmbeddingSettings) -> Self {
        let url = format!("{}/embeddings", settings.base_url.trim_end_matches('/'));
        Embedder { settings, url, client: Default::default() }
    }

    /// The embedding model's name.
    pub fn model(&self) -> &str {
        &self.settings.model
    }

    /// The HTTP client, built on first use (the process installs the TLS provider at startup).
    fn client(&self) -> Result<&reqwest::Client, EmbedError> {
        self.client
            .get_or_init(|| {
                reqwest::Client::builder()
                    .connect_timeout(CONNECT_TIMEOUT)
                    .timeout(REQUEST_TIMEOUT)
                    .redirect(reqwest::redirect::Policy::none())
                    .tcp_nodelay(true)
                    .build()
                    .map_err(|e| format!("the embedding client could not be set up ({e})"))
            })
            .as_ref()
            .map_err(|e| EmbedError(e.clone()))
    }

    /// The embeddings of `texts`, in order, L2-normalised, all of one length; each text cut to
    /// `max_input_tokens` first when set.
    pub async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let cut: Vec<String>;
        let texts = match self.settings.max_input_tokens {
            Some(max) => {
                cut = texts.iter().map(|t| crate::chunk::truncate_to_tokens(t, max).to_owned()).collect();
                &cut
            }
            None => texts,
        };
        let mut vectors: Vec<Vec<f32>> = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.settings.batch_size.max(1)) {
            let batch_vectors = self.embed_batch(batch).await?;
            if let Some(first) = vectors.first().or(batch_vectors.first())
                && let Some(other) = batch_vectors.iter().find(|v| v.len() != first.len())
            {
                return Err(EmbedError(format!(
                    "the embedding model '{}' returned vectors of different lengths ({} and {})",
                    self.settings.model,
                    first.len(),
                    other.len()
                )));
            }
            vectors.extend(batch_vectors);
        }
        Ok(vectors)
    }

    /// One batch, retried on transient failures.
    async fn embed_batch(&self, batch: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut attempt = 1;
        loop {
            match self.request(batch).await {
                Ok(vectors) => return Ok(vectors),
                Err(Failure::Final(error)) => return Err(error),
                Err(Failure::Transient(error, retry_after)) => {
                    if attempt >= MAX_ATTEMPTS {
                        return Err(EmbedError(format!("{} (after {MAX_ATTEMPTS} attempts)", error.0)));
                    }
                    let backoff = FIRST_BACKOFF * 2u32.pow(attempt - 1);
                    let pause = retry_after.unwrap_or(backoff).min(MAX_BACKOFF);
                    tracing::debug!(attempt, ?pause, "embedding request failed, retrying: {}", error.0);
                    tokio::time::sleep(pause).await;
                    attempt += 1;
                }
            }
        }
    }

    async fn request(&self, batch: &[String]) -> Result<Vec<Vec<f32>>, Failure> {
        let model = &self.settings.model;
        let mut request = self.client().map_err(Failure::Final)?.post(&self.url).json(&json!({
            "model": model,
            "input": batch,
            "encoding_format": "float",
        }));
        if let Some(key) = &self.settings.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|e| {
            let what = if e.is_timeout() { "timed out" } else { "could not be reached" };
            Failure::Transient(EmbedError(format!("the embedding endpoint {} {what}", self.url)), None)
        })?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let body = response.text().await.unwrap_or_default();
            return Err(failure(status.as_u16(), model, server_message(&body), retry_after));
        }
        let body = response.bytes().await.map_err(|_| {
            Failure::Transient(EmbedError(format!("the embedding endpoint {} closed its answer early", self.url)), None)
        })?;
        self.parse(&body, batch.len()).map_err(Failure::Final)
    }

    /// The vectors of an answer to `inputs` texts, by `index`, normalised.
    fn parse(&self, body: &[u8], inputs: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
        let model = &self.settings.model;
        let invalid = |what: &str| EmbedError(format!("the embedding endpoint's answer for model '{model}' {what}"));
        let list: EmbeddingList =
            serde_json::from_slice(body).map_err(|_| invalid("is not an OpenAI embedding list"))?;
        if list.data.len() != inputs {
            return Err(invalid(&format!("has {} embeddings for {inputs} inputs", list.data.len())));
        }
        let mut vectors: Vec<Option<Vec<f32>>> = vec![None; inputs];
        for item in list.data {
            let slot = vectors.get_mut(item.index).ok_or_else(|| invalid("has an embedding index out of range"))?;
            let vector = match item.embedding {
                EmbeddingData::Floats(floats) => floats,
                EmbeddingData::Base64(encoded) => {
                    decode_base64(&encoded).ok_or_else(|| invalid("has an embedding that is not base64 floats"))?
                }
            };
            if vector.is_empty() {
                return Err(invalid("has an empty embedding"));
            }
            *slot = Some(normalised(vector));
        }
        let vectors: Vec<Vec<f32>> =
            vectors.into_iter().collect::<Option<_>>().ok_or_else(|| invalid("repeats an embedding index"))?;
        if let Some(other) = vectors.iter().find(|v| v.len() != vectors[0].len()) {
            return Err(invalid(&format!("mixes vectors of {} and {} dimensions", vectors[0].len(), other.len())));
        }
        Ok(vectors)
    }
}

/// A failed request: worth retrying (with the server's `Retry-After`, if any) or not.
enum Failure {
    Transient(EmbedError, Option<Duration>),
    Final(EmbedError),
}

/// What an error answer means: an input too long for the model (whatever the status: llama.cpp
/// answers 500) is final and says what to change; 429 and 5xx are worth retrying; the rest is
/// final.
fn failure(status: u16, model: &str, message: Option<String>, retry_after: Option<Duration>) -> Failure {
    let said = message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
    if message.as_deref().is_some_and(input_too_long) {
        return Failure::Final(EmbedError(format!(
            "the embedding model '{model}' refused a chunk as too long (HTTP {status}{said}); lower the vector \
             store's chunking_strategy max_chunk_size_tokens, or set --embedding-max-input-tokens to what the model reads"
        )));
    }
    let error = EmbedError(format!("the embedding endpoint answered {status} for model '{model}'{said}"));
    if status == 429 || (500..600).contains(&status) {
        Failure::Transient(error, retry_after)
    } else {
        Failure::Final(error)
    }
}

/// Whether a server's error message says an input is longer than the model reads (llama.cpp:
/// "input (913 tokens) is too large to process"; vLLM and OpenAI: "maximum context length").
fn input_too_long(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    ["too large to process", "too long", "maximum context length", "maximum input length", "exceeds the max"]
        .iter()
        .any(|phrase| message.contains(phrase))
}

/// The `error.message` (or `error` string, or `detail`) of an error body, cut short.
fn server_message(body: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    let message = value
        .pointer("/error/message")
        .or_else(|| value.get("error").filter(|e| e.is_string()))
        .or_else(|| value.get("detail"))
        .and_then(serde_json::Value::as_str)?;
    Some(message.chars().take(300).collect())
}

/// Little-endian `f32`s in base64.
fn decode_base64(encoded: &str) -> Option<Vec<f32>> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
    if bytes.len() % 4 != 0 {
        return None;
    }
    Some(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

/// `vector` scaled to unit length (a zero vector stays zero).
pub fn normalised(mut vector: Vec<f32>) -> Vec<f32> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
    vector
}

#[cfg(test)]
mod tests {
    use respgw_testkit::ReplayUpstream;
    use respgw_testkit::embedding;

    use super::*;

    fn embedder(upstream: &ReplayUpstream, batch_size: usize) -> Embedder {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Embedder::new(EmbeddingSettings {
            base_url: upstream.base_url(),
            api_key: Some("embed-key".into()),
            model: "bag".into(),
            batch_size,
            max_input_tokens: None,
        })
    }

    fn texts(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("text number {i}")).collect()
    }

    #[tokio::test]
    async fn embeds_in_batches_in_order() {
        let upstream = ReplayUpstream::start().await.unwrap();
        let vectors = embedder(&upstream, 2).embed(&texts(5)).await.unwrap();
        assert_eq!(vectors.len(), 5);
        for (i, vector) in vectors.iter().enumerate() {
            let expected = embedding::embed(&format!("text number {i}"), embedding::DEFAULT_DIMENSIONS);
            assert!(vector.iter().zip(&expected).all(|(a, b)| (a - b).abs() < 1e-6), "{i}");
        }
        let requests = upstream.embedding_requests();
        let sizes: Vec<usize> = requests.iter().map(|r| r.body["input"].as_array().unwrap().len()).collect();
        assert_eq!(sizes, vec![2, 2, 1]);
        assert_eq!(requests[0].model.as_deref(), Some("bag"));
        assert_eq!(requests[0].headers["authorization"], "Bearer embed-key");
    }

    #[tokio::test]
    async fn texts_are_cut_to_the_models_input_length() {
        let upstream = ReplayUpstream::start().await.unwrap();
        let mut embedder = embedder(&upstream, 8);
        embedder.settings.max_input_tokens = Some(3);
        embedder.embed(&["one two three four five".to_owned(), "six".to_owned()]).await.unwrap();
        assert_eq!(upstream.embedding_requests()[0].body["input"], json!(["one two three", "six"]));
    }

    #[tokio::test]
    async fn transient_failures_are_retried() {
        let upstream = ReplayUpstream::start().await.unwrap();
        upstream.fail_embeddings(2, 429);
        let vectors = embedder(&upstream, 8).embed(&texts(1)).await.unwrap();
        assert_eq!(vectors.len(), 1);
        assert_eq!(upstream.embedding_requests().len(), 3);
    }

    #[tokio::test]
    async fn persistent_failures_end_after_the_last_attempt() {
        let upstream = ReplayUpstream::start().await.unwrap();
        upstream.fail_embeddings(100, 500);
        let error = embedder(&upstream, 8).embed(&texts(1)).await.unwrap_err();
        assert_eq!(
            error.0,
            format!(
                "the embedding endpoint answered 500 for model 'bag': replay: a scripted embedding failure \
                 (after {MAX_ATTEMPTS} attempts)"
            )
        );
        assert_eq!(upstream.embedding_requests().len(), MAX_ATTEMPTS as usize);
    }

    #[tokio::test]
    async fn client_errors_are_not_retried() {
        let upstream = ReplayUpstream::start().await.unwrap();
        upstream.fail_embeddings(1, 400);
        let error = embedder(&upstream, 8).embed(&texts(1)).await.unwrap_err();
        assert!(error.0.starts_with("the embedding endpoint answered 400"), "{error}");
        assert_eq!(upstream.embedding_requests().len(), 1);
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_is_a_clear_error() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let embedder = Embedder::new(EmbeddingSettings {
            base_url: "http://127.0.0.1:9/v1".into(),
            api_key: None,
            model: "m".into(),
            batch_size: 4,
            max_input_tokens: None,
        });
        let error = embedder.embed(&texts(1)).await.unwrap_err();
        assert_eq!(
            error.0,
            format!(
                "the embedding endpoint http://127.0.0.1:9/v1/embeddings could not be reached (after {MAX_ATTEMPTS} attempts)"
            )
        );
    }

    #[test]
    fn an_input_too_long_is_final_and_says_what_to_change() {
        let llama =
            "input (913 tokens) is too large to process. increase the physical batch size (current batch size: 512)";
        let Failure::Final(error) = failure(500, "minilm", Some(llama.into()), None) else { panic!("retried") };
        assert!(error.0.starts_with("the embedding model 'minilm' refused a chunk as too long (HTTP 500: input (913"));
        assert!(error.0.contains("--embedding-max-input-tokens"), "{error}");
        let vllm = "This model's maximum context length is 512 tokens. However, you requested 913 tokens.";
        assert!(matches!(failure(400, "m", Some(vllm.into()), None), Failure::Final(_)));
        assert!(matches!(failure(500, "m", Some("overloaded".into()), None), Failure::Transient(..)));
        assert!(matches!(failure(429, "m", None, None), Failure::Transient(..)));
        assert!(matches!(failure(401, "m", None, None), Failure::Final(_)));
    }

    #[test]
    fn answers_are_checked_and_normalised() {
        let embedder = Embedder::new(EmbeddingSettings {
            base_url: "http://x/v1".into(),
            api_key: None,
            model: "m".into(),
            batch_size: 4,
            max_input_tokens: None,
        });
        let two = json!({"data": [
            {"index": 1, "embedding": [0.0, 2.0]},
            {"index": 0, "embedding": [3.0, 4.0]},
        ]});
        let vectors = embedder.parse(two.to_string().as_bytes(), 2).unwrap();
        assert_eq!(vectors, vec![vec![0.6, 0.8], vec![0.0, 1.0]]);
        let encoded = base64::engine::general_purpose::STANDARD
            .encode([1.0f32, 0.0].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
        let b64 = json!({"data": [{"index": 0, "embedding": encoded}]});
        assert_eq!(embedder.parse(b64.to_string().as_bytes(), 1).unwrap(), vec![vec![1.0, 0.0]]);

        let mixed = json!({"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [1.0, 0.0]}]});
        assert!(embedder.parse(mixed.to_string().as_bytes(), 2).unwrap_err().0.contains("mixes vectors of 1 and 2"));
        let short = json!({"data": [{"index": 0, "embedding": [1.0]}]});
        assert!(embedder.parse(short.to_string().as_bytes(), 2).unwrap_err().0.contains("1 embeddings for 2 inputs"));
        let repeated = json!({"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]});
        assert!(embedder.parse(repeated.to_string().as_bytes(), 2).unwrap_err().0.contains("repeats"));
        assert!(embedder.parse(b"<html>", 1).unwrap_err().0.contains("not an OpenAI embedding list"));
    }
}
