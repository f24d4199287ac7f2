//! Sealed blobs: `reasoning.encrypted_content` — the model's reasoning sealed with a server key,
//! so a stateless client (Codex sends `store: false` and replays its whole history) can hand it
//! back next turn and the model keeps its reasoning context, without the gateway storing
//! anything — and a `compaction` item's `encrypted_content`, the summary of a compacted
//! conversation, which a client can neither read nor forge.
//!
//! A blob is `<marker>.<key-id>.<base64url(nonce ‖ ciphertext ‖ tag)>`, AES-256-GCM (ring) with a
//! random 96-bit nonce and the prefix `<marker>.<key-id>` as associated data, so a blob cannot be
//! moved to another key id. The marker names the blob's [`Purpose`] (`rgw1` reasoning, `rgw1c`
//! compaction summary): a blob sealed for one purpose does not open for the other, even relabelled. [`ReasoningKeys`] holds one current key (sealing) and any number of
//! older ones (opening only): rotating means adding a new key first in the list and keeping the
//! old one behind it for as long as clients may replay its blobs.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

/// What a blob holds; each purpose has its own marker, bound into the associated data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// `reasoning.encrypted_content`.
    Reasoning,
    /// A `compaction` item's `encrypted_content`.
    Compaction,
}

impl Purpose {
    /// Format marker at the start of every blob of this purpose.
    fn marker(self) -> &'static str {
        match self {
            Purpose::Reasoning => "rgw1",
            Purpose::Compaction => "rgw1c",
        }
    }
}

/// One AES-256 key and the id that names it in blobs.
#[derive(Clone, Serialize, Deserialize)]
pub struct ReasoningKey {
    /// Short name written into each blob (`[A-Za-z0-9_-]`, at most 32 characters).
    pub id: String,
    /// 32 bytes of key material, base64 (standard alphabet).
    pub key: String,
}

impl std::fmt::Debug for ReasoningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReasoningKey").field("id", &self.id).field("key", &"<redacted>").finish()
    }
}

/// The configured keys: the first seals, all open.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReasoningKeys {
    pub keys: Vec<ReasoningKey>,
}

impl ReasoningKeys {
    /// Parse a key list: entries `<id>:<base64 of 32 bytes>`, separated by newlines or commas;
    /// blank lines and lines starting with `#` are skipped. The first entry is the current key.
    pub fn parse(text: &str) -> Result<ReasoningKeys, String> {
        let mut keys: Vec<ReasoningKey> = Vec::new();
        let lines = text.lines().map(str::trim).filter(|l| !l.starts_with('#'));
        for entry in lines.flat_map(|l| l.split(',')).map(str::trim) {
            if entry.is_empty() {
                continue;
            }
            let (id, key) = entry
                .split_once(':')
                .ok_or_else(|| format!("reasoning key entry '{}…' is not '<id>:<base64 key>'", prefix(entry)))?;
            let (id, key) = (id.trim(), key.trim());
            if id.is_empty()
                || id.len() > 32
                || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Err(format!("reasoning key id '{id}' must be 1-32 characters of A-Z, a-z, 0-9, '_' or '-'"));
            }
            let bytes = STANDARD.decode(key).map_err(|e| format!("reasoning key '{id}' is not base64: {e}"))?;
            if bytes.len() != 32 {
                return Err(format!("reasoning key '{id}' must be 32 bytes (got {})", bytes.len()));
            }
            if keys.iter().any(|k| k.id == id) {
                return Err(format!("reasoning key id '{id}' appears twice"));
            }
            keys.push(ReasoningKey { id: id.to_owned(), key: key.to_owned() });
        }
        if keys.is_empty() {
            return Err("no reasoning key found".to_owned());
        }
        Ok(ReasoningKeys { keys })
    }

    /// A fresh random key, for a gateway started without configured keys: its blobs open only
    /// while this gateway runs (every worker shares it; a restart makes them unknown).
    pub fn ephemeral() -> Result<ReasoningKeys, String> {
        let rng = SystemRandom::new();
        let mut key = [0u8; 32];
        let mut id = [0u8; 6];
        rng.fill(&mut key).and_then(|()| rng.fill(&mut id)).map_err(|_| "no system randomness".to_owned())?;
        Ok(ReasoningKeys {
            keys: vec![ReasoningKey { id: format!("eph-{}", URL_SAFE_NO_PAD.encode(id)), key: STANDARD.encode(key) }],
        })
    }
}

fn prefix(s: &str) -> String {
    s.chars().take(8).collect()
}

/// Why a blob could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("it is not content this gateway sealed for this kind of item")]
    Malformed,
    #[error("it was sealed with key '{0}', which this gateway does not have")]
    UnknownKey(String),
    #[error("it does not authenticate (altered, or sealed for another key)")]
    Tampered,
}

/// Seals and opens reasoning text and compaction summaries with the configured keys.
pub struct ReasoningSeal {
    /// (id, key), the sealing key first.
    keys: Vec<(String, LessSafeKey)>,
    rng: SystemRandom,
}

impl ReasoningSeal {
    pub fn new(config: &ReasoningKeys) -> Result<ReasoningSeal, String> {
        let keys = config
            .keys
            .iter()
            .map(|k| {
                let bytes =
                    STANDARD.decode(&k.key).map_err(|e| format!("reasoning key '{}' is not base64: {e}", k.id))?;
                let unbound = UnboundKey::new(&AES_256_GCM, &bytes)
                    .map_err(|_| format!("reasoning key '{}' must be 32 bytes", k.id))?;
                Ok((k.id.clone(), LessSafeKey::new(unbound)))
            })
            .collect::<Result<Vec<_>, String>>()?;
        if keys.is_empty() {
            return Err("no reasoning key configured".to_owned());
        }
        Ok(ReasoningSeal { keys, rng: SystemRandom::new() })
    }

    /// Seal reasoning `text` with the current key.
    pub fn seal(&self, text: &str) -> Result<String, String> {
        self.seal_as(Purpose::Reasoning, text)
    }

    /// Open a reasoning blob sealed by [`ReasoningSeal::seal`] with any configured key.
    pub fn open(&self, blob: &str) -> Result<String, OpenError> {
        self.open_as(Purpose::Reasoning, blob)
    }

    /// Seal `text` for `purpose` with the current key.
    pub fn seal_as(&self, purpose: Purpose, text: &str) -> Result<String, String> {
        let (id, key) = &self.keys[0];
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).map_err(|_| "no system randomness".to_owned())?;
        let header = format!("{}.{id}", purpose.marker());
        let mut data = text.as_bytes().to_vec();
        key.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(header.as_bytes()), &mut data)
            .map_err(|_| "sealing failed".to_owned())?;
        let mut payload = nonce.to_vec();
        payload.extend_from_slice(&data);
        Ok(format!("{header}.{}", URL_SAFE_NO_PAD.encode(payload)))
    }

    /// Open a blob sealed for `purpose` by [`ReasoningSeal::seal_as`] with any configured key.
    pub fn open_as(&self, purpose: Purpose, blob: &str) -> Result<String, OpenError> {
        let mut parts = blob.splitn(3, '.');
        let (Some(marker), Some(id), Some(body)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(OpenError::Malformed);
        };
        if marker != purpose.marker() {
            return Err(OpenError::Malformed);
        }
        let Some((_, key)) = self.keys.iter().find(|(k, _)| k == id) else {
            return Err(OpenError::UnknownKey(id.chars().take(32).collect()));
        };
        let payload = URL_SAFE_NO_PAD.decode(body).map_err(|_| OpenError::Malformed)?;
        if payload.len() < NONCE_LEN {
            return Err(OpenError::Malformed);
        }
        let (nonce, sealed) = payload.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| OpenError::Malformed)?;
        let header = format!("{marker}.{id}");
        let mut data = sealed.to_vec();
        let plain =
            key.open_in_place(nonce, Aad::from(header.as_bytes()), &mut data).map_err(|_| OpenError::Tampered)?;
        String::from_utf8(plain.to_vec()).map_err(|_| OpenError::Tampered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> ReasoningSeal {
        ReasoningSeal::new(&ReasoningKeys::parse(text).unwrap()).unwrap()
    }

    const K1: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const K2: &str = "k2:ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

    #[test]
    fn sealed_text_opens_again() {
        let seal = keys(K1);
        let blob = seal.seal("the user wants 2+2").unwrap();
        assert!(blob.starts_with("rgw1.k1."), "{blob}");
        assert!(!blob.contains("2+2"));
        assert_eq!(seal.open(&blob).unwrap(), "the user wants 2+2");
        assert_ne!(seal.seal("x").unwrap(), seal.seal("x").unwrap(), "fresh nonce each time");
    }

    #[test]
    fn rotation_keeps_old_blobs_readable() {
        let old = keys(K1).seal("old thoughts").unwrap();
        let rotated = keys(&format!("{K2}\n# retired, still accepted\n{K1}"));
        assert_eq!(rotated.open(&old).unwrap(), "old thoughts");
        assert!(rotated.seal("new").unwrap().starts_with("rgw1.k2."));
        assert_eq!(keys(K2).open(&old), Err(OpenError::UnknownKey("k1".into())));
    }

    #[test]
    fn tampering_is_detected() {
        let seal = keys(K1);
        let blob = seal.seal("secret plan").unwrap();
        let mut bytes = blob.into_bytes();
        let last = bytes.len() - 3;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(seal.open(&String::from_utf8(bytes).unwrap()), Err(OpenError::Tampered));
        // The key id is bound too: relabelling a blob does not make it open under another key.
        let relabelled = seal.seal("x").unwrap().replacen("rgw1.k1.", "rgw1.k2.", 1);
        assert_eq!(keys(&format!("{K1},{K2}")).open(&relabelled), Err(OpenError::Tampered));
        assert_eq!(seal.open("gAAAAABo-openai-blob"), Err(OpenError::Malformed));
    }

    #[test]
    fn reasoning_and_compaction_blobs_are_not_interchangeable() {
        let seal = keys(K1);
        let summary = seal.seal_as(Purpose::Compaction, "the user asked for a plan").unwrap();
        assert!(summary.starts_with("rgw1c.k1."), "{summary}");
        assert_eq!(seal.open_as(Purpose::Compaction, &summary).unwrap(), "the user asked for a plan");
        let reasoning = seal.seal("thoughts").unwrap();
        assert_eq!(seal.open_as(Purpose::Compaction, &reasoning), Err(OpenError::Malformed));
        assert_eq!(seal.open(&summary), Err(OpenError::Malformed));
        // The marker is bound too: relabelling either kind as the other does not authenticate.
        let as_reasoning = summary.replacen("rgw1c.", "rgw1.", 1);
        assert_eq!(seal.open(&as_reasoning), Err(OpenError::Tampered));
        let as_summary = reasoning.replacen("rgw1.", "rgw1c.", 1);
        assert_eq!(seal.open_as(Purpose::Compaction, &as_summary), Err(OpenError::Tampered));
        // Rotation works the same for both purposes.
        let rotated = keys(&format!("{K2},{K1}"));
        assert_eq!(rotated.open_as(Purpose::Compaction, &summary).unwrap(), "the user asked for a plan");
        assert_eq!(keys(K2).open_as(Purpose::Compaction, &summary), Err(OpenError::UnknownKey("k1".into())));
    }

    #[test]
    fn bad_key_lists_are_refused() {
        assert!(ReasoningKeys::parse("").is_err());
        assert!(ReasoningKeys::parse("k1:c2hvcnQ=").unwrap_err().contains("32 bytes"));
        assert!(ReasoningKeys::parse(&format!("{K1},{K1}")).unwrap_err().contains("twice"));
        assert!(ReasoningKeys::parse("bad id:AAAA").is_err());
        assert!(ReasoningKeys::ephemeral().unwrap().keys[0].id.starts_with("eph-"));
    }
}
