//! Attribute filters of vector-store search and the `file_search` tool: comparisons (`eq ne gt
//! gte lt lte in nin`) over a file's `attributes`, and `and`/`or` compounds of them, nested up
//! to [`MAX_FILTER_DEPTH`] levels.
//!
//! Shapes, as OpenAI's API takes them:
//! - comparison `{"type": "eq", "key": "author", "value": "Ana"}`: `value` a string, number or
//!   boolean; for `in`/`nin` an array of strings and numbers; `gt gte lt lte` take a number or a
//!   string (booleans have no order);
//! - compound `{"type": "and" | "or", "filters": [ … ]}`, at least one filter.
//!
//! Evaluation:
//! - numbers compare numerically (`1` equals `1.0`), strings by their bytes (lexically), booleans
//!   only for (in)equality; a value of another kind than the attribute's is never equal and
//!   never ordered;
//! - an attribute the file does not have matches no comparison except `ne` and `nin` (it is not
//!   equal to the value, nor in the list), as OpenAI evaluates them.

use std::cmp::Ordering;

use serde_json::{Map, Value, json};

use crate::ApiError;

/// How deeply compounds may nest (a comparison alone is depth 1).
pub const MAX_FILTER_DEPTH: usize = 8;

/// A comparison's operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    Eq,
    Ne,
    Gt,
    Gte,
    Lt,
    Lte,
    In,
    Nin,
}

impl Comparison {
    fn parse(name: &str) -> Option<Comparison> {
        Some(match name {
            "eq" => Comparison::Eq,
            "ne" => Comparison::Ne,
            "gt" => Comparison::Gt,
            "gte" => Comparison::Gte,
            "lt" => Comparison::Lt,
            "lte" => Comparison::Lte,
            "in" => Comparison::In,
            "nin" => Comparison::Nin,
            _ => return None,
        })
    }

    /// The operator's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Comparison::Eq => "eq",
            Comparison::Ne => "ne",
            Comparison::Gt => "gt",
            Comparison::Gte => "gte",
            Comparison::Lt => "lt",
            Comparison::Lte => "lte",
            Comparison::In => "in",
            Comparison::Nin => "nin",
        }
    }
}

/// A parsed filter.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    Compare { key: String, op: Comparison, value: Value },
    And(Vec<Filter>),
    Or(Vec<Filter>),
}

impl Filter {
    /// Parse `value` (the client's `filters`), naming `param` (e.g. `filters`,
    /// `tools[0].filters`) and the path inside it in a 400.
    pub fn parse(value: &Value, param: &str) -> Result<Filter, ApiError> {
        parse_at(value, param, 1)
    }

    /// Whether a file with these `attributes` passes.
    pub fn matches(&self, attributes: &Value) -> bool {
        match self {
            Filter::And(filters) => filters.iter().all(|f| f.matches(attributes)),
            Filter::Or(filters) => filters.iter().any(|f| f.matches(attributes)),
            Filter::Compare { key, op, value } => {
                let Some(attribute) = attributes.get(key.as_str()) else {
                    return matches!(op, Comparison::Ne | Comparison::Nin);
                };
                let in_list = || value.as_array().is_some_and(|list| list.iter().any(|v| equal(attribute, v)));
                let ordered = |accept: fn(Ordering) -> bool| order(attribute, value).is_some_and(accept);
                match op {
                    Comparison::Eq => equal(attribute, value),
                    Comparison::Ne => !equal(attribute, value),
                    Comparison::Gt => ordered(Ordering::is_gt),
                    Comparison::Gte => ordered(Ordering::is_ge),
                    Comparison::Lt => ordered(Ordering::is_lt),
                    Comparison::Lte => ordered(Ordering::is_le),
                    Comparison::In => in_list(),
                    Comparison::Nin => !in_list(),
                }
            }
        }
    }

    /// The filter as the client wrote it (stored in a `file_search` declaration).
    pub fn to_json(&self) -> Value {
        match self {
            Filter::Compare { key, op, value } => json!({"type": op.as_str(), "key": key, "value": value}),
            Filter::And(filters) => {
                json!({"type": "and", "filters": filters.iter().map(Filter::to_json).collect::<Vec<_>>()})
            }
            Filter::Or(filters) => {
                json!({"type": "or", "filters": filters.iter().map(Filter::to_json).collect::<Vec<_>>()})
            }
        }
    }
}

/// Equality of an attribute and a filter value: numbers numerically, strings and booleans
/// exactly, different kinds never.
fn equal(attribute: &Value, value: &Value) -> bool {
    match (attribute, value) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::String(a), Value::String(b)) => a == b,
        (Value::Bool(a), Value::Bool(b)) => a == b,
        _ => false,
    }
}

/// The order of an attribute against a filter value: numbers numerically, strings lexically,
/// anything else unordered.
fn order(attribute: &Value, value: &Value) -> Option<Ordering> {
    match (attribute, value) {
        (Value::Number(a), Value::Number(b)) => a.as_f64()?.partial_cmp(&b.as_f64()?),
        (Value::String(a), Value::String(b)) => Some(a.as_str().cmp(b.as_str())),
        _ => None,
    }
}

fn parse_at(value: &Value, path: &str, depth: usize) -> Result<Filter, ApiError> {
    let Value::Object(object) = value else {
        return Err(ApiError::invalid(
            path,
            format!(
                "{path} must be an object: a comparison ({{\"type\", \"key\", \"value\"}}) or a compound ({{\"type\", \"filters\"}})"
            ),
        ));
    };
    let type_path = format!("{path}.type");
    let kind = match object.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(_) => return Err(ApiError::invalid(&type_path, format!("{type_path} must be a string"))),
        None => return Err(ApiError::invalid(&type_path, format!("{path} needs a type"))),
    };
    match kind {
        "and" | "or" => parse_compound(object, kind, path, depth),
        _ => match Comparison::parse(kind) {
            Some(op) => parse_comparison(object, op, path),
            None => Err(ApiError::invalid(
                &type_path,
                format!(
                    "{type_path} '{kind}' is not a filter type: use eq, ne, gt, gte, lt, lte, in or nin to compare, \
                     and or or to combine"
                ),
            )),
        },
    }
}

fn parse_compound(object: &Map<String, Value>, kind: &str, path: &str, depth: usize) -> Result<Filter, ApiError> {
    only_fields(object, &["type", "filters"], path, "a compound filter")?;
    let filters_path = format!("{path}.filters");
    let Some(items) = object.get("filters") else {
        return Err(ApiError::invalid(&filters_path, format!("a compound filter ({kind}) needs {filters_path}")));
    };
    let Value::Array(items) = items else {
        return Err(ApiError::invalid(&filters_path, format!("{filters_path} must be an array of filters")));
    };
    if items.is_empty() {
        return Err(ApiError::invalid(&filters_path, format!("{filters_path} must hold at least one filter")));
    }
    if depth >= MAX_FILTER_DEPTH {
        return Err(ApiError::invalid(
            &filters_path,
            format!("{filters_path}: filters nest at most {MAX_FILTER_DEPTH} levels deep"),
        ));
    }
    let filters = items
        .iter()
        .enumerate()
        .map(|(i, item)| parse_at(item, &format!("{filters_path}[{i}]"), depth + 1))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(if kind == "and" { Filter::And(filters) } else { Filter::Or(filters) })
}

fn parse_comparison(object: &Map<String, Value>, op: Comparison, path: &str) -> Result<Filter, ApiError> {
    only_fields(object, &["type", "key", "value"], path, "a comparison filter")?;
    let key_path = format!("{path}.key");
    let key = match object.get("key") {
        Some(Value::String(key)) if !key.is_empty() => key.clone(),
        Some(Value::String(_)) => return Err(ApiError::invalid(&key_path, format!("{key_path} must not be empty"))),
        Some(_) => return Err(ApiError::invalid(&key_path, format!("{key_path} must be a string"))),
        None => {
            return Err(ApiError::invalid(
                &key_path,
                format!("a comparison filter ({}) needs {key_path}: the attribute it compares", op.as_str()),
            ));
        }
    };
    let value_path = format!("{path}.value");
    let Some(value) = object.get("value") else {
        return Err(ApiError::invalid(
            &value_path,
            format!("a comparison filter ({}) needs {value_path}", op.as_str()),
        ));
    };
    let wrong =
        |expected: &str| ApiError::invalid(&value_path, format!("{value_path} must be {expected} for {}", op.as_str()));
    match op {
        Comparison::Eq | Comparison::Ne => {
            if !matches!(value, Value::String(_) | Value::Number(_) | Value::Bool(_)) {
                return Err(wrong("a string, a number or a boolean"));
            }
        }
        Comparison::Gt | Comparison::Gte | Comparison::Lt | Comparison::Lte => {
            if !matches!(value, Value::String(_) | Value::Number(_)) {
                return Err(wrong("a number or a string"));
            }
        }
        Comparison::In | Comparison::Nin => {
            let Value::Array(list) = value else {
                return Err(wrong("an array of strings and numbers"));
            };
            if let Some(i) = list.iter().position(|v| !matches!(v, Value::String(_) | Value::Number(_))) {
                let item_path = format!("{value_path}[{i}]");
                return Err(ApiError::invalid(&item_path, format!("{item_path} must be a string or a number")));
            }
        }
    }
    Ok(Filter::Compare { key, op, value: value.clone() })
}

/// Refuse fields a filter of this shape does not have.
fn only_fields(object: &Map<String, Value>, allowed: &[&str], path: &str, shape: &str) -> Result<(), ApiError> {
    match object.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(unknown) => {
            let field = format!("{path}.{unknown}");
            Err(ApiError::invalid(&field, format!("{field} is not a field of {shape} (it has {})", allowed.join(", "))))
        }
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(value: Value) -> Filter {
        Filter::parse(&value, "filters").unwrap()
    }

    fn error(value: Value) -> ApiError {
        Filter::parse(&value, "filters").unwrap_err()
    }

    #[test]
    fn parses_a_comparison_and_writes_it_back() {
        let wire = json!({"type": "eq", "key": "author", "value": "Ana"});
        let filter = parse(wire.clone());
        assert_eq!(filter, Filter::Compare { key: "author".into(), op: Comparison::Eq, value: json!("Ana") });
        assert_eq!(filter.to_json(), wire);
    }

    #[test]
    fn parses_nested_compounds_and_writes_them_back() {
        let wire = json!({"type": "and", "filters": [
            {"type": "gte", "key": "year", "value": 2020},
            {"type": "or", "filters": [
                {"type": "in", "key": "lang", "value": ["en", "fr"]},
                {"type": "ne", "key": "draft", "value": true},
            ]},
        ]});
        let filter = parse(wire.clone());
        assert!(matches!(&filter, Filter::And(f) if f.len() == 2 && matches!(&f[1], Filter::Or(g) if g.len() == 2)));
        assert_eq!(filter.to_json(), wire);
    }

    #[test]
    fn names_the_path_of_an_unknown_type() {
        let e = error(json!({"type": "and", "filters": [
            {"type": "eq", "key": "a", "value": 1},
            {"type": "like", "key": "a", "value": 1},
        ]}));
        assert_eq!(e.status, 400);
        assert_eq!(e.param.as_deref(), Some("filters.filters[1].type"));
        assert!(e.message.contains("'like' is not a filter type"), "{}", e.message);
    }

    #[test]
    fn names_the_param_it_was_given() {
        let e = Filter::parse(&json!({"type": "eq", "value": 1}), "tools[0].filters").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[0].filters.key"));
    }

    #[test]
    fn refuses_a_missing_or_non_string_type() {
        assert_eq!(error(json!({"key": "a", "value": 1})).param.as_deref(), Some("filters.type"));
        assert_eq!(error(json!({"type": 3})).param.as_deref(), Some("filters.type"));
        assert_eq!(error(json!("eq")).param.as_deref(), Some("filters"));
    }

    #[test]
    fn refuses_a_comparison_without_key_or_value() {
        assert_eq!(error(json!({"type": "eq", "value": 1})).param.as_deref(), Some("filters.key"));
        assert_eq!(error(json!({"type": "eq", "key": "", "value": 1})).param.as_deref(), Some("filters.key"));
        assert_eq!(error(json!({"type": "eq", "key": 5, "value": 1})).param.as_deref(), Some("filters.key"));
        assert_eq!(error(json!({"type": "eq", "key": "a"})).param.as_deref(), Some("filters.value"));
    }

    #[test]
    fn refuses_values_of_the_wrong_kind() {
        for (op, value) in [
            ("eq", json!(null)),
            ("eq", json!({"x": 1})),
            ("ne", json!([1])),
            ("gt", json!(true)),
            ("lte", json!(["a"])),
            ("in", json!("a")),
            ("nin", json!(1)),
        ] {
            let e = error(json!({"type": op, "key": "a", "value": value}));
            assert_eq!(e.param.as_deref(), Some("filters.value"), "{op} {value}");
        }
        let e = error(json!({"type": "in", "key": "a", "value": ["a", true]}));
        assert_eq!(e.param.as_deref(), Some("filters.value[1]"));
    }

    #[test]
    fn refuses_empty_or_malformed_compounds() {
        assert_eq!(error(json!({"type": "or", "filters": []})).param.as_deref(), Some("filters.filters"));
        assert_eq!(error(json!({"type": "or"})).param.as_deref(), Some("filters.filters"));
        assert_eq!(error(json!({"type": "and", "filters": {}})).param.as_deref(), Some("filters.filters"));
        let e = error(json!({"type": "and", "filters": [{"type": "or", "filters": [7]}]}));
        assert_eq!(e.param.as_deref(), Some("filters.filters[0].filters[0]"));
    }

    #[test]
    fn refuses_unknown_fields() {
        let e = error(json!({"type": "eq", "key": "a", "value": 1, "values": [1]}));
        assert_eq!(e.param.as_deref(), Some("filters.values"));
        let e = error(json!({"type": "and", "filters": [{"type": "eq", "key": "a", "value": 1}], "key": "a"}));
        assert_eq!(e.param.as_deref(), Some("filters.key"));
    }

    #[test]
    fn refuses_nesting_deeper_than_the_limit() {
        let leaf = json!({"type": "eq", "key": "a", "value": 1});
        let nest =
            |levels: usize| (0..levels).fold(leaf.clone(), |inner, _| json!({"type": "and", "filters": [inner]}));
        // Seven compounds and the comparison: eight levels.
        assert!(Filter::parse(&nest(MAX_FILTER_DEPTH - 1), "filters").is_ok());
        let e = error(nest(MAX_FILTER_DEPTH));
        assert!(e.message.contains("at most 8 levels"), "{}", e.message);
    }

    #[test]
    fn equality_compares_numbers_numerically_and_kinds_strictly() {
        let attributes = json!({"n": 2, "s": "2", "b": true});
        assert!(parse(json!({"type": "eq", "key": "n", "value": 2.0})).matches(&attributes));
        assert!(!parse(json!({"type": "eq", "key": "s", "value": 2})).matches(&attributes));
        assert!(parse(json!({"type": "ne", "key": "s", "value": 2})).matches(&attributes));
        assert!(parse(json!({"type": "eq", "key": "b", "value": true})).matches(&attributes));
        assert!(!parse(json!({"type": "eq", "key": "b", "value": "true"})).matches(&attributes));
    }

    #[test]
    fn order_compares_numbers_numerically_strings_lexically_and_mixed_kinds_never() {
        let attributes = json!({"n": 10, "s": "b", "b": false});
        assert!(parse(json!({"type": "gt", "key": "n", "value": 9})).matches(&attributes));
        assert!(!parse(json!({"type": "gt", "key": "n", "value": 10})).matches(&attributes));
        assert!(parse(json!({"type": "gte", "key": "n", "value": 10})).matches(&attributes));
        assert!(parse(json!({"type": "lt", "key": "n", "value": 10.5})).matches(&attributes));
        assert!(parse(json!({"type": "lte", "key": "s", "value": "b"})).matches(&attributes));
        assert!(parse(json!({"type": "gt", "key": "s", "value": "a"})).matches(&attributes));
        assert!(!parse(json!({"type": "gt", "key": "s", "value": "ba"})).matches(&attributes));
        for op in ["gt", "gte", "lt", "lte"] {
            assert!(!parse(json!({"type": op, "key": "n", "value": "10"})).matches(&attributes), "{op}");
            assert!(!parse(json!({"type": op, "key": "b", "value": 0})).matches(&attributes), "{op}");
        }
    }

    #[test]
    fn in_and_nin_test_membership() {
        let attributes = json!({"lang": "fr", "year": 2021});
        assert!(parse(json!({"type": "in", "key": "lang", "value": ["en", "fr"]})).matches(&attributes));
        assert!(!parse(json!({"type": "nin", "key": "lang", "value": ["en", "fr"]})).matches(&attributes));
        assert!(parse(json!({"type": "in", "key": "year", "value": [2021.0]})).matches(&attributes));
        assert!(parse(json!({"type": "nin", "key": "year", "value": ["2021"]})).matches(&attributes));
    }

    #[test]
    fn a_missing_attribute_matches_only_ne_and_nin() {
        let attributes = json!({"other": 1});
        for (op, value, expected) in [
            ("eq", json!(1), false),
            ("ne", json!(1), true),
            ("gt", json!(1), false),
            ("gte", json!(1), false),
            ("lt", json!(1), false),
            ("lte", json!(1), false),
            ("in", json!([1]), false),
            ("nin", json!([1]), true),
        ] {
            assert_eq!(parse(json!({"type": op, "key": "a", "value": value})).matches(&attributes), expected, "{op}");
        }
        assert!(!parse(json!({"type": "eq", "key": "a", "value": 1})).matches(&Value::Null));
    }

    #[test]
    fn compounds_combine_their_filters() {
        let filter = parse(json!({"type": "or", "filters": [
            {"type": "eq", "key": "a", "value": 1},
            {"type": "and", "filters": [
                {"type": "eq", "key": "b", "value": 2},
                {"type": "eq", "key": "c", "value": 3},
            ]},
        ]}));
        assert!(filter.matches(&json!({"a": 1})));
        assert!(filter.matches(&json!({"b": 2, "c": 3})));
        assert!(!filter.matches(&json!({"b": 2, "c": 4})));
        assert!(!filter.matches(&json!({})));
    }
}
