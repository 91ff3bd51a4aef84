//! Start-up: the counting program loaded and attached, and what it needs
//! from the kernel's symbols (where the function is, the profile compiled,
//! the debug vmlinux) learnt before load or while it loads.

use std::path::PathBuf;

use crate::bpf::attach::{self, Storage};
use crate::bpf::probe::{self, Companion, Mode, Probe};
use crate::bpf::{limits::MAX_GLUE, Filters, LoadConfig, NameTables};
use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::host;
use crate::kallsyms::Kallsyms;
use crate::plan::{Load, Target, Trace};
use crate::profile;
use crate::reasons::{self, Mapper};
use crate::tracepoint::{self, Syscall};

use super::common::tail_calls;

/// Settings of the counting program beyond what `plan::Load` fixes.
#[derive(Default)]
pub(super) struct Extra {
    pub(super) verify_caller: bool,
    pub(super) companion: Option<Companion>,
    /// Stack capture can be switched on.
    pub(super) stacks: bool,
    /// Which calls count.
    pub(super) filter: Filter,
    /// The deeper-frame rules are filled in before load, even though the
    /// kernel's symbols must then be read first: a pinned instance's, so
    /// that its readers never meet the early table.
    pub(super) rules_at_load: bool,
    /// New sites' calls go to the per-CPU fresh table first: a pinned
    /// instance's, whose new sites stay pending while nobody reads it.
    pub(super) fresh: bool,
}

/// The counting program attached and its reasons set up.
pub(super) struct Started<'obj> {
    pub(super) probe: Probe<'obj>,
    /// Why it is not fentry, if it is not.
    pub(super) fallback: Option<String>,
    pub(super) kernel: Kernel,
}

/// What start-up learns from the kernel's symbols.
pub(super) struct Kernel {
    pub(super) ksyms: Kallsyms,
    /// Where the function is.
    pub(super) func_addr: u64,
    pub(super) vmlinux: Option<PathBuf>,
    /// The profile compiled, with its deeper-frame rules.
    pub(super) mapper: Mapper,
    /// The --stack-on reason's slot.
    pub(super) stack_on: Option<u32>,
    /// A tracepoint's glue (see tracepoint::glue).
    pub(super) glue: Vec<(u64, u64)>,
}

impl Kernel {
    /// Reads the kernel's symbols, finds the function, compiles the
    /// target's profile (warning about what the kernel lacks) and gives
    /// --stack-on its slot.
    fn learn(target: &Target, max_reasons: usize, stack_on: Option<&str>) -> Result<Kernel> {
        let vmlinux = host::debug_vmlinux(target.vmlinux.as_deref());
        let ksyms = host::load_kallsyms()?;
        let (func_addr, glue) = match &target.tracepoint {
            Some(category) => {
                tracepoint::check(&ksyms, category, &target.func)?;
                let fired = syscall_of(target)?.map_or(target.func.as_str(), |s| s.event());
                let (glue, iter) = tracepoint::glue(&ksyms, fired, MAX_GLUE);
                (iter, glue)
            }
            None => (host::resolve_function(&ksyms, &target.func)?, Vec::new()),
        };
        let resolved = match &target.profile {
            Some(p) => {
                let r = profile::resolve(p, &ksyms)?;
                let warnings = [
                    r.missing_warning(target.users_own, |m| ksyms.suggest(m, 1).into_iter().next()),
                    r.source_warning(target.users_own, vmlinux.as_deref()),
                ];
                for w in warnings.into_iter().flatten() {
                    eprintln!("topdown: warning: profile {}: {w}", p.origin);
                }
                Some(r)
            }
            None => None,
        };
        let mut mapper = profile::compile(resolved.as_ref(), max_reasons);
        let stack_on = stack_on
            .map(|name| mapper.stack_reason(&ksyms, name))
            .transpose()?;
        Ok(Kernel {
            ksyms,
            glue,
            func_addr,
            vmlinux,
            mapper,
            stack_on,
        })
    }
}

/// A system call's tracepoint's number (`t:syscalls:sys_enter_NAME`).
fn syscall_of(target: &Target) -> Result<Option<Syscall>> {
    match &target.tracepoint {
        Some(category) => tracepoint::syscall(category, &target.func),
        None => Ok(None),
    }
}

/// Whether kernel symbols are needed before the counting program is
/// loaded: arm64 unwinds compare frames with the function's kallsyms
/// address, as do programs on a kernel without bpf_get_func_ip, a
/// --stack-on name that is no reason must be checked against
/// kernel functions before anything is attached, and `rules_at_load` (a
/// pin) asks for the deeper-frame rules and the reasons' names at load.
/// Otherwise /proc/kallsyms (the
/// longest step of start-up: the kernel formats every symbol) is read
/// while the program loads, and the rules are filled in right after it
/// attaches: calls in between are counted with the frames the rules look
/// at (the early table).
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
    // A tracepoint's glue is given to the programs at load.
    target.tracepoint.is_some()
        || cfg!(target_arch = "aarch64")
        || !host.func_ip_helper
        // A pin: its rules and names go in before it attaches, so that no
        // call is counted before it can be named with nobody reading.
        || rules_at_load
        || function_named
}

/// Whether the programs may name new sites themselves: where the kernel
/// has bpf_loop (and so bpf_snprintf), and no site is checked against an
/// unwind (--verify-caller reports user space's verdicts on each).
fn names_in_kernel(features: &host::Features, extra: &Extra) -> bool {
    features.loop_helper && !extra.verify_caller
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
/// settings, tells `attached` once it counts, then sets up its reasons.
/// Calls from sites not resolved yet are counted as pending and given
/// their reasons then, so none is lost meanwhile. An error after attach
/// detaches the program (it is dropped).
pub(super) fn start<'obj>(
    storage: &'obj mut Storage,
    target: &Target,
    (max_reasons, load, extra): (usize, &Load, Extra),
    stack_on: Option<&str>,
    attached: impl FnOnce(&Probe<'obj>, Option<&str>),
) -> Result<Started<'obj>> {
    host::check_addresses_visible()?;
    let features = host::Features::probe();
    features.check_floor()?;
    let early = if symbols_before_load(target, stack_on, extra.rules_at_load, &features) {
        Some(Kernel::learn(target, max_reasons, stack_on)?)
    } else {
        None
    };
    std::thread::scope(|scope| {
        // Otherwise the symbols are read on another thread while the
        // program loads (both take a few hundred milliseconds under
        // emulation), and are in before it attaches: the first calls'
        // sites are resolved at the first poll, not once /proc/kallsyms
        // has been read after attaching.
        let mut learning = early
            .is_none()
            .then(|| scope.spawn(|| Kernel::learn(target, max_reasons, stack_on)));
        let mut learnt = None;
        let mut ready = || {
            if let Some(h) = learning.take() {
                learnt = Some(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
            }
        };
        let config = LoadConfig {
            func_addr: early.as_ref().map_or(0, |k| k.func_addr),
            verify_caller: extra.verify_caller,
            user_stacks: load.user_stacks,
            stack_frames: load.depth,
            sample_every: load.sample,
            background: load.background,
            drill_levels: load.drill_levels,
            deep: early.as_ref().map(|k| k.mapper.deep.tables()),
            deep_depth: deep_depth(target),
            stacks: extra.stacks,
            filter: Filters {
                syscall: syscall_of(target)?,
                ..extra.filter.for_bpf()
            },
            glue: early.as_ref().map_or(Vec::new(), |k| k.glue.clone()),
            fresh: extra.fresh,
            no_pool: false,
            resolve: names_in_kernel(&features, &extra).then_some(max_reasons as u32),
            names_at_load: early
                .as_ref()
                .filter(|k| k.mapper.kernel_can_name(k.vmlinux.is_some()))
                .map(|k| NameTables {
                    func: k.func_addr,
                    tail: target.tracepoint.is_none()
                        && crate::tailcall::TailCalls::open(k.func_addr).is_ok(),
                    routes: k.mapper.route_slots(),
                    names: k
                        .mapper
                        .reasons
                        .named()
                        .map(|(s, n)| (s, n.to_string()))
                        .collect(),
                }),
        };
        let func = target.func.as_str();
        let a = attach::attach(
            storage,
            &config,
            func,
            load.request,
            extra.companion,
            &features,
            &mut ready,
        );
        ready();
        let a = match a {
            Ok(a) => a,
            // A misspelt function is the likeliest cause: say so, with the
            // names it may have meant, rather than what libbpf said.
            Err(e) => return Err(learnt.and_then(Result::err).unwrap_or(e)),
        };
        // Reading /proc/kcore and the names map next calls kernel
        // functions (vfs_read, page faults): not counted.
        a.probe.maps().own(std::process::id());
        let mut kernel = match early {
            Some(k) => k,
            None => {
                // ready() ran, so the thread's result is in.
                let k =
                    learnt.ok_or_else(|| Error::msg("the kernel's symbols were not read"))??;
                // Calls in the moment between attaching and this are in the
                // early table, and given their reasons from it.
                a.probe.maps().set_deep(&k.mapper.deep);
                k
            }
        };
        attached(&a.probe, a.fallback_reason.as_deref());
        // A tracepoint's call sites call its static call or __traceiter, not
        // the function named: no tail calls to tell apart.
        if target.tracepoint.is_none() {
            kernel.mapper.tail = tail_calls(kernel.func_addr);
        }
        kernel.mapper.sync(a.probe.maps())?;
        // The programs name new sites from now on, where they can and the
        // reasons were not in before attaching.
        let maps = a.probe.maps();
        if config.resolve.is_some()
            && kernel.mapper.kernel_can_name(kernel.vmlinux.is_some())
            && !maps.resolves_in_kernel()
        {
            let tail = kernel.mapper.tail.is_some();
            maps.start_resolving(kernel.func_addr, tail, &kernel.mapper.route_slots())?;
        }
        a.probe.maps().own(0);
        Ok(Started {
            probe: a.probe,
            fallback: a.fallback_reason,
            kernel,
        })
    })
}

/// `topdown -x PATH FUNC`'s start-up: a uprobe program loaded with its
/// reasons, caller functions routed by the profile's caller lists, and
/// the --stack-on slot (a profile reason, not-found, or any caller
/// function); not attached yet.
pub(super) fn start_user<'obj>(
    storage: &'obj mut std::mem::MaybeUninit<libbpf_rs::OpenObject>,
    t: &Trace,
    func: &str,
) -> Result<(Probe<'obj>, Mapper, Option<u32>)> {
    use libbpf_rs::skel::OpenSkel;
    let config = LoadConfig {
        func_addr: 0,
        verify_caller: false,
        user_stacks: true,
        stack_frames: t.load.depth,
        sample_every: t.load.sample,
        background: t.load.background,
        deep: None,
        deep_depth: 0,
        stacks: t.stacks(),
        filter: t.filter.for_bpf(),
        glue: Vec::new(),
        fresh: false,
        no_pool: false,
        resolve: None,
        names_at_load: None,
        drill_levels: 0,
    };
    let features = host::Features::probe();
    let bare = t.companion == Some(Companion::Bare);
    let open = probe::open(
        storage,
        &config,
        func,
        Mode::Uprobe,
        bare.then_some(Companion::Bare),
        &features,
    )?;
    let skel = open
        .load()
        .map_err(|e| Error::bpf("loading the uprobe program", e))?;
    probe::set_filter(&skel, &config.filter)?;
    let which = probe::Counting::of(&config, &features);
    let probe = Probe::new(skel, Mode::Uprobe, which, func, None)?;
    let mut mapper = Mapper::auto(t.max_reasons);
    for r in t.target.profile.iter().flat_map(|p| &p.reasons) {
        for caller in &r.callers {
            mapper.route(caller, &r.name);
        }
        mapper.reasons.slot(&r.name);
    }
    let stack_on = t
        .stack_on
        .as_deref()
        .map(|name| mapper.user_stack_reason(name));
    mapper.sync(probe.maps())?;
    Ok((probe, mapper, stack_on))
}
