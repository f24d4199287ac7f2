//! `GET /v1/console/overview`: the console's charts of the last hour, from the gateway's own
//! counters (all workers).
//!
//! The samples come from an [`OverviewView`]: under the supervisor, the worker asks it for the
//! ring it keeps of the merged metrics; a gateway serving alone ([`local_overview`]) samples its
//! own process's metrics on a task of its own. The handler turns the samples into per-step points
//! scoped to the caller: an admin sees every tenant and the gateway-wide series, anyone else only
//! their own tenant, the gateway-wide series `null`.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{RawQuery, State};
use axum::routing::get;
use axum::{Json, Router};
use respgw_protocol::ApiError;
use respgw_telemetry::history::{OverviewPoint, TenantActivity};
use respgw_telemetry::{Metrics, OverviewHistory, SeriesScope};
use serde::Serialize;

use crate::auth::Tenant;
use crate::error::HttpError;

/// Produces the overview's samples: the supervisor's ring in a worker, this process's own ring
/// when it serves alone.
pub type OverviewView = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = OverviewHistory> + Send>> + Send + Sync>;

/// The route path.
pub(crate) const ROUTE: &str = "/v1/console/overview";

/// Shortest and longest `window`, in seconds (the default is the longest).
const WINDOW_SECONDS: std::ops::RangeInclusive<u64> = 60..=respgw_telemetry::history::HISTORY_SECONDS;

/// The overview of a process serving alone: its own `metrics`, sampled now and every
/// `step_seconds` by a task that ends once the view is dropped.
pub fn local_overview(metrics: Metrics, step_seconds: u64) -> OverviewView {
    let mut history = OverviewHistory::new(step_seconds);
    history.record(unix_now(), &metrics.snapshot());
    let history = Arc::new(Mutex::new(history));
    tokio::spawn(sample_locally(metrics, Arc::downgrade(&history), step_seconds));
    Arc::new(move || {
        let history = history.lock().unwrap_or_else(PoisonError::into_inner).clone();
        Box::pin(async move { history })
    })
}

async fn sample_locally(metrics: Metrics, history: Weak<Mutex<OverviewHistory>>, step_seconds: u64) {
    let step = Duration::from_secs(step_seconds.max(1));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + step, step);
    loop {
        tick.tick().await;
        let Some(history) = history.upgrade() else { return };
        history.lock().unwrap_or_else(PoisonError::into_inner).record(unix_now(), &metrics.snapshot());
    }
}

/// The overview route, answering from `view`.
pub(crate) fn routes(view: OverviewView) -> Router {
    Router::new().route(ROUTE, get(overview)).with_state(view)
}

/// The reply body.
#[derive(Debug, Serialize)]
struct Overview {
    object: &'static str,
    step: u64,
    now: u64,
    window: u64,
    points: Vec<OverviewPoint>,
    totals: std::collections::BTreeMap<String, TenantActivity>,
}

/// `GET /v1/console/overview?window=<seconds>`.
async fn overview(
    State(view): State<OverviewView>,
    tenant: Tenant,
    RawQuery(query): RawQuery,
) -> Result<Json<Overview>, HttpError> {
    let window = window_seconds(query.as_deref())?;
    let history = view().await;
    let scope = if tenant.is_admin() { SeriesScope::All } else { SeriesScope::Tenant(tenant.name()) };
    let now = unix_now();
    let series = history.series(now, window, scope);
    Ok(Json(Overview {
        object: "console.overview",
        step: history.step_seconds(),
        now,
        window,
        points: series.points,
        totals: series.totals,
    }))
}

/// The `window` parameter: whole seconds from 60 to 3600 (default 3600); any other parameter is
/// refused.
fn window_seconds(query: Option<&str>) -> Result<u64, ApiError> {
    let mut window = None;
    for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        if key != "window" {
            return Err(ApiError::invalid(
                key.as_ref(),
                format!("Unknown parameter '{key}'; this route takes 'window'."),
            )
            .with_code("unknown_parameter"));
        }
        let seconds = value.parse::<u64>().ok().filter(|s| WINDOW_SECONDS.contains(s)).ok_or_else(|| {
            ApiError::invalid(
                "window",
                format!(
                    "'window' must be a whole number of seconds from {} to {}.",
                    WINDOW_SECONDS.start(),
                    WINDOW_SECONDS.end()
                ),
            )
            .with_code("invalid_value")
        })?;
        window = Some(seconds);
    }
    Ok(window.unwrap_or(*WINDOW_SECONDS.end()))
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_is_whole_seconds_within_an_hour() {
        assert_eq!(window_seconds(None), Ok(3600));
        assert_eq!(window_seconds(Some("")), Ok(3600));
        assert_eq!(window_seconds(Some("window=60")), Ok(60));
        assert_eq!(window_seconds(Some("window=3600")), Ok(3600));
        for bad in ["window=59", "window=3601", "window=1.5", "window=", "window=-60", "window=abc"] {
            let error = window_seconds(Some(bad)).expect_err(bad);
            assert_eq!(
                (error.status, error.param.as_deref(), error.code.as_deref()),
                (400, Some("window"), Some("invalid_value")),
                "{bad}"
            );
        }
        let error = window_seconds(Some("window=60&tenant=beta")).expect_err("an unknown parameter");
        assert_eq!((error.param.as_deref(), error.code.as_deref()), (Some("tenant"), Some("unknown_parameter")));
    }

    #[tokio::test]
    async fn a_process_alone_samples_its_own_metrics_every_step() {
        let metrics = Metrics::new();
        let view = local_overview(metrics.clone(), 1);
        assert_eq!(view().await.len(), 1, "sampled once at the start");
        metrics.tenant_request("alpha", 200);
        metrics.tenant_request("alpha", 503);
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let history = view().await;
        assert!(history.len() >= 2, "a sample each second: {history:?}");
        let series = history.series(unix_now(), 3600, SeriesScope::All);
        let alpha = series.totals.get("alpha").cloned().unwrap_or_default();
        assert_eq!((alpha.requests, alpha.errors), (2, 1));
    }
}
