//! The built-in profiles: `profiles/NAME.toml`, embedded in the binary.

use crate::kallsyms::base_name;
use crate::profile::model::Profile;

/// `(NAME, text of profiles/NAME.toml)` for each listed name.
macro_rules! builtin_files {
    ($($name:literal),* $(,)?) => {
        &[$((
            $name,
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/profiles/", $name, ".toml")),
        )),*]
    };
}

/// The built-in profiles. To add one, put `NAME.toml` into `profiles/` and
/// its NAME here; a test fails if a file in `profiles/` is not listed.
const BUILTIN: &[(&str, &str)] = builtin_files![
    "compact_zone",
    "deferred_split_folio",
    "deferred_split_huge_page",
    "handle_mm_fault",
    "mm_page_alloc",
    "sched_switch",
    "shrink_node",
];

/// Parses an embedded profile; the tests check that all of them parse.
fn parse_builtin(name: &str, text: &str) -> Profile {
    let mut p = Profile::parse(text, &format!("profiles/{name}.toml"))
        .unwrap_or_else(|e| panic!("built-in profile {name} is broken: {e}"));
    p.origin = format!("built-in profile {name}");
    p
}

/// The built-in profile called `name`.
pub(crate) fn builtin(name: &str) -> Option<Profile> {
    BUILTIN
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(n, text)| parse_builtin(n, text))
}

/// The built-in profile for tracing `func` (clone suffixes folded).
pub(crate) fn builtin_for(func: &str) -> Option<Profile> {
    let func = base_name(func);
    BUILTIN
        .iter()
        .map(|(n, text)| parse_builtin(n, text))
        .find(|p| p.function.as_deref() == Some(func))
}

/// `(name, traced function, description)` of every built-in profile.
pub(crate) fn builtins() -> Vec<(&'static str, String, String)> {
    BUILTIN
        .iter()
        .map(|(n, text)| {
            let p = parse_builtin(n, text);
            (*n, p.function.unwrap_or_default(), p.description)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::domain_tests::{deep, routes};
    use super::*;
    use crate::kallsyms::Kallsyms;
    use crate::profile::resolve::{all_functions, resolve};
    use std::path::Path;

    /// Where every rule of `p` (a reason with `within`) names the same
    /// callers: the first of them, and them all.
    fn one_firing_function(p: &Profile) -> Option<(String, Vec<String>)> {
        let mut lists = p
            .reasons
            .iter()
            .filter(|r| r.within.is_some())
            .map(|r| &r.callers);
        let first = lists.next()?;
        if first.len() < 2 || !lists.all(|l| l == first) {
            return None;
        }
        Some((first[0].clone(), first.clone()))
    }

    #[test]
    fn every_builtin_profile_is_valid_and_listed() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter_map(|n| n.strip_suffix(".toml").map(String::from))
            .collect();
        files.sort();
        let mut listed: Vec<String> = BUILTIN.iter().map(|(n, _)| n.to_string()).collect();
        listed.sort();
        assert_eq!(files, listed, "profiles/*.toml and BUILTIN differ");

        for (name, text) in BUILTIN {
            let p = Profile::parse(text, name).unwrap_or_else(|e| panic!("{e}"));
            assert!(!p.description.is_empty(), "{name}");
            for r in &p.reasons {
                assert!(!r.description.is_empty(), "{name}: {}", r.name);
            }
            let f = p.function.clone().unwrap();
            assert_eq!(
                builtin(name).unwrap().origin,
                format!("built-in profile {name}")
            );
            assert_eq!(builtin_for(&f).unwrap().function, Some(f.clone()));

            // Even with every name present (a kernel has only some of them)
            // the rules fit the BPF tables. Where every rule has the same
            // callers, they are one function's names in different kernels
            // (a tracepoint's firing function): one of them is present.
            // Each with a .cold part, and kept apart so that no ranges merge.
            let one_caller = one_firing_function(&p);
            let text: String = all_functions(&p)
                .iter()
                .filter(|f| {
                    one_caller
                        .as_ref()
                        .is_none_or(|(keep, drop)| **f == keep || !drop.iter().any(|d| d == *f))
                })
                .enumerate()
                .map(|(i, f)| {
                    let a = 0xffffffff81000000 + i as u64 * 0x1000;
                    let c = 0xffffffff82000000 + i as u64 * 0x1000;
                    format!("{a:016x} t {f}\n{:016x} t gap{i}\n", a + 0x800)
                        + &format!("{c:016x} t {f}.cold\n{:016x} t gap_cold{i}\n", c + 0x800)
                })
                .collect();
            let k = Kallsyms::parse(&text);
            let r = resolve(&p, &k).unwrap_or_else(|e| panic!("{e}"));
            // Only the other names of the one firing function are absent.
            let absent = |m: &String| one_caller.as_ref().is_some_and(|(_, d)| d.contains(m));
            assert!(r.missing.iter().all(absent), "{name}: {:?}", r.missing);
        }
        assert!(builtin("nonexistent").is_none());
        assert!(builtin_for("vfs_read").is_none());
        assert!(builtin_for("deferred_split_folio.isra.0").is_some());
        let list = builtins();
        assert_eq!(list.len(), BUILTIN.len());
        assert!(list
            .iter()
            .any(|(n, f, _)| *n == "deferred_split_folio" && f == "deferred_split_folio"));
    }

    #[test]
    fn builtin_profiles_name_their_knobs() {
        const T: &str = "/sys/kernel/mm/transparent_hugepage/";
        let thp: Vec<String> = [
            "enabled",
            "defrag",
            "khugepaged/defrag",
            "khugepaged/max_ptes_none",
            "khugepaged/max_ptes_swap",
            "khugepaged/max_ptes_shared",
            "khugepaged/pages_to_scan",
            "shrink_underused",
        ]
        .iter()
        .map(|k| format!("{T}{k}"))
        .collect();
        let vm: Vec<String> = [
            "swappiness",
            "watermark_scale_factor",
            "watermark_boost_factor",
            "min_free_kbytes",
            "compaction_proactiveness",
            "extfrag_threshold",
            "zone_reclaim_mode",
        ]
        .iter()
        .map(|k| format!("/proc/sys/vm/{k}"))
        .collect();
        let knobs = |n: &str| builtin(n).unwrap().knobs;
        assert_eq!(knobs("deferred_split_folio"), thp);
        assert_eq!(knobs("deferred_split_huge_page"), thp);
        assert_eq!(knobs("shrink_node"), vm);
        let mut compaction = vm.clone();
        compaction.extend(thp[..3].iter().cloned());
        assert_eq!(knobs("compact_zone"), compaction);
        assert_eq!(knobs("handle_mm_fault"), thp[..2]);
    }

    /// A 6.12-like kernel: zap_*_range inlined into unmap_page_range,
    /// migrate_folio_move into migrate_pages_batch, no map_anon_folio_pmd*.
    const THP_6_12: &str = "\
ffffffff81000000 T do_huge_pmd_anonymous_page
ffffffff81001000 t collapse_huge_page
ffffffff81002000 t hpage_collapse_scan_pmd
ffffffff81003000 t khugepaged_scan_mm_slot
ffffffff81004000 t khugepaged_do_scan
ffffffff81005000 t khugepaged
ffffffff81006000 T madvise_collapse
ffffffff81007000 T folio_remove_rmap_ptes
ffffffff81008000 T folio_remove_rmap_pmd
ffffffff81009000 T unmap_page_range
ffffffff8100a000 t migrate_pages_batch
ffffffff8100b000 T deferred_split_folio
ffffffff8100c000 T _etext
";

    #[test]
    fn the_thp_profile_sorts_callers_as_verified() {
        let p = builtin("deferred_split_folio").unwrap();
        let names: Vec<_> = p.reasons.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "FAULT_ALLOC",
                "KHUGEPAGED",
                "MADV_COLLAPSE",
                "ZAP",
                "PARTIALLY_MAPPED",
                "MIGRATE"
            ]
        );
        let k = Kallsyms::parse(THP_6_12);
        let r = resolve(&p, &k).unwrap();
        assert_eq!(
            routes(&r),
            [
                ("do_huge_pmd_anonymous_page", "FAULT_ALLOC"),
                ("migrate_pages_batch", "MIGRATE")
            ]
        );
        assert_eq!(
            deep(&r),
            [
                (
                    "collapse_huge_page",
                    None,
                    vec!["KHUGEPAGED", "MADV_COLLAPSE"]
                ),
                (
                    "folio_remove_rmap_ptes",
                    Some("PARTIALLY_MAPPED"),
                    vec!["ZAP"]
                ),
                (
                    "folio_remove_rmap_pmd",
                    Some("PARTIALLY_MAPPED"),
                    vec!["ZAP"]
                ),
            ]
        );
        // KHUGEPAGED: khugepaged_scan_mm_slot and khugepaged (apart, as
        // khugepaged_do_scan lies between); then one range each.
        assert_eq!(r.deep_rule_ranges(), 2 + 1 + 1 + 1);
    }
}

/// The reclaim, compaction and fault-origin profiles, resolved on symbol
/// sets like those of Debian's 6.1 and 6.12 kernels (what is inlined there
/// has no symbol here).
#[cfg(test)]
mod domain_tests {
    use super::builtin;
    use crate::kallsyms::Kallsyms;
    use crate::profile::resolve::resolve;
    use crate::profile::resolve::Resolved;

    /// A kallsyms text with one function per 0x1000 bytes, each followed
    /// by a filler so that no ranges merge.
    fn ksyms(names: &[&str]) -> Kallsyms {
        let text: String = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let a = 0xffffffff81000000u64 + i as u64 * 0x1000;
                format!("{a:016x} t {n}\n{:016x} t filler{i}\n", a + 0x800)
            })
            .collect();
        Kallsyms::parse(&(text + "ffffffff8f000000 T _etext\n"))
    }

    pub(super) fn routes(r: &Resolved) -> Vec<(&str, &str)> {
        r.routes
            .iter()
            .map(|(c, n)| (c.as_str(), n.as_str()))
            .collect()
    }

    /// `(caller, default, [rule reasons])` of each caller with rules.
    pub(super) fn deep(r: &Resolved) -> Vec<(&str, Option<&str>, Vec<&str>)> {
        r.deep
            .iter()
            .map(|d| {
                (
                    d.caller.as_str(),
                    d.default_reason.as_deref(),
                    d.rules.iter().map(|x| x.reason.as_str()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn reclaim_splits_the_shared_caller_by_the_frames_above() {
        let p = builtin("shrink_node").unwrap();
        // Both kernels: kswapd_shrink_node and shrink_zones inlined.
        let k = ksyms(&[
            "shrink_node",
            "do_try_to_free_pages",
            "try_to_free_pages",
            "try_to_free_mem_cgroup_pages",
            "balance_pgdat",
            "kswapd",
            "__node_reclaim",
            "node_reclaim",
            "memory_reclaim",
            "reclaim_high",
            "memory_high_write",
            "try_charge_memcg",
        ]);
        let r = resolve(&p, &k).unwrap();
        assert_eq!(
            routes(&r),
            [
                ("balance_pgdat", "KSWAPD"),
                ("__node_reclaim", "NODE_RECLAIM"),
                ("node_reclaim", "NODE_RECLAIM")
            ]
        );
        assert_eq!(
            deep(&r),
            [(
                "do_try_to_free_pages",
                None,
                vec!["PROACTIVE", "MEMCG_HIGH", "MEMCG_LIMIT", "DIRECT"]
            )]
        );
        assert_eq!(r.missing, ["kswapd_shrink_node", "shrink_zones"]);
        assert_eq!(r.missing_warning(false, |_| None), None);
        assert_eq!(r.deep_rule_ranges(), 5);
    }

    #[test]
    fn compaction_tells_proactive_from_explicit_on_both_kernels() {
        let p = builtin("compact_zone").unwrap();
        let common = [
            "compact_zone",
            "compact_zone_order",
            "try_to_compact_pages",
            "kcompactd_do_work",
            "kcompactd",
            "compact_node",
            "sysctl_compaction_handler",
            "compact_store",
        ];
        // 6.12: proactive compaction is compact_node called by kcompactd.
        let r = resolve(&p, &ksyms(&common)).unwrap();
        assert_eq!(
            routes(&r),
            [
                ("compact_zone_order", "DIRECT"),
                ("try_to_compact_pages", "DIRECT"),
                ("kcompactd_do_work", "KCOMPACTD")
            ]
        );
        assert_eq!(
            deep(&r),
            [("compact_node", Some("SYSCTL"), vec!["PROACTIVE"])]
        );
        assert_eq!(r.missing, ["proactive_compact_node"]);
        // 6.1: a function of its own.
        let mut v61 = common.to_vec();
        v61.push("proactive_compact_node");
        let r = resolve(&p, &ksyms(&v61)).unwrap();
        assert_eq!(
            deep(&r),
            [
                ("proactive_compact_node", None, vec!["PROACTIVE"]),
                ("compact_node", Some("SYSCTL"), vec!["PROACTIVE"])
            ]
        );
        assert!(r.missing.is_empty());
    }

    #[test]
    fn fault_origins_split_gup_by_remote_access_and_exec() {
        let p = builtin("handle_mm_fault").unwrap();
        // Both kernels: faultin_page inlined into __get_user_pages.
        let k = ksyms(&[
            "handle_mm_fault",
            "do_user_addr_fault",
            "__get_user_pages",
            "fixup_user_fault",
            "__access_remote_vm",
            "access_remote_vm",
            "process_vm_rw_core.constprop.0",
            "process_vm_rw",
            "get_arg_page",
        ]);
        let r = resolve(&p, &k).unwrap();
        assert_eq!(
            routes(&r),
            [
                ("do_user_addr_fault", "USER"),
                ("fixup_user_fault", "FIXUP")
            ]
        );
        assert_eq!(
            deep(&r),
            [("__get_user_pages", Some("GUP"), vec!["REMOTE", "EXEC"])]
        );
        // do_page_fault is arm64's.
        assert_eq!(r.missing, ["do_page_fault", "faultin_page"]);
        // An inlined faultin_page is a plain route for debug info to match.
        assert_eq!(
            r.source_routes,
            [
                ("do_page_fault".to_string(), "USER".to_string()),
                ("faultin_page".to_string(), "GUP".to_string())
            ]
        );
        assert_eq!(r.deep_rule_ranges(), 5);
        // arm64: the CPU's faults come through do_page_fault.
        let arm64 = ksyms(&["handle_mm_fault", "do_page_fault", "fixup_user_fault"]);
        let r = resolve(&p, &arm64).unwrap();
        assert_eq!(
            routes(&r),
            [("do_page_fault", "USER"), ("fixup_user_fault", "FIXUP")]
        );
    }
}
