//! When stack capture switches on by itself, and for which reason.

use crate::reasons::Reasons;
use crate::session::rates::Interval;

/// A change of the reason whose stacks are captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Switch {
    Start(u32),
    Move { from: u32, to: u32 },
}

/// Watches each interval for a reason at or above the threshold.
#[derive(Debug, Clone)]
pub(crate) struct Trigger {
    threshold: f64,
    min_events: u64,
    auto: bool,
    target: Option<u32>,
}

impl Trigger {
    /// `pinned` is a reason chosen with --stack-on: captured from the start
    /// and never moved away from.
    pub(crate) fn new(threshold: f64, min_events: u64, auto: bool, pinned: Option<u32>) -> Self {
        Trigger {
            threshold,
            min_events,
            auto: auto && pinned.is_none(),
            target: pinned,
        }
    }

    pub(crate) fn threshold(&self) -> f64 {
        self.threshold
    }

    pub(crate) fn target(&self) -> Option<u32> {
        self.target
    }

    /// The switch an interval calls for, if any: its hottest reason has at
    /// least `threshold` percent of the calls and at least `min_events`
    /// calls, and is not the one captured already.
    pub(crate) fn observe(&mut self, iv: &Interval) -> Option<Switch> {
        if !self.auto {
            return None;
        }
        let hot = iv.rows.iter().find(|r| !Reasons::is_special(r.slot))?;
        if hot.share < self.threshold || hot.count < self.min_events {
            return None;
        }
        let switch = match self.target {
            None => Switch::Start(hot.slot),
            Some(t) if t != hot.slot => Switch::Move {
                from: t,
                to: hot.slot,
            },
            Some(_) => return None,
        };
        self.target = Some(hot.slot);
        Some(switch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::abi::SLOT_NOT_FOUND;

    fn iv(counts: &[(u32, u64)]) -> Interval {
        let mut d = vec![0u64; 8];
        for &(s, n) in counts {
            d[s as usize] = n;
        }
        Interval::from_deltas(&d, 1.0)
    }

    #[test]
    fn starts_exactly_at_the_threshold() {
        let mut t = Trigger::new(80.0, 10, true, None);
        assert_eq!(t.observe(&iv(&[(2, 79), (3, 21)])), None);
        assert_eq!(t.observe(&iv(&[(2, 80), (3, 20)])), Some(Switch::Start(2)));
        assert_eq!(t.target(), Some(2));
        // Staying hot changes nothing.
        assert_eq!(t.observe(&iv(&[(2, 90), (3, 10)])), None);
    }

    #[test]
    fn needs_min_events() {
        let mut t = Trigger::new(80.0, 100, true, None);
        assert_eq!(t.observe(&iv(&[(2, 99)])), None);
        assert_eq!(t.observe(&iv(&[(2, 100)])), Some(Switch::Start(2)));
    }

    #[test]
    fn moves_to_a_new_hot_reason_and_keeps_the_old_one_when_nothing_is_hot() {
        let mut t = Trigger::new(80.0, 1, true, None);
        t.observe(&iv(&[(2, 100)]));
        assert_eq!(t.observe(&iv(&[(2, 50), (3, 50)])), None);
        assert_eq!(t.target(), Some(2));
        assert_eq!(
            t.observe(&iv(&[(2, 5), (3, 95)])),
            Some(Switch::Move { from: 2, to: 3 })
        );
    }

    #[test]
    fn no_auto_never_switches() {
        let mut t = Trigger::new(80.0, 1, false, None);
        assert_eq!(t.observe(&iv(&[(2, 100)])), None);
        assert_eq!(t.target(), None);
    }

    #[test]
    fn a_pinned_reason_is_kept() {
        let mut t = Trigger::new(80.0, 1, true, Some(4));
        assert_eq!(t.target(), Some(4));
        assert_eq!(t.observe(&iv(&[(2, 100)])), None);
        assert_eq!(t.target(), Some(4));
    }

    #[test]
    fn special_slots_are_never_targets() {
        let mut t = Trigger::new(80.0, 1, true, None);
        assert_eq!(t.observe(&iv(&[(SLOT_NOT_FOUND, 100)])), None);
        assert_eq!(t.observe(&iv(&[(SLOT_NOT_FOUND, 90), (2, 10)])), None);
    }

    #[test]
    fn empty_interval_changes_nothing() {
        let mut t = Trigger::new(80.0, 0, true, None);
        assert_eq!(t.observe(&iv(&[])), None);
    }
}
