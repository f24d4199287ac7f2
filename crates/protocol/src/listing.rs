//! Reading stored objects: the query of a list endpoint (`limit`, `order`, `after`), the list
//! body (`{"object":"list","data",…}`) and the body of a deletion.
//!
//! [`ListQueryParams`] is the query string as it arrived; [`ListQuery::parse`] checks it, so a
//! handler hands a store a query that is known to be valid.

use serde::{Deserialize, Serialize};

use crate::ApiError;
use crate::request::KNOWN_INCLUDES;

/// Items per page when the query names no `limit`.
const DEFAULT_LIMIT: usize = 20;
/// The largest `limit` a query may ask for.
const MAX_LIMIT: usize = 100;

/// A list endpoint's query string, every value as the client wrote it.
#[derive(Debug, Default, Deserialize)]
pub struct ListQueryParams {
    pub after: Option<String>,
    pub limit: Option<String>,
    pub order: Option<String>,
}

impl ListQueryParams {
    /// A raw query string's list parameters and its `include` values, which may repeat
    /// (`include=a&include=b`, or `include[]=a&include[]=b` as the official SDKs write them).
    /// Each `include` value must be one the gateway knows (400 naming `include[i]`); other
    /// parameters are ignored.
    pub fn with_include(raw: Option<&str>) -> Result<(ListQueryParams, Vec<String>), ApiError> {
        let mut params = ListQueryParams::default();
        let mut include = Vec::new();
        for (key, value) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
            match key.as_ref() {
                "after" => params.after = Some(value.into_owned()),
                "limit" => params.limit = Some(value.into_owned()),
                "order" => params.order = Some(value.into_owned()),
                "include" | "include[]" => include.push(value.into_owned()),
                _ => {}
            }
        }
        check_include(&include)?;
        Ok((params, include))
    }
}

/// Every `include` value is one the gateway knows; otherwise a 400 naming the first unknown one.
pub fn check_include(include: &[String]) -> Result<(), ApiError> {
    match include.iter().enumerate().find(|(_, v)| !KNOWN_INCLUDES.contains(&v.as_str())) {
        Some((i, bad)) => Err(ApiError::invalid(
            format!("include[{i}]"),
            format!("Unknown include value '{bad}'. Accepted values: {}.", KNOWN_INCLUDES.join(", ")),
        )),
        None => Ok(()),
    }
}

/// Which end of a list comes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListOrder {
    /// Oldest first.
    Asc,
    /// Newest first (the default).
    Desc,
}

/// A valid list query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// List the items after the one with this id.
    pub after: Option<String>,
    /// Items per page: 1 to 100.
    pub limit: usize,
    pub order: ListOrder,
}

impl ListQuery {
    /// Check a query: `limit` an integer from 1 to 100 (default 20), `order` `asc` or `desc`
    /// (default `desc`). A wrong value is a 400 naming the parameter.
    pub fn parse(params: ListQueryParams) -> Result<Self, ApiError> {
        let limit = match params.limit.as_deref() {
            None => DEFAULT_LIMIT,
            Some(raw) => match raw.parse::<usize>() {
                Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
                _ => return Err(ApiError::invalid("limit", "'limit' must be an integer between 1 and 100.")),
            },
        };
        let order = match params.order.as_deref() {
            None | Some("desc") => ListOrder::Desc,
            Some("asc") => ListOrder::Asc,
            Some(_) => return Err(ApiError::invalid("order", "'order' must be 'asc' or 'desc'.")),
        };
        Ok(ListQuery { after: params.after, limit, order })
    }
}

/// One page of a list, in the reference API's shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ListPage<T> {
    object: &'static str,
    pub data: Vec<T>,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    pub has_more: bool,
}

impl<T> ListPage<T> {
    /// The page of `data`, whose first and last items have the ids `id` gives.
    pub fn new(data: Vec<T>, has_more: bool, id: impl Fn(&T) -> &str) -> Self {
        let first_id = data.first().map(|item| id(item).to_owned());
        let last_id = data.last().map(|item| id(item).to_owned());
        ListPage { object: "list", data, first_id, last_id, has_more }
    }
}

/// The body that confirms a deletion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Deleted {
    pub id: String,
    /// The kind of object deleted, e.g. `response`.
    pub object: &'static str,
    deleted: bool,
}

impl Deleted {
    pub fn new(id: String, object: &'static str) -> Self {
        Deleted { id, object, deleted: true }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(limit: Option<&str>, order: Option<&str>) -> ListQueryParams {
        ListQueryParams { after: None, limit: limit.map(str::to_owned), order: order.map(str::to_owned) }
    }

    #[test]
    fn defaults_are_twenty_newest_first() {
        let query = ListQuery::parse(ListQueryParams::default()).unwrap();
        assert_eq!((query.limit, query.order), (20, ListOrder::Desc));
    }

    #[test]
    fn limit_must_be_an_integer_from_1_to_100() {
        for bad in ["0", "101", "-1", "ten", ""] {
            let e = ListQuery::parse(params(Some(bad), None)).unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (400, Some("limit")), "{bad}");
        }
        assert_eq!(ListQuery::parse(params(Some("100"), None)).unwrap().limit, 100);
    }

    #[test]
    fn order_must_be_asc_or_desc() {
        assert_eq!(ListQuery::parse(params(None, Some("asc"))).unwrap().order, ListOrder::Asc);
        let e = ListQuery::parse(params(None, Some("newest"))).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("order")));
    }

    #[test]
    fn include_may_repeat_in_either_spelling() {
        let raw = "limit=5&include[]=reasoning.encrypted_content&include=code_interpreter_call.outputs&x=1";
        let (params, include) = ListQueryParams::with_include(Some(raw)).unwrap();
        assert_eq!(params.limit.as_deref(), Some("5"));
        assert_eq!(include, ["reasoning.encrypted_content", "code_interpreter_call.outputs"]);
        let e =
            ListQueryParams::with_include(Some("include[]=web_search_call.action.sources&include[]=nope")).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("include[1]")));
        assert!(ListQueryParams::with_include(None).unwrap().1.is_empty());
    }

    #[test]
    fn a_page_names_its_first_and_last_ids() {
        let page = ListPage::new(vec!["a", "b", "c"], true, |s| *s);
        assert_eq!(
            serde_json::to_value(&page).unwrap(),
            serde_json::json!({"object":"list","data":["a","b","c"],"first_id":"a","last_id":"c","has_more":true})
        );
        let empty = ListPage::new(Vec::<&str>::new(), false, |s| *s);
        assert_eq!((empty.first_id, empty.last_id), (None, None));
    }

    #[test]
    fn a_deletion_says_what_was_deleted() {
        assert_eq!(
            serde_json::to_string(&Deleted::new("resp_1".into(), "response")).unwrap(),
            r#"{"id":"resp_1","object":"response","deleted":true}"#
        );
    }
}
