//! The operator console's API under `/v1/console/`, behind the same API-key middleware as every
//! `/v1` route and scoped to the caller's tenant (admins see every tenant).

pub(crate) mod overview;
