//! A resolved profile compiled for the kernel side: reason slots in
//! profile order, the caller routes user space applies once per call site,
//! and the BPF tables of callers whose reason depends on deeper frames.

use crate::bpf::deep::{Deep, DeepCaller, DeepRule};
use crate::profile::resolve::Resolved;
use crate::profile::validate::FILE_PREFIX;
use crate::reasons::{Mapper, SourcePattern};

/// The mapping a resolved profile asks for: its reasons take the first
/// slots, plain callers are routed, and callers with rules become the BPF
/// side's deep-caller and rule tables. Without a profile: one reason per
/// caller function. The mapper keeps the deeper-frame rules, for the
/// calls counted before the BPF side had them.
pub(crate) fn compile(resolved: Option<&Resolved>, max_reasons: usize) -> Mapper {
    let Some(p) = resolved else {
        return Mapper::auto(max_reasons);
    };
    let mut m = Mapper::auto(max_reasons.max(p.reasons.len()));
    for r in &p.reasons {
        m.reasons.slot(r);
    }
    for (caller, reason) in &p.routes {
        m.route(caller, reason);
    }
    for (pattern, reason) in &p.source_routes {
        let pattern = match pattern.strip_prefix(FILE_PREFIX) {
            Some(path) => SourcePattern::File(path.to_string()),
            None => SourcePattern::Function(pattern.clone()),
        };
        m.route_source(pattern, reason);
    }
    let (mut callers, mut rules) = (Vec::new(), Vec::new());
    for d in &p.deep {
        let first = rules.len() as u32;
        for r in &d.rules {
            let reason = m.reasons.slot(&r.reason);
            rules.extend(r.ranges.iter().map(|&(lo, hi)| DeepRule {
                lo,
                hi,
                reason,
                depth: r.depth,
            }));
        }
        let count = rules.len() as u32 - first;
        let default = m
            .reasons
            .slot(d.default_reason.as_deref().unwrap_or(&d.caller));
        callers.extend(d.ranges.iter().map(|&(lo, hi)| DeepCaller {
            lo,
            hi,
            rule_first: first,
            rule_count: count,
            reason: default,
        }));
    }
    m.deep = Deep { callers, rules };
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kallsyms::Kallsyms;
    use crate::profile::resolve::{DeepCallerSpec, RuleSpec};
    use crate::reasons::{SourceLoc, SourceLookup};

    #[test]
    fn a_resolved_profile_becomes_slots_routes_and_deep_tables() {
        let p = Resolved {
            reasons: vec!["FAULT".into(), "KHUGEPAGED".into(), "MADV".into()],
            routes: vec![("do_fault".into(), "FAULT".into())],
            deep: vec![DeepCallerSpec {
                caller: "collapse".into(),
                ranges: vec![(0x100, 0x200), (0x900, 0x980)],
                default_reason: None,
                rules: vec![
                    RuleSpec {
                        reason: "KHUGEPAGED".into(),
                        ranges: vec![(0x300, 0x400), (0x500, 0x600)],
                        depth: 8,
                    },
                    RuleSpec {
                        reason: "MADV".into(),
                        ranges: vec![(0x700, 0x800)],
                        depth: 4,
                    },
                ],
            }],
            missing: vec![],
            source_routes: vec![("file:mm/rmap.c".into(), "FAULT".into())],
        };
        let c = compile(Some(&p), 64);
        let m = &c;
        let slot = |n| m.reasons.lookup(n).unwrap();
        assert_eq!((slot("FAULT"), slot("KHUGEPAGED"), slot("MADV")), (2, 3, 4));
        assert_eq!(m.callers_of(2), ["do_fault"]);
        // No default reason: unmatched calls count under the caller's name.
        let own = slot("collapse");
        assert_eq!(
            c.deep.callers,
            vec![
                DeepCaller {
                    lo: 0x100,
                    hi: 0x200,
                    rule_first: 0,
                    rule_count: 3,
                    reason: own
                },
                DeepCaller {
                    lo: 0x900,
                    hi: 0x980,
                    rule_first: 0,
                    rule_count: 3,
                    reason: own
                },
            ]
        );
        assert_eq!(
            c.deep
                .rules
                .iter()
                .map(|r| (r.lo, r.reason, r.depth))
                .collect::<Vec<_>>(),
            [(0x300, 3, 8), (0x500, 3, 8), (0x700, 4, 4)]
        );

        // The file: pattern became a source route to FAULT.
        struct InRmap;
        impl SourceLookup for InRmap {
            fn source(&mut self, _addr: u64) -> Option<SourceLoc> {
                Some(SourceLoc {
                    functions: vec!["f".into()],
                    files: vec!["/src/linux/mm/rmap.c".into()],
                })
            }
        }
        let k = Kallsyms::parse("ffffffff81000000 T f\nffffffff81001000 T g\n");
        let mut m = c;
        assert_eq!(m.classify(&k, 0xffffffff81000010, Some(&mut InRmap)), 2);
    }

    #[test]
    fn no_profile_is_one_reason_per_caller() {
        let c = compile(None, 8);
        assert!(c.deep.callers.is_empty() && c.deep.rules.is_empty());
        assert_eq!(c.reasons.reason_names().count(), 0);
    }
}

/// Inlined callers and source files in profiles, matched through DWARF: a
/// small program built here with debug info stands in for a debug vmlinux
/// (the guest kernel has none), and its call sites are classified as
/// topdown classifies a kernel's.
#[cfg(test)]
mod dwarf_tests {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use crate::kallsyms::Kallsyms;
    use crate::profile::{compile, resolve, Profile};
    use crate::reasons::SourceLookup;
    use crate::symbolize::Symbols;

    const FIXTURE: &str = r#"
    __attribute__((noinline)) int sink(int x) { __asm__ volatile("" ::: "memory"); return x + 1; }
    static inline __attribute__((always_inline)) int zap_helper(int x) { return sink(x) * 3; }
    __attribute__((noinline)) int outer(int x) { return zap_helper(x) + sink(x + 7); }
    int main(int argc, char **argv) { (void)argv; return outer(argc); }
    "#;

    fn build(dir: &Path) -> PathBuf {
        let src = dir.join("fixture.c");
        let bin = dir.join("fixture");
        std::fs::write(&src, FIXTURE).unwrap();
        let st = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args([
                "-g",
                "-O2",
                "-fno-pie",
                "-no-pie",
                "-fno-omit-frame-pointer",
                "-o",
            ])
            .arg(&bin)
            .arg(&src)
            .status()
            .expect("run cc");
        assert!(st.success(), "cc failed");
        bin
    }

    /// Return addresses of the calls to `sink` in `outer`, in order, and a
    /// kallsyms-like text of the binary's functions (from nm).
    fn call_sites(bin: &Path) -> (Vec<u64>, String) {
        let dis = Command::new("objdump")
            .args(["-d", "--no-show-raw-insn"])
            .arg(bin)
            .output()
            .expect("run objdump");
        let text = String::from_utf8_lossy(&dis.stdout);
        let mut rets = Vec::new();
        let mut in_outer = false;
        let mut want_next = false;
        for line in text.lines() {
            if line.ends_with("<outer>:") {
                in_outer = true;
                continue;
            }
            if in_outer && line.trim().is_empty() {
                break;
            }
            if !in_outer {
                continue;
            }
            let addr = line
                .split(':')
                .next()
                .and_then(|a| u64::from_str_radix(a.trim(), 16).ok());
            if want_next {
                rets.push(addr.expect("an instruction after the call"));
            }
            want_next = line.contains("call") && line.contains("<sink>");
        }
        let nm = Command::new("nm").arg(bin).output().expect("run nm");
        (rets, String::from_utf8_lossy(&nm.stdout).into_owned())
    }

    #[test]
    fn inlined_callers_and_files_route_call_sites_through_dwarf() {
        let dir = std::env::temp_dir().join(format!("topdown-inline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bin = build(&dir);
        let (rets, nm) = call_sites(&bin);
        assert_eq!(rets.len(), 2, "two calls to sink in outer: {rets:x?}");
        let ksyms = Kallsyms::parse(&nm);
        assert_eq!(
            ksyms.caller_of(rets[0]).map(|s| s.name.as_str()),
            Some("outer")
        );

        // zap_helper is inlined: no symbol, so only DWARF can place it.
        let p = Profile::inline("ZAP=zap_helper;FIXTURE=file:fixture.c").unwrap();
        let r = resolve(&p, &ksyms).unwrap();
        assert_eq!(r.missing, ["zap_helper"]);
        assert_eq!(
            r.source_routes,
            [
                ("zap_helper".to_string(), "ZAP".to_string()),
                ("file:fixture.c".to_string(), "FIXTURE".to_string())
            ]
        );
        let mut m = compile(Some(&r), 64);
        let mut syms = Symbols::for_image(bin.clone());
        let loc = syms.source(rets[0] - 1).expect("a source location");
        assert!(loc.functions.iter().any(|f| f == "zap_helper"), "{loc:?}");
        let zap = m.reasons.lookup("ZAP").unwrap();
        let file = m.reasons.lookup("FIXTURE").unwrap();
        // The call inside the inlined helper, then the direct call in outer.
        assert_eq!(m.classify(&ksyms, rets[0], Some(&mut syms)), zap);
        assert_eq!(m.classify(&ksyms, rets[1], Some(&mut syms)), file);
        // Without debug info both count under outer.
        let own = m.classify(&ksyms, rets[0], None);
        assert_eq!(m.reasons.name(own), "outer");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
