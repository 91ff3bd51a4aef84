//! The trace job: counts calls of the target by reason, captures stacks,
//! reports; of a kernel function, a user-space one, or a pinned instance.

use std::io;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::bpf::attach::Storage;
use crate::bpf::pin;
use crate::bpf::probe::Probe;
use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::host;
use crate::kallsyms::Kallsyms;
use crate::output::Stdout;
use crate::plan::Trace;
use crate::report::{self, RunInfo};
use crate::session::{self, Context, Trigger};
use crate::symbolize::Symbols;

use super::command::Command;
use super::common::{knobs_of, mode_line, stop_on_signals, system_state, warn_baseline, Status};
use super::output::finish;
use super::pinned::pinned_mapper;
use super::start::{self, Extra};

/// Counts calls of the target by reason, captures stacks, reports. A
/// pinned function is read from its pins instead of being traced again.
pub fn trace(mut t: Trace) -> Result<Status> {
    host::check_privileges()?;
    if t.target.user.is_some() {
        return trace_user(t);
    }
    if pin::is_pinned(&t.target.func) {
        return trace_pinned(t);
    }
    let stop = stop_on_signals()?;
    let mut command = start_command(&mut t)?;
    let info = run_info(&t);
    warn_baseline(t.session.baseline.as_ref(), &info);
    let mut storage = Storage::default();
    let extra = Extra {
        verify_caller: t.verify_caller,
        companion: t.companion,
        stacks: t.stacks(),
        filter: t.filter.clone(),
        rules_at_load: false,
        fresh: false,
    };
    let started = start::start(
        &mut storage,
        &t.target,
        (t.max_reasons, &t.load, extra),
        t.stack_on.as_deref(),
        |probe, fallback| {
            // It counts from here on: what follows only names what it
            // counts.
            let mode = probe.mode();
            eprintln!(
                "topdown: tracing {}",
                mode_line(&t.target.func, mode, fallback)
            );
            if let Some(f) = t.filter.describe() {
                eprintln!("topdown: counting only calls {f}");
            }
        },
    )?;
    release(command.as_mut(), &stop)?;
    let mut k = started.kernel;
    let ctx = Context {
        ksyms: &k.ksyms,
        mapper: &mut k.mapper,
        func_addr: k.func_addr,
        stack_on: k.stack_on,
        symbols: Symbols::new(k.vmlinux, t.session.verbose),
        info,
        filter: t.filter.clone(),
        background: t.background(),
    };
    let status = run(started.probe, ctx, &t, &stop);
    report_command(command.as_ref());
    status
}

/// -c: the command started, held before its first instruction, and the
/// filter made its (its cgroup, or its process).
fn start_command(t: &mut Trace) -> Result<Option<Command>> {
    let Some(argv) = &t.command else {
        return Ok(None);
    };
    let (command, filter) = Command::start(argv, &t.filter)?;
    t.filter = filter;
    Ok(Some(command))
}

/// -c: the command let run, now that the program counts; the run ends
/// when it exits.
fn release(command: Option<&mut Command>, stop: &Arc<AtomicBool>) -> Result<()> {
    if let Some(c) = command {
        c.release(Arc::clone(stop))?;
        eprintln!(
            "topdown: running the command (pid {}); the run ends when it exits",
            c.pid()
        );
    }
    Ok(())
}

/// -c: how the command ended, after the summary.
fn report_command(command: Option<&Command>) {
    if let Some((c, how)) = command.and_then(|c| Some((c, c.ended()?))) {
        eprintln!("topdown: the command (pid {}) {how}", c.pid());
    }
}

/// The session run on the counting program, then the run's files written.
fn run(probe: Probe<'_>, ctx: Context<'_>, t: &Trace, stop: &AtomicBool) -> Result<Status> {
    let trigger = Trigger::new(t.trigger, ctx.stack_on);
    // A reader gone (`topdown FUNC | head`) ends the run as Ctrl-C does.
    let mut out = Stdout::new(io::stdout().lock()).ending(stop);
    let ended = session::run(probe, ctx, trigger, &t.session, stop, &mut out)?;
    finish(ended, &t.files, t.session.top)
}

/// What a run is, beside its counts; the system's settings are read only
/// if a result is saved or compared.
fn run_info(t: &Trace) -> RunInfo {
    RunInfo {
        kernel: pin::kernel_and_boot().0,
        profile: t.target.profile.as_ref().map(|p| p.origin.clone()),
        system: system_state(
            t.files.save.is_some() || t.session.baseline.is_some(),
            &knobs_of(&t.target),
            t.filter.cgroup.as_ref().map(|c| c.path.as_path()),
        ),
        fix: t.fix.clone(),
    }
}

/// `topdown -x PATH FUNC`: a uprobe at FUNC's entry counts its calls by
/// caller function, symbolized per process; stacks are user stacks.
fn trace_user(t: Trace) -> Result<Status> {
    let Some(user) = t.target.user.clone() else {
        return Err(Error::msg("no user-space target"));
    };
    let stop = stop_on_signals()?;
    let mut t = t;
    let mut command = start_command(&mut t)?;
    let info = run_info(&t);
    warn_baseline(t.session.baseline.as_ref(), &info);
    let mut storage = std::mem::MaybeUninit::uninit();
    let (mut probe, mut mapper, stack_on) = start::start_user(&mut storage, &t, &user.func)?;
    let pids: Vec<i32> = t.filter.tgids().iter().map(|&p| p as i32).collect();
    let bare = t.companion == Some(crate::bpf::probe::Companion::Bare);
    // topdown's own calls (setting up the run allocates) are left out
    // from the first one, not from when the run starts.
    probe.maps().own(std::process::id());
    probe.attach_uprobes(&user.path, user.offset as usize, &pids, bare)?;
    eprintln!("topdown: tracing {} with a uprobe", user.describe());
    if std::env::var_os("DEBUGINFOD_URLS").is_some_and(|v| !v.is_empty()) {
        eprintln!(
            "topdown: notice: DEBUGINFOD_URLS is set, but topdown reads local debug files only \
             (/usr/lib/debug: install the -dbgsym package); callers with no name are shown as \
             FILE+0xADDRESS"
        );
    }
    if let Some(f) = t.filter.describe() {
        eprintln!("topdown: counting only calls {f}");
    }
    release(command.as_mut(), &stop)?;
    let ksyms = Kallsyms::default();
    // Its frames are named by build ID after a process has gone.
    let mut symbols = Symbols::new(None, t.session.verbose);
    symbols.know_target(&user.path, user.addr);
    let ctx = Context {
        ksyms: &ksyms,
        mapper: &mut mapper,
        func_addr: 0,
        stack_on,
        symbols,
        info,
        filter: t.filter.clone(),
        background: t.background(),
    };
    let status = run(probe, ctx, &t, &stop);
    report_command(command.as_ref());
    status
}

/// `topdown FUNC` on a pinned function: its counters, read from now on,
/// with stack capture steered through its pins; it keeps counting after.
fn trace_pinned(t: Trace) -> Result<Status> {
    let func = &t.target.func;
    if !t.load_options.is_empty() {
        return Err(Error::usage(format!(
            "{func} is pinned, with its mode, profile and stack settings fixed by topdown pin: \
             leave out {} (or unpin it)",
            t.load_options.join(", ")
        )));
    }
    let ksyms = host::load_kallsyms()?;
    let mut inst = pin::open(func)?;
    let _lock = pin::Lock::take(func)?;
    // From here on, however this ends, the probe's Drop puts back what
    // this reader changes in the pinned instance.
    inst.probe.steer();
    let mut mapper = pinned_mapper(&inst)?;
    let stack_on = t
        .stack_on
        .as_deref()
        .map(|name| mapper.stack_reason(&ksyms, name))
        .transpose()?;
    // A reader killed earlier may have left capture on, and its samples;
    // and its calls left out, which sends every call down the slow path.
    inst.probe.maps().stop_capture()?;
    inst.probe.maps().own(0);
    let stop = stop_on_signals()?;
    let meta = &inst.meta;
    let info = RunInfo {
        kernel: meta.kernel.clone(),
        profile: meta.profile.clone(),
        system: system_state(
            t.files.save.is_some() || t.session.baseline.is_some(),
            &meta.knobs,
            meta.cgroup.as_deref(),
        ),
        fix: t.fix.clone(),
    };
    warn_baseline(t.session.baseline.as_ref(), &info);
    eprintln!(
        "topdown: reading pinned {} (since {})",
        mode_line(func, meta.mode, meta.fallback.as_deref()),
        report::time::clock_at(meta.pinned_at)
    );
    if let Some(f) = &meta.filter {
        eprintln!("topdown: counting only calls {f} (fixed by topdown pin)");
    }
    let ctx = Context {
        ksyms: &ksyms,
        mapper: &mut mapper,
        func_addr: meta.func_addr,
        stack_on,
        symbols: Symbols::new(meta.vmlinux.clone(), t.session.verbose),
        info,
        filter: Filter::default(),
        // Fixed when it was pinned.
        background: meta.background > 0,
    };
    run(inst.probe, ctx, &t, &stop)
}
