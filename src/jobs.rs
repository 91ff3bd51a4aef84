//! One function per job, each wiring the pipeline's stages in order:
//! host checks, the profile resolved and compiled, the BPF side attached,
//! the session run, the report written.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::bpf::abi::{Config, SLOT_NONE};
use crate::bpf::attach::{self, Storage};
use crate::bpf::pin::{self, Meta};
use crate::bpf::probe::{self, Companion, Mode, Probe};
use crate::cli::Cli;
use crate::declared;
use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::funcname::FuncName;
use crate::host;
use crate::kallsyms::Kallsyms;
use crate::output::Stdout;
use crate::plan::{self, Files, Job, Load, Pin, Plan, Show, Target, Trace};
use crate::profile::{self, Compiled};
use crate::reasons::{self, Mapper, NameTable};
use crate::report::compare::{self, Side};
use crate::report::flamegraph::Failed;
use crate::report::saved;
use crate::report::{self, Summary};
use crate::report::{Baseline, Comparison, Outcome, RunInfo, Saved};
use crate::serve;
use crate::session::{self, Context, Trigger};
use crate::symbolize::Symbols;
use crate::system::{self, SystemState};
use crate::tailcall::TailCalls;
use clap::Parser;

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

    fn of(cmp: Option<&Comparison>) -> Status {
        match cmp.map(|c| c.verdict.outcome) {
            None | Some(Outcome::Verified) => Status::Done,
            Some(Outcome::NotVerified) => Status::NotVerified,
            Some(Outcome::Inconclusive) => Status::Inconclusive,
        }
    }
}

/// The knobs a run records: its profile's.
fn knobs_of(target: &Target) -> Vec<String> {
    target
        .profile
        .as_ref()
        .map_or_else(Vec::new, |p| p.knobs.clone())
}

/// The system's settings, read when a result is saved or compared (None
/// otherwise: nothing is read that nothing uses).
fn system_state(
    wanted: bool,
    knobs: &[String],
    cgroup: Option<&std::path::Path>,
) -> Option<SystemState> {
    wanted.then(|| system::read(knobs, cgroup))
}

/// Warns, before counting starts, about a baseline from another kernel or
/// profile.
fn warn_baseline(baseline: Option<&Baseline>, info: &RunInfo) {
    if let Some(b) = baseline {
        for w in compare::setup_warnings(&b.saved, info) {
            eprintln!("topdown: warning: baseline {}: {w}", b.file);
        }
    }
}

/// The files a run writes at exit, after its summary: --folded,
/// --flamegraph and --save, each checked writable at start. One failing
/// does not keep the others from being written, and what it held is
/// rescued (`saved::Output`); the last error is returned (earlier ones are
/// printed).
fn write_outputs(sum: &Summary, files: &Files, top: usize) -> Result<Status> {
    let mut failed: Option<Error> = None;
    let mut fail = |e: Error| {
        if let Some(prev) = failed.replace(e) {
            eprintln!("topdown: {prev}");
        }
    };
    let pid = std::process::id();
    let folded = report::folded::folded(&sum.stacks, &sum.func);
    if let Some(path) = &files.folded {
        let out = saved::Output {
            option: "--folded",
            path,
            bytes: folded.as_bytes(),
            what: "the folded stacks",
            rescue: format!("topdown-{}-{pid}.folded", sum.func),
            stderr: &folded,
            stderr_what: "the folded stacks",
        };
        out.write().unwrap_or_else(&mut fail);
    }
    if let Some(path) = &files.flamegraph {
        let svg = match report::flamegraph::svg(&folded, &sum.func, &flamegraph_subtitle(sum)) {
            Ok(svg) => Some(svg),
            Err(Failed::NoStacks(empty)) => {
                eprintln!(
                    "topdown: --flamegraph {}: no stacks were captured; the flame graph says so",
                    path.display()
                );
                Some(empty)
            }
            Err(Failed::Inferno(e)) => {
                fail(Error::msg(format!(
                    "--flamegraph {}: cannot draw it: {e}",
                    path.display()
                )));
                None
            }
        };
        if let Some(svg) = svg {
            let out = saved::Output {
                option: "--flamegraph",
                path,
                bytes: &svg,
                what: "the flame graph",
                rescue: format!("topdown-{}-{pid}.svg", sum.func),
                stderr: &folded,
                stderr_what: "its stacks, folded,",
            };
            out.write().unwrap_or_else(&mut fail);
        }
    }
    if let Some(path) = &files.save {
        saved::save(path, &Saved::of_summary(sum, top)).unwrap_or_else(&mut fail);
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(Status::of(sum.compare.as_ref())),
    }
}

/// The flame graph's subtitle: the run it comes from.
fn flamegraph_subtitle(sum: &Summary) -> String {
    let mut s = format!(
        "{} in {:.1}s, kernel {}, {}",
        report::calls(sum.calls.total),
        sum.calls.secs,
        sum.kernel,
        sum.mode
    );
    if let Some(f) = &sum.filter {
        s.push_str(&format!("; only calls {}", f.text));
    }
    s
}

/// `--list-profiles`: name, traced function and description of each.
pub fn list_profiles() -> Result<()> {
    let mut out = io::stdout().lock();
    for (name, func, description) in profile::builtins() {
        writeln!(out, "{name}\t{func}\t{description}")?;
    }
    Ok(())
}

/// `--list-reasons`: the profile as resolved on the running kernel.
pub fn list_reasons(t: &Target) -> Result<()> {
    let ksyms = host::load_kallsyms()?;
    let text = match &t.profile {
        Some(p) => profile::describe(p, &profile::resolve(p, &ksyms)?, &ksyms),
        None => {
            host::resolve_function(&ksyms, &t.func)?;
            format!(
                "no reason profile: one reason per caller function of {}\n",
                t.func
            )
        }
    };
    io::stdout().lock().write_all(text.as_bytes())?;
    Ok(())
}

/// The target's profile resolved on this kernel and compiled, with
/// warnings about what the kernel lacks.
fn compile_target(
    t: &Target,
    ksyms: &Kallsyms,
    vmlinux: Option<&std::path::Path>,
    max_reasons: usize,
) -> Result<Compiled> {
    let resolved = match &t.profile {
        Some(p) => {
            let r = profile::resolve(p, ksyms)?;
            let warnings = [
                r.missing_warning(t.users_own),
                r.source_warning(t.users_own, vmlinux),
            ];
            for w in warnings.into_iter().flatten() {
                eprintln!("topdown: warning: profile {}: {w}", p.origin);
            }
            Some(r)
        }
        None => None,
    };
    Ok(profile::compile(resolved.as_ref(), max_reasons))
}

/// Ctrl-C, SIGTERM and SIGHUP set the returned flag. Installed before
/// attaching, so a signal that arrives while attaching still ends the run
/// through the normal path.
fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))
        .map_err(|e| Error::msg(format!("cannot install the signal handler: {e}")))?;
    Ok(stop)
}

/// The counting program attached, and what was learnt before: the kernel
/// symbols, the profile compiled, the function's address and the debug
/// vmlinux if the program needed them at load.
struct Attached<'obj> {
    probe: Probe<'obj>,
    /// Why it is not fentry, if it is not.
    fallback: Option<String>,
    early: Option<(Kallsyms, Compiled, u64, Option<PathBuf>)>,
}

/// The counting program attached and its reasons set up: the mapper, the
/// kernel symbols, where the function is and the debug vmlinux.
struct Loaded<'obj> {
    probe: Probe<'obj>,
    fallback: Option<String>,
    mapper: Mapper,
    ksyms: Kallsyms,
    func_addr: u64,
    vmlinux: Option<PathBuf>,
    /// The --stack-on reason's slot.
    stack_on: Option<u32>,
}

/// Whether kernel symbols are needed before the counting program is
/// loaded: arm64 unwinds compare frames with the function's kallsyms
/// address, as do programs on a kernel without bpf_get_func_ip, a
/// --stack-on name that is no reason must be checked against
/// kernel functions before anything is attached, and `rules_at_load` asks
/// for the deeper-frame rules at load. Otherwise /proc/kallsyms (the
/// longest step of start-up: the kernel formats every symbol) is read once
/// the program counts, and the rules are filled in then: calls before are
/// counted with the frames the rules look at (the early table).
fn symbols_before_load(
    target: &Target,
    stack_on: Option<&str>,
    rules_at_load: bool,
    host: &host::Features,
) -> bool {
    let profile = target.profile.as_ref();
    let function_named = stack_on.is_some_and(|name| {
        !reasons::is_not_found(name)
            && !profile.is_some_and(|p| p.reasons.iter().any(|r| r.name == name))
    });
    cfg!(target_arch = "aarch64")
        || !host.func_ip_helper
        || (rules_at_load && deep_depth(target) > 0)
        || function_named
}

/// The deepest frame a deeper-frame rule of the target's profile looks
/// at, from the profile alone (0: no such rule).
fn deep_depth(target: &Target) -> u32 {
    let rules = target.profile.iter().flat_map(|p| &p.reasons);
    rules
        .filter_map(|r| r.within.as_ref().map(|w| w.depth.max(1)))
        .max()
        .unwrap_or(0)
}

/// Loads and attaches the counting program for `target` with `load`'s
/// settings. Calls from sites not resolved yet are counted as pending and
/// given their reasons by `set_up`, so none is lost meanwhile.
fn attach_target<'obj>(
    storage: &'obj mut Storage,
    target: &Target,
    max_reasons: usize,
    load: &Load,
    extra: Extra,
    stack_on: Option<&str>,
) -> Result<Attached<'obj>> {
    let func = target.func.as_str();
    host::check_addresses_visible()?;
    let features = host::Features::probe();
    features.check_floor()?;
    let early = if symbols_before_load(target, stack_on, extra.rules_at_load, &features) {
        let vmlinux = host::debug_vmlinux(target.vmlinux.as_deref());
        let ksyms = host::load_kallsyms()?;
        let func_addr = host::resolve_function(&ksyms, func)?;
        let mut compiled = compile_target(target, &ksyms, vmlinux.as_deref(), max_reasons)?;
        if let Some(name) = stack_on {
            compiled.mapper.stack_reason(&ksyms, name)?;
        }
        Some((ksyms, compiled, func_addr, vmlinux))
    } else {
        None
    };
    let (deep, func_addr) = match &early {
        Some((_, c, addr, _)) => (Some(c.deep.tables()), *addr),
        None => (None, 0),
    };
    let config = Config {
        func_addr,
        verify_caller: extra.verify_caller,
        user_stacks: load.user_stacks,
        stack_frames: load.depth,
        sample_every: load.sample,
        deep,
        deep_depth: deep_depth(target),
        stacks: extra.stacks,
        filter: extra.filter.for_bpf(),
    };
    let attached = attach::attach(
        storage,
        &config,
        func,
        load.request,
        extra.companion,
        &features,
    );
    match attached {
        Ok(a) => Ok(Attached {
            probe: {
                // Reading /proc/kallsyms and the vmlinux next calls many
                // functions (vfs_read, page faults): not counted.
                a.probe.maps().own(std::process::id());
                a.probe
            },
            fallback: a.fallback_reason,
            early,
        }),
        // A misspelt function is the likeliest cause: say so, with the
        // names it may have meant, rather than what libbpf said.
        Err(e) if early.is_none() => match host::load_kallsyms() {
            Ok(ksyms) => Err(host::resolve_function(&ksyms, func).err().unwrap_or(e)),
            Err(_) => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// Sets up reasons for the attached program: reads the kernel symbols if
/// not read yet, compiles the profile and fills in the BPF side's slots.
/// An error here detaches the program (it is dropped).
fn set_up<'obj>(
    a: Attached<'obj>,
    target: &Target,
    max_reasons: usize,
    stack_on: Option<&str>,
) -> Result<Loaded<'obj>> {
    let rules_at_load = a.early.is_some();
    let (ksyms, compiled, func_addr, vmlinux) = match a.early {
        Some(early) => early,
        None => {
            let vmlinux = host::debug_vmlinux(target.vmlinux.as_deref());
            let ksyms = host::load_kallsyms()?;
            let func_addr = host::resolve_function(&ksyms, &target.func)?;
            let compiled = compile_target(target, &ksyms, vmlinux.as_deref(), max_reasons)?;
            (ksyms, compiled, func_addr, vmlinux)
        }
    };
    if !rules_at_load {
        // Calls of deeper-frame callers counted from here on are counted
        // under their reasons; those before stay in the early table.
        a.probe.maps().set_deep(&compiled.deep);
    }
    let mut mapper = compiled.mapper;
    mapper.deep = compiled.deep;
    mapper.tail = tail_calls(func_addr);
    let stack_on = stack_on
        .map(|name| mapper.stack_reason(&ksyms, name))
        .transpose()?;
    mapper.sync(a.probe.maps())?;
    a.probe.maps().own(0);
    Ok(Loaded {
        probe: a.probe,
        fallback: a.fallback,
        mapper,
        ksyms,
        func_addr,
        vmlinux,
        stack_on,
    })
}

/// The tail-call check of new call sites of the function at `func`; none,
/// with a notice, where the kernel's text cannot be read.
fn tail_calls(func: u64) -> Option<TailCalls> {
    TailCalls::open(func)
        .map_err(|e| {
            eprintln!(
                "topdown: notice: /proc/kcore: {e}: calls made by a tail jump are counted under \
                 the caller's caller"
            )
        })
        .ok()
}

/// Settings of the counting program beyond what `plan::Load` fixes.
#[derive(Default)]
struct Extra {
    verify_caller: bool,
    companion: Option<Companion>,
    /// Stack capture can be switched on.
    stacks: bool,
    /// Which calls count.
    filter: Filter,
    /// The deeper-frame rules are filled in before load, even though the
    /// kernel's symbols must then be read first: a pinned instance's, so
    /// that its readers never meet the early table.
    rules_at_load: bool,
}

fn mode_line(func: &str, mode: &str, fallback: Option<&str>) -> String {
    match fallback {
        Some(why) => format!("{func} with a kprobe: fentry unavailable: {why}"),
        None => format!("{func} with {mode}"),
    }
}

/// Counts calls of the target by reason, captures stacks, reports. A
/// pinned function is read from its pins instead of being traced again.
pub fn trace(t: Trace) -> Result<Status> {
    host::check_privileges()?;
    if t.target.user.is_some() {
        return trace_user(t);
    }
    if pin::is_pinned(&t.target.func) {
        return trace_pinned(t);
    }
    let stop = stop_on_signals()?;
    let info = run_info(&t);
    warn_baseline(t.session.baseline.as_ref(), &info);
    let mut storage = Storage::default();
    let extra = Extra {
        verify_caller: t.verify_caller,
        companion: t.companion,
        stacks: t.trigger.auto || t.stack_on.is_some(),
        filter: t.filter.clone(),
        rules_at_load: false,
    };
    let attached = attach_target(
        &mut storage,
        &t.target,
        t.max_reasons,
        &t.load,
        extra,
        t.stack_on.as_deref(),
    )?;
    // It counts from here on: what follows only names what it counts.
    eprintln!(
        "topdown: tracing {}",
        mode_line(
            &t.target.func,
            attached.probe.mode().name(),
            attached.fallback.as_deref()
        )
    );
    if let Some(f) = t.filter.describe() {
        eprintln!("topdown: counting only calls {f}");
    }
    let mut loaded = set_up(attached, &t.target, t.max_reasons, t.stack_on.as_deref())?;
    let stack_on = loaded.stack_on;
    let ctx = Context {
        ksyms: &loaded.ksyms,
        mapper: &mut loaded.mapper,
        func_addr: loaded.func_addr,
        stack_on,
        symbols: Symbols::new(loaded.vmlinux, t.session.verbose),
        info,
        filter: t.filter.clone(),
    };
    let ended = session::run(
        loaded.probe,
        ctx,
        Trigger::new(t.trigger, stack_on),
        &t.session,
        &stop,
        &mut Stdout::new(io::stdout().lock()),
    )?;
    finish(ended, &t.files, t.session.top)
}

/// Writes a run's files, whatever ended it; an error that ended it early
/// is its result then (after the files' own errors, printed).
fn finish(ended: session::Ended, files: &Files, top: usize) -> Result<Status> {
    let written = write_outputs(&ended.summary, files, top);
    match (ended.error, written) {
        (None, written) => written,
        (Some(e), Err(out)) => {
            eprintln!("topdown: {out}");
            Err(e)
        }
        (Some(e), Ok(_)) => Err(e),
    }
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
    use libbpf_rs::skel::OpenSkel;
    let Some(user) = t.target.user.clone() else {
        return Err(Error::msg("no user-space target"));
    };
    let stop = stop_on_signals()?;
    let info = run_info(&t);
    warn_baseline(t.session.baseline.as_ref(), &info);
    let config = Config {
        func_addr: 0,
        verify_caller: false,
        user_stacks: true,
        stack_frames: t.load.depth,
        sample_every: t.load.sample,
        deep: None,
        deep_depth: 0,
        stacks: t.trigger.auto || t.stack_on.is_some(),
        filter: t.filter.for_bpf(),
    };
    let features = host::Features::probe();
    let mut storage = std::mem::MaybeUninit::uninit();
    let bare = t.companion == Some(Companion::Bare);
    let open = probe::open(
        &mut storage,
        &config,
        &user.func,
        Mode::Uprobe,
        bare.then_some(Companion::Bare),
        &features,
    )?;
    let skel = open
        .load()
        .map_err(|e| Error::bpf("loading the uprobe program", e))?;
    probe::set_filter(&skel, &config.filter)?;
    let which = probe::Counting::of(&config, &features);
    let mut probe = Probe::new(skel, Mode::Uprobe, which, &user.func, None)?;
    // Reasons: caller functions, routed by the profile's caller lists.
    let mut mapper = Mapper::auto(t.max_reasons);
    for r in t.target.profile.iter().flat_map(|p| &p.reasons) {
        for caller in &r.callers {
            mapper.route(caller, &r.name);
        }
        mapper.reasons.slot(&r.name);
    }
    // --stack-on: a profile reason, not-found, or any caller function.
    let stack_on = t
        .stack_on
        .as_deref()
        .map(|name| match reasons::is_not_found(name) {
            true => crate::bpf::abi::SLOT_NOT_FOUND,
            false => mapper
                .reasons
                .lookup(name)
                .unwrap_or_else(|| mapper.reasons.slot(name)),
        });
    mapper.sync(probe.maps())?;
    let pids: Vec<i32> = t.filter.tgids().iter().map(|&p| p as i32).collect();
    probe.attach_uprobes(&user.path, user.offset as usize, &pids, bare)?;
    eprintln!("topdown: tracing {} with a uprobe", user.describe());
    if let Some(f) = t.filter.describe() {
        eprintln!("topdown: counting only calls {f}");
    }
    let ksyms = Kallsyms::default();
    let ctx = Context {
        ksyms: &ksyms,
        mapper: &mut mapper,
        func_addr: 0,
        stack_on,
        symbols: Symbols::new(None, t.session.verbose),
        info,
        filter: t.filter.clone(),
    };
    let ended = session::run(
        probe,
        ctx,
        Trigger::new(t.trigger, stack_on),
        &t.session,
        &stop,
        &mut Stdout::new(io::stdout().lock()),
    )?;
    finish(ended, &t.files, t.session.top)
}

/// The mapping a pinned instance was made with, agreed with its names map.
fn pinned_mapper(inst: &pin::Instance) -> Result<Mapper> {
    let m = &inst.meta;
    let names = inst.probe.maps().names()?;
    let mut mapper = Mapper::from_routes(m.max_reasons, &names, &m.routes, &m.source_routes);
    mapper.sync(inst.probe.maps())?;
    mapper.tail = tail_calls(m.func_addr);
    Ok(mapper)
}

/// `topdown FUNC` on a pinned function: its counters, read from now on,
/// with stack capture steered through its pins; it keeps counting after.
fn trace_pinned(t: Trace) -> Result<Status> {
    let func = &t.target.func;
    if !t.load_options.is_empty() {
        return Err(Error::msg(format!(
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
    inst.probe.maps().capture(SLOT_NONE, &[])?;
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
        mode_line(func, &meta.mode, meta.fallback.as_deref()),
        report::text::clock_at(meta.pinned_at)
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
    };
    let ended = session::run(
        inst.probe,
        ctx,
        Trigger::new(t.trigger, stack_on),
        &t.session,
        &stop,
        &mut Stdout::new(io::stdout().lock()),
    )?;
    finish(ended, &t.files, t.session.top)
}

/// `topdown pin FUNC`: attaches tier 1 and pins it.
pub fn pin(p: Pin) -> Result<()> {
    host::check_privileges()?;
    let func = &p.target.func;
    if pin::is_pinned(func) {
        return Err(Error::msg(format!(
            "{func} is already pinned (see topdown show {func}); unpin it first with topdown unpin {func}"
        )));
    }
    let (meta, dir) = pin_target(&p, None)?;
    eprintln!(
        "topdown: pinned {} at {}; read it with topdown show {func} or topdown {func}",
        mode_line(func, &meta.mode, meta.fallback.as_deref()),
        dir.display()
    );
    Ok(())
}

/// Attaches tier 1 for `p` and pins it; with `synced` (pin --sync), as
/// that declaration's instance, in place of the one pinned, if any.
fn pin_target(p: &Pin, synced: Option<pin::Synced>) -> Result<(Meta, PathBuf)> {
    let func = &p.target.func;
    let mut storage = Storage::default();
    // Capture can be steered by any later reader; calls of no process are
    // left out (the pinning process is gone soon).
    let extra = Extra {
        stacks: true,
        filter: p.filter.clone(),
        rules_at_load: true,
        ..Extra::default()
    };
    let attached = attach_target(&mut storage, &p.target, p.max_reasons, &p.load, extra, None)?;
    let mut loaded = set_up(attached, &p.target, p.max_reasons, None)?;
    let (kernel, boot_id) = pin::kernel_and_boot();
    let replace = synced.is_some();
    let meta = Meta {
        layout: pin::LAYOUT,
        version: env!("CARGO_PKG_VERSION").to_string(),
        function: func.to_string(),
        func_addr: loaded.func_addr,
        mode: loaded.probe.mode().name().to_string(),
        fallback: loaded.fallback.clone(),
        profile: p.target.profile.as_ref().map(|p| p.origin.clone()),
        routes: loaded.mapper.routes(),
        source_routes: loaded.mapper.source_routes(),
        max_reasons: p.max_reasons,
        vmlinux: loaded.vmlinux.clone(),
        user_stacks: p.load.user_stacks,
        depth: p.load.depth,
        sample: p.load.sample,
        filter: p.filter.describe(),
        knobs: knobs_of(&p.target),
        cgroup: p.filter.cgroup.as_ref().map(|c| c.path.clone()),
        kernel,
        boot_id,
        pinned_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        synced,
    };
    let dir = pin::pin(&mut loaded.probe, func, &meta, replace)?;
    Ok((meta, dir))
}

/// What a pinned function is to sync: pinned by sync (with its
/// declaration), by hand, or unreadable (another layout).
enum Pinned {
    Synced(pin::Synced),
    ByHand,
    Unreadable(Error),
}

fn pinned_state(func: &FuncName) -> Pinned {
    match pin::open(func) {
        Ok(inst) => match inst.meta.synced {
            Some(s) => Pinned::Synced(s),
            None => Pinned::ByHand,
        },
        Err(e) => Pinned::Unreadable(e),
    }
}

/// `topdown pin --sync`: the pinned set made to match the declarations in
/// `dir`. Each file is applied on its own: a bad one is reported in one
/// line (its instance, if sync pinned one, is left as it was) and the
/// others still apply; the exit status says whether all did. Functions
/// pinned by hand are never touched.
pub fn sync(dir: &std::path::Path) -> Result<()> {
    host::check_privileges()?;
    let (declared, bad) = declared::read_dir(dir)?;
    let mut failed = 0usize;
    let mut report = |file: &str, e: &dyn std::fmt::Display| {
        eprintln!("topdown: {}: {e}", dir.join(file).display());
        failed += 1;
    };
    for b in &bad {
        report(&b.file, &b.error);
    }
    let mut changed = 0usize;
    for d in &declared {
        let func = &d.function;
        let want = pin::Synced {
            file: d.file.clone(),
            spec: d.spec.clone(),
        };
        let repin = match pin::is_pinned(func).then(|| pinned_state(func)) {
            None => false,
            Some(Pinned::Synced(have)) if have.spec == want.spec => continue,
            Some(Pinned::Synced(_)) => true,
            Some(Pinned::ByHand) => {
                report(
                    &d.file,
                    &format!(
                        "{func} is pinned by hand, not by topdown pin --sync: \
                         unpin it (topdown unpin {func}) for sync to pin it"
                    ),
                );
                continue;
            }
            Some(Pinned::Unreadable(e)) => {
                report(&d.file, &e);
                continue;
            }
        };
        // Planned as `topdown pin ARGS` would be (checked when read).
        let applied = Cli::try_parse_from(
            ["topdown", "pin"]
                .into_iter()
                .map(String::from)
                .chain(d.args.iter().cloned()),
        )
        .map_err(|e| Error::msg(e.to_string()))
        .and_then(|cli| Plan::from_cli(&cli))
        .and_then(|plan| match plan.job {
            Job::Pin(p) => pin_target(&p, Some(want)),
            _ => Err(Error::msg("not a pin")),
        });
        match applied {
            Ok((meta, _)) => {
                changed += 1;
                eprintln!(
                    "topdown: {} {} as {} declares",
                    if repin { "re-pinned" } else { "pinned" },
                    mode_line(func, &meta.mode, meta.fallback.as_deref()),
                    d.file
                );
            }
            Err(e) => report(&d.file, &e),
        }
    }
    // Sync's own instances no longer declared; one whose file is bad is
    // left as it is.
    for func in pin::pinned()? {
        let Pinned::Synced(have) = pinned_state(&func) else {
            continue;
        };
        if declared.iter().any(|d| d.function == func) || bad.iter().any(|b| b.file == have.file) {
            continue;
        }
        match pin::unpin(&func) {
            Ok(()) => {
                changed += 1;
                eprintln!(
                    "topdown: unpinned {func}: {} declares it no more",
                    have.file
                );
            }
            Err(e) => report(&have.file, &e),
        }
    }
    if changed == 0 && failed == 0 {
        eprintln!(
            "topdown: nothing to change: {} declared in {} and pinned",
            declared.len(),
            dir.display()
        );
    }
    match failed {
        0 => Ok(()),
        n => Err(Error::msg(format!(
            "{n} declaration{} in {} not applied (see above)",
            if n == 1 { "" } else { "s" },
            dir.display()
        ))),
    }
}

/// The pinned instances named (all if none is), each read once, with its
/// meta. Kernel symbols are read (afresh: modules come and go) only if a
/// call site needs resolving.
fn snapshots(funcs: &[FuncName]) -> Result<Vec<(report::Pinned, Meta)>> {
    let mut ksyms = None;
    let names = if funcs.is_empty() {
        pin::pinned()?
    } else {
        funcs.to_vec()
    };
    let mut out = Vec::new();
    for func in &names {
        let inst = pin::open(func)?;
        let mut mapper = pinned_mapper(&inst)?;
        // No reader holds the lock but capture is on, or a process's calls
        // are left out: one was killed. Either sends every call down the
        // counting program's slow path.
        if let Ok(_lock) = pin::Lock::try_take(func)? {
            if inst.probe.maps().capturing().is_some() {
                inst.probe.maps().capture(SLOT_NONE, &[])?;
            }
            inst.probe.maps().own(0);
        }
        let mut symbols = Symbols::new(inst.meta.vmlinux.clone(), false);
        if ksyms.is_none() && inst.probe.maps().unresolved()? {
            ksyms = Some(host::load_kallsyms()?);
        }
        let none = Kallsyms::default();
        let pinned = session::snapshot(
            &inst.probe,
            &inst.meta,
            ksyms.as_ref().unwrap_or(&none),
            &mut mapper,
            &mut symbols,
        )?;
        out.push((pinned, inst.meta));
    }
    Ok(out)
}

/// `topdown show [FUNC...]`: each pinned function's calls since it was
/// pinned; with --baseline compared with a saved result, with --save
/// saved as one.
pub fn show(s: &Show) -> Result<Status> {
    host::check_privileges()?;
    let json = s.json;
    let one = s.save.is_some() || s.baseline.is_some();
    if one && s.funcs.is_empty() {
        // The one pinned function, if there is just one.
        match pin::pinned()?.as_slice() {
            [_] => {}
            [] => return Err(Error::msg("nothing is pinned: nothing to save")),
            _ => {
                return Err(Error::msg(
                    "several functions are pinned: name the one to save",
                ))
            }
        }
    }
    let mut all = Vec::new();
    for (mut p, meta) in snapshots(&s.funcs)? {
        p.threshold = s.threshold;
        p.system = system_state(one, &meta.knobs, meta.cgroup.as_deref());
        p.fix = s.fix.clone();
        all.push(p);
    }
    if let (Some(p), Some(b)) = (all.first_mut(), &s.baseline) {
        let info = RunInfo {
            kernel: p.kernel.clone(),
            profile: p.profile.clone(),
            system: p.system.clone(),
            fix: p.fix.clone(),
        };
        warn_baseline(Some(b), &info);
        let named: Vec<String> = p
            .calls
            .rows
            .iter()
            .filter(|r| !r.special)
            .map(|r| r.reason.clone())
            .collect();
        let now = Side {
            calls: &p.calls,
            named: &named,
        };
        p.compare = Some(compare::compare(b, now, &info));
    }
    let mut out = Stdout::new(io::stdout().lock());
    if all.is_empty() && !json {
        out.write_all(report::text::NOTHING_PINNED.as_bytes())?;
    }
    for (i, p) in all.iter().enumerate() {
        let text = if json {
            report::json::pinned(p) + "\n"
        } else {
            format!(
                "{}{}",
                if i > 0 { "\n" } else { "" },
                report::text::pinned(p)
            )
        };
        out.write_all(text.as_bytes())?;
    }
    out.flush()?;
    let status = Status::of(all.first().and_then(|p| p.compare.as_ref()));
    match (&s.save, all.first()) {
        (Some(path), Some(p)) => saved::save(path, &Saved::of_pinned(p)).map(|()| status),
        _ => Ok(status),
    }
}

/// `topdown unpin FUNC...`, `--all` (no FUNC) or `--synced`: what
/// `topdown pin --sync` pinned.
pub fn unpin(funcs: &[FuncName], synced: bool) -> Result<()> {
    host::check_privileges()?;
    if synced {
        let names: Vec<FuncName> = pin::pinned()?
            .into_iter()
            .filter(|f| matches!(pinned_state(f), Pinned::Synced(_)))
            .collect();
        for func in &names {
            pin::unpin(func)?;
            eprintln!("topdown: unpinned {func}");
        }
        if names.is_empty() {
            eprintln!("topdown: nothing pinned by topdown pin --sync");
        }
        return Ok(());
    }
    let all = funcs.is_empty();
    let names = if all { pin::pinned()? } else { funcs.to_vec() };
    for func in &names {
        pin::unpin(func)?;
        eprintln!("topdown: unpinned {func}");
    }
    if all {
        for name in pin::leftovers() {
            pin::remove_leftover(&name)?;
        }
        if names.is_empty() {
            eprintln!("topdown: nothing was pinned");
        }
    }
    Ok(())
}

/// `topdown serve`: the pinned functions' counters on /metrics.
pub fn serve(listen: SocketAddr, capture: Option<plan::Capture>) -> Result<()> {
    host::check_privileges()?;
    let stop = stop_on_signals()?;
    let captures = capture.map(|_| serve::Captures::default());
    let scrape = || {
        // One function that cannot be read fails its own series, not the
        // scrape.
        let (mut read, mut unreadable) = (Vec::new(), Vec::new());
        for func in pin::pinned()? {
            match snapshots(std::slice::from_ref(&func)) {
                Ok(all) => read.extend(all.into_iter().map(|(p, _)| p)),
                Err(e) => {
                    eprintln!("topdown: scrape: cannot read pinned {func}: {e}");
                    unreadable.push(func.to_string());
                }
            }
        }
        let series = captures.as_ref().map(serve::Captures::series);
        Ok(report::openmetrics::encode(read, unreadable, series))
    };
    let (Some(cap), Some(captures)) = (capture, captures.as_ref()) else {
        return serve::run(listen, &stop, scrape, None);
    };
    std::thread::scope(|s| {
        let server = s.spawn(|| {
            let served = serve::run(listen, &stop, scrape, Some(captures));
            stop.store(true, Ordering::Relaxed);
            served
        });
        let watched = watch_pinned(&stop, cap, captures);
        stop.store(true, Ordering::Relaxed);
        let served = server
            .join()
            .unwrap_or_else(|_| Err(Error::msg("the HTTP server failed")));
        served.and(watched)
    })
}

/// serve --capture's loop: every pinned function is watched (the trigger
/// run on its counters, the hot reason's stacks captured) unless another
/// reader steers its capture, in which case it is watched once that one
/// ends; an instance unpinned or re-pinned is let go within a second.
fn watch_pinned(stop: &AtomicBool, cap: plan::Capture, captures: &serve::Captures) -> Result<()> {
    let ksyms = host::load_kallsyms()?;
    let mut watches: Vec<session::watch::Watch> = Vec::new();
    // Functions not watched, and what was said about each (said once).
    let mut said: std::collections::HashMap<FuncName, String> = Default::default();
    let mut next_scan = std::time::Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let now = std::time::Instant::now();
        if now >= next_scan {
            next_scan = now + std::time::Duration::from_secs(1);
            let pinned = pin::pinned().unwrap_or_default();
            watches.retain(|w| {
                let func = FuncName::parse(w.func()).ok();
                let id = func.as_ref().and_then(pin::instance_id);
                let kept = id == Some(w.instance());
                if !kept {
                    let what = if id.is_some() {
                        "re-pinned"
                    } else {
                        "unpinned"
                    };
                    eprintln!("topdown: {}: {what}: its stack capture stops", w.func());
                    captures.switched(w.func(), None);
                }
                kept
            });
            said.retain(|f, _| pinned.contains(f));
            for func in &pinned {
                if watches.iter().any(|w| w.func() == func.as_str()) {
                    continue;
                }
                let why = match start_watch(func, cap, &ksyms) {
                    Ok(Ok(w)) => {
                        eprintln!(
                            "topdown: {func}: watching for a reason to take over (threshold {}%)",
                            cap.trigger.threshold
                        );
                        said.remove(func);
                        captures.switched(func, None);
                        watches.push(w);
                        continue;
                    }
                    Ok(Err(pid)) => format!(
                        "{func}: its stack capture is steered by topdown (pid {pid}): \
                         watched once that one ends"
                    ),
                    Err(e) => format!("{func}: cannot watch it: {e}"),
                };
                if said.get(func) != Some(&why) {
                    eprintln!("topdown: {why}");
                    said.insert(func.clone(), why);
                }
            }
        }
        let mut failed = Vec::new();
        for (i, w) in watches.iter_mut().enumerate() {
            match w.step(&ksyms) {
                Ok((got, line)) => {
                    if let Some(line) = line {
                        eprintln!("topdown: {line}");
                        captures.switched(w.func(), w.target());
                    }
                    captures.add(w.func(), got);
                }
                Err(e) => {
                    eprintln!("topdown: {}: stack capture stops: {e}", w.func());
                    captures.switched(w.func(), None);
                    failed.push(i);
                }
            }
        }
        for i in failed.into_iter().rev() {
            watches.remove(i);
        }
        let due = watches
            .iter()
            .map(session::watch::Watch::due)
            .fold(next_scan, std::cmp::Ord::min);
        std::thread::sleep(
            due.saturating_duration_since(std::time::Instant::now())
                .min(std::time::Duration::from_millis(50)),
        );
    }
    Ok(())
}

/// A watch of `func`'s pinned instance, or the pid of the reader that
/// steers its capture.
fn start_watch(
    func: &FuncName,
    cap: plan::Capture,
    ksyms: &Kallsyms,
) -> Result<std::result::Result<session::watch::Watch, String>> {
    let lock = match pin::Lock::try_take_for_serve(func)? {
        Ok(lock) => lock,
        Err(holder) => return Ok(Err(holder)),
    };
    let id = pin::instance_id(func).ok_or_else(|| Error::msg("it is not pinned any more"))?;
    let inst = pin::open(func)?;
    if pin::instance_id(func) != Some(id) {
        return Err(Error::msg("it was re-pinned meanwhile"));
    }
    let mapper = pinned_mapper(&inst)?;
    session::watch::Watch::new(inst, id, lock, mapper, cap.trigger, cap.max_rate, ksyms).map(Ok)
}
