//! The interval loop: poll the counters, print each interval, switch stack
//! capture on when a reason dominates, and at the end (Ctrl-C, SIGTERM,
//! SIGHUP or --duration) detach and print the summary.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::kallsyms::Kallsyms;
use crate::output::{self, Drops, StackRow, StackSet, Summary, Verify};
use crate::poll::Poller;
use crate::probe::Probe;
use crate::rates::Interval;
use crate::reasons::{Mapper, NR_SLOTS, SLOT_NOT_FOUND, SLOT_SITES_FULL};
use crate::stacks::{self, Capture, Stack, Tally};
use crate::symbolize::Symbols;
use crate::trigger::{Switch, Trigger};

/// How the loop reports and when it captures stacks.
#[derive(Debug, Clone)]
pub struct Options {
    pub interval: Duration,
    pub duration: Option<Duration>,
    pub json: bool,
    pub quiet: bool,
    pub verify_caller: bool,
    /// Traced function's entry and the window its entry frame lies in.
    pub func_addr: u64,
    pub entry_window: u64,
    pub threshold: f64,
    pub min_events: u64,
    pub auto: bool,
    /// Reason slot chosen with --stack-on.
    pub stack_on: Option<u32>,
    pub top: usize,
    pub folded: Option<PathBuf>,
    pub vmlinux: Option<PathBuf>,
    pub verbose: bool,
}

/// Longest sleep between checks of the stop flag.
const TICK: Duration = Duration::from_millis(100);

/// Tier 2 state: the ring buffer once opened, and stacks per reason.
struct StackMode {
    capture: Option<Capture>,
    symbols: Symbols,
    tallies: HashMap<u32, Tally>,
    /// Reasons in the order capture reached them.
    order: Vec<u32>,
    func_addr: u64,
    window: u64,
}

impl StackMode {
    fn switch_on(
        &mut self,
        probe: &mut Probe<'_>,
        ksyms: &Kallsyms,
        mapper: &Mapper,
        slot: u32,
    ) -> Result<()> {
        let ranges: Vec<(u64, u64)> = mapper
            .callers_of(slot)
            .into_iter()
            .flat_map(|c| ksyms.function(c).map(|s| (s.addr, s.end)))
            .collect();
        probe.stacks_on(slot, &ranges)?;
        if !self.order.contains(&slot) {
            self.order.push(slot);
        }
        if self.capture.is_none() {
            self.capture = Some(Capture::new(probe.samples_map()?)?);
            // Parse kallsyms now rather than when the first samples wait.
            self.symbols.kernel(&[self.func_addr + 1]);
        }
        Ok(())
    }

    fn wait(&mut self, timeout: Duration) -> Result<()> {
        match &self.capture {
            Some(c) => c.wait(timeout)?,
            None => std::thread::sleep(timeout),
        }
        self.absorb();
        Ok(())
    }

    /// Symbolizes and counts what the ring buffer delivered.
    fn absorb(&mut self) {
        let Some(c) = &self.capture else { return };
        let samples = c.take();
        // Keep the mappings of new processes first: a short-lived one may
        // exit while the kernel frames are being symbolized.
        for s in samples.iter().filter(|s| !s.ustack.is_empty()) {
            self.symbols.remember_process(s.pid);
        }
        for s in samples {
            let kernel =
                self.symbols
                    .kernel(stacks::above_entry(&s.kstack, self.func_addr, self.window));
            let user = self.symbols.user(s.pid, &s.ustack);
            self.tallies
                .entry(s.reason)
                .or_default()
                .add(Stack { kernel, user });
        }
    }

    fn drain(&mut self) -> Result<()> {
        if let Some(c) = &self.capture {
            c.drain()?;
        }
        self.absorb();
        Ok(())
    }
}

fn emit(out: &mut dyn Write, text: &str) -> Result<()> {
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

pub fn run(
    mut probe: Probe<'_>,
    ksyms: &Kallsyms,
    mapper: &mut Mapper,
    opts: &Options,
    stop: &AtomicBool,
    out: &mut dyn Write,
) -> Result<()> {
    let mut poller = Poller::default();
    let mut trigger = Trigger::new(opts.threshold, opts.min_events, opts.auto, opts.stack_on);
    let mut stacks = StackMode {
        capture: None,
        symbols: Symbols::new(opts.vmlinux.clone(), opts.verbose),
        tallies: HashMap::new(),
        order: Vec::new(),
        func_addr: opts.func_addr,
        window: opts.entry_window,
    };
    if let Some(slot) = opts.stack_on {
        stacks.switch_on(&mut probe, ksyms, mapper, slot)?;
        eprintln!("topdown: capturing stacks of {}", mapper.reasons.name(slot));
    }
    // Everything is attached: from here on every call is seen.
    eprintln!(
        "topdown: Ctrl-C to end{}",
        opts.duration.map_or(String::new(), |d| format!(
            ", or after {}s",
            d.as_secs_f64()
        ))
    );
    let start = Instant::now();
    let end = opts.duration.map(|d| start + d);
    let mut prev = vec![0u64; NR_SLOTS];
    let mut last = start;
    let mut next = start + opts.interval;

    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let deadline = end.map_or(next, |e| e.min(next));
        if now < deadline {
            stacks.wait((deadline - now).min(TICK))?;
            continue;
        }
        let cur = poller.totals(&probe, ksyms, mapper, Some(&mut stacks.symbols))?;
        let iv = Interval::between(&prev, &cur, (now - last).as_secs_f64());
        let target = trigger.target();
        let (captured, rows) = match target {
            Some(t) => stacks.tallies.entry(t).or_default().end_interval(opts.top),
            None => (0, Vec::new()),
        };
        if !opts.quiet {
            emit(
                out,
                &interval_text(opts, &iv, mapper, target, captured, &rows),
            )?;
        }
        if let Some(sw) = trigger.observe(&iv) {
            let (slot, text) = match sw {
                Switch::Start(to) => (to, "capturing its stacks".to_string()),
                Switch::Move { from, to } => (
                    to,
                    format!("moving stack capture from {}", mapper.reasons.name(from)),
                ),
            };
            let share = iv
                .rows
                .iter()
                .find(|r| r.slot == slot)
                .map_or(0.0, |r| r.share);
            eprintln!(
                "topdown: {} has {share:.1}% of calls (threshold {}%): {text}",
                mapper.reasons.name(slot),
                opts.threshold
            );
            stacks.switch_on(&mut probe, ksyms, mapper, slot)?;
        }
        prev = cur;
        last = now;
        while next <= now {
            next += opts.interval;
        }
        if end.is_some_and(|e| now >= e) {
            break;
        }
    }

    // Detach first so the final reading is complete and exact.
    let prog = probe.prog_stats();
    let companion = probe.companion_stats();
    probe.detach();
    let stats = probe.stats()?;
    stacks.drain()?;
    let totals = poller.totals(&probe, ksyms, mapper, Some(&mut stacks.symbols))?;
    let run = Interval::between(&[], &totals, start.elapsed().as_secs_f64());
    let target = trigger.target();
    // Every reason captured, the current one last.
    let mut order = stacks.order.clone();
    if let Some(t) = target {
        order.retain(|&s| s != t);
        order.push(t);
    }
    let empty = Tally::default();
    let tally = |slot: u32| stacks.tallies.get(&slot).unwrap_or(&empty);
    let stack_sets: Vec<StackSet> = order
        .iter()
        .map(|&slot| {
            let (captured, stacks) = tally(slot).run_top(opts.top);
            StackSet {
                reason: mapper.reasons.name(slot).to_string(),
                captured,
                stacks,
            }
        })
        .collect();
    if let Some(path) = &opts.folded {
        let text: String = order
            .iter()
            .map(|&slot| tally(slot).folded(mapper.reasons.name(slot), probe.func()))
            .collect();
        std::fs::write(path, text)
            .map_err(|e| Error::msg(format!("cannot write {}: {e}", path.display())))?;
    }
    let sum = Summary {
        func: probe.func(),
        mode: probe.mode().name(),
        run: &run,
        reasons: &mapper.reasons,
        drops: Drops {
            caller_not_found: totals[SLOT_NOT_FOUND as usize],
            sites_full: totals[SLOT_SITES_FULL as usize],
            recursion_misses: prog.recursion_misses,
            deep_unwind_failed: stats.deep_unwind_failed,
            stacks_sampled_out: stats.stack_sampled_out,
            stacks_rate_capped: stats.stack_rate_capped,
            stacks_ringbuf_full: stats.stack_ringbuf_full,
            own_calls: stats.own_calls,
        },
        phase: if target.is_some() {
            "stack capture"
        } else {
            "counting"
        },
        stack_sets: &stack_sets,
        stacks_matched: stats.stack_matched,
        stacks_sent: stats.stack_emitted,
        verify: opts.verify_caller.then_some(Verify {
            checked: stats.verify_checked,
            mismatches: stats.verify_mismatch,
            unwind_failed: stats.verify_unwind_failed,
        }),
        prog,
        companion: companion.map(|(kind, c)| (kind.name(), c)),
    };
    let text = if opts.json {
        output::summary_json(&sum) + "\n"
    } else {
        output::summary_table(&sum)
    };
    emit(out, &text)
}

fn interval_text(
    opts: &Options,
    iv: &Interval,
    mapper: &Mapper,
    target: Option<u32>,
    captured: u64,
    rows: &[StackRow],
) -> String {
    let reason = target.map(|t| mapper.reasons.name(t));
    if opts.json {
        return output::interval_json(unix_now(), iv, &mapper.reasons, reason, captured, rows)
            + "\n";
    }
    let mut s = output::interval_table(&output::clock(), iv, &mapper.reasons);
    if let Some(r) = reason.filter(|_| captured > 0) {
        s.push_str(&output::stacks_text(r, captured, rows));
    }
    s
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
