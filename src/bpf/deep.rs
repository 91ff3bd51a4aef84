//! The deeper-frame rules: caller ranges whose reason depends on the
//! frames above the caller, as written into td_deep, and user space's copy
//! of deep_reason() in deep.bpf.h for the calls counted before the
//! tables were ready.

use crate::bpf::abi::{MAX_DEEP_CALLERS, MAX_DEEP_RULES, MAX_RULE_DEPTH, NO_FRAMES};
use crate::bpf::percpu::Pending;
use crate::bpf::skel::types;

/// A caller function range whose reason depends on deeper frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeepCaller {
    pub(crate) lo: u64,
    pub(crate) hi: u64,
    pub(crate) rule_first: u32,
    pub(crate) rule_count: u32,
    /// Slot when no rule matches.
    pub(crate) reason: u32,
}

/// "A frame in [lo, hi) within `depth` frames above the caller means `reason`."
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeepRule {
    pub(crate) lo: u64,
    pub(crate) hi: u64,
    pub(crate) reason: u32,
    pub(crate) depth: u32,
}

/// Whether return address `ret` lies in the function at [lo, hi): -1, as a
/// call can be a function's last instruction.
pub(crate) fn returns_into(lo: u64, hi: u64, ret: u64) -> bool {
    (lo..hi).contains(&ret.wrapping_sub(1))
}

/// The deeper-frame rules: caller ranges, each with its slice of `rules`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Deep {
    pub(crate) callers: Vec<DeepCaller>,
    pub(crate) rules: Vec<DeepRule>,
}

impl Deep {
    /// The deepest frame a rule looks at (see `abi::tables_depth`).
    #[cfg(test)]
    pub(crate) fn depth(&self) -> u32 {
        crate::bpf::abi::tables_depth(&self.tables())
    }

    /// The tables as td_deep holds them, clamped to its size (profile
    /// resolution has already refused more); `ready` is clear.
    pub(crate) fn tables(&self) -> types::td_deep {
        let mut dst = types::td_deep::default();
        self.write(&mut dst);
        dst
    }

    fn write(&self, dst: &mut types::td_deep) {
        dst.nr_callers = self.callers.len().min(MAX_DEEP_CALLERS) as u32;
        for (d, c) in dst.callers.iter_mut().zip(&self.callers) {
            d.lo = c.lo;
            d.hi = c.hi;
            d.rule_first = c.rule_first;
            d.rule_count = c.rule_count;
            d.reason = c.reason;
        }
        for (d, r) in dst.rules.iter_mut().zip(&self.rules) {
            d.lo = r.lo;
            d.hi = r.hi;
            d.reason = r.reason;
            d.depth = r.depth.min(MAX_RULE_DEPTH);
        }
    }

    /// The slot of a call from `ret` with `frames` above its caller
    /// (nearest first), as deep_reason() in deep.bpf.h decides it: the
    /// first rule with a frame in its range within its depth, else the
    /// caller's own, also where the first frame is NO_FRAMES (no unwind);
    /// None where `ret` is in no deeper-frame caller. For the calls counted
    /// before the tables were ready.
    pub(crate) fn slot(&self, ret: u64, frames: &[u64]) -> Option<u32> {
        let c = self.caller(ret)?;
        // The unwind found no caller: deep_reason() falls back to the caller's own.
        if frames.first() == Some(&NO_FRAMES) {
            return Some(c.reason);
        }
        let first = c.rule_first as usize;
        let rules = self.rules.iter().take(MAX_DEEP_RULES);
        for r in rules.skip(first).take(c.rule_count as usize) {
            let depth = r.depth.min(MAX_RULE_DEPTH) as usize;
            // A zero frame ends the stack.
            let mut above = frames.iter().take(depth).take_while(|&&ip| ip != 0);
            if above.any(|&ip| returns_into(r.lo, r.hi, ip)) {
                return Some(r.reason);
            }
        }
        Some(c.reason)
    }

    /// The deeper-frame caller `ret` returns into, as deep_caller() in
    /// deep.bpf.h finds it.
    fn caller(&self, ret: u64) -> Option<&DeepCaller> {
        self.callers
            .iter()
            .take(MAX_DEEP_CALLERS)
            .find(|c| returns_into(c.lo, c.hi, ret))
    }

    /// The calls in the early table from a deeper-frame caller whose
    /// unwind found no caller. `slot` gives them the caller's own reason,
    /// as deep_reason() does after the tables are ready, where it counts
    /// them as deep unwind failures: so are these.
    pub(crate) fn unwind_failures(&self, early: &Pending) -> u64 {
        early
            .entries()
            .filter(|(key, _)| key.get(1) == Some(&NO_FRAMES) && self.caller(key[0]).is_some())
            .map(|(_, n)| n)
            .sum()
    }
}

/// Test set-ups of the deeper-frame rules.
#[cfg(test)]
impl Deep {
    /// One caller at [lo, hi) of slot `reason`, with one rule: a frame in
    /// `rule` within `depth` frames above it means slot `rule_reason`.
    pub(crate) fn one_rule(
        (lo, hi): (u64, u64),
        reason: u32,
        rule: (u64, u64),
        rule_reason: u32,
        depth: u32,
    ) -> Deep {
        Deep {
            callers: vec![DeepCaller {
                lo,
                hi,
                rule_first: 0,
                rule_count: 1,
                reason,
            }],
            rules: vec![DeepRule {
                lo: rule.0,
                hi: rule.1,
                reason: rule_reason,
                depth,
            }],
        }
    }

    /// One caller more than td_deep holds, and a rule deeper than it walks.
    pub(crate) fn oversized() -> Deep {
        let caller = DeepCaller {
            lo: 1,
            hi: 2,
            rule_first: 0,
            rule_count: 1,
            reason: 3,
        };
        let rule = DeepRule {
            lo: 4,
            hi: 5,
            reason: 6,
            depth: 99,
        };
        Deep {
            callers: vec![caller; MAX_DEEP_CALLERS + 1],
            rules: vec![rule],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::percpu::EARLY_KEY_WORDS;

    #[test]
    fn failed_unwinds_before_the_rules_count_for_deeper_frame_callers_only() {
        let deep = Deep::one_rule(
            (0xffffffff81000000, 0xffffffff81001000),
            9,
            (0, u64::MAX),
            10,
            1,
        );
        let mut early = Pending::default();
        early.clear(1, EARLY_KEY_WORDS);
        for (ret, first, n) in [
            (0xffffffff81000010, NO_FRAMES, 3), // a deeper-frame caller, failed
            (0xffffffff81000010, 0xffffffff82000000, 4), // the same, with frames
            (0xffffffff81002010, NO_FRAMES, 5), // another caller, failed
        ] {
            let (k, v) = early.spare(1);
            k.fill(0);
            k[0] = ret;
            k[1] = first;
            v[0] = n;
            early.filled(1);
        }
        assert_eq!(deep.unwind_failures(&early), 3);
        // They take the caller's own reason, even from a rule that covers
        // every address.
        assert_eq!(deep.slot(0xffffffff81000010, &[NO_FRAMES]), Some(9));
        assert_eq!(
            deep.slot(0xffffffff81000010, &[0xffffffff82000000]),
            Some(10)
        );
    }

    #[test]
    fn tables_are_clamped_to_what_td_deep_holds() {
        let deep = Deep::oversized();
        let tables = deep.tables();
        assert_eq!(tables.nr_callers as usize, MAX_DEEP_CALLERS);
        assert_eq!(tables.rules[0].depth, MAX_RULE_DEPTH);
        assert_eq!(tables.callers[0].reason, 3);
        assert_eq!(tables.ready, 0);
        assert_eq!(deep.depth(), MAX_RULE_DEPTH);
    }
}
