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
//! Limits are counted for the gateway as a whole (see [`crate::limits`]): a request is admitted
//! (requests per minute, token budgets, and the stream or WebSocket it opens) in one step, so that
//! with Redis it costs one round trip. The middleware admits it before the handler runs, except
//! on the routes that may open a stream or a WebSocket ([`admitted_by_handler`]): there the
//! handler admits it through its [`Admission`] once it knows what the request opens (a request
//! it turns away before that, e.g. malformed, is admitted by the middleware afterwards, so every
//! request counts and one over a limit is answered 429 whatever its body). Past any limit, 429 `rate_limit_exceeded` with `Retry-After`. Every reply to
//! an authenticated request carries the tenant's `x-ratelimit-*` headers.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{FromRequestParts, OptionalFromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use respgw_protocol::ApiError;
use respgw_telemetry::Metrics;
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::error::HttpError;
use crate::limits::{Admitted, Counted, Limiter, Open, OpenSlot, Quotas, RateLimited};
use crate::tenants::{DEFAULT_TENANT, TenantLimits, TenantTable, hex};

/// The accepted API keys and the tenants they belong to.
#[derive(Clone)]
pub struct ApiKeys {
    keys: Arc<[KeyEntry]>,
    /// The tenant of every request when no key is configured.
    anonymous: Tenant,
    /// Every tenant by name (token charges arrive with the owner's name).
    by_name: Arc<HashMap<String, Tenant>>,
}

/// One accepted key.
struct KeyEntry {
    digest: [u8; 32],
    /// Unix seconds from which it is refused.
    expires: Option<i64>,
    tenant: Tenant,
}

/// Who a request is from: the tenant of its key (or `default` with authentication off). Cheap
/// to clone; its limits are counted for the whole gateway.
#[derive(Clone)]
pub struct Tenant(Arc<TenantState>);

struct TenantState {
    name: String,
    /// Sees every tenant's records (`admin = true` in the keys file, or authentication off).
    admin: bool,
    /// Its place in the limit counters.
    counted: Counted,
    limiter: Arc<Limiter>,
}

/// One open stream of a tenant, counted until dropped.
pub type StreamSlot = OpenSlot;

/// One open WebSocket of a tenant, counted until dropped.
pub(crate) type WebSocketSlot = OpenSlot;

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
    pub fn new(legacy: &[String], table: &TenantTable, defaults: TenantLimits, limiter: Arc<Limiter>) -> Self {
        let mut tenants: HashMap<String, Tenant> = HashMap::new();
        let mut tenant = |name: &str, limits: TenantLimits, admin: bool| {
            tenants
                .entry(name.to_owned())
                .or_insert_with(|| Tenant::new(name, limits.or(defaults), admin, Arc::clone(&limiter)))
                .clone()
        };
        let mut keys = Vec::new();
        for spec in &table.tenants {
            let owner = tenant(&spec.name, spec.limits, spec.admin);
            for key in &spec.keys {
                // The table was checked when it was read: every hash decodes.
                if let Some(digest) = decode_digest(&key.sha256) {
                    keys.push(KeyEntry { digest, expires: key.expires, tenant: owner.clone() });
                }
            }
        }
        let legacy: Vec<&String> = legacy.iter().filter(|k| !k.is_empty()).collect();
        if !legacy.is_empty() {
            // Without a keys file, `--api-key` keys are the operator's own: they see everything.
            let owner = tenant(DEFAULT_TENANT, TenantLimits::default(), table.tenants.is_empty());
            for key in legacy {
                keys.push(KeyEntry { digest: digest(key.as_bytes()), expires: None, tenant: owner.clone() });
            }
        }
        // With authentication off the gateway is the local user's alone.
        let anonymous = tenant(DEFAULT_TENANT, TenantLimits::default(), keys.is_empty());
        ApiKeys { keys: keys.into(), anonymous, by_name: Arc::new(tenants) }
    }

    /// Where the engine charges each upstream call's tokens to the tenant that made it.
    pub fn token_meter(&self) -> Arc<dyn respgw_engine::TokenMeter> {
        Arc::new(TenantMeter(Arc::clone(&self.by_name)))
    }

    /// Whether any key is configured (authentication on).
    pub fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Every tenant a request can come from, sorted: those with keys, and `default` when
    /// authentication is off.
    pub fn tenant_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.keys.iter().map(|entry| entry.tenant.name().to_owned()).collect();
        if names.is_empty() {
            names.push(self.anonymous.name().to_owned());
        }
        names.sort();
        names.dedup();
        names
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
    fn new(name: &str, limits: TenantLimits, admin: bool, limiter: Arc<Limiter>) -> Self {
        let counted = limiter.counted(name, limits);
        Tenant(Arc::new(TenantState { name: name.to_owned(), admin, counted, limiter }))
    }

    /// The tenant's name: the owner of what it stores.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Whether this tenant sees every tenant's records: `admin = true` in the keys file, the
    /// `--api-key` keys when there is no keys file, and everyone when authentication is off.
    pub fn is_admin(&self) -> bool {
        self.0.admin
    }

    /// Admit one request that `opens` a stream or WebSocket, or nothing: its quotas and the
    /// slot counting what it opened; 429 with the wait when it is over a limit.
    pub(crate) async fn admit(&self, opens: Option<Open>) -> Result<Admitted, RateLimited> {
        self.0.limiter.admit(&self.0.counted, opens).await
    }

    /// Whether the tenant has a token budget, which its upstream calls' tokens are charged to.
    pub(crate) fn has_token_budget(&self) -> bool {
        self.0.counted.has_token_budget()
    }

    /// Charge `tokens` (input and output, as an upstream reply's `usage` reports them).
    pub(crate) async fn charge_tokens(&self, tokens: u64) {
        self.0.limiter.charge_tokens(&self.0.counted, tokens).await;
    }
}

/// The admission of a request on a route whose handler admits it ([`admitted_by_handler`]):
/// the handler calls [`Admission::admit`] once it knows whether the request opens a stream or a
/// WebSocket, and the middleware puts the quotas on the reply.
#[derive(Clone)]
pub struct Admission {
    tenant: Tenant,
    /// Set by the handler's admission: the quotas of an admitted request, `None` for a refused one
    /// (whose reply carries its own).
    outcome: Arc<OnceLock<Option<Quotas>>>,
}

impl Admission {
    /// Admit the request, opening what it `opens`: the slot counting it (none when the tenant
    /// has no limit on those), or the refusal to answer with.
    pub(crate) async fn admit(&self, opens: Option<Open>) -> Result<Option<OpenSlot>, RateLimited> {
        let admitted = self.tenant.admit(opens).await;
        let _ = self.outcome.set(admitted.as_ref().ok().map(|admitted| admitted.quotas));
        admitted.map(|admitted| admitted.slot)
    }
}

/// On a route only some of whose requests the handler admits (integrated mode's forwarding).
impl<S: Send + Sync> OptionalFromRequestParts<S> for Admission {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<Admission>().cloned())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Admission {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        // `require_api_key` sets it on every route `admitted_by_handler` names.
        parts.extensions.get::<Admission>().cloned().ok_or_else(|| {
            HttpError(ApiError::internal("The request reached a handler that admits it without its admission."))
        })
    }
}

/// Whether the handler of `method` `path` admits the request itself: the routes that may open
/// a stream or a WebSocket (`POST /v1/responses`, `/v1/messages`, `/v1/chat/completions` and
/// `/v1/completions`, the WebSocket upgrade `GET /v1/responses`, `GET /v1/responses/{id}` which
/// streams with `stream=true`).
pub(crate) fn admitted_by_handler(method: &Method, path: &str) -> bool {
    let path = path.strip_suffix('/').unwrap_or(path);
    match *method {
        Method::POST => [
            "/v1/responses",
            crate::messages::ROUTE,
            crate::passthrough::CHAT_COMPLETIONS,
            crate::passthrough::COMPLETIONS,
        ]
        .contains(&path),
        Method::GET => {
            path == "/v1/responses"
                || path.strip_prefix("/v1/responses/").is_some_and(|id| !id.is_empty() && !id.contains('/'))
        }
        _ => false,
    }
}

/// Charges token use to tenants by name (the engine knows a response's owner by name only).
struct TenantMeter(Arc<HashMap<String, Tenant>>);

#[async_trait::async_trait]
impl respgw_engine::TokenMeter for TenantMeter {
    async fn charge(&self, owner: &str, tokens: u64) {
        if let Some(tenant) = self.0.get(owner) {
            tenant.charge_tokens(tokens).await;
        }
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
/// presented, 429 when its tenant is over a limit; otherwise the request goes on with its
/// [`Tenant`] (and, on the routes whose handler admits it, its [`Admission`]), and is counted for
/// it.
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
    let response = if admitted_by_handler(request.method(), request.uri().path()) {
        let admission = Admission { tenant: tenant.clone(), outcome: Arc::new(OnceLock::new()) };
        request.extensions_mut().insert(tenant.clone());
        request.extensions_mut().insert(admission.clone());
        let mut response = next.run(request).await;
        match admission.outcome.get() {
            Some(Some(quotas)) => quotas.apply(response.headers_mut()),
            // Refused: the refusal carries its own headers.
            Some(None) => {}
            // Turned away before the handler admitted it (malformed): it counts all the same, and
            // a tenant over its limits gets the refusal, as on every other route.
            None => match tenant.admit(None).await {
                Ok(admitted) => admitted.quotas.apply(response.headers_mut()),
                Err(limited) => response = limited.into_response(),
            },
        }
        response
    } else {
        match tenant.admit(None).await {
            Ok(admitted) => {
                request.extensions_mut().insert(tenant.clone());
                let mut response = next.run(request).await;
                admitted.quotas.apply(response.headers_mut());
                response
            }
            Err(limited) => limited.into_response(),
        }
    };
    auth.metrics.tenant_request(tenant.name(), response.status().as_u16());
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenants::{KeySpec, TenantSpec, hash_key};
    use axum::http::HeaderValue;

    fn limiter() -> Arc<Limiter> {
        Arc::new(Limiter::private().unwrap())
    }

    async fn stream(tenant: &Tenant) -> Result<Option<OpenSlot>, RateLimited> {
        tenant.admit(Some(Open::Stream)).await.map(|admitted| admitted.slot)
    }

    async fn websocket(tenant: &Tenant) -> Result<Option<OpenSlot>, RateLimited> {
        tenant.admit(Some(Open::WebSocket)).await.map(|admitted| admitted.slot)
    }

    #[test]
    fn the_routes_that_may_open_a_stream_or_websocket_are_admitted_by_their_handler() {
        let cases = [
            (Method::POST, "/v1/responses", true),
            (Method::POST, "/v1/messages", true),
            (Method::GET, "/v1/responses", true),
            (Method::GET, "/v1/responses/resp_1", true),
            (Method::GET, "/v1/responses/resp_1/", true),
            (Method::GET, "/v1/responses/resp_1/input_items", false),
            (Method::DELETE, "/v1/responses/resp_1", false),
            (Method::POST, "/v1/responses/compact", false),
            (Method::POST, "/v1/messages/count_tokens", false),
            (Method::POST, "/v1/chat/completions", true),
            (Method::POST, "/v1/completions", true),
            (Method::GET, "/v1/models", false),
            (Method::GET, "/v1/files", false),
        ];
        for (method, path, by_handler) in cases {
            assert_eq!(admitted_by_handler(&method, path), by_handler, "{method} {path}");
        }
    }

    fn table(specs: &[(&str, &[&str], TenantLimits)]) -> TenantTable {
        TenantTable {
            tenants: specs
                .iter()
                .map(|(name, keys, limits)| TenantSpec {
                    name: (*name).to_owned(),
                    keys: keys.iter().map(|k| KeySpec { sha256: hash_key(k)[7..].to_owned(), expires: None }).collect(),
                    limits: *limits,
                    admin: false,
                })
                .collect(),
        }
    }

    #[test]
    fn accepts_only_configured_keys() {
        let keys = ApiKeys::new(
            &["alpha".to_owned(), "beta".to_owned()],
            &TenantTable::default(),
            TenantLimits::default(),
            limiter(),
        );
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
        assert!(!ApiKeys::new(&[], &TenantTable::default(), TenantLimits::default(), limiter()).enabled());
        assert!(!ApiKeys::new(&[String::new()], &TenantTable::default(), TenantLimits::default(), limiter()).enabled());
    }

    #[test]
    fn each_key_maps_to_its_tenant_and_legacy_keys_to_default() {
        let none = TenantLimits::default();
        let keys = ApiKeys::new(
            &["old".to_owned()],
            &table(&[("alpha", &["a1", "a2"], none), ("beta", &["b1"], none)]),
            none,
            limiter(),
        );
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
        let keys = ApiKeys::new(&[], &t, TenantLimits::default(), limiter());
        assert_eq!(keys.tenant_of("a1").err(), Some("This API key has expired."));
        assert!(keys.accepts("a2"));
    }

    #[tokio::test]
    async fn the_request_budget_is_per_tenant_and_says_when_to_retry() {
        let limited = TenantLimits { requests_per_minute: Some(2), ..TenantLimits::default() };
        let keys = ApiKeys::new(
            &[],
            &table(&[("alpha", &["a"], limited), ("beta", &["b"], TenantLimits::default())]),
            TenantLimits::default(),
            limiter(),
        );
        let alpha = keys.tenant_of("a").map(|(t, _)| t.clone()).unwrap_or_else(|e| panic!("{e}"));
        let beta = keys.tenant_of("b").map(|(t, _)| t.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert!(alpha.admit(None).await.is_ok());
        assert!(alpha.admit(None).await.is_ok());
        let Err(limited) = alpha.admit(None).await else { panic!("the third request in a minute is over the limit") };
        assert_eq!((limited.error.status, limited.retry_after), (429, 30));
        assert_eq!(limited.error.code.as_deref(), Some("rate_limit_exceeded"));
        for _ in 0..100 {
            assert!(beta.admit(None).await.is_ok(), "another tenant is unaffected");
        }
    }

    #[tokio::test]
    async fn defaults_apply_to_tenants_without_their_own_limits() {
        let defaults = TenantLimits { max_open_streams: Some(1), ..TenantLimits::default() };
        let keys = ApiKeys::new(&["k".to_owned()], &TenantTable::default(), defaults, limiter());
        let tenant = keys.tenant_of("k").map(|(t, _)| t.clone()).unwrap_or_else(|e| panic!("{e}"));
        let slot = stream(&tenant).await.unwrap_or_else(|_| panic!("the first stream opens"));
        assert!(slot.is_some(), "a limited stream is counted");
        assert!(stream(&tenant).await.is_err(), "the second is over the limit");
        assert!(tenant.admit(None).await.is_ok(), "a request opening nothing is not");
        drop(slot);
        assert!(stream(&tenant).await.is_ok(), "a closed stream frees its place");
    }

    #[tokio::test]
    async fn open_websockets_are_counted_per_tenant_against_their_own_limit() {
        let two = TenantLimits { max_websockets: Some(2), ..TenantLimits::default() };
        let keys = ApiKeys::new(
            &[],
            &table(&[("alpha", &["a"], two), ("beta", &["b"], TenantLimits::default())]),
            two,
            limiter(),
        );
        let alpha = keys.tenant_of("a").map(|(t, _)| t.clone()).unwrap_or_else(|e| panic!("{e}"));
        let beta = keys.tenant_of("b").map(|(t, _)| t.clone()).unwrap_or_else(|e| panic!("{e}"));
        let mut sockets: Vec<Option<WebSocketSlot>> = Vec::new();
        for _ in 0..2 {
            sockets.push(websocket(&alpha).await.unwrap_or_else(|_| panic!("under the limit")));
        }
        let Err(limited) = websocket(&alpha).await else { panic!("the third WebSocket is over the limit") };
        assert_eq!(limited.error.code.as_deref(), Some("rate_limit_exceeded"));
        assert!(stream(&alpha).await.is_ok(), "WebSockets and streams are counted apart");
        assert!(websocket(&beta).await.is_ok(), "another tenant is unaffected");
        drop(sockets);
        assert!(websocket(&alpha).await.is_ok(), "a closed WebSocket frees its place");
    }
}
