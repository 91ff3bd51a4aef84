//! What several jobs share: the exit status, the run's recorded settings,
//! the signal flag and the lines that name what is traced.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::bpf::probe::Mode;
use crate::error::{Error, Result};
use crate::plan::Target;
use crate::report::compare;
use crate::report::{Baseline, Comparison, Outcome, RunInfo};
use crate::system::{self, SystemState};
use crate::tailcall::TailCalls;

/// How a job ended when it did not fail: the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Done (with --baseline: the fix is verified).
    Done,
    /// --baseline: the fix is not verified.
    NotVerified,
    /// --baseline: too few calls to tell.
    Inconclusive,
}

impl Status {
    /// The exit status, as topdown(8) documents it (1 and 2 are errors).
    pub fn code(self) -> u8 {
        match self {
            Status::Done => 0,
            Status::NotVerified => 3,
            Status::Inconclusive => 4,
        }
    }

    pub(super) fn of(cmp: Option<&Comparison>) -> Status {
        match cmp.map(|c| c.verdict.outcome) {
            None | Some(Outcome::Verified) => Status::Done,
            Some(Outcome::NotVerified) => Status::NotVerified,
            Some(Outcome::Inconclusive) => Status::Inconclusive,
        }
    }
}

/// The knobs a run records: its profile's.
pub(super) fn knobs_of(target: &Target) -> Vec<String> {
    target
        .profile
        .as_ref()
        .map_or_else(Vec::new, |p| p.knobs.clone())
}

/// The system's settings, read when a result is saved or compared (None
/// otherwise: nothing is read that nothing uses).
pub(super) fn system_state(
    wanted: bool,
    knobs: &[String],
    cgroup: Option<&std::path::Path>,
) -> Option<SystemState> {
    wanted.then(|| system::read(knobs, cgroup))
}

/// Warns, before counting starts, about a baseline from another kernel or
/// profile.
pub(super) fn warn_baseline(baseline: Option<&Baseline>, info: &RunInfo) {
    if let Some(b) = baseline {
        for w in compare::setup_warnings(&b.saved, info) {
            eprintln!("topdown: warning: baseline {}: {w}", b.file);
        }
    }
}

/// Ctrl-C, SIGTERM and SIGHUP set the returned flag. Installed before
/// attaching, so a signal that arrives while attaching still ends the run
/// through the normal path.
pub(super) fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))
        .map_err(|e| Error::msg(format!("cannot install the signal handler: {e}")))?;
    Ok(stop)
}

/// The tail-call check of new call sites of the function at `func`; none,
/// with a notice, where the kernel's text cannot be read.
pub(super) fn tail_calls(func: u64) -> Option<TailCalls> {
    TailCalls::open(func)
        .map_err(|e| {
            eprintln!(
                "topdown: notice: /proc/kcore: {e}: calls made by a tail jump are counted under \
                 the caller's caller"
            )
        })
        .ok()
}

/// The function and how it is traced, as the start-up lines name it.
pub(super) fn mode_line(func: &str, mode: Mode, fallback: Option<&str>) -> String {
    match fallback {
        Some(why) if mode.is_tracepoint() => {
            format!("tracepoint {func} with raw_tp: tp_btf unavailable: {why}")
        }
        None if mode.is_tracepoint() => format!("tracepoint {func} with {mode}"),
        Some(why) => format!("{func} with a kprobe: fentry unavailable: {why}"),
        None => format!("{func} with {mode}"),
    }
}
