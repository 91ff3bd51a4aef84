//! The counting program: opening and configuring the object, and what
//! keeps it attached (this process, or a pin in bpffs). Its maps are in
//! `maps`.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use libbpf_rs::skel::SkelBuilder;
use libbpf_rs::{Link, OpenObject};

use crate::bpf::abi::{self, Config, SLOT_NONE};
use crate::bpf::ctl;
use crate::bpf::maps::Maps;
use crate::bpf::skel::{OpenTopdownSkel, TopdownSkel, TopdownSkelBuilder};
use crate::error::{Error, Result};
use crate::host::Features;

/// How the traced function is hooked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Fentry,
    Kprobe,
    /// A user-space function (-x): a uprobe at its entry.
    Uprobe,
}

impl Mode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Fentry => "fentry",
            Mode::Kprobe => "kprobe",
            Mode::Uprobe => "uprobe",
        }
    }
}

/// A program attached beside the counting one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Companion {
    /// An empty fentry program: the trampoline's own cost (fentry only).
    Fentry,
    /// An empty fexit program: it changes the trampoline frame's layout, a
    /// check of the caller lookup (fentry only).
    Fexit,
    /// A bare per-CPU counter in the counting program's mode: the cost
    /// baseline the counting program is compared with.
    Bare,
}

impl Companion {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Companion::Fexit => "fexit",
            Companion::Fentry => "fentry",
            Companion::Bare => "bare counter",
        }
    }
}

/// Kernel-side run statistics of a program.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ProgStats {
    pub(crate) run_cnt: u64,
    pub(crate) run_time_ns: u64,
    /// Calls the program missed because it was already running on that
    /// CPU (the function was hit from inside BPF code).
    pub(crate) recursion_misses: u64,
}

impl ProgStats {
    /// What happened since `base` was read.
    pub(crate) fn since(&self, base: &ProgStats) -> ProgStats {
        ProgStats {
            run_cnt: self.run_cnt.wrapping_sub(base.run_cnt),
            run_time_ns: self.run_time_ns.wrapping_sub(base.run_time_ns),
            recursion_misses: self.recursion_misses.wrapping_sub(base.recursion_misses),
        }
    }
}

/// Which programs of the object to load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Programs {
    Trace(Mode, Option<Companion>),
    #[cfg(test)]
    SelfTest,
}

/// Opens the object, writes `config` into its read-only data and selects
/// the programs of `mode`; `func` is the fentry target.
pub(crate) fn open<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    config: &Config,
    func: &str,
    mode: Mode,
    companion: Option<Companion>,
    host: &Features,
) -> Result<OpenTopdownSkel<'obj>> {
    let companion = companion.filter(|c| mode == Mode::Fentry || *c == Companion::Bare);
    open_for(
        storage,
        config,
        func,
        Programs::Trace(mode, companion),
        host,
    )
}

fn open_for<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    config: &Config,
    func: &str,
    which: Programs,
    host: &Features,
) -> Result<OpenTopdownSkel<'obj>> {
    let mut open = TopdownSkelBuilder::default()
        .open(storage)
        .map_err(|e| Error::bpf("opening the BPF object", e))?;
    let (mode, companion) = match which {
        Programs::Trace(mode, companion) => (Some(mode), companion),
        #[cfg(test)]
        Programs::SelfTest => (None, None),
    };
    let fentry = mode == Some(Mode::Fentry);
    let kprobe = mode == Some(Mode::Kprobe);
    let uprobe = mode == Some(Mode::Uprobe);
    let Counting { any, loops } = Counting::of(config, host);
    let p = &mut open.progs;
    for (prog, kind, a, l) in [
        (&mut p.td_fentry, fentry, false, true),
        (&mut p.td_fentry_any, fentry, true, true),
        (&mut p.td_fentry_nl, fentry, false, false),
        (&mut p.td_fentry_any_nl, fentry, true, false),
        (&mut p.td_kprobe, kprobe, false, true),
        (&mut p.td_kprobe_any, kprobe, true, true),
        (&mut p.td_kprobe_nl, kprobe, false, false),
        (&mut p.td_kprobe_any_nl, kprobe, true, false),
        (&mut p.td_selftest, mode.is_none(), false, true),
        (&mut p.td_selftest_any, mode.is_none(), true, true),
        (&mut p.td_selftest_nl, mode.is_none(), false, false),
        (&mut p.td_selftest_any_nl, mode.is_none(), true, false),
    ] {
        prog.set_autoload(kind && a == any && l == loops);
    }
    p.td_empty_fentry
        .set_autoload(companion == Some(Companion::Fentry));
    p.td_empty_fexit
        .set_autoload(companion == Some(Companion::Fexit));
    let bare = companion == Some(Companion::Bare);
    p.td_bare_fentry.set_autoload(bare && fentry);
    p.td_bare_kprobe.set_autoload(bare && kprobe);
    p.td_uprobe.set_autoload(uprobe);
    p.td_bare_uprobe.set_autoload(bare && uprobe);
    // Every program is attached by hand.
    for prog in [
        &mut p.td_fentry,
        &mut p.td_fentry_any,
        &mut p.td_fentry_nl,
        &mut p.td_fentry_any_nl,
        &mut p.td_kprobe,
        &mut p.td_kprobe_any,
        &mut p.td_kprobe_nl,
        &mut p.td_kprobe_any_nl,
        &mut p.td_selftest,
        &mut p.td_selftest_any,
        &mut p.td_selftest_nl,
        &mut p.td_selftest_any_nl,
        &mut p.td_empty_fentry,
        &mut p.td_empty_fexit,
        &mut p.td_bare_fentry,
        &mut p.td_bare_kprobe,
        &mut p.td_uprobe,
        &mut p.td_bare_uprobe,
    ] {
        prog.set_autoattach(false);
    }
    if fentry {
        // Only programs that load: each target set is a search of the
        // kernel's BTF by name (about 6 ms each in the emulated guest).
        for prog in [
            &mut p.td_fentry,
            &mut p.td_fentry_any,
            &mut p.td_fentry_nl,
            &mut p.td_fentry_any_nl,
            &mut p.td_empty_fentry,
            &mut p.td_empty_fexit,
            &mut p.td_bare_fentry,
        ] {
            if !prog.autoload() {
                continue;
            }
            prog.set_attach_target(0, Some(func.to_string()))
                .map_err(|e| Error::bpf("setting the fentry target", e))?;
        }
    }
    // Pending sites are few and inserted once each: allocated on demand,
    // the table costs neither its full size on every CPU (16384 entries x
    // 8 bytes x CPUs) nor the time to set that up before attaching.
    if host.on_demand_hash {
        for (map, what) in [
            (&mut open.maps.pending, "setting the pending table's flags"),
            (&mut open.maps.early, "setting the early table's flags"),
            (
                &mut open.maps.upending,
                "setting the user pending table's flags",
            ),
        ] {
            map.set_map_flags(map.map_flags() | libbpf_sys::BPF_F_NO_PREALLOC)
                .map_err(|e| Error::bpf(what, e))?;
        }
    }
    // The early table only serves where the rules come after attaching.
    if config.deep.is_some() || config.deep_depth == 0 {
        open.maps
            .early
            .set_max_entries(1)
            .map_err(|e| Error::bpf("sizing the early table", e))?;
    }
    // The user-site tables serve only a uprobe.
    if !uprobe {
        for (map, what) in [
            (&mut open.maps.usites, "sizing the user site table"),
            (&mut open.maps.upending, "sizing the user pending table"),
        ] {
            map.set_max_entries(1).map_err(|e| Error::bpf(what, e))?;
        }
    }
    // A run that can never capture has the stack gate compiled out: its
    // ring buffer need not hold 4 MiB of kernel memory, nor take the time
    // to set them up (about 9 ms of an emulated start-up).
    if !config.stacks {
        open.maps
            .samples
            .set_max_entries(ctl::page_size() as u32)
            .map_err(|e| Error::bpf("sizing the stack ring buffer", e))?;
    }
    if let Some(deep) = &config.deep {
        let bss = open
            .maps
            .bss_data
            .as_deref_mut()
            .expect("the BPF object has .bss");
        bss.deep = *deep;
        bss.deep.ready = 1;
    }
    let ro = open
        .maps
        .rodata_data
        .as_deref_mut()
        .expect("the BPF object has .rodata");
    config.write(&mut ro.cfg);
    // Helpers the kernel may lack: each has a way round it.
    ro.cfg.func_ip_helper = host.func_ip_helper.into();
    ro.cfg.arg_cnt_helper = host.arg_cnt_helper.into();
    #[cfg(test)]
    if mode.is_none() {
        ro.cfg.synthetic_stack = 1;
    }
    Ok(open)
}

/// Puts the filter's pids and cgroup into their maps: after load, before
/// anything is attached.
pub(crate) fn set_filter(skel: &TopdownSkel<'_>, filter: &abi::Filters) -> Result<()> {
    use libbpf_rs::{MapCore, MapFlags};
    if !filter.tgids.is_empty() {
        skel.maps
            .pids
            .update(
                &0u32.to_ne_bytes(),
                &abi::pid_list(&filter.tgids),
                MapFlags::ANY,
            )
            .map_err(|e| Error::bpf("setting the pid filter", e))?;
    }
    if let Some(fd) = &filter.cgroup {
        use std::os::fd::AsRawFd;
        skel.maps
            .cgroup_filter
            .update(
                &0u32.to_ne_bytes(),
                &(fd.as_raw_fd() as u32).to_ne_bytes(),
                MapFlags::ANY,
            )
            .map_err(|e| Error::bpf("setting the cgroup filter", e))?;
    }
    Ok(())
}

/// Which counting program of a mode a load uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counting {
    /// The one that reads every switch (a filter, or --verify-caller),
    /// else the common path's.
    pub(crate) any: bool,
    /// The one that walks its loops with bpf_loop (verified once, whatever
    /// the number of rules), else its "_nl" twin, for kernels without the
    /// helper.
    pub(crate) loops: bool,
}

impl Counting {
    pub(crate) fn of(config: &Config, host: &Features) -> Self {
        Counting {
            any: config.any_path(),
            loops: host.loop_helper,
        }
    }
}

/// The counting program of `mode` (None: the self-test one) that `which`
/// names.
pub(crate) fn counting<'a, 'obj>(
    skel: &'a TopdownSkel<'obj>,
    mode: Option<Mode>,
    which: Counting,
) -> &'a libbpf_rs::ProgramMut<'obj> {
    let p = &skel.progs;
    match (mode, which.any, which.loops) {
        (Some(Mode::Uprobe), _, _) => &p.td_uprobe,
        (Some(Mode::Fentry), false, true) => &p.td_fentry,
        (Some(Mode::Fentry), true, true) => &p.td_fentry_any,
        (Some(Mode::Fentry), false, false) => &p.td_fentry_nl,
        (Some(Mode::Fentry), true, false) => &p.td_fentry_any_nl,
        (Some(Mode::Kprobe), false, true) => &p.td_kprobe,
        (Some(Mode::Kprobe), true, true) => &p.td_kprobe_any,
        (Some(Mode::Kprobe), false, false) => &p.td_kprobe_nl,
        (Some(Mode::Kprobe), true, false) => &p.td_kprobe_any_nl,
        (None, false, true) => &p.td_selftest,
        (None, true, true) => &p.td_selftest_any,
        (None, false, false) => &p.td_selftest_nl,
        (None, true, false) => &p.td_selftest_any_nl,
    }
}

/// Who keeps the counting program attached.
enum Owner<'obj> {
    /// This process loaded it: dropping the links detaches.
    Loaded {
        skel: Box<TopdownSkel<'obj>>,
        /// Which counting program it loaded.
        which: Counting,
        link: Option<Link>,
        companion: Option<(Companion, Link)>,
        /// More links of the counting program: a uprobe per --pid process.
        more: Vec<Link>,
    },
    /// A pin in bpffs: it stays attached whatever this process does.
    /// `steering`: this process holds its lock and may have set its shared
    /// state (capture, own_tgid, the watch key), put back when dropped.
    Pinned {
        prog: Option<OwnedFd>,
        steering: bool,
    },
}

/// A counting program, attached, and its maps.
pub(crate) struct Probe<'obj> {
    maps: Maps,
    owner: Owner<'obj>,
    mode: Mode,
    func: String,
}

impl<'obj> Probe<'obj> {
    /// `which`: the counting program loaded.
    pub(crate) fn new(
        skel: TopdownSkel<'obj>,
        mode: Mode,
        which: Counting,
        func: &str,
        link: Option<Link>,
    ) -> Result<Self> {
        Ok(Probe {
            maps: Maps::of_skel(&skel)?,
            owner: Owner::Loaded {
                skel: Box::new(skel),
                which,
                link,
                companion: None,
                more: Vec::new(),
            },
            mode,
            func: func.to_string(),
        })
    }

    /// A pinned instance's program (`prog`: its pin, opened; else found
    /// through its pinned link, which takes CAP_SYS_ADMIN), and its maps.
    pub(crate) fn pinned(
        maps: Maps,
        prog: Option<OwnedFd>,
        link: &Link,
        mode: Mode,
        func: &str,
    ) -> Self {
        let by_id = || {
            let info = link.info().ok()?;
            // SAFETY: a plain syscall wrapper; a negative result is an
            // error and is not wrapped.
            let fd = unsafe { libbpf_sys::bpf_prog_get_fd_by_id(info.prog_id) };
            // SAFETY: fd is a new file descriptor we own.
            (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
        };
        let prog = prog.or_else(by_id);
        Probe {
            maps,
            owner: Owner::Pinned {
                prog,
                steering: false,
            },
            mode,
            func: func.to_string(),
        }
    }

    pub(crate) fn maps(&self) -> &Maps {
        &self.maps
    }

    #[cfg(test)]
    pub(crate) fn maps_mut(&mut self) -> &mut Maps {
        &mut self.maps
    }

    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    pub(crate) fn func(&self) -> &str {
        &self.func
    }

    /// True for a pinned instance, which counted before this process.
    pub(crate) fn is_pinned(&self) -> bool {
        matches!(self.owner, Owner::Pinned { .. })
    }

    /// Marks this pinned instance as steered by this process (which holds
    /// its lock): however the process leaves it, by an error or a return,
    /// its stack capture is switched off and no process's calls are left
    /// out (`Drop`). SIGKILL is the BPF side's to cover (td_lease).
    pub(crate) fn steer(&mut self) {
        if let Owner::Pinned { steering, .. } = &mut self.owner {
            *steering = true;
        }
    }

    /// Ends this process's use: a loaded object's programs are detached
    /// (the maps stay readable); a pinned instance keeps counting, and its
    /// stack capture is switched off.
    pub(crate) fn detach(&mut self) -> Result<()> {
        match &mut self.owner {
            Owner::Loaded {
                link,
                companion,
                more,
                ..
            } => {
                *link = None;
                *companion = None;
                more.clear();
                Ok(())
            }
            Owner::Pinned { .. } => {
                self.maps.capture(SLOT_NONE, &[])?;
                self.maps.refill(0)
            }
        }
    }

    /// What the BPF side of a steered pinned instance shares with its
    /// reader, put back as no reader leaves it.
    fn release(&self) {
        self.maps.own(0);
        // Capture off cannot fail (stores to mapped memory); a budget left
        // is spent and not refilled.
        let _ = self.maps.capture(SLOT_NONE, &[]);
        let _ = self.maps.refill(0);
    }

    fn skel(&self) -> Option<&TopdownSkel<'obj>> {
        match &self.owner {
            Owner::Loaded { skel, .. } => Some(skel),
            Owner::Pinned { .. } => None,
        }
    }

    fn companion_prog(&self, kind: Companion) -> Option<&libbpf_rs::ProgramMut<'obj>> {
        let skel = self.skel()?;
        Some(match (kind, self.mode) {
            (Companion::Fentry, _) => &skel.progs.td_empty_fentry,
            (Companion::Fexit, _) => &skel.progs.td_empty_fexit,
            (Companion::Bare, Mode::Fentry) => &skel.progs.td_bare_fentry,
            (Companion::Bare, Mode::Kprobe) => &skel.progs.td_bare_kprobe,
            (Companion::Bare, Mode::Uprobe) => &skel.progs.td_bare_uprobe,
        })
    }

    /// Attaches the companion program (loaded only if asked for).
    pub(crate) fn attach_companion(&mut self, kind: Companion) -> Result<()> {
        let prog = self
            .companion_prog(kind)
            .ok_or_else(|| Error::msg("a pinned instance takes no companion program"))?;
        let link = match (kind, self.mode) {
            (Companion::Bare, Mode::Kprobe) => prog.attach_kprobe(false, &self.func),
            (_, Mode::Uprobe) => {
                return Err(Error::msg(
                    "a uprobe's companion is attached with attach_uprobes",
                ))
            }
            _ => prog.attach_trace(),
        }
        .map_err(|e| Error::bpf("attaching the companion program", e))?;
        if let Owner::Loaded { companion, .. } = &mut self.owner {
            *companion = Some((kind, link));
        }
        Ok(())
    }

    /// Run statistics of the companion program, if one is attached.
    pub(crate) fn companion_stats(&self) -> Option<(Companion, ProgStats)> {
        let Owner::Loaded {
            companion: Some((kind, _)),
            ..
        } = &self.owner
        else {
            return None;
        };
        Some((*kind, prog_stats(self.companion_prog(*kind)?.as_fd())))
    }

    /// Run statistics of the counting program (run_cnt and run_time_ns
    /// need kernel.bpf_stats_enabled=1).
    pub(crate) fn prog_stats(&self) -> ProgStats {
        match &self.owner {
            Owner::Loaded { skel, which, .. } => {
                prog_stats(counting(skel, Some(self.mode), *which).as_fd())
            }
            Owner::Pinned { prog, .. } => prog.as_ref().map_or_else(
                || {
                    unknown_stats("the pinned link's program cannot be opened");
                    ProgStats::default()
                },
                |fd| prog_stats(fd.as_fd()),
            ),
        }
    }

    /// Pins the counting program's link and the maps into `dir`, so that
    /// they outlive this process; from then on they are the pin's.
    pub(crate) fn pin(&mut self, dir: &std::path::Path) -> Result<()> {
        let Owner::Loaded {
            link: Some(link), ..
        } = &mut self.owner
        else {
            return Err(Error::msg("nothing attached to pin"));
        };
        link.pin(dir.join("link")).map_err(|e| {
            Error::bpf(
                "pinning the program's link (kprobe links need kernel 5.15 or later)",
                e,
            )
        })?;
        self.maps.pin(dir)?;
        // The program too: a reader opens it for its run statistics with
        // no CAP_SYS_ADMIN (finding it by id would take it).
        let Owner::Loaded { skel, which, .. } = &self.owner else {
            unreachable!("matched above")
        };
        let path = std::ffi::CString::new(dir.join("prog").into_os_string().into_encoded_bytes())
            .map_err(|_| Error::msg("a pin path with a NUL byte"))?;
        let fd = counting(skel, Some(self.mode), *which).as_fd().as_raw_fd();
        // SAFETY: a plain syscall wrapper, with a valid fd and path.
        if unsafe { libbpf_sys::bpf_obj_pin(fd, path.as_ptr()) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(Error::msg(format!("cannot pin the counting program: {e}")));
        }
        let Owner::Loaded {
            link: Some(link), ..
        } = &mut self.owner
        else {
            unreachable!("matched above")
        };
        // The pin holds the link now: dropping ours must not detach it.
        link.disconnect();
        Ok(())
    }

    /// Attaches the uprobe program (and the bare counter if it was loaded)
    /// at `offset` in `path`: once for every process (pid -1), or once
    /// per pid, so that other processes do not even trap.
    pub(crate) fn attach_uprobes(
        &mut self,
        path: &std::path::Path,
        offset: usize,
        pids: &[i32],
        bare: bool,
    ) -> Result<()> {
        let Owner::Loaded {
            skel,
            link,
            companion,
            more,
            ..
        } = &mut self.owner
        else {
            return Err(Error::msg("a pinned instance is attached already"));
        };
        let all = [-1];
        let pids = if pids.is_empty() { &all[..] } else { pids };
        for &pid in pids {
            let l = skel
                .progs
                .td_uprobe
                .attach_uprobe(false, pid, path, offset)
                .map_err(|e| Error::bpf("attaching the uprobe", e))?;
            if link.is_none() {
                *link = Some(l);
            } else {
                more.push(l);
            }
            if bare {
                let b = skel
                    .progs
                    .td_bare_uprobe
                    .attach_uprobe(false, pid, path, offset)
                    .map_err(|e| Error::bpf("attaching the bare uprobe counter", e))?;
                match companion {
                    None => *companion = Some((Companion::Bare, b)),
                    Some(_) => more.push(b),
                }
            }
        }
        Ok(())
    }

    /// Captures stacks of `slot` from now on; `callers` are the address
    /// ranges of the reason's caller functions, for calls from sites not
    /// resolved yet.
    pub(crate) fn stacks_on(&mut self, slot: u32, callers: &[(u64, u64)]) -> Result<()> {
        self.maps.capture(slot, callers)
    }
}

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        if let Owner::Pinned { steering: true, .. } = self.owner {
            self.release();
        }
    }
}

/// Says, once, that the program's run statistics cannot be read: its cost
/// and recursion misses are then unknown, not none.
fn unknown_stats(why: &str) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!(
            "topdown: warning: cannot read the BPF program's run statistics ({why}): \
             its cost and recursion misses are unknown, and shown as 0"
        );
    }
}

fn prog_stats(fd: std::os::fd::BorrowedFd<'_>) -> ProgStats {
    use std::os::fd::AsRawFd;
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: info is a zeroed bpf_prog_info and len its size; the kernel
    // writes at most len bytes.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    if rc != 0 {
        unknown_stats(&std::io::Error::from_raw_os_error(-rc).to_string());
        return ProgStats::default();
    }
    ProgStats {
        run_cnt: info.run_cnt,
        run_time_ns: info.run_time_ns,
        recursion_misses: info.recursion_misses,
    }
}

/// The counting and stack paths run through BPF_PROG_TEST_RUN on a raw_tp
/// wrapper: the kernel side checked on kernels that refuse fentry.
#[cfg(test)]
pub(crate) mod selftest {
    use super::*;
    use crate::bpf::abi::SELFTEST_ARGS;
    use libbpf_rs::skel::OpenSkel;

    /// Loads the object with only the self-test program (needs root).
    pub(crate) fn load<'obj>(
        storage: &'obj mut MaybeUninit<OpenObject>,
        config: &Config,
    ) -> Probe<'obj> {
        load_on(storage, config, &Features::probe())
    }

    /// `load`, as for a kernel with `host`'s features.
    pub(crate) fn load_on<'obj>(
        storage: &'obj mut MaybeUninit<OpenObject>,
        config: &Config,
        host: &Features,
    ) -> Probe<'obj> {
        let open = open_for(storage, config, "selftest", Programs::SelfTest, host).expect("open");
        let skel = open
            .load()
            .expect("load the raw_tp self-test program (needs root)");
        set_filter(&skel, &config.filter).expect("the filter's maps");
        let which = Counting::of(config, host);
        Probe::new(skel, Mode::Kprobe, which, "selftest", None).expect("the maps")
    }

    /// The raw_tp context of one run: the caller's return address, then
    /// up to 11 frames above it (for deeper-frame rules).
    pub(crate) fn context(frames: &[u64]) -> Vec<u8> {
        let mut args = [0u64; SELFTEST_ARGS];
        for (a, f) in args.iter_mut().zip(frames) {
            *a = *f;
        }
        args.iter().flat_map(|a| a.to_ne_bytes()).collect()
    }

    impl Probe<'_> {
        /// Runs the counting path `repeat` times on return address `ret`.
        pub(crate) fn test_count(&self, ret: u64, repeat: u32) {
            self.test_count_stack(&[ret], repeat)
        }

        /// Like `test_count`, with `frames[0]` the caller's return address
        /// and the rest the frames above it.
        pub(crate) fn test_count_stack(&self, frames: &[u64], repeat: u32) {
            // raw_tp test runs take no repeat count: run it that many times.
            for _ in 0..repeat {
                self.test_run(frames, None);
            }
        }

        /// Runs the counting path once on return address `ret`, on CPU `cpu`.
        pub(crate) fn test_count_on(&self, ret: u64, cpu: u32) {
            self.test_run(&[ret], Some(cpu));
        }

        /// One run of the self-test program on `frames`, on CPU `cpu` if
        /// given.
        fn test_run(&self, frames: &[u64], cpu: Option<u32>) {
            let mut ctx = context(frames);
            let mut input = libbpf_rs::ProgramInput {
                context_in: Some(&mut ctx),
                ..Default::default()
            };
            if let Some(cpu) = cpu {
                input.cpu = cpu;
                input.flags = libbpf_sys::BPF_F_TEST_RUN_ON_CPU;
            }
            self.selftest_prog()
                .test_run(input)
                .expect("run the self-test program");
        }

        pub(crate) fn selftest_fd(&self) -> std::os::fd::BorrowedFd<'_> {
            self.selftest_prog().as_fd()
        }

        fn selftest_prog(&self) -> &libbpf_rs::ProgramMut<'_> {
            let Owner::Loaded { skel, which, .. } = &self.owner else {
                panic!("a loaded object");
            };
            counting(skel, None, *which)
        }
    }
}
