//! What the running kernel and this process allow, checked before anything
//! is loaded: privileges, kernel symbol addresses, the traced function,
//! BTF and kprobe support, a debug vmlinux.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::kallsyms::Kallsyms;

pub(crate) const BTF_PATH: &str = "/sys/kernel/btf/vmlinux";

/// The architecture, as the kernel (and Debian) name it, for messages about
/// what a kernel of that architecture lacks.
pub(crate) const ARCH: &str = match std::env::consts::ARCH.as_bytes() {
    b"aarch64" => "arm64",
    _ => std::env::consts::ARCH,
};
const PMU_DIR: &str = "/sys/bus/event_source/devices";

const CAP_SYSLOG: u32 = 34;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Fails unless we may load tracing programs.
pub(crate) fn check_privileges() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return Ok(());
    }
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    if has_bpf_caps(&status) {
        return Ok(());
    }
    Err(Error::msg(
        "not enough privileges: run as root, or grant CAP_BPF and CAP_PERFMON \
         (plus CAP_SYSLOG to read kernel addresses)",
    ))
}

/// The effective capabilities in a /proc/PID/status text.
fn effective_caps(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

/// CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON, in a /proc/PID/status text.
fn has_bpf_caps(status: &str) -> bool {
    let caps = effective_caps(status);
    let has = |c: u32| caps & (1u64 << c) != 0;
    has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))
}

/// Whether /proc/kallsyms shows this process zeros for addresses, by
/// kernel.kptr_restrict and its capabilities (None: unknown).
fn addresses_hidden(restrict: Option<u32>, status: &str) -> bool {
    let syslog = effective_caps(status) & (1u64 << CAP_SYSLOG) != 0;
    match restrict {
        Some(0) | None => false,
        Some(1) => !syslog,
        Some(_) => true,
    }
}

fn hidden_addresses_error(restrict: Option<u32>) -> Error {
    let fix = if restrict.is_some_and(|r| r >= 2) {
        "set kernel.kptr_restrict to 0 or 1"
    } else {
        "run as root, or grant CAP_SYSLOG"
    };
    let shown = restrict.map_or("?".to_string(), |r| r.to_string());
    Error::msg(format!(
        "kernel symbol addresses are hidden (kernel.kptr_restrict={shown}): {fix}"
    ))
}

fn kptr_restrict() -> Option<u32> {
    fs::read_to_string("/proc/sys/kernel/kptr_restrict")
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// Fails, without reading /proc/kallsyms, if its addresses would be
/// hidden: kernel symbols are read after attaching, and this failure is
/// better known before.
pub(crate) fn check_addresses_visible() -> Result<()> {
    let restrict = kptr_restrict();
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    if addresses_hidden(restrict, &status) {
        return Err(hidden_addresses_error(restrict));
    }
    Ok(())
}

/// Loads kallsyms and checks that its addresses are readable.
pub(crate) fn load_kallsyms() -> Result<Kallsyms> {
    let k = Kallsyms::load().map_err(|e| Error::msg(format!("cannot read /proc/kallsyms: {e}")))?;
    if k.is_empty() || k.addresses_hidden() {
        return Err(hidden_addresses_error(kptr_restrict()));
    }
    Ok(k)
}

/// The entry address of `func`, or an error suggesting close names.
pub(crate) fn resolve_function(ksyms: &Kallsyms, func: &str) -> Result<u64> {
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

/// Kernel features the attach methods need. A missing one is reported as
/// the reason its method cannot be used, without trying it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Features {
    /// Kernel BTF, which fentry needs.
    pub(crate) btf: bool,
    /// kprobe events (CONFIG_KPROBES and CONFIG_KPROBE_EVENTS).
    pub(crate) kprobes: bool,
    /// Hash maps whose entries are allocated on demand (BPF_F_NO_PREALLOC)
    /// in programs of every kind: Linux 6.1 and later (its BPF memory
    /// allocator); before, tracing programs need preallocated ones.
    pub(crate) on_demand_hash: bool,
    /// The bpf_loop helper: Linux 5.17 and later.
    pub(crate) loop_helper: bool,
}

impl Features {
    pub(crate) fn probe() -> Self {
        // Without sysfs we cannot tell: let the attach attempt say.
        let pmus = Path::new(PMU_DIR);
        let release = kernel_release();
        let at_least = |want| {
            release
                .as_deref()
                .is_some_and(|r| release_at_least(r, want))
        };
        Features {
            btf: Path::new(BTF_PATH).exists(),
            kprobes: !pmus.exists() || pmus.join("kprobe").exists(),
            on_demand_hash: at_least((6, 1)),
            loop_helper: at_least((5, 17)),
        }
    }
}

/// The running kernel's release, as `uname -r` prints it.
pub(crate) fn kernel_release() -> Option<String> {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|r| r.trim().to_string())
}

/// Whether a kernel release ("6.12.117+deb13-cloud-amd64") is at least
/// major.minor; false if it cannot be read.
fn release_at_least(release: &str, want: (u32, u32)) -> bool {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let mut num = || parts.next().and_then(|p| p.parse::<u32>().ok());
    match (num(), num()) {
        (Some(major), Some(minor)) => (major, minor) >= want,
        _ => false,
    }
}

/// The debug vmlinux stacks and source patterns are resolved with: the
/// one given, or one where distributions install it for this kernel.
pub(crate) fn debug_vmlinux(given: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = given {
        return Some(p.to_path_buf());
    }
    let release = kernel_release()?;
    [
        format!("/usr/lib/debug/boot/vmlinux-{release}"),
        format!("/boot/vmlinux-{release}"),
        format!("/usr/lib/debug/lib/modules/{release}/vmlinux"),
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_are_read_from_the_status_text() {
        let status = |caps: u64| format!("Name:\ttopdown\nCapEff:\t{caps:016x}\n");
        assert!(has_bpf_caps(&status(1 << CAP_SYS_ADMIN)));
        assert!(has_bpf_caps(&status((1 << CAP_BPF) | (1 << CAP_PERFMON))));
        assert!(!has_bpf_caps(&status(1 << CAP_BPF)));
        assert!(!has_bpf_caps(&status(0)));
        assert!(!has_bpf_caps("Name:\tx\n"));
    }

    #[test]
    fn kptr_restrict_hides_addresses_from_whom_it_says() {
        let status = |caps: u64| format!("Name:\ttopdown\nCapEff:\t{caps:016x}\n");
        let syslog = status(1 << CAP_SYSLOG);
        assert!(!addresses_hidden(Some(0), &status(0)));
        assert!(!addresses_hidden(None, &status(0)));
        assert!(!addresses_hidden(Some(1), &syslog));
        assert!(addresses_hidden(Some(1), &status(1 << CAP_BPF)));
        assert!(addresses_hidden(Some(2), &syslog));
        let e = hidden_addresses_error(Some(2)).to_string();
        assert!(e.ends_with("set kernel.kptr_restrict to 0 or 1"), "{e}");
    }

    #[test]
    fn a_missing_function_gets_close_names() {
        let k = Kallsyms::parse("ffffffff81000000 T vfs_read\nffffffff81001000 T vfs_write\n");
        assert_eq!(
            resolve_function(&k, "vfs_read").unwrap(),
            0xffffffff81000000
        );
        let e = resolve_function(&k, "vfs_rea").unwrap_err().to_string();
        assert!(e.contains("did you mean: vfs_read"), "{e}");
        let e = resolve_function(&k, "zzzzzzzzzz").unwrap_err().to_string();
        assert!(
            e.ends_with("check the spelling, or load the module that has it"),
            "{e}"
        );
    }

    #[test]
    fn the_architecture_has_the_kernels_name() {
        #[cfg(target_arch = "x86_64")]
        assert_eq!(ARCH, "x86_64");
        #[cfg(target_arch = "aarch64")]
        assert_eq!(ARCH, "arm64");
    }

    #[test]
    fn kernel_releases_compare_by_major_and_minor() {
        assert!(release_at_least("6.12.117+deb13-cloud-amd64\n", (6, 1)));
        assert!(release_at_least("6.1.0-50-cloud-amd64", (6, 1)));
        assert!(release_at_least("7.0", (6, 1)));
        assert!(!release_at_least("6.0.19", (6, 1)));
        assert!(!release_at_least("5.15.0-91-generic", (6, 1)));
        assert!(!release_at_least("", (6, 1)));
        assert!(!release_at_least("garbage", (6, 1)));
    }

    #[test]
    fn a_given_vmlinux_is_taken_as_is() {
        assert_eq!(
            debug_vmlinux(Some(Path::new("/x"))),
            Some(PathBuf::from("/x"))
        );
    }
}
