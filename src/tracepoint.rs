//! A tracepoint as a target (`t:CATEGORY:EVENT`): checked against what this
//! kernel has, and the glue between the code that fires it and the program
//! (the functions the BPF side skips to find that code's frame).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::kallsyms::{closest, Kallsyms};

/// Where tracefs lists the tracepoints, when it is mounted.
const EVENTS: [&str; 2] = [
    "/sys/kernel/tracing/events",
    "/sys/kernel/debug/tracing/events",
];

fn hint(close: &[String]) -> String {
    if close.is_empty() {
        String::new()
    } else {
        format!("; did you mean: {}?", close.join(", "))
    }
}

/// The names of a directory's subdirectories.
fn subdirs(dir: &Path) -> Option<Vec<String>> {
    let rd = std::fs::read_dir(dir).ok()?;
    Some(
        rd.flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect(),
    )
}

/// A tracefs mount of topdown's own where none is mounted: attached to no
/// path (fsopen and fsmount, Linux 5.2, CAP_SYS_ADMIN), so nothing is left
/// mounted, and gone once the descriptor is closed. perf mounts tracefs for
/// good where it lacks one; this leaves the system as it was.
fn detached_tracefs() -> Option<OwnedFd> {
    // <linux/mount.h>
    const FSOPEN_CLOEXEC: libc::c_uint = 1;
    const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
    const FSMOUNT_CLOEXEC: libc::c_uint = 1;
    // SAFETY: plain system calls; each descriptor returned is owned here.
    unsafe {
        let fs = libc::syscall(libc::SYS_fsopen, c"tracefs".as_ptr(), FSOPEN_CLOEXEC);
        let fs = OwnedFd::from_raw_fd(i32::try_from(fs).ok().filter(|&fd| fd >= 0)?);
        let null = std::ptr::null::<libc::c_char>();
        let created = libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            null,
            null,
            0,
        );
        if created < 0 {
            return None;
        }
        let m = libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, 0);
        Some(OwnedFd::from_raw_fd(
            i32::try_from(m).ok().filter(|&fd| fd >= 0)?,
        ))
    }
}

/// tracefs as topdown reads it: where it is mounted, else a detached
/// mount of it, held for as long as this lives.
pub(crate) struct Tracefs {
    /// Its `events` directory.
    events: PathBuf,
    _mount: Option<OwnedFd>,
}

impl Tracefs {
    /// tracefs where it is mounted, else mounted by topdown for as long as
    /// this lives; None where neither can be had.
    pub(crate) fn open() -> Option<Tracefs> {
        if let Some(p) = EVENTS.iter().map(Path::new).find(|p| p.is_dir()) {
            return Some(Tracefs {
                events: p.to_path_buf(),
                _mount: None,
            });
        }
        let fd = detached_tracefs()?;
        let events = PathBuf::from(format!("/proc/self/fd/{}/events", fd.as_raw_fd()));
        events.is_dir().then_some(Tracefs {
            events,
            _mount: Some(fd),
        })
    }

    /// How an error names where it looked: a mounted tracefs by its path.
    fn shown(&self) -> String {
        match self._mount {
            None => self.events.display().to_string(),
            Some(_) => "tracefs's events".to_string(),
        }
    }

    /// Every tracepoint it lists, as (category, event).
    pub(crate) fn all(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for category in subdirs(&self.events).unwrap_or_default() {
            for event in subdirs(&self.events.join(&category)).unwrap_or_default() {
                out.push((category.clone(), event));
            }
        }
        out
    }

    /// The kernel functions kprobes and fentry can attach to, as its
    /// available_filter_functions lists them; None where that cannot be
    /// read (lockdown refuses it on some kernels).
    pub(crate) fn traceable_functions(&self) -> Option<Vec<String>> {
        let list = self.events.parent()?.join("available_filter_functions");
        let text = std::fs::read_to_string(list).ok()?;
        Some(
            text.lines()
                .filter_map(|l| l.split_whitespace().next())
                .map(|n| crate::kallsyms::base_name(n).to_string())
                .collect(),
        )
    }
}

/// A system call's tracepoint (`syscalls:sys_enter_NAME`, `sys_exit_NAME`).
/// The kernel has no tracepoint of its own for each: its perf events are
/// raw_syscalls's `sys_enter` or `sys_exit` tested for NAME's number, and
/// so are topdown's programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Syscall {
    /// NAME's number on this architecture.
    pub(crate) nr: u32,
    /// `sys_exit_NAME`: the number is read from the registers, as the
    /// exit's tracepoint does not pass it.
    pub(crate) exit: bool,
}

mod numbers {
    include!(concat!(env!("OUT_DIR"), "/syscalls.rs"));
}

/// The kernel's names (SYSCALL_DEFINE's) that are not the headers'.
const RENAMED: [(&str, &str); 7] = [
    ("newstat", "stat"),
    ("newlstat", "lstat"),
    ("newfstat", "fstat"),
    ("newuname", "uname"),
    ("umount", "umount2"),
    ("sendfile64", "sendfile"),
    ("fadvise64_64", "fadvise64"),
];

impl Syscall {
    /// The raw tracepoint its programs attach to.
    pub(crate) fn event(&self) -> &'static str {
        if self.exit {
            "sys_exit"
        } else {
            "sys_enter"
        }
    }
}

/// `category:event` as a system call's tracepoint: None for any other
/// tracepoint; an error for a `syscalls` event that is no call's entry or
/// exit, or a call whose number topdown was not built with.
pub(crate) fn syscall(category: &str, event: &str) -> Result<Option<Syscall>> {
    if category != "syscalls" {
        return Ok(None);
    }
    let (name, exit) = if let Some(n) = event.strip_prefix("sys_enter_") {
        (n, false)
    } else if let Some(n) = event.strip_prefix("sys_exit_") {
        (n, true)
    } else {
        return Err(Error::usage(format!(
            "no tracepoint syscalls:{event}: its events are sys_enter_NAME and sys_exit_NAME \
             (or t:raw_syscalls:sys_enter for every call)"
        )));
    };
    let header = RENAMED
        .iter()
        .find(|(kernel, _)| *kernel == name)
        .map_or(name, |(_, h)| h);
    let nr = [name, header]
        .iter()
        .find_map(|n| number(n))
        .ok_or_else(|| {
            let prefix = if exit { "sys_exit_" } else { "sys_enter_" };
            let near: Vec<String> = closest(name, numbers::SYSCALLS.iter().map(|(n, _)| *n), 3)
                .into_iter()
                .map(|n| format!("{prefix}{n}"))
                .collect();
            Error::usage(format!(
                "no system call '{name}' among the {} this topdown was built with (its \
                 build's asm/unistd.h); t:raw_syscalls:{} counts every call{}",
                numbers::SYSCALLS.len(),
                if exit { "sys_exit" } else { "sys_enter" },
                hint(&near)
            ))
        })?;
    Ok(Some(Syscall { nr, exit }))
}

/// A system call's number by the headers' name.
fn number(name: &str) -> Option<u32> {
    let i = numbers::SYSCALLS
        .binary_search_by(|(n, _)| (*n).cmp(name))
        .ok()?;
    Some(numbers::SYSCALLS[i].1)
}

/// Checks `category:event` against tracefs (mounted, or mounted by topdown
/// for the check alone where it is not), else against the kernel's
/// symbols (`__traceiter_EVENT`; the category unchecked): a usage error
/// naming close matches if this kernel lacks it.
pub(crate) fn check(ksyms: &Kallsyms, category: &str, event: &str) -> Result<()> {
    let tracefs = Tracefs::open();
    let events = tracefs.as_ref().map(|t| t.events.as_path());
    let shown = tracefs.as_ref().map(Tracefs::shown).unwrap_or_default();
    // A system call's event is raw_syscalls's, tested for its number
    // (tracefs, where it is, names close events first).
    let fired = match syscall(category, event) {
        Ok(s) => s.map_or(event, |s| s.event()),
        Err(e) if events.is_none() => return Err(e),
        Err(_) => event,
    };
    let in_kernel = ksyms
        .named(&format!("__traceiter_{fired}"))
        .next()
        .is_some();
    if let Some(events) = events {
        let cats = subdirs(events).unwrap_or_default();
        if !cats.iter().any(|c| c == category) {
            let near = closest(category, cats.iter().map(String::as_str), 5);
            return Err(Error::usage(format!(
                "no tracepoint category '{category}' on this kernel (not in {shown}){}",
                hint(&near)
            )));
        }
        let mine = subdirs(&events.join(category)).unwrap_or_default();
        if mine.iter().any(|e| e == event) {
            return syscall(category, event).map(drop);
        }
        // In another category?
        let elsewhere = cats
            .iter()
            .find(|c| events.join(c).join(event).is_dir())
            .map(|c| format!("; it is {c}:{event}"));
        let near = closest(event, mine.iter().map(String::as_str), 5);
        return Err(Error::usage(format!(
            "no tracepoint {category}:{event} on this kernel{}",
            elsewhere.unwrap_or_else(|| hint(&near))
        )));
    }
    if in_kernel {
        return Ok(());
    }
    let near = closest(event, ksyms.names_after("__traceiter_"), 5);
    Err(Error::usage(format!(
        "no tracepoint {category}:{event} on this kernel (no __traceiter_{event} in \
         /proc/kallsyms){}",
        hint(&near)
    )))
}

/// The address ranges of the glue between a tracepoint's call site and its
/// program: `__traceiter_EVENT` (where more than one probe is on it),
/// `__bpf_trace_EVENT` and `bpf_trace_run1` to `bpf_trace_run12` (and
/// `__bpf_trace_run`, where the compiler kept it apart), adjacent ones
/// merged, at most `max`; and `__traceiter_EVENT`'s address (0 if none).
pub(crate) fn glue(ksyms: &Kallsyms, event: &str, max: usize) -> (Vec<(u64, u64)>, u64) {
    let mut names = vec![
        format!("__traceiter_{event}"),
        format!("__bpf_trace_{event}"),
        "__bpf_trace_run".to_string(),
    ];
    names.extend((1..=12).map(|n| format!("bpf_trace_run{n}")));
    let mut ranges: Vec<(u64, u64)> = names
        .iter()
        .flat_map(|n| ksyms.function(n))
        .map(|s| (s.addr, s.end))
        .collect();
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (lo, hi) in ranges {
        match merged.last_mut() {
            Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    merged.truncate(max);
    let iter = ksyms
        .named(&format!("__traceiter_{event}"))
        .next()
        .map_or(0, |s| s.addr);
    (merged, iter)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
ffffffff81000000 T _stext
ffffffff81100000 T bpf_trace_run1
ffffffff81100100 T bpf_trace_run2
ffffffff81100200 T bpf_trace_run3
ffffffff81100300 T bpf_trace_run4
ffffffff81100400 T some_other
ffffffff81200000 T __traceiter_mm_page_alloc
ffffffff81200040 T __traceiter_mm_page_free
ffffffff81300000 t __bpf_trace_mm_page_alloc
ffffffff81300020 t __bpf_trace_mm_page_free
";

    #[test]
    fn glue_is_the_event_s_functions_and_bpf_trace_run() {
        let k = Kallsyms::parse(TEXT);
        let (g, iter) = glue(&k, "mm_page_alloc", 8);
        assert_eq!(iter, 0xffffffff81200000);
        assert_eq!(
            g,
            vec![
                (0xffffffff81100000, 0xffffffff81100400),
                (0xffffffff81200000, 0xffffffff81200040),
                (0xffffffff81300000, 0xffffffff81300020),
            ]
        );
    }

    #[test]
    fn a_system_call_s_event_is_its_number_on_raw_syscalls() {
        let enter = syscall("syscalls", "sys_enter_read").unwrap().unwrap();
        assert_eq!((enter.nr, enter.exit), (libc::SYS_read as u32, false));
        assert_eq!(enter.event(), "sys_enter");
        let exit = syscall("syscalls", "sys_exit_openat").unwrap().unwrap();
        assert_eq!((exit.nr, exit.exit), (libc::SYS_openat as u32, true));
        assert_eq!(exit.event(), "sys_exit");
        // The kernel's names that are not the headers'.
        let nr = |e: &str| syscall("syscalls", e).unwrap().unwrap().nr;
        assert_eq!(nr("sys_enter_newfstat"), libc::SYS_fstat as u32);
        assert_eq!(nr("sys_enter_newuname"), libc::SYS_uname as u32);
        assert_eq!(nr("sys_exit_umount"), libc::SYS_umount2 as u32);
        assert_eq!(nr("sys_enter_sendfile64"), libc::SYS_sendfile as u32);
        assert_eq!(syscall("sched", "sched_switch").unwrap(), None);
    }

    #[test]
    fn a_syscalls_event_that_is_no_call_s_is_refused_with_what_to_type() {
        let e = syscall("syscalls", "sys_enter").unwrap_err().to_string();
        assert!(
            e.contains("sys_enter_NAME") && e.contains("t:raw_syscalls:sys_enter"),
            "{e}"
        );
        let e = syscall("syscalls", "sys_exit_clock_nanosleeep")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no system call 'clock_nanosleeep'"), "{e}");
        assert!(e.contains("did you mean: sys_exit_clock_nanosleep"), "{e}");
    }

    #[test]
    fn a_missing_event_names_close_ones() {
        let k = Kallsyms::parse(TEXT);
        if EVENTS.iter().any(|p| Path::new(p).is_dir()) {
            return;
        }
        assert!(check(&k, "kmem", "mm_page_alloc").is_ok());
        let e = check(&k, "kmem", "mm_page_aloc").unwrap_err().to_string();
        assert!(e.contains("no tracepoint kmem:mm_page_aloc"), "{e}");
        assert!(e.contains("did you mean: mm_page_alloc"), "{e}");
    }
}
