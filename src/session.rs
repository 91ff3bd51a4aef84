//! The interval loop: poll the counters, print each interval, and at the
//! end (Ctrl-C, SIGTERM, SIGHUP or --duration) detach and print the summary.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::error::Result;
use crate::kallsyms::Kallsyms;
use crate::output::{self, Drops, Summary, Verify};
use crate::poll::Poller;
use crate::probe::Probe;
use crate::rates::Interval;
use crate::reasons::{Mapper, NR_SLOTS, SLOT_NOT_FOUND, SLOT_SITES_FULL};

/// How the loop reports.
#[derive(Debug, Clone)]
pub struct Options {
    pub interval: Duration,
    pub duration: Option<Duration>,
    pub json: bool,
    pub quiet: bool,
    pub verify_caller: bool,
}

/// Longest sleep between checks of the stop flag.
const TICK: Duration = Duration::from_millis(100);

pub fn run(
    mut probe: Probe<'_>,
    ksyms: &Kallsyms,
    mapper: &mut Mapper,
    opts: &Options,
    stop: &AtomicBool,
    out: &mut dyn Write,
) -> Result<()> {
    let mut poller = Poller::default();
    let start = Instant::now();
    let end = opts.duration.map(|d| start + d);
    let mut prev = vec![0u64; NR_SLOTS];
    let mut last = start;
    let mut next = start + opts.interval;

    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let deadline = end.map_or(next, |e| e.min(next));
        if now < deadline {
            std::thread::sleep((deadline - now).min(TICK));
            continue;
        }
        let cur = poller.totals(&probe, ksyms, mapper)?;
        let iv = Interval::between(&prev, &cur, (now - last).as_secs_f64());
        if !opts.quiet {
            let text = if opts.json {
                output::interval_json(unix_now(), &iv, &mapper.reasons, None, &[]) + "\n"
            } else {
                output::interval_table(&output::clock(), &iv, &mapper.reasons)
            };
            out.write_all(text.as_bytes())?;
            out.flush()?;
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
    let stats = probe.stats()?;
    probe.detach();
    let totals = poller.totals(&probe, ksyms, mapper)?;
    let run = Interval::between(&[], &totals, start.elapsed().as_secs_f64());
    let drops = Drops {
        caller_not_found: totals[SLOT_NOT_FOUND as usize],
        sites_full: totals[SLOT_SITES_FULL as usize],
        recursion_misses: prog.recursion_misses,
        deep_unwind_failed: stats.deep_unwind_failed,
        stacks_sampled_out: stats.stack_sampled_out,
        stacks_rate_capped: stats.stack_rate_capped,
        stacks_ringbuf_full: stats.stack_ringbuf_full,
    };
    let sum = Summary {
        func: probe.func(),
        mode: probe.mode().name(),
        run: &run,
        reasons: &mapper.reasons,
        drops,
        phase: "counting",
        stack_reason: None,
        stacks_total: 0,
        stacks: &[],
        verify: opts.verify_caller.then_some(Verify {
            checked: stats.verify_checked,
            mismatches: stats.verify_mismatch,
            unwind_failed: stats.verify_unwind_failed,
        }),
    };
    let text = if opts.json {
        output::summary_json(&sum) + "\n"
    } else {
        output::summary_table(&sum)
    };
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
