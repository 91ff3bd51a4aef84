//! The interval loop: poll the counters, print each interval, move stack
//! capture when a reason dominates, and at the end (Ctrl-C, SIGTERM,
//! SIGHUP or --duration) detach and print the summary. The decisions live
//! in `state`, as plain functions over the polled counts; `run` does the
//! waiting, the reading and the writing, `stacks` the stack samples.

mod background;
mod capture;
mod drill;
mod ksyms;
mod poll;
#[cfg(test)]
mod poll_bench;
mod rates;
mod run;
mod stacks;
mod state;
mod timing;
mod trigger;
pub(crate) mod watch;

use std::io::Write;
use std::sync::atomic::AtomicBool;

use crate::bpf::abi::{SLOT_NOT_FOUND, SLOT_SITES_FULL};
use crate::bpf::pin::Meta;
use crate::bpf::probe::Probe;
use crate::error::Result;
use crate::kallsyms::Kallsyms;
use crate::reasons::Mapper;
use crate::report::{Pinned, ReasonRow};
use crate::symbolize::Symbols;

pub(crate) use run::{Context, Ended, Options};
pub(crate) use trigger::{Trigger, TriggerConfig};

use poll::Poller;
use run::Run;
use timing::unix_now;

/// Runs until `stop` is set, the duration passes or an error, then prints
/// the summary and returns it, after detaching.
pub(crate) fn run(
    probe: Probe<'_>,
    ctx: Context<'_>,
    trigger: Trigger,
    opts: &Options,
    stop: &AtomicBool,
    out: &mut dyn Write,
) -> Result<Ended> {
    let mut run = Run::start(probe, ctx, trigger, opts)?;
    // Everything is attached: from here on every call is seen.
    eprintln!(
        "topdown: Ctrl-C to end{}",
        opts.duration.map_or(String::new(), |d| format!(
            ", or after {}s",
            d.as_secs_f64()
        ))
    );
    run.leave_out_own();
    // An error mid-run ends the loop, not the run: the summary and the
    // files asked for are still made of what was counted.
    let looped = run.main_loop(stop, out);
    run.end(looped.err(), out)
}

/// A pinned instance's counts since it was pinned. Call sites first seen
/// while no topdown process read it are resolved now, into their reasons.
pub(crate) fn snapshot(
    probe: &Probe<'_>,
    meta: &Meta,
    ksyms: &Kallsyms,
    mapper: &mut Mapper,
    symbols: &mut Symbols,
) -> Result<Pinned> {
    let mut poller = Poller::default();
    let totals = poller.totals(
        probe.maps(),
        &mut ksyms::LiveKsyms::fixed(ksyms),
        mapper,
        Some(symbols),
    )?;
    let stats = poller.stats(probe.maps())?;
    let prog = probe.prog_stats();
    let secs = (unix_now() - meta.pinned_at).max(0.0);
    let mut calls = rates::Interval::between(&[], &totals, secs).named(&mapper.reasons);
    // Every reason named so far, so that a series does not come and go.
    for (_, name) in mapper.reasons.named() {
        if !calls.rows.iter().any(|r| r.reason == name) {
            calls.rows.push(ReasonRow {
                reason: name.to_string(),
                count: 0,
                rate: 0.0,
                share: 0.0,
                special: false,
            });
        }
    }
    let slot = |s: u32| totals.get(s as usize).copied().unwrap_or(0);
    Ok(Pinned {
        func: meta.function.clone(),
        tracepoint: meta.tracepoint.clone(),
        mode: meta.mode,
        profile: meta.profile.clone(),
        kernel: meta.kernel.clone(),
        version: meta.version.clone(),
        pinned_at: meta.pinned_at,
        calls,
        drops: state::drops(slot(SLOT_NOT_FOUND), slot(SLOT_SITES_FULL), &stats, &prog),
        compare: None,
        filter: meta.filter.clone(),
        threshold: crate::report::DEFAULT_THRESHOLD,
        system: None,
        fix: None,
    })
}
