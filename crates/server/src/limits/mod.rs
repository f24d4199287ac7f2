//! Per-tenant limits that hold for the gateway as a whole: requests per minute, streams and
//! WebSockets open at once, tokens per minute and per day.
//!
//! [`Limiter`] is the one interface the HTTP layer uses: [`Limiter::admit`] a request (rate and
//! token budget, before anything else runs), [`Limiter::open`] a stream or WebSocket (closed when
//! its [`OpenSlot`] drops), [`Limiter::charge_tokens`] after each upstream call. Admissions and
//! refusals carry the [`Quotas`] the `x-ratelimit-*` headers show.
//!
//! Counters live in the [`shared`] region the workers of one gateway share; with `--redis-url`,
//! requests, token budgets and open streams are counted in Redis ([`redis`]) so every gateway on
//! it counts together, the shared region standing in while Redis is unreachable (`open` failure
//! mode) — WebSockets stay counted per gateway.

pub mod redis;
pub mod shared;

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use respgw_protocol::ApiError;

use crate::error::HttpError;
use crate::tenants::TenantLimits;
use shared::{Open, SharedCounters};

pub use self::redis::{RedisFailureMode, RedisLimits, RedisSettings};

/// Where a gateway process counts its tenants' limits.
pub struct Limiter {
    /// The counters of this gateway's workers.
    local: Arc<SharedCounters>,
    /// Counters for tenants beyond the shared region's table (counted in this process only).
    overflow: Arc<SharedCounters>,
    /// Every gateway on one Redis, when configured.
    redis: Option<RedisLimits>,
}

/// One tenant's place in the counters.
#[derive(Clone)]
pub(crate) struct Counted {
    region: Arc<SharedCounters>,
    cell: usize,
    name: String,
    limits: TenantLimits,
}

/// One limit's state as the `x-ratelimit-*` headers show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub limit: u64,
    pub remaining: u64,
    /// Until the limit is whole again.
    pub reset: Duration,
}

/// The request and token limits of a reply; `None` where the tenant has no such limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quotas {
    pub requests: Option<Quota>,
    pub tokens: Option<Quota>,
}

/// A 429 `rate_limit_exceeded` reply (or a 503 when the shared counters are unreachable and the
/// gateway fails closed): the error shape, `Retry-After` in seconds, and the quotas.
pub struct RateLimited {
    pub error: ApiError,
    pub retry_after: u64,
    /// Boxed: refusals are rare, and the `Err` of every admission stays small.
    pub quotas: Box<Quotas>,
}

impl IntoResponse for RateLimited {
    fn into_response(self) -> Response {
        let mut response = HttpError(self.error).into_response();
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(self.retry_after));
        self.quotas.apply(response.headers_mut());
        response
    }
}

/// A stream or WebSocket counted open until dropped.
pub struct OpenSlot {
    counted: Counted,
    what: Open,
    /// Its lease in Redis, when counted there.
    lease: Option<redis::Lease>,
}

impl Drop for OpenSlot {
    fn drop(&mut self) {
        match self.lease.take() {
            Some(lease) => lease.release(),
            None => self.counted.region.close(self.counted.cell, self.what),
        }
    }
}

impl Limiter {
    /// Count in `local`, and in Redis when `redis` is given.
    pub fn new(local: Arc<SharedCounters>, redis: Option<RedisLimits>) -> std::io::Result<Limiter> {
        Ok(Limiter { local, overflow: Arc::new(SharedCounters::private()?), redis })
    }

    /// A limiter counting in a region of its own (tests, a worker without a supervisor).
    pub fn private() -> std::io::Result<Limiter> {
        Limiter::new(Arc::new(SharedCounters::private()?), None)
    }

    /// The counters of tenant `name` with `limits`.
    pub(crate) fn counted(&self, name: &str, limits: TenantLimits) -> Counted {
        let (region, cell) = match self.local.cell(name) {
            Some(cell) => (Arc::clone(&self.local), cell),
            None => {
                tracing::error!(tenant = name, "the shared limits table is full; this tenant is counted per worker");
                (Arc::clone(&self.overflow), self.overflow.cell(name).unwrap_or_default())
            }
        };
        Counted { region, cell, name: name.to_owned(), limits }
    }

    /// Admit one request: 429 when the tenant's token budget is spent or its request rate is
    /// reached (tokens first, so a refused request does not use up the rate).
    pub(crate) async fn admit(&self, counted: &Counted) -> Result<Quotas, RateLimited> {
        let limits = &counted.limits;
        if limits.requests_per_minute.is_none() && limits.tokens_per_minute.is_none() && limits.tokens_per_day.is_none()
        {
            return Ok(Quotas::default());
        }
        if let Some(redis) = &self.redis {
            match redis.admit(&counted.name, limits).await {
                Ok(decision) => return decision.into_result(counted),
                Err(unreachable) => redis.on_unreachable(unreachable)?,
            }
        }
        admit_local(counted)
    }

    /// Count one more open stream or WebSocket: 429 when the tenant has its limit open already.
    pub(crate) async fn open(&self, counted: &Counted, what: Open) -> Result<OpenSlot, RateLimited> {
        let limit = match what {
            Open::Stream => counted.limits.max_open_streams,
            Open::WebSocket => counted.limits.max_websockets,
        }
        .filter(|n| *n > 0)
        .unwrap_or(u32::MAX);
        if let (Some(redis), Open::Stream, true) = (&self.redis, what, limit < u32::MAX) {
            match redis.open_stream(&counted.name, limit).await {
                Ok(Some(lease)) => return Ok(OpenSlot { counted: counted.clone(), what, lease: Some(lease) }),
                Ok(None) => return Err(too_many(counted, what, limit)),
                Err(unreachable) => redis.on_unreachable(unreachable)?,
            }
        }
        if counted.region.open(counted.cell, what, limit) {
            return Ok(OpenSlot { counted: counted.clone(), what, lease: None });
        }
        Err(too_many(counted, what, limit))
    }

    /// Charge `tokens` (input and output, as an upstream call's `usage` reports them).
    pub(crate) async fn charge_tokens(&self, counted: &Counted, tokens: u64) {
        let limits = &counted.limits;
        if tokens == 0 || (limits.tokens_per_minute.is_none() && limits.tokens_per_day.is_none()) {
            return;
        }
        if let Some(redis) = &self.redis {
            match redis.charge(&counted.name, tokens).await {
                Ok(()) => return,
                Err(unreachable) => {
                    // A charge that cannot reach Redis is counted here, whatever the failure mode.
                    let _ = redis.on_unreachable(unreachable);
                }
            }
        }
        counted.region.charge_tokens(counted.cell, tokens);
    }
}

/// Admission from this gateway's own counters.
fn admit_local(counted: &Counted) -> Result<Quotas, RateLimited> {
    let limits = &counted.limits;
    let used = counted.region.tokens_used(counted.cell);
    let mut quotas = Quotas {
        requests: None,
        tokens: token_quota(limits, used.minute, used.day, used.minute_ends_in, used.day_ends_in),
    };
    if let Some(refused) = token_refusal(counted, used.minute, used.day, used.minute_ends_in, used.day_ends_in, quotas)
    {
        return Err(refused);
    }
    if let Some(per_minute) = limits.requests_per_minute {
        let state = counted.region.take_request(counted.cell, per_minute);
        quotas.requests = Some(Quota { limit: u64::from(per_minute), remaining: state.remaining, reset: state.reset });
        if !state.admitted {
            return Err(rate_refusal(counted, per_minute, state.retry_after, quotas));
        }
    }
    Ok(quotas)
}

/// The token quota the headers show: the per-minute budget when there is one, else the day's.
fn token_quota(
    limits: &TenantLimits,
    minute: u64,
    day: u64,
    minute_ends_in: Duration,
    day_ends_in: Duration,
) -> Option<Quota> {
    let quota = |limit: u32, used: u64, reset| Quota {
        limit: u64::from(limit),
        remaining: u64::from(limit).saturating_sub(used),
        reset,
    };
    match (limits.tokens_per_minute, limits.tokens_per_day) {
        (Some(limit), _) => Some(quota(limit, minute, minute_ends_in)),
        (None, Some(limit)) => Some(quota(limit, day, day_ends_in)),
        (None, None) => None,
    }
}

/// The refusal when a token budget is spent.
fn token_refusal(
    counted: &Counted,
    minute: u64,
    day: u64,
    minute_ends_in: Duration,
    day_ends_in: Duration,
    quotas: Quotas,
) -> Option<RateLimited> {
    let limits = &counted.limits;
    let (limit, window, wait) = if let Some(limit) = limits.tokens_per_day.filter(|l| day >= u64::from(*l)) {
        (limit, "day", day_ends_in)
    } else if let Some(limit) = limits.tokens_per_minute.filter(|l| minute >= u64::from(*l)) {
        (limit, "minute", minute_ends_in)
    } else {
        return None;
    };
    let seconds = whole_seconds(wait);
    tracing::info!(tenant = counted.name, limit, window, "token budget spent");
    Some(RateLimited {
        error: ApiError::rate_limited(format!(
            "Token budget spent: this API key's tenant may use {limit} tokens per {window}. Retry after {seconds} s."
        )),
        retry_after: seconds,
        quotas: Box::new(quotas),
    })
}

fn rate_refusal(counted: &Counted, limit: u32, wait: Duration, quotas: Quotas) -> RateLimited {
    let seconds = whole_seconds(wait);
    tracing::info!(tenant = counted.name, limit, "request rate limit reached");
    RateLimited {
        error: ApiError::rate_limited(format!(
            "Rate limit reached: this API key's tenant may make {limit} requests per minute. Retry after {seconds} s."
        )),
        retry_after: seconds,
        quotas: Box::new(quotas),
    }
}

fn too_many(counted: &Counted, what: Open, limit: u32) -> RateLimited {
    let message = match what {
        Open::Stream => format!(
            "Too many open streams: this API key's tenant may have {limit} streaming responses open at once. \
             Retry after one has finished."
        ),
        Open::WebSocket => format!(
            "Too many WebSockets: this API key's tenant may have {limit} WebSockets open at once. Close one, or \
             retry later."
        ),
    };
    tracing::info!(tenant = counted.name, limit, what = ?what, "open limit reached");
    RateLimited { error: ApiError::rate_limited(message), retry_after: 1, quotas: Box::default() }
}

/// A wait in whole seconds, rounded up, at least 1 (for `Retry-After`).
fn whole_seconds(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

const LIMIT_REQUESTS: HeaderName = HeaderName::from_static("x-ratelimit-limit-requests");
const REMAINING_REQUESTS: HeaderName = HeaderName::from_static("x-ratelimit-remaining-requests");
const RESET_REQUESTS: HeaderName = HeaderName::from_static("x-ratelimit-reset-requests");
const LIMIT_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-limit-tokens");
const REMAINING_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-remaining-tokens");
const RESET_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-reset-tokens");

impl Quotas {
    /// Set the `x-ratelimit-*` headers of the limits there are.
    pub fn apply(&self, headers: &mut HeaderMap) {
        let mut set = |quota: &Option<Quota>, [limit, remaining, reset]: [HeaderName; 3]| {
            let Some(quota) = quota else { return };
            headers.insert(limit, HeaderValue::from(quota.limit));
            headers.insert(remaining, HeaderValue::from(quota.remaining));
            if let Ok(value) = HeaderValue::from_str(&openai_duration(quota.reset)) {
                headers.insert(reset, value);
            }
        };
        set(&self.requests, [LIMIT_REQUESTS, REMAINING_REQUESTS, RESET_REQUESTS]);
        set(&self.tokens, [LIMIT_TOKENS, REMAINING_TOKENS, RESET_TOKENS]);
    }
}

/// A duration as OpenAI's `x-ratelimit-reset-*` headers write it (Go's format, to the
/// millisecond): `120ms`, `1s`, `1.5s`, `6m0s`, `1h2m3s`.
pub fn openai_duration(duration: Duration) -> String {
    let millis = duration.as_millis() as u64;
    if millis < 1000 {
        return format!("{millis}ms");
    }
    let (hours, minutes, seconds, fraction) =
        (millis / 3_600_000, millis / 60_000 % 60, millis / 1000 % 60, millis % 1000);
    let seconds = if fraction == 0 {
        format!("{seconds}s")
    } else {
        format!("{seconds}.{}s", format!("{fraction:03}").trim_end_matches('0'))
    };
    match (hours, minutes) {
        (0, 0) => seconds,
        (0, m) => format!("{m}m{seconds}"),
        (h, m) => format!("{h}h{m}m{seconds}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_written_as_openai_does() {
        let cases = [
            (0, "0ms"),
            (120, "120ms"),
            (1000, "1s"),
            (1500, "1.5s"),
            (1250, "1.25s"),
            (360_000, "6m0s"),
            (3_723_000, "1h2m3s"),
            (86_400_000, "24h0m0s"),
        ];
        for (millis, text) in cases {
            assert_eq!(openai_duration(Duration::from_millis(millis)), text);
        }
    }

    fn counted(limiter: &Limiter, limits: TenantLimits) -> Counted {
        limiter.counted("alpha", limits)
    }

    #[tokio::test]
    async fn a_spent_token_budget_refuses_the_next_request_until_its_window_ends() {
        let limiter = Limiter::private().unwrap();
        let alpha = counted(&limiter, TenantLimits { tokens_per_minute: Some(100), ..TenantLimits::default() });
        let quotas = limiter.admit(&alpha).await.unwrap_or_else(|_| panic!("nothing used yet"));
        assert_eq!(quotas.tokens.map(|q| (q.limit, q.remaining)), Some((100, 100)));
        assert_eq!(quotas.requests, None, "no request limit, no request headers");
        limiter.charge_tokens(&alpha, 60).await;
        let quotas = limiter.admit(&alpha).await.unwrap_or_else(|_| panic!("40 left"));
        assert_eq!(quotas.tokens.map(|q| q.remaining), Some(40));
        limiter.charge_tokens(&alpha, 60).await;
        let Err(refused) = limiter.admit(&alpha).await else { panic!("the budget is spent") };
        assert_eq!(refused.error.status, 429);
        assert!(refused.error.message.contains("100 tokens per minute"), "{}", refused.error.message);
        assert!((1..=60).contains(&refused.retry_after));
        assert_eq!(refused.quotas.tokens.map(|q| q.remaining), Some(0));
    }

    #[tokio::test]
    async fn a_day_budget_is_named_when_it_is_the_one_spent() {
        let limiter = Limiter::private().unwrap();
        let limits =
            TenantLimits { tokens_per_minute: Some(1000), tokens_per_day: Some(50), ..TenantLimits::default() };
        let alpha = counted(&limiter, limits);
        limiter.charge_tokens(&alpha, 50).await;
        let Err(refused) = limiter.admit(&alpha).await else { panic!("the day's budget is spent") };
        assert!(refused.error.message.contains("50 tokens per day"), "{}", refused.error.message);
    }

    #[tokio::test]
    async fn headers_show_both_limits() {
        let limiter = Limiter::private().unwrap();
        let limits =
            TenantLimits { requests_per_minute: Some(10), tokens_per_minute: Some(500), ..TenantLimits::default() };
        let alpha = counted(&limiter, limits);
        let quotas = limiter.admit(&alpha).await.unwrap_or_else(|_| panic!("admitted"));
        let mut headers = HeaderMap::new();
        quotas.apply(&mut headers);
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        assert_eq!(header("x-ratelimit-limit-requests").as_deref(), Some("10"));
        assert_eq!(header("x-ratelimit-remaining-requests").as_deref(), Some("9"));
        assert_eq!(header("x-ratelimit-reset-requests").as_deref(), Some("6s"));
        assert_eq!(header("x-ratelimit-limit-tokens").as_deref(), Some("500"));
        assert_eq!(header("x-ratelimit-remaining-tokens").as_deref(), Some("500"));
        assert!(header("x-ratelimit-reset-tokens").is_some());
    }
}
