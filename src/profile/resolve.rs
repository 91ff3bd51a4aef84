//! A profile mapped onto the running kernel's symbols.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::bpf::limits::{MAX_DEEP_CALLERS, MAX_DEEP_RULES};
use crate::error::{Error, Result};
use crate::kallsyms::Kallsyms;
use crate::profile::model::{Profile, Reason};
use crate::profile::validate::FILE_PREFIX;

/// A profile resolved against the running kernel's symbols.
///
/// The BPF side needs one caller-table entry per address range in
/// `deep[i].ranges`, all ranges of one caller sharing that caller's rules,
/// and one rule-table entry per address range in `deep[i].rules[j].ranges`
/// (see `deep_caller_ranges` and `deep_rule_ranges`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// Reason names in profile order; they get their slots first.
    pub(crate) reasons: Vec<String>,
    /// `(caller function, reason)` for callers without rules.
    pub(crate) routes: Vec<(String, String)>,
    /// Callers with rules.
    pub(crate) deep: Vec<DeepCallerSpec>,
    /// Profile function names absent from this kernel, in profile order.
    pub(crate) missing: Vec<String>,
    /// `(pattern, reason)` for callers without rules that kallsyms cannot
    /// place: inlined functions and `file:` source paths. A call site
    /// matches through the debug vmlinux's DWARF, if there is one.
    pub(crate) source_routes: Vec<(String, String)>,
}

/// A caller whose reason depends on deeper frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeepCallerSpec {
    pub(crate) caller: String,
    /// `[lo, hi)` of each of its symbols, sorted, adjacent ones merged.
    pub(crate) ranges: Vec<(u64, u64)>,
    /// Reason when no rule matches; None: the caller's own name.
    pub(crate) default_reason: Option<String>,
    /// Tried in order; the first match wins.
    pub(crate) rules: Vec<RuleSpec>,
}

/// "A frame within `depth` frames above the caller lies in `ranges`."
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuleSpec {
    pub(crate) reason: String,
    pub(crate) ranges: Vec<(u64, u64)>,
    pub(crate) depth: u32,
}

impl Resolved {
    /// Entries the BPF caller table needs.
    pub(crate) fn deep_caller_ranges(&self) -> usize {
        self.deep.iter().map(|d| d.ranges.len()).sum()
    }

    /// What to say about profile functions this kernel lacks. A user's own
    /// profile: every one. A built-in profile covers several kernel
    /// versions, so names from other versions are expected to be missing:
    /// only reasons left with no function at all, whose rows would stay
    /// empty, are named. `close` gives a missing name's nearest in this
    /// kernel, if any (a typo in one's own profile).
    pub(crate) fn missing_warning(
        &self,
        users_own: bool,
        close: impl Fn(&str) -> Option<String>,
    ) -> Option<String> {
        let see = "(inlined or absent; see --list-reasons)";
        if users_own {
            let named: Vec<String> = self
                .missing
                .iter()
                .map(|m| match close(m) {
                    Some(c) => format!("{m} (did you mean {c}?)"),
                    None => m.clone(),
                })
                .collect();
            return (!named.is_empty())
                .then(|| format!("functions not in this kernel {see}: {}", named.join(", ")));
        }
        let live: HashSet<&str> = self
            .routes
            .iter()
            .map(|(_, reason)| reason.as_str())
            .chain(self.deep.iter().flat_map(|d| {
                d.rules
                    .iter()
                    .map(|rule| rule.reason.as_str())
                    .chain(d.default_reason.as_deref())
            }))
            .collect();
        let dead: Vec<&str> = self
            .reasons
            .iter()
            .map(String::as_str)
            .filter(|name| !live.contains(name))
            .collect();
        (!dead.is_empty()).then(|| {
            format!(
                "reasons with no function in this kernel {see}: {}",
                dead.join(", ")
            )
        })
    }

    /// What to say when a user's profile has callers that only debug info
    /// can place and there is no debug vmlinux. (A built-in profile's names
    /// from other kernel versions are missing as a matter of course.)
    pub(crate) fn source_warning(&self, users_own: bool, vmlinux: Option<&Path>) -> Option<String> {
        if !users_own || self.source_routes.is_empty() || vmlinux.is_some() {
            return None;
        }
        let names: Vec<&str> = self.source_routes.iter().map(|(p, _)| p.as_str()).collect();
        Some(format!(
            "{} can only be matched with a debug vmlinux (--vmlinux PATH); \
             without one, those calls count under their caller functions",
            names.join(", ")
        ))
    }

    /// Entries the BPF rule table needs.
    pub(crate) fn deep_rule_ranges(&self) -> usize {
        self.deep
            .iter()
            .flat_map(|d| &d.rules)
            .map(|r| r.ranges.len())
            .sum()
    }
}

/// Address ranges of all symbols of a function, merged.
fn function_ranges(ksyms: &Kallsyms, name: &str) -> Vec<(u64, u64)> {
    merge(ksyms.function(name).map(|s| (s.addr, s.end)).collect())
}

/// Sorts ranges and merges touching or overlapping ones. Symbols end where
/// the next one starts, so touching ranges cover exactly their union.
fn merge(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        match merged.last_mut() {
            Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    merged
}

/// Every function name a profile mentions, callers first, in order, once.
pub(crate) fn all_functions(profile: &Profile) -> Vec<&str> {
    let mut seen = HashSet::new();
    let callers = profile.reasons.iter().flat_map(|r| &r.callers);
    let within = profile
        .reasons
        .iter()
        .flat_map(|r| r.within.iter().flat_map(|w| &w.functions));
    callers
        .chain(within)
        .map(String::as_str)
        .filter(|n| seen.insert(*n))
        .collect()
}

/// Maps a profile onto the running kernel: which callers are routed to a
/// reason once per call site, which need rules, and the address ranges of
/// those. Fails only if the rules exceed the BPF program's tables. The
/// ranges mean something only if `ksyms` shows addresses (see
/// `Kallsyms::addresses_hidden`); names, and so `missing`, are right anyway.
pub(crate) fn resolve(profile: &Profile, ksyms: &Kallsyms) -> Result<Resolved> {
    let mut out = Resolved {
        reasons: profile.reasons.iter().map(|r| r.name.clone()).collect(),
        ..Resolved::default()
    };
    let ranges = function_ranges_of(profile, ksyms, &mut out.missing);
    for caller in distinct_callers(profile) {
        route(profile, caller, &ranges, &mut out);
    }
    check_table_room(&out, &profile.origin)?;
    Ok(out)
}

/// The address ranges of every function the profile mentions; the names
/// of those not in the kernel go to `missing` (source files aside).
fn function_ranges_of<'p>(
    profile: &'p Profile,
    ksyms: &Kallsyms,
    missing: &mut Vec<String>,
) -> HashMap<&'p str, Vec<(u64, u64)>> {
    let mut ranges = HashMap::new();
    for name in all_functions(profile) {
        let r = function_ranges(ksyms, name);
        if r.is_empty() && !name.starts_with(FILE_PREFIX) {
            missing.push(name.to_string());
        }
        ranges.insert(name, r);
    }
    ranges
}

/// The callers the profile names, in order, once.
fn distinct_callers(profile: &Profile) -> Vec<&str> {
    let mut callers: Vec<&str> = Vec::new();
    for c in profile.reasons.iter().flat_map(|r| &r.callers) {
        if !callers.contains(&c.as_str()) {
            callers.push(c);
        }
    }
    callers
}

/// Adds how `caller`'s calls are told apart to `out`: a route to one
/// reason, rules over deeper frames, or a route by debug info.
fn route(
    profile: &Profile,
    caller: &str,
    ranges: &HashMap<&str, Vec<(u64, u64)>>,
    out: &mut Resolved,
) {
    let lists = |r: &&Reason| r.callers.iter().any(|c| c == caller);
    let default_reason = profile
        .reasons
        .iter()
        .filter(lists)
        .find(|r| r.within.is_none())
        .map(|r| r.name.clone());
    if ranges[caller].is_empty() {
        // Not a symbol (inlined, a source file, or absent): only debug
        // info can place its call sites, and only for a plain route.
        if let Some(r) = default_reason {
            out.source_routes.push((caller.to_string(), r));
        }
        return;
    }
    let rules = rules_of(profile.reasons.iter().filter(lists), ranges);
    if !rules.is_empty() {
        out.deep.push(DeepCallerSpec {
            caller: caller.to_string(),
            ranges: ranges[caller].clone(),
            default_reason,
            rules,
        });
    } else if let Some(reason) = default_reason {
        out.routes.push((caller.to_string(), reason));
    }
    // else: only rules, all dropped; the caller counts under its name.
}

/// The `within` rules of a caller's reasons, with the merged ranges of
/// their functions; a rule none of whose functions is found is dropped.
fn rules_of<'r>(
    reasons: impl Iterator<Item = &'r Reason>,
    ranges: &HashMap<&str, Vec<(u64, u64)>>,
) -> Vec<RuleSpec> {
    let mut rules = Vec::new();
    for r in reasons {
        let Some(w) = &r.within else { continue };
        let rule_ranges = merge(
            w.functions
                .iter()
                .flat_map(|f| ranges[f.as_str()].iter().copied())
                .collect(),
        );
        if rule_ranges.is_empty() {
            continue; // every `within` function is missing: drop the rule
        }
        rules.push(RuleSpec {
            reason: r.name.clone(),
            ranges: rule_ranges,
            depth: w.depth,
        });
    }
    rules
}

/// Fails if the rules need more address ranges than the BPF program's
/// tables hold; `origin` names the profile.
fn check_table_room(out: &Resolved, origin: &str) -> Result<()> {
    let per_caller = |f: &dyn Fn(&DeepCallerSpec) -> usize| {
        out.deep
            .iter()
            .map(|d| format!("{} {}", d.caller, f(d)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let need = out.deep_caller_ranges();
    if need > MAX_DEEP_CALLERS {
        return Err(Error::msg(format!(
            "{origin}: callers with `within` rules need {need} address ranges on this kernel, \
             the BPF program takes at most {MAX_DEEP_CALLERS} ({})",
            per_caller(&|d| d.ranges.len())
        )));
    }
    let need = out.deep_rule_ranges();
    if need > MAX_DEEP_RULES {
        return Err(Error::msg(format!(
            "{origin}: `within` rules need {need} address ranges on this kernel, \
             the BPF program takes at most {MAX_DEEP_RULES} (per caller: {})",
            per_caller(&|d| d.rules.iter().map(|r| r.ranges.len()).sum())
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::fixtures::*;

    fn resolved() -> Resolved {
        Resolved {
            reasons: vec!["FAULT".into(), "KHUGEPAGED".into(), "MIGRATE".into()],
            routes: vec![("do_fault".into(), "FAULT".into())],
            deep: vec![DeepCallerSpec {
                caller: "collapse".into(),
                ranges: vec![(1, 2)],
                default_reason: None,
                rules: vec![RuleSpec {
                    reason: "KHUGEPAGED".into(),
                    ranges: vec![(3, 4)],
                    depth: 8,
                }],
            }],
            missing: vec!["map_anon_folio_pmd".into(), "migrate_folio_move".into()],
            source_routes: vec![],
        }
    }

    #[test]
    fn a_built_in_profile_warns_only_about_reasons_left_empty() {
        assert_eq!(
            resolved().missing_warning(false, |_| None).unwrap(),
            "reasons with no function in this kernel (inlined or absent; see --list-reasons): MIGRATE"
        );
        let mut r = resolved();
        r.reasons.pop();
        assert_eq!(r.missing_warning(false, |_| None), None);
    }

    #[test]
    fn a_users_profile_warns_about_every_missing_function() {
        assert_eq!(
            resolved().missing_warning(true, |_| None).unwrap(),
            "functions not in this kernel (inlined or absent; see --list-reasons): map_anon_folio_pmd, migrate_folio_move"
        );
        let close =
            |m: &str| (m == "migrate_folio_move").then(|| "migrate_folio_mapping".to_string());
        assert!(resolved().missing_warning(true, close).unwrap().ends_with(
            ": map_anon_folio_pmd, migrate_folio_move (did you mean migrate_folio_mapping?)"
        ));
    }

    #[test]
    fn source_patterns_without_a_vmlinux_are_a_warning() {
        let mut r = resolved();
        assert_eq!(r.source_warning(true, None), None);
        r.source_routes = vec![
            ("zap_pte_range".into(), "ZAP".into()),
            ("file:mm/rmap.c".into(), "ZAP".into()),
        ];
        assert_eq!(r.source_warning(true, Some(Path::new("/x/vmlinux"))), None);
        assert_eq!(r.source_warning(false, None), None);
        assert_eq!(
            r.source_warning(true, None).unwrap(),
            "zap_pte_range, file:mm/rmap.c can only be matched with a debug vmlinux (--vmlinux PATH); \
             without one, those calls count under their caller functions"
        );
    }

    #[test]
    fn resolution_routes_and_rules() {
        let k = Kallsyms::parse(KSYMS);
        let p = Profile::parse(GOOD, "t.toml").unwrap();
        let r = resolve(&p, &k).unwrap();
        assert_eq!(r.reasons, ["FAULT", "ZAP", "PARTIAL", "KHUGEPAGED"]);
        assert_eq!(
            r.routes,
            [(
                "do_huge_pmd_anonymous_page".to_string(),
                "FAULT".to_string()
            )]
        );
        // khugepaged is missing: the KHUGEPAGED rule is dropped, and
        // collapse_huge_page, without a default, counts under its own name.
        assert_eq!(r.missing, ["khugepaged"]);
        let zap_ranges = vec![
            (0xffffffff81002000, 0xffffffff81003000), // zap_pte_range.isra.0
            (0xffffffff81005000, 0xffffffff81006000), // unmap_page_range
            (0xffffffff81009000, 0xffffffff8100a000), // zap_pte_range.cold
        ];
        let zap = RuleSpec {
            reason: "ZAP".into(),
            ranges: zap_ranges,
            depth: 4,
        };
        assert_eq!(
            r.deep,
            [
                DeepCallerSpec {
                    caller: "folio_remove_rmap_ptes".into(),
                    ranges: vec![(0xffffffff81003000, 0xffffffff81004000)],
                    default_reason: Some("PARTIAL".into()),
                    rules: vec![zap.clone()],
                },
                DeepCallerSpec {
                    caller: "folio_remove_rmap_pmd".into(),
                    ranges: vec![(0xffffffff81004000, 0xffffffff81005000)],
                    default_reason: None,
                    rules: vec![zap],
                },
            ]
        );
        assert_eq!(r.deep_caller_ranges(), 2);
        assert_eq!(r.deep_rule_ranges(), 6);
    }

    #[test]
    fn clones_fold_and_adjacent_parts_merge() {
        let k = Kallsyms::parse(KSYMS);
        assert_eq!(
            function_ranges(&k, "foo"),
            [(0xffffffff81007000, 0xffffffff81007200)]
        );
        assert_eq!(function_ranges(&k, "zap_pte_range").len(), 2);
        assert!(function_ranges(&k, "zap").is_empty());
    }

    #[test]
    fn a_rule_with_missing_within_leaves_the_default_route() {
        let k = Kallsyms::parse(KSYMS);
        let p = Profile::inline("A=foo@nowhere,nothere;B=foo;C=gone").unwrap();
        let r = resolve(&p, &k).unwrap();
        assert!(r.deep.is_empty());
        assert_eq!(r.routes, [("foo".to_string(), "B".to_string())]);
        assert_eq!(r.missing, ["gone", "nowhere", "nothere"]);
        assert_eq!(r.reasons, ["A", "B", "C"]);
    }

    #[test]
    fn bpf_limits_are_enforced() {
        // 17 callers with a rule: one range each.
        // Fillers keep the functions apart, so that no ranges merge.
        let mut text = String::new();
        for i in 0..18u64 {
            let addr = 0xffffffff81000000 + i * 0x200;
            text += &format!("{addr:016x} T f{i}\n{:016x} T filler{i}\n", addr + 0x100);
        }
        let k = Kallsyms::parse(&text);
        let callers: Vec<String> = (0..17).map(|i| format!("f{i}")).collect();
        let p = Profile::inline(&format!("A={}@f17", callers.join(","))).unwrap();
        let e = resolve(&p, &k).unwrap_err().to_string();
        assert!(
            e.starts_with("--rules: callers with `within` rules need 17 address ranges on this kernel, the BPF program takes at most 16 (f0 1, f1 1,"),
            "{e}"
        );
        // 16 fit.
        let p = Profile::inline(&format!("A={}@f17", callers[..16].join(","))).unwrap();
        assert_eq!(resolve(&p, &k).unwrap().deep_caller_ranges(), 16);
        // 3 callers x 11 within functions: 33 rule ranges.
        let within: Vec<String> = (3..14).map(|i| format!("f{i}")).collect();
        let p = Profile::inline(&format!("A=f0,f1,f2@{}", within.join(","))).unwrap();
        let e = resolve(&p, &k).unwrap_err().to_string();
        assert_eq!(
            e,
            "--rules: `within` rules need 33 address ranges on this kernel, the BPF program \
             takes at most 32 (per caller: f0 11, f1 11, f2 11)"
        );
    }
}
