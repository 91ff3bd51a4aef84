//! Tier 2 I/O of a run: the ring buffer of stack samples, and their
//! symbolization into the run's state.

use std::collections::HashMap;
use std::time::Duration;

use crate::bpf::abi::{ENTRY_WINDOW, MAX_STACK_RANGES, SLOT_NONE};
use crate::bpf::ctl::Captured;
use crate::bpf::maps::Maps;
use crate::bpf::probe::Probe;
use crate::bpf::sample::UserFrame;
use crate::error::Result;
use crate::kallsyms::Kallsyms;
use crate::reasons::{Mapper, SourceLookup, UNKNOWN_NAME};
use crate::report::{Process, Stack};
use crate::symbolize::Symbols;

use super::background::{Kept, KEEP_NS};
use super::capture::{self, Capture};
use super::state::State;
use super::timing::Budget;
use super::trigger::Change;

/// A symbolized stack: (reason slot, stack, process, kernel time).
pub(super) type Taken = (u32, Stack, Process, u64);

/// Tier 2 I/O: the ring buffer, and symbolization.
pub(super) struct Stacks {
    pub(super) capture: Option<Capture>,
    pub(super) symbols: Symbols,
    pub(super) func_addr: u64,
    /// A uprobe's: stacks are user stacks only.
    pub(super) user_target: bool,
    /// The background sampler's stacks, until their reason qualifies.
    pub(super) kept: Kept,
    /// A uprobe's untagged stacks shown, by the reason they were found to
    /// be (see End::untagged_shown).
    pub(super) untagged_shown: HashMap<u32, u64>,
}

impl Stacks {
    /// Points the kernel side's capture at the reasons `slots` (oldest
    /// first) and their caller ranges (for call sites not resolved yet):
    /// stores to mapped memory. Where the ranges do not all fit, the
    /// newest reasons' come first.
    pub(super) fn capture(
        &mut self,
        probe: &mut Probe<'_>,
        ksyms: &Kallsyms,
        mapper: &Mapper,
        slots: &[u32],
    ) -> Result<()> {
        let mut room = MAX_STACK_RANGES;
        let mut set: Vec<Captured> = slots
            .iter()
            .rev()
            .enumerate()
            .map(|(i, &slot)| {
                let mut callers: Vec<(u64, u64)> = mapper
                    .callers_of(slot)
                    .into_iter()
                    .flat_map(|c| ksyms.function(c).map(|s| (s.addr, s.end)))
                    .collect();
                // The newest reason's all: too many are refused as before.
                if i > 0 {
                    callers.truncate(room);
                }
                room = room.saturating_sub(callers.len());
                Captured { slot, callers }
            })
            .collect();
        set.reverse();
        probe.stacks_on(&set)
    }

    /// Puts a tick's `changes` of capture into the kernel side, `targets`
    /// being the reasons captured after them: the new reasons' budgets
    /// first (a call between the two would find none), then the set. The
    /// others keep what is left of theirs until the next refill, which
    /// gives each its share.
    pub(super) fn apply(
        &mut self,
        probe: &mut Probe<'_>,
        ksyms: &Kallsyms,
        mapper: &Mapper,
        budget: &Budget,
        changes: &[Change],
        targets: &[u32],
    ) -> Result<()> {
        let started: Vec<u32> = changes.iter().filter(|c| c.start).map(|c| c.slot).collect();
        budget.refill(probe.maps(), &started, targets.len())?;
        self.capture(probe, ksyms, mapper, targets)
    }

    /// Waits up to `timeout` for samples (`absorb` takes them).
    pub(super) fn wait(&mut self, timeout: Duration) -> Result<()> {
        match &self.capture {
            Some(c) => c.wait(timeout),
            None => {
                std::thread::sleep(timeout);
                Ok(())
            }
        }
    }

    pub(super) fn absorb(
        &mut self,
        maps: &Maps,
        ksyms: &Kallsyms,
        mapper: &mut Mapper,
        state: &mut State,
    ) {
        let targets = state.targets();
        let (captured, background) = self.take(maps, ksyms, mapper, &targets);
        for (reason, stack, process, ts) in captured {
            state.add_stack(reason, stack, process, ts, false);
        }
        for (reason, stack, process, ts) in background {
            state.add_stack(reason, stack, process, ts, true);
        }
    }

    /// The samples delivered so far, symbolized: (reason slot, stack,
    /// process, kernel time), the capture's and the background sampler's
    /// of `targets`, the reasons captured now. The background sampler's of
    /// other reasons are kept, not returned (see `publish`).
    pub(super) fn take(
        &mut self,
        maps: &Maps,
        ksyms: &Kallsyms,
        mapper: &mut Mapper,
        targets: &[u32],
    ) -> (Vec<Taken>, Vec<Taken>) {
        let Some(c) = &self.capture else {
            return (Vec::new(), Vec::new());
        };
        let mut samples = c.take();
        // Keep the mappings of new processes first: a short-lived one may
        // exit while the kernel frames are being symbolized, or before its
        // background stacks are shown.
        for s in samples.iter().filter(|s| !s.ustack.is_empty()) {
            self.symbols.remember_process(s.pid);
            // Its program by name, in case it had gone already.
            if s.ustack.iter().any(|f| f.addr().is_none()) {
                self.symbols.know_command(&s.comm);
            }
        }
        if self.user_target {
            // A uprobe's calls from sites not resolved yet come untagged:
            // named now, while their process may still be there.
            for s in samples.iter_mut().filter(|s| s.reason == SLOT_NONE) {
                let name = self
                    .symbols
                    .user_caller(s.pid, s.caller, &|| maps.user_process(s.pid));
                s.reason = mapper.classify_name(name.as_deref().unwrap_or(UNKNOWN_NAME));
                // Shown below, and counted apart from the reason's own.
                if !s.background && targets.contains(&s.reason) {
                    *self.untagged_shown.entry(s.reason).or_default() += 1;
                }
            }
        }
        let (background, captured): (Vec<_>, Vec<_>) =
            samples.into_iter().partition(|s| s.background);
        // The captured reasons' are shown now (a uprobe's calls from sites
        // not resolved yet, named above); the others kept.
        let mut now = Vec::new();
        for s in background {
            if targets.contains(&s.reason) {
                now.push(s);
            } else {
                self.kept.keep(s);
            }
        }
        // A uprobe's untagged calls are kept if their caller is a reason
        // being captured.
        let captured = captured
            .into_iter()
            .filter(|s| !self.user_target || targets.contains(&s.reason))
            .collect();
        (self.symbolize(ksyms, captured), self.symbolize(ksyms, now))
    }

    /// The background sampler's tick, at `now_ns`: files the kept stacks
    /// of sites resolved since, lets go of those too old to show, and
    /// returns, symbolized, the kept stacks of the reasons `bursting` now
    /// (captured or not: their share, or the dwell, may keep capture
    /// elsewhere).
    pub(super) fn background_tick(
        &mut self,
        maps: &Maps,
        ksyms: &Kallsyms,
        bursting: &[u32],
        now_ns: u64,
    ) -> Vec<Taken> {
        self.kept
            .resolve(now_ns, |ret| maps.site(ret).ok().flatten());
        self.kept.expire(now_ns);
        let since = now_ns.saturating_sub(KEEP_NS);
        let samples = bursting
            .iter()
            .flat_map(|&q| self.kept.take(q, since))
            .collect();
        self.symbolize(ksyms, samples)
    }

    fn symbolize(
        &mut self,
        ksyms: &Kallsyms,
        samples: Vec<crate::bpf::sample::Sample>,
    ) -> Vec<Taken> {
        samples
            .into_iter()
            .map(|s| {
                let (kernel, user) = if self.user_target {
                    // The kernel stack is the trap's. The user one, taken at
                    // FUNC's first instruction, is FUNC then (by frame
                    // pointers) the caller's caller: the caller is put back.
                    let frames: Vec<UserFrame> = std::iter::once(UserFrame::Addr(s.caller))
                        .chain(s.ustack.iter().skip(1).copied())
                        .collect();
                    (Vec::new(), self.symbols.user(s.pid, &frames, false))
                } else {
                    let frames =
                        capture::above_entry(&s.kstack, self.func_addr, ENTRY_WINDOW, s.caller);
                    let kernel = self.symbols.kernel(ksyms, &frames);
                    // Its first user frame is where the system call was made.
                    (kernel, self.symbols.user(s.pid, &s.ustack, true))
                };
                let process = Process {
                    comm: s.comm,
                    pid: s.pid,
                };
                (s.reason, Stack { kernel, user }, process, s.ts)
            })
            .collect()
    }

    pub(super) fn drain(
        &mut self,
        maps: &Maps,
        ksyms: &Kallsyms,
        mapper: &mut Mapper,
        state: &mut State,
    ) -> Result<()> {
        if let Some(c) = &self.capture {
            c.drain()?;
        }
        self.absorb(maps, ksyms, mapper, state);
        Ok(())
    }
}
