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
use crate::bpf::probe::{Companion, Probe};
use crate::error::{Error, Result};
use crate::host;
use crate::kallsyms::Kallsyms;
use crate::plan::{Load, Pin, Target, Trace};
use crate::profile::{self, Compiled};
use crate::reasons::Mapper;
use crate::report;
use crate::serve;
use crate::session::{self, Context, Trigger};
use crate::symbolize::Symbols;

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

/// Loads and attaches the counting program for `target` with `load`'s
/// settings: the mapper, where the function is, the debug vmlinux, and the
/// attached probe with why it is not fentry if it is not.
struct Loaded<'obj> {
    mapper: Mapper,
    func_addr: u64,
    vmlinux: Option<PathBuf>,
    probe: Probe<'obj>,
    fallback: Option<String>,
}

#[allow(clippy::too_many_arguments)]
fn load<'obj>(
    storage: &'obj mut Storage,
    ksyms: &Kallsyms,
    target: &Target,
    max_reasons: usize,
    load: &Load,
    extra: Extra,
    stack_on: Option<&str>,
) -> Result<(Loaded<'obj>, Option<u32>)> {
    let func = target.func.as_str();
    let vmlinux = host::debug_vmlinux(target.vmlinux.as_deref());
    let Compiled {
        mut mapper,
        callers,
        rules,
    } = compile_target(target, ksyms, vmlinux.as_deref(), max_reasons)?;
    let func_addr = host::resolve_function(ksyms, func)?;
    let stack_on = stack_on
        .map(|name| mapper.stack_reason(ksyms, name))
        .transpose()?;
    let config = Config {
        func_addr,
        verify_caller: extra.verify_caller,
        user_stacks: load.user_stacks,
        stack_frames: load.depth,
        sample_every: load.sample,
        callers,
        rules,
        stacks: stack_on.is_some() || extra.stacks,
    };
    let attached = attach::attach(
        storage,
        &config,
        func,
        load.request,
        extra.companion,
        &host::Features::probe(),
    )?;
    let probe = attached.probe;
    mapper.sync(probe.maps())?;
    Ok((
        Loaded {
            mapper,
            func_addr,
            vmlinux,
            probe,
            fallback: attached.fallback_reason,
        },
        stack_on,
    ))
}

/// Settings of the counting program beyond what `plan::Load` fixes.
#[derive(Default)]
struct Extra {
    verify_caller: bool,
    companion: Option<Companion>,
    /// Stack capture can be switched on.
    stacks: bool,
}

fn mode_line(func: &str, mode: &str, fallback: Option<&str>) -> String {
    match fallback {
        Some(why) => format!("{func} with a kprobe: fentry unavailable: {why}"),
        None => format!("{func} with {mode}"),
    }
}

/// Counts calls of the target by reason, captures stacks, reports. A
/// pinned function is read from its pins instead of being traced again.
pub fn trace(t: Trace) -> Result<()> {
    host::check_privileges()?;
    if pin::is_pinned(&t.target.func) {
        return trace_pinned(t);
    }
    let ksyms = host::load_kallsyms()?;
    let stop = stop_on_signals()?;
    let mut storage = Storage::default();
    let extra = Extra {
        verify_caller: t.verify_caller,
        companion: t.companion,
        stacks: t.trigger.auto,
    };
    let (mut loaded, stack_on) = load(
        &mut storage,
        &ksyms,
        &t.target,
        t.max_reasons,
        &t.load,
        extra,
        t.stack_on.as_deref(),
    )?;
    eprintln!(
        "topdown: tracing {}",
        mode_line(
            &t.target.func,
            loaded.probe.mode().name(),
            loaded.fallback.as_deref()
        )
    );
    let ctx = Context {
        ksyms: &ksyms,
        mapper: &mut loaded.mapper,
        func_addr: loaded.func_addr,
        stack_on,
        symbols: Symbols::new(loaded.vmlinux, t.session.verbose),
    };
    session::run(
        loaded.probe,
        ctx,
        Trigger::new(t.trigger, stack_on),
        &t.session,
        &stop,
        &mut io::stdout().lock(),
    )
}

/// The mapping a pinned instance was made with, agreed with its names map.
fn pinned_mapper(inst: &pin::Instance) -> Result<Mapper> {
    let m = &inst.meta;
    let names = inst.probe.maps().names()?;
    let mut mapper = Mapper::from_routes(m.max_reasons, &names, &m.routes, &m.source_routes);
    mapper.sync(inst.probe.maps())?;
    Ok(mapper)
}

/// `topdown FUNC` on a pinned function: its counters, read from now on,
/// with stack capture steered through its pins; it keeps counting after.
fn trace_pinned(t: Trace) -> Result<()> {
    let func = t.target.func.as_str();
    if !t.load_options.is_empty() {
        return Err(Error::msg(format!(
            "{func} is pinned, with its mode, profile and stack settings fixed by topdown pin: \
             leave out {} (or unpin it)",
            t.load_options.join(", ")
        )));
    }
    let ksyms = host::load_kallsyms()?;
    let inst = pin::open(func)?;
    let _lock = pin::Lock::take(func)?;
    let mut mapper = pinned_mapper(&inst)?;
    let stack_on = t
        .stack_on
        .as_deref()
        .map(|name| mapper.stack_reason(&ksyms, name))
        .transpose()?;
    // A reader killed earlier may have left capture on; and its samples.
    inst.probe.maps().capture(SLOT_NONE, &[])?;
    let stop = stop_on_signals()?;
    let meta = &inst.meta;
    eprintln!(
        "topdown: reading pinned {} (since {})",
        mode_line(func, &meta.mode, meta.fallback.as_deref()),
        report::text::clock_at(meta.pinned_at)
    );
    let ctx = Context {
        ksyms: &ksyms,
        mapper: &mut mapper,
        func_addr: meta.func_addr,
        stack_on,
        symbols: Symbols::new(meta.vmlinux.clone(), t.session.verbose),
    };
    session::run(
        inst.probe,
        ctx,
        Trigger::new(t.trigger, stack_on),
        &t.session,
        &stop,
        &mut io::stdout().lock(),
    )
}

/// `topdown pin FUNC`: attaches tier 1 and pins it.
pub fn pin(p: Pin) -> Result<()> {
    host::check_privileges()?;
    let func = p.target.func.as_str();
    if pin::is_pinned(func) {
        return Err(Error::msg(format!(
            "{func} is already pinned (see topdown show {func}); unpin it first with topdown unpin {func}"
        )));
    }
    let ksyms = host::load_kallsyms()?;
    let mut storage = Storage::default();
    // Capture can be steered by any later reader; calls of no process are
    // left out (the pinning process is gone soon).
    let extra = Extra {
        stacks: true,
        ..Extra::default()
    };
    let (mut loaded, _) = load(
        &mut storage,
        &ksyms,
        &p.target,
        p.max_reasons,
        &p.load,
        extra,
        None,
    )?;
    let (kernel, boot_id) = pin::kernel_and_boot();
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
        kernel,
        boot_id,
        pinned_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
    };
    let dir = pin::pin(&mut loaded.probe, &meta)?;
    eprintln!(
        "topdown: pinned {} at {}; read it with topdown show {func} or topdown {func}",
        mode_line(func, &meta.mode, meta.fallback.as_deref()),
        dir.display()
    );
    Ok(())
}

/// The pinned instances named (all if none is), each read once. Kernel
/// symbols are read (afresh: modules come and go) only if a call site
/// needs resolving.
fn snapshots(funcs: &[String]) -> Result<Vec<report::Pinned>> {
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
        // No reader holds the lock but capture is on: one was killed.
        if let Ok(Ok(_lock)) = pin::Lock::try_take(func) {
            if inst.probe.maps().capturing().is_some() {
                inst.probe.maps().capture(SLOT_NONE, &[])?;
            }
        }
        let mut symbols = Symbols::new(inst.meta.vmlinux.clone(), false);
        if ksyms.is_none() && inst.probe.maps().unresolved()? {
            ksyms = Some(host::load_kallsyms()?);
        }
        let none = Kallsyms::default();
        out.push(session::snapshot(
            &inst.probe,
            &inst.meta,
            ksyms.as_ref().unwrap_or(&none),
            &mut mapper,
            &mut symbols,
        )?);
    }
    Ok(out)
}

/// `topdown show [FUNC...]`: each pinned function's calls since it was
/// pinned.
pub fn show(funcs: &[String], json: bool) -> Result<()> {
    host::check_privileges()?;
    let all = snapshots(funcs)?;
    let mut out = io::stdout().lock();
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
    Ok(())
}

/// `topdown unpin FUNC...` or `--all` (no FUNC).
pub fn unpin(funcs: &[String]) -> Result<()> {
    host::check_privileges()?;
    let all = funcs.is_empty();
    let names = if all { pin::pinned()? } else { funcs.to_vec() };
    for func in &names {
        pin::unpin(func)?;
        eprintln!("topdown: unpinned {func}");
    }
    if all {
        for dir in pin::leftovers() {
            pin::remove_leftover(&dir)?;
        }
        if names.is_empty() {
            eprintln!("topdown: nothing was pinned");
        }
    }
    Ok(())
}

/// `topdown serve`: the pinned functions' counters on /metrics.
pub fn serve(listen: SocketAddr) -> Result<()> {
    host::check_privileges()?;
    let stop = stop_on_signals()?;
    serve::run(listen, &stop, || {
        snapshots(&[]).map(report::openmetrics::encode)
    })
}
