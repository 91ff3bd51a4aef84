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
/// hidden: kernel symbols are read while the program loads, and this
/// failure is better known before.
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

/// The prefixes of system call entries' names (`__x64_sys_read`).
const SYSCALL_PREFIXES: [&str; 5] = ["__x64_", "__arm64_", "__s390x_", "__riscv_", "__ia32_"];

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
    let mut close = ksyms.suggest(func, 5);
    // `sys_read`: the system call's entry is named per architecture.
    if func.starts_with("sys_") {
        let entries = SYSCALL_PREFIXES.iter().map(|p| format!("{p}{func}"));
        for entry in entries.filter(|e| ksyms.named(e).next().is_some()).rev() {
            close.retain(|c| *c != entry);
            close.insert(0, entry);
        }
        close.truncate(5);
    }
    let hint = match (crate::funcname::command_like(func), close.is_empty()) {
        // `topdown shwo`: a command misspelled, not a function.
        (Some(cmd), _) => format!("did you mean the command topdown {cmd}?"),
        (None, true) => "check the spelling, or load the module that has it".to_string(),
        (None, false) => format!("did you mean: {}?", close.join(", ")),
    };
    Err(Error::usage(format!(
        "no kernel function named '{func}' (not in /proc/kallsyms: misspelled, inlined everywhere, or not built); {hint}"
    )))
}

/// Kernel features the attach methods need, and the optional ones the
/// programs are chosen by, each probed (never inferred from the release). A
/// missing required one is reported as the reason its method cannot be
/// used, without trying it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Features {
    /// Kernel BTF, which fentry needs.
    pub(crate) btf: bool,
    /// kprobe events (CONFIG_KPROBES and CONFIG_KPROBE_EVENTS).
    pub(crate) kprobes: bool,
    /// BPF ring buffers (Linux 5.8), which carry the stacks.
    pub(crate) ringbuf: bool,
    /// Hash maps whose entries are allocated on demand (BPF_F_NO_PREALLOC)
    /// in programs of every kind: the BPF memory allocator (Linux 6.1);
    /// before, tracing programs need preallocated ones.
    pub(crate) on_demand_hash: bool,
    /// The bpf_loop helper (Linux 5.17).
    pub(crate) loop_helper: bool,
    /// The bpf_get_func_ip helper (Linux 5.15); without it the programs
    /// take FUNC's address from kallsyms.
    pub(crate) func_ip_helper: bool,
    /// The bpf_get_func_arg_cnt helper (Linux 5.17), which fentry's
    /// one-load common path needs.
    pub(crate) arg_cnt_helper: bool,
    /// The bpf_rdonly_cast kfunc (Linux 6.2), through which that load is a
    /// plain one, not a helper call.
    pub(crate) cast_kfunc: bool,
}

impl Features {
    pub(crate) fn probe() -> Self {
        // Without sysfs we cannot tell: let the attach attempt say.
        let pmus = Path::new(PMU_DIR);
        let btf = Path::new(BTF_PATH).exists();
        // Tracing-only helpers cannot be probed with a program of their own
        // (it needs an attach target): the kernel's BTF names them, as
        // values of enum bpf_func_id, and the allocator, as a type.
        let names = if btf {
            btf_has_names(
                &fs::read(BTF_PATH).unwrap_or_default(),
                &[
                    "BPF_FUNC_get_func_arg_cnt",
                    "bpf_mem_alloc",
                    "bpf_rdonly_cast",
                ],
            )
        } else {
            vec![false; 3]
        };
        Features {
            btf,
            kprobes: !pmus.exists() || pmus.join("kprobe").exists(),
            ringbuf: map_type_supported(libbpf_sys::BPF_MAP_TYPE_RINGBUF),
            on_demand_hash: names[1],
            loop_helper: helper_supported(libbpf_sys::BPF_FUNC_loop),
            func_ip_helper: helper_supported(libbpf_sys::BPF_FUNC_get_func_ip),
            arg_cnt_helper: names[0],
            cast_kfunc: names[2],
        }
    }

    /// Fails, naming what is missing and the Linux release that brought
    /// it, unless this kernel has what every way of tracing needs.
    pub(crate) fn check_floor(&self) -> Result<()> {
        if !self.ringbuf {
            return Err(Error::msg(format!(
                "this {ARCH} kernel has no BPF ring buffers (BPF_MAP_TYPE_RINGBUF, \
                 Linux 5.8), which carry the stacks: topdown needs Linux {OLDEST_KERNEL} or later"
            )));
        }
        Ok(())
    }
}

/// The oldest kernel topdown is tested on (Debian 11's).
pub(crate) const OLDEST_KERNEL: &str = "5.10";

/// Whether a kprobe program may call `helper` here (the helpers topdown
/// probes are offered to every tracing program type alike); false if the
/// probe itself fails.
fn helper_supported(helper: libbpf_sys::bpf_func_id) -> bool {
    // SAFETY: a probe that loads a two-instruction program; no options.
    unsafe {
        libbpf_sys::libbpf_probe_bpf_helper(
            libbpf_sys::BPF_PROG_TYPE_KPROBE,
            helper,
            std::ptr::null(),
        ) == 1
    }
}

/// Whether the kernel creates maps of type `map_type`.
fn map_type_supported(map_type: libbpf_sys::bpf_map_type) -> bool {
    // SAFETY: a probe that creates and closes a small map; no options.
    unsafe { libbpf_sys::libbpf_probe_bpf_map_type(map_type, std::ptr::null()) == 1 }
}

/// For each of `names`, whether raw BTF `btf` has it in its string
/// section (every type, member and enumerator name is there, once).
fn btf_has_names(btf: &[u8], names: &[&str]) -> Vec<bool> {
    let mut found = vec![false; names.len()];
    let word = |at: usize| -> Option<usize> {
        let b = btf.get(at..at + 4)?;
        Some(u32::from_ne_bytes(b.try_into().ok()?) as usize)
    };
    // struct btf_header: magic (0xeb9f), version, flags, hdr_len, type_off,
    // type_len, str_off, str_len.
    if btf.get(0..2) != Some(&0xeb9fu16.to_ne_bytes()[..]) {
        return found;
    }
    let (Some(hdr_len), Some(str_off), Some(str_len)) = (word(4), word(16), word(20)) else {
        return found;
    };
    let start = hdr_len.saturating_add(str_off);
    let Some(strs) = btf.get(start..start.saturating_add(str_len)) else {
        return found;
    };
    for s in strs.split(|&b| b == 0) {
        if let Some(i) = names.iter().position(|n| n.as_bytes() == s) {
            found[i] = true;
        }
    }
    found
}

/// The running kernel's release, as `uname -r` prints it.
/// How many CPUs are online (/sys/devices/system/cpu/online), at least 1;
/// the possible CPUs where that cannot be read.
pub(crate) fn online_cpus() -> usize {
    fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| crate::filter::cpu_list(s.trim()).ok())
        .map(|l| l.0.len())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| libbpf_rs::num_possible_cpus().unwrap_or(1))
}

pub(crate) fn kernel_release() -> Option<String> {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|r| r.trim().to_string())
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
        assert!(resolve_function(&k, "nope").unwrap_err().is_usage());
    }

    #[test]
    fn a_syscall_is_named_by_its_entry_and_a_command_by_its_name() {
        let k = Kallsyms::parse(
            "ffffffff81000000 T ksys_read\nffffffff81001000 T __x64_sys_read\n\
             ffffffff81002000 T seq_read\n",
        );
        let e = resolve_function(&k, "sys_read").unwrap_err().to_string();
        assert!(e.contains("did you mean: __x64_sys_read, ksys_read"), "{e}");
        let e = resolve_function(&k, "shwo").unwrap_err().to_string();
        assert!(e.ends_with("did you mean the command topdown show?"), "{e}");
    }

    #[test]
    fn the_architecture_has_the_kernels_name() {
        #[cfg(target_arch = "x86_64")]
        assert_eq!(ARCH, "x86_64");
        #[cfg(target_arch = "aarch64")]
        assert_eq!(ARCH, "arm64");
    }

    /// Raw BTF with the given string section (no types).
    fn raw_btf(strs: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&0xeb9fu16.to_ne_bytes());
        b.extend_from_slice(&[1, 0]);
        for w in [24u32, 0, 0, 0, strs.len() as u32] {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        b.extend_from_slice(strs);
        b
    }

    #[test]
    fn btf_names_are_whole_strings_of_the_string_section() {
        let btf = raw_btf(b"\0BPF_FUNC_loop\0bpf_mem_alloc_x\0int\0");
        let names = ["BPF_FUNC_loop", "bpf_mem_alloc", "int", "in"];
        assert_eq!(btf_has_names(&btf, &names), [true, false, true, false]);
        // Not BTF, or cut short: nothing is there.
        assert_eq!(btf_has_names(b"\0BPF_FUNC_loop\0", &names[..1]), [false]);
        assert_eq!(btf_has_names(&btf[..30], &names[..1]), [false]);
    }

    #[test]
    fn a_given_vmlinux_is_taken_as_is() {
        assert_eq!(
            debug_vmlinux(Some(Path::new("/x"))),
            Some(PathBuf::from("/x"))
        );
    }
}
