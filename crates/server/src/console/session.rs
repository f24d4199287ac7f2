//! `GET /v1/console/session`: who the console is signed in as, and which tenants it can show.

use axum::Json;
use axum::extract::{RawQuery, State};
use serde_json::{Value, json};

use super::{ConsoleQuery, ConsoleState};
use crate::auth::Tenant;
use crate::error::HttpError;

/// The caller's tenant, whether it is an admin, whether authentication is on, the tenants it can
/// see (every configured one for an admin, its own otherwise) and the gateway's version.
pub async fn session(
    State(state): State<ConsoleState>,
    tenant: Tenant,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, HttpError> {
    ConsoleQuery::parse(query.as_deref(), &[])?;
    let tenants: Vec<&str> =
        if tenant.is_admin() { state.tenants.iter().map(String::as_str).collect() } else { vec![tenant.name()] };
    Ok(Json(json!({
        "object": "console.session",
        "tenant": tenant.name(),
        "admin": tenant.is_admin(),
        "authentication": state.authentication,
        "tenants": tenants,
        "version": env!("CARGO_PKG_VERSION"),
    })))
}
