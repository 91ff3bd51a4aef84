//! Choosing how to hook the traced function (fentry, else kprobe) and
//! explaining refusals in terms a user can act on.

use std::fs;
use std::mem::MaybeUninit;
use std::path::Path;

use libbpf_rs::skel::OpenSkel;
use libbpf_rs::OpenObject;

use crate::error::{Error, Result};
use crate::kallsyms::Kallsyms;
use crate::probe::{self, Mode, Probe, Settings};

/// The mode the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// fentry, falling back to a kprobe.
    Auto,
    Only(Mode),
}

/// An attached probe, and why fentry was not used if it was not.
pub struct Attached<'obj> {
    pub probe: Probe<'obj>,
    pub fallback_reason: Option<String>,
}

const BTF_PATH: &str = "/sys/kernel/btf/vmlinux";
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;
const ENOTSUPP: i32 = 524; // kernel-internal, seen by user space as-is

/// Fails unless we may load tracing programs.
pub fn check_privileges() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return Ok(());
    }
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let caps = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    let has = |c: u32| caps & (1u64 << c) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return Ok(());
    }
    Err(Error::msg(
        "not enough privileges: run as root, or grant CAP_BPF and CAP_PERFMON \
         (plus CAP_SYSLOG to read kernel addresses)",
    ))
}

/// Loads kallsyms and checks that its addresses are readable.
pub fn load_kallsyms() -> Result<Kallsyms> {
    let k = Kallsyms::load().map_err(|e| Error::msg(format!("cannot read /proc/kallsyms: {e}")))?;
    if k.is_empty() || k.addresses_hidden() {
        let restrict = fs::read_to_string("/proc/sys/kernel/kptr_restrict")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".into());
        let fix = if restrict.parse::<u32>().is_ok_and(|r| r >= 2) {
            "set kernel.kptr_restrict to 0 or 1"
        } else {
            "run as root, or grant CAP_SYSLOG"
        };
        return Err(Error::msg(format!(
            "kernel symbol addresses are hidden (kernel.kptr_restrict={restrict}): {fix}"
        )));
    }
    Ok(k)
}

/// The entry address of `func`, or an error suggesting close names.
pub fn resolve_function(ksyms: &Kallsyms, func: &str) -> Result<u64> {
    let mut same = ksyms.named(func);
    if let Some(s) = same.next() {
        let others = same.count();
        if others > 0 {
            // Static functions of one name in several files: the kernel
            // attaches to one of them; if not this one, its calls show up
            // as "caller not found" rather than under wrong reasons.
            eprintln!(
                "topdown: warning: {} kernel functions are named {func}; assuming the one at {:#x}",
                others + 1,
                s.addr
            );
        }
        return Ok(s.addr);
    }
    let close = ksyms.suggest(func, 5);
    let hint = if close.is_empty() {
        "check the spelling, or load the module that has it".to_string()
    } else {
        format!("did you mean: {}?", close.join(", "))
    };
    Err(Error::msg(format!(
        "no kernel function named '{func}' (not in /proc/kallsyms: misspelled, inlined everywhere, or not built); {hint}"
    )))
}

/// Loads and attaches the counting program in the requested mode. In auto
/// mode a refused fentry falls back to a kprobe; if both are refused the
/// error names both reasons.
pub fn attach<'obj>(
    fentry_storage: &'obj mut MaybeUninit<OpenObject>,
    kprobe_storage: &'obj mut MaybeUninit<OpenObject>,
    settings: &Settings,
    req: Request,
) -> Result<Attached<'obj>> {
    let func = &settings.func;
    let fentry_err = match req {
        Request::Only(Mode::Kprobe) => None,
        _ => match try_fentry(fentry_storage, settings) {
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
    match try_kprobe(kprobe_storage, settings) {
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

fn try_fentry<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    settings: &Settings,
) -> std::result::Result<Probe<'obj>, String> {
    let func = &settings.func;
    if !Path::new(BTF_PATH).exists() {
        return Err(format!("the kernel has no BTF ({BTF_PATH} is missing)"));
    }
    // libbpf looks FUNC up in BTF when the target is set, so "not in BTF"
    // can come from open as well as from load.
    let open =
        probe::open(storage, settings, Mode::Fentry).map_err(|e| fentry_refusal(&e, func))?;
    let skel = open
        .load()
        .map_err(|e| fentry_refusal(&Error::bpf("load", e), func))?;
    let link = skel.progs.td_fentry.attach_trace().map_err(|e| {
        let err = Error::bpf("attach", e);
        match err.errno() {
            Some(libc::EPERM) | Some(libc::EACCES) => {
                "the kernel refused to attach the fentry program (EPERM)".to_string()
            }
            Some(ENOTSUPP) | Some(libc::EOPNOTSUPP) => {
                "this kernel has no BPF trampolines (fentry unsupported)".to_string()
            }
            Some(libc::EINVAL) | Some(libc::EBUSY) | Some(libc::ENOENT) => format!(
                "{func} cannot be traced by fentry (notrace, or not in ftrace's list): {err}"
            ),
            _ => format!("the fentry program failed to {err}"),
        }
    })?;
    Ok(Probe::new(skel, Mode::Fentry, func, Some(link)))
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
        Some(ENOTSUPP) | Some(libc::EOPNOTSUPP) => {
            "this kernel has no BPF trampolines (fentry unsupported)".to_string()
        }
        _ => format!("the fentry program failed: {err}"),
    }
}

fn try_kprobe<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    settings: &Settings,
) -> std::result::Result<Probe<'obj>, String> {
    let func = &settings.func;
    let open = probe::open(storage, settings, Mode::Kprobe).map_err(|e| e.to_string())?;
    let skel = open
        .load()
        .map_err(|e| format!("the kprobe program failed to {}", Error::bpf("load", e)))?;
    let link = skel
        .progs
        .td_kprobe
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
    Ok(Probe::new(skel, Mode::Kprobe, func, Some(link)))
}
