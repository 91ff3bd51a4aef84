//! The loop's pace: how often it polls and refills the stack budget, and
//! the wall clock.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often the counters are read for the trigger, whatever the print
/// interval; also the longest sleep between checks of the stop flag. One
/// read costs one syscall per map (and one per pending call site): about
/// 0.1 ms with 256 CPUs.
pub(super) const TICK: Duration = Duration::from_millis(50);

/// How often the stack budget is refilled: --max-rate is per second.
pub(super) const REFILL: Duration = Duration::from_secs(1);

/// The stack budget per CPU and refill: the BPF side keeps one budget per
/// CPU so the hot path needs no shared state. Split over the CPUs online
/// (the possible ones can be many more: a machine with room for 256 CPUs
/// and 8 online would get a 32nd of --max-rate). Rounded up, and at least 1.
pub(super) fn per_cpu_budget(max_rate: u64, cpus: usize) -> u64 {
    max_rate.div_ceil(cpus.max(1) as u64).max(1)
}

/// The stack budgets a refill gives each CPU: each captured reason's, an
/// even share of one budget and, for a uprobe, the allowance of its calls
/// from sites not resolved yet (sent untagged: no one can tell whose they
/// are before user space names the site), as large as the whole budget and
/// apart, so the untagged calls never spend the reasons' own. A site's calls past its first few leave a quarter of the
/// allowance to the other sites' first calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Budget {
    /// Stacks a CPU may send a refill, for the reasons together and for
    /// the allowance.
    pub(super) per_cpu: u64,
    /// Whether untagged calls have an allowance (a uprobe's).
    pub(super) untagged: bool,
}

impl Budget {
    pub(super) fn new(max_rate: u64, cpus: usize, uprobe: bool) -> Budget {
        Budget {
            per_cpu: per_cpu_budget(max_rate, cpus),
            untagged: uprobe,
        }
    }

    /// Each of `n` reasons captured at once gets this share of a CPU's
    /// budget: one budget, shared evenly. Rounded up, and at least 1.
    pub(super) fn share(&self, n: usize) -> u64 {
        self.per_cpu.div_ceil(n.max(1) as u64).max(1)
    }

    /// Refills the budgets of the captured reasons `slots`, each an even
    /// share of `among` reasons captured at once (and the untagged calls'
    /// allowance, for a uprobe).
    pub(super) fn refill(
        &self,
        maps: &crate::bpf::maps::Maps,
        slots: &[u32],
        among: usize,
    ) -> crate::error::Result<()> {
        let share = self.share(among);
        for &slot in slots {
            maps.refill(slot, share, 0)?;
        }
        if self.untagged {
            let keep = self.per_cpu / 4;
            maps.refill(crate::bpf::abi::SLOT_NONE, self.per_cpu, keep)?;
        }
        Ok(())
    }
}

/// When the stack budgets are refilled next: a second after the last
/// refill while something is captured, and within a second of a change of
/// what is captured. A new reason gets its share as it starts; the others
/// keep theirs until the refill, which changes, however often they come,
/// never put off.
#[derive(Debug, Clone, Copy)]
pub(super) struct Refills {
    next: Instant,
}

impl Refills {
    pub(super) fn new(now: Instant) -> Refills {
        Refills { next: now + REFILL }
    }

    /// When the next refill is due (while something is captured).
    pub(super) fn next(&self) -> Instant {
        self.next
    }

    /// What is captured changed at `now`.
    pub(super) fn changed(&mut self, now: Instant) {
        self.next = self.next.min(now + REFILL);
    }

    /// Whether a refill is due at `now`, `capturing` being whether
    /// anything is captured; if so, the next is a second on. With nothing
    /// captured none is, and the next is at most a second after the
    /// capture that comes.
    pub(super) fn due(&mut self, now: Instant, capturing: bool) -> bool {
        if !capturing {
            self.next = now + REFILL;
            return false;
        }
        if now < self.next {
            return false;
        }
        self.next = now + REFILL;
        true
    }
}

/// Seconds since the epoch, for the reports' timestamps.
pub(super) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stack_cap_is_split_over_cpus_rounding_up() {
        assert_eq!(per_cpu_budget(1000, 2), 500);
        assert_eq!(per_cpu_budget(1001, 2), 501);
        assert_eq!(per_cpu_budget(1, 64), 1);
        assert_eq!(per_cpu_budget(10, 0), 10);
    }

    #[test]
    fn reasons_captured_at_once_share_the_budget_evenly() {
        let b = Budget::new(1000, 2, false);
        assert_eq!(b.share(1), 500);
        assert_eq!(b.share(2), 250);
        assert_eq!(b.share(3), 167);
        assert_eq!(b.share(0), 500);
        assert_eq!(Budget::new(1, 2, false).share(4), 1);
    }

    #[test]
    fn changes_of_capture_never_put_a_refill_off() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut r = Refills::new(t0);
        // Changes every 400 ms: still a refill each second.
        let mut refills = Vec::new();
        for ms in (50..=3000).step_by(50) {
            if ms % 400 == 0 {
                r.changed(at(ms));
            }
            if r.due(at(ms), true) {
                refills.push(ms);
            }
        }
        assert_eq!(refills, vec![1000, 2000, 3000]);
    }

    #[test]
    fn after_a_spell_with_nothing_captured_a_refill_comes_within_a_second() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut r = Refills::new(t0);
        for ms in (50..=5000).step_by(50) {
            assert!(!r.due(at(ms), false));
        }
        // Capture starts at 5050 ms: a refill within the second.
        r.changed(at(5050));
        assert!(!r.due(at(5100), true));
        assert!(!r.due(at(5950), true));
        assert!(r.due(at(6000), true));
        assert_eq!(r.next(), at(7000));
        // A change right after a refill does not bring the next one forward.
        r.changed(at(6100));
        assert_eq!(r.next(), at(7000));
    }

    #[test]
    fn a_uprobes_untagged_calls_get_an_allowance_as_large_as_the_reasons() {
        assert_eq!(
            Budget::new(1000, 2, false),
            Budget {
                per_cpu: 500,
                untagged: false
            }
        );
        assert_eq!(
            Budget::new(1000, 2, true),
            Budget {
                per_cpu: 500,
                untagged: true
            }
        );
    }
}
