//! The loaded BPF object: opening it with its settings, and reading and
//! writing its maps afterwards. Plain data in, plain data out.

use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::sync::atomic::{fence, Ordering};

use libbpf_rs::skel::SkelBuilder;
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, OpenObject};

use crate::bpf::abi::{self, Config, Stats, MAX_STACK_RANGES, SLOT_NONE};
use crate::bpf::skel::{types, OpenTopdownSkel, TopdownSkel, TopdownSkelBuilder};
use crate::error::{Error, Result};

/// How the traced function is hooked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Fentry,
    Kprobe,
}

impl Mode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Fentry => "fentry",
            Mode::Kprobe => "kprobe",
        }
    }
}

/// An empty program attached beside the counting one (fentry mode only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Companion {
    /// The cost baseline for the counting program.
    Fentry,
    /// Changes the trampoline frame layout: a check of the caller lookup.
    Fexit,
}

impl Companion {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Companion::Fexit => "fexit",
            Companion::Fentry => "fentry",
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
) -> Result<OpenTopdownSkel<'obj>> {
    open_for(
        storage,
        config,
        func,
        Programs::Trace(mode, companion.filter(|_| mode == Mode::Fentry)),
    )
}

fn open_for<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    config: &Config,
    func: &str,
    which: Programs,
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
    let p = &mut open.progs;
    p.td_fentry.set_autoload(fentry);
    p.td_kprobe.set_autoload(kprobe);
    p.td_selftest.set_autoload(mode.is_none());
    p.td_empty_fentry
        .set_autoload(companion == Some(Companion::Fentry));
    p.td_empty_fexit
        .set_autoload(companion == Some(Companion::Fexit));
    // Every program is attached by hand.
    for prog in [
        &mut p.td_fentry,
        &mut p.td_kprobe,
        &mut p.td_selftest,
        &mut p.td_empty_fentry,
        &mut p.td_empty_fexit,
    ] {
        prog.set_autoattach(false);
    }
    if fentry {
        for prog in [
            &mut p.td_fentry,
            &mut p.td_empty_fentry,
            &mut p.td_empty_fexit,
        ] {
            prog.set_attach_target(0, Some(func.to_string()))
                .map_err(|e| Error::bpf("setting the fentry target", e))?;
        }
    }
    let ro = open
        .maps
        .rodata_data
        .as_deref_mut()
        .expect("the BPF object has .rodata");
    config.write(&mut ro.cfg);
    #[cfg(test)]
    if mode.is_none() {
        ro.cfg.synthetic_stack = 1;
    }
    Ok(open)
}

/// A loaded object and the links that keep its programs attached.
pub(crate) struct Probe<'obj> {
    skel: TopdownSkel<'obj>,
    mode: Mode,
    func: String,
    // Dropping a link detaches its program.
    link: Option<Link>,
    companion: Option<(Companion, Link)>,
}

const ZERO_KEY: [u8; 4] = 0u32.to_ne_bytes();

impl<'obj> Probe<'obj> {
    pub(crate) fn new(skel: TopdownSkel<'obj>, mode: Mode, func: &str, link: Option<Link>) -> Self {
        Probe {
            skel,
            mode,
            func: func.to_string(),
            link,
            companion: None,
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    pub(crate) fn func(&self) -> &str {
        &self.func
    }

    /// Detaches every program; the maps stay readable.
    pub(crate) fn detach(&mut self) {
        self.link = None;
        self.companion = None;
    }

    fn companion_prog(&self, kind: Companion) -> &libbpf_rs::ProgramMut<'obj> {
        match kind {
            Companion::Fentry => &self.skel.progs.td_empty_fentry,
            Companion::Fexit => &self.skel.progs.td_empty_fexit,
        }
    }

    /// Attaches the empty companion program (loaded only if asked for).
    pub(crate) fn attach_companion(&mut self, kind: Companion) -> Result<()> {
        let link = self
            .companion_prog(kind)
            .attach_trace()
            .map_err(|e| Error::bpf("attaching the companion program", e))?;
        self.companion = Some((kind, link));
        Ok(())
    }

    /// Run statistics of the companion program, if one is attached.
    pub(crate) fn companion_stats(&self) -> Option<(Companion, ProgStats)> {
        let (kind, _) = self.companion.as_ref()?;
        Some((*kind, prog_stats(self.companion_prog(*kind).as_fd())))
    }

    fn counts_percpu(&self) -> Result<Vec<Vec<u8>>> {
        Ok(self
            .skel
            .maps
            .counts
            .lookup_percpu(&ZERO_KEY, MapFlags::ANY)
            .map_err(|e| Error::bpf("reading the counters", e))?
            .unwrap_or_default())
    }

    /// Per-slot counts summed over all possible CPUs.
    pub(crate) fn counts(&self) -> Result<Vec<u64>> {
        Ok(abi::slots_of(&self.counts_percpu()?))
    }

    /// Return addresses not yet in the site table, with their counts.
    pub(crate) fn pending(&self) -> Result<Vec<(u64, u64)>> {
        let map = &self.skel.maps.pending;
        let mut out = Vec::new();
        for key in map.keys() {
            let Ok(k) = <[u8; 8]>::try_from(key.as_slice()) else {
                continue;
            };
            // Nothing deletes keys, so each listed key can be looked up.
            if let Some(v) = map
                .lookup_percpu(&k, MapFlags::ANY)
                .map_err(|e| Error::bpf("reading the pending sites", e))?
            {
                out.push((u64::from_ne_bytes(k), abi::sum_percpu::<1>(&v)[0]));
            }
        }
        Ok(out)
    }

    /// Tells the BPF side which slot a return address counts in. A full
    /// site table is not an error: the site's calls then stay pending and
    /// are added under its reason by user space.
    pub(crate) fn add_site(&self, ret: u64, slot: u32) -> Result<()> {
        match self
            .skel
            .maps
            .sites
            .update(&ret.to_ne_bytes(), &slot.to_ne_bytes(), MapFlags::ANY)
        {
            Err(e) if e.kind() != libbpf_rs::ErrorKind::TooBig => {
                Err(Error::bpf("updating the site table", e))
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn stats(&self) -> Result<Stats> {
        let v = self
            .skel
            .maps
            .stats
            .lookup_percpu(&ZERO_KEY, MapFlags::ANY)
            .map_err(|e| Error::bpf("reading the statistics", e))?
            .unwrap_or_default();
        Ok(Stats::from_percpu(&v, &self.counts_percpu()?))
    }

    /// Lets each CPU send up to `per_cpu` more stacks (the budget is
    /// replaced, not added to: what a CPU did not use is gone).
    pub(crate) fn refill(&self, per_cpu: u64) -> Result<()> {
        let cpus = libbpf_rs::num_possible_cpus()
            .map_err(|e| Error::bpf("counting the possible CPUs", e))?;
        let values = vec![per_cpu.to_ne_bytes().to_vec(); cpus];
        self.skel
            .maps
            .budget
            .update_percpu(&ZERO_KEY, &values, MapFlags::ANY)
            .map_err(|e| Error::bpf("refilling the stack budget", e))
    }

    /// Run statistics of the counting program (run_cnt and run_time_ns
    /// need kernel.bpf_stats_enabled=1).
    pub(crate) fn prog_stats(&self) -> ProgStats {
        let prog = match self.mode {
            Mode::Fentry => &self.skel.progs.td_fentry,
            Mode::Kprobe => &self.skel.progs.td_kprobe,
        };
        prog_stats(prog.as_fd())
    }

    /// A handle on the sample ring buffer, independent of `self`'s borrows.
    pub(crate) fn samples_map(&self) -> Result<MapHandle> {
        MapHandle::try_from(&self.skel.maps.samples)
            .map_err(|e| Error::bpf("opening the sample ring buffer", e))
    }

    /// Captures stacks of `slot` from now on (the counting program does it,
    /// for an object loaded with `Config::stacks`); `callers` are the
    /// address ranges of the reason's caller functions, for calls from sites
    /// not resolved yet.
    pub(crate) fn stacks_on(&mut self, slot: u32, callers: &[(u64, u64)]) -> Result<()> {
        if callers.len() > MAX_STACK_RANGES {
            return Err(Error::msg(format!(
                "the stack reason has {} caller ranges, more than the {MAX_STACK_RANGES} supported",
                callers.len()
            )));
        }
        let ctl = self.control();
        // SAFETY: `ctl` points into the mmap'ed .data section, alive as long
        // as the skeleton.
        unsafe { publish(ctl, slot, callers) };
        Ok(())
    }

    /// The run-time control block the BPF side reads (in .data).
    fn control(&mut self) -> *mut types::td_control {
        let data = self
            .skel
            .maps
            .data_data
            .as_deref_mut()
            .expect("the BPF object has .data");
        &mut data.ctl
    }
}

/// Moves stack capture to `slot` with `callers` as its caller ranges, in
/// the order the BPF side relies on (see td_control in topdown.h): capture
/// off, no ranges, the ranges, their count, then the new reason. Each store
/// is volatile (the BPF side reads the memory directly) and fenced.
///
/// # Safety
/// `ctl` must point to the mmap'ed td_control of a loaded object.
unsafe fn publish(ctl: *mut types::td_control, slot: u32, callers: &[(u64, u64)]) {
    use std::ptr::{addr_of_mut, write_volatile};
    write_volatile(addr_of_mut!((*ctl).reason), SLOT_NONE);
    write_volatile(addr_of_mut!((*ctl).nr_ranges), 0);
    fence(Ordering::SeqCst);
    for (i, &(lo, hi)) in callers.iter().take(MAX_STACK_RANGES).enumerate() {
        let r = addr_of_mut!((*ctl).ranges[i]);
        write_volatile(addr_of_mut!((*r).lo), lo);
        write_volatile(addr_of_mut!((*r).hi), hi);
        write_volatile(addr_of_mut!((*r).reason), slot);
    }
    fence(Ordering::SeqCst);
    write_volatile(
        addr_of_mut!((*ctl).nr_ranges),
        callers.len().min(MAX_STACK_RANGES) as u32,
    );
    fence(Ordering::SeqCst);
    write_volatile(addr_of_mut!((*ctl).reason), slot);
}

fn prog_stats(fd: std::os::fd::BorrowedFd<'_>) -> ProgStats {
    use std::os::fd::AsRawFd;
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: info is a zeroed bpf_prog_info and len its size; the kernel
    // writes at most len bytes.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    if rc != 0 {
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
        let open = open_for(storage, config, "selftest", Programs::SelfTest).expect("open");
        let skel = open
            .load()
            .expect("load the raw_tp self-test program (needs root)");
        Probe::new(skel, Mode::Kprobe, "selftest", None)
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
                let mut ctx = context(frames);
                let input = libbpf_rs::ProgramInput {
                    context_in: Some(&mut ctx),
                    ..Default::default()
                };
                self.skel
                    .progs
                    .td_selftest
                    .test_run(input)
                    .expect("run the self-test program");
            }
        }

        pub(crate) fn selftest_fd(&self) -> std::os::fd::BorrowedFd<'_> {
            self.skel.progs.td_selftest.as_fd()
        }

        /// The raw control block pointer, for a test that moves capture
        /// from one thread while another runs the program.
        pub(crate) fn control_ptr(&mut self) -> *mut types::td_control {
            self.control()
        }
    }

    /// Moves capture through a raw control pointer (see control_ptr).
    ///
    /// # Safety
    /// As for `publish`.
    pub(crate) unsafe fn move_capture(
        ctl: *mut types::td_control,
        slot: u32,
        callers: &[(u64, u64)],
    ) {
        publish(ctl, slot, callers)
    }
}
