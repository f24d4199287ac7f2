//! Sealed blobs: `reasoning.encrypted_content` — the model's reasoning sealed with a server key,
//! so a stateless client (Codex sends `store: false` and replays its whole history) can hand it
//! back next turn and the model keeps its reasoning context, without the gateway storing
//! anything — and a `compaction` item's `encrypted_content`, the summary of a compacted
//! conversation, which a client can neither read nor forge.
//!
//! A blob is `<marker>.<key-id>.<base64url(nonce ‖ ciphertext ‖ tag)>`, AES-256-GCM (ring) with a
//! random 96-bit nonce and `<marker>.<key-id>.<tenant>` as associated data: a blob cannot be moved
//! to another key id, and it opens only for the tenant it was sealed for (the request's tenant,
//! `default` with authentication off), so one tenant's blob is refused in another's input like an
//! altered one. The marker names the blob's [`Purpose`] (`rgw2` reasoning, `rgw2c` compaction
//! summary): a blob sealed for one purpose does not open for the other, even relabelled.
//! [`ReasoningKeys`] holds one current key (sealing) and any number of older ones (opening only):
//! rotating means adding a new key first in the list and keeping the old one behind it for as long
//! as clients may replay its blobs.
//!
//! Blobs of the earlier format (`rgw1`, `rgw1c`: no tenant in the associated data) open only in a
//! gateway whose seal was built with [`ReasoningSeal::opening_unbound_blobs`] — one without
//! tenants, where every request has the same identity; anywhere else they are refused.
//!
//! [`open_sealed_items`] opens the sealed items of a request's input (or a conversation's added
//! items) wherever they arrive, once; what they carry is kept on the item and stored, so history
//! read back from the store never needs opening again. A reasoning item that comes with its text
//! as well must carry exactly the text its blob seals (a Messages `thinking` block replayed with
//! its `signature`), so an edited text is refused, not sent to the model under a valid seal.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use respgw_protocol::items::ReasoningText;
use respgw_protocol::{ApiError, Item};
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
            Purpose::Reasoning => "rgw2",
            Purpose::Compaction => "rgw2c",
        }
    }

    /// Marker of this purpose's blobs in the earlier format, sealed without a tenant.
    fn unbound_marker(self) -> &'static str {
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
    #[error("it does not authenticate (altered, or sealed for another key or another tenant)")]
    Tampered,
    #[error("it was sealed by an earlier version of this gateway, before blobs were bound to their tenant")]
    Unbound,
}

/// Seals and opens reasoning text and compaction summaries with the configured keys, each for
/// one tenant.
pub struct ReasoningSeal {
    /// (id, key), the sealing key first.
    keys: Vec<(String, LessSafeKey)>,
    /// Blobs of the earlier format, bound to no tenant, open (for any tenant).
    opens_unbound: bool,
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
        Ok(ReasoningSeal { keys, opens_unbound: false, rng: SystemRandom::new() })
    }

    /// The same seal, also opening blobs of the earlier format, which name no tenant. Only for a
    /// gateway where every request has the same tenant: anywhere else such a blob could be opened
    /// by a tenant it was not sealed for.
    pub fn opening_unbound_blobs(self, opens_unbound: bool) -> ReasoningSeal {
        ReasoningSeal { opens_unbound, ..self }
    }

    /// Seal `text` for `purpose` and `tenant` with the current key.
    pub fn seal(&self, purpose: Purpose, tenant: &str, text: &str) -> Result<String, String> {
        let (id, key) = &self.keys[0];
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).map_err(|_| "no system randomness".to_owned())?;
        let header = format!("{}.{id}", purpose.marker());
        let mut data = text.as_bytes().to_vec();
        let bound = associated_data(&header, Some(tenant));
        key.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(bound.as_bytes()), &mut data)
            .map_err(|_| "sealing failed".to_owned())?;
        let mut payload = nonce.to_vec();
        payload.extend_from_slice(&data);
        Ok(format!("{header}.{}", URL_SAFE_NO_PAD.encode(payload)))
    }

    /// Open a blob sealed by [`ReasoningSeal::seal`] for `purpose` and `tenant`, with any
    /// configured key. Another tenant's blob fails like an altered one.
    pub fn open(&self, purpose: Purpose, tenant: &str, blob: &str) -> Result<String, OpenError> {
        let mut parts = blob.splitn(3, '.');
        let (Some(marker), Some(id), Some(body)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(OpenError::Malformed);
        };
        let bound_to = if marker == purpose.marker() {
            Some(tenant)
        } else if marker == purpose.unbound_marker() {
            if !self.opens_unbound {
                return Err(OpenError::Unbound);
            }
            None
        } else {
            return Err(OpenError::Malformed);
        };
        let Some((_, key)) = self.keys.iter().find(|(k, _)| k == id) else {
            return Err(OpenError::UnknownKey(id.chars().take(32).collect()));
        };
        let payload = URL_SAFE_NO_PAD.decode(body).map_err(|_| OpenError::Malformed)?;
        if payload.len() < NONCE_LEN {
            return Err(OpenError::Malformed);
        }
        let (nonce, sealed) = payload.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| OpenError::Malformed)?;
        let bound = associated_data(&format!("{marker}.{id}"), bound_to);
        let mut data = sealed.to_vec();
        let plain =
            key.open_in_place(nonce, Aad::from(bound.as_bytes()), &mut data).map_err(|_| OpenError::Tampered)?;
        String::from_utf8(plain.to_vec()).map_err(|_| OpenError::Tampered)
    }
}

/// What a blob's AEAD authenticates besides its content: its `<marker>.<key-id>` header, then the
/// tenant it is for (`None` only for the earlier format). Tenant names have no `.`, key ids
/// neither, so no two (header, tenant) pairs give the same bytes.
fn associated_data(header: &str, tenant: Option<&str>) -> String {
    match tenant {
        Some(tenant) => format!("{header}.{tenant}"),
        None => header.to_owned(),
    }
}

/// Open the sealed items of `items` for `tenant`, so the model sees what they carry again: a
/// reasoning item's reasoning (when it came without its text), a compaction item's summary
/// (`model_summary`). A blob that does not open — altered, another tenant's, under an unknown key,
/// or any blob when no seal is configured — is a 400 naming the item (`{field}[N].encrypted_content`).
pub fn open_sealed_items(
    seal: Option<&ReasoningSeal>,
    tenant: &str,
    items: &mut [Item],
    field: &str,
) -> Result<(), ApiError> {
    for (i, item) in items.iter_mut().enumerate() {
        let (purpose, blob) = match item {
            Item::Reasoning(r) => match r.encrypted_content.as_deref() {
                Some(blob) => (Purpose::Reasoning, blob),
                None => continue,
            },
            Item::Compaction(c) => (Purpose::Compaction, c.encrypted_content.as_str()),
            _ => continue,
        };
        let opened = match seal {
            Some(seal) => seal.open(purpose, tenant, blob),
            None => Err(OpenError::Malformed),
        };
        match (opened, item) {
            (Ok(text), Item::Reasoning(r)) if r.content.is_empty() => r.content = vec![ReasoningText { text }],
            (Ok(text), Item::Reasoning(r)) if r.content.iter().map(|c| c.text.as_str()).collect::<String>() != text => {
                let param = format!("{field}[{i}].content");
                return Err(ApiError::invalid(
                    param.clone(),
                    format!("Invalid '{param}': the reasoning text differs from the text its encrypted_content seals."),
                )
                .with_code("invalid_encrypted_content"));
            }
            (Ok(text), Item::Compaction(c)) => c.model_summary = Some(text),
            (Ok(_), _) => {}
            (Err(e), _) => {
                let param = format!("{field}[{i}].encrypted_content");
                return Err(ApiError::invalid(param.clone(), format!("Invalid '{param}': {e}."))
                    .with_code("invalid_encrypted_content"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> ReasoningSeal {
        ReasoningSeal::new(&ReasoningKeys::parse(text).unwrap()).unwrap()
    }

    const K1: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const K2: &str = "k2:ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
    const R: Purpose = Purpose::Reasoning;
    const C: Purpose = Purpose::Compaction;

    /// A blob in the earlier format (no tenant in the associated data), as the gateway sealed
    /// them before blobs were bound to their tenant.
    fn unbound_blob(purpose: Purpose, key: &str, text: &str) -> String {
        let (id, material) = key.split_once(':').unwrap();
        let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &STANDARD.decode(material).unwrap()).unwrap());
        let header = format!("{}.{id}", purpose.unbound_marker());
        let nonce = [7u8; NONCE_LEN];
        let mut data = text.as_bytes().to_vec();
        key.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(header.as_bytes()), &mut data)
            .unwrap();
        format!("{header}.{}", URL_SAFE_NO_PAD.encode([nonce.as_slice(), &data].concat()))
    }

    #[test]
    fn sealed_text_opens_again() {
        let seal = keys(K1);
        let blob = seal.seal(R, "alpha", "the user wants 2+2").unwrap();
        assert!(blob.starts_with("rgw2.k1."), "{blob}");
        assert!(!blob.contains("2+2") && !blob.contains("alpha"));
        assert_eq!(seal.open(R, "alpha", &blob).unwrap(), "the user wants 2+2");
        assert_ne!(seal.seal(R, "alpha", "x").unwrap(), seal.seal(R, "alpha", "x").unwrap(), "fresh nonce each time");
    }

    #[test]
    fn another_tenants_blob_does_not_open() {
        let seal = keys(K1);
        for purpose in [R, C] {
            let blob = seal.seal(purpose, "alpha", "alpha's thoughts").unwrap();
            assert_eq!(seal.open(purpose, "beta", &blob), Err(OpenError::Tampered));
            assert_eq!(seal.open(purpose, "default", &blob), Err(OpenError::Tampered));
            assert_eq!(seal.open(purpose, "alpha", &blob).unwrap(), "alpha's thoughts");
        }
    }

    #[test]
    fn rotation_keeps_old_blobs_readable() {
        let old = keys(K1).seal(R, "alpha", "old thoughts").unwrap();
        let rotated = keys(&format!("{K2}\n# retired, still accepted\n{K1}"));
        assert_eq!(rotated.open(R, "alpha", &old).unwrap(), "old thoughts");
        assert!(rotated.seal(R, "alpha", "new").unwrap().starts_with("rgw2.k2."));
        assert_eq!(keys(K2).open(R, "alpha", &old), Err(OpenError::UnknownKey("k1".into())));
    }

    #[test]
    fn tampering_is_detected() {
        let seal = keys(K1);
        let blob = seal.seal(R, "alpha", "secret plan").unwrap();
        let mut bytes = blob.into_bytes();
        let last = bytes.len() - 3;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(seal.open(R, "alpha", &String::from_utf8(bytes).unwrap()), Err(OpenError::Tampered));
        // The key id is bound too: relabelling a blob does not make it open under another key.
        let relabelled = seal.seal(R, "alpha", "x").unwrap().replacen("rgw2.k1.", "rgw2.k2.", 1);
        assert_eq!(keys(&format!("{K1},{K2}")).open(R, "alpha", &relabelled), Err(OpenError::Tampered));
        assert_eq!(seal.open(R, "alpha", "gAAAAABo-openai-blob"), Err(OpenError::Malformed));
    }

    #[test]
    fn reasoning_and_compaction_blobs_are_not_interchangeable() {
        let seal = keys(K1);
        let summary = seal.seal(C, "alpha", "the user asked for a plan").unwrap();
        assert!(summary.starts_with("rgw2c.k1."), "{summary}");
        assert_eq!(seal.open(C, "alpha", &summary).unwrap(), "the user asked for a plan");
        let reasoning = seal.seal(R, "alpha", "thoughts").unwrap();
        assert_eq!(seal.open(C, "alpha", &reasoning), Err(OpenError::Malformed));
        assert_eq!(seal.open(R, "alpha", &summary), Err(OpenError::Malformed));
        // The marker is bound too: relabelling either kind as the other does not authenticate.
        let as_reasoning = summary.replacen("rgw2c.", "rgw2.", 1);
        assert_eq!(seal.open(R, "alpha", &as_reasoning), Err(OpenError::Tampered));
        let as_summary = reasoning.replacen("rgw2.", "rgw2c.", 1);
        assert_eq!(seal.open(C, "alpha", &as_summary), Err(OpenError::Tampered));
        // Rotation works the same for both purposes.
        let rotated = keys(&format!("{K2},{K1}"));
        assert_eq!(rotated.open(C, "alpha", &summary).unwrap(), "the user asked for a plan");
        assert_eq!(keys(K2).open(C, "alpha", &summary), Err(OpenError::UnknownKey("k1".into())));
    }

    #[test]
    fn unbound_blobs_open_only_where_allowed() {
        for purpose in [R, C] {
            let old = unbound_blob(purpose, K1, "from before");
            assert_eq!(keys(K1).open(purpose, "default", &old), Err(OpenError::Unbound));
            let lenient = keys(K1).opening_unbound_blobs(true);
            assert_eq!(lenient.open(purpose, "default", &old).unwrap(), "from before");
            // Relabelled as the current format, it names no tenant it was sealed for.
            let relabelled = old.replacen(purpose.unbound_marker(), purpose.marker(), 1);
            assert_eq!(lenient.open(purpose, "default", &relabelled), Err(OpenError::Tampered));
        }
        // A current blob relabelled as the earlier format does not authenticate either.
        let lenient = keys(K1).opening_unbound_blobs(true);
        let current = lenient.seal(R, "alpha", "x").unwrap().replacen("rgw2.", "rgw1.", 1);
        assert_eq!(lenient.open(R, "default", &current), Err(OpenError::Tampered));
    }

    #[test]
    fn items_open_for_their_tenant_and_name_the_refused_one() {
        let seal = keys(K1);
        let summary = seal.seal(C, "alpha", "the plan so far").unwrap();
        let thoughts = seal.seal(R, "alpha", "thinking").unwrap();
        let item = |v: serde_json::Value| -> Item { serde_json::from_value(v).unwrap() };
        let mut items = vec![
            item(serde_json::json!({"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":thoughts})),
            item(serde_json::json!({"type":"compaction","id":"cmp_1","encrypted_content":summary})),
        ];
        let mut theirs = items.clone();
        open_sealed_items(Some(&seal), "alpha", &mut items, "items").unwrap();
        let Item::Reasoning(r) = &items[0] else { panic!() };
        assert_eq!(r.text(), "thinking");
        let Item::Compaction(c) = &items[1] else { panic!() };
        assert_eq!(c.model_summary.as_deref(), Some("the plan so far"));
        let refused = open_sealed_items(Some(&seal), "beta", &mut theirs, "items").unwrap_err();
        assert_eq!((refused.status, refused.param.as_deref()), (400, Some("items[0].encrypted_content")));
        assert_eq!(refused.code.as_deref(), Some("invalid_encrypted_content"));
        let unkeyed = open_sealed_items(None, "alpha", &mut theirs[1..], "input").unwrap_err();
        assert_eq!(unkeyed.param.as_deref(), Some("input[0].encrypted_content"));
    }

    #[test]
    fn reasoning_text_sent_along_must_be_the_sealed_text() {
        let seal = keys(K1);
        let blob = seal.seal(R, "alpha", "first think").unwrap();
        let reasoning = |text: &str| -> Item {
            serde_json::from_value(serde_json::json!({"type":"reasoning","id":"rs_1","summary":[],
                "content":[{"type":"reasoning_text","text":text}],"encrypted_content":blob}))
            .unwrap()
        };
        let mut same = vec![reasoning("first think")];
        open_sealed_items(Some(&seal), "alpha", &mut same, "input").unwrap();
        let mut edited = vec![reasoning("first thought better")];
        let refused = open_sealed_items(Some(&seal), "alpha", &mut edited, "input").unwrap_err();
        assert_eq!((refused.status, refused.param.as_deref()), (400, Some("input[0].content")));
        assert_eq!(refused.code.as_deref(), Some("invalid_encrypted_content"));
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
