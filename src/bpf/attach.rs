//! Loading and attaching the counting program: fentry, else a kprobe, and
//! refusals explained in terms a user can act on.

use std::mem::MaybeUninit;

use libbpf_rs::skel::OpenSkel;
use libbpf_rs::OpenObject;

use crate::bpf::abi::LoadConfig;
use crate::bpf::probe::{self, Companion, Mode, Probe};
use crate::error::{Error, Result};
use crate::host::Features;

/// The mode the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    /// fentry, falling back to a kprobe.
    Auto,
    Only(Mode),
    /// A tracepoint: tp_btf, falling back to raw_tp.
    Tracepoint,
    /// A tracepoint through raw_tp only (rawtracepoint:).
    RawTracepoint,
}

/// An attached probe, and why fentry was not used if it was not.
pub(crate) struct Attached<'obj> {
    pub(crate) probe: Probe<'obj>,
    pub(crate) fallback_reason: Option<String>,
}

/// One object storage per attempt: a failed load consumes its storage.
pub(crate) struct Storage {
    fentry: MaybeUninit<OpenObject>,
    kprobe: MaybeUninit<OpenObject>,
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            fentry: MaybeUninit::uninit(),
            kprobe: MaybeUninit::uninit(),
        }
    }
}

const ENOTSUPP: i32 = 524; // kernel-internal, seen by user space as-is

/// Loads and attaches the counting program for `func` in the requested
/// mode, and the companion program if asked for (fentry only). In auto
/// mode a refused fentry falls back to a kprobe; if both are refused the
/// error names both reasons. `ready` runs between load and attach: it
/// waits for what the first calls need (the kernel's symbols, read
/// meanwhile).
pub(crate) fn attach<'obj>(
    storage: &'obj mut Storage,
    config: &LoadConfig,
    func: &str,
    req: Request,
    companion: Option<Companion>,
    host: &Features,
    ready: &mut dyn FnMut(),
) -> Result<Attached<'obj>> {
    if req == Request::Tracepoint {
        // A tracepoint's glue was read before load.
        ready();
        return attach_tracepoint(storage, config, func, companion, host);
    }
    if req == Request::RawTracepoint {
        ready();
        let companion = companion.filter(|c| *c == Companion::Bare);
        return try_tp(
            &mut storage.kprobe,
            config,
            func,
            Mode::RawTp,
            companion,
            host,
        )
        .map(|probe| Attached {
            probe,
            fallback_reason: None,
        })
        .map_err(|why| Error::msg(format!("cannot trace tracepoint {func} with raw_tp: {why}")));
    }
    let fentry_err = match req {
        Request::Only(Mode::Kprobe) => None,
        _ => match try_fentry(&mut storage.fentry, config, func, companion, host, ready) {
            Ok(probe) => {
                return Ok(Attached {
                    probe,
                    fallback_reason: None,
                })
            }
            Err(why) => Some(why),
        },
    };
    if req == Request::Only(Mode::Fentry) {
        let why = fentry_err.unwrap_or_default();
        return Err(Error::msg(format!(
            "cannot trace {func} with fentry: {why}"
        )));
    }
    match try_kprobe(&mut storage.kprobe, config, func, companion, host, ready) {
        Ok(probe) => Ok(Attached {
            probe,
            fallback_reason: fentry_err,
        }),
        Err(kwhy) => Err(Error::msg(match fentry_err {
            Some(fwhy) => format!("cannot trace {func}: fentry: {fwhy}; kprobe: {kwhy}"),
            None => format!("cannot trace {func} with a kprobe: {kwhy}"),
        })),
    }
}

/// Why fentry and tracepoint programs cannot load here.
fn no_btf() -> String {
    format!(
        "this {} kernel has no BTF ({} is missing; Linux 5.4 and later export it, \
         built with CONFIG_DEBUG_INFO_BTF)",
        crate::host::ARCH,
        crate::host::BTF_PATH
    )
}

fn try_fentry<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    config: &LoadConfig,
    func: &str,
    companion: Option<Companion>,
    host: &Features,
    ready: &mut dyn FnMut(),
) -> std::result::Result<Probe<'obj>, String> {
    if !host.btf {
        return Err(no_btf());
    }
    // libbpf looks FUNC up in BTF when the target is set, so "not in BTF"
    // can come from open as well as from load.
    let open = probe::open(storage, config, func, Mode::Fentry, companion, host)
        .map_err(|e| fentry_refusal(&e, func))?;
    let skel = open
        .load()
        .map_err(|e| fentry_refusal(&Error::bpf("load", e), func))?;
    probe::set_filter(&skel, &config.filter).map_err(|e| e.to_string())?;
    probe::set_names(&skel, config).map_err(|e| e.to_string())?;
    let which = probe::Counting::of(config, host);
    ready();
    let link = probe::counting(&skel, Some(Mode::Fentry), which)
        .attach_trace()
        .map_err(|e| {
            let err = Error::bpf("attach", e);
            match err.errno() {
                Some(libc::EPERM) | Some(libc::EACCES) => {
                    "the kernel refused to attach the fentry program (EPERM)".to_string()
                }
                Some(ENOTSUPP) | Some(libc::EOPNOTSUPP) => no_trampolines(),
                Some(libc::EINVAL) | Some(libc::EBUSY) | Some(libc::ENOENT) => format!(
                    "{func} cannot be traced by fentry (notrace, or not in ftrace's list): {err}"
                ),
                _ => format!("the fentry program failed to {err}"),
            }
        })?;
    let mut probe =
        Probe::new(skel, Mode::Fentry, which, func, Some(link)).map_err(|e| e.to_string())?;
    if let Some(kind) = companion {
        probe.attach_companion(kind).map_err(|e| e.to_string())?;
    }
    Ok(probe)
}

/// Why fentry could not be loaded, in words a user can act on.
fn fentry_refusal(err: &Error, func: &str) -> String {
    match err.errno() {
        Some(libc::EPERM) => "the kernel refused the fentry program (EPERM at load): \
             BPF trampolines are not permitted or not supported here"
            .to_string(),
        Some(libc::ESRCH) | Some(libc::ENOENT) => format!(
            "{func} is not in the kernel's BTF (static, inlined or left out of BTF), \
             so fentry cannot attach to it"
        ),
        Some(ENOTSUPP) | Some(libc::EOPNOTSUPP) => no_trampolines(),
        _ => format!("the fentry program failed: {err}{}", verifier_says()),
    }
}

/// The verifier's reason for refusing the program just loaded, as a
/// suffix ("" if it gave none).
fn verifier_says() -> String {
    crate::bpf::log::take_verifier_reason()
        .map(|r| format!(" (the verifier says: {r})"))
        .unwrap_or_default()
}

fn no_trampolines() -> String {
    format!(
        "this {} kernel has no BPF trampolines (fentry: Linux 5.5 on x86_64, 6.0 on arm64)",
        crate::host::ARCH
    )
}

fn try_kprobe<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    config: &LoadConfig,
    func: &str,
    companion: Option<Companion>,
    host: &Features,
    ready: &mut dyn FnMut(),
) -> std::result::Result<Probe<'obj>, String> {
    if !host.kprobes {
        return Err(format!(
            "this {} kernel has no kprobes (CONFIG_KPROBES is off; BPF kprobe programs: Linux 4.1)",
            crate::host::ARCH
        ));
    }
    let companion = companion.filter(|c| *c == Companion::Bare);
    let open = probe::open(storage, config, func, Mode::Kprobe, companion, host)
        .map_err(|e| e.to_string())?;
    let skel = open.load().map_err(|e| {
        if host.btf {
            format!(
                "the kprobe program failed to {}{}",
                Error::bpf("load", e),
                verifier_says()
            )
        } else {
            // Its pt_regs accesses are CO-RE relocations, which libbpf
            // resolves against the kernel's BTF.
            format!(
                "the kprobe program needs the kernel's BTF as well, and this {} kernel has none",
                crate::host::ARCH
            )
        }
    })?;
    probe::set_filter(&skel, &config.filter).map_err(|e| e.to_string())?;
    probe::set_names(&skel, config).map_err(|e| e.to_string())?;
    let which = probe::Counting::of(config, host);
    ready();
    let link = probe::counting(&skel, Some(Mode::Kprobe), which)
        .attach_kprobe(false, func)
        .map_err(|e| {
            let err = Error::bpf("attach", e);
            match err.errno() {
                Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) => format!(
                    "the kernel cannot kprobe {func} (kprobes not built in, \
                     or {func} not probe-able)"
                ),
                Some(libc::EINVAL) => {
                    format!("{func} cannot be kprobed (blacklisted or not a probe-able address)")
                }
                _ => format!("the kprobe failed to {err}"),
            }
        })?;
    let mut probe =
        Probe::new(skel, Mode::Kprobe, which, func, Some(link)).map_err(|e| e.to_string())?;
    if let Some(kind) = companion {
        probe.attach_companion(kind).map_err(|e| e.to_string())?;
    }
    Ok(probe)
}

/// A tracepoint's program: tp_btf (its arguments typed by BTF), else a raw
/// tracepoint; `event` is the tracepoint's name alone, as both attach by.
fn attach_tracepoint<'obj>(
    storage: &'obj mut Storage,
    config: &LoadConfig,
    event: &str,
    companion: Option<Companion>,
    host: &Features,
) -> Result<Attached<'obj>> {
    let companion = companion.filter(|c| *c == Companion::Bare);
    let btf_err = match try_tp(
        &mut storage.fentry,
        config,
        event,
        Mode::TpBtf,
        companion,
        host,
    ) {
        Ok(probe) => {
            return Ok(Attached {
                probe,
                fallback_reason: None,
            })
        }
        Err(why) => why,
    };
    match try_tp(
        &mut storage.kprobe,
        config,
        event,
        Mode::RawTp,
        companion,
        host,
    ) {
        Ok(probe) => Ok(Attached {
            probe,
            fallback_reason: Some(btf_err),
        }),
        Err(rwhy) => Err(Error::msg(format!(
            "cannot trace tracepoint {event}: tp_btf: {btf_err}; raw_tp: {rwhy}"
        ))),
    }
}

fn try_tp<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    config: &LoadConfig,
    event: &str,
    mode: Mode,
    companion: Option<Companion>,
    host: &Features,
) -> std::result::Result<Probe<'obj>, String> {
    if !host.btf {
        // The programs' CO-RE reads are resolved against the kernel's BTF.
        return Err(no_btf());
    }
    // A system call's event (`event` names it) is raw_syscalls's, filtered.
    let named = event;
    let event = config.filter.syscall.map_or(event, |s| s.event());
    let open = probe::open(storage, config, event, mode, companion, host).map_err(|e| {
        match e.errno() {
            Some(libc::ESRCH) | Some(libc::ENOENT) => {
                format!("the kernel's BTF has no btf_trace_{event}")
            }
            _ => e.to_string(),
        }
    })?;
    let skel = open.load().map_err(|e| {
        let err = Error::bpf("load", e);
        match err.errno() {
            Some(libc::ESRCH) | Some(libc::ENOENT) if mode == Mode::TpBtf => {
                format!("the kernel's BTF has no btf_trace_{event}")
            }
            _ => format!("the {mode} program failed to {err}{}", verifier_says()),
        }
    })?;
    probe::set_filter(&skel, &config.filter).map_err(|e| e.to_string())?;
    probe::set_names(&skel, config).map_err(|e| e.to_string())?;
    let which = probe::Counting::of(config, host);
    let prog = probe::counting(&skel, Some(mode), which);
    let link = match mode {
        Mode::RawTp => prog.attach_raw_tracepoint(event),
        _ => prog.attach_trace(),
    }
    .map_err(|e| {
        let err = Error::bpf("attach", e);
        match err.errno() {
            Some(libc::ENOENT) => format!("this kernel has no tracepoint {event}"),
            _ => format!("the {mode} program failed to {err}"),
        }
    })?;
    let mut probe = Probe::new(skel, mode, which, named, Some(link)).map_err(|e| e.to_string())?;
    if let Some(kind) = companion {
        probe.attach_companion(kind).map_err(|e| e.to_string())?;
    }
    Ok(probe)
}
