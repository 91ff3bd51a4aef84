//! When stack capture of a reason starts or ends by itself.
//!
//! Decided on every tick (50 ms), whatever the print interval, over the
//! calls of the last second: a reason qualifies when its share of those
//! calls is at least the threshold with 95% confidence (a small sample must
//! be unanimous), it made at least `min_events` of them, and at least
//! `min_rate` per second since its first call in that second (so a burst
//! after a quiet spell counts at its own rate, not spread over the
//! second). A reason that qualifies is captured on that tick, beside any
//! captured already: several reasons are captured at once, sharing one
//! stack budget. A captured reason stays captured while it qualifies, and
//! while no reason has been captured after it; once one has, it ends when
//! it no longer qualifies and either has no calls in the window or has
//! been captured for a second (so a reason that is still live is not cut
//! off as soon as it starts). The newest reason stays until another comes.

use std::collections::VecDeque;

use crate::reasons::Reasons;

/// The span of calls a decision looks at.
pub(crate) const WINDOW: f64 = 1.0;
/// Least time a live reason keeps capture once a newer one is captured.
const DWELL: f64 = 1.0;
/// z for a two-sided 95% Wilson interval.
const Z: f64 = 1.96;

/// At most this many reasons are captured at once: each has its share of
/// one budget, and of the caller ranges the BPF side holds.
pub(crate) const MAX_CAPTURED: usize = 4;

/// A change of the reasons whose stacks are captured, and the figures
/// behind it: the reason's share (percent) and calls in a window of `span`
/// seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Change {
    pub(crate) slot: u32,
    /// Capture of `slot` starts (else it ends).
    pub(crate) start: bool,
    pub(crate) share: f64,
    pub(crate) calls: u64,
    pub(crate) span: f64,
}

/// The flags behind the decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TriggerConfig {
    /// Percent of the window's calls.
    pub(crate) threshold: f64,
    /// Calls of the reason in the window.
    pub(crate) min_events: u64,
    /// Calls of the reason per second over the window.
    pub(crate) min_rate: f64,
    /// Start and move capture by itself.
    pub(crate) auto: bool,
}

/// The lower bound of the Wilson score interval for `k` of `n`.
fn wilson_lower(k: u64, n: u64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let (k, n) = (k as f64, n as f64);
    let p = k / n;
    let z2 = Z * Z;
    let center = p + z2 / (2.0 * n);
    let spread = Z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    (center - spread) / (1.0 + z2 / n)
}

/// Whether `k` of `n` calls show a share of at least `threshold` percent:
/// the Wilson lower bound reaches it, or, for samples too small for the
/// bound ever to reach it, all `n` calls are the reason's.
fn confident(k: u64, n: u64, threshold: f64) -> bool {
    if n == 0 {
        return false;
    }
    let unanimous = n as f64 / (n as f64 + Z * Z);
    wilson_lower(k, n) + 1e-12 >= (threshold / 100.0).min(unanimous)
}

#[derive(Debug, Clone)]
pub(crate) struct Trigger {
    cfg: TriggerConfig,
    /// The reasons captured now, oldest first, with when each started.
    targets: Vec<(u32, f64)>,
    /// (seconds since start, cumulative per-slot totals), oldest first:
    /// the last WINDOW seconds and the newest snapshot before them.
    window: VecDeque<(f64, Vec<u64>)>,
    /// The reasons that burst on the last observation (see `bursting`).
    bursting: Vec<u32>,
}

impl Trigger {
    /// `pinned` is a reason chosen with --stack-on: captured from the start
    /// and never moved away from.
    pub(crate) fn new(cfg: TriggerConfig, pinned: Option<u32>) -> Self {
        Trigger {
            cfg: TriggerConfig {
                auto: cfg.auto && pinned.is_none(),
                ..cfg
            },
            targets: pinned.map(|p| (p, 0.0)).into_iter().collect(),
            window: VecDeque::from([(0.0, Vec::new())]),
            bursting: Vec::new(),
        }
    }

    /// Counts start from these cumulative totals (a pinned instance's).
    pub(crate) fn start_from(&mut self, base: &[u64]) {
        self.window = VecDeque::from([(0.0, base.to_vec())]);
    }

    pub(crate) fn threshold(&self) -> f64 {
        self.cfg.threshold
    }

    /// The reasons captured now, oldest first.
    pub(crate) fn targets(&self) -> Vec<u32> {
        self.targets.iter().map(|&(s, _)| s).collect()
    }

    /// Whether any reason is captured now.
    pub(crate) fn capturing(&self) -> bool {
        !self.targets.is_empty()
    }

    /// The reasons that burst on the last observation: at least
    /// `min_events` calls in the window, at `min_rate` or more since their
    /// first call in it, whatever their share. Their background stacks are
    /// shown, whether or not they are captured (their share may be below
    /// the threshold), so a burst beside a busier reason has its first
    /// stacks.
    pub(crate) fn bursting(&self) -> &[u32] {
        &self.bursting
    }

    /// Whether `slot`, with `k` calls in the window, bursts at `now`. Its
    /// calls began after the last snapshot that still had none of them
    /// (at the latest, the one before now).
    fn bursts(&self, slot: u32, k: u64, now: f64) -> bool {
        if k == 0 || k < self.cfg.min_events {
            return false;
        }
        let at = |t: &Vec<u64>| t.get(slot as usize).copied().unwrap_or(0);
        let Some((then, base)) = self.window.front() else {
            return false;
        };
        let began = self
            .window
            .iter()
            .take(self.window.len() - 1)
            .rev()
            .find(|(_, t)| at(t) == at(base))
            .map_or(*then, |(t, _)| *t);
        let active = now - began;
        active > 0.0 && (k as f64) / active >= self.cfg.min_rate
    }

    /// Whether the trigger needs the counters on every tick.
    pub(crate) fn auto(&self) -> bool {
        self.cfg.auto
    }

    /// Takes the cumulative totals at `now` (seconds since start) and
    /// returns the changes of capture they call for: the ends first, then
    /// the starts, hottest first.
    pub(crate) fn observe(&mut self, now: f64, totals: &[u64]) -> Vec<Change> {
        if !self.cfg.auto {
            return Vec::new();
        }
        self.window.push_back((now, totals.to_vec()));
        while self.window.len() > 2 && self.window[1].0 <= now - WINDOW {
            self.window.pop_front();
        }
        let Some((then, base)) = self.window.front() else {
            return Vec::new();
        };
        let span = now - then;
        let delta = |slot: usize| totals[slot].wrapping_sub(base.get(slot).copied().unwrap_or(0));
        let deltas: Vec<u64> = (0..totals.len()).map(delta).collect();
        let n: u64 = deltas.iter().fold(0, |a, &d| a.wrapping_add(d));
        let share = |slot: u32| 100.0 * deltas[slot as usize] as f64 / n.max(1) as f64;
        self.bursting = (0..deltas.len() as u32)
            .filter(|&s| !Reasons::is_special(s) && self.bursts(s, deltas[s as usize], now))
            .collect();
        let qualifies = |slot: u32| confident(deltas[slot as usize], n, self.cfg.threshold);
        // The reasons to capture: those that qualify and are not captured
        // yet, hottest first (ties: the lower slot).
        let mut new: Vec<u32> = self
            .bursting
            .iter()
            .copied()
            .filter(|&s| qualifies(s) && !self.targets.iter().any(|&(t, _)| t == s))
            .collect();
        new.sort_by(|a, b| deltas[*b as usize].cmp(&deltas[*a as usize]).then(a.cmp(b)));
        let mut changes = Vec::new();
        // A captured reason ends once a newer one is (or is about to be)
        // captured, if it no longer qualifies and it is silent or has held
        // capture for the dwell.
        let last = self.targets.len();
        let mut kept = Vec::new();
        for (i, &(slot, since)) in self.targets.iter().enumerate() {
            let newer = i + 1 < last || !new.is_empty();
            let live = deltas[slot as usize] > 0;
            if newer && !qualifies(slot) && (!live || now - since >= DWELL) {
                changes.push(Change {
                    slot,
                    start: false,
                    share: share(slot),
                    calls: deltas[slot as usize],
                    span,
                });
            } else {
                kept.push((slot, since));
            }
        }
        self.targets = kept;
        for slot in new {
            if self.targets.len() >= MAX_CAPTURED {
                break;
            }
            self.targets.push((slot, now));
            changes.push(Change {
                slot,
                start: true,
                share: share(slot),
                calls: deltas[slot as usize],
                span,
            });
        }
        changes
    }
}

/// The notices of a tick's changes of capture, without the program's
/// name; `now` is the reasons captured after them. A start on a tick that
/// ends others' capture says it moves from them; a reason whose capture
/// ends on a tick with no start has a notice of its own.
pub(super) fn announcements(
    changes: &[Change],
    now: &[u32],
    reasons: &Reasons,
    threshold: f64,
) -> Vec<String> {
    let figures = |c: &Change| {
        format!(
            "{} has {:.1}% of calls ({} in the last {:.1}s; threshold {threshold}%)",
            reasons.name(c.slot),
            c.share,
            c.calls,
            c.span
        )
    };
    let ended: Vec<&str> = changes
        .iter()
        .filter(|c| !c.start)
        .map(|c| reasons.name(c.slot))
        .collect();
    let starts: Vec<&Change> = changes.iter().filter(|c| c.start).collect();
    if starts.is_empty() {
        return changes
            .iter()
            .map(|c| format!("{}: its stack capture ends", figures(c)))
            .collect();
    }
    starts
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut what = if i == 0 && !ended.is_empty() {
                format!("moving stack capture from {}", ended.join(", "))
            } else {
                "capturing its stacks".to_string()
            };
            let beside: Vec<String> = now
                .iter()
                .filter(|&&s| s != c.slot)
                .map(|&s| format!("{}'s", reasons.name(s)))
                .collect();
            if !beside.is_empty() {
                what.push_str(&format!(", beside {}", beside.join(", ")));
            }
            format!("{}: {what}", figures(c))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::abi::SLOT_NOT_FOUND;

    fn cfg() -> TriggerConfig {
        TriggerConfig {
            threshold: 80.0,
            min_events: 10,
            min_rate: 20.0,
            auto: true,
        }
    }

    /// Feeds cumulative (slot, count) pairs at `now`: the changes, as
    /// (slot, started).
    fn at(t: &mut Trigger, now: f64, counts: &[(u32, u64)]) -> Vec<(u32, bool)> {
        let mut totals = vec![0u64; 8];
        for &(s, n) in counts {
            totals[s as usize] = n;
        }
        t.observe(now, &totals)
            .iter()
            .map(|c| (c.slot, c.start))
            .collect()
    }

    const NONE: Vec<(u32, bool)> = Vec::new();

    #[test]
    fn the_wilson_bound_and_small_samples() {
        assert!((wilson_lower(80, 100) - 0.711).abs() < 0.001);
        assert_eq!(wilson_lower(0, 0), 0.0);
        // 10 of 10: the bound (0.72) is below 80%, but a sample that size
        // can do no better: unanimous is enough.
        assert!(confident(10, 10, 80.0));
        assert!(!confident(9, 10, 80.0));
        // Large samples need the share with confidence.
        assert!(confident(900, 1000, 80.0));
        assert!(!confident(810, 1000, 80.0));
        assert!(confident(1000, 1000, 100.0));
        assert!(!confident(999, 1000, 100.0));
    }

    #[test]
    fn a_spike_after_quiet_starts_capture_on_the_first_tick() {
        let mut t = Trigger::new(cfg(), None);
        for i in 1..=50 {
            assert_eq!(at(&mut t, i as f64 / 10.0, &[]), NONE);
        }
        // 8 calls of slot 3 in the last 100 ms: fewer than min_events...
        let mut t2 = t.clone();
        assert_eq!(at(&mut t2, 5.1, &[(3, 8)]), NONE);
        // ...but 12 in 100 ms are 120 per second since its first call.
        assert_eq!(at(&mut t, 5.1, &[(3, 12)]), vec![(3, true)]);
        assert_eq!(t.targets(), [3]);
        assert_eq!(at(&mut t, 5.2, &[(3, 60)]), NONE);
    }

    #[test]
    fn a_steady_trickle_is_below_the_rate() {
        // One reason alone, 15 calls a second: unanimous, but too slow.
        let mut t = Trigger::new(cfg(), None);
        for i in 1..=100u64 {
            let n = (15 * i).div_ceil(10);
            assert_eq!(at(&mut t, i as f64 / 10.0, &[(2, n)]), NONE, "tick {i}");
        }
        // 25 a second: it starts once ten calls are in the window.
        let mut t = Trigger::new(cfg(), None);
        let started = (1..=100u64)
            .find(|&i| !at(&mut t, i as f64 / 10.0, &[(2, 25 * i / 10)]).is_empty())
            .unwrap();
        assert_eq!(started, 4);
    }

    #[test]
    fn the_window_forgets_what_is_older_than_a_second() {
        let mut t = Trigger::new(cfg(), None);
        // A 50/50 mix for five seconds: never.
        for i in 1..=50u64 {
            assert_eq!(
                at(&mut t, i as f64 / 10.0, &[(2, 10 * i), (3, 10 * i)]),
                NONE
            );
        }
        // Then slot 3 alone: once the old mix has left the window.
        let mut started = None;
        for i in 51..=80u64 {
            if let [sw] = at(
                &mut t,
                i as f64 / 10.0,
                &[(2, 500), (3, 500 + 20 * (i - 50))],
            )[..]
            {
                started = Some((i, sw));
                break;
            }
        }
        let (i, sw) = started.expect("capture started");
        assert_eq!(sw, (3, true));
        // 80% of the last second: after 0.7-0.8 s of slot 3 alone.
        assert!((57..=59).contains(&i), "started at tick {i}");
    }

    #[test]
    fn a_noisy_mix_below_the_threshold_never_starts() {
        // 70/30 with noise, 100 calls a second: the bound stays below 80%.
        let mut t = Trigger::new(cfg(), None);
        let (mut a, mut b) = (0u64, 0u64);
        for i in 1..=600u64 {
            let burst = if i % 7 == 0 { 10 } else { 7 };
            a += burst;
            b += 3;
            assert_eq!(
                at(&mut t, i as f64 / 10.0, &[(2, a), (3, b)]),
                NONE,
                "tick {i}"
            );
        }
    }

    #[test]
    fn a_new_reason_is_captured_at_once_beside_the_old_one() {
        let mut t = Trigger::new(cfg(), None);
        assert_eq!(at(&mut t, 0.5, &[(2, 100)]), vec![(2, true)]);
        // Slot 3 takes over 0.1 s after slot 2 was captured: captured at
        // once, and slot 2 (still in the window) keeps its capture.
        assert_eq!(at(&mut t, 0.6, &[(2, 100), (3, 1000)]), vec![(3, true)]);
        assert_eq!(t.targets(), [2, 3]);
        // Slot 2 silent for a second: its capture ends; slot 3's goes on.
        assert_eq!(at(&mut t, 1.6, &[(2, 100), (3, 3000)]), vec![(2, false)]);
        assert_eq!(t.targets(), [3]);
        // With a low threshold both qualify: both are captured, and stay
        // so while they qualify.
        let low = TriggerConfig {
            threshold: 30.0,
            ..cfg()
        };
        let mut t = Trigger::new(low, None);
        assert_eq!(
            at(&mut t, 0.5, &[(2, 500), (3, 400)]),
            vec![(2, true), (3, true)]
        );
        assert_eq!(at(&mut t, 2.0, &[(2, 1000), (3, 950)]), NONE);
        assert_eq!(t.targets(), [2, 3]);
        // Slot 2 falls to 30% of a thousand calls: below the threshold with
        // confidence, live, captured for over a second: it ends.
        assert_eq!(at(&mut t, 3.0, &[(2, 1300), (3, 1650)]), vec![(2, false)]);
        assert_eq!(t.targets(), [3]);
        // The newest reason stays, whatever its share, until another comes.
        assert_eq!(
            at(&mut t, 4.0, &[(2, 2300), (3, 1660)]),
            vec![(3, false), (2, true)]
        );
        assert_eq!(at(&mut t, 9.0, &[(2, 2300), (3, 1660)]), NONE);
        assert_eq!(t.targets(), [2]);
    }

    #[test]
    fn a_silent_reason_does_not_hold_capture() {
        // Capture starts on slot 2, which stops 0.3 s later; slot 3's burst
        // begins 0.2 s after that, inside slot 2's dwell but after its last
        // call has left the window.
        let mut t = Trigger::new(cfg(), None);
        assert_eq!(at(&mut t, 0.1, &[(2, 30)]), vec![(2, true)]);
        for i in 2..=4u64 {
            assert_eq!(at(&mut t, i as f64 / 10.0, &[(2, 30 * i)]), NONE);
        }
        // 20 calls of slot 3 beside slot 2's 120 in the window: a burst,
        // far below the threshold.
        assert_eq!(at(&mut t, 0.5, &[(2, 120), (3, 20)]), NONE);
        // A second of silence from slot 2 (its last calls at 0.4 s), then
        // slot 3 again: slot 3 is captured on the first tick it
        // qualifies, and slot 2's capture ends on the same tick, whatever
        // the dwell.
        let mut t2 = t.clone();
        for i in 6..=14u64 {
            assert_eq!(at(&mut t2, i as f64 / 10.0, &[(2, 120), (3, 20)]), NONE);
        }
        assert_eq!(
            at(&mut t2, 1.45, &[(2, 120), (3, 40)]),
            vec![(2, false), (3, true)]
        );
        assert_eq!(t2.targets(), [3]);
        // The case: capture on slot 2, 3 s of nothing, then a burst
        // of slot 3 is captured on its first tick, and slot 2's ends.
        let mut t = Trigger::new(cfg(), None);
        assert_eq!(at(&mut t, 0.1, &[(2, 50)]), vec![(2, true)]);
        for i in 2..=40u64 {
            let n2 = 50 * i.min(10);
            assert_eq!(at(&mut t, i as f64 / 20.0, &[(2, n2)]), NONE, "tick {i}");
        }
        assert_eq!(
            at(&mut t, 2.05, &[(2, 500), (3, 15)]),
            vec![(2, false), (3, true)]
        );
    }

    #[test]
    fn a_live_reason_keeps_capture_for_the_dwell() {
        // Slot 2 is captured at 0.5 s with 12 calls, and goes on at 20
        // calls a second; slot 3 surges at 1,000 a second from 0.55 s.
        // Slot 3 is captured as soon as it has 80% of the window with
        // confidence; slot 2, live, keeps its capture until it has held it
        // for a second.
        let mut t = Trigger::new(cfg(), None);
        assert_eq!(at(&mut t, 0.5, &[(2, 12)]), vec![(2, true)]);
        let mut seen = Vec::new();
        for i in 11..=40u64 {
            let now = i as f64 / 20.0;
            let n2 = 12 + i - 10;
            let n3 = 50 * (i - 11);
            for c in at(&mut t, now, &[(2, n2), (3, n3)]) {
                seen.push((i, c));
            }
        }
        assert_eq!(seen, [(14, (3, true)), (30, (2, false))]);
        assert_eq!(t.targets(), [3]);
    }

    #[test]
    fn at_most_max_captured_reasons_at_once() {
        // Five reasons at 20% each, threshold 10%: the four hottest (ties:
        // the lower slots) are captured.
        let low = TriggerConfig {
            threshold: 10.0,
            ..cfg()
        };
        let mut t = Trigger::new(low, None);
        let mut totals = vec![0u64; 8];
        for (s, n) in [(2, 200), (3, 210), (4, 200), (5, 220), (6, 200)] {
            totals[s] = n;
        }
        let started: Vec<u32> = t.observe(0.5, &totals).iter().map(|c| c.slot).collect();
        assert_eq!(started, [5, 3, 2, 4]);
        assert_eq!(t.targets().len(), MAX_CAPTURED);
    }

    #[test]
    fn notices_say_what_moved_and_what_goes_on() {
        let mut r = Reasons::new(8);
        r.slot("FAULT");
        r.slot("ZAP");
        r.slot("MADV");
        let c = |slot, start| Change {
            slot,
            start,
            share: 100.0,
            calls: 30,
            span: 1.0,
        };
        let say = |ch: &[Change], now: &[u32]| announcements(ch, now, &r, 80.0);
        let head = "has 100.0% of calls (30 in the last 1.0s; threshold 80%)";
        assert_eq!(
            say(&[c(3, true)], &[3]),
            [format!("ZAP {head}: capturing its stacks")]
        );
        assert_eq!(
            say(&[c(2, false), c(3, true)], &[3]),
            [format!("ZAP {head}: moving stack capture from FAULT")]
        );
        assert_eq!(
            say(&[c(3, true)], &[2, 3]),
            [format!("ZAP {head}: capturing its stacks, beside FAULT's")]
        );
        assert_eq!(
            say(&[c(2, false), c(4, true)], &[3, 4]),
            [format!(
                "MADV {head}: moving stack capture from FAULT, beside ZAP's"
            )]
        );
        assert_eq!(
            say(&[c(2, false)], &[3]),
            [format!("FAULT {head}: its stack capture ends")]
        );
    }

    #[test]
    fn reasons_burst_whatever_their_share() {
        // 100 calls of slot 2 in 0.3 s take capture; then 20 of slot 3 in
        // one tick: a twentieth of the window's calls, but a burst.
        let mut t = Trigger::new(cfg(), None);
        assert_eq!(at(&mut t, 0.3, &[(2, 100)]), vec![(2, true)]);
        assert_eq!(t.bursting(), [2]);
        assert_eq!(at(&mut t, 0.35, &[(2, 100), (3, 20)]), NONE);
        assert_eq!(t.bursting(), [2, 3]);
        assert_eq!(t.targets(), [2]);
        // Fewer than --min-events: no burst.
        assert_eq!(at(&mut t, 0.4, &[(2, 100), (3, 20), (4, 9)]), NONE);
        assert_eq!(t.bursting(), [2, 3]);
        // A trickle below --min-rate over the second: none.
        let mut t = Trigger::new(cfg(), None);
        for i in 1..=40u64 {
            at(&mut t, i as f64 / 20.0, &[(3, i / 2)]);
        }
        assert!(t.bursting().is_empty());
        // A quiet second later: nothing bursts.
        let mut t = Trigger::new(cfg(), None);
        at(&mut t, 0.3, &[(2, 100)]);
        assert_eq!(at(&mut t, 2.0, &[(2, 100)]), NONE);
        assert!(t.bursting().is_empty());
    }

    #[test]
    fn no_auto_pinned_and_special_slots() {
        let mut t = Trigger::new(
            TriggerConfig {
                auto: false,
                ..cfg()
            },
            None,
        );
        assert_eq!(at(&mut t, 1.0, &[(2, 100)]), NONE);
        assert!(t.targets().is_empty());
        let mut t = Trigger::new(cfg(), Some(4));
        assert_eq!(t.targets(), [4]);
        assert!(!t.auto());
        assert_eq!(at(&mut t, 1.0, &[(2, 100)]), NONE);
        let mut t = Trigger::new(cfg(), None);
        assert_eq!(at(&mut t, 1.0, &[(SLOT_NOT_FOUND, 100)]), NONE);
        assert_eq!(at(&mut t, 2.0, &[(SLOT_NOT_FOUND, 190), (2, 10)]), NONE);
    }

    #[test]
    fn min_events_counts_calls_in_the_window() {
        let mut t = Trigger::new(
            TriggerConfig {
                min_events: 100,
                ..cfg()
            },
            None,
        );
        assert_eq!(at(&mut t, 1.0, &[(2, 99)]), NONE);
        assert_eq!(at(&mut t, 1.1, &[(2, 110)]), vec![(2, true)]);
    }
}
