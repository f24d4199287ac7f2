//! Tenants and their keys: the keys file (`--api-keys-file`, TOML or JSON) parsed and checked
//! into a [`TenantTable`], which the supervisor hands to every worker in `GatewayOptions`.
//!
//! A tenant is a name (`[a-z0-9_-]{1,64}`, used as the owner of what it stores, in metrics and in
//! logs), the SHA-256 hashes of its keys (several for rotation, each with an optional expiry) and
//! optional limits. The file holds hashes only: an entry that is not `sha256:` + 64 hex digits is
//! refused without being echoed, since it may be a raw key pasted by mistake.
//!
//! ```toml
//! [[tenant]]
//! name = "alpha"
//! keys = ["sha256:<64 hex>", { hash = "sha256:<64 hex>", expires = 2027-01-01T00:00:00Z }]
//! requests_per_minute = 600
//! max_open_streams = 20
//! max_websockets = 20
//! tokens_per_minute = 200000
//! tokens_per_day = 5000000
//! admin = true  # its keys see every tenant in the console
//! ```

use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The tenant that `--api-key` / `GW_API_KEYS` keys belong to, that owns rows stored before
/// tenants existed, and that every request belongs to when authentication is off.
pub const DEFAULT_TENANT: &str = "default";

/// Longest tenant name.
const MAX_NAME_LEN: usize = 64;

/// Most tenants in a keys file (half the shared limits table, which keeps a tenant's cell
/// across reloads).
const MAX_TENANTS: usize = crate::limits::shared::TENANT_CELLS / 2;

/// Every tenant of the keys file, checked.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TenantTable {
    pub tenants: Vec<TenantSpec>,
}

/// One tenant of the keys file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantSpec {
    /// The tenant's name: the owner of what it stores, its metric label and its log field.
    pub name: String,
    /// Its keys, as hashes.
    pub keys: Vec<KeySpec>,
    /// Its own limits; a limit left out falls back to the gateway's default.
    pub limits: TenantLimits,
    /// Whether its keys see (and in the console, act on) every tenant's records.
    #[serde(default)]
    pub admin: bool,
}

/// One key of a tenant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeySpec {
    /// SHA-256 of the key, lowercase hex.
    pub sha256: String,
    /// Unix seconds from which the key is refused; `None`: it does not expire.
    pub expires: Option<i64>,
}

/// Per-tenant limits (0 or absent: unlimited).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantLimits {
    /// Requests per minute on the API routes.
    pub requests_per_minute: Option<u32>,
    /// Responses streaming (SSE or WebSocket) at the same time.
    pub max_open_streams: Option<u32>,
    /// WebSockets open at the same time, idle or busy.
    #[serde(default)]
    pub max_websockets: Option<u32>,
    /// Input and output tokens per minute (as the upstream's `usage` reports them).
    #[serde(default)]
    pub tokens_per_minute: Option<u32>,
    /// Input and output tokens per day (UTC).
    #[serde(default)]
    pub tokens_per_day: Option<u32>,
}

impl TenantLimits {
    /// These limits, each absent one taken from `defaults`.
    pub fn or(self, defaults: TenantLimits) -> TenantLimits {
        TenantLimits {
            requests_per_minute: self.requests_per_minute.or(defaults.requests_per_minute),
            max_open_streams: self.max_open_streams.or(defaults.max_open_streams),
            max_websockets: self.max_websockets.or(defaults.max_websockets),
            tokens_per_minute: self.tokens_per_minute.or(defaults.tokens_per_minute),
            tokens_per_day: self.tokens_per_day.or(defaults.tokens_per_day),
        }
    }
}

/// `sha256:<hex>` of `key`: the form a keys file holds (`respgw hash-key` prints it).
pub fn hash_key(key: &str) -> String {
    format!("sha256:{}", hex(&Sha256::digest(key.as_bytes())))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The keys file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTable {
    #[serde(default)]
    tenant: Vec<FileTenant>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTenant {
    name: String,
    keys: Vec<FileKey>,
    requests_per_minute: Option<u32>,
    max_open_streams: Option<u32>,
    max_websockets: Option<u32>,
    tokens_per_minute: Option<u32>,
    tokens_per_day: Option<u32>,
    #[serde(default)]
    admin: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum FileKey {
    Hash(String),
    WithExpiry(FileKeyWithExpiry),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileKeyWithExpiry {
    hash: String,
    expires: Option<String>,
}

impl TenantTable {
    /// Read and check the keys file at `path`: JSON when its name ends in `.json`, TOML otherwise.
    /// The error names the file and what is wrong, never a key.
    pub fn load(path: &Path) -> Result<TenantTable, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the API keys file {}: {e}", path.display()))?;
        let json = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json"));
        Self::parse(&text, json).map_err(|e| format!("API keys file {}: {e}", path.display()))
    }

    /// Parse and check a keys file's text.
    pub fn parse(text: &str, json: bool) -> Result<TenantTable, String> {
        let value = if json {
            serde_json::from_str::<serde_json::Value>(text).map_err(|e| format!("not valid JSON: {e}"))?
        } else {
            let table: toml::Table = toml::from_str(text).map_err(|e| format!("not valid TOML: {e}"))?;
            toml_to_json(toml::Value::Table(table))
        };
        let file: FileTable = serde_json::from_value(value).map_err(|e| {
            format!(
                "{e} (expected [[tenant]] entries with `name`, `keys` and optionally `requests_per_minute`, \
                 `max_open_streams`, `max_websockets`, `tokens_per_minute`, `tokens_per_day` and `admin`)"
            )
        })?;
        if file.tenant.is_empty() {
            return Err("no [[tenant]] entry: a keys file must name at least one tenant".into());
        }
        if file.tenant.len() > MAX_TENANTS {
            return Err(format!("{} [[tenant]] entries: a keys file holds at most {MAX_TENANTS}", file.tenant.len()));
        }
        let mut tenants: Vec<TenantSpec> = Vec::with_capacity(file.tenant.len());
        for (index, tenant) in file.tenant.into_iter().enumerate() {
            let at = format!("tenant[{index}]");
            check_name(&tenant.name).map_err(|e| format!("{at}.name: {e}"))?;
            if tenants.iter().any(|t| t.name == tenant.name) {
                return Err(format!("{at}.name: tenant '{}' appears twice", tenant.name));
            }
            let mut keys = Vec::with_capacity(tenant.keys.len());
            for (k, key) in tenant.keys.into_iter().enumerate() {
                let at = format!("tenant '{}' keys[{k}]", tenant.name);
                let (hash, expires) = match key {
                    FileKey::Hash(hash) => (hash, None),
                    FileKey::WithExpiry(FileKeyWithExpiry { hash, expires }) => (hash, expires),
                };
                let sha256 = parse_hash(&hash).map_err(|e| format!("{at}: {e}"))?;
                let expires =
                    expires.map(|e| parse_expiry(&e)).transpose().map_err(|e| format!("{at}.expires: {e}"))?;
                let taken = tenants.iter().flat_map(|t| &t.keys).chain(&keys).any(|k: &KeySpec| k.sha256 == sha256);
                if taken {
                    return Err(format!("{at}: this key hash is listed twice"));
                }
                keys.push(KeySpec { sha256, expires });
            }
            if keys.is_empty() {
                return Err(format!("{at}.keys: tenant '{}' has no key", tenant.name));
            }
            let limits = TenantLimits {
                requests_per_minute: tenant.requests_per_minute,
                max_open_streams: tenant.max_open_streams,
                max_websockets: tenant.max_websockets,
                tokens_per_minute: tenant.tokens_per_minute,
                tokens_per_day: tenant.tokens_per_day,
            };
            tenants.push(TenantSpec { name: tenant.name, keys, limits, admin: tenant.admin });
        }
        Ok(TenantTable { tenants })
    }
}

/// Whether `name` may name a tenant.
fn check_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-';
    if name.is_empty() || name.len() > MAX_NAME_LEN || !name.chars().all(allowed) {
        return Err(format!("'{name}' is not a tenant name: 1 to {MAX_NAME_LEN} of a-z, 0-9, '_' and '-'"));
    }
    Ok(())
}

/// The lowercase hex of a `sha256:<64 hex>` entry. Anything else is refused without repeating
/// it: it may be a raw key.
fn parse_hash(entry: &str) -> Result<String, String> {
    let hex = entry.strip_prefix("sha256:").unwrap_or_default();
    if hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Ok(hex.to_ascii_lowercase());
    }
    Err("not a key hash (expected `sha256:` and 64 hex digits; the file holds hashes of keys, never keys — \
         `respgw hash-key` prints the hash of a key)"
        .into())
}

/// Unix seconds of an RFC 3339 date-time with an offset (`2027-01-01T00:00:00Z`).
fn parse_expiry(text: &str) -> Result<i64, String> {
    let invalid = || format!("'{text}' is not a date-time with an offset, such as 2027-01-01T00:00:00Z");
    let datetime = toml::value::Datetime::from_str(text).map_err(|_| invalid())?;
    let (Some(date), Some(time), Some(offset)) = (datetime.date, datetime.time, datetime.offset) else {
        return Err(invalid());
    };
    let offset_minutes = match offset {
        toml::value::Offset::Z => 0,
        toml::value::Offset::Custom { minutes } => i64::from(minutes),
    };
    let days = days_from_civil(i64::from(date.year), i64::from(date.month), i64::from(date.day));
    let seconds = i64::from(time.hour) * 3600 + i64::from(time.minute) * 60 + i64::from(time.second.unwrap_or(0));
    Ok(days * 86_400 + seconds - offset_minutes * 60)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// A TOML document as JSON, date-times as their RFC 3339 text, so both formats are read by one
/// set of rules.
fn toml_to_json(value: toml::Value) -> serde_json::Value {
    match value {
        toml::Value::String(s) => serde_json::Value::String(s),
        toml::Value::Integer(i) => serde_json::Value::from(i),
        toml::Value::Float(f) => serde_json::Value::from(f),
        toml::Value::Boolean(b) => serde_json::Value::Bool(b),
        toml::Value::Datetime(d) => serde_json::Value::String(d.to_string()),
        toml::Value::Array(items) => serde_json::Value::Array(items.into_iter().map(toml_to_json).collect()),
        toml::Value::Table(table) => {
            serde_json::Value::Object(table.into_iter().map(|(k, v)| (k, toml_to_json(v))).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash_of(key: &str) -> String {
        hash_key(key)
    }

    #[test]
    fn hash_key_is_sha256_hex() {
        // SHA-256 of "abc", FIPS 180-2's first example.
        assert_eq!(hash_key("abc"), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn parses_toml_with_expiry_and_limits() {
        let text = format!(
            "[[tenant]]\nname = \"alpha\"\nkeys = [\"{}\", {{ hash = \"{}\", expires = 2027-01-01T00:00:00Z }}]\n\
             requests_per_minute = 60\n\n[[tenant]]\nname = \"beta-2\"\nkeys = [\"{}\"]\nmax_open_streams = 3\n\
             max_websockets = 4\ntokens_per_minute = 1000\ntokens_per_day = 20000\n",
            hash_of("a1"),
            hash_of("a2"),
            hash_of("b1")
        );
        let table = TenantTable::parse(&text, false).expect("a valid file");
        assert_eq!(table.tenants.len(), 2);
        let alpha = &table.tenants[0];
        assert_eq!(alpha.name, "alpha");
        assert_eq!(alpha.keys[0], KeySpec { sha256: hash_of("a1")[7..].to_owned(), expires: None });
        assert_eq!(alpha.keys[1].expires, Some(1_798_761_600));
        assert_eq!(alpha.limits, TenantLimits { requests_per_minute: Some(60), ..TenantLimits::default() });
        assert_eq!(table.tenants[1].limits.max_open_streams, Some(3));
        assert_eq!(table.tenants[1].limits.max_websockets, Some(4));
        assert_eq!(table.tenants[1].limits.tokens_per_minute, Some(1000));
        assert_eq!(table.tenants[1].limits.tokens_per_day, Some(20000));
    }

    #[test]
    fn parses_the_same_structure_as_json() {
        let text = serde_json::json!({"tenant": [{"name": "alpha", "keys": [
            hash_of("a1"), {"hash": hash_of("a2"), "expires": "2027-01-01T01:00:00+01:00"}
        ]}]})
        .to_string();
        let table = TenantTable::parse(&text, true).expect("a valid file");
        assert_eq!(table.tenants[0].keys[1].expires, Some(1_798_761_600));
    }

    #[test]
    fn refuses_a_raw_key_without_echoing_it() {
        let text = "[[tenant]]\nname = \"alpha\"\nkeys = [\"sk-very-secret-key\"]\n";
        let e = TenantTable::parse(text, false).unwrap_err();
        assert!(e.contains("not a key hash"), "{e}");
        assert!(!e.contains("sk-very-secret-key"), "the key leaked into the message: {e}");
    }

    #[test]
    fn refuses_bad_names_duplicates_and_expiries() {
        let h = hash_of("k");
        let bad = [
            format!("[[tenant]]\nname = \"Alpha\"\nkeys = [\"{h}\"]\n"),
            format!("[[tenant]]\nname = \"\"\nkeys = [\"{h}\"]\n"),
            format!(
                "[[tenant]]\nname = \"a\"\nkeys = [\"{h}\"]\n[[tenant]]\nname = \"a\"\nkeys = [\"{}\"]\n",
                hash_of("x")
            ),
            format!("[[tenant]]\nname = \"a\"\nkeys = [\"{h}\"]\n[[tenant]]\nname = \"b\"\nkeys = [\"{h}\"]\n"),
            format!("[[tenant]]\nname = \"a\"\nkeys = [{{ hash = \"{h}\", expires = 2027-01-01 }}]\n"),
            "[[tenant]]\nname = \"a\"\nkeys = []\n".to_owned(),
            format!("[[tenant]]\nname = \"a\"\nkeys = [\"{h}\"]\nunknown = 1\n"),
            String::new(),
        ];
        for text in bad {
            assert!(TenantTable::parse(&text, false).is_err(), "accepted:\n{text}");
        }
    }

    #[test]
    fn expiry_offsets_and_days_count_right() {
        assert_eq!(parse_expiry("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_expiry("2000-03-01T00:00:00Z"), Ok(951_868_800));
        assert_eq!(parse_expiry("1970-01-01T00:00:00-00:30"), Ok(1800));
        assert!(parse_expiry("2027-01-01").is_err());
        assert!(parse_expiry("2027-01-01T00:00:00").is_err());
    }

    #[test]
    fn limits_fall_back_to_defaults() {
        let own = TenantLimits {
            requests_per_minute: Some(5),
            max_websockets: Some(3),
            tokens_per_day: Some(1000),
            ..TenantLimits::default()
        };
        let defaults = TenantLimits {
            requests_per_minute: Some(100),
            max_open_streams: Some(2),
            max_websockets: Some(9),
            tokens_per_minute: Some(50),
            tokens_per_day: Some(9000),
        };
        assert_eq!(
            own.or(defaults),
            TenantLimits {
                requests_per_minute: Some(5),
                max_open_streams: Some(2),
                max_websockets: Some(3),
                tokens_per_minute: Some(50),
                tokens_per_day: Some(1000),
            }
        );
    }
}
