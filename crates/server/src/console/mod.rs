//! The operator console's JSON API, `/v1/console/…` (documented in `docs/console-api.md`):
//! tenant-scoped reads of what the gateway holds — stored responses, conversations, background
//! runs, files and vector stores — and the cancel of a background run.
//!
//! The routes sit behind the same API-key middleware, metrics and rate limits as every `/v1`
//! route. Scope comes from the caller's [`Tenant`]: an admin ([`Tenant::is_admin`]) sees every
//! tenant and may narrow a list with `tenant=`; anyone else sees only its own records, and another
//! tenant's are exactly missing ones (an empty list, a 404). This module holds the state, the
//! router and what every list shares: the query parser (400 naming the parameter for a bad value
//! or an unknown parameter), the scope and the list reply; one file per area holds its handlers
//! (`overview.rs`: the metrics time series, with its own state and routes).

mod background;
mod conversations;
pub(crate) mod overview;
mod responses;
mod retrieval;
mod session;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use respgw_engine::Engine;
use respgw_protocol::ApiError;
use respgw_protocol::listing::ListPage;
use respgw_retrieval::Retrieval;
use respgw_store_api::console::{ConsolePage, MAX_PAGE, Scope};
use respgw_store_api::{BackgroundStore, ConsoleStore};
use serde_json::Value;

use crate::auth::{ApiKeys, Tenant};

/// Rows of a page when `limit` is not given.
const DEFAULT_LIMIT: usize = 20;

/// What the console's handlers read from.
#[derive(Clone)]
pub struct ConsoleState {
    /// Stored responses and conversations as their owner sees them, and background cancels.
    pub engine: Arc<Engine>,
    /// The reads across tenants.
    pub store: Arc<dyn ConsoleStore>,
    /// Background runs' event logs.
    pub background: Arc<dyn BackgroundStore>,
    /// Files and vector stores as their owner sees them.
    pub retrieval: Retrieval,
    /// Every tenant configured, sorted (what an admin's session lists).
    pub tenants: Arc<[String]>,
    /// Whether any API key is configured.
    pub authentication: bool,
}

impl ConsoleState {
    pub fn new(
        engine: Arc<Engine>,
        store: Arc<dyn ConsoleStore>,
        background: Arc<dyn BackgroundStore>,
        retrieval: Retrieval,
        keys: &ApiKeys,
    ) -> Self {
        ConsoleState {
            engine,
            store,
            background,
            retrieval,
            tenants: keys.tenant_names().into(),
            authentication: keys.enabled(),
        }
    }
}

/// The console's routes (merged into the authenticated `/v1` router).
pub fn routes(state: ConsoleState) -> Router {
    Router::new()
        .route("/v1/console/session", get(session::session))
        .route("/v1/console/responses", get(responses::list))
        .route("/v1/console/responses/{response_id}", get(responses::detail))
        .route("/v1/console/conversations", get(conversations::list))
        .route("/v1/console/conversations/{conversation_id}/items", get(conversations::items))
        .route("/v1/console/background", get(background::list))
        .route("/v1/console/background/{response_id}", get(background::detail))
        .route("/v1/console/background/{response_id}/events", get(background::events))
        .route("/v1/console/background/{response_id}/cancel", post(background::cancel))
        .route("/v1/console/files", get(retrieval::files))
        .route("/v1/console/vector_stores", get(retrieval::vector_stores))
        .route("/v1/console/vector_stores/{vector_store_id}/files", get(retrieval::vector_store_files))
        .with_state(state)
}

/// The scope of a by-id lookup: an admin's searches every tenant.
fn lookup_scope(tenant: &Tenant) -> Scope {
    if tenant.is_admin() { Scope::All } else { Scope::Tenant(tenant.name().to_owned()) }
}

/// The scope of a list, narrowed to `tenant=` when given; `None` when the caller may not see
/// that tenant (its list is empty, as if the tenant had nothing).
fn list_scope(tenant: &Tenant, requested: Option<&str>) -> Option<Scope> {
    match requested {
        None => Some(lookup_scope(tenant)),
        Some(name) if tenant.is_admin() || name == tenant.name() => Some(Scope::Tenant(name.to_owned())),
        Some(_) => None,
    }
}

/// 404 `not_found` for a record that is missing or out of the caller's scope.
fn not_found(what: &str, id: &str, param: &str) -> ApiError {
    ApiError {
        status: 404,
        error_type: respgw_protocol::ErrorType::InvalidRequestError,
        message: format!("No {what} found with id '{id}'."),
        param: Some(param.to_owned()),
        code: Some("not_found".to_owned()),
    }
}

/// A page of JSON rows, each with an `id`, in the list shape.
fn list_reply(rows: Vec<Value>, has_more: bool) -> ListPage<Value> {
    ListPage::new(rows, has_more, |row| row.get("id").and_then(Value::as_str).unwrap_or_default())
}

/// The query string of a console route: each parameter at most once, every one known to the
/// route. Values are checked as they are taken.
struct ConsoleQuery(HashMap<String, String>);

impl ConsoleQuery {
    /// Parse a raw query string for a route that takes the parameters `known`: 400
    /// `unknown_parameter` for any other, `invalid_value` for one given twice.
    fn parse(raw: Option<&str>, known: &[&str]) -> Result<Self, ApiError> {
        let mut params = HashMap::new();
        for (key, value) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
            if !known.contains(&key.as_ref()) {
                let takes = if known.is_empty() {
                    "This route takes no parameters.".to_owned()
                } else {
                    format!("This route takes: {}.", known.join(", "))
                };
                return Err(ApiError::invalid(key.as_ref(), format!("Unknown parameter '{key}'. {takes}"))
                    .with_code("unknown_parameter"));
            }
            if params.insert(key.clone().into_owned(), value.into_owned()).is_some() {
                return Err(invalid(&key, format!("'{key}' may be given only once.")));
            }
        }
        Ok(ConsoleQuery(params))
    }

    /// A text parameter (an empty value counts as not given).
    fn text(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str).filter(|v| !v.is_empty())
    }

    /// An integer parameter within `range`.
    fn integer(&self, name: &str, range: std::ops::RangeInclusive<i64>, what: &str) -> Result<Option<i64>, ApiError> {
        let Some(raw) = self.text(name) else { return Ok(None) };
        match raw.parse::<i64>() {
            Ok(n) if range.contains(&n) => Ok(Some(n)),
            _ => Err(invalid(name, format!("Invalid '{name}': expected {what}, got '{raw}'."))),
        }
    }

    /// The page: `limit` 1..=100 (default 20) and `after`.
    fn page(&self) -> Result<ConsolePage, ApiError> {
        let limit = self.integer("limit", 1..=MAX_PAGE as i64, "an integer from 1 to 100")?;
        Ok(ConsolePage {
            after: self.text("after").map(str::to_owned),
            limit: limit.map_or(DEFAULT_LIMIT, |n| n as usize),
        })
    }

    /// A parameter that must be one of `allowed`.
    fn one_of(&self, name: &str, allowed: &[&str]) -> Result<Option<&str>, ApiError> {
        match self.text(name) {
            Some(value) if !allowed.contains(&value) => {
                Err(invalid(name, format!("Invalid '{name}': expected one of {}, got '{value}'.", allowed.join(", "))))
            }
            value => Ok(value),
        }
    }
}

/// 400 `invalid_value` naming `param`.
fn invalid(param: &str, message: String) -> ApiError {
    ApiError::invalid(param, message).with_code("invalid_value")
}

/// Seconds since the Unix epoch.
fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(raw: &str) -> Result<ConsoleQuery, ApiError> {
        ConsoleQuery::parse(Some(raw), &["limit", "after", "status"])
    }

    #[test]
    fn unknown_and_repeated_parameters_are_refused_by_name() {
        let e = query("limit=2&colour=red").err().unwrap();
        assert_eq!((e.status, e.param.as_deref(), e.code.as_deref()), (400, Some("colour"), Some("unknown_parameter")));
        let e = query("after=a&after=b").err().unwrap();
        assert_eq!((e.param.as_deref(), e.code.as_deref()), (Some("after"), Some("invalid_value")));
    }

    #[test]
    fn limit_is_one_to_a_hundred() {
        for bad in ["0", "101", "ten", "-1", "1.5"] {
            let e = query(&format!("limit={bad}")).unwrap().page().err().unwrap();
            assert_eq!((e.param.as_deref(), e.code.as_deref()), (Some("limit"), Some("invalid_value")), "{bad}");
        }
        assert_eq!(query("").unwrap().page().unwrap(), ConsolePage { after: None, limit: 20 });
        let page = query("limit=100&after=resp_1").unwrap().page().unwrap();
        assert_eq!(page, ConsolePage { after: Some("resp_1".into()), limit: 100 });
    }

    #[test]
    fn enumerated_values_are_checked() {
        let q = query("status=done").unwrap();
        let e = q.one_of("status", &["completed", "failed"]).err().unwrap();
        assert_eq!(e.param.as_deref(), Some("status"));
        assert_eq!(query("status=failed").unwrap().one_of("status", &["completed", "failed"]).unwrap(), Some("failed"));
    }
}
