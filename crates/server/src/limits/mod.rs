//! Per-tenant limits that hold for the gateway as a whole: requests per minute, streams and
//! WebSockets open at once, tokens per minute and per day.
//!
//! [`Limiter`] is the one interface the HTTP layer uses: [`Limiter::admit`] a request — its rate
//! and token budget, and the stream or WebSocket it opens, if any (counted open until its
//! [`OpenSlot`] drops) — in one step, before anything else runs; [`Limiter::charge_tokens`] after
//! each upstream call. Admissions and refusals carry the [`Quotas`] the `x-ratelimit-*` headers
//! show.
//!
//! Counters live in the [`shared`] region the workers of one gateway share; with `--redis-url`,
//! requests, token budgets, open streams and WebSockets are counted in Redis ([`redis`]) so every
//! gateway on it counts together — one round trip per admission, stream or WebSocket included —
//! the shared region standing in while Redis is unreachable (`open` failure mode).

pub mod redis;
mod redis_direct;
pub(crate) mod relayed_usage;
pub mod shared;

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use respgw_protocol::ApiError;

use crate::error::HttpError;
use crate::tenants::TenantLimits;
use shared::SharedCounters;

pub(crate) use shared::Open;

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

/// An admitted request: the quotas its reply shows, and the stream or WebSocket it opened when
/// its tenant has a limit on those.
pub struct Admitted {
    pub quotas: Quotas,
    pub slot: Option<OpenSlot>,
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

impl Counted {
    /// Whether the tenant has a token budget (its upstream calls' tokens are charged).
    pub(crate) fn has_token_budget(&self) -> bool {
        self.limits.tokens_per_minute.is_some() || self.limits.tokens_per_day.is_some()
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

    /// Admit one request that `opens` a stream or WebSocket, or nothing: 429 when the tenant's
    /// token budget is spent, its limit of those open is reached, or its request rate is reached
    /// (checked in that order, so a refused request does not use up the rate). With Redis, one
    /// round trip.
    pub(crate) async fn admit(&self, counted: &Counted, opens: Option<Open>) -> Result<Admitted, RateLimited> {
        let limits = &counted.limits;
        let lease = opens.and_then(|what| open_limit(limits, what).map(|limit| (what, limit)));
        let rated = limits.requests_per_minute.is_some()
            || limits.tokens_per_minute.is_some()
            || limits.tokens_per_day.is_some();
        if !rated && lease.is_none() {
            return Ok(Admitted { quotas: Quotas::default(), slot: None });
        }
        if let Some(redis) = &self.redis {
            match redis.admit(&counted.name, limits, lease).await {
                Ok((decision, held)) => {
                    let quotas = decision.into_result(counted, lease)?;
                    let slot = lease.zip(held).map(|((what, _), held)| OpenSlot {
                        counted: counted.clone(),
                        what,
                        lease: Some(held),
                    });
                    return Ok(Admitted { quotas, slot });
                }
                Err(unreachable) => redis.on_unreachable(unreachable)?,
            }
        }
        admit_local(counted, lease)
    }

    /// Charge `tokens` (input and output, as an upstream call's `usage` reports them).
    pub(crate) async fn charge_tokens(&self, counted: &Counted, tokens: u64) {
        if tokens == 0 || !counted.has_token_budget() {
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

/// The tenant's limit on open streams or WebSockets; `None` (or 0 in the keys file): no limit.
fn open_limit(limits: &TenantLimits, what: Open) -> Option<u32> {
    match what {
        Open::Stream => limits.max_open_streams,
        Open::WebSocket => limits.max_websockets,
    }
    .filter(|n| *n > 0)
}

/// Admission from this gateway's own counters, with the stream or WebSocket `lease` (kind and
/// limit) when it opens one.
fn admit_local(counted: &Counted, lease: Option<(Open, u32)>) -> Result<Admitted, RateLimited> {
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
    // Counted open first; a request the rate then refuses drops its slot, which closes it.
    let slot = match lease {
        None => None,
        Some((what, limit)) if counted.region.open(counted.cell, what, limit) => {
            Some(OpenSlot { counted: counted.clone(), what, lease: None })
        }
        Some((what, limit)) => return Err(too_many(counted, what, limit)),
    };
    if let Some(per_minute) = limits.requests_per_minute {
        let state = counted.region.take_request(counted.cell, per_minute);
        quotas.requests = Some(Quota { limit: u64::from(per_minute), remaining: state.remaining, reset: state.reset });
        if !state.admitted {
            return Err(rate_refusal(counted, per_minute, state.retry_after, quotas));
        }
    }
    Ok(Admitted { quotas, slot })
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
        let quotas = limiter.admit(&alpha, None).await.unwrap_or_else(|_| panic!("nothing used yet")).quotas;
        assert_eq!(quotas.tokens.map(|q| (q.limit, q.remaining)), Some((100, 100)));
        assert_eq!(quotas.requests, None, "no request limit, no request headers");
        limiter.charge_tokens(&alpha, 60).await;
        let quotas = limiter.admit(&alpha, None).await.unwrap_or_else(|_| panic!("40 left")).quotas;
        assert_eq!(quotas.tokens.map(|q| q.remaining), Some(40));
        limiter.charge_tokens(&alpha, 60).await;
        let Err(refused) = limiter.admit(&alpha, None).await else { panic!("the budget is spent") };
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
        let Err(refused) = limiter.admit(&alpha, None).await else { panic!("the day's budget is spent") };
        assert!(refused.error.message.contains("50 tokens per day"), "{}", refused.error.message);
    }

    #[tokio::test]
    async fn a_stream_is_admitted_with_its_request_in_one_step() {
        let limiter = Limiter::private().unwrap();
        let limits =
            TenantLimits { requests_per_minute: Some(2), max_open_streams: Some(1), ..TenantLimits::default() };
        let alpha = counted(&limiter, limits);
        let first = limiter.admit(&alpha, Some(Open::Stream)).await.unwrap_or_else(|_| panic!("admitted"));
        assert!(first.slot.is_some(), "the stream is counted open");
        assert_eq!(first.quotas.requests.map(|q| q.remaining), Some(1));
        let Err(refused) = limiter.admit(&alpha, Some(Open::Stream)).await else { panic!("one stream is open") };
        assert!(refused.error.message.contains("1 streaming responses"), "{}", refused.error.message);
        let plain = limiter.admit(&alpha, None).await.unwrap_or_else(|_| panic!("the refused stream used no rate"));
        assert_eq!(plain.quotas.requests.map(|q| q.remaining), Some(0));
        drop(first);
        let Err(refused) = limiter.admit(&alpha, Some(Open::Stream)).await else { panic!("the rate is used up") };
        assert!(refused.error.message.contains("2 requests per minute"), "{}", refused.error.message);
        assert_eq!(alpha.region.open_now(alpha.cell, Open::Stream), 0, "a refused request opens nothing");
    }

    #[tokio::test]
    async fn an_unlimited_open_takes_no_slot() {
        let limiter = Limiter::private().unwrap();
        let alpha = counted(&limiter, TenantLimits { requests_per_minute: Some(5), ..TenantLimits::default() });
        let admitted = limiter.admit(&alpha, Some(Open::WebSocket)).await.unwrap_or_else(|_| panic!("admitted"));
        assert!(admitted.slot.is_none());
        assert!(admitted.quotas.requests.is_some());
    }

    #[tokio::test]
    async fn headers_show_both_limits() {
        let limiter = Limiter::private().unwrap();
        let limits =
            TenantLimits { requests_per_minute: Some(10), tokens_per_minute: Some(500), ..TenantLimits::default() };
        let alpha = counted(&limiter, limits);
        let quotas = limiter.admit(&alpha, None).await.unwrap_or_else(|_| panic!("admitted")).quotas;
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
