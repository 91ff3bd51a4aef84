//! What the system was set to during a run, recorded beside its result
//! (`--save`) so that a later comparison can say what changed: the
//! kernel's build id and command line, and the knobs (sysctls, sysfs
//! files) the profile names as able to change its counts. Read only; a
//! knob is a file under /proc/sys or /sys, read as text.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Where the kernel's ELF notes are: the GNU build-id note of vmlinux is
/// among them (the id `file vmlinux` and a -dbg package's name show).
const NOTES: &str = "/sys/kernel/notes";
const CMDLINE: &str = "/proc/cmdline";
/// The roots a declared knob may be under.
const ROOTS: [&str; 2] = ["/proc/sys/", "/sys/"];
/// Files under /sys that are not settings and may block when read
/// (trace_pipe) or change state: never read as knobs.
const NOT_KNOBS: [&str; 2] = ["/sys/kernel/debug/", "/sys/kernel/tracing/"];
/// Knobs a profile may declare, and the bytes read of each.
pub(crate) const MAX_KNOBS: usize = 64;
const MAX_VALUE: u64 = 4096;
/// The memory controller's limits recorded for --cgroup.
pub(crate) const CGROUP_KNOBS: [&str; 3] = ["memory.max", "memory.high", "memory.min"];

/// One knob as read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Knob {
    pub(crate) path: String,
    /// Its text, trimmed (lines joined by spaces); None: the file does not
    /// exist on this kernel, or could not be read (`error`).
    pub(crate) value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

/// The system's state beside the kernel release (which results record on
/// their own).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub(crate) struct SystemState {
    /// The kernel's GNU build id, in hex; None if it cannot be read.
    pub(crate) build_id: Option<String>,
    pub(crate) cmdline: Option<String>,
    /// In the order named: the profile's, then the cgroup's.
    pub(crate) knobs: Vec<Knob>,
}

/// Whether `path` may be declared as a knob: an absolute path to a file
/// under /proc/sys or /sys, without `.` or `..` parts (topdown runs as
/// root: a profile must not make it read anything else).
pub(crate) fn check_knob_path(path: &str) -> Result<(), String> {
    if !ROOTS.iter().any(|r| path.starts_with(r)) {
        return Err("not a file under /proc/sys or /sys".into());
    }
    if path.contains('\0') || path.chars().any(char::is_control) {
        return Err("control characters in the path".into());
    }
    if path[1..]
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err("empty, `.` or `..` parts in the path".into());
    }
    if NOT_KNOBS.iter().any(|r| path.starts_with(r)) {
        return Err("under /sys/kernel/debug or /sys/kernel/tracing: not a setting".into());
    }
    Ok(())
}

/// The name a knob goes by: a sysctl's (`vm.swappiness`) for /proc/sys,
/// the path otherwise.
pub(crate) fn knob_name(path: &str) -> String {
    match path.strip_prefix("/proc/sys/") {
        Some(rest) => rest.replace('/', "."),
        None => path.to_string(),
    }
}

/// A value as shown: the selected word of a choice file
/// (`always [madvise] never` → `madvise`), the text otherwise.
pub(crate) fn shown_value(v: &str) -> &str {
    let chosen: Vec<&str> = v
        .split_whitespace()
        .filter_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
        .collect();
    match chosen.as_slice() {
        [one] => one,
        _ => v,
    }
}

/// The GNU build id among ELF notes (`/sys/kernel/notes`), in hex.
pub(crate) fn build_id_of_notes(notes: &[u8]) -> Option<String> {
    const NT_GNU_BUILD_ID: u32 = 3;
    let word = |at: usize| -> Option<u32> {
        let b = notes.get(at..at + 4)?;
        Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    };
    let pad = |n: usize| n.checked_add(3).map(|n| n & !3);
    let mut at = 0;
    while at + 12 <= notes.len() {
        let (namesz, descsz, kind) = (word(at)? as usize, word(at + 4)? as usize, word(at + 8)?);
        let name_at = at + 12;
        let desc_at = name_at.checked_add(pad(namesz)?)?;
        let end = desc_at.checked_add(pad(descsz)?)?;
        if kind == NT_GNU_BUILD_ID && notes.get(name_at..name_at + namesz)? == b"GNU\0" {
            let desc = notes.get(desc_at..desc_at + descsz)?;
            return Some(desc.iter().map(|b| format!("{b:02x}")).collect());
        }
        at = end;
    }
    None
}

/// A knob's text as recorded: trimmed, lines joined by spaces.
fn clean(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Reads one knob. `confined`: a declared knob, which must still be under
/// /proc/sys or /sys once links are followed.
fn read_knob(path: &str, confined: bool) -> Knob {
    let knob = |value: Option<String>, error: Option<String>| Knob {
        path: path.to_string(),
        value,
        error,
    };
    if confined {
        match fs::canonicalize(path) {
            Ok(real) => {
                let real = real.to_string_lossy().into_owned() + "/";
                if !ROOTS.iter().any(|r| real.starts_with(r))
                    || NOT_KNOBS.iter().any(|r| real.starts_with(r))
                {
                    return knob(None, Some("leads outside /proc/sys and /sys".into()));
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::NotFound) => return knob(None, None),
            Err(e) => return knob(None, Some(e.to_string())),
        }
    }
    // Not blocking: a knob is read in one go.
    let read = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .and_then(|f| {
            let mut s = String::new();
            f.take(MAX_VALUE).read_to_string(&mut s).map(|_| s)
        });
    match read {
        Ok(text) => knob(Some(clean(&text)), None),
        Err(e)
            if matches!(e.kind(), ErrorKind::NotFound)
                || e.raw_os_error() == Some(libc::ENOTDIR) =>
        {
            knob(None, None)
        }
        Err(e) => knob(None, Some(e.to_string())),
    }
}

/// The system's state now: the build id, the command line, the declared
/// `knobs` (checked by `check_knob_path`) and, for a --cgroup, its memory
/// limits.
pub(crate) fn read(knobs: &[String], cgroup: Option<&Path>) -> SystemState {
    let mut all: Vec<Knob> = knobs.iter().map(|k| read_knob(k, true)).collect();
    if let Some(dir) = cgroup {
        for f in CGROUP_KNOBS {
            all.push(read_knob(&dir.join(f).to_string_lossy(), false));
        }
    }
    SystemState {
        build_id: fs::read(NOTES).ok().and_then(|n| build_id_of_notes(&n)),
        cmdline: fs::read_to_string(CMDLINE).ok().map(|c| clean(&c)),
        knobs: all,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend((name.len() as u32).to_ne_bytes());
        v.extend((desc.len() as u32).to_ne_bytes());
        v.extend(kind.to_ne_bytes());
        v.extend(name);
        v.resize(v.len().next_multiple_of(4), 0);
        v.extend(desc);
        v.resize(v.len().next_multiple_of(4), 0);
        v
    }

    #[test]
    fn the_build_id_is_the_gnu_note_of_type_3() {
        let mut notes = note(b"Xen\0", 3, &[1, 2, 3, 4, 5]);
        notes.extend(note(b"GNU\0", 1, &[9; 16]));
        notes.extend(note(b"GNU\0", 3, &[0xab, 0x01, 0xff]));
        assert_eq!(build_id_of_notes(&notes).as_deref(), Some("ab01ff"));
        assert_eq!(build_id_of_notes(&notes[..notes.len() - 4]), None);
        assert_eq!(build_id_of_notes(&note(b"Linux\0", 3, &[1])), None);
        assert_eq!(build_id_of_notes(&[]), None);
        // A size that runs past the end is no note.
        let mut bad = note(b"GNU\0", 3, &[1, 2]);
        bad[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(build_id_of_notes(&bad), None);
    }

    #[test]
    fn declared_knobs_are_files_under_proc_sys_or_sys() {
        for ok in [
            "/proc/sys/vm/swappiness",
            "/sys/kernel/mm/transparent_hugepage/defrag",
            "/sys/fs/cgroup/a.slice/memory.max",
        ] {
            assert_eq!(check_knob_path(ok), Ok(()), "{ok}");
        }
        let err = |p: &str| check_knob_path(p).unwrap_err();
        assert_eq!(err("/etc/shadow"), "not a file under /proc/sys or /sys");
        assert_eq!(err("vm.swappiness"), "not a file under /proc/sys or /sys");
        assert_eq!(
            err("/proc/self/environ"),
            "not a file under /proc/sys or /sys"
        );
        assert_eq!(
            err("/proc/sysrq-trigger"),
            "not a file under /proc/sys or /sys"
        );
        for bad in [
            "/sys/../etc/shadow",
            "/proc/sys/./vm/x",
            "/sys//x",
            "/sys/x/",
        ] {
            assert_eq!(err(bad), "empty, `.` or `..` parts in the path", "{bad}");
        }
        assert_eq!(err("/sys/x\ny"), "control characters in the path");
        assert!(err("/sys/kernel/tracing/trace_pipe").starts_with("under /sys/kernel/debug"));
        assert!(err("/sys/kernel/debug/x").starts_with("under /sys/kernel/debug"));
    }

    #[test]
    fn names_and_values_as_shown() {
        assert_eq!(knob_name("/proc/sys/vm/swappiness"), "vm.swappiness");
        assert_eq!(
            knob_name("/sys/kernel/mm/transparent_hugepage/defrag"),
            "/sys/kernel/mm/transparent_hugepage/defrag"
        );
        assert_eq!(shown_value("always [madvise] never"), "madvise");
        assert_eq!(
            shown_value("always defer defer+madvise madvise [never]"),
            "never"
        );
        assert_eq!(shown_value("511"), "511");
        assert_eq!(shown_value("[a] [b]"), "[a] [b]");
        assert_eq!(clean(" 60\n"), "60");
        assert_eq!(clean("a\nb\n"), "a b");
    }

    #[test]
    fn knobs_are_read_absent_or_refused() {
        // /proc/sys exists wherever the tests run.
        let k = read_knob("/proc/sys/kernel/ostype", true);
        assert_eq!((k.value.as_deref(), k.error), (Some("Linux"), None));
        let k = read_knob("/proc/sys/vm/no_such_knob", true);
        assert_eq!((k.value, k.error), (None, None), "absent");
        let k = read_knob("/sys/no/such/dir/x", true);
        assert_eq!((k.value, k.error), (None, None), "absent");
        // A link out of the roots is not followed.
        let k = read_knob("/proc/sys/../self/status", true);
        assert!(k.value.is_none() && k.error.is_some(), "{k:?}");
        let s = read(&["/proc/sys/kernel/ostype".into()], None);
        assert_eq!(s.knobs.len(), 1);
        assert!(s.cmdline.is_some());
    }
}
