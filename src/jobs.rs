//! One function per job, each wiring the pipeline's stages in order:
//! host checks, the profile resolved and compiled, the BPF side attached,
//! the session run, the report written.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::bpf::abi::Config;
use crate::bpf::attach::{self, Storage};
use crate::error::{Error, Result};
use crate::host;
use crate::kallsyms::Kallsyms;
use crate::plan::{Target, Trace};
use crate::profile::{self, Compiled};
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

/// Counts calls of the target by reason, captures stacks, reports.
pub fn trace(t: Trace) -> Result<()> {
    host::check_privileges()?;
    let ksyms = host::load_kallsyms()?;
    let func = t.target.func.as_str();
    let vmlinux = host::debug_vmlinux(t.target.vmlinux.as_deref());
    let Compiled {
        mut mapper,
        callers,
        rules,
    } = compile_target(&t.target, &ksyms, vmlinux.as_deref(), t.max_reasons)?;
    let func_addr = host::resolve_function(&ksyms, func)?;
    let stack_on = t
        .stack_on
        .as_deref()
        .map(|name| mapper.stack_reason(&ksyms, name))
        .transpose()?;
    let config = Config {
        func_addr,
        verify_caller: t.verify_caller,
        user_stacks: t.user_stacks,
        stack_frames: t.depth,
        sample_every: t.sample,
        callers,
        rules,
        own_tgid: std::process::id(),
        stacks: stack_on.is_some() || t.trigger.auto,
    };
    let features = host::Features::probe();

    let stop = stop_on_signals()?;
    let mut storage = Storage::default();
    let attached = attach::attach(
        &mut storage,
        &config,
        func,
        t.request,
        t.companion,
        &features,
    )?;
    match &attached.fallback_reason {
        Some(why) => eprintln!("topdown: tracing {func} with a kprobe: fentry unavailable: {why}"),
        None => eprintln!(
            "topdown: tracing {func} with {}",
            attached.probe.mode().name()
        ),
    }
    let ctx = Context {
        ksyms: &ksyms,
        mapper: &mut mapper,
        func_addr,
        stack_on,
        symbols: Symbols::new(vmlinux, t.session.verbose),
    };
    let trigger = Trigger::new(t.trigger, stack_on);
    session::run(
        attached.probe,
        ctx,
        trigger,
        &t.session,
        &stop,
        &mut io::stdout().lock(),
    )
}
