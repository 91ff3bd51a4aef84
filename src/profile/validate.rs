//! The checks both profile forms share.

use std::collections::{HashMap, HashSet};

use crate::bpf::limits::MAX_RULE_DEPTH;
use crate::error::{Error, Result};
use crate::kallsyms::base_name;
use crate::profile::model::{Reason, Within, DEFAULT_DEPTH};
use crate::reasons::{MAX_REASONS, OTHER_NAME};
use crate::system::{check_knob_path, MAX_KNOBS};

/// A reason as written in either form, with where each part came from.
pub(crate) struct Draft {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) callers: Vec<String>,
    pub(crate) within: Option<Vec<String>>,
    pub(crate) depth: Option<i64>,
    pub(crate) at_name: String,
    pub(crate) at_callers: String,
    pub(crate) at_within: String,
    pub(crate) at_depth: String,
}

/// Reason names: capitals, digits and `_`, so that they never collide with
/// the (lower-case) function names of auto mode.
fn check_reason_name(name: &str) -> std::result::Result<(), String> {
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if !ok {
        return Err(format!(
            "bad reason name `{name}`: use capital letters, digits and _"
        ));
    }
    if name == OTHER_NAME {
        return Err(format!("reason name {OTHER_NAME} is reserved"));
    }
    Ok(())
}

/// Prefix of a caller pattern naming a source file instead of a function.
pub(crate) const FILE_PREFIX: &str = "file:";

/// Function names: C identifiers, without clone suffixes. In `callers`,
/// also `file:PATH` (a call site whose source file ends with PATH).
pub(crate) fn check_function(name: &str) -> std::result::Result<(), String> {
    if let Some(path) = name.strip_prefix(FILE_PREFIX) {
        if path.is_empty() || path.contains(char::is_whitespace) {
            return Err(format!("bad source file pattern `{name}`"));
        }
        return Ok(());
    }
    if name.contains('.') {
        return Err(format!(
            "bad function name `{name}`: write it without clone suffixes (`{}` covers them)",
            base_name(name)
        ));
    }
    let mut bytes = name.bytes();
    let ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !ok {
        return Err(format!("bad function name `{name}`"));
    }
    Ok(())
}

/// A profile's `knobs`: each a file under /proc/sys or /sys, at most
/// `MAX_KNOBS`, none twice.
pub(crate) fn check_knobs(knobs: Vec<String>) -> std::result::Result<Vec<String>, String> {
    if knobs.len() > MAX_KNOBS {
        return Err(format!(
            "{} knobs; at most {MAX_KNOBS} may be recorded",
            knobs.len()
        ));
    }
    for (i, k) in knobs.iter().enumerate() {
        check_knob_path(k).map_err(|why| format!("knob `{k}`: {why}"))?;
        if knobs[..i].contains(k) {
            return Err(format!("knob `{k}` is named twice"));
        }
    }
    Ok(knobs)
}

/// Checks a list of function names: not empty, valid, no repeats.
fn check_functions(key: &str, names: &[String]) -> std::result::Result<(), String> {
    if names.is_empty() {
        return Err(format!("`{key}` is empty"));
    }
    let mut seen = HashSet::new();
    for n in names {
        if key != "callers" && n.starts_with(FILE_PREFIX) {
            return Err(format!(
                "{key}: `{n}`: only `callers` take source files (rules need functions with addresses)"
            ));
        }
        check_function(n).map_err(|m| format!("{key}: {m}"))?;
        if !seen.insert(n) {
            return Err(format!("{key}: `{n}` is listed twice"));
        }
    }
    Ok(())
}

/// The checks both forms share; errors read `PLACE: reason NAME: ...`.
pub(crate) fn validate(drafts: Vec<Draft>) -> Result<Vec<Reason>> {
    if drafts.len() > MAX_REASONS {
        return Err(Error::msg(format!(
            "{}: {} reasons, at most {MAX_REASONS} are supported",
            drafts[MAX_REASONS].at_name,
            drafts.len()
        )));
    }
    let mut names = HashSet::new();
    // Caller -> the reason that is its default.
    let mut defaults: HashMap<String, String> = HashMap::new();
    let mut reasons = Vec::with_capacity(drafts.len());
    for d in drafts {
        let fail = |at: &str, msg: String| Error::msg(format!("{at}: reason {}: {msg}", d.name));
        check_reason_name(&d.name).map_err(|m| Error::msg(format!("{}: {m}", d.at_name)))?;
        if !names.insert(d.name.clone()) {
            return Err(fail(&d.at_name, "defined twice".into()));
        }
        check_functions("callers", &d.callers).map_err(|m| fail(&d.at_callers, m))?;
        let within = match (d.within, d.depth) {
            (None, Some(_)) => return Err(fail(&d.at_depth, "`depth` needs `within`".into())),
            (None, None) => {
                for c in &d.callers {
                    if let Some(other) = defaults.insert(c.clone(), d.name.clone()) {
                        return Err(fail(
                            &d.at_callers,
                            format!(
                                "caller {c} already counts for {other}; a caller can be listed \
                                 without `within` in one reason only"
                            ),
                        ));
                    }
                }
                None
            }
            (Some(functions), depth) => {
                check_functions("within", &functions).map_err(|m| fail(&d.at_within, m))?;
                let depth = match depth {
                    None => DEFAULT_DEPTH,
                    Some(n) if (1..=i64::from(MAX_RULE_DEPTH)).contains(&n) => n as u32,
                    Some(n) => {
                        return Err(fail(
                            &d.at_depth,
                            format!("depth {n} is out of range 1-{MAX_RULE_DEPTH}"),
                        ))
                    }
                };
                Some(Within { functions, depth })
            }
        };
        reasons.push(Reason {
            name: d.name,
            description: d.description,
            callers: d.callers,
            within,
        });
    }
    Ok(reasons)
}

#[cfg(test)]
mod tests {
    use crate::profile::fixtures::*;

    #[test]
    fn duplicate_reason_names_are_rejected() {
        let e = err(parse_edited("name = \"PARTIAL\"", "name = \"ZAP\""));
        assert_eq!(e, "t.toml:18: reason ZAP: defined twice");
    }

    #[test]
    fn a_caller_has_one_default() {
        let e = err(parse_edited(
            "callers = [\"folio_remove_rmap_ptes\"]",
            "callers = [\"folio_remove_rmap_ptes\", \"do_huge_pmd_anonymous_page\"]",
        ));
        assert!(e.starts_with("t.toml:19: reason PARTIAL: caller do_huge_pmd_anonymous_page already counts for FAULT"), "{e}");
        // Rules for a caller in several reasons are fine: they are tried in order.
        let p = parse_edited("within = [\"khugepaged\"]", "within = [\"khugepaged\"]\n[[reason]]\nname = \"MADV\"\ncallers = [\"collapse_huge_page\"]\nwithin = [\"madvise_collapse\"]").unwrap();
        assert_eq!(p.reasons.len(), 5);
    }

    #[test]
    fn depth_needs_within_and_a_range() {
        let e = err(parse_edited(
            "callers = [\"folio_remove_rmap_ptes\"]",
            "callers = [\"folio_remove_rmap_ptes\"]\ndepth = 3",
        ));
        assert_eq!(e, "t.toml:20: reason PARTIAL: `depth` needs `within`");
        for bad in ["0", "17", "-1"] {
            let e = err(parse_edited("depth = 4", &format!("depth = {bad}")));
            assert_eq!(
                e,
                format!("t.toml:15: reason ZAP: depth {bad} is out of range 1-16")
            );
        }
        let p = parse_edited("depth = 4", "depth = 16").unwrap();
        assert_eq!(p.reasons[1].within.as_ref().unwrap().depth, 16);
    }

    #[test]
    fn names_are_checked() {
        let e = err(parse_edited("name = \"ZAP\"", "name = \"zap\""));
        assert!(e.starts_with("t.toml:12: bad reason name `zap`"), "{e}");
        let e = err(parse_edited("name = \"ZAP\"", "name = \"OTHER\""));
        assert_eq!(e, "t.toml:12: reason name OTHER is reserved");
        let e = err(parse_edited("\"zap_pte_range\"", "\"zap_pte_range.cold\""));
        assert!(
            e.starts_with("t.toml:14: reason ZAP: within: bad function name `zap_pte_range.cold`"),
            "{e}"
        );
        let e = err(parse_edited(
            "\"folio_remove_rmap_pmd\"",
            "\"folio remove\"",
        ));
        assert!(
            e.starts_with("t.toml:13: reason ZAP: callers: bad function name"),
            "{e}"
        );
        let e = err(parse_edited(
            "\"folio_remove_rmap_pmd\"",
            "\"folio_remove_rmap_ptes\"",
        ));
        assert_eq!(
            e,
            "t.toml:13: reason ZAP: callers: `folio_remove_rmap_ptes` is listed twice"
        );
    }

    #[test]
    fn empty_lists_are_rejected() {
        let e = err(parse_edited(
            "callers = [\"do_huge_pmd_anonymous_page\"]",
            "callers = []",
        ));
        assert_eq!(e, "t.toml:9: reason FAULT: `callers` is empty");
        let e = err(parse_edited("within = [\"khugepaged\"]", "within = []"));
        assert_eq!(e, "t.toml:24: reason KHUGEPAGED: `within` is empty");
        let e = err(parse_edited(
            "callers = [\"do_huge_pmd_anonymous_page\"]\n",
            "",
        ));
        assert!(e.contains("callers"), "{e}");
    }
}
