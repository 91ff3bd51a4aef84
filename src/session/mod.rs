//! The interval loop: poll the counters, print each interval, move stack
//! capture when a reason dominates, and at the end (Ctrl-C, SIGTERM,
//! SIGHUP or --duration) detach and print the summary. The decisions live
//! in `state`, as plain functions over the polled counts; this module does
//! the waiting, the reading and the writing.

mod capture;
mod poll;
mod rates;
mod state;
mod trigger;

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::bpf::abi::ENTRY_WINDOW;
use crate::bpf::probe::Probe;
use crate::error::{Error, Result};
use crate::kallsyms::Kallsyms;
use crate::reasons::Mapper;
use crate::report::{self, Stack};
use crate::symbolize::Symbols;

pub(crate) use trigger::Trigger;

use capture::Capture;
use poll::Poller;
use state::{End, Move, State};
use trigger::Switch;

/// How the loop reports and when it captures stacks.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) interval: Duration,
    pub(crate) duration: Option<Duration>,
    pub(crate) json: bool,
    pub(crate) quiet: bool,
    pub(crate) verify_caller: bool,
    pub(crate) top: usize,
    pub(crate) folded: Option<PathBuf>,
    /// Say why symbolization failed.
    pub(crate) verbose: bool,
}

/// Longest sleep between checks of the stop flag.
const TICK: Duration = Duration::from_millis(100);

/// Tier 2 I/O: the ring buffer once opened, and symbolization.
struct Stacks {
    capture: Option<Capture>,
    symbols: Symbols,
    func_addr: u64,
}

impl Stacks {
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
        if self.capture.is_none() {
            self.capture = Some(Capture::new(probe.samples_map()?)?);
            // Parse kallsyms now rather than when the first samples wait.
            self.symbols.kernel(&[self.func_addr + 1]);
        }
        Ok(())
    }

    /// Waits up to `timeout` for samples, then symbolizes them into `state`.
    fn wait(&mut self, timeout: Duration, state: &mut State) -> Result<()> {
        match &self.capture {
            Some(c) => c.wait(timeout)?,
            None => std::thread::sleep(timeout),
        }
        self.absorb(state);
        Ok(())
    }

    fn absorb(&mut self, state: &mut State) {
        let Some(c) = &self.capture else { return };
        let samples = c.take();
        // Keep the mappings of new processes first: a short-lived one may
        // exit while the kernel frames are being symbolized.
        for s in samples.iter().filter(|s| !s.ustack.is_empty()) {
            self.symbols.remember_process(s.pid);
        }
        for s in samples {
            let frames = capture::above_entry(&s.kstack, self.func_addr, ENTRY_WINDOW, s.caller);
            let kernel = self.symbols.kernel(&frames);
            let user = self.symbols.user(s.pid, &s.ustack);
            state.add_stack(s.reason, Stack { kernel, user });
        }
    }

    fn drain(&mut self, state: &mut State) -> Result<()> {
        if let Some(c) = &self.capture {
            c.drain()?;
        }
        self.absorb(state);
        Ok(())
    }
}

fn emit(out: &mut dyn Write, text: &str) -> Result<()> {
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// What the loop works on besides the probe.
pub(crate) struct Context<'a> {
    pub(crate) ksyms: &'a Kallsyms,
    pub(crate) mapper: &'a mut Mapper,
    pub(crate) func_addr: u64,
    /// Reason slot chosen with --stack-on.
    pub(crate) stack_on: Option<u32>,
    pub(crate) symbols: Symbols,
}

/// Runs until `stop` is set or the duration passes, then prints the
/// summary. Returns after detaching.
pub(crate) fn run(
    mut probe: Probe<'_>,
    ctx: Context<'_>,
    trigger: Trigger,
    opts: &Options,
    stop: &AtomicBool,
    out: &mut dyn Write,
) -> Result<()> {
    let Context {
        ksyms,
        mapper,
        func_addr,
        stack_on,
        symbols,
    } = ctx;
    let mut poller = Poller::default();
    let mut state = State::new(trigger);
    let mut stacks = Stacks {
        capture: None,
        symbols,
        func_addr,
    };
    if let Some(slot) = stack_on {
        stacks.switch_on(&mut probe, ksyms, mapper, slot)?;
        state.capturing(slot);
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
    let mut last = start;
    let mut next = start + opts.interval;

    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let deadline = end.map_or(next, |e| e.min(next));
        if now < deadline {
            stacks.wait((deadline - now).min(TICK), &mut state)?;
            continue;
        }
        let cur = poller.totals(&probe, ksyms, mapper, Some(&mut stacks.symbols))?;
        let tick = state.tick(
            cur,
            (now - last).as_secs_f64(),
            &mapper.reasons,
            unix_now(),
            report::text::clock(),
        );
        if !opts.quiet {
            let text = if opts.json {
                report::json::interval(&tick.report, opts.top) + "\n"
            } else {
                report::text::interval(&tick.report, opts.top)
            };
            emit(out, &text)?;
        }
        if let Some(Move { switch, share }) = tick.moved {
            let (slot, what) = match switch {
                Switch::Start(to) => (to, "capturing its stacks".to_string()),
                Switch::Move { from, to } => (
                    to,
                    format!("moving stack capture from {}", mapper.reasons.name(from)),
                ),
            };
            eprintln!(
                "topdown: {} has {share:.1}% of calls (threshold {}%): {what}",
                mapper.reasons.name(slot),
                state.threshold()
            );
            stacks.switch_on(&mut probe, ksyms, mapper, slot)?;
            state.capturing(slot);
        }
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
    stacks.drain(&mut state)?;
    let totals = poller.totals(&probe, ksyms, mapper, Some(&mut stacks.symbols))?;
    let summary = state.finish(
        &End {
            func: probe.func(),
            mode: probe.mode().name(),
            totals: &totals,
            secs: start.elapsed().as_secs_f64(),
            stats,
            prog,
            companion: companion.map(|(kind, c)| (kind.name(), c)),
            verify_caller: opts.verify_caller,
        },
        &mapper.reasons,
    );
    if let Some(path) = &opts.folded {
        std::fs::write(path, report::folded::folded(&summary.stacks, probe.func()))
            .map_err(|e| Error::msg(format!("cannot write {}: {e}", path.display())))?;
    }
    let text = if opts.json {
        report::json::summary(&summary, opts.top) + "\n"
    } else {
        report::text::summary(&summary, opts.top)
    };
    emit(out, &text)
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
