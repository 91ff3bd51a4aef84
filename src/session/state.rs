//! The session's state between polls, as plain functions over polled
//! counts: each print interval's figures, when stack capture moves, and
//! the summary at the end. No kernel, no I/O: the loop in `session` feeds
//! it, and the tests feed it synthetic counts.

use std::collections::HashMap;

use crate::bpf::abi::{StackStat, Stat, NR_SLOTS, NR_STACK_STATS, SLOT_NOT_FOUND, SLOT_SITES_FULL};
use crate::bpf::percpu::Stats;
use crate::bpf::probe::Mode;
use crate::bpf::probe::ProgStats;
use crate::reasons::Reasons;
use crate::report::RunInfo;
use crate::report::{
    CaptureSpan, Cost, Drops, FilterInfo, Gate, IntervalReport, Phase, Process, ReasonGate,
    ReasonStacks, Stack, Summary, Verify, UNRESOLVED,
};
use crate::session::capture::Tally;
use crate::session::rates::Interval;
use crate::session::trigger::{Change, Trigger};

/// How the run ended, as read from the kernel side after detaching.
#[derive(Debug, Clone)]
pub(crate) struct End<'a> {
    pub(crate) func: &'a str,
    /// A tracepoint's category; None: a function.
    pub(crate) tracepoint: Option<&'a str>,
    pub(crate) mode: Mode,
    /// Cumulative per-slot totals.
    pub(crate) totals: &'a [u64],
    /// When counting started (Unix seconds), and for how long it went on.
    pub(crate) start: f64,
    pub(crate) secs: f64,
    pub(crate) stats: Stats,
    pub(crate) prog: ProgStats,
    pub(crate) companion: Option<(&'static str, ProgStats)>,
    pub(crate) verify_caller: bool,
    /// Call sites judged by the instruction before them.
    pub(crate) tail_sites: crate::tailcall::Sites,
    pub(crate) info: &'a RunInfo,
    pub(crate) filter: Option<FilterInfo>,
    /// Each reason's stack path counters since the start, by slot (index
    /// NR_SLOTS: a uprobe's untagged calls), each indexed by StackStat.
    pub(crate) gates: &'a [[u64; NR_STACK_STATS]],
    /// Of a uprobe's untagged stacks, those shown, by the reason they were
    /// found to be.
    pub(crate) untagged_shown: &'a HashMap<u32, u64>,
}

/// Each reason's stack path counters `now` less those at the start.
pub(crate) fn since_gates(
    now: &[[u64; NR_STACK_STATS]],
    base: &[[u64; NR_STACK_STATS]],
) -> Vec<[u64; NR_STACK_STATS]> {
    now.iter()
        .enumerate()
        .map(|(i, row)| {
            let b = base.get(i).copied().unwrap_or([0; NR_STACK_STATS]);
            std::array::from_fn(|k| row[k].wrapping_sub(b[k]))
        })
        .collect()
}

/// The gate counts of row `g` whose stacks shown are `shown`.
pub(super) fn gate(g: &[u64; NR_STACK_STATS], shown: u64) -> Gate {
    let at = |s: StackStat| g[s.0 as usize];
    Gate {
        calls: at(StackStat::TD_STACK_MATCHED),
        shown,
        sampled_out: at(StackStat::TD_STACK_SAMPLED_OUT),
        rate_capped: at(StackStat::TD_STACK_RATE_CAPPED),
        ringbuf_full: at(StackStat::TD_STACK_RINGBUF_FULL),
        not_kept: at(StackStat::TD_STACK_EMITTED).saturating_sub(shown),
        unseen: 0,
        unnamed: 0,
    }
}

/// A stretch of capture of one reason.
#[derive(Debug, Clone)]
struct Span {
    slot: u32,
    start: f64,
    start_ns: u64,
    /// The reason's cumulative count when capture started, and when it
    /// ended (with the time).
    start_count: u64,
    end: Option<(f64, u64)>,
    stacks: u64,
    first_stack_ns: Option<u64>,
}

#[derive(Debug)]
pub(crate) struct State {
    trigger: Trigger,
    /// Cumulative totals when the run started (a pinned instance has
    /// counted before), and at the last printed interval.
    base: Vec<u64>,
    prev: Vec<u64>,
    /// The drop counters at the last printed interval.
    prev_stats: Stats,
    prev_prog: ProgStats,
    tallies: HashMap<u32, Tally>,
    spans: Vec<Span>,
}

fn cost(p: ProgStats) -> Cost {
    Cost {
        run_cnt: p.run_cnt,
        run_time_ns: p.run_time_ns,
        recursion_misses: p.recursion_misses,
    }
}

/// The drops of a span: the calls counted without a reason, then what the
/// kernel side's statistics and run statistics say.
pub(crate) fn drops(not_found: u64, sites_full: u64, st: &Stats, prog: &ProgStats) -> Drops {
    Drops {
        caller_not_found: not_found,
        sites_full,
        recursion_misses: prog.recursion_misses,
        deep_unwind_failed: st.get(Stat::TD_STAT_DEEP_UNWIND_FAILED),
        stacks_sampled_out: st.stack(StackStat::TD_STACK_SAMPLED_OUT),
        stacks_rate_capped: st.stack(StackStat::TD_STACK_RATE_CAPPED),
        stacks_ringbuf_full: st.stack(StackStat::TD_STACK_RINGBUF_FULL),
        stacks_background_lost: st.stack(StackStat::TD_STACK_BG_LOST),
        own_calls: st.get(Stat::TD_STAT_OWN_CALLS),
    }
}

fn count_of(totals: &[u64], slot: u32) -> u64 {
    totals.get(slot as usize).copied().unwrap_or(0)
}

impl State {
    /// A run whose counters read `base` at its start (and its drop
    /// counters `stats` and `prog`).
    pub(crate) fn new(mut trigger: Trigger, base: Vec<u64>, stats: Stats, prog: ProgStats) -> Self {
        trigger.start_from(&base);
        State {
            trigger,
            prev: base.clone(),
            base,
            prev_stats: stats,
            prev_prog: prog,
            tallies: HashMap::new(),
            spans: Vec::new(),
        }
    }

    pub(crate) fn threshold(&self) -> f64 {
        self.trigger.threshold()
    }

    /// The reasons being captured, oldest first.
    pub(crate) fn targets(&self) -> Vec<u32> {
        self.trigger.targets()
    }

    /// Whether any reason is being captured.
    pub(crate) fn capturing(&self) -> bool {
        self.trigger.capturing()
    }

    /// The reasons that burst on the last tick (see Trigger::bursting).
    pub(crate) fn bursting(&self) -> &[u32] {
        self.trigger.bursting()
    }

    /// Whether `tick` needs the counters on every tick.
    pub(crate) fn auto(&self) -> bool {
        self.trigger.auto()
    }

    /// Capture of `slot` starts at `now` (seconds since start; `mono_ns` on
    /// the kernel's clock) with cumulative `totals`.
    pub(crate) fn start_span(&mut self, slot: u32, now: f64, mono_ns: u64, totals: &[u64]) {
        self.spans.push(Span {
            slot,
            start: now,
            start_ns: mono_ns,
            start_count: count_of(totals, slot),
            end: None,
            stacks: 0,
            first_stack_ns: None,
        });
    }

    /// Capture of `slot` ends at `now` with cumulative `totals`.
    fn end_span(&mut self, slot: u32, now: f64, totals: &[u64]) {
        let open = self
            .spans
            .iter_mut()
            .rev()
            .find(|s| s.slot == slot && s.end.is_none());
        if let Some(open) = open {
            open.end = Some((now, count_of(totals, slot)));
        }
    }

    /// A tick at `now` with cumulative `totals`: the changes of capture it
    /// calls for, already recorded.
    pub(crate) fn tick(&mut self, now: f64, mono_ns: u64, totals: &[u64]) -> Vec<Change> {
        let changes = self.trigger.observe(now, totals);
        for c in &changes {
            if c.start {
                self.start_span(c.slot, now, mono_ns, totals);
            } else {
                self.end_span(c.slot, now, totals);
            }
        }
        changes
    }

    /// A stack of `reason`, taken at `ts_ns`; `background`: by the
    /// background sampler, before the reason qualified (not a capture's).
    pub(crate) fn add_stack(
        &mut self,
        reason: u32,
        stack: Stack,
        process: Process,
        ts_ns: u64,
        background: bool,
    ) {
        self.tallies
            .entry(reason)
            .or_default()
            .add(stack, process, background);
        if background {
            return;
        }
        if let Some(span) = self.spans.iter_mut().rev().find(|s| s.slot == reason) {
            span.stacks += 1;
            span.first_stack_ns.get_or_insert(ts_ns);
        }
    }

    /// A print interval of `secs` ended with cumulative per-slot `totals`
    /// and drop counters `counters`.
    pub(crate) fn interval(
        &mut self,
        totals: Vec<u64>,
        counters: (Stats, ProgStats),
        secs: f64,
        reasons: &Reasons,
        time: (f64, String),
    ) -> IntervalReport {
        let (unix_time, clock) = time;
        let iv = Interval::between(&self.prev, &totals, secs);
        let delta = |slot: u32| count_of(&totals, slot).wrapping_sub(count_of(&self.prev, slot));
        let (stats, prog) = counters;
        let drops = drops(
            delta(SLOT_NOT_FOUND),
            delta(SLOT_SITES_FULL),
            &stats.since(&self.prev_stats),
            &prog.since(&self.prev_prog),
        );
        self.prev_stats = stats;
        self.prev_prog = prog;
        self.prev = totals;
        let stacks = self
            .targets()
            .into_iter()
            .map(|t| {
                let tally = self.tallies.entry(t).or_default();
                let background = tally.background.0;
                let (total, stacks, processes) = tally.end_interval();
                ReasonStacks {
                    reason: reasons.name(t).to_string(),
                    captured: total - background,
                    background,
                    stacks,
                    processes,
                }
            })
            .collect();
        IntervalReport {
            drill: Vec::new(),
            unix_time,
            clock,
            calls: iv.named(reasons),
            stacks,
            compare: None,
            drops,
        }
    }

    /// Each reason captured (or whose calls the gate took), in the order
    /// capture first reached it: its calls at the gate and what became of
    /// them; last, a uprobe's untagged calls, if any.
    fn gates(&self, end: &End<'_>, reasons: &Reasons) -> Vec<ReasonGate> {
        let matched = |slot: usize| {
            end.gates
                .get(slot)
                .map_or(0, |g| g[StackStat::TD_STACK_MATCHED.0 as usize])
        };
        let mut order: Vec<u32> = Vec::new();
        for s in &self.spans {
            if !order.contains(&s.slot) {
                order.push(s.slot);
            }
        }
        for slot in 0..NR_SLOTS.min(end.gates.len()) {
            if matched(slot) > 0 && !order.contains(&(slot as u32)) {
                order.push(slot as u32);
            }
        }
        let empty = [0; NR_STACK_STATS];
        let pooled = matched(NR_SLOTS) > 0;
        let mut out: Vec<ReasonGate> = order
            .into_iter()
            .map(|slot| {
                let shown = self.tallies.get(&slot).map_or(0, Tally::run_captured);
                let untagged = end.untagged_shown.get(&slot).copied().unwrap_or(0);
                let g = end.gates.get(slot as usize).unwrap_or(&empty);
                let mut gate = gate(g, shown.saturating_sub(untagged));
                // Its stacks from sites not yet named are its calls too.
                gate.calls += untagged;
                gate.shown += untagged;
                // What its spans counted and the gate did not see: a
                // uprobe's, dropped among unnamed sites' calls; a kernel
                // function's, before its call sites were flagged.
                let counted: u64 = self
                    .spans
                    .iter()
                    .filter(|s| s.slot == slot)
                    .map(|s| self.span_calls(s, end))
                    .sum();
                let missing = counted.saturating_sub(gate.calls);
                if pooled {
                    gate.unnamed = missing;
                } else {
                    gate.unseen = missing;
                }
                gate.calls += missing;
                ReasonGate {
                    reason: reasons.name(slot).to_string(),
                    gate,
                }
            })
            .collect();
        if pooled {
            out.push(ReasonGate {
                reason: UNRESOLVED.to_string(),
                gate: gate(&end.gates[NR_SLOTS], end.untagged_shown.values().sum()),
            });
        }
        out
    }

    /// The calls of span `s`'s reason it counted (until the run's end,
    /// if it has not ended).
    fn span_calls(&self, s: &Span, end: &End<'_>) -> u64 {
        let at_end = s.end.map_or(count_of(end.totals, s.slot), |(_, n)| n);
        at_end.wrapping_sub(s.start_count)
    }

    /// The summary of the whole run.
    pub(crate) fn finish(&self, end: &End<'_>, reasons: &Reasons) -> Summary {
        let run = Interval::between(&self.base, end.totals, end.secs);
        let since = |slot: u32| count_of(end.totals, slot).wrapping_sub(count_of(&self.base, slot));
        let st = &end.stats;
        // Every reason captured, in the order capture first reached it, the
        // current ones last; before them, those with background stacks only
        // (they burst, but were not captured), by slot.
        let mut order: Vec<u32> = self
            .tallies
            .keys()
            .copied()
            .filter(|r| !self.spans.iter().any(|s| s.slot == *r))
            .collect();
        order.sort_unstable();
        for s in &self.spans {
            if !order.contains(&s.slot) {
                order.push(s.slot);
            }
        }
        for t in self.targets() {
            order.retain(|&s| s != t);
            order.push(t);
        }
        let empty = Tally::default();
        let stacks = order
            .iter()
            .map(|&s| {
                let tally = self.tallies.get(&s).unwrap_or(&empty);
                let (_, stacks, processes) = tally.run();
                ReasonStacks {
                    reason: reasons.name(s).to_string(),
                    captured: tally.run_captured(),
                    background: tally.background.1,
                    stacks,
                    processes,
                }
            })
            .collect();
        let gates = self.gates(end, reasons);
        let captures = self
            .spans
            .iter()
            .map(|s| {
                let until = s.end.map_or(end.secs, |(t, _)| t);
                CaptureSpan {
                    reason: reasons.name(s.slot).to_string(),
                    start: s.start,
                    end: until,
                    calls: self.span_calls(s, end),
                    stacks: s.stacks,
                    start_ns: s.start_ns,
                    first_stack_ns: s.first_stack_ns,
                }
            })
            .collect();
        Summary {
            func: end.func.to_string(),
            tracepoint: end.tracepoint.map(String::from),
            mode: end.mode,
            phase: if self.capturing() {
                Phase::StackCapture
            } else {
                Phase::Counting
            },
            kernel: end.info.kernel.clone(),
            profile: end.info.profile.clone(),
            start: end.start,
            calls: run.named(reasons),
            named: reasons.reason_names().map(String::from).collect(),
            other_merges: reasons.merged().iter().cloned().collect(),
            drops: drops(since(SLOT_NOT_FOUND), since(SLOT_SITES_FULL), st, &end.prog),
            stacks,
            captures,
            stacks_matched: st.stack(StackStat::TD_STACK_MATCHED),
            stacks_sent: st.stack(StackStat::TD_STACK_EMITTED),
            stacks_background: st.stack(StackStat::TD_STACK_BG_SENT),
            gates,
            drill: Vec::new(),
            verify: end.verify_caller.then(|| Verify {
                checked: st.get(Stat::TD_STAT_VERIFY_CHECKED),
                mismatches: st.get(Stat::TD_STAT_VERIFY_MISMATCH),
                unwind_failed: st.get(Stat::TD_STAT_VERIFY_UNWIND_FAILED),
                frames_checked: st.get(Stat::TD_STAT_VERIFY_FRAMES),
                sites: end.tail_sites,
            }),
            uncached: st.get(Stat::TD_STAT_UNCACHED),
            cost: cost(end.prog),
            companion: end.companion.map(|(k, p)| (k, cost(p))),
            compare: None,
            filter: end.filter.clone(),
            threshold: self.threshold(),
            system: end.info.system.clone(),
            fix: end.info.fix.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::abi::NR_SLOTS;
    use crate::session::trigger::TriggerConfig;

    /// A tick's changes, as (slot, started).
    fn ticked(s: &mut State, now: f64, ns: u64, t: &[u64]) -> Vec<(u32, bool)> {
        s.tick(now, ns, t)
            .iter()
            .map(|c| (c.slot, c.start))
            .collect()
    }

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

    /// Drop counters: `capped` stacks over the rate cap so far.
    fn counters(capped: u64) -> (Stats, ProgStats) {
        (
            Stats::with(&[], &[(StackStat::TD_STACK_RATE_CAPPED, capped)]),
            ProgStats::default(),
        )
    }

    fn thp() -> Process {
        Process {
            comm: "thp".into(),
            pid: 42,
        }
    }

    fn trigger(auto: bool) -> Trigger {
        Trigger::new(
            TriggerConfig {
                threshold: 80.0,
                min_events: 10,
                min_rate: 20.0,
                auto,
            },
            None,
        )
    }

    fn end<'a>(t: &'a [u64], stats: Stats) -> End<'a> {
        static INFO: RunInfo = RunInfo {
            kernel: String::new(),
            profile: None,
            system: None,
            fix: None,
        };
        End {
            func: "deferred_split_folio",
            tracepoint: None,
            mode: Mode::Fentry,
            totals: t,
            start: 0.0,
            secs: 3.0,
            info: &INFO,
            stats,
            prog: ProgStats {
                recursion_misses: 2,
                ..ProgStats::default()
            },
            companion: None,
            verify_caller: false,
            tail_sites: Default::default(),
            filter: None,
            gates: &[],
            untagged_shown: Box::leak(Box::default()),
        }
    }

    #[test]
    fn intervals_are_deltas_and_ticks_start_capture_between_them() {
        let r = reasons();
        let mut s = State::new(
            trigger(true),
            vec![0; NR_SLOTS],
            Stats::default(),
            ProgStats::default(),
        );
        assert!(s.auto());
        assert!(s.tick(1.0, 1_000, &totals(0, 50, 50)).is_empty());
        let iv = s.interval(totals(0, 50, 50), counters(0), 1.0, &r, (0.0, "c".into()));
        assert_eq!(iv.calls.total, 100);
        assert_eq!(iv.stacks, []);
        assert!(s.tick(2.0, 2_000, &totals(0, 50, 50)).is_empty());
        // A tick 0.1 s later: ZAP alone in the last second.
        assert_eq!(ticked(&mut s, 2.1, 2_100, &totals(0, 50, 95)), [(3, true)]);
        assert_eq!(s.targets(), [3]);
        s.add_stack(3, stack("zap"), thp(), 1_150, false);
        s.add_stack(3, stack("zap"), thp(), 1_160, false);
        let iv = s.interval(totals(0, 55, 150), counters(0), 1.0, &r, (0.0, "c".into()));
        assert_eq!(iv.calls.total, 105);
        let st = &iv.stacks[0];
        assert_eq!((st.reason.as_str(), st.captured), ("ZAP", 2));
        // The next interval starts with no stacks.
        let iv = s.interval(totals(0, 55, 150), counters(0), 1.0, &r, (0.0, "c".into()));
        assert_eq!(iv.stacks[0].captured, 0);
        assert_eq!(iv.drops, Drops::default());
        // Drops are the interval's: deltas of the counters.
        let iv = s.interval(totals(3, 55, 150), counters(7), 1.0, &r, (0.0, "c".into()));
        assert_eq!(
            (iv.drops.caller_not_found, iv.drops.stacks_rate_capped),
            (3, 7)
        );
        let iv = s.interval(totals(3, 55, 150), counters(9), 1.0, &r, (0.0, "c".into()));
        assert_eq!(
            (iv.drops.caller_not_found, iv.drops.stacks_rate_capped),
            (0, 2)
        );
    }

    /// An automatic run whose capture started on FAULT at 0.5 s.
    fn fault_captured() -> State {
        let mut s = State::new(
            trigger(true),
            vec![0; NR_SLOTS],
            Stats::default(),
            ProgStats::default(),
        );
        assert_eq!(ticked(&mut s, 0.5, 500, &totals(0, 100, 0)), [(2, true)]);
        s
    }

    #[test]
    fn the_summary_names_drops_phase_captures_and_stacks_in_order() {
        let r = reasons();
        let mut s = fault_captured();
        s.add_stack(2, stack("fault"), thp(), 520, false);
        assert!(s.tick(1.0, 1_000, &totals(0, 120, 0)).is_empty());
        assert_eq!(
            ticked(&mut s, 2.0, 2_000, &totals(0, 120, 400)),
            [(2, false), (3, true)]
        );
        s.add_stack(3, stack("zap"), thp(), 2_040, false);
        let t = totals(4, 130, 500);
        let stats = Stats::with(
            &[(Stat::TD_STAT_OWN_CALLS, 5)],
            &[
                (StackStat::TD_STACK_RATE_CAPPED, 6),
                (StackStat::TD_STACK_MATCHED, 9),
                (StackStat::TD_STACK_EMITTED, 2),
            ],
        );
        let sum = s.finish(&end(&t, stats), &r);
        assert_eq!(sum.phase, Phase::StackCapture);
        assert_eq!(sum.calls.total, 634);
        assert_eq!(sum.drops.caller_not_found, 4);
        assert_eq!(sum.drops.own_calls, 5);
        assert_eq!(sum.drops.stacks_rate_capped, 6);
        assert_eq!(sum.drops.recursion_misses, 2);
        assert_eq!((sum.stacks_matched, sum.stacks_sent), (9, 2));
        let order: Vec<&str> = sum.stacks.iter().map(|s| s.reason.as_str()).collect();
        assert_eq!(order, ["FAULT", "ZAP"]);
        // FAULT from 0.5 s to 2 s covered 20 of its calls; ZAP from 2 s to
        // the end (3 s) covered 100.
        let c = &sum.captures;
        assert_eq!(c.len(), 2);
        assert_eq!(
            (
                c[0].reason.as_str(),
                c[0].start,
                c[0].end,
                c[0].calls,
                c[0].stacks
            ),
            ("FAULT", 0.5, 2.0, 20, 1)
        );
        assert_eq!((c[0].start_ns, c[0].first_stack_ns), (500, Some(520)));
        assert_eq!(
            (
                c[1].reason.as_str(),
                c[1].start,
                c[1].end,
                c[1].calls,
                c[1].stacks
            ),
            ("ZAP", 2.0, 3.0, 100, 1)
        );
        assert_eq!(sum.verify, None);
        assert_eq!(sum.top().unwrap().reason, "ZAP");
        assert_eq!(sum.threshold, 80.0);
    }

    #[test]
    fn background_stacks_are_counted_apart_and_their_reasons_listed_first() {
        let r = reasons();
        let mut s = fault_captured();
        s.add_stack(2, stack("fault"), thp(), 510, true);
        s.add_stack(2, stack("fault"), thp(), 520, false);
        // ZAP burst while capture was held on FAULT: its background
        // stacks only.
        s.add_stack(3, stack("zap"), thp(), 600, true);
        let iv = s.interval(totals(0, 100, 0), counters(0), 1.0, &r, (0.0, "c".into()));
        let st = &iv.stacks[0];
        assert_eq!(
            (st.reason.as_str(), st.captured, st.background),
            ("FAULT", 1, 1)
        );
        let t = totals(0, 100, 40);
        let sum = s.finish(&end(&t, Stats::default()), &r);
        let got: Vec<(&str, u64, u64)> = sum
            .stacks
            .iter()
            .map(|st| (st.reason.as_str(), st.captured, st.background))
            .collect();
        assert_eq!(got, [("ZAP", 0, 1), ("FAULT", 1, 1)]);
        // A capture's stretch counts the capture's stacks only.
        assert_eq!(sum.captures[0].stacks, 1);
        assert_eq!(sum.captures[0].first_stack_ns, Some(520));
    }

    #[test]
    fn a_counting_run_has_no_stacks_and_verify_when_asked() {
        let r = reasons();
        let mut s = State::new(
            trigger(false),
            vec![0; NR_SLOTS],
            Stats::default(),
            ProgStats::default(),
        );
        assert!(!s.auto());
        assert!(s.tick(1.0, 0, &totals(0, 100, 0)).is_empty());
        let t = totals(0, 1, 0);
        let mut e = end(&t, Stats::with(&[(Stat::TD_STAT_VERIFY_CHECKED, 1)], &[]));
        e.verify_caller = true;
        let sum = s.finish(&e, &r);
        assert_eq!(sum.phase, Phase::Counting);
        assert!(sum.stacks.is_empty() && sum.captures.is_empty());
        assert_eq!(sum.verify.unwrap().checked, 1);
    }

    /// A gate row: calls, then sampled out, rate capped, ring buffer
    /// full and emitted.
    fn gate_row(
        calls: u64,
        sampled: u64,
        capped: u64,
        full: u64,
        sent: u64,
    ) -> [u64; NR_STACK_STATS] {
        let mut g = [0; NR_STACK_STATS];
        for (k, n) in [
            (StackStat::TD_STACK_MATCHED, calls),
            (StackStat::TD_STACK_SAMPLED_OUT, sampled),
            (StackStat::TD_STACK_RATE_CAPPED, capped),
            (StackStat::TD_STACK_RINGBUF_FULL, full),
            (StackStat::TD_STACK_EMITTED, sent),
        ] {
            g[k.0 as usize] = n;
        }
        g
    }

    #[test]
    fn every_captured_call_is_a_stack_shown_or_a_counted_drop() {
        let r = reasons();
        let mut s = fault_captured();
        // FAULT: 10 calls at the gate, 2 sampled out, 3 capped, 1 lost to
        // a full buffer, 4 sent, of which 3 arrived (one left unread).
        for ts in [510, 520, 530] {
            s.add_stack(2, stack("fault"), thp(), ts, false);
        }
        s.add_stack(2, stack("fault"), thp(), 540, true);
        // A uprobe's untagged calls: 5, 3 sent, 2 of them shown as FAULT's
        // (counted apart from FAULT's own).
        s.add_stack(2, stack("fault"), thp(), 550, false);
        s.add_stack(2, stack("fault"), thp(), 560, false);
        let mut gates = vec![[0; NR_STACK_STATS]; NR_SLOTS + 1];
        gates[2] = gate_row(10, 2, 3, 1, 4);
        gates[NR_SLOTS] = gate_row(5, 0, 2, 0, 3);
        let untagged: HashMap<u32, u64> = [(2, 2)].into();
        // FAULT counted 20 calls while captured: 10 at the gate, 2 shown
        // from unnamed sites, 8 dropped among those sites' calls.
        let t = totals(0, 120, 0);
        let mut e = end(&t, Stats::default());
        e.gates = &gates;
        e.untagged_shown = &untagged;
        let sum = s.finish(&e, &r);
        let got: Vec<(&str, Gate)> = sum
            .gates
            .iter()
            .map(|g| (g.reason.as_str(), g.gate))
            .collect();
        let fault = Gate {
            calls: 20,
            shown: 5,
            sampled_out: 2,
            rate_capped: 3,
            ringbuf_full: 1,
            not_kept: 1,
            unnamed: 8,
            unseen: 0,
        };
        let untold = Gate {
            calls: 5,
            shown: 2,
            rate_capped: 2,
            not_kept: 1,
            ..Gate::default()
        };
        assert_eq!(got, vec![("FAULT", fault), (UNRESOLVED, untold)]);
        assert!(sum.gates.iter().all(|g| g.gate.holds()));
        // The same calls as the capture span's line.
        assert_eq!(sum.captures[0].calls, 20);
    }

    #[test]
    fn calls_counted_before_the_switch_reached_their_sites_are_accounted_for() {
        let r = reasons();
        let mut s = fault_captured();
        for ts in [510, 520] {
            s.add_stack(2, stack("fault"), thp(), ts, false);
        }
        // 30 counted while captured, 26 at the gate: 2 shown, 24 capped.
        let mut gates = vec![[0; NR_STACK_STATS]; NR_SLOTS + 1];
        gates[2] = gate_row(26, 0, 24, 0, 2);
        let t = totals(0, 130, 0);
        let mut e = end(&t, Stats::default());
        e.gates = &gates;
        let sum = s.finish(&e, &r);
        let g = sum.gates[0].gate;
        assert_eq!(
            (g.calls, g.shown, g.rate_capped, g.unseen, g.unnamed),
            (30, 2, 24, 4, 0)
        );
        assert!(g.holds());
        assert_eq!(sum.captures[0].calls, g.calls);
        assert_eq!(sum.gates.len(), 1);
    }

    #[test]
    fn a_reason_the_gate_took_without_a_span_is_listed_after_the_spans() {
        let r = reasons();
        let s = fault_captured();
        let mut gates = vec![[0; NR_STACK_STATS]; NR_SLOTS + 1];
        gates[3] = gate_row(4, 0, 4, 0, 0);
        let t = totals(0, 100, 0);
        let mut e = end(&t, Stats::default());
        e.gates = &gates;
        let names: Vec<String> = s
            .finish(&e, &r)
            .gates
            .into_iter()
            .map(|g| g.reason)
            .collect();
        assert_eq!(names, ["FAULT", "ZAP"]);
    }

    #[test]
    fn a_stack_on_run_is_one_capture_from_the_start() {
        let r = reasons();
        let mut s = State::new(
            Trigger::new(
                TriggerConfig {
                    threshold: 80.0,
                    min_events: 1,
                    min_rate: 0.0,
                    auto: true,
                },
                Some(2),
            ),
            vec![0; NR_SLOTS],
            Stats::default(),
            ProgStats::default(),
        );
        s.start_span(2, 0.0, 7, &totals(0, 0, 0));
        // Pinned: a hot ZAP moves nothing.
        assert!(s.tick(1.0, 0, &totals(0, 0, 500)).is_empty());
        let t = totals(0, 10, 500);
        let sum = s.finish(&end(&t, Stats::default()), &r);
        assert_eq!(sum.captures.len(), 1);
        assert_eq!((sum.captures[0].calls, sum.captures[0].end), (10, 3.0));
        assert_eq!(sum.captures[0].first_stack_ns, None);
    }
}
