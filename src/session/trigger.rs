//! When stack capture starts or moves by itself, and for which reason.
//!
//! Decided on every tick (50 ms), whatever the print interval, over the
//! calls of the last second: a reason takes over when its share of those
//! calls is at least the threshold with 95% confidence (a small sample must
//! be unanimous), it made at least `min_events` of them, and at least
//! `min_rate` per second since its first call in that second (so a burst
//! after a quiet spell counts at its own rate, not spread over the second). Capture stays on a reason until another one takes
//! over; while the current reason still has calls in the window, a move
//! needs it to have held capture for a second and, if it still qualifies,
//! the new one to lead it by ten points, so two reasons near the threshold
//! do not flap. A current reason with no calls in the window holds nothing:
//! a new one takes over on the first tick it qualifies.

use std::collections::VecDeque;

use crate::reasons::Reasons;

/// The span of calls a decision looks at.
pub(crate) const WINDOW: f64 = 1.0;
/// Least time a reason keeps capture before it can move.
const DWELL: f64 = 1.0;
/// How far (percentage points) a new reason must lead a current one that
/// still qualifies.
const MARGIN: f64 = 10.0;
/// z for a two-sided 95% Wilson interval.
const Z: f64 = 1.96;

/// A change of the reason whose stacks are captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Switch {
    Start(u32),
    Move { from: u32, to: u32 },
}

impl Switch {
    pub(crate) fn to(self) -> u32 {
        match self {
            Switch::Start(to) | Switch::Move { to, .. } => to,
        }
    }
}

/// A switch and the figures behind it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Decision {
    pub(crate) switch: Switch,
    /// The new reason's share (percent) and calls in the window.
    pub(crate) share: f64,
    pub(crate) calls: u64,
    /// The window's length in seconds.
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
    target: Option<u32>,
    /// (seconds since start, cumulative per-slot totals), oldest first:
    /// the last WINDOW seconds and the newest snapshot before them.
    window: VecDeque<(f64, Vec<u64>)>,
    /// When capture last switched.
    switched: f64,
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
            target: pinned,
            window: VecDeque::from([(0.0, Vec::new())]),
            switched: 0.0,
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

    pub(crate) fn target(&self) -> Option<u32> {
        self.target
    }

    /// The reasons that burst on the last observation: at least
    /// `min_events` calls in the window, at `min_rate` or more since their
    /// first call in it, whatever their share. Their background stacks are
    /// shown, whether or not capture moves to them (the share, the dwell,
    /// the lead), so a burst beside a busier reason has its first stacks.
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
    /// returns the switch they call for, if any.
    pub(crate) fn observe(&mut self, now: f64, totals: &[u64]) -> Option<Decision> {
        if !self.cfg.auto {
            return None;
        }
        self.window.push_back((now, totals.to_vec()));
        while self.window.len() > 2 && self.window[1].0 <= now - WINDOW {
            self.window.pop_front();
        }
        let (_, base) = self.window.front()?;
        let delta = |slot: usize| totals[slot].wrapping_sub(base.get(slot).copied().unwrap_or(0));
        let deltas: Vec<u64> = (0..totals.len()).map(delta).collect();
        let n: u64 = deltas.iter().fold(0, |a, &d| a.wrapping_add(d));
        // The reason with the most calls; ties go to the lower slot.
        let (hot, &k) = deltas
            .iter()
            .enumerate()
            .filter(|(s, _)| !Reasons::is_special(*s as u32))
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))?;
        let hot = hot as u32;
        let share = 100.0 * k as f64 / n.max(1) as f64;
        let bursting: Vec<u32> = (0..deltas.len() as u32)
            .filter(|&s| !Reasons::is_special(s) && self.bursts(s, deltas[s as usize], now))
            .collect();
        let burst = bursting.contains(&hot);
        self.bursting = bursting;
        if !burst || !confident(k, n, self.cfg.threshold) || self.target == Some(hot) {
            return None;
        }
        let span = now - self.window.front().map_or(now, |w| w.0);
        let switch = match self.target {
            None => Switch::Start(hot),
            Some(cur) => {
                // The dwell and the lead keep two live reasons from
                // flapping; a reason with no calls in the window holds
                // nothing.
                let cur_calls = deltas[cur as usize];
                let cur_share = 100.0 * cur_calls as f64 / n as f64;
                let still = confident(cur_calls, n, self.cfg.threshold);
                if cur_calls > 0
                    && (now - self.switched < DWELL || (still && share < cur_share + MARGIN))
                {
                    return None;
                }
                Switch::Move { from: cur, to: hot }
            }
        };
        self.target = Some(hot);
        self.switched = now;
        Some(Decision {
            switch,
            share,
            calls: k,
            span,
        })
    }
}

/// The notice of a switch of capture, without the program's name.
pub(super) fn announcement(d: &Decision, reasons: &Reasons, threshold: f64) -> String {
    let what = match d.switch {
        Switch::Start(_) => "capturing its stacks".to_string(),
        Switch::Move { from, .. } => {
            format!("moving stack capture from {}", reasons.name(from))
        }
    };
    format!(
        "{} has {:.1}% of calls ({} in the last {:.1}s; threshold {threshold}%): {what}",
        reasons.name(d.switch.to()),
        d.share,
        d.calls,
        d.span
    )
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

    /// Feeds cumulative (slot, count) pairs at `now`.
    fn at(t: &mut Trigger, now: f64, counts: &[(u32, u64)]) -> Option<Switch> {
        let mut totals = vec![0u64; 8];
        for &(s, n) in counts {
            totals[s as usize] = n;
        }
        t.observe(now, &totals).map(|d| d.switch)
    }

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
            assert_eq!(at(&mut t, i as f64 / 10.0, &[]), None);
        }
        // 8 calls of slot 3 in the last 100 ms: fewer than min_events...
        let mut t2 = t.clone();
        assert_eq!(at(&mut t2, 5.1, &[(3, 8)]), None);
        // ...but 12 in 100 ms are 120 per second since its first call.
        assert_eq!(at(&mut t, 5.1, &[(3, 12)]), Some(Switch::Start(3)));
        assert_eq!(t.target(), Some(3));
        assert_eq!(at(&mut t, 5.2, &[(3, 60)]), None);
    }

    #[test]
    fn a_steady_trickle_is_below_the_rate() {
        // One reason alone, 15 calls a second: unanimous, but too slow.
        let mut t = Trigger::new(cfg(), None);
        for i in 1..=100u64 {
            let n = (15 * i).div_ceil(10);
            assert_eq!(at(&mut t, i as f64 / 10.0, &[(2, n)]), None, "tick {i}");
        }
        // 25 a second: it starts once ten calls are in the window.
        let mut t = Trigger::new(cfg(), None);
        let started = (1..=100u64)
            .find(|&i| at(&mut t, i as f64 / 10.0, &[(2, 25 * i / 10)]).is_some())
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
                None
            );
        }
        // Then slot 3 alone: once the old mix has left the window.
        let mut started = None;
        for i in 51..=80u64 {
            if let Some(sw) = at(
                &mut t,
                i as f64 / 10.0,
                &[(2, 500), (3, 500 + 20 * (i - 50))],
            ) {
                started = Some((i, sw));
                break;
            }
        }
        let (i, sw) = started.expect("capture started");
        assert_eq!(sw, Switch::Start(3));
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
                None,
                "tick {i}"
            );
        }
    }

    #[test]
    fn moves_need_a_second_of_dwell_and_a_clear_lead() {
        let mut t = Trigger::new(cfg(), None);
        assert_eq!(at(&mut t, 0.5, &[(2, 100)]), Some(Switch::Start(2)));
        // Slot 3 takes over at once, but capture moved 0.1 s ago.
        assert_eq!(at(&mut t, 0.6, &[(2, 100), (3, 1000)]), None);
        assert_eq!(
            at(&mut t, 1.6, &[(2, 100), (3, 3000)]),
            Some(Switch::Move { from: 2, to: 3 })
        );
        // With a low threshold both qualify; the leader needs ten points.
        let low = TriggerConfig {
            threshold: 30.0,
            ..cfg()
        };
        let mut t = Trigger::new(low, None);
        assert_eq!(
            at(&mut t, 0.5, &[(2, 500), (3, 400)]),
            Some(Switch::Start(2))
        );
        assert_eq!(
            at(&mut t, 2.0, &[(2, 1000), (3, 950)]),
            None,
            "46/54: no lead"
        );
        assert_eq!(
            at(&mut t, 3.0, &[(2, 1300), (3, 1650)]),
            Some(Switch::Move { from: 2, to: 3 })
        );
    }

    #[test]
    fn a_silent_reason_does_not_hold_capture() {
        // Capture starts on slot 2, which stops 0.3 s later; slot 3's burst
        // begins 0.2 s after that, inside slot 2's dwell but after its last
        // call has left the window.
        let mut t = Trigger::new(cfg(), None);
        assert_eq!(at(&mut t, 0.1, &[(2, 30)]), Some(Switch::Start(2)));
        for i in 2..=4u64 {
            assert_eq!(at(&mut t, i as f64 / 10.0, &[(2, 30 * i)]), None);
        }
        // Slot 2's calls still in the window: the dwell holds.
        assert_eq!(at(&mut t, 0.5, &[(2, 120), (3, 20)]), None);
        // A second of silence from slot 2 (its last calls at 0.4 s), then
        // slot 3 again: a move on the first tick, not after a dwell.
        let mut t2 = t.clone();
        for i in 6..=14u64 {
            assert_eq!(at(&mut t2, i as f64 / 10.0, &[(2, 120), (3, 20)]), None);
        }
        assert_eq!(
            at(&mut t2, 1.45, &[(2, 120), (3, 40)]),
            Some(Switch::Move { from: 2, to: 3 })
        );
        // The case: capture on slot 2, 3 s of nothing, then a burst
        // of slot 3 moves capture on its first tick, whatever the dwell.
        let mut t = Trigger::new(cfg(), None);
        assert_eq!(at(&mut t, 0.1, &[(2, 50)]), Some(Switch::Start(2)));
        for i in 2..=40u64 {
            let n2 = 50 * i.min(10);
            assert_eq!(at(&mut t, i as f64 / 20.0, &[(2, n2)]), None, "tick {i}");
        }
        let mut t3 = t.clone();
        assert_eq!(
            at(&mut t, 2.05, &[(2, 500), (3, 15)]),
            Some(Switch::Move { from: 2, to: 3 })
        );
        // The dwell is measured from the switch, so with no silence rule
        // the same tick inside a fresh dwell holds: check that silence, not
        // the dwell's end, made the move.
        t3.switched = 1.9;
        assert_eq!(
            at(&mut t3, 2.05, &[(2, 500), (3, 15)]),
            Some(Switch::Move { from: 2, to: 3 })
        );
    }

    #[test]
    fn the_dwell_still_holds_between_two_live_reasons() {
        // Capture on slot 2 at 0.5 s; slot 2 goes on at 20 calls a second
        // while slot 3 surges at 500: slot 3 qualifies at once, slot 2
        // does not, but slot 2 is live, so capture waits out the dwell.
        let mut t = Trigger::new(cfg(), None);
        assert_eq!(at(&mut t, 0.5, &[(2, 100)]), Some(Switch::Start(2)));
        let mut moved = None;
        for i in 11..=40u64 {
            let now = i as f64 / 20.0;
            let n2 = 100 + (i - 10);
            let n3 = 25 * (i - 10);
            if let Some(sw) = at(&mut t, now, &[(2, n2), (3, n3)]) {
                moved = Some((i, sw));
                break;
            }
        }
        assert_eq!(moved, Some((30, Switch::Move { from: 2, to: 3 })));
    }

    #[test]
    fn reasons_burst_whatever_their_share() {
        // 100 calls of slot 2 in 0.3 s take capture; then 20 of slot 3 in
        // one tick: a twentieth of the window's calls, but a burst.
        let mut t = Trigger::new(cfg(), None);
        assert_eq!(at(&mut t, 0.3, &[(2, 100)]), Some(Switch::Start(2)));
        assert_eq!(t.bursting(), [2]);
        assert_eq!(at(&mut t, 0.35, &[(2, 100), (3, 20)]), None);
        assert_eq!(t.bursting(), [2, 3]);
        assert_eq!(t.target(), Some(2));
        // Fewer than --min-events: no burst.
        assert_eq!(at(&mut t, 0.4, &[(2, 100), (3, 20), (4, 9)]), None);
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
        assert_eq!(at(&mut t, 2.0, &[(2, 100)]), None);
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
        assert_eq!(at(&mut t, 1.0, &[(2, 100)]), None);
        assert_eq!(t.target(), None);
        let mut t = Trigger::new(cfg(), Some(4));
        assert_eq!(t.target(), Some(4));
        assert!(!t.auto());
        assert_eq!(at(&mut t, 1.0, &[(2, 100)]), None);
        let mut t = Trigger::new(cfg(), None);
        assert_eq!(at(&mut t, 1.0, &[(SLOT_NOT_FOUND, 100)]), None);
        assert_eq!(at(&mut t, 2.0, &[(SLOT_NOT_FOUND, 190), (2, 10)]), None);
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
        assert_eq!(at(&mut t, 1.0, &[(2, 99)]), None);
        assert_eq!(at(&mut t, 1.1, &[(2, 110)]), Some(Switch::Start(2)));
    }
}
