//! Limits counted in Redis (`--redis-url`), so that every gateway using one Redis counts together.
//!
//! Each operation is one Lua script run with `EVALSHA` (redis-rs loads it again on `NOSCRIPT`),
//! timed by Redis's own clock (`TIME`), so gateways with skewed clocks agree:
//! - admission: the token budgets checked, then — when the request opens a stream or WebSocket
//!   its tenant has a limit on — the tenant's open ones, then the request rate (GCRA on the
//!   tenant's theoretical arrival time), and the stream's or WebSocket's lease taken: one round
//!   trip per request, whatever it opens. Open streams and WebSockets are each a sorted set of
//!   leases scored by their expiry; expired ones are dropped, a lease is added below the limit;
//!   a task renews this process's leases, a dropped stream or WebSocket removes its own, and
//!   those of a gateway that died expire within [`LEASE_TTL`];
//! - token charge: `INCRBY` on the current minute's and day's counters, which expire after their
//!   window.
//!
//! Keys are `respgw:limits:{<tenant>}:…` (the tenant in braces: one cluster slot per tenant).
//! Calls go through a [`ConnectionManager`] (multiplexed, reconnecting by itself); an admission
//! that finds the direct connection idle uses that instead ([`super::redis_direct`]). When Redis
//! cannot be reached, the failure mode decides: `open` counts in this gateway's shared region (a
//! warning once per outage, and `gw_responses_limits_redis_up` 0), `closed` answers 503.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Script};
use respgw_protocol::{ApiError, ErrorType};
use serde::{Deserialize, Serialize};

use super::redis_direct::{Broken, DirectConnection, Reply};
use super::{Counted, Open, Quota, Quotas, RateLimited, rate_refusal, token_quota, token_refusal, too_many};
use crate::tenants::TenantLimits;

/// How long a stream's or WebSocket's lease lasts without renewal.
pub const LEASE_TTL: Duration = Duration::from_secs(30);
/// How long one Redis call may take before Redis counts as unreachable.
const CALL_TIMEOUT: Duration = Duration::from_millis(500);

/// What to do while Redis cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedisFailureMode {
    /// Serve, counting in this gateway alone.
    Open,
    /// Refuse with 503.
    Closed,
}

/// The Redis settings of a gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisSettings {
    /// `redis://[user:password@]host:port/db`, or `redis+unix:///path`.
    pub url: String,
    pub failure_mode: RedisFailureMode,
}

/// Limits counted in one Redis.
pub struct RedisLimits(Arc<Inner>);

struct Inner {
    connection: ConnectionManager,
    /// The admissions' direct connection (none for a TLS address).
    direct: Option<Arc<DirectConnection>>,
    failure_mode: RedisFailureMode,
    admit: Script,
    renew: Script,
    charge: Script,
    /// Whether the last call reached Redis (a warning is logged when it stops, once per outage).
    up: Arc<AtomicBool>,
    /// The stream and WebSocket leases this process holds: lease id → key of the tenant's set.
    leases: Mutex<HashMap<String, String>>,
    next_lease: AtomicU64,
    /// This process's part of lease ids.
    process: String,
}

/// Why Redis did not answer.
pub struct Unreachable(String);

/// One stream or WebSocket counted in Redis, removed when released.
pub struct Lease {
    owner: Weak<Inner>,
    id: String,
}

impl Lease {
    /// Remove the lease (in the background: a drop cannot wait for Redis).
    pub(crate) fn release(self) {
        let Some(inner) = self.owner.upgrade() else { return };
        let Some(key) = inner.leases.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.id) else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let mut connection = inner.connection.clone();
        runtime.spawn(async move {
            let removed: Result<Result<i64, _>, _> = tokio::time::timeout(
                CALL_TIMEOUT,
                redis::cmd("ZREM").arg(&key).arg(&self.id).query_async(&mut connection),
            )
            .await;
            if !matches!(removed, Ok(Ok(_))) {
                tracing::debug!(lease = self.id, "a lease could not be removed; it expires by itself");
            }
        });
    }
}

/// What the admission script answered.
pub(crate) struct Decision {
    /// 0: admitted; 1: request rate reached; 2: a token budget is spent; 3: the tenant's limit of
    /// open streams or WebSockets is reached.
    outcome: i64,
    requests_remaining: u64,
    requests_reset_ms: u64,
    retry_ms: u64,
    tokens_minute: u64,
    tokens_day: u64,
    minute_ends_ms: u64,
    day_ends_ms: u64,
}

impl Decision {
    /// The quotas of an admission, or its refusal; `lease` is what the request asked to open.
    pub(crate) fn into_result(self, counted: &Counted, lease: Option<(Open, u32)>) -> Result<Quotas, RateLimited> {
        let limits = &counted.limits;
        let (minute_ends, day_ends) =
            (Duration::from_millis(self.minute_ends_ms), Duration::from_millis(self.day_ends_ms));
        let mut quotas = Quotas {
            requests: None,
            tokens: token_quota(limits, self.tokens_minute, self.tokens_day, minute_ends, day_ends),
        };
        if self.outcome == 2
            && let Some(refused) =
                token_refusal(counted, self.tokens_minute, self.tokens_day, minute_ends, day_ends, quotas)
        {
            return Err(refused);
        }
        if let (3, Some((what, limit))) = (self.outcome, lease) {
            return Err(too_many(counted, what, limit));
        }
        if let Some(per_minute) = limits.requests_per_minute {
            quotas.requests = Some(Quota {
                limit: u64::from(per_minute),
                remaining: self.requests_remaining,
                reset: Duration::from_millis(self.requests_reset_ms),
            });
            if self.outcome == 1 {
                return Err(rate_refusal(counted, per_minute, Duration::from_millis(self.retry_ms), quotas));
            }
        }
        Ok(quotas)
    }
}

/// Admission: token budgets, open streams or WebSockets, then GCRA, then the lease.
/// KEYS[1]: the tenant's key prefix; KEYS[2]: its set of stream or WebSocket leases, when the
/// request opens one. ARGV: requests per minute, tokens per minute, tokens per day (0: none),
/// open limit (0: opens nothing), lease id, lease ms. Returns outcome, requests remaining,
/// requests reset (ms), retry after (ms), tokens used this minute and day, and the ms left in
/// the minute and the day.
const ADMIT: &str = r"
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
local base = KEYS[1]
local rpm, tpm, tpd = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local open_limit = tonumber(ARGV[4])
local minute_ends = 60000 - now_ms % 60000
local day_ends = 86400000 - now_ms % 86400000
local used_m, used_d = 0, 0
if tpm > 0 or tpd > 0 then
  used_m = tonumber(redis.call('GET', base .. ':tpm:' .. math.floor(tonumber(t[1]) / 60)) or '0')
  used_d = tonumber(redis.call('GET', base .. ':tpd:' .. math.floor(tonumber(t[1]) / 86400)) or '0')
  if (tpm > 0 and used_m >= tpm) or (tpd > 0 and used_d >= tpd) then
    return {2, 0, 0, 0, used_m, used_d, minute_ends, day_ends}
  end
end
if open_limit > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
  if redis.call('ZCARD', KEYS[2]) >= open_limit then
    return {3, 0, 0, 0, used_m, used_d, minute_ends, day_ends}
  end
end
local remaining, reset = 0, 0
if rpm > 0 then
  local interval = 60000000 / rpm
  local tat = tonumber(redis.call('GET', base .. ':tat') or '0')
  local from = math.max(tat, now_us)
  local ahead = from + interval - now_us
  if ahead > 60000000 then
    return {1, 0, math.ceil((from - now_us) / 1000), math.ceil((ahead - 60000000) / 1000), used_m, used_d, minute_ends, day_ends}
  end
  redis.call('SET', base .. ':tat', string.format('%.0f', from + interval), 'PX', math.ceil(ahead / 1000) + 1000)
  remaining, reset = math.floor((60000000 - ahead) / interval), math.ceil(ahead / 1000)
end
if open_limit > 0 then
  redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[6]), ARGV[5])
  redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[6]))
end
return {0, remaining, reset, 0, used_m, used_d, minute_ends, day_ends}
";

/// Renew leases: KEYS are lease sets, ARGV[1] the lease ms, ARGV[i + 1] the lease in KEYS[i].
const RENEW: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, 'XX', now + ttl, ARGV[i + 1])
  redis.call('PEXPIRE', key, ttl)
end
return #KEYS
";

/// Charge tokens: KEYS[1] the tenant's key prefix; ARGV[1] tokens.
const CHARGE: &str = r"
local t = tonumber(redis.call('TIME')[1])
local minute = KEYS[1] .. ':tpm:' .. math.floor(t / 60)
local day = KEYS[1] .. ':tpd:' .. math.floor(t / 86400)
redis.call('INCRBY', minute, ARGV[1])
redis.call('EXPIRE', minute, 120)
redis.call('INCRBY', day, ARGV[1])
redis.call('EXPIRE', day, 172800)
return 1
";

fn tenant_key(tenant: &str) -> String {
    format!("respgw:limits:{{{tenant}}}")
}

impl RedisLimits {
    /// A client of the Redis at `settings.url`, connecting in the background (a Redis that is
    /// down at start-up is handled like one that goes down later). Fails only on a malformed URL.
    pub fn connect(settings: &RedisSettings) -> Result<RedisLimits, String> {
        let client = Client::open(settings.url.as_str()).map_err(|e| format!("--redis-url: {}", e.category()))?;
        let direct = DirectConnection::new(client.get_connection_info().clone());
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CALL_TIMEOUT))
            .set_response_timeout(Some(CALL_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let connection =
            ConnectionManager::new_lazy_with_config(client, config).map_err(|e| format!("Redis client: {e}"))?;
        let inner = Arc::new(Inner {
            connection,
            direct,
            failure_mode: settings.failure_mode,
            admit: Script::new(ADMIT),
            renew: Script::new(RENEW),
            charge: Script::new(CHARGE),
            up: Arc::new(AtomicBool::new(true)),
            leases: Mutex::new(HashMap::new()),
            next_lease: AtomicU64::new(0),
            process: format!("{}-{}", std::process::id(), uuid::Uuid::new_v4().simple()),
        });
        tokio::spawn(renew_leases(Arc::downgrade(&inner)));
        Ok(RedisLimits(inner))
    }

    /// Whether the last call reached Redis (true until a call fails).
    pub fn up_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.0.up)
    }

    /// Admit one request of `tenant`, taking a lease on one of its open streams or WebSockets
    /// when `lease` (kind and limit) is given: the decision, and the lease when one was taken.
    pub(crate) async fn admit(
        &self,
        tenant: &str,
        limits: &TenantLimits,
        lease: Option<(Open, u32)>,
    ) -> Result<(Decision, Option<Lease>), Unreachable> {
        let limit = |l: Option<u32>| l.unwrap_or(0);
        let prefix = tenant_key(tenant);
        let leased = lease.map(|(what, _)| {
            let set = match what {
                Open::Stream => format!("{prefix}:streams"),
                Open::WebSocket => format!("{prefix}:websockets"),
            };
            let id = format!("{}-{}", self.0.process, self.0.next_lease.fetch_add(1, Ordering::Relaxed));
            (set, id)
        });
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(self.0.admit.get_hash());
        match &leased {
            Some((set, _)) => evalsha.arg(2).arg(&prefix).arg(set),
            None => evalsha.arg(1).arg(&prefix),
        };
        evalsha
            .arg(limit(limits.requests_per_minute))
            .arg(limit(limits.tokens_per_minute))
            .arg(limit(limits.tokens_per_day))
            .arg(lease.map_or(0, |(_, limit)| limit))
            .arg(leased.as_ref().map_or("", |(_, id)| id.as_str()))
            .arg(LEASE_TTL.as_millis() as u64);
        let answer = self.call(self.run_admission(&evalsha)).await?;
        let [outcome, remaining, reset, retry, minute, day, minute_ends, day_ends] = answer[..] else {
            return Err(Unreachable(format!("the admission script answered {answer:?}")));
        };
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        let decision = Decision {
            outcome,
            requests_remaining: n(remaining),
            requests_reset_ms: n(reset),
            retry_ms: n(retry),
            tokens_minute: n(minute),
            tokens_day: n(day),
            minute_ends_ms: n(minute_ends),
            day_ends_ms: n(day_ends),
        };
        let held = match leased {
            Some((set, id)) if outcome == 0 => {
                self.0.leases.lock().unwrap_or_else(PoisonError::into_inner).insert(id.clone(), set);
                Some(Lease { owner: Arc::downgrade(&self.0), id })
            }
            _ => None,
        };
        Ok((decision, held))
    }

    pub(crate) async fn charge(&self, tenant: &str, tokens: u64) -> Result<(), Unreachable> {
        let mut invocation = self.0.charge.prepare_invoke();
        invocation.key(tenant_key(tenant)).arg(tokens);
        let mut connection = self.0.connection.clone();
        let _: i64 = self.call(invocation.invoke_async(&mut connection)).await?;
        Ok(())
    }

    /// The admission script's answer: on the direct connection when it is idle (see
    /// [`redis_direct`](super::redis_direct)), else — or when that connection fails, or Redis
    /// lost the script — through redis-rs, which loads the script again on `NOSCRIPT`.
    async fn run_admission(&self, evalsha: &redis::Cmd) -> redis::RedisResult<Vec<i64>> {
        if let Some(direct) = &self.0.direct
            && let Some(mut connection) = direct.take()
        {
            match connection.call(&evalsha.get_packed_command()).await {
                Ok(Reply::Integers(answer)) => {
                    direct.give_back(connection);
                    return Ok(answer);
                }
                Ok(Reply::Error(error)) if !error.starts_with("NOSCRIPT") => {
                    direct.give_back(connection);
                    let kind = redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError);
                    return Err(redis::RedisError::from((kind, "the admission script failed", error)));
                }
                Ok(Reply::Error(_)) => direct.give_back(connection),
                Err(Broken(why)) => tracing::debug!(error = why, "a direct Redis connection broke; it is closed"),
            }
        }
        let mut connection = self.0.connection.clone();
        match evalsha.query_async(&mut connection).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                self.0.admit.load_async(&mut connection).await?;
                evalsha.query_async(&mut connection).await
            }
            answered => answered,
        }
    }

    /// Run one call within [`CALL_TIMEOUT`]; note that Redis is back when it was not.
    async fn call<T>(&self, call: impl Future<Output = redis::RedisResult<T>>) -> Result<T, Unreachable> {
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(value)) => {
                if !self.0.up.swap(true, Ordering::AcqRel) {
                    tracing::info!("Redis is reachable again; limits are counted there again");
                }
                Ok(value)
            }
            Ok(Err(e)) => Err(Unreachable(e.to_string())),
            Err(_) => Err(Unreachable(format!("no answer within {} ms", CALL_TIMEOUT.as_millis()))),
        }
    }

    /// After a failed call: in `open` mode go on counting locally (`Ok`), in `closed` mode the
    /// 503 to answer. The first failure of an outage is logged as a warning.
    pub(crate) fn on_unreachable(&self, Unreachable(why): Unreachable) -> Result<(), RateLimited> {
        if self.0.up.swap(false, Ordering::AcqRel) {
            match self.0.failure_mode {
                RedisFailureMode::Open => tracing::warn!(
                    error = %why,
                    "Redis is unreachable: limits are counted by this gateway alone until it is back"
                ),
                RedisFailureMode::Closed => tracing::warn!(
                    error = %why,
                    "Redis is unreachable: requests are refused (503) until it is back (--redis-failure-mode closed)"
                ),
            }
        }
        match self.0.failure_mode {
            RedisFailureMode::Open => Ok(()),
            RedisFailureMode::Closed => Err(RateLimited {
                error: ApiError {
                    status: 503,
                    error_type: ErrorType::ApiError,
                    message: "The rate-limit store is unreachable, so no request can be admitted. Retry later.".into(),
                    param: None,
                    code: Some("limits_unavailable".into()),
                },
                retry_after: 1,
                quotas: Box::default(),
            }),
        }
    }
}

/// Renew this process's leases every third of their life, until the limits are dropped.
async fn renew_leases(inner: Weak<Inner>) {
    let mut tick = tokio::time::interval(LEASE_TTL / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        let held: Vec<(String, String)> = inner
            .leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(id, key)| (id.clone(), key.clone()))
            .collect();
        if held.is_empty() {
            continue;
        }
        let mut invocation = inner.renew.prepare_invoke();
        invocation.arg(LEASE_TTL.as_millis() as u64);
        for (id, key) in &held {
            invocation.key(key).arg(id);
        }
        let mut connection = inner.connection.clone();
        let renewed: Result<Result<i64, _>, _> =
            tokio::time::timeout(CALL_TIMEOUT, invocation.invoke_async(&mut connection)).await;
        if !matches!(renewed, Ok(Ok(_))) {
            tracing::debug!(leases = held.len(), "leases could not be renewed this time");
        }
    }
}
