//! Tier 2 through the maps: the stack statistics and budgets, the ring
//! buffer, and capture switched on and off (the control block's part is
//! `ctl`'s).

use super::*;

impl Maps {
    /// The statistics, read on their own (a poll takes the stack
    /// counters from the counter array it read: Poller::stats).
    #[cfg(test)]
    pub(crate) fn stats(&self) -> Result<percpu::Stats> {
        let (mut stats, mut counts) = (PerCpu::default(), PerCpu::default());
        self.read_stats(&mut stats)?;
        self.read_counts(&mut counts)?;
        Ok(percpu::Stats::from_percpu(
            &stats,
            &percpu::counts_of(&counts),
        ))
    }

    /// Reads the per-CPU statistics array into `out` (the stack path's
    /// counters are in the counter array).
    pub(crate) fn read_stats(&self, out: &mut PerCpu) -> Result<()> {
        lookup_percpu(&self.stats, &ZERO_KEY, out)
            .map_err(|e| Error::bpf("reading the statistics", e))
    }

    /// Each reason's stack path counters summed over the CPUs, by slot
    /// (index NR_SLOTS: untagged calls from sites not resolved yet), each
    /// indexed by StackStat; `slots`: which to read (the others are 0).
    pub(crate) fn reason_stacks(
        &self,
        slots: impl IntoIterator<Item = u32>,
    ) -> Result<Vec<[u64; abi::NR_STACK_STATS]>> {
        let mut out = vec![[0; abi::NR_STACK_STATS]; abi::NR_SLOTS + 1];
        let mut buf = PerCpu::default();
        for slot in slots {
            let Some(row) = out.get_mut(slot as usize) else {
                continue;
            };
            lookup_percpu(&self.rstacks, &slot.to_ne_bytes(), &mut buf)
                .map_err(|e| Error::bpf("reading the stack counters of a reason", e))?;
            *row = buf.sum::<{ abi::NR_STACK_STATS }>();
        }
        Ok(out)
    }

    /// Lets each CPU send up to `per_cpu` more stacks of reason `slot`
    /// (SLOT_NONE: a uprobe's untagged calls, their allowance, of which a
    /// site's later calls leave `keep`: see td_budget). The budget is
    /// replaced, not added to: what a CPU did not use is gone.
    pub(crate) fn refill(&self, slot: u32, per_cpu: u64, keep: u64) -> Result<()> {
        let cpus = libbpf_rs::num_possible_cpus()
            .map_err(|e| Error::bpf("counting the possible CPUs", e))?;
        // td_budget: left, then keep (abi.rs checks its size).
        let value = [per_cpu.to_ne_bytes(), keep.to_ne_bytes()].concat();
        let values = vec![value; cpus];
        let key = abi::stack_index(slot).to_ne_bytes();
        self.budget
            .update_percpu(&key, &values, MapFlags::ANY)
            .map_err(|e| Error::bpf("refilling the stack budget", e))
    }

    /// Refills every reason's budget (and the untagged calls' allowance).
    #[cfg(test)]
    pub(crate) fn refill_every(&self, per_cpu: u64) -> Result<()> {
        (0..abi::NR_SLOTS as u32)
            .chain([abi::SLOT_NONE])
            .try_for_each(|slot| self.refill(slot, per_cpu, 0))
    }

    /// A handle on the sample ring buffer.
    pub(crate) fn samples(&self) -> Result<MapHandle> {
        MapHandle::try_from(&self.samples)
            .map_err(|e| Error::bpf("opening the sample ring buffer", e))
    }

    /// Captures no reason's stacks from now on.
    pub(crate) fn stop_capture(&self) -> Result<()> {
        self.capture_set(&[])
    }

    /// Captures the stacks of the reasons in `set` from now on (see
    /// `Control::capture`), their cached sites flagged: their calls leave
    /// the common path for the stack gate, and no other reason's do.
    pub(crate) fn capture_set(&self, set: &[Captured]) -> Result<()> {
        self.ctl.capture(set)?;
        let slots: Vec<u32> = set.iter().map(|c| c.slot).collect();
        self.flag_sites(&slots, false);
        Ok(())
    }

    /// Leaves out the calls of process `tgid` (see `Control::own`).
    pub(crate) fn own(&self, tgid: u32) {
        self.ctl.own(tgid);
    }

    /// Whether a call site was first counted as pending since the last
    /// call (see `Control::take_new_sites`).
    pub(crate) fn take_new_sites(&self) -> bool {
        self.ctl.take_new_sites()
    }

    /// Takes `pid` out of the pid filter: its process exited, and a new one
    /// given the same pid must not count.
    pub(crate) fn drop_pid(&self, pid: u32) -> Result<()> {
        let Some(m) = &self.pids else { return Ok(()) };
        let fail = |e| Error::bpf("updating the pid filter", e);
        let list = m.lookup(&ZERO_KEY, MapFlags::ANY).map_err(fail)?;
        match list.and_then(|l| abi::pid_dropped(&l, pid)) {
            Some(v) => m.update(&ZERO_KEY, &v, MapFlags::ANY).map_err(fail),
            None => Ok(()),
        }
    }

    /// The reasons whose stacks are being captured, by slot.
    pub(crate) fn capturing(&self) -> Vec<u32> {
        self.ctl.capturing()
    }

    /// See `Control::site_cell_ptr`.
    #[cfg(test)]
    pub(crate) fn site_cell_ptr(&self, ret: u64, slot: u32) -> (*mut u64, u64) {
        self.ctl.site_cell_ptr(ret, slot)
    }

    /// Steers as a pinned instance's reader does: under a lease.
    #[cfg(test)]
    pub(crate) fn take_leases(&mut self) {
        self.ctl.take_leases();
    }

    /// The raw control block and watch key (see `Control::control_ptr`).
    #[cfg(test)]
    pub(crate) fn control_ptr(&self) -> (*mut types::td_control, *mut types::td_watch) {
        self.ctl.control_ptr()
    }
}
