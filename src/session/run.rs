//! A run under way: the interval loop that polls the counters, moves
//! stack capture where the trigger decides, prints each interval, and at
//! the end detaches and prints the summary.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::bpf::abi::{NR_SLOTS, NR_STACK_STATS};
use crate::bpf::ctl::mono_ns;
use crate::bpf::maps::Maps;
use crate::bpf::percpu::Stats;
use crate::bpf::probe::{Mode, Probe, ProgStats};
use crate::bpf::Drilled;
use crate::error::{Error, Result};
use crate::filter::{Filter, Proc};
use crate::kallsyms::Kallsyms;
use crate::reasons::{Mapper, SourceLookup, UNKNOWN_NAME};
use crate::report::compare::{self, Side};
use crate::report::fit::Fit;
use crate::report::printer::Printer;
use crate::report::{self, Baseline, FilterInfo, RunInfo, Summary};
use crate::session::state::since_gates;
use crate::symbolize::Symbols;

use super::background::Kept;
use super::capture::Capture;
use super::drill;
use super::ksyms::{self, LiveKsyms};
use super::poll::Poller;
use super::stacks::Stacks;
use super::state::{End, State};
use super::timing::{unix_now, Budget, Refills, TICK};
use super::trigger::{announcements, Trigger};

/// How the loop reports and when it captures stacks.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// A tracepoint's category (`t:CATEGORY:EVENT`), for the summary;
    /// None: a function.
    pub(crate) tracepoint: Option<String>,
    pub(crate) interval: Duration,
    pub(crate) duration: Option<Duration>,
    /// How stdout shows intervals and the summary.
    pub(crate) printer: Printer,
    pub(crate) quiet: bool,
    pub(crate) verify_caller: bool,
    pub(crate) top: usize,
    /// Most reasons on an interval's table (--rows).
    pub(crate) rows: usize,
    /// Compare every interval and the summary with this.
    pub(crate) baseline: Option<Baseline>,
    /// Most stacks captured per second, over all CPUs.
    pub(crate) max_rate: u64,
    /// Say why symbolization failed.
    pub(crate) verbose: bool,
    /// --drill's deepest level (0: no --drill).
    pub(crate) drill_levels: u32,
}

/// What the loop works on besides the probe.
pub(crate) struct Context<'a> {
    pub(crate) ksyms: &'a Kallsyms,
    pub(crate) mapper: &'a mut Mapper,
    pub(crate) func_addr: u64,
    /// Reason slot chosen with --stack-on.
    pub(crate) stack_on: Option<u32>,
    pub(crate) symbols: Symbols,
    /// The kernel and profile, for the summary and the comparison.
    pub(crate) info: RunInfo,
    /// Which calls count: the --pid filter's processes are watched, and
    /// taken out of it when they exit.
    pub(crate) filter: Filter,
    /// The program has the background sampler (--background-stacks): the
    /// site cache is flagged for it every tick.
    pub(crate) background: bool,
}

/// How a run ended: its summary, and the error that ended it early, if
/// one did (the summary is of what was counted until then).
pub(crate) struct Ended {
    pub(crate) summary: Summary,
    pub(crate) error: Option<Error>,
}

/// A run under way: the program, what it reads through, and when the
/// next print, tick and refill are due.
pub(super) struct Run<'a, 'obj> {
    probe: Probe<'obj>,
    /// Read again as modules come and go.
    ksyms: LiveKsyms<'a>,
    mapper: &'a mut Mapper,
    info: RunInfo,
    filter: Filter,
    opts: &'a Options,
    /// The --pid filter's processes still alive.
    watched: Vec<Proc>,
    /// Those that exited during the run, as the verdict names them.
    exits: Vec<String>,
    /// The baseline's calls, compared with every interval.
    before: Option<report::Distribution>,
    poller: Poller,
    state: State,
    stacks: Stacks,
    /// The counters at the start (a pinned instance has counted before).
    base_stats: Stats,
    /// Each reason's stack path counters at the start (empty: all 0).
    base_gates: Vec<[u64; NR_STACK_STATS]>,
    base_prog: ProgStats,
    budget: Budget,
    own: u32,
    start: Instant,
    start_unix: f64,
    end: Option<Instant>,
    last: Instant,
    next_print: Instant,
    next_tick: Instant,
    refills: Refills,
    next_modules: Instant,
    /// Whether a busy uprobe was warned about (once a run).
    busy_warned: bool,
    /// When a uprobe's new sites were last resolved as the program woke
    /// this process for them (see `wait`).
    woken_poll: Option<Instant>,
    /// See Context::background.
    background: bool,
    /// --drill: the path table at the last interval's print.
    drill_before: Drilled,
}

/// The least time between two polls made because a uprobe's program woke
/// topdown for new call sites (see `Run::wait`).
const WOKEN_POLL: Duration = Duration::from_millis(10);

/// Calls a second of a user-space function, with no --pid, at which the
/// traps' cost is worth a warning: at a microsecond or more each, a tenth
/// of a CPU and up.
const BUSY_UPROBE: f64 = 100_000.0;

/// The warning for a uprobe on `func` at `rate` calls a second in every
/// process, if that is busy.
fn busy_uprobe(func: &str, rate: f64) -> Option<String> {
    (rate >= BUSY_UPROBE).then(|| {
        format!(
            "{func} is called {rate:.0} times a second in every process that maps it, and each \
             call traps into the kernel (a microsecond or more): limit it with -p PID, or end \
             the run soon"
        )
    })
}

impl<'a, 'obj> Run<'a, 'obj> {
    /// Everything set up to count: the counters' start, the ring buffer,
    /// --stack-on's capture switched on.
    pub(super) fn start(
        mut probe: Probe<'obj>,
        ctx: Context<'a>,
        trigger: Trigger,
        opts: &'a Options,
    ) -> Result<Self> {
        let Context {
            ksyms,
            mapper,
            func_addr,
            stack_on,
            symbols,
            info,
            filter,
            background,
        } = ctx;
        let mut poller = Poller::default();
        poller.prunes = !probe.is_pinned();
        let mut ksyms = LiveKsyms::new(ksyms);
        // What the counters held at the start: a pinned instance has
        // counted before, and the run reports what happened since. An
        // object loaded for this run starts at zero (and two readings
        // could not be taken at the same instant).
        let (base, base_stats, base_prog, base_gates) = if probe.is_pinned() {
            (
                poller.totals(probe.maps(), &mut ksyms, mapper, None)?,
                poller.stats(probe.maps())?,
                probe.prog_stats(),
                probe.maps().reason_stacks(0..=NR_SLOTS as u32)?,
            )
        } else {
            (
                vec![0; NR_SLOTS],
                Stats::default(),
                ProgStats::default(),
                Vec::new(),
            )
        };
        let mut state = State::new(trigger, base.clone(), base_stats, base_prog);
        // The ring buffer is set up before anything can be captured, so
        // nothing slow stands between a decision and the first stack.
        let capture = match stack_on.is_some() || state.auto() {
            true => Some(Capture::new(probe.maps().samples()?)?),
            false => None,
        };
        let mut stacks = Stacks {
            capture,
            symbols,
            func_addr,
            user_target: probe.mode() == Mode::Uprobe,
            kept: Kept::default(),
            untagged_shown: Default::default(),
        };
        let start = Instant::now();
        let budget = Budget::new(
            opts.max_rate,
            crate::host::online_cpus(),
            stacks.user_target,
        );
        if let Some(slot) = stack_on {
            // The budget first: a call between the two would find none.
            budget.refill(probe.maps(), &[slot], 1)?;
            stacks.capture(&mut probe, ksyms.get(), mapper, &[slot])?;
            state.start_span(slot, 0.0, mono_ns(), &base);
            eprintln!("topdown: capturing stacks of {}", mapper.reasons.name(slot));
        }
        Ok(Run {
            probe,
            ksyms,
            mapper,
            info,
            watched: filter.pids.clone(),
            exits: Vec::new(),
            filter,
            opts,
            before: opts.baseline.as_ref().map(|b| b.saved.calls()),
            poller,
            state,
            stacks,
            base_stats,
            base_prog,
            base_gates,
            budget,
            own: std::process::id(),
            start,
            start_unix: unix_now(),
            end: opts.duration.map(|d| start + d),
            last: start,
            next_print: start + opts.interval,
            next_tick: start + TICK,
            refills: Refills::new(start),
            next_modules: start + ksyms::CHECK_EVERY,
            busy_warned: false,
            woken_poll: None,
            background,
            drill_before: Drilled::default(),
        })
    }

    /// This process's calls of FUNC are left out while it is awake (its
    /// polling, printing and symbolizing), not while it sleeps: while the
    /// check is on, every call takes the counting program's slow path
    /// (td_watch). So with FUNC on the system-call path, the call it sleeps
    /// in is counted: one per tick at most, as the program wakes it for no
    /// single stack.
    pub(super) fn leave_out_own(&self) {
        self.probe.maps().own(self.own);
    }

    /// Polls, ticks and prints until `stop` is set or the duration passes.
    pub(super) fn main_loop(&mut self, stop: &AtomicBool, out: &mut dyn Write) -> Result<()> {
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let deadline = self.deadline();
            if now < deadline {
                self.wait((deadline - now).min(TICK))?;
                continue;
            }
            let mut cur = self.totals()?;
            if now >= self.next_modules {
                self.ksyms.check();
                self.next_modules = now + ksyms::CHECK_EVERY;
            }
            if self.follow_modules()? {
                cur = self.totals()?;
            }
            for p in watch_exits(&mut self.watched, self.probe.maps())? {
                let secs = now.duration_since(self.start).as_secs_f64();
                self.exits.push(format!(
                    "pid {} ({}) exited {secs:.1}s into the run",
                    p.pid, p.comm
                ));
            }
            if now >= self.next_tick {
                self.tick(now, &cur)?;
            }
            if self.refills.due(now, self.state.capturing()) {
                let targets = self.state.targets();
                self.budget
                    .refill(self.probe.maps(), &targets, targets.len())?;
            }
            let ended = self.end.is_some_and(|e| now >= e);
            if now >= self.next_print || ended {
                self.print_interval(now, cur, out)?;
            }
            if ended {
                break;
            }
        }
        Ok(())
    }

    /// When the loop must next poll: the print, the end, and while the
    /// trigger runs or capture is on the next tick (a new call site of the
    /// stack reason is only captured from once a poll has resolved it)
    /// and refill.
    fn deadline(&self) -> Instant {
        let mut deadline = self.end.map_or(self.next_print, |e| e.min(self.next_print));
        if self.state.auto() || self.state.capturing() {
            deadline = deadline.min(self.next_tick);
        }
        if self.state.capturing() {
            deadline = deadline.min(self.refills.next());
        }
        deadline
    }

    /// Sleeps up to `timeout` (its own calls of a kernel function counted
    /// meanwhile), taking in the samples delivered.
    fn wait(&mut self, timeout: Duration) -> Result<()> {
        // The system call topdown sleeps in may call a kernel function:
        // counted, one call a reading (see topdown(8)). A user-space
        // function called in topdown's process is only ever its own call
        // (the ring buffer's callback allocates): left out.
        let asleep = match self.probe.mode() {
            Mode::Uprobe => self.own,
            _ => 0,
        };
        self.probe.maps().own(asleep);
        let waited = self.stacks.wait(timeout);
        self.probe.maps().own(self.own);
        waited?;
        self.stacks.absorb(
            self.probe.maps(),
            self.ksyms.get(),
            self.mapper,
            &mut self.state,
        );
        // New call sites are resolved within a tick whatever the print
        // interval: until then each of their calls takes the pending
        // path, several times the cost of a resolved one. (Ticks poll
        // anyway.) A uprobe's at once: the program woke this process for
        // a new site, whose process may be gone by the next tick, and
        // with it the maps that name the site. At most one such poll
        // every WOKEN_POLL, so that a storm of new processes costs a
        // bounded share of a CPU.
        let ticking = self.state.auto() || self.state.capturing();
        let woken = self.probe.mode() == Mode::Uprobe
            && self.woken_poll.is_none_or(|t| t.elapsed() >= WOKEN_POLL);
        if (!ticking || woken) && self.probe.maps().take_new_sites() {
            if woken {
                self.woken_poll = Some(Instant::now());
            }
            self.totals()?;
        }
        Ok(())
    }

    /// The counters now, new call sites resolved.
    fn totals(&mut self) -> Result<Vec<u64>> {
        let symbols: &mut dyn SourceLookup = &mut self.stacks.symbols;
        self.poller.totals(
            self.probe.maps(),
            &mut self.ksyms,
            self.mapper,
            Some(symbols),
        )
    }

    /// Says which modules came or went since the symbols were last read
    /// and, in a run of its own object, forgets the call sites of those
    /// that went (the next module loaded may reuse their addresses), and
    /// those named [unknown] (a module loaded since may name them); their
    /// counts stay. True if sites were forgotten. Not in a pinned
    /// instance: its other readers and its files sum the pending table
    /// as they found it.
    fn follow_modules(&mut self) -> Result<bool> {
        let change = self.ksyms.take_changes();
        for name in &change.loaded {
            eprintln!("topdown: module {name} loaded: kernel symbols read again");
        }
        if change == ksyms::Change::default() {
            return Ok(false);
        }
        if self.probe.is_pinned() {
            for g in &change.gone {
                eprintln!("topdown: module {} unloaded", g.name);
            }
            return Ok(false);
        }
        // Read after the module went: the pending table holds every call
        // it made.
        self.totals()?;
        let unknown = self.mapper.reasons.lookup(UNKNOWN_NAME);
        let gone =
            |ret: u64, slot: u32| Some(slot) == unknown || change.gone.iter().any(|g| g.holds(ret));
        let mut forgotten = self.poller.forget_sites(gone);
        // Sites the programs named themselves never were pending: their
        // calls are in their slots, and only the tables hold them.
        if self.probe.maps().resolves_in_kernel() {
            let known: std::collections::HashSet<u64> = forgotten.iter().map(|f| f.0).collect();
            let named = self.probe.maps().sites_where(gone)?;
            forgotten.extend(named.into_iter().filter(|(ret, _)| !known.contains(ret)));
        }
        for &(ret, slot) in &forgotten {
            self.probe.maps().forget_site(ret, slot)?;
        }
        if !change.gone.is_empty() {
            self.probe.maps().forget_frames()?;
        }
        for g in &change.gone {
            let n = forgotten.iter().filter(|&&(ret, _)| g.holds(ret)).count();
            eprintln!(
                "topdown: module {} unloaded: {n} call site{} in it forgotten, their calls kept",
                g.name,
                if n == 1 { "" } else { "s" }
            );
        }
        Ok(!forgotten.is_empty())
    }

    /// Runs the trigger on the counts `cur`, starting and ending capture
    /// where it decides.
    fn tick(&mut self, now: Instant, cur: &[u64]) -> Result<()> {
        let secs = (now - self.start).as_secs_f64();
        let ns = mono_ns();
        let changes = if self.state.auto() {
            self.state.tick(secs, ns, cur)
        } else {
            Vec::new()
        };
        // The site cache's flags, set again: the sampler clears its own,
        // and another reader of a pinned instance may have cleared all.
        self.probe
            .maps()
            .flag_sites(&self.probe.maps().capturing(), self.background);
        if self.background {
            let shown = self.stacks.background_tick(
                self.probe.maps(),
                self.ksyms.get(),
                self.state.bursting(),
                ns,
            );
            for (reason, stack, process, ts) in shown {
                self.state.add_stack(reason, stack, process, ts, true);
            }
        }
        if !changes.is_empty() {
            let targets = self.state.targets();
            for line in announcements(
                &changes,
                &targets,
                &self.mapper.reasons,
                self.state.threshold(),
            ) {
                eprintln!("topdown: {line}");
            }
            self.stacks.apply(
                &mut self.probe,
                self.ksyms.get(),
                self.mapper,
                &self.budget,
                &changes,
                &targets,
            )?;
            self.refills.changed(now);
        }
        while self.next_tick <= now {
            self.next_tick += TICK;
        }
        Ok(())
    }

    /// The interval since the last print, compared with the baseline if
    /// there is one, printed unless --quiet.
    fn print_interval(&mut self, now: Instant, cur: Vec<u64>, out: &mut dyn Write) -> Result<()> {
        let counters = (
            self.poller.stats(self.probe.maps())?,
            self.probe.prog_stats(),
        );
        let mut report = self.state.interval(
            cur,
            counters,
            (now - self.last).as_secs_f64(),
            &self.mapper.reasons,
            (unix_now(), report::time::clock()),
        );
        let everywhere = self.probe.mode() == Mode::Uprobe && self.filter.tgids().is_empty();
        if everywhere && !self.busy_warned {
            if let Some(w) = busy_uprobe(self.probe.func(), report.calls.rate) {
                eprintln!("topdown: warning: {w}");
                self.busy_warned = true;
            }
        }
        if let (Some(b), Some(before)) = (&self.opts.baseline, &self.before) {
            let named = named(self.mapper);
            report.compare = Some(compare::changes(
                Side {
                    calls: before,
                    named: &b.saved.reason_names,
                    gone: &[],
                },
                Side {
                    calls: &report.calls,
                    named: &named,
                    gone: &[],
                },
            ));
        }
        if self.probe.maps().drills() && !self.opts.quiet {
            report.drill = self.interval_drill()?;
        }
        if !self.opts.quiet {
            // The screen's width now: a terminal may be resized mid-run.
            let fit = Fit {
                rows: self.opts.rows,
                width: crate::output::terminal_width(),
            };
            emit(
                out,
                &self.opts.printer.interval(&report, self.opts.top, fit),
            )?;
        }
        self.last = now;
        while self.next_print <= now {
            self.next_print += self.opts.interval;
        }
        Ok(())
    }

    /// The interval's calls of each drilled reason by path: the path
    /// table read once a print, against the last reading.
    fn interval_drill(&mut self) -> Result<Vec<report::drill::DrillTree>> {
        let now = self.probe.maps().drilled()?;
        let trees = drill::trees(
            &now.since(&self.drill_before),
            self.ksyms.get(),
            &self.mapper.reasons,
            (self.opts.drill_levels, self.state.threshold()),
            &[],
        );
        self.drill_before = now;
        Ok(trees)
    }

    /// Detaches, reads the final counts, prints the summary (compared
    /// with the baseline if there is one). `failed`: the error that ended
    /// the loop early, if one did.
    pub(super) fn end(mut self, failed: Option<Error>, out: &mut dyn Write) -> Result<Ended> {
        // Detach first so the final reading is complete and exact: the
        // program's run count too, which then equals the calls counted
        // plus the own calls left out (the companion goes with the link).
        self.probe.maps().own(0);
        let companion = self.probe.companion_stats();
        let detached = self.probe.detach();
        // The counts cover the time attached: draining and symbolizing
        // what was captured must not lengthen the run a rate divides by.
        let secs = self.start.elapsed().as_secs_f64();
        let prog = self.probe.prog_stats().since(&self.base_prog);
        let (totals, stats, gates) = match (|| {
            detached?;
            self.stacks.drain(
                self.probe.maps(),
                self.ksyms.get(),
                self.mapper,
                &mut self.state,
            )?;
            let totals = self.totals()?;
            let gates = since_gates(
                &self.probe.maps().reason_stacks(0..=NR_SLOTS as u32)?,
                &self.base_gates,
            );
            Ok((
                totals,
                self.poller
                    .stats(self.probe.maps())?
                    .since(&self.base_stats),
                gates,
            ))
        })() {
            Ok(t) => t,
            // Nothing to report: the first error says why.
            Err(e) => return Err(failed.unwrap_or(e)),
        };
        let mut summary = self.state.finish(
            &End {
                func: self.probe.func(),
                tracepoint: self.opts.tracepoint.as_deref(),
                mode: self.probe.mode(),
                totals: &totals,
                start: self.start_unix,
                secs,
                stats,
                prog,
                companion: companion.map(|(kind, c)| (kind.name(), c)),
                verify_caller: self.opts.verify_caller,
                tail_sites: self
                    .mapper
                    .tail
                    .as_ref()
                    .map(|t| t.sites)
                    .unwrap_or_default(),
                info: &self.info,
                filter: FilterInfo::of(&self.filter),
                gates: &gates,
                untagged_shown: &self.stacks.untagged_shown,
            },
            &self.mapper.reasons,
        );
        summary.drops.stacks_background_lost += self.stacks.kept.lost;
        // A failed read costs the trees, not the summary.
        match self
            .probe
            .maps()
            .drills()
            .then(|| self.probe.maps().drilled())
        {
            Some(Ok(d)) => {
                summary.drill = drill::trees(
                    &d,
                    self.ksyms.get(),
                    &self.mapper.reasons,
                    (self.opts.drill_levels, summary.threshold),
                    &summary.gates,
                )
            }
            Some(Err(e)) => eprintln!("topdown: no drill-down: {e}"),
            None => {}
        }
        if let Some(b) = &self.opts.baseline {
            let now = Side {
                calls: &summary.calls,
                named: &summary.named,
                gone: &self.exits,
            };
            let mut cmp = compare::compare(b, now, &self.info);
            compare::add_drill(&mut cmp, &summary.drill);
            summary.phase = cmp.verdict.outcome.phase();
            summary.compare = Some(cmp);
        }
        let printed = emit(out, &self.opts.printer.summary(&summary, self.opts.top));
        Ok(Ended {
            summary,
            error: failed.or(printed.err()),
        })
    }
}

/// Takes the processes of the pid filter that exited out of it (a new
/// process given the same pid must not count), with a notice; not an
/// error: counting goes on for the others, if any.
fn watch_exits(watched: &mut Vec<Proc>, maps: &Maps) -> Result<Vec<Proc>> {
    let mut exited = Vec::new();
    let mut i = 0;
    while i < watched.len() {
        if watched[i].alive() {
            i += 1;
            continue;
        }
        let p = watched.remove(i);
        maps.drop_pid(p.pid)?;
        let left = if watched.is_empty() {
            "; no process of --pid is left: nothing more will be counted".to_string()
        } else {
            String::new()
        };
        eprintln!("topdown: pid {} ({}) exited{left}", p.pid, p.comm);
        exited.push(p);
    }
    Ok(exited)
}

fn emit(out: &mut dyn Write, text: &str) -> Result<()> {
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Error::io("cannot write to standard output", e))
}

/// Every reason named so far, special slots aside.
fn named(mapper: &Mapper) -> Vec<String> {
    mapper.reasons.reason_names().map(String::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_uprobe_everywhere_is_warned_about() {
        assert_eq!(busy_uprobe("malloc", 99_999.0), None);
        let w = busy_uprobe("malloc", 535_205.1).unwrap();
        assert!(
            w.starts_with("malloc is called 535205 times a second"),
            "{w}"
        );
        assert!(w.contains("-p PID"), "{w}");
    }
}
