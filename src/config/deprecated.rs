//! Environment variables renamed, and the old names still honoured: before the command line is
//! parsed, an old name's value is moved to its new name (unless that is set), and start-up logs one
//! warning per old name in use.

/// Old name → new name.
pub(super) const RENAMED: [(&str, &str); 2] = [
    ("GW_MCP_HOSTED_STARTUP_TIMEOUT_SEC", "GW_MCP_BUILTIN_STARTUP_TIMEOUT_SEC"),
    ("GW_MCP_HOSTED_TOOL_TIMEOUT_SEC", "GW_MCP_BUILTIN_TOOL_TIMEOUT_SEC"),
];

/// What to do with one old name found in the environment.
#[derive(Debug, PartialEq, Eq)]
pub struct Rename {
    pub old: &'static str,
    pub new: &'static str,
    /// The value to give `new`; `None` when `new` is set already (the old one is then ignored).
    pub value: Option<String>,
}

impl Rename {
    /// The start-up warning.
    pub fn warning(&self) -> String {
        match self.value {
            Some(_) => format!("{} is deprecated; use {} instead", self.old, self.new),
            None => format!("{} is deprecated and ignored: {} is set", self.old, self.new),
        }
    }
}

/// The renames `lookup` (the environment) calls for.
pub fn renames(lookup: impl Fn(&str) -> Option<String>) -> Vec<Rename> {
    RENAMED
        .iter()
        .filter_map(|&(old, new)| {
            let value = lookup(old)?;
            Some(Rename { old, new, value: lookup(new).is_none().then_some(value) })
        })
        .collect()
}

/// Applies the renames to this process's environment (children inherit only the new names), and
/// returns the warnings to log once logging is set up.
///
/// # Safety
///
/// No other thread may exist: changing the environment races with any thread that reads it.
pub unsafe fn apply_to_environment() -> Vec<String> {
    let renames = renames(|name| std::env::var(name).ok());
    for rename in &renames {
        // SAFETY: this process has no other thread (the function's contract).
        unsafe {
            if let Some(value) = &rename.value {
                std::env::set_var(rename.new, value);
            }
            std::env::remove_var(rename.old);
        }
    }
    renames.iter().map(Rename::warning).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn an_old_name_gives_its_value_to_the_new_one_with_a_warning() {
        let found = renames(env(&[("GW_MCP_HOSTED_TOOL_TIMEOUT_SEC", "5")]));
        assert_eq!(
            found,
            [Rename {
                old: "GW_MCP_HOSTED_TOOL_TIMEOUT_SEC",
                new: "GW_MCP_BUILTIN_TOOL_TIMEOUT_SEC",
                value: Some("5".into())
            }]
        );
        assert!(found[0].warning().contains("use GW_MCP_BUILTIN_TOOL_TIMEOUT_SEC"), "{}", found[0].warning());
    }

    #[test]
    fn the_new_name_wins_when_both_are_set() {
        let found =
            renames(env(&[("GW_MCP_HOSTED_STARTUP_TIMEOUT_SEC", "5"), ("GW_MCP_BUILTIN_STARTUP_TIMEOUT_SEC", "7")]));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].value, None);
        assert!(found[0].warning().contains("ignored"), "{}", found[0].warning());
    }

    #[test]
    fn nothing_happens_without_old_names() {
        assert!(renames(env(&[("GW_MCP_BUILTIN_STARTUP_TIMEOUT_SEC", "7")])).is_empty());
    }
}
