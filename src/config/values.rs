//! Value parsers of the command line: each says in its error what it expected (clap adds the flag
//! and the value it got).

use respgw_tools::web_search::Profile;

/// Seconds, more than zero.
pub fn positive_seconds(raw: &str) -> Result<f64, String> {
    match raw.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("expected a positive number of seconds, got '{raw}'")),
    }
}

/// Seconds, zero or more.
pub fn non_negative_seconds(raw: &str) -> Result<f64, String> {
    match raw.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("expected a number of seconds (0 or more), got '{raw}'")),
    }
}

/// Seconds, more than zero and at most a day (the MCP time limits).
pub fn seconds_up_to_a_day(raw: &str) -> Result<f64, String> {
    match raw.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!("expected a number of seconds between 0 and 86400, got '{raw}'")),
    }
}

/// Hours, more than zero and at most ten years (the retention of background events).
pub fn hours_up_to_ten_years(raw: &str) -> Result<f64, String> {
    match raw.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 87_600.0 => Ok(v),
        _ => Err(format!("expected a number of hours between 0 and 87600, got '{raw}'")),
    }
}

/// A whole number, at least one.
pub fn at_least_one(raw: &str) -> Result<usize, String> {
    match raw.parse::<usize>() {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(format!("expected a whole number of at least 1, got '{raw}'")),
    }
}

/// A web search profile by name.
pub fn profile(raw: &str) -> Result<Profile, String> {
    raw.parse()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_checked_not_clamped() {
        assert_eq!(positive_seconds("2.5"), Ok(2.5));
        assert!(positive_seconds("0").is_err());
        assert_eq!(non_negative_seconds("0"), Ok(0.0));
        assert!(non_negative_seconds("-1").is_err());
        assert_eq!(seconds_up_to_a_day("86400"), Ok(86_400.0));
        for bad in ["0", "-1", "86401", "NaN", "soon"] {
            assert!(seconds_up_to_a_day(bad).is_err(), "{bad}");
        }
        assert!(at_least_one("0").is_err());
    }
}
