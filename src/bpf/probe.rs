//! The counting program: opening and configuring the object, and what
//! keeps it attached (this process, or a pin in bpffs). Its maps are in
//! `maps`.

use std::mem::MaybeUninit;
use std::os::fd::{FromRawFd, OwnedFd};

use libbpf_rs::skel::SkelBuilder;
use libbpf_rs::{Link, OpenObject};
use serde::{Deserialize, Serialize};

use crate::bpf::abi::{self, LoadConfig};
use crate::bpf::ctl;
use crate::bpf::maps::Maps;
use crate::bpf::skel::{OpenTopdownSkel, TopdownSkel, TopdownSkelBuilder};
use crate::error::{Error, Result};
use crate::host::Features;

mod links;
#[cfg(test)]
pub(crate) mod selftest;
mod stats;

/// How the traced function is hooked. Written as its name in reports,
/// saved runs and pin metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    Fentry,
    Kprobe,
    /// A user-space function (-x): a uprobe at its entry.
    Uprobe,
    /// A tracepoint (`t:CATEGORY:EVENT`), through its BTF type (5.5).
    #[serde(rename = "tp_btf")]
    TpBtf,
    /// A tracepoint, raw: where the kernel refuses tp_btf for it.
    #[serde(rename = "raw_tp")]
    RawTp,
}

impl Mode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Fentry => "fentry",
            Mode::Kprobe => "kprobe",
            Mode::Uprobe => "uprobe",
            Mode::TpBtf => "tp_btf",
            Mode::RawTp => "raw_tp",
        }
    }

    /// Whether the target is a tracepoint.
    pub(crate) fn is_tracepoint(self) -> bool {
        matches!(self, Mode::TpBtf | Mode::RawTp)
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
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
    config: &LoadConfig,
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
    config: &LoadConfig,
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
    select_programs(&mut open, mode, companion, Counting::of(config, host));
    if mode == Some(Mode::Fentry) {
        set_fentry_targets(&mut open, func)?;
    }
    if mode == Some(Mode::TpBtf) {
        set_tp_targets(&mut open, func)?;
    }
    size_maps(&mut open, config, mode == Some(Mode::Uprobe), host)?;
    write_config(&mut open, config, host);
    #[cfg(test)]
    if mode.is_none() {
        let ro = open.maps.rodata_data.as_deref_mut();
        ro.expect("the BPF object has .rodata").cfg.synthetic_stack = 1;
    }
    Ok(open)
}

/// Loads the counting program of `mode` (None: the self-test one) that
/// `which` names, and the companion asked for; every program is attached
/// by hand.
fn select_programs(
    open: &mut OpenTopdownSkel<'_>,
    mode: Option<Mode>,
    companion: Option<Companion>,
    which: Counting,
) {
    let fentry = mode == Some(Mode::Fentry);
    let kprobe = mode == Some(Mode::Kprobe);
    let uprobe = mode == Some(Mode::Uprobe);
    let tp = mode == Some(Mode::TpBtf);
    let rawtp = mode == Some(Mode::RawTp);
    let Counting { any, loops, known } = which;
    let p = &mut open.progs;
    for (prog, kind, a, l) in [
        (&mut p.td_fentry, fentry && !known, false, true),
        (&mut p.td_fentry_known, fentry && known, false, true),
        (&mut p.td_fentry_any, fentry, true, true),
        (&mut p.td_fentry_nl, fentry, false, false),
        (&mut p.td_fentry_any_nl, fentry, true, false),
        (&mut p.td_kprobe, kprobe, false, true),
        (&mut p.td_kprobe_any, kprobe, true, true),
        (&mut p.td_kprobe_nl, kprobe, false, false),
        (&mut p.td_kprobe_any_nl, kprobe, true, false),
        (&mut p.td_tp, tp, false, true),
        (&mut p.td_tp_any, tp, true, true),
        (&mut p.td_tp_nl, tp, false, false),
        (&mut p.td_tp_any_nl, tp, true, false),
        (&mut p.td_rawtp, rawtp, false, true),
        (&mut p.td_rawtp_any, rawtp, true, true),
        (&mut p.td_rawtp_nl, rawtp, false, false),
        (&mut p.td_rawtp_any_nl, rawtp, true, false),
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
    p.td_bare_tp.set_autoload(bare && tp);
    p.td_bare_rawtp.set_autoload(bare && rawtp);
    p.td_uprobe.set_autoload(uprobe);
    p.td_bare_uprobe.set_autoload(bare && uprobe);
    for prog in [
        &mut p.td_fentry,
        &mut p.td_fentry_known,
        &mut p.td_fentry_any,
        &mut p.td_fentry_nl,
        &mut p.td_fentry_any_nl,
        &mut p.td_kprobe,
        &mut p.td_kprobe_any,
        &mut p.td_kprobe_nl,
        &mut p.td_kprobe_any_nl,
        &mut p.td_tp,
        &mut p.td_tp_any,
        &mut p.td_tp_nl,
        &mut p.td_tp_any_nl,
        &mut p.td_rawtp,
        &mut p.td_rawtp_any,
        &mut p.td_rawtp_nl,
        &mut p.td_rawtp_any_nl,
        &mut p.td_bare_tp,
        &mut p.td_bare_rawtp,
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
}

/// Sets `func` as the target of the fentry programs that load: only
/// those, as each target set is a search of the kernel's BTF by name.
fn set_fentry_targets(open: &mut OpenTopdownSkel<'_>, func: &str) -> Result<()> {
    let p = &mut open.progs;
    for prog in [
        &mut p.td_fentry,
        &mut p.td_fentry_known,
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
    Ok(())
}

/// Sets tracepoint `event` as the target of the tp_btf programs that load
/// (libbpf finds its `btf_trace_EVENT` type).
fn set_tp_targets(open: &mut OpenTopdownSkel<'_>, event: &str) -> Result<()> {
    let p = &mut open.progs;
    for prog in [
        &mut p.td_tp,
        &mut p.td_tp_any,
        &mut p.td_tp_nl,
        &mut p.td_tp_any_nl,
        &mut p.td_bare_tp,
    ] {
        if !prog.autoload() {
            continue;
        }
        prog.set_attach_target(0, Some(event.to_string()))
            .map_err(|e| Error::bpf("setting the tracepoint", e))?;
    }
    Ok(())
}

/// Sizes the maps for what this load can use: a table that cannot serve
/// is shrunk to one entry, and on-demand allocation is used where the
/// kernel has it.
fn size_maps(
    open: &mut OpenTopdownSkel<'_>,
    config: &LoadConfig,
    uprobe: bool,
    host: &Features,
) -> Result<()> {
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
    // The path table serves only --drill. It stays preallocated: an
    // insert allocating on the counting path would refill the kernel's
    // BPF allocator from an irq_work, whose page allocations a program on
    // mm_page_alloc, running at the time, would miss.
    if config.drill_levels == 0 || !config.stacks {
        open.maps
            .paths
            .set_max_entries(1)
            .map_err(|e| Error::bpf("sizing the path table", e))?;
    }
    // The user-site tables serve only a uprobe.
    if !uprobe {
        for (map, what) in [
            (&mut open.maps.usites, "sizing the user site table"),
            (&mut open.maps.upending, "sizing the user pending table"),
            (&mut open.maps.ufuncs, "sizing the user function table"),
        ] {
            map.set_max_entries(1).map_err(|e| Error::bpf(what, e))?;
        }
    }
    // A run that can never capture has the stack gate compiled out: its
    // ring buffer need not hold 4 MiB of kernel memory, nor take the time
    // to set them up.
    if !config.stacks {
        open.maps
            .samples
            .set_max_entries(ctl::page_size() as u32)
            .map_err(|e| Error::bpf("sizing the stack ring buffer", e))?;
    }
    Ok(())
}

/// Writes `config`, and the helpers `host` has, into the object's
/// read-only data, and the deeper-frame tables known before load into its
/// .bss.
fn write_config(open: &mut OpenTopdownSkel<'_>, config: &LoadConfig, host: &Features) {
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

/// Where the reasons are known before attaching (a pin's): their names
/// and routes go in, and the programs name new sites from the first call.
pub(crate) fn set_names(skel: &TopdownSkel<'_>, config: &abi::LoadConfig) -> Result<()> {
    use crate::reasons::NameTable;
    let Some(t) = config
        .names_at_load
        .as_ref()
        .filter(|_| config.resolve.is_some())
    else {
        return Ok(());
    };
    let maps = Maps::of_skel(skel)?;
    for (slot, name) in &t.names {
        maps.claim_name(*slot, name)?;
    }
    maps.start_resolving(t.func, t.tail, &t.routes)
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
    /// Fentry's common path where the kernel has everything its one-load
    /// read takes (6.2): `td_fentry_known`, which tests for none of it (a
    /// test is a load of .rodata the verifier leaves in).
    pub(crate) known: bool,
}

impl Counting {
    pub(crate) fn of(config: &LoadConfig, host: &Features) -> Self {
        let any = config.any_path();
        let loops = host.loop_helper;
        Counting {
            any,
            loops,
            known: !any && loops && host.arg_cnt_helper && host.cast_kfunc,
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
        (Some(Mode::Fentry), false, true) if which.known => &p.td_fentry_known,
        (Some(Mode::Fentry), false, true) => &p.td_fentry,
        (Some(Mode::Fentry), true, true) => &p.td_fentry_any,
        (Some(Mode::Fentry), false, false) => &p.td_fentry_nl,
        (Some(Mode::Fentry), true, false) => &p.td_fentry_any_nl,
        (Some(Mode::Kprobe), false, true) => &p.td_kprobe,
        (Some(Mode::Kprobe), true, true) => &p.td_kprobe_any,
        (Some(Mode::Kprobe), false, false) => &p.td_kprobe_nl,
        (Some(Mode::Kprobe), true, false) => &p.td_kprobe_any_nl,
        (Some(Mode::TpBtf), false, true) => &p.td_tp,
        (Some(Mode::TpBtf), true, true) => &p.td_tp_any,
        (Some(Mode::TpBtf), false, false) => &p.td_tp_nl,
        (Some(Mode::TpBtf), true, false) => &p.td_tp_any_nl,
        (Some(Mode::RawTp), false, true) => &p.td_rawtp,
        (Some(Mode::RawTp), true, true) => &p.td_rawtp_any,
        (Some(Mode::RawTp), false, false) => &p.td_rawtp_nl,
        (Some(Mode::RawTp), true, false) => &p.td_rawtp_any_nl,
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
                let was = self.maps.capturing();
                self.maps.stop_capture()?;
                was.into_iter()
                    .try_for_each(|slot| self.maps.refill(slot, 0, 0))
            }
        }
    }

    /// What the BPF side of a steered pinned instance shares with its
    /// reader, put back as no reader leaves it.
    fn release(&self) {
        self.maps.own(0);
        // Capture off cannot fail (stores to mapped memory); a budget left
        // is spent and not refilled.
        let was = self.maps.capturing();
        let _ = self.maps.stop_capture();
        for slot in was {
            let _ = self.maps.refill(slot, 0, 0);
        }
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
            (Companion::Bare, Mode::TpBtf) => &skel.progs.td_bare_tp,
            (Companion::Bare, Mode::RawTp) => &skel.progs.td_bare_rawtp,
        })
    }

    /// Captures the stacks of the reasons in `set` from now on, in place of
    /// those captured before (see `Maps::capture_set`).
    pub(crate) fn stacks_on(&mut self, set: &[crate::bpf::ctl::Captured]) -> Result<()> {
        self.maps.capture_set(set)
    }
}

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        if let Owner::Pinned { steering: true, .. } = self.owner {
            self.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(loop_helper: bool, arg_cnt_helper: bool, cast_kfunc: bool) -> Features {
        Features {
            btf: true,
            kprobes: true,
            ringbuf: true,
            on_demand_hash: true,
            loop_helper,
            func_ip_helper: true,
            arg_cnt_helper,
            cast_kfunc,
        }
    }

    #[test]
    fn the_known_program_only_where_the_kernel_has_all_it_takes() {
        let common = LoadConfig::default();
        let filtered = LoadConfig {
            verify_caller: true,
            ..LoadConfig::default()
        };
        // 6.2 and later
        assert!(Counting::of(&common, &host(true, true, true)).known);
        // the program that reads every switch has no such twin
        assert!(!Counting::of(&filtered, &host(true, true, true)).known);
        // 5.17 to 6.1: no bpf_rdonly_cast; a backport without the helper or bpf_loop
        assert!(!Counting::of(&common, &host(true, true, false)).known);
        assert!(!Counting::of(&common, &host(true, false, true)).known);
        assert!(!Counting::of(&common, &host(false, true, true)).known);
    }
}
