//! The background sampler's stacks, kept per reason until the reason
//! qualifies (the trigger's rule, whatever capture is doing), then shown
//! under it: so a burst that is over before the trigger looks still has
//! the stacks of its first calls. Plain data: no kernel, no symbols.

use std::collections::{HashMap, VecDeque};

use crate::bpf::abi::SLOT_NONE;
use crate::bpf::sample::Sample;

/// Stacks kept per reason: a burst's first calls on a few CPUs (the BPF
/// side's bucket holds 16 a CPU by default); older ones make way.
const KEEP: usize = 64;

/// How old a kept stack may be when its reason qualifies: the trigger's
/// window, plus the dwell that may keep capture on another reason, plus a
/// tick's slack.
pub(super) const KEEP_NS: u64 = 2_100_000_000;

/// Samples of sites not resolved yet, until a poll resolves them.
const UNRESOLVED: usize = 1024;

#[derive(Debug, Default)]
pub(super) struct Kept {
    by_reason: HashMap<u32, VecDeque<Sample>>,
    /// Samples whose site was not resolved when they came (SLOT_NONE).
    unresolved: VecDeque<Sample>,
    /// Samples whose site was never resolved in time, or that came when
    /// the unresolved list was full: not kept.
    pub(super) lost: u64,
}

impl Kept {
    /// Keeps a background sample.
    pub(super) fn keep(&mut self, s: Sample) {
        if s.reason == SLOT_NONE {
            if self.unresolved.len() >= UNRESOLVED {
                self.lost += 1;
                return;
            }
            self.unresolved.push_back(s);
            return;
        }
        let q = self.by_reason.entry(s.reason).or_default();
        if q.len() >= KEEP {
            q.pop_front();
        }
        q.push_back(s);
    }

    /// Files the samples of sites resolved since they came (`slot_of`: the
    /// slot of a return address, if resolved); drops those older than
    /// KEEP_NS at `now_ns`, which no poll resolved.
    pub(super) fn resolve(&mut self, now_ns: u64, mut slot_of: impl FnMut(u64) -> Option<u32>) {
        let waiting = std::mem::take(&mut self.unresolved);
        for mut s in waiting {
            match slot_of(s.caller) {
                Some(slot) => {
                    s.reason = slot;
                    self.keep(s);
                }
                None if now_ns.saturating_sub(s.ts) > KEEP_NS => self.lost += 1,
                None => self.unresolved.push_back(s),
            }
        }
    }

    /// Takes the kept samples of `reason` taken at `since_ns` or later;
    /// older ones are let go.
    pub(super) fn take(&mut self, reason: u32, since_ns: u64) -> Vec<Sample> {
        self.by_reason
            .remove(&reason)
            .map(|q| q.into_iter().filter(|s| s.ts >= since_ns).collect())
            .unwrap_or_default()
    }

    /// Lets go of samples older than KEEP_NS at `now_ns`.
    pub(super) fn expire(&mut self, now_ns: u64) {
        let cut = now_ns.saturating_sub(KEEP_NS);
        self.by_reason.retain(|_, q| {
            while q.front().is_some_and(|s| s.ts < cut) {
                q.pop_front();
            }
            !q.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(reason: u32, ts: u64, caller: u64) -> Sample {
        Sample {
            ts,
            reason,
            background: true,
            pid: 1,
            tid: 1,
            cpu: 0,
            comm: "thp".into(),
            caller,
            kstack: vec![caller],
            ustack: vec![],
        }
    }

    #[test]
    fn kept_stacks_are_taken_per_reason_and_recent_only() {
        let mut k = Kept::default();
        k.keep(sample(3, 100, 0xa));
        k.keep(sample(3, 200, 0xa));
        k.keep(sample(4, 200, 0xb));
        assert_eq!(k.take(3, 150).len(), 1);
        // Taken once: a second qualifying tick shows nothing twice.
        assert!(k.take(3, 0).is_empty());
        assert_eq!(k.take(4, 0).len(), 1);
    }

    #[test]
    fn a_reason_keeps_its_newest() {
        let mut k = Kept::default();
        for ts in 0..(KEEP as u64 + 10) {
            k.keep(sample(3, ts, 0xa));
        }
        let got = k.take(3, 0);
        assert_eq!(got.len(), KEEP);
        assert_eq!(got[0].ts, 10);
    }

    #[test]
    fn samples_of_unresolved_sites_are_filed_once_resolved_or_lost() {
        let mut k = Kept::default();
        k.keep(sample(SLOT_NONE, 1_000, 0xa));
        k.keep(sample(SLOT_NONE, 1_000, 0xb));
        k.resolve(2_000, |ret| (ret == 0xa).then_some(5));
        assert_eq!(k.take(5, 0).len(), 1);
        assert_eq!(k.lost, 0);
        // 0xb is never resolved: dropped once too old, and counted.
        k.resolve(1_000 + KEEP_NS + 1, |_| None);
        assert_eq!(k.lost, 1);
        k.resolve(u64::MAX, |_| Some(6));
        assert!(k.take(6, 0).is_empty());
    }

    #[test]
    fn old_stacks_expire() {
        let mut k = Kept::default();
        k.keep(sample(3, 1, 0xa));
        k.keep(sample(3, KEEP_NS + 5, 0xa));
        k.expire(KEEP_NS + 3);
        assert_eq!(k.take(3, 0).len(), 1);
    }
}
