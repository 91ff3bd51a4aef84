//! Pinned instances: tier 1 left counting in bpffs, under
//! /sys/fs/bpf/topdown/FUNC/, with no topdown process running. The
//! directory holds the program's link, the maps readers need, and in the
//! `meta` map a description (what was pinned, how, when, with which map
//! layout); it lives exactly as long as the pins, so a reboot clears all of
//! it. Directories and pins are root's alone (0700 and 0600).

use std::fs;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use libbpf_rs::Link;
use serde::{Deserialize, Serialize};

use crate::bpf::iter;
use crate::bpf::maps::{Maps, PINNED_MAPS};
use crate::bpf::probe::{Mode, Probe};
use crate::bpf::skel::types;
use crate::error::{Error, Result};
use crate::funcname::FuncName;
use crate::reasons::SourcePattern;

mod dir;
use dir::{Dir, BPF_FS_MAGIC, ROOT};

const BPFFS: &str = "/sys/fs/bpf";
/// Where readers' locks live: /run is a tmpfs, cleared at boot like bpffs.
const LOCKS: &str = "/run/topdown";
/// How a lock held by topdown serve --capture says so (after the pid).
const SERVE: &str = "serve";
/// The map layout this topdown reads and writes.
pub(crate) const LAYOUT: u32 = types::td_abi::TD_LAYOUT_VERSION.0;

/// What a reader needs to know about a pinned instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Meta {
    /// The map layout (TD_LAYOUT_VERSION) and topdown version that pinned it.
    pub(crate) layout: u32,
    pub(crate) version: String,
    pub(crate) function: String,
    /// A tracepoint's category (None: a function's; missing from older
    /// pins: not recorded).
    #[serde(default)]
    pub(crate) tracepoint: Option<String>,
    pub(crate) func_addr: u64,
    /// Fentry or kprobe, and why not fentry if not.
    pub(crate) mode: Mode,
    pub(crate) fallback: Option<String>,
    /// Where the profile came from (None: one reason per caller).
    pub(crate) profile: Option<String>,
    /// How call sites map to reasons, for readers that resolve new ones:
    /// (caller, reason) routes and source patterns (with a debug vmlinux).
    pub(crate) routes: Vec<(String, String)>,
    pub(crate) source_routes: Vec<(SourcePattern, String)>,
    pub(crate) max_reasons: usize,
    pub(crate) vmlinux: Option<PathBuf>,
    /// Fixed in the program: what a captured stack holds.
    pub(crate) user_stacks: bool,
    pub(crate) depth: u32,
    pub(crate) sample: u32,
    /// --background-stacks (missing from older pins: none).
    #[serde(default)]
    pub(crate) background: u32,
    /// The filter fixed at pin time, in words (`of CPU 0, in cgroup /x or
    /// below`); None: every call counts.
    #[serde(default)]
    pub(crate) filter: Option<String>,
    /// What `show --save` records beside the counts: the profile's knobs
    /// and the --cgroup directory (missing from older pins: none).
    #[serde(default)]
    pub(crate) knobs: Vec<String>,
    #[serde(default)]
    pub(crate) cgroup: Option<PathBuf>,
    /// The kernel and boot it was pinned in, and when (Unix seconds).
    pub(crate) kernel: String,
    pub(crate) boot_id: String,
    pub(crate) pinned_at: f64,
    /// Set when `topdown pin --sync` pinned it: sync unpins and re-pins
    /// only these, never a function pinned by hand.
    #[serde(default)]
    pub(crate) synced: Option<Synced>,
}

/// Which declaration a synced instance stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Synced {
    /// The file's name in the config directory.
    pub(crate) file: String,
    /// The `topdown pin` arguments it declared (and a digest of the files
    /// they name): another spec is a change, to re-pin.
    pub(crate) spec: String,
}

impl Meta {
    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }
}

/// The running kernel's release and boot id.
pub(crate) fn kernel_and_boot() -> (String, String) {
    let boot = fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    (
        crate::host::kernel_release().unwrap_or_default(),
        boot.trim().to_string(),
    )
}

fn dir_of(func: &FuncName) -> PathBuf {
    Path::new(ROOT).join(func.as_str())
}

/// Which instance of `func` is pinned now (its directory's inode: a
/// re-pin puts another in place), if one is.
pub(crate) fn instance_id(func: &FuncName) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(dir_of(func))
        .ok()
        .filter(|m| m.is_dir())
        .map(|m| m.ino())
}

/// Whether `func` has a pinned instance: a directory of its own under
/// the root (a symlink is not one).
pub(crate) fn is_pinned(func: &FuncName) -> bool {
    fs::symlink_metadata(dir_of(func)).is_ok_and(|m| m.is_dir())
}

/// Functions with a pinned instance, sorted: the directories under the
/// root named as functions are (pins being made are named `pinning-...`).
pub(crate) fn pinned() -> Result<Vec<FuncName>> {
    let entries = match fs::read_dir(ROOT) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::msg(format!("cannot list {ROOT}: {e}"))),
    };
    let mut out: Vec<FuncName> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| FuncName::parse(e.file_name().to_str()?).ok())
        .collect();
    out.sort();
    Ok(out)
}

/// Mounts bpffs at /sys/fs/bpf unless it is there already.
fn ensure_bpffs() -> Result<()> {
    let is_bpffs = |p: &str| {
        let c = std::ffi::CString::new(p).expect("no NUL");
        // SAFETY: statfs with a valid path and out-pointer.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        (unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0) && st.f_type as i64 == BPF_FS_MAGIC
    };
    if is_bpffs(BPFFS) {
        return Ok(());
    }
    let target = std::ffi::CString::new(BPFFS).expect("no NUL");
    let bpf = std::ffi::CString::new("bpf").expect("no NUL");
    let opts = std::ffi::CString::new("mode=0700").expect("no NUL");
    // SAFETY: mount(2) with valid NUL-terminated strings.
    let rc = unsafe {
        libc::mount(
            bpf.as_ptr(),
            target.as_ptr(),
            bpf.as_ptr(),
            0,
            opts.as_ptr().cast(),
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::msg(format!(
            "bpffs is not mounted at {BPFFS} and mounting it failed ({e}): \
             mount it with 'mount -t bpf bpf {BPFFS}'"
        )));
    }
    Ok(())
}

/// Removes the pin directory `name` under the root, and the pins topdown
/// made in it (pins are files to unlink: the kernel objects go once
/// nothing else holds them). Nothing else is touched: the root and the
/// directory are opened without following symlinks, and only regular
/// files with the names topdown gives its pins are removed. Anything else
/// found is left in place, and the directory with it, and named in the
/// error.
fn remove_dir(name: &str) -> Result<()> {
    let dir = Path::new(ROOT).join(name);
    let cannot = |e: std::io::Error| Error::msg(format!("cannot remove {}: {e}", dir.display()));
    let Some(root) = Dir::open_root().map_err(cannot)? else {
        return Ok(());
    };
    let pins = match root.open_dir(name) {
        Ok(d) => d,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
        Err(e) => return Err(cannot(e)),
    };
    for entry in PINNED_MAPS
        .iter()
        .chain(&["link", "prog"])
        .chain(&iter::FILES)
    {
        match pins.is_file(entry) {
            Ok(true) => pins
                .unlink(entry, false)
                .map_err(|e| Error::msg(format!("cannot remove {}/{entry}: {e}", dir.display())))?,
            Ok(false) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(cannot(e)),
        }
    }
    match root.unlink(name, true) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => {
            let mut foreign = pins.names().unwrap_or_default();
            foreign.sort();
            Err(Error::msg(format!(
                "left {} in place: it holds {}, which topdown did not make; \
                 topdown's own pins in it are removed",
                dir.display(),
                foreign.join(", ")
            )))
        }
        Err(e) => Err(cannot(e)),
    }
}

/// Pins `probe` (loaded and attached by this process) as `meta.function`'s
/// instance. Everything is pinned into a directory of its own first and
/// renamed into place at the end, so a failure leaves nothing behind and a
/// reader never sees half an instance. With `replace`, the instance in
/// place is swapped out once the new one is complete, and then removed:
/// both count meanwhile, so no call goes uncounted.
pub(crate) fn pin(
    probe: &mut Probe<'_>,
    func: &FuncName,
    meta: &Meta,
    replace: bool,
) -> Result<PathBuf> {
    ensure_bpffs()?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(ROOT)
        .map_err(|e| Error::msg(format!("cannot create {ROOT}: {e}")))?;
    let dir = dir_of(func);
    if dir.exists() && !replace {
        return Err(Error::msg(format!(
            "{func} is already pinned (see topdown show {func}); unpin it first with topdown unpin {func}"
        )));
    }
    // A reader steering the old instance's capture: not swapped under it
    // (serve --capture lets go of it by itself).
    let _lock = if replace {
        Lock::take_over_serve(func)?
    } else {
        None
    };
    // bpffs refuses dots in names; a dash cannot be in a function's name.
    let tmp_name = format!("pinning-{func}-{}", std::process::id());
    let tmp = Path::new(ROOT).join(&tmp_name);
    remove_dir(&tmp_name)?;
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&tmp)
        .map_err(|e| Error::msg(format!("cannot create {}: {e}", tmp.display())))?;
    let done = (|| {
        let text = serde_json::to_string(meta).expect("meta serializes");
        probe.maps().set_meta(&text)?;
        probe.pin(&tmp)?;
        // The cat-able files are extras: a kernel that cannot make them
        // (before 5.19) still gets the counting instance.
        if let Err(e) = iter::pin_files(&tmp, func.as_str()) {
            let release = crate::host::kernel_release();
            eprintln!(
                "topdown: {func}: pinned without its reasons and metrics files: {}",
                files_refused(e.errno(), release.as_deref(), &e.to_string())
            );
        }
        if replace && dir.exists() {
            return exchange(&tmp_name, func);
        }
        fs::rename(&tmp, &dir).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists | std::io::ErrorKind::DirectoryNotEmpty => {
                Error::msg(format!("{func} was pinned meanwhile by another topdown"))
            }
            _ => Error::msg(format!("cannot move the pins into {}: {e}", dir.display())),
        })
    })();
    if let Err(e) = done {
        return Err(match remove_dir(&tmp_name) {
            Ok(()) => e,
            Err(cleanup) => Error::msg(format!("{e}; and {cleanup}")),
        });
    }
    Ok(dir)
}

/// Why the kernel made no cat-able files, from the failure's errno and
/// the kernel's release: its age only where it is older than 5.19 (BPF
/// iterators with bpf_loop); a refusal by policy as such.
fn files_refused(errno: Option<i32>, release: Option<&str>, err: &str) -> String {
    let version = release.and_then(|r| {
        let mut it = r.split(|c: char| !c.is_ascii_digit());
        Some((
            it.next()?.parse::<u32>().ok()?,
            it.next()?.parse::<u32>().ok()?,
        ))
    });
    match (version, errno) {
        (Some(v), _) if v < (5, 19) => format!(
            "they need Linux 5.19 or later (BPF iterators with bpf_loop), and this is {}",
            release.unwrap_or_default()
        ),
        (_, Some(libc::EPERM) | Some(libc::EACCES)) => format!(
            "the kernel refused to load the BPF iterators that make them (EPERM): it \
             permits no BPF tracing programs here (lockdown or a security module; fentry \
             is refused too); the counters are pinned and topdown show reads them ({err})"
        ),
        _ => err.to_string(),
    }
}

/// Swaps the complete new instance in `tmp` with the one at `dir`, then
/// removes the old one, now at `tmp`. The swap is one rename(2) with
/// RENAME_EXCHANGE; a kernel that refuses it for bpffs gets two renames,
/// with `dir` absent for an instant (both programs count throughout).
fn exchange(tmp_name: &str, func: &FuncName) -> Result<()> {
    let (tmp, dir) = (Path::new(ROOT).join(tmp_name), dir_of(func));
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("no NUL");
    let (a, b) = (c(&tmp), c(&dir));
    // SAFETY: renameat2 with valid NUL-terminated paths.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    let old = if rc == 0 {
        tmp_name.to_string()
    } else {
        let retiring = format!("retiring-{tmp_name}");
        let retiring_path = Path::new(ROOT).join(&retiring);
        let fail = |e: std::io::Error, what: &Path| {
            Error::msg(format!("cannot move {}: {e}", what.display()))
        };
        fs::rename(&dir, &retiring_path).map_err(|e| fail(e, &dir))?;
        if let Err(e) = fs::rename(&tmp, &dir) {
            let _ = fs::rename(&retiring_path, &dir);
            return Err(fail(e, &tmp));
        }
        retiring
    };
    let link = Link::open(Path::new(ROOT).join(&old).join("link")).ok();
    remove_dir(&old)?;
    drop(link);
    Ok(())
}

/// A pinned instance, opened.
pub(crate) struct Instance {
    pub(crate) meta: Meta,
    pub(crate) probe: Probe<'static>,
}

/// Why a pinned instance could not be opened.
pub(crate) enum Refused {
    /// Made by a topdown with another map layout (or broken past reading):
    /// this topdown can only replace it.
    Foreign(Error),
    /// Anything else (not pinned, the kernel refused a pin's fd).
    Failed(Error),
}

impl From<Refused> for Error {
    fn from(r: Refused) -> Error {
        match r {
            Refused::Foreign(e) | Refused::Failed(e) => e,
        }
    }
}

/// Opens `func`'s pinned instance, refusing one pinned with another map
/// layout (it can only be replaced).
pub(crate) fn open(func: &FuncName) -> Result<Instance> {
    try_open(func).map_err(Error::from)
}

/// `open`, telling a foreign instance apart.
pub(crate) fn try_open(func: &FuncName) -> std::result::Result<Instance, Refused> {
    let dir = dir_of(func);
    if !is_pinned(func) {
        return Err(Refused::Failed(not_pinned(func)));
    }
    // One line that says how to re-pin: an upgrade's usual way here.
    let unreadable = |why: String| {
        Refused::Foreign(Error::msg(format!(
            "{func}'s pinned instance cannot be read by this topdown ({} with map layout {LAYOUT}): \
             {why}; re-pin it: 'topdown pin --sync' if a declaration pins it (its counts \
             restart), else 'topdown unpin {func}' and pin it again",
            env!("CARGO_PKG_VERSION")
        )))
    };
    // The layout first: another layout's instance may lack a map this one has.
    if let Ok(text) = Maps::pinned_meta(&dir) {
        parse_meta(&text).map_err(unreadable)?;
    }
    for name in PINNED_MAPS.iter().chain(&["link"]) {
        if !fs::symlink_metadata(dir.join(name)).is_ok_and(|m| m.is_file()) {
            return Err(unreadable(format!("it has no {name}")));
        }
    }
    let maps = Maps::open(&dir).map_err(|e| unreadable(e.to_string()))?;
    let text = maps.meta().map_err(|e| unreadable(e.to_string()))?;
    let meta = parse_meta(&text).map_err(unreadable)?;
    let link = Link::open(dir.join("link")).map_err(|e| {
        Refused::Failed(Error::bpf(
            &format!("opening {}", dir.join("link").display()),
            e,
        ))
    })?;
    // Pinned since the program pin was added; older instances have none.
    let prog = std::ffi::CString::new(dir.join("prog").into_os_string().into_encoded_bytes())
        .ok()
        .and_then(|p| {
            // SAFETY: a plain syscall wrapper with a valid path; a negative
            // result is an error, not wrapped.
            let fd = unsafe { libbpf_sys::bpf_obj_get(p.as_ptr()) };
            // SAFETY: fd is a new file descriptor we own.
            (fd >= 0).then(|| unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
        });
    let probe = Probe::pinned(maps, prog, &link, meta.mode(), func);
    Ok(Instance { meta, probe })
}

/// A pinned instance's meta, if this topdown reads its map layout; else
/// why not.
fn parse_meta(text: &str) -> std::result::Result<Meta, String> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) if v["layout"] != serde_json::json!(LAYOUT) => Err(format!(
            "it was pinned by topdown {} with map layout {}",
            v["version"].as_str().unwrap_or("?"),
            v["layout"]
        )),
        Ok(v) => serde_json::from_value(v).map_err(|e| format!("its meta: {e}")),
        Err(e) => Err(format!("its meta: {e}")),
    }
}

fn not_pinned(func: &FuncName) -> Error {
    Error::usage(format!(
        "{func} is not pinned (see topdown show; pinned functions do not survive a reboot)"
    ))
}

/// Detaches `func`'s pinned instance and removes its pins. Refused while a
/// topdown process reads it with stack capture.
pub(crate) fn unpin(func: &FuncName) -> Result<()> {
    let dir = dir_of(func);
    if !is_pinned(func) {
        return Err(not_pinned(func));
    }
    let _lock = Lock::take_over_serve(func)?;
    // Hold the link while the pins go, and drop it last: the final put
    // from a close frees the program at once, where the one from an
    // unlinked pin may be left to a workqueue.
    let link = fs::symlink_metadata(dir.join("link"))
        .is_ok_and(|m| m.is_file())
        .then(|| Link::open(dir.join("link")).ok())
        .flatten();
    remove_dir(func)?;
    drop(link);
    Ok(())
}

/// Pin directories of pins that were killed halfway (`pinning-FUNC-PID`,
/// or `retiring-pinning-FUNC-PID` mid re-pin; directories, not symlinks).
pub(crate) fn leftovers() -> Vec<String> {
    fs::read_dir(ROOT)
        .map(|es| {
            es.filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with("pinning-") || n.starts_with("retiring-"))
                .collect()
        })
        .unwrap_or_default()
}

/// Removes the directory of a pin that was killed halfway (a name from
/// `leftovers`).
pub(crate) fn remove_leftover(name: &str) -> Result<()> {
    remove_dir(name)
}

/// The one topdown process allowed to steer a pinned instance's stack
/// capture (its ring buffer has one consumer). Released when the process
/// ends, however it ends.
pub(crate) struct Lock {
    _file: fs::File,
}

impl Lock {
    fn path(func: &FuncName) -> PathBuf {
        Path::new(LOCKS).join(format!("{func}.lock"))
    }

    /// Takes `func`'s lock, or says which process holds it.
    pub(crate) fn take(func: &FuncName) -> Result<Lock> {
        Self::try_take(func)?.map_err(|holder| match holder.split_once(' ') {
            Some((pid, SERVE)) => Error::msg(format!(
                "{func}'s stack capture is steered by topdown serve --capture (pid {pid}); \
                 its stacks are at /debug/pprof/topdown?function={func}, and topdown show \
                 reads its counts alongside"
            )),
            _ => Error::msg(format!(
                "{func}'s pinned instance is being read by topdown (pid {}); \
                 end that one first (topdown show reads it alongside)",
                holder.split(' ').next().unwrap_or("")
            )),
        })
    }

    /// For unpin and re-pin: `func`'s lock, or None if topdown serve
    /// --capture holds it (serve lets go of an instance unpinned or
    /// replaced within a second); another holder is an error.
    pub(crate) fn take_over_serve(func: &FuncName) -> Result<Option<Lock>> {
        match Self::try_take(func)? {
            Ok(lock) => Ok(Some(lock)),
            Err(holder) if holder.ends_with(&format!(" {SERVE}")) => Ok(None),
            Err(_) => Self::take(func).map(Some),
        }
    }

    /// Takes `func`'s lock for topdown serve --capture, if it is free;
    /// Err(holder) if a process holds it.
    pub(crate) fn try_take_for_serve(func: &FuncName) -> Result<std::result::Result<Lock, String>> {
        Self::try_take_as(func, Some(SERVE))
    }

    /// Takes `func`'s lock if it is free; Err(holder) if a process holds
    /// it (its pid, and ` serve` for topdown serve --capture).
    pub(crate) fn try_take(func: &FuncName) -> Result<std::result::Result<Lock, String>> {
        Self::try_take_as(func, None)
    }

    fn try_take_as(
        func: &FuncName,
        role: Option<&str>,
    ) -> Result<std::result::Result<Lock, String>> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(LOCKS)
            .map_err(|e| Error::msg(format!("cannot create {LOCKS}: {e}")))?;
        let path = Self::path(func);
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| Error::msg(format!("cannot open {}: {e}", path.display())))?;
        // SAFETY: flock on an open file descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            return Ok(Err(pid.trim().to_string()));
        }
        let _ = file.set_len(0);
        let _ = file.rewind();
        let _ = match role {
            Some(r) => write!(file, "{} {r}", std::process::id()),
            None => write!(file, "{}", std::process::id()),
        };
        Ok(Ok(Lock { _file: file }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_files_are_blamed_on_the_real_cause() {
        let old = files_refused(Some(libc::EINVAL), Some("5.10.0-32-cloud-amd64"), "x");
        assert!(old.contains("need Linux 5.19 or later"), "{old}");
        assert!(old.ends_with("this is 5.10.0-32-cloud-amd64"), "{old}");
        let denied = files_refused(Some(libc::EPERM), Some("6.18.0"), "Operation not permitted");
        assert!(!denied.contains("5.19"), "{denied}");
        assert!(
            denied.contains("refused to load the BPF iterators"),
            "{denied}"
        );
        let other = files_refused(
            Some(libc::E2BIG),
            Some("6.1.0-40-amd64"),
            "the verifier says no",
        );
        assert_eq!(other, "the verifier says no");
        assert!(files_refused(None, None, "x") == "x");
    }

    #[test]
    fn meta_round_trips_as_json() {
        let m = Meta {
            layout: LAYOUT,
            version: "0.1.0".into(),
            function: "deferred_split_folio".into(),
            tracepoint: Some("sched".into()),
            func_addr: 0xffffffff81000000,
            mode: Mode::Kprobe,
            fallback: Some("no BTF".into()),
            profile: Some("built-in profile deferred_split_folio".into()),
            routes: vec![("do_huge_pmd_anonymous_page".into(), "FAULT_ALLOC".into())],
            source_routes: vec![(SourcePattern::File("mm/rmap.c".into()), "ZAP".into())],
            max_reasons: 128,
            vmlinux: None,
            user_stacks: false,
            depth: 64,
            filter: None,
            knobs: vec!["/proc/sys/vm/swappiness".into()],
            cgroup: None,
            sample: 1,
            background: 16,
            kernel: "6.12.0".into(),
            boot_id: "b".into(),
            pinned_at: 1.5,
            synced: Some(Synced {
                file: "deferred_split_folio.toml".into(),
                spec: "deferred_split_folio --kprobe".into(),
            }),
        };
        let text = serde_json::to_string(&m).unwrap();
        let back = parse_meta(&text).unwrap();
        assert_eq!(back, m);
        // Another layout is refused by name, whatever else it holds.
        let other = text.replace(&format!("\"layout\":{LAYOUT}"), "\"layout\":99");
        assert_eq!(
            parse_meta(&other).unwrap_err(),
            "it was pinned by topdown 0.1.0 with map layout 99"
        );
        assert!(parse_meta("").unwrap_err().starts_with("its meta: "));
        assert_eq!(back.mode(), Mode::Kprobe);
        // The mode is written as its name, as when it was a string.
        assert!(text.contains(r#""mode":"kprobe","#), "{text}");
        let fentry = text.replace(r#""mode":"kprobe""#, r#""mode":"fentry""#);
        assert_eq!(parse_meta(&fentry).unwrap().mode(), Mode::Fentry);
        assert!(text.len() < 1000);
        // A meta written before sync existed reads as pinned by hand.
        let old = text.replace(
            r#","synced":{"file":"deferred_split_folio.toml","spec":"deferred_split_folio --kprobe"}"#,
            "",
        );
        assert_ne!(old, text);
        assert_eq!(parse_meta(&old).unwrap().synced, None);
    }
}
