//! The `--list-reasons` listing.

use std::fmt::Write as _;

use crate::bpf::limits::{MAX_DEEP_CALLERS, MAX_DEEP_RULES};
use crate::kallsyms::Kallsyms;
use crate::profile::model::Profile;
use crate::profile::resolve::all_functions;
use crate::profile::resolve::Resolved;

/// `ffffffff81001010`, or `ffffffff81002000 (.isra.0), ...` for clones, or
/// `missing`.
fn addresses(ksyms: &Kallsyms, name: &str) -> String {
    let syms: Vec<String> = ksyms
        .function(name)
        .map(|s| match s.name.strip_prefix(name) {
            Some("") | None => format!("{:016x}", s.addr),
            Some(suffix) => format!("{:016x} ({suffix})", s.addr),
        })
        .collect();
    if syms.is_empty() {
        "missing".to_string()
    } else {
        syms.join(", ")
    }
}

/// `text` as lines of at most 78 columns (longer words stay whole), each
/// indented by two spaces.
fn wrapped(text: &str) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && 2 + line.len() + 1 + word.len() > 78 {
            let _ = writeln!(out, "  {line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "  {line}");
    }
    out
}

/// The `--list-reasons` listing: each reason with its description, callers
/// and `within` functions as found in this kernel, then what the BPF side
/// will do and what is missing.
/// `users_own`: close names are suggested for missing ones (a built-in
/// profile's are from other kernel versions, not typos).
pub(crate) fn describe(
    profile: &Profile,
    resolved: &Resolved,
    ksyms: &Kallsyms,
    users_own: bool,
) -> String {
    let mut s = String::new();
    let _ = write!(s, "Reason profile: {}", profile.origin);
    if let Some(f) = &profile.function {
        let _ = write!(s, ", for {f}");
    }
    s.push('\n');
    s.push_str(&wrapped(&profile.description));
    let width = all_functions(profile)
        .iter()
        .map(|n| n.len())
        .max()
        .unwrap_or(0);
    for r in &profile.reasons {
        let _ = writeln!(s, "\n{}", r.name);
        s.push_str(&wrapped(&r.description));
        for c in &r.callers {
            let _ = writeln!(s, "  caller  {c:width$}  {}", addresses(ksyms, c));
        }
        if let Some(w) = &r.within {
            for f in &w.functions {
                let _ = writeln!(s, "  within  {f:width$}  {}", addresses(ksyms, f));
            }
            let _ = writeln!(s, "  depth   {}", w.depth);
        }
    }
    s.push('\n');
    for d in &resolved.deep {
        let rules: Vec<String> = d
            .rules
            .iter()
            .map(|r| format!("{} (depth {})", r.reason, r.depth))
            .collect();
        let default = d.default_reason.as_deref().unwrap_or(&d.caller);
        let _ = writeln!(
            s,
            "{}: stack walk per call: {}, else {default}",
            d.caller,
            rules.join(", then ")
        );
    }
    if !resolved.deep.is_empty() {
        let _ = writeln!(
            s,
            "BPF tables: {} of {MAX_DEEP_CALLERS} caller ranges, {} of {MAX_DEEP_RULES} rule ranges",
            resolved.deep_caller_ranges(),
            resolved.deep_rule_ranges()
        );
    }
    for (pattern, reason) in &resolved.source_routes {
        let _ = writeln!(
            s,
            "{pattern}: not a kernel symbol; call sites match through a debug vmlinux's DWARF \
             (--vmlinux), then count as {reason}"
        );
    }
    s.push_str("Callers not listed count under their own name.\n");
    if !resolved.missing.is_empty() {
        let named: Vec<String> = resolved
            .missing
            .iter()
            .map(
                |m| match ksyms.suggest(m, 1).first().filter(|_| users_own) {
                    Some(c) => format!("{m} (did you mean {c}?)"),
                    None => m.clone(),
                },
            )
            .collect();
        let _ = writeln!(s, "missing on this kernel: {}", named.join(", "));
    }
    s
}

/// A function's addresses in this kernel, none if it is missing.
fn address_list(ksyms: &Kallsyms, name: &str) -> Vec<serde_json::Value> {
    ksyms
        .function(name)
        .map(|s| serde_json::json!({"name": s.name, "addr": format!("{:#x}", s.addr)}))
        .collect()
}

/// The `--list-reasons --json` listing: one object with what `describe`
/// prints, addresses as found in this kernel (empty: missing).
pub(crate) fn describe_json(profile: &Profile, resolved: &Resolved, ksyms: &Kallsyms) -> String {
    let names = |fs: &[String]| -> Vec<serde_json::Value> {
        fs.iter()
            .map(|f| serde_json::json!({"function": f, "addresses": address_list(ksyms, f)}))
            .collect()
    };
    let reasons: Vec<serde_json::Value> = profile
        .reasons
        .iter()
        .map(|r| {
            serde_json::json!({
                "reason": r.name,
                "description": r.description,
                "callers": names(&r.callers),
                "within": r.within.as_ref().map(|w| serde_json::json!({
                    "functions": names(&w.functions),
                    "depth": w.depth,
                })),
            })
        })
        .collect();
    serde_json::json!({
        "profile": profile.origin,
        "function": profile.function,
        "description": profile.description,
        "reasons": reasons,
        "missing": resolved.missing,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::fixtures::*;
    use crate::profile::resolve;

    #[test]
    fn the_listing_shows_addresses_and_missing_names() {
        let k = Kallsyms::parse(KSYMS);
        let p = Profile::parse(GOOD, "t.toml").unwrap();
        let r = resolve(&p, &k).unwrap();
        let s = describe(&p, &r, &k, true);
        assert!(
            s.starts_with("Reason profile: t.toml, for deferred_split_folio\n  test profile\n"),
            "{s}"
        );
        assert!(
            s.contains(
                "\nFAULT\n  faults\n  caller  do_huge_pmd_anonymous_page  ffffffff81001000\n"
            ),
            "{s}"
        );
        assert!(s.contains("  within  zap_pte_range               ffffffff81002000 (.isra.0), ffffffff81009000 (.cold)\n"), "{s}");
        assert!(
            s.contains("  within  khugepaged                  missing\n  depth   8\n"),
            "{s}"
        );
        assert!(
            s.contains(
                "folio_remove_rmap_ptes: stack walk per call: ZAP (depth 4), else PARTIAL\n"
            ),
            "{s}"
        );
        assert!(s.contains("folio_remove_rmap_pmd: stack walk per call: ZAP (depth 4), else folio_remove_rmap_pmd\n"), "{s}");
        assert!(
            s.contains("BPF tables: 2 of 16 caller ranges, 6 of 32 rule ranges\n"),
            "{s}"
        );
        assert!(s.ends_with("missing on this kernel: khugepaged\n"), "{s}");
    }

    #[test]
    fn descriptions_wrap() {
        let text = "word ".repeat(30);
        let out = wrapped(&text);
        assert!(
            out.lines()
                .all(|l| l.len() <= 78 && l.starts_with("  word")),
            "{out}"
        );
        assert_eq!(out.split_whitespace().count(), 30);
        assert_eq!(wrapped(""), "");
        assert_eq!(
            wrapped(&"x".repeat(100)),
            format!("  {}\n", "x".repeat(100))
        );
    }

    #[test]
    fn the_json_listing_has_the_same_facts() {
        let k = Kallsyms::parse(KSYMS);
        let p = Profile::parse(GOOD, "t.toml").unwrap();
        let r = resolve(&p, &k).unwrap();
        let v: serde_json::Value = serde_json::from_str(&describe_json(&p, &r, &k)).unwrap();
        assert_eq!(v["profile"], "t.toml");
        assert_eq!(v["function"], "deferred_split_folio");
        let fault = &v["reasons"][0];
        assert_eq!(fault["reason"], "FAULT");
        assert_eq!(
            fault["callers"][0]["function"],
            "do_huge_pmd_anonymous_page"
        );
        assert_eq!(
            fault["callers"][0]["addresses"][0]["addr"],
            "0xffffffff81001000"
        );
        assert_eq!(v["missing"], serde_json::json!(r.missing));
    }

    #[test]
    fn a_users_missing_caller_gets_the_close_name() {
        let k = Kallsyms::parse("ffffffff81000000 T ksys_read\n");
        let p = Profile::inline("A=ksys_reda").unwrap();
        let r = resolve(&p, &k).unwrap();
        let s = describe(&p, &r, &k, true);
        assert!(
            s.ends_with("missing on this kernel: ksys_reda (did you mean ksys_read?)\n"),
            "{s}"
        );
        let s = describe(&p, &r, &k, false);
        assert!(s.ends_with("missing on this kernel: ksys_reda\n"), "{s}");
    }
}
