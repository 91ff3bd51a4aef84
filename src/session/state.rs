//! The session's state between polls, as plain functions over polled
//! counts: each print interval's figures, when stack capture moves, and
//! the summary at the end. No kernel, no I/O: the loop in `session` feeds
//! it, and the tests feed it synthetic counts.

use std::collections::HashMap;

use crate::bpf::abi::{Stat, Stats, NR_SLOTS, SLOT_NOT_FOUND, SLOT_SITES_FULL};
use crate::bpf::probe::ProgStats;
use crate::reasons::Reasons;
use crate::report::{Cost, Drops, IntervalReport, Phase, ReasonStacks, Stack, Summary, Verify};
use crate::session::capture::Tally;
use crate::session::rates::Interval;
use crate::session::trigger::{Switch, Trigger};

/// A change of the captured reason, with the share that caused it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Move {
    pub(crate) switch: Switch,
    pub(crate) share: f64,
}

/// What one print interval produced.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tick {
    pub(crate) report: IntervalReport,
    pub(crate) moved: Option<Move>,
}

/// How the run ended, as read from the kernel side after detaching.
#[derive(Debug, Clone)]
pub(crate) struct End<'a> {
    pub(crate) func: &'a str,
    pub(crate) mode: &'static str,
    /// Cumulative per-slot totals.
    pub(crate) totals: &'a [u64],
    pub(crate) secs: f64,
    pub(crate) stats: Stats,
    pub(crate) prog: ProgStats,
    pub(crate) companion: Option<(&'static str, ProgStats)>,
    pub(crate) verify_caller: bool,
}

#[derive(Debug)]
pub(crate) struct State {
    trigger: Trigger,
    prev: Vec<u64>,
    tallies: HashMap<u32, Tally>,
    /// Reasons in the order capture reached them.
    order: Vec<u32>,
}

fn cost(p: ProgStats) -> Cost {
    Cost {
        run_cnt: p.run_cnt,
        run_time_ns: p.run_time_ns,
        recursion_misses: p.recursion_misses,
    }
}

impl State {
    pub(crate) fn new(trigger: Trigger) -> Self {
        State {
            trigger,
            prev: vec![0; NR_SLOTS],
            tallies: HashMap::new(),
            order: Vec::new(),
        }
    }

    pub(crate) fn threshold(&self) -> f64 {
        self.trigger.threshold()
    }

    /// The reason being captured, if any.
    pub(crate) fn target(&self) -> Option<u32> {
        self.trigger.target()
    }

    /// Capture of `slot` has started (by --stack-on or a move).
    pub(crate) fn capturing(&mut self, slot: u32) {
        if !self.order.contains(&slot) {
            self.order.push(slot);
        }
    }

    pub(crate) fn add_stack(&mut self, reason: u32, stack: Stack) {
        self.tallies.entry(reason).or_default().add(stack);
    }

    /// An interval of `secs` ended with cumulative per-slot `totals`.
    pub(crate) fn tick(
        &mut self,
        totals: Vec<u64>,
        secs: f64,
        reasons: &Reasons,
        unix_time: f64,
        clock: String,
    ) -> Tick {
        let iv = Interval::between(&self.prev, &totals, secs);
        self.prev = totals;
        let stacks = self.target().map(|t| {
            let (captured, stacks) = self.tallies.entry(t).or_default().end_interval();
            ReasonStacks {
                reason: reasons.name(t).to_string(),
                captured,
                stacks,
            }
        });
        let moved = self.trigger.observe(&iv).map(|switch| {
            let slot = match switch {
                Switch::Start(to) | Switch::Move { to, .. } => to,
            };
            let share = iv
                .rows
                .iter()
                .find(|r| r.slot == slot)
                .map_or(0.0, |r| r.share);
            Move { switch, share }
        });
        Tick {
            report: IntervalReport {
                unix_time,
                clock,
                calls: iv.named(reasons),
                stacks,
            },
            moved,
        }
    }

    /// The summary of the whole run.
    pub(crate) fn finish(&self, end: &End<'_>, reasons: &Reasons) -> Summary {
        let run = Interval::between(&[], end.totals, end.secs);
        let slot = |s: u32| end.totals.get(s as usize).copied().unwrap_or(0);
        let st = &end.stats;
        // Every reason captured, the current one last.
        let mut order = self.order.clone();
        if let Some(t) = self.target() {
            order.retain(|&s| s != t);
            order.push(t);
        }
        let empty = Tally::default();
        let stacks = order
            .iter()
            .map(|&s| {
                let (captured, stacks) = self.tallies.get(&s).unwrap_or(&empty).run();
                ReasonStacks {
                    reason: reasons.name(s).to_string(),
                    captured,
                    stacks,
                }
            })
            .collect();
        Summary {
            func: end.func.to_string(),
            mode: end.mode,
            phase: if self.target().is_some() {
                Phase::StackCapture
            } else {
                Phase::Counting
            },
            calls: run.named(reasons),
            other_merges: reasons.merged().iter().cloned().collect(),
            drops: Drops {
                caller_not_found: slot(SLOT_NOT_FOUND),
                sites_full: slot(SLOT_SITES_FULL),
                recursion_misses: end.prog.recursion_misses,
                deep_unwind_failed: st.get(Stat::TD_STAT_DEEP_UNWIND_FAILED),
                stacks_sampled_out: st.get(Stat::TD_STAT_STACK_SAMPLED_OUT),
                stacks_rate_capped: st.get(Stat::TD_STAT_STACK_RATE_CAPPED),
                stacks_ringbuf_full: st.get(Stat::TD_STAT_STACK_RINGBUF_FULL),
                own_calls: st.get(Stat::TD_STAT_OWN_CALLS),
            },
            stacks,
            stacks_matched: st.get(Stat::TD_STAT_STACK_MATCHED),
            stacks_sent: st.get(Stat::TD_STAT_STACK_EMITTED),
            verify: end.verify_caller.then(|| Verify {
                checked: st.get(Stat::TD_STAT_VERIFY_CHECKED),
                mismatches: st.get(Stat::TD_STAT_VERIFY_MISMATCH),
                unwind_failed: st.get(Stat::TD_STAT_VERIFY_UNWIND_FAILED),
            }),
            cost: cost(end.prog),
            companion: end.companion.map(|(k, p)| (k, cost(p))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reasons() -> Reasons {
        let mut r = Reasons::new(8);
        r.slot("FAULT");
        r.slot("ZAP");
        r
    }

    /// Cumulative totals with FAULT (slot 2) and ZAP (slot 3).
    fn totals(not_found: u64, fault: u64, zap: u64) -> Vec<u64> {
        let mut t = vec![0; NR_SLOTS];
        t[0] = not_found;
        t[2] = fault;
        t[3] = zap;
        t
    }

    fn stack(f: &str) -> Stack {
        Stack {
            kernel: vec![f.into()],
            user: vec![],
        }
    }

    fn end<'a>(t: &'a [u64], stats: Stats) -> End<'a> {
        End {
            func: "deferred_split_folio",
            mode: "fentry",
            totals: t,
            secs: 3.0,
            stats,
            prog: ProgStats {
                recursion_misses: 2,
                ..ProgStats::default()
            },
            companion: None,
            verify_caller: false,
        }
    }

    #[test]
    fn intervals_are_deltas_and_a_hot_reason_starts_capture() {
        let r = reasons();
        let mut s = State::new(Trigger::new(80.0, 10, true, None));
        let t = s.tick(totals(0, 50, 50), 1.0, &r, 0.0, "c".into());
        assert_eq!(t.report.calls.total, 100);
        assert_eq!(t.moved, None);
        assert_eq!(t.report.stacks, None);
        let t = s.tick(totals(0, 55, 145), 1.0, &r, 0.0, "c".into());
        assert_eq!(t.report.calls.total, 100);
        assert_eq!(t.report.calls.rows[0].reason, "ZAP");
        assert_eq!(
            t.moved,
            Some(Move {
                switch: Switch::Start(3),
                share: 95.0
            })
        );
        s.capturing(3);
        s.add_stack(3, stack("zap"));
        s.add_stack(3, stack("zap"));
        let t = s.tick(totals(0, 55, 150), 1.0, &r, 0.0, "c".into());
        let st = t.report.stacks.unwrap();
        assert_eq!((st.reason.as_str(), st.captured), ("ZAP", 2));
        // The next interval starts with no stacks.
        let t = s.tick(totals(0, 55, 150), 1.0, &r, 0.0, "c".into());
        assert_eq!(t.report.stacks.unwrap().captured, 0);
    }

    #[test]
    fn the_summary_names_drops_phase_and_every_captured_reason_in_order() {
        let r = reasons();
        let mut s = State::new(Trigger::new(80.0, 1, true, None));
        s.tick(totals(0, 100, 0), 1.0, &r, 0.0, "c".into());
        s.capturing(2);
        s.add_stack(2, stack("fault"));
        let t = s.tick(totals(0, 100, 100), 1.0, &r, 0.0, "c".into());
        assert!(t.moved.is_some());
        s.capturing(3);
        s.add_stack(3, stack("zap"));
        let t = totals(4, 100, 100);
        let stats = Stats::with(&[
            (Stat::TD_STAT_OWN_CALLS, 5),
            (Stat::TD_STAT_STACK_RATE_CAPPED, 6),
            (Stat::TD_STAT_STACK_MATCHED, 9),
            (Stat::TD_STAT_STACK_EMITTED, 2),
        ]);
        let sum = s.finish(&end(&t, stats), &r);
        assert_eq!(sum.phase, Phase::StackCapture);
        assert_eq!(sum.calls.total, 204);
        assert_eq!(sum.drops.caller_not_found, 4);
        assert_eq!(sum.drops.own_calls, 5);
        assert_eq!(sum.drops.stacks_rate_capped, 6);
        assert_eq!(sum.drops.recursion_misses, 2);
        assert_eq!((sum.stacks_matched, sum.stacks_sent), (9, 2));
        let order: Vec<&str> = sum.stacks.iter().map(|s| s.reason.as_str()).collect();
        assert_eq!(order, ["FAULT", "ZAP"]);
        assert_eq!(sum.verify, None);
        assert_eq!(sum.hot().unwrap().reason, "FAULT");
    }

    #[test]
    fn a_counting_run_has_no_stacks_and_verify_when_asked() {
        let r = reasons();
        let s = State::new(Trigger::new(80.0, 1, false, None));
        let t = totals(0, 1, 0);
        let mut e = end(&t, Stats::with(&[(Stat::TD_STAT_VERIFY_CHECKED, 1)]));
        e.verify_caller = true;
        let sum = s.finish(&e, &r);
        assert_eq!(sum.phase, Phase::Counting);
        assert!(sum.stacks.is_empty());
        assert_eq!(sum.verify.unwrap().checked, 1);
    }
}
