//! Reason slots: the names behind the per-CPU counter array, and the
//! mapping from a caller's return address to a slot.

use std::collections::{BTreeSet, HashMap};

use crate::kallsyms::{base_name, Kallsyms};
use crate::probe::{DeepCaller, DeepRule};
use crate::profile::{Resolved, FILE_PREFIX};

/// Slot layout shared with the BPF side (src/bpf/topdown.h).
pub const NR_SLOTS: usize = 256;
pub const SLOT_NOT_FOUND: u32 = 0;
pub const SLOT_SITES_FULL: u32 = 1;
const FIRST_REASON: u32 = 2;
/// Named reasons at most, leaving one slot for OTHER.
pub const MAX_REASONS: usize = NR_SLOTS - FIRST_REASON as usize - 1;

pub const NOT_FOUND_NAME: &str = "[caller not found]";
pub const SITES_FULL_NAME: &str = "[site table full]";
pub const OTHER_NAME: &str = "OTHER";
/// Reason for return addresses outside every kallsyms symbol.
pub const UNKNOWN_NAME: &str = "[unknown]";

/// The names of the slots in use, allocated as reasons appear.
#[derive(Debug)]
pub struct Reasons {
    names: Vec<String>,
    by_name: HashMap<String, u32>,
    max: usize,
    other: Option<u32>,
    merged: BTreeSet<String>,
}

impl Reasons {
    /// A table that names at most `max` reasons; more go to OTHER.
    pub fn new(max: usize) -> Self {
        Reasons {
            names: vec![NOT_FOUND_NAME.into(), SITES_FULL_NAME.into()],
            by_name: HashMap::new(),
            max: max.min(MAX_REASONS),
            other: None,
            merged: BTreeSet::new(),
        }
    }

    /// The slot of a reason, allocated on first use.
    pub fn slot(&mut self, name: &str) -> u32 {
        if let Some(&s) = self.by_name.get(name) {
            return s;
        }
        if self.by_name.len() - usize::from(self.other.is_some()) >= self.max {
            self.merged.insert(name.to_string());
            return self.other_slot();
        }
        self.push(name)
    }

    fn other_slot(&mut self) -> u32 {
        match self.other {
            Some(s) => s,
            None => {
                let s = self.push(OTHER_NAME);
                self.other = Some(s);
                s
            }
        }
    }

    fn push(&mut self, name: &str) -> u32 {
        let s = self.names.len() as u32;
        self.names.push(name.to_string());
        self.by_name.insert(name.to_string(), s);
        s
    }

    /// The slot of an existing reason.
    pub fn lookup(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    pub fn name(&self, slot: u32) -> &str {
        self.names.get(slot as usize).map_or("?", String::as_str)
    }

    /// Number of slots in use, the special ones included.
    pub fn slots_used(&self) -> usize {
        self.names.len()
    }

    /// Names of the reasons, without the special slots.
    pub fn reason_names(&self) -> impl Iterator<Item = &str> {
        self.names[FIRST_REASON as usize..]
            .iter()
            .map(String::as_str)
    }

    /// Callers merged into OTHER because the table was full.
    pub fn merged(&self) -> &BTreeSet<String> {
        &self.merged
    }

    pub fn is_special(slot: u32) -> bool {
        slot < FIRST_REASON
    }
}

/// Where an address lies in the source, from debug info: the functions
/// inlined there, innermost first, then the function itself; and the
/// source files of those locations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceLoc {
    pub functions: Vec<String>,
    pub files: Vec<String>,
}

/// Looks up source locations (a symbolizer with a debug vmlinux).
pub trait SourceLookup {
    fn source(&mut self, addr: u64) -> Option<SourceLoc>;
}

/// Maps call sites to reason slots: through the profile's caller table
/// where it names the caller, else one reason per caller function.
#[derive(Debug)]
pub struct Mapper {
    pub reasons: Reasons,
    by_caller: HashMap<String, u32>,
    /// Inlined callers and `file:` patterns, matched through debug info
    /// before the caller table: they are the more specific.
    by_source: Vec<(String, u32)>,
}

impl Mapper {
    /// One reason per caller function.
    pub fn auto(max_reasons: usize) -> Self {
        Mapper {
            reasons: Reasons::new(max_reasons),
            by_caller: HashMap::new(),
            by_source: Vec::new(),
        }
    }

    /// The mapping a resolved profile asks for: its reasons take the first
    /// slots, plain callers are routed, and callers with rules become the
    /// BPF side's deep-caller and rule tables.
    pub fn from_profile(
        p: &Resolved,
        max_reasons: usize,
    ) -> (Self, Vec<DeepCaller>, Vec<DeepRule>) {
        let mut m = Mapper::auto(max_reasons.max(p.reasons.len()));
        for r in &p.reasons {
            m.reasons.slot(r);
        }
        for (caller, reason) in &p.routes {
            m.route(caller, reason);
        }
        for (pattern, reason) in &p.source_routes {
            let slot = m.reasons.slot(reason);
            m.by_source.push((pattern.clone(), slot));
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
        (m, callers, rules)
    }

    /// Routes calls from `caller` (a function name, clones folded) to `reason`.
    pub fn route(&mut self, caller: &str, reason: &str) -> u32 {
        let slot = self.reasons.slot(reason);
        self.by_caller.insert(caller.to_string(), slot);
        slot
    }

    /// Caller functions whose calls count as `slot` (without deeper
    /// rules): those routed to it or, for a reason of auto mode, the
    /// function it is named after.
    pub fn callers_of(&self, slot: u32) -> Vec<&str> {
        let mut v: Vec<&str> = self
            .by_caller
            .iter()
            .filter(|(_, &s)| s == slot)
            .map(|(c, _)| c.as_str())
            .collect();
        if v.is_empty() && !Reasons::is_special(slot) {
            v.push(self.reasons.name(slot));
        }
        v.sort_unstable();
        v
    }

    /// True if some routes can only be matched through debug info.
    pub fn needs_source(&self) -> bool {
        !self.by_source.is_empty()
    }

    /// The slot of the first source pattern the location matches.
    fn source_slot(&self, loc: &SourceLoc) -> Option<u32> {
        self.by_source.iter().find_map(|(pattern, slot)| {
            let hit = match pattern.strip_prefix(FILE_PREFIX) {
                Some(path) => loc.files.iter().any(|f| f.ends_with(path)),
                None => loc.functions.iter().any(|f| base_name(f) == pattern),
            };
            hit.then_some(*slot)
        })
    }

    /// The slot for a caller's return address. `src` places it in the
    /// source (inlined callers, files) where the profile asks for that.
    pub fn classify(
        &mut self,
        ksyms: &Kallsyms,
        ret: u64,
        src: Option<&mut (dyn SourceLookup + '_)>,
    ) -> u32 {
        if let Some(src) = src.filter(|_| self.needs_source()) {
            // -1: the call instruction, not what follows it.
            if let Some(slot) = src.source(ret - 1).and_then(|l| self.source_slot(&l)) {
                return slot;
            }
        }
        let caller = caller_name(ksyms, ret);
        match self.by_caller.get(caller) {
            Some(&slot) => slot,
            None => self.reasons.slot(caller),
        }
    }
}

/// The name of the caller function a return address lies in, clone
/// suffixes folded.
pub fn caller_name(ksyms: &Kallsyms, ret: u64) -> &str {
    ksyms
        .caller_of(ret)
        .map_or(UNKNOWN_NAME, |s| base_name(&s.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_stable_and_special_slots_reserved() {
        let mut r = Reasons::new(64);
        assert_eq!(r.name(SLOT_NOT_FOUND), NOT_FOUND_NAME);
        assert_eq!(r.name(SLOT_SITES_FULL), SITES_FULL_NAME);
        let a = r.slot("a");
        let b = r.slot("b");
        assert_eq!((a, b), (2, 3));
        assert_eq!(r.slot("a"), a);
        assert_eq!(r.lookup("b"), Some(b));
        assert_eq!(r.reason_names().collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn past_the_limit_callers_merge_into_other() {
        let mut r = Reasons::new(2);
        let a = r.slot("a");
        let b = r.slot("b");
        let c = r.slot("c");
        let d = r.slot("d");
        assert_ne!(a, b);
        assert_eq!(c, d);
        assert_eq!(r.name(c), OTHER_NAME);
        assert_eq!(r.merged().iter().collect::<Vec<_>>(), ["c", "d"]);
        // A known reason keeps its slot after the table filled.
        assert_eq!(r.slot("a"), a);
        assert_eq!(r.slots_used(), 5);
    }

    #[test]
    fn the_limit_is_capped_by_the_slot_array() {
        let mut r = Reasons::new(10_000);
        for i in 0..MAX_REASONS {
            r.slot(&format!("f{i}"));
        }
        let other = r.slot("one_too_many");
        assert_eq!(r.name(other), OTHER_NAME);
        assert_eq!(other as usize, NR_SLOTS - 1);
    }

    #[test]
    fn routed_callers_share_a_reason_and_others_get_their_own() {
        let k = Kallsyms::parse(
            "ffffffff81000000 t zap_pte_range\nffffffff81001000 T folio_remove_rmap_ptes\nffffffff81002000 T other_caller\nffffffff81003000 T end\n",
        );
        let mut m = Mapper::auto(64);
        let zap = m.route("zap_pte_range", "ZAP");
        assert_eq!(m.route("folio_remove_rmap_ptes", "ZAP"), zap);
        assert_eq!(m.classify(&k, 0xffffffff81000100, None), zap);
        assert_eq!(m.classify(&k, 0xffffffff81001100, None), zap);
        let other = m.classify(&k, 0xffffffff81002100, None);
        assert_ne!(other, zap);
        assert_eq!(m.reasons.name(other), "other_caller");
        assert_eq!(
            m.callers_of(zap),
            ["folio_remove_rmap_ptes", "zap_pte_range"]
        );
        assert_eq!(m.callers_of(other), ["other_caller"]);
    }

    #[test]
    fn a_resolved_profile_becomes_slots_routes_and_deep_tables() {
        use crate::profile::{DeepCallerSpec, RuleSpec};
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
        let (m, callers, rules) = Mapper::from_profile(&p, 64);
        let slot = |n| m.reasons.lookup(n).unwrap();
        assert_eq!((slot("FAULT"), slot("KHUGEPAGED"), slot("MADV")), (2, 3, 4));
        assert_eq!(m.by_caller["do_fault"], 2);
        assert_eq!(m.by_source, [("file:mm/rmap.c".to_string(), 2)]);
        // No default reason: unmatched calls count under the caller's name.
        let own = slot("collapse");
        assert_eq!(
            callers,
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
            rules
                .iter()
                .map(|r| (r.lo, r.reason, r.depth))
                .collect::<Vec<_>>(),
            [(0x300, 3, 8), (0x500, 3, 8), (0x700, 4, 4)]
        );
    }

    #[test]
    fn source_patterns_match_inlined_functions_and_files_first() {
        struct Fake;
        impl SourceLookup for Fake {
            fn source(&mut self, addr: u64) -> Option<SourceLoc> {
                (addr == 0xffffffff81000fff).then(|| SourceLoc {
                    functions: vec!["zap_pte_range".into(), "unmap_page_range.cold".into()],
                    files: vec!["/build/linux/mm/memory.c".into()],
                })
            }
        }
        let k = Kallsyms::parse("ffffffff81000000 t unmap_page_range\nffffffff81002000 T end\n");
        let mut m = Mapper::auto(64);
        let zap = m.reasons.slot("ZAP");
        let mem = m.reasons.slot("MEMORY");
        m.by_source = vec![
            ("zap_pte_range".into(), zap),
            ("file:mm/memory.c".into(), mem),
        ];
        // The inlined function, though the symbol is unmap_page_range.
        assert_eq!(m.classify(&k, 0xffffffff81001000, Some(&mut Fake)), zap);
        // Another address: no source location, so the caller's own name.
        let own = m.classify(&k, 0xffffffff81000100, Some(&mut Fake));
        assert_eq!(m.reasons.name(own), "unmap_page_range");
        // Without debug info the pattern cannot match.
        let own2 = m.classify(&k, 0xffffffff81001000, None);
        assert_eq!(own2, own);
        // A file pattern, when no function pattern comes first.
        m.by_source.remove(0);
        assert_eq!(m.classify(&k, 0xffffffff81001000, Some(&mut Fake)), mem);
    }

    #[test]
    fn caller_names_fold_clones() {
        let k = Kallsyms::parse(
            "ffffffff81000000 t collapse_huge_page.isra.0\nffffffff81001000 T next\n",
        );
        assert_eq!(caller_name(&k, 0xffffffff81000010), "collapse_huge_page");
        assert_eq!(caller_name(&k, 0x1000), UNKNOWN_NAME);
    }
}
