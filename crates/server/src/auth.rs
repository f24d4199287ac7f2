//! API-key authentication and per-tenant limits: `Authorization: Bearer <key>` (or, as Anthropic
//! clients send it, `x-api-key: <key>`) is looked up among the configured keys, and the request
//! carries the key's [`Tenant`] from then on (a request extension the handlers hand to the engine
//! as the owner of what they read and write).
//!
//! Keys are kept as SHA-256 digests only, and the presented key's digest is compared with every
//! configured one in constant time, so neither a key's content nor which one matched leaks
//! through timing. Logs name the tenant and a short key id (the first 8 hex digits of the key's
//! hash), never the key. With no key configured, authentication is off and every request belongs
//! to the tenant `default`.
//!
//! Limits are counted per worker process: requests per minute (a token bucket refilled
//! continuously), open streams and open WebSockets; past any, 429 `rate_limit_exceeded` with
//! `Retry-After`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use respgw_protocol::ApiError;
use respgw_telemetry::Metrics;
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::error::HttpError;
use crate::tenants::{DEFAULT_TENANT, TenantLimits, TenantTable, hex};

/// The accepted API keys and the tenants they belong to.
#[derive(Clone)]
pub struct ApiKeys {
    keys: Arc<[KeyEntry]>,
    /// The tenant of every request when no key is configured.
    anonymous: Tenant,
}

/// One accepted key.
struct KeyEntry {
    digest: [u8; 32],
    /// Unix seconds from which it is refused.
    expires: Option<i64>,
    tenant: Tenant,
}

/// Who a request is from: the tenant of its key (or `default` with authentication off). Cheap
/// to clone; its limit counters are shared by every request of the tenant in this process.
#[derive(Clone)]
pub struct Tenant(Arc<TenantState>);

struct TenantState {
    name: String,
    limits: TenantLimits,
    /// Requests-per-minute budget.
    bucket: Mutex<Bucket>,
    /// Streams open now.
    open_streams: AtomicU32,
    /// WebSockets open now.
    open_websockets: AtomicU32,
}

/// A token bucket holding at most one minute's requests, refilled continuously.
struct Bucket {
    tokens: f64,
    refilled: Instant,
}

fn digest(key: &[u8]) -> [u8; 32] {
    Sha256::digest(key).into()
}

/// The 32 bytes of a 64-hex-digit hash.
fn decode_digest(hex: &str) -> Option<[u8; 32]> {
    let mut bytes = [0u8; 32];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    (hex.len() == 64).then_some(bytes)
}

fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

impl ApiKeys {
    /// The keys of `table`'s tenants, plus `legacy` keys (`--api-key`), which belong to the tenant
    /// `default` (joining the file's `default` tenant if it has one). A tenant's limits are its
    /// own, each one it leaves out taken from `defaults`.
    pub fn new(legacy: &[String], table: &TenantTable, defaults: TenantLimits) -> Self {
        let mut tenants: Vec<(String, Tenant)> = Vec::new();
        let mut tenant = |name: &str, limits: TenantLimits| {
            if let Some((_, t)) = tenants.iter().find(|(n, _)| n == name) {
                return t.clone();
            }
            let t = Tenant::new(name, limits.or(defaults));
            tenants.push((name.to_owned(), t.clone()));
            t
        };
        let mut keys = Vec::new();
        for spec in &table.tenants {
            let owner = tenant(&spec.name, spec.limits);
            for key in &spec.keys {
                // The table was checked when it was read: every hash decodes.
                if let Some(digest) = decode_digest(&key.sha256) {
                    keys.push(KeyEntry { digest, expires: key.expires, tenant: owner.clone() });
                }
            }
        }
        let legacy: Vec<&String> = legacy.iter().filter(|k| !k.is_empty()).collect();
        if !legacy.is_empty() {
            let owner = tenant(DEFAULT_TENANT, TenantLimits::default());
            for key in legacy {
                keys.push(KeyEntry { digest: digest(key.as_bytes()), expires: None, tenant: owner.clone() });
            }
        }
        let anonymous = tenant(DEFAULT_TENANT, TenantLimits::default());
        ApiKeys { keys: keys.into(), anonymous }
    }

    /// Whether any key is configured (authentication on).
    pub fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The tenant of `presented`, or why it is refused. Every configured key is compared, so the
    /// time taken does not say which one matched.
    fn tenant_of(&self, presented: &str) -> Result<(&Tenant, String), &'static str> {
        let d = digest(presented.as_bytes());
        let mut found = u32::MAX;
        for (index, entry) in (0u32..).zip(self.keys.iter()) {
            found.conditional_assign(&index, entry.digest.ct_eq(&d));
        }
        let entry = self.keys.get(found as usize).ok_or("Incorrect API key provided.")?;
        if entry.expires.is_some_and(|at| unix_now() >= at) {
            return Err("This API key has expired.");
        }
        Ok((&entry.tenant, hex(&d[..4])))
    }

    #[cfg(test)]
    fn accepts(&self, presented: &str) -> bool {
        self.tenant_of(presented).is_ok()
    }
}

impl Tenant {
    fn new(name: &str, limits: TenantLimits) -> Self {
        let per_minute = limits.requests_per_minute.unwrap_or(0);
        Tenant(Arc::new(TenantState {
            name: name.to_owned(),
            limits,
            bucket: Mutex::new(Bucket { tokens: f64::from(per_minute), refilled: Instant::now() }),
            open_streams: AtomicU32::new(0),
            open_websockets: AtomicU32::new(0),
        }))
    }

    /// The tenant's name: the owner of what it stores.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Take one request from the per-minute budget; 429 with the wait for the next one when it
    /// is spent.
    pub(crate) fn take_request(&self) -> Result<(), RateLimited> {
        let limit = match self.0.limits.requests_per_minute {
            Some(n) if n > 0 => n,
            _ => return Ok(()),
        };
        let per_minute = f64::from(limit);
        let mut bucket = self.0.bucket.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let refill = now.duration_since(bucket.refilled).as_secs_f64() * per_minute / 60.0;
        bucket.tokens = (bucket.tokens + refill).min(per_minute);
        bucket.refilled = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let wait = Duration::from_secs_f64((1.0 - bucket.tokens) * 60.0 / per_minute);
        let seconds = (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1);
        tracing::info!(tenant = self.name(), limit, "request rate limit reached");
        Err(RateLimited {
            error: ApiError::rate_limited(format!(
                "Rate limit reached: this API key's tenant may make {limit} requests per minute. Retry after \
                 {seconds} s."
            )),
            retry_after: seconds,
        })
    }

    /// Count one more open stream until the slot is dropped; 429 when the tenant has its limit
    /// open already.
    pub fn open_stream(&self) -> Result<StreamSlot, RateLimited> {
        let limit = self.0.limits.max_open_streams.filter(|n| *n > 0).unwrap_or(u32::MAX);
        if claim(&self.0.open_streams, limit) {
            return Ok(StreamSlot(self.clone()));
        }
        Err(RateLimited {
            error: ApiError::rate_limited(format!(
                "Too many open streams: this API key's tenant may have {limit} streaming responses open at once. \
                 Retry after one has finished."
            )),
            retry_after: 1,
        })
    }

    /// Count one more open WebSocket until the slot is dropped; 429 when the tenant has its limit
    /// open already.
    pub(crate) fn open_websocket(&self) -> Result<WebSocketSlot, RateLimited> {
        let limit = self.0.limits.max_websockets.filter(|n| *n > 0).unwrap_or(u32::MAX);
        if claim(&self.0.open_websockets, limit) {
            return Ok(WebSocketSlot(self.clone()));
        }
        tracing::info!(tenant = self.name(), limit, "WebSocket limit reached");
        Err(RateLimited {
            error: ApiError::rate_limited(format!(
                "Too many WebSockets: this API key's tenant may have {limit} WebSockets open at once. Close one, \
                 or retry later."
            )),
            retry_after: 1,
        })
    }
}

/// Add one to `open` unless it is at `limit` already; whether it was added.
fn claim(open: &AtomicU32, limit: u32) -> bool {
    open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| if n < limit { Some(n + 1) } else { None }).is_ok()
}

/// A 429 `rate_limit_exceeded` reply: the error shape, and `Retry-After` in seconds.
pub struct RateLimited {
    pub error: ApiError,
    pub retry_after: u64,
}

impl IntoResponse for RateLimited {
    fn into_response(self) -> Response {
        let mut response = HttpError(self.error).into_response();
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(self.retry_after));
        response
    }
}

/// One open stream of a tenant, counted until dropped.
pub struct StreamSlot(Tenant);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.0.open_streams.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One open WebSocket of a tenant, counted until dropped.
pub(crate) struct WebSocketSlot(Tenant);

impl Drop for WebSocketSlot {
    fn drop(&mut self) {
        self.0.0.open_websockets.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Tenant {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        // Every API route is behind `require_api_key`, which sets it.
        parts
            .extensions
            .get::<Tenant>()
            .cloned()
            .ok_or_else(|| HttpError(ApiError::internal("The request reached a handler without its tenant.")))
    }
}

/// The header an Anthropic client sends its key in.
pub(crate) const X_API_KEY: &str = "x-api-key";

/// The key a request presents: `Authorization: Bearer <key>`, else `x-api-key: <key>`.
fn presented_key(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")));
    bearer.or_else(|| headers.get(X_API_KEY).and_then(|v| v.to_str().ok())).map(str::trim)
}

/// What the authentication middleware needs.
#[derive(Clone)]
pub struct AuthState {
    pub keys: ApiKeys,
    pub metrics: Metrics,
}

/// Middleware for the API routes: 401 `authentication_error` unless a configured key is
/// presented, 429 when its tenant is over its request rate; otherwise the request goes on with
/// its [`Tenant`], and is counted for it.
pub async fn require_api_key(State(auth): State<AuthState>, mut request: Request, next: Next) -> Response {
    let (tenant, key_id) = if auth.keys.enabled() {
        let Some(presented) = presented_key(request.headers()) else {
            return HttpError(ApiError::unauthorized(
                "Missing API key: send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'.",
            ))
            .into_response();
        };
        match auth.keys.tenant_of(presented) {
            Ok((tenant, key_id)) => (tenant.clone(), Some(key_id)),
            Err(why) => return HttpError(ApiError::unauthorized(why)).into_response(),
        }
    } else {
        (auth.keys.anonymous.clone(), None)
    };
    let span = tracing::Span::current();
    span.record("tenant", tenant.name());
    if let Some(key_id) = &key_id {
        span.record("key_id", key_id.as_str());
    }
    let response = match tenant.take_request() {
        Ok(()) => {
            request.extensions_mut().insert(tenant.clone());
            next.run(request).await
        }
        Err(limited) => limited.into_response(),
    };
    auth.metrics.tenant_request(tenant.name(), response.status().as_u16());
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenants::{KeySpec, TenantSpec, hash_key};

    fn table(specs: &[(&str, &[&str], TenantLimits)]) -> TenantTable {
        TenantTable {
            tenants: specs
                .iter()
                .map(|(name, keys, limits)| TenantSpec {
                    name: (*name).to_owned(),
                    keys: keys.iter().map(|k| KeySpec { sha256: hash_key(k)[7..].to_owned(), expires: None }).collect(),
                    limits: *limits,
                })
                .collect(),
        }
    }

    #[test]
    fn accepts_only_configured_keys() {
        let keys =
            ApiKeys::new(&["alpha".to_owned(), "beta".to_owned()], &TenantTable::default(), TenantLimits::default());
        assert!(keys.enabled());
        assert!(keys.accepts("alpha"));
        assert!(keys.accepts("beta"));
        assert!(!keys.accepts("alph"));
        assert!(!keys.accepts(""));
    }

    #[test]
    fn the_key_comes_as_a_bearer_token_or_as_x_api_key() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, HeaderValue::from_static(value));
            }
            map
        };
        assert_eq!(presented_key(&headers(&[("authorization", "Bearer k1")])), Some("k1"));
        assert_eq!(presented_key(&headers(&[("x-api-key", "k2")])), Some("k2"));
        assert_eq!(presented_key(&headers(&[("authorization", "Bearer k1"), ("x-api-key", "k2")])), Some("k1"));
        assert_eq!(presented_key(&headers(&[("authorization", "Basic xyz")])), None);
        assert_eq!(presented_key(&headers(&[])), None);
    }

    #[test]
    fn no_keys_means_auth_off() {
        assert!(!ApiKeys::new(&[], &TenantTable::default(), TenantLimits::default()).enabled());
        assert!(!ApiKeys::new(&[String::new()], &TenantTable::default(), TenantLimits::default()).enabled());
    }

    #[test]
    fn each_key_maps_to_its_tenant_and_legacy_keys_to_default() {
        let none = TenantLimits::default();
        let keys =
            ApiKeys::new(&["old".to_owned()], &table(&[("alpha", &["a1", "a2"], none), ("beta", &["b1"], none)]), none);
        let tenant = |key: &str| keys.tenant_of(key).map(|(t, _)| t.name().to_owned());
        assert_eq!(tenant("a1").as_deref(), Ok("alpha"));
        assert_eq!(tenant("a2").as_deref(), Ok("alpha"));
        assert_eq!(tenant("b1").as_deref(), Ok("beta"));
        assert_eq!(tenant("old").as_deref(), Ok(DEFAULT_TENANT));
        assert!(tenant("b2").is_err());
        let (_, key_id) = keys.tenant_of("a1").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(key_id, hash_key("a1")[7..15]);
    }

    #[test]
    fn an_expired_key_is_refused() {
        let mut t = table(&[("alpha", &["a1", "a2"], TenantLimits::default())]);
        t.tenants[0].keys[0].expires = Some(unix_now() - 1);
        t.tenants[0].keys[1].expires = Some(unix_now() + 3600);
        let keys = ApiKeys::new(&[], &t, TenantLimits::default());
        assert_eq!(keys.tenant_of("a1").err(), Some("This API key has expired."));
        assert!(keys.accepts("a2"));
    }

    #[test]
    fn the_request_budget_is_per_tenant_and_says_when_to_retry() {
        let limited = TenantLimits { requests_per_minute: Some(2), ..TenantLimits::default() };
        let keys = ApiKeys::new(
            &[],
            &table(&[("alpha", &["a"], limited), ("beta", &["b"], TenantLimits::default())]),
            TenantLimits::default(),
        );
        let alpha = keys.tenant_of("a").map(|(t, _)| t.clone()).unwrap_or_else(|e| panic!("{e}"));
        let beta = keys.tenant_of("b").map(|(t, _)| t.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert!(alpha.take_request().is_ok());
        assert!(alpha.take_request().is_ok());
        let Err(limited) = alpha.take_request() else { panic!("the third request in a minute is over the limit") };
        assert_eq!((limited.error.status, limited.retry_after), (429, 30));
        assert_eq!(limited.error.code.as_deref(), Some("rate_limit_exceeded"));
        for _ in 0..100 {
            assert!(beta.take_request().is_ok(), "another tenant is unaffected");
        }
    }

    #[test]
    fn defaults_apply_to_tenants_without_their_own_limits() {
        let defaults = TenantLimits { max_open_streams: Some(1), ..TenantLimits::default() };
        let keys = ApiKeys::new(&["k".to_owned()], &TenantTable::default(), defaults);
        let tenant = keys.tenant_of("k").map(|(t, _)| t.clone()).unwrap_or_else(|e| panic!("{e}"));
        let slot = tenant.open_stream().unwrap_or_else(|_| panic!("the first stream opens"));
        assert!(tenant.open_stream().is_err(), "the second is over the limit");
        drop(slot);
        assert!(tenant.open_stream().is_ok(), "a closed stream frees its place");
    }

    #[test]
    fn open_websockets_are_counted_per_tenant_against_their_own_limit() {
        let two = TenantLimits { max_websockets: Some(2), ..TenantLimits::default() };
        let keys = ApiKeys::new(&[], &table(&[("alpha", &["a"], two), ("beta", &["b"], TenantLimits::default())]), two);
        let alpha = keys.tenant_of("a").map(|(t, _)| t.clone()).unwrap_or_else(|e| panic!("{e}"));
        let beta = keys.tenant_of("b").map(|(t, _)| t.clone()).unwrap_or_else(|e| panic!("{e}"));
        let sockets: Vec<WebSocketSlot> =
            (0..2).map(|_| alpha.open_websocket().unwrap_or_else(|_| panic!("under the limit"))).collect();
        let Err(limited) = alpha.open_websocket() else { panic!("the third WebSocket is over the limit") };
        assert_eq!(limited.error.code.as_deref(), Some("rate_limit_exceeded"));
        assert!(alpha.open_stream().is_ok(), "WebSockets and streams are counted apart");
        assert!(beta.open_websocket().is_ok(), "another tenant is unaffected");
        drop(sockets);
        assert!(alpha.open_websocket().is_ok(), "a closed WebSocket frees its place");
    }
}
