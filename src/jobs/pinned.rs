//! The jobs on pinned instances: pin, pin --sync, show and unpin.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;

use crate::bpf::attach::Storage;
use crate::bpf::pin::{self, Meta};
use crate::cli::Cli;
use crate::declared::{self, Bad, Declared};
use crate::error::{Error, Result};
use crate::funcname::FuncName;
use crate::host;
use crate::kallsyms::Kallsyms;
use crate::output::Stdout;
use crate::plan::{Job, Pin, Plan, Show};
use crate::reasons::{Mapper, NameTable};
use crate::report::compare::{self, Side};
use crate::report::{self, saved, RunInfo, Saved};
use crate::session;
use crate::symbolize::Symbols;

use super::common::{knobs_of, mode_line, system_state, tail_calls, warn_baseline, Status};
use super::start::{self, Extra};

/// `topdown pin FUNC`: attaches tier 1 and pins it.
pub fn pin(p: Pin) -> Result<()> {
    host::check_privileges()?;
    let func = &p.target.func;
    // Asked for what is there already: the command line is wrong (2).
    if pin::is_pinned(func) {
        return Err(Error::usage(format!(
            "{func} is already pinned (see topdown show {func}); unpin it first with topdown unpin {func}"
        )));
    }
    let (meta, dir, named_in_kernel) = pin_target(&p, None)?;
    if !named_in_kernel {
        eprintln!(
            "topdown: {func}: calls from call sites first seen from now on are named when a topdown \
             reads the pin (show, serve, a live run): the kernel names them itself from Linux 5.17 \
             (bpf_loop), and this is {}",
            host::kernel_release().unwrap_or_else(|| "older".into())
        );
    }
    eprintln!(
        "topdown: pinned {} at {}; read it with topdown show {func} or topdown {func}",
        mode_line(func, meta.mode, meta.fallback.as_deref()),
        dir.display()
    );
    Ok(())
}

/// Attaches tier 1 for `p` and pins it; with `synced` (pin --sync), as
/// that declaration's instance, in place of the one pinned, if any.
/// Also says whether the programs name new call sites themselves.
fn pin_target(p: &Pin, synced: Option<pin::Synced>) -> Result<(Meta, PathBuf, bool)> {
    let func = &p.target.func;
    let mut storage = Storage::default();
    // Capture can be steered by any later reader; calls of no process are
    // left out (the pinning process is gone soon).
    let extra = Extra {
        stacks: true,
        filter: p.filter.clone(),
        rules_at_load: true,
        fresh: true,
        ..Extra::default()
    };
    let settings = (p.max_reasons, &p.load, extra);
    let mut started = start::start(&mut storage, &p.target, settings, None, |_, _| {})?;
    let (kernel, boot_id) = pin::kernel_and_boot();
    let replace = synced.is_some();
    let k = &started.kernel;
    let meta = Meta {
        layout: pin::LAYOUT,
        version: env!("CARGO_PKG_VERSION").to_string(),
        function: func.to_string(),
        tracepoint: p.target.tracepoint.clone(),
        func_addr: k.func_addr,
        mode: started.probe.mode(),
        fallback: started.fallback.clone(),
        profile: p.target.profile.as_ref().map(|p| p.origin.clone()),
        routes: k.mapper.routes(),
        source_routes: k.mapper.source_routes(),
        max_reasons: p.max_reasons,
        vmlinux: k.vmlinux.clone(),
        user_stacks: p.load.user_stacks,
        depth: p.load.depth,
        sample: p.load.sample,
        background: p.load.background,
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
    let named_in_kernel = started.probe.maps().resolves_in_kernel();
    let dir = pin::pin(&mut started.probe, func, &meta, replace)?;
    Ok((meta, dir, named_in_kernel))
}

/// The mapping a pinned instance was made with, agreed with its names map.
pub(super) fn pinned_mapper(inst: &pin::Instance) -> Result<Mapper> {
    let m = &inst.meta;
    let names = inst.probe.maps().names()?;
    let mut mapper = Mapper::from_routes(m.max_reasons, &names, &m.routes, &m.source_routes);
    mapper.sync(inst.probe.maps())?;
    // A tracepoint's call sites call its static call: no tail calls.
    if !m.mode.is_tracepoint() {
        mapper.tail = tail_calls(m.func_addr);
    }
    Ok(mapper)
}

/// What a pinned function is to sync: pinned by sync (with its
/// declaration), by hand, made by a topdown with another map layout
/// (Foreign), or unreadable.
enum PinState {
    Synced(pin::Synced),
    ByHand,
    Foreign,
    Unreadable(Error),
}

fn pinned_state(func: &FuncName) -> PinState {
    match pin::try_open(func) {
        Ok(inst) => match inst.meta.synced {
            Some(s) => PinState::Synced(s),
            None => PinState::ByHand,
        },
        Err(pin::Refused::Foreign(_)) => PinState::Foreign,
        Err(pin::Refused::Failed(e)) => PinState::Unreadable(e),
    }
}

/// `topdown pin --sync`: the pinned set made to match the declarations in
/// `dir`. Each file is applied on its own: a bad one is reported in one
/// line (its instance, if sync pinned one, is left as it was) and the
/// others still apply; the exit status says whether all did. Functions
/// pinned by hand are never touched, unless this topdown cannot read them
/// (another map layout): a declared one is then replaced.
pub fn sync(dir: &Path) -> Result<()> {
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
    // Kernel symbols are read only for a file named other than what it
    // declares (sync runs at every boot, and the read takes seconds under
    // emulation); without them the check is left out: sync_one says why
    // it fails.
    let ksyms = std::cell::OnceCell::new();
    let is_function = |name: &str| {
        ksyms
            .get_or_init(|| host::load_kallsyms().ok())
            .as_ref()
            .is_some_and(|k: &Kallsyms| k.function(name).next().is_some())
    };
    for d in &declared {
        if let Some(w) = declared::misnamed(d, is_function) {
            eprintln!("topdown: {}: {w}", dir.join(&d.file).display());
        }
    }
    let mut changed = 0usize;
    for d in &declared {
        match sync_one(d) {
            Ok(Some(done)) => {
                changed += 1;
                eprintln!("topdown: {done}");
            }
            Ok(None) => {}
            Err(e) => report(&d.file, &e),
        }
    }
    changed += unpin_undeclared(&declared, &bad, &mut report)?;
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

/// Pins `d`'s function as it declares, unless it already is (None); what
/// was done otherwise.
fn sync_one(d: &Declared) -> Result<Option<String>> {
    let func = &d.function;
    let want = pin::Synced {
        file: d.file.clone(),
        spec: d.spec.clone(),
    };
    // What was there before: nothing, sync's own older declaration, or an
    // instance this topdown cannot read (an upgrade changed the layout): it
    // is replaced, whoever pinned it, and its counts restart.
    let (repin, restart) = match pin::is_pinned(func).then(|| pinned_state(func)) {
        None => (false, ""),
        Some(PinState::Synced(have)) if have.spec == want.spec => return Ok(None),
        Some(PinState::Synced(_)) => (true, ""),
        Some(PinState::Foreign) => (
            true,
            " (its old instance was made by a topdown with another map layout: its counts restart at 0)",
        ),
        Some(PinState::ByHand) => {
            return Err(Error::msg(format!(
                "{func} is pinned by hand, not by topdown pin --sync: \
                 unpin it (topdown unpin {func}) for sync to pin it"
            )))
        }
        Some(PinState::Unreadable(e)) => return Err(e),
    };
    // Planned as `topdown pin ARGS` would be (checked when read).
    let args = ["topdown", "pin"].into_iter().map(String::from);
    let cli = Cli::try_parse_from(args.chain(d.args.iter().cloned()))
        .map_err(|e| Error::msg(e.to_string()))?;
    let (meta, _, _) = match Plan::from_cli(&cli)?.job {
        Job::Pin(p) => pin_target(&p, Some(want))?,
        _ => return Err(Error::msg("not a pin")),
    };
    Ok(Some(format!(
        "{} {} as {} declares{restart}",
        if repin { "re-pinned" } else { "pinned" },
        mode_line(func, meta.mode, meta.fallback.as_deref()),
        d.file
    )))
}

/// Unpins sync's own instances no longer declared (one whose file is bad
/// is left as it is); how many.
fn unpin_undeclared(
    declared: &[Declared],
    bad: &[Bad],
    report: &mut impl FnMut(&str, &dyn std::fmt::Display),
) -> Result<usize> {
    let mut changed = 0;
    for func in pin::pinned()? {
        let PinState::Synced(have) = pinned_state(&func) else {
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
    Ok(changed)
}

/// The kernel's symbols, for naming pinned instances' new call sites,
/// read when first needed and then at most once a minute: reading
/// /proc/kallsyms costs more than a scrape should (150,000 lines; seconds
/// under emulation), and only a module load brings call sites it did not
/// name.
#[derive(Default)]
pub(super) struct KsymsCache {
    loaded: Option<(Instant, Kallsyms)>,
}

impl KsymsCache {
    const MAX_AGE: Duration = Duration::from_secs(60);

    /// Reads the symbols unless a fresh enough copy is at hand.
    fn refresh(&mut self) -> Result<()> {
        if self
            .loaded
            .as_ref()
            .is_none_or(|(at, _)| at.elapsed() > Self::MAX_AGE)
        {
            self.loaded = Some((Instant::now(), host::load_kallsyms()?));
        }
        Ok(())
    }

    fn current(&self) -> Option<&Kallsyms> {
        self.loaded.as_ref().map(|(_, k)| k)
    }
}

/// The pinned instances named (all if none is), each read once, with its
/// meta. Kernel symbols are taken from `ksyms_cache` only if a call site
/// needs resolving.
pub(super) fn snapshots(
    funcs: &[FuncName],
    ksyms_cache: &mut KsymsCache,
) -> Result<Vec<(report::Pinned, Meta)>> {
    // Read once a call at most, and only if an instance needs it.
    let mut needed = false;
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
            if !inst.probe.maps().capturing().is_empty() {
                inst.probe.maps().stop_capture()?;
            }
            inst.probe.maps().own(0);
        }
        let mut symbols = Symbols::new(inst.meta.vmlinux.clone(), false);
        if !needed && inst.probe.maps().unresolved()? {
            ksyms_cache.refresh()?;
            needed = true;
        }
        let none = Kallsyms::default();
        let ksyms = if needed { ksyms_cache.current() } else { None };
        let pinned = session::snapshot(
            &inst.probe,
            &inst.meta,
            ksyms.unwrap_or(&none),
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
    for (mut p, meta) in snapshots(&s.funcs, &mut KsymsCache::default())? {
        p.threshold = s.threshold;
        p.system = system_state(one, &meta.knobs, meta.cgroup.as_deref());
        p.fix = s.fix.clone();
        all.push(p);
    }
    if let (Some(p), Some(b)) = (all.first_mut(), &s.baseline) {
        compare_pinned(p, b);
    }
    if all.is_empty() && matches!(s.printer, report::printer::Printer::Json) {
        // No object on standard output, which stays NDJSON; the reader
        // is told why.
        eprintln!("topdown: {}", report::text::NOTHING_PINNED.trim_end());
    }
    let mut out = Stdout::new(io::stdout().lock());
    out.write_all(s.printer.pinned(&all).as_bytes())?;
    out.flush()?;
    let status = Status::of(all.first().and_then(|p| p.compare.as_ref()));
    match (&s.save, all.first()) {
        (Some(path), Some(p)) => saved::save(path, &Saved::of_pinned(p)).map(|()| status),
        _ => Ok(status),
    }
}

/// `p`'s counts compared with the baseline `b`, warned about first if
/// they come from another kernel or profile.
fn compare_pinned(p: &mut report::Pinned, b: &report::Baseline) {
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
        gone: &[],
    };
    p.compare = Some(compare::compare(b, now, &info));
}

/// `topdown unpin FUNC...`, `--all` (no FUNC) or `--synced`: what
/// `topdown pin --sync` pinned.
pub fn unpin(funcs: &[FuncName], synced: bool) -> Result<()> {
    host::check_privileges()?;
    if synced {
        let names: Vec<FuncName> = pin::pinned()?
            .into_iter()
            .filter(|f| matches!(pinned_state(f), PinState::Synced(_)))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kallsyms_are_read_once_a_minute_at_most() {
        let mut cache = KsymsCache::default();
        assert!(cache.current().is_none());
        if let Err(e) = cache.refresh() {
            // Not root, or addresses hidden: nothing to cache.
            crate::testing::skip(&format!("reading /proc/kallsyms: {e}"));
            return;
        }
        let first = cache.loaded.as_ref().map(|(at, _)| *at);
        cache.refresh().unwrap();
        assert_eq!(cache.loaded.as_ref().map(|(at, _)| *at), first);
        assert!(!cache.current().unwrap().is_empty());
        // Past its age, the next refresh reads them again.
        let at = &mut cache.loaded.as_mut().unwrap().0;
        if let Some(old) = at.checked_sub(KsymsCache::MAX_AGE + Duration::from_secs(1)) {
            *at = old;
            cache.refresh().unwrap();
            assert_ne!(cache.loaded.as_ref().map(|(at, _)| *at), Some(old));
        }
    }
}
