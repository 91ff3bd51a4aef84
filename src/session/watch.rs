//! `topdown serve --capture`: a live run's trigger on one pinned
//! instance, with no terminal. The same trigger (threshold, min-rate,
//! min-events over the last second, checked every tick), the same budget
//! refilled every second, the same switch of the kernel side's capture and
//! the same symbolization as `session::run`; what it captures goes to the
//! caller instead of a summary.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::bpf::abi::{NR_SLOTS, NR_STACK_STATS};
use crate::bpf::ctl::mono_ns;
use crate::bpf::pin::{Instance, Lock};
use crate::bpf::probe::{Mode, Probe};
use crate::error::Result;
use crate::kallsyms::Kallsyms;
use crate::reasons::Mapper;
use crate::report::{Gate, Process, Stack};
use crate::symbolize::Symbols;

use super::background::Kept;
use super::capture::Capture;
use super::ksyms::LiveKsyms;
use super::poll::Poller;
use super::stacks::Stacks;
use super::state::{gate, since_gates};
use super::timing::{Budget, Refills, REFILL, TICK};
use super::trigger::announcements;
use super::trigger::{Trigger, TriggerConfig};

/// A stack captured by a watch.
#[derive(Debug, Clone)]
pub(crate) struct Captured {
    pub(crate) reason: String,
    pub(crate) stack: Stack,
    pub(crate) process: Process,
}

/// One pinned instance watched: its counters polled every tick, its
/// capture steered (it holds the instance's reader lock).
pub(crate) struct Watch {
    func: String,
    instance: u64,
    probe: Probe<'static>,
    mapper: Mapper,
    poller: Poller,
    trigger: Trigger,
    stacks: Stacks,
    start: Instant,
    next_tick: Instant,
    refills: Refills,
    budget: Budget,
    /// The pinned program has the background sampler: the site cache is
    /// flagged for it every tick.
    background: bool,
    /// The stack path's counters per reason when the watch began; the
    /// reasons captured since, with their stacks shown; their gate counts
    /// as last read (taken by take_gates), and when to read them next.
    base_gates: Vec<[u64; NR_STACK_STATS]>,
    shown: BTreeMap<u32, u64>,
    gates: Option<Vec<(String, Gate)>>,
    next_gates: Instant,
    _lock: Lock,
}

impl Watch {
    /// Starts watching `inst` (`instance`, its lock taken), from its
    /// counts now.
    pub(crate) fn new(
        mut inst: Instance,
        instance: u64,
        lock: Lock,
        mut mapper: Mapper,
        cfg: TriggerConfig,
        max_rate: u64,
        ksyms: &Kallsyms,
    ) -> Result<Watch> {
        // From here on the probe's Drop puts back what is changed.
        inst.probe.steer();
        // A reader killed earlier may have left capture on.
        inst.probe.maps().stop_capture()?;
        inst.probe.maps().own(0);
        let mut poller = Poller::default();
        // serve reads the symbols again itself (KsymsCache).
        let fixed = &mut LiveKsyms::fixed(ksyms);
        let base = poller.totals(inst.probe.maps(), fixed, &mut mapper, None)?;
        let mut trigger = Trigger::new(TriggerConfig { auto: true, ..cfg }, None);
        trigger.start_from(&base);
        let capture = Some(Capture::new(inst.probe.maps().samples()?)?);
        let base_gates = inst.probe.maps().reason_stacks(0..=NR_SLOTS as u32)?;
        let meta = &inst.meta;
        let now = Instant::now();
        let uprobe = inst.probe.mode() == Mode::Uprobe;
        Ok(Watch {
            func: meta.function.clone(),
            instance,
            stacks: Stacks {
                capture,
                symbols: Symbols::new(meta.vmlinux.clone(), false),
                func_addr: meta.func_addr,
                user_target: uprobe,
                kept: Kept::default(),
                untagged_shown: Default::default(),
            },
            background: meta.background > 0,
            probe: inst.probe,
            mapper,
            poller,
            trigger,
            start: now,
            next_tick: now + TICK,
            refills: Refills::new(now),
            budget: Budget::new(max_rate, crate::host::online_cpus(), uprobe),
            base_gates,
            shown: BTreeMap::new(),
            gates: None,
            next_gates: now + REFILL,
            _lock: lock,
        })
    }

    pub(crate) fn func(&self) -> &str {
        &self.func
    }

    /// Which instance it watches (`pin::instance_id`): another one pinned
    /// now means a re-pin, and this watch reads the old one.
    pub(crate) fn instance(&self) -> u64 {
        self.instance
    }

    /// The reasons captured now, oldest first.
    pub(crate) fn targets(&self) -> Vec<String> {
        self.trigger
            .targets()
            .into_iter()
            .map(|s| self.mapper.reasons.name(s).to_string())
            .collect()
    }

    /// The gate counts of the reasons captured since the watch began, if
    /// read again since the last call.
    pub(crate) fn take_gates(&mut self) -> Option<Vec<(String, Gate)>> {
        self.gates.take()
    }

    /// Reads the gate counts of the reasons captured (see take_gates).
    fn read_gates(&mut self) -> Result<()> {
        let now = self
            .probe
            .maps()
            .reason_stacks(self.shown.keys().copied())?;
        let rows = since_gates(&now, &self.base_gates);
        let names = &self.mapper.reasons;
        self.gates = Some(
            self.shown
                .iter()
                .map(|(&slot, &shown)| {
                    // Every stack of a reason this reader has read is
                    // shown. One sent but not read yet is in flight: as
                    // not kept (sent less shown) it would leave that
                    // counter once read, and /metrics's counters only
                    // grow. So it is in no outcome, nor in the calls,
                    // until it is read.
                    let mut g = Gate {
                        not_kept: 0,
                        ..gate(&rows[slot as usize], shown)
                    };
                    g.calls = g.accounted();
                    (names.name(slot).to_string(), g)
                })
                .collect(),
        );
        Ok(())
    }

    /// When `step` has work next.
    pub(crate) fn due(&self) -> Instant {
        self.next_tick.min(self.refills.next())
    }

    /// One step: the stacks delivered since the last, then, if a tick is
    /// due, the counters and the trigger's decision (with the lines that
    /// announce its changes), and the budgets refilled each second while
    /// capturing.
    pub(crate) fn step(&mut self, ksyms: &Kallsyms) -> Result<(Vec<Captured>, Vec<String>)> {
        // serve's own calls are left out while it works, as a live run's
        // are; each change renews this reader's lease on the state it set.
        self.probe.maps().own(std::process::id());
        let stepped = self.step_owned(ksyms);
        self.probe.maps().own(0);
        stepped
    }

    fn step_owned(&mut self, ksyms: &Kallsyms) -> Result<(Vec<Captured>, Vec<String>)> {
        if let Some(c) = &self.stacks.capture {
            c.drain()?;
        }
        let targets = self.trigger.targets();
        let (mut taken, background) =
            self.stacks
                .take(self.probe.maps(), ksyms, &mut self.mapper, &targets);
        for (slot, ..) in &taken {
            *self.shown.entry(*slot).or_default() += 1;
        }
        taken.extend(background);
        let now = Instant::now();
        let mut said = Vec::new();
        if now >= self.next_tick {
            let cur = self.poller.totals(
                self.probe.maps(),
                &mut LiveKsyms::fixed(ksyms),
                &mut self.mapper,
                Some(&mut self.stacks.symbols),
            )?;
            let secs = (now - self.start).as_secs_f64();
            let changes = self.trigger.observe(secs, &cur);
            // As in a live run (Run::tick).
            self.probe
                .maps()
                .flag_sites(&self.probe.maps().capturing(), self.background);
            if self.background {
                taken.extend(self.stacks.background_tick(
                    self.probe.maps(),
                    ksyms,
                    self.trigger.bursting(),
                    mono_ns(),
                ));
            }
            if !changes.is_empty() {
                let targets = self.trigger.targets();
                said = announcements(
                    &changes,
                    &targets,
                    &self.mapper.reasons,
                    self.trigger.threshold(),
                )
                .into_iter()
                .map(|l| format!("{}: {l}", self.func))
                .collect();
                // As in a live run (Run::tick).
                self.stacks.apply(
                    &mut self.probe,
                    ksyms,
                    &self.mapper,
                    &self.budget,
                    &changes,
                    &targets,
                )?;
                for c in changes.iter().filter(|c| c.start) {
                    self.shown.entry(c.slot).or_default();
                }
                self.refills.changed(now);
            }
            while self.next_tick <= now {
                self.next_tick += TICK;
            }
        }
        if self.refills.due(now, self.trigger.capturing()) {
            let targets = self.trigger.targets();
            self.budget
                .refill(self.probe.maps(), &targets, targets.len())?;
        }
        if now >= self.next_gates && !self.shown.is_empty() {
            self.read_gates()?;
            self.next_gates = now + REFILL;
        }
        let names = &self.mapper.reasons;
        let got = taken
            .into_iter()
            .map(|(slot, stack, process, _)| Captured {
                reason: names.name(slot).to_string(),
                stack,
                process,
            })
            .collect();
        Ok((got, said))
    }
}
