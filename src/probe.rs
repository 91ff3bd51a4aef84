//! The loaded BPF object: configuring it before load, and reading and
//! writing its maps afterwards. Plain data in, plain data out.

use std::mem::size_of;
use std::os::fd::AsFd;

use libbpf_rs::skel::SkelBuilder;
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, OpenObject};

use crate::error::{Error, Result};
use crate::reasons::NR_SLOTS;
use crate::skel::{types, OpenTopdownSkel, TopdownSkel, TopdownSkelBuilder};

/// How the traced function is hooked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Fentry,
    Kprobe,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Fentry => "fentry",
            Mode::Kprobe => "kprobe",
        }
    }
}

/// A caller function range whose reason depends on deeper frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeepCaller {
    pub lo: u64,
    pub hi: u64,
    pub rule_first: u32,
    pub rule_count: u32,
    /// Slot when no rule matches.
    pub reason: u32,
}

/// "A frame in [lo, hi) within `depth` frames above the caller means `reason`."
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeepRule {
    pub lo: u64,
    pub hi: u64,
    pub reason: u32,
    pub depth: u32,
}

pub const MAX_DEEP_CALLERS: usize = 16;
pub const MAX_DEEP_RULES: usize = 32;
pub const MAX_RULE_DEPTH: u32 = 16;
pub const MAX_STACK_FRAMES: u32 = 127;
pub const MAX_STACK_RANGES: usize = 32;
/// The stack reason when stacks are off.
const TD_SLOT_NONE: u32 = u32::MAX;
/// FUNC's entry frame is FUNC+5 (a call from the fentry site), FUNC+9
/// behind an IBT endbr64, FUNC+1 under a kprobe: all below this.
pub const ENTRY_WINDOW: u64 = 16;

/// An empty program attached beside the counting one (fentry mode only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Companion {
    /// Changes the trampoline frame layout: a check of the caller lookup.
    Fexit,
    /// The cost baseline for the counting program.
    Fentry,
}

impl Companion {
    pub fn name(self) -> &'static str {
        match self {
            Companion::Fexit => "fexit",
            Companion::Fentry => "fentry",
        }
    }
}

/// Everything the BPF programs are given before load.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub func: String,
    pub func_addr: u64,
    pub verify_caller: bool,
    pub user_stacks: bool,
    pub stack_frames: u32,
    pub sample_every: u32,
    pub max_per_cpu_sec: u64,
    pub callers: Vec<DeepCaller>,
    pub rules: Vec<DeepRule>,
    pub companion: Option<Companion>,
    /// Calls from this process are left out (0: count everything).
    pub own_tgid: u32,
}

/// Counters kept by the BPF side besides the reason slots, summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub verify_checked: u64,
    pub verify_mismatch: u64,
    pub verify_unwind_failed: u64,
    pub deep_unwind_failed: u64,
    pub stack_matched: u64,
    pub stack_sampled_out: u64,
    pub stack_rate_capped: u64,
    pub stack_ringbuf_full: u64,
    pub stack_emitted: u64,
    /// Calls made by topdown itself, left out of the counts.
    pub own_calls: u64,
}

/// Kernel-side run statistics of the counting program.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgStats {
    pub run_cnt: u64,
    pub run_time_ns: u64,
    /// Calls the program missed because it was already running on that
    /// CPU (the function was hit from inside BPF code).
    pub recursion_misses: u64,
}

/// Opens the object, writes `settings` into its read-only data and selects
/// the programs of `mode`.
pub fn open<'obj>(
    storage: &'obj mut std::mem::MaybeUninit<OpenObject>,
    settings: &Settings,
    mode: Mode,
) -> Result<OpenTopdownSkel<'obj>> {
    let mut open = TopdownSkelBuilder::default()
        .open(storage)
        .map_err(|e| Error::bpf("opening the BPF object", e))?;
    let fentry = mode == Mode::Fentry;
    open.progs.td_fentry.set_autoload(fentry);
    open.progs.td_fentry_stack.set_autoload(fentry);
    open.progs.td_kprobe.set_autoload(!fentry);
    open.progs.td_kprobe_stack.set_autoload(!fentry);
    open.progs.td_selftest.set_autoload(false);
    let companion = settings.companion.filter(|_| fentry);
    let progs = &mut open.progs;
    progs
        .td_empty_fentry
        .set_autoload(companion == Some(Companion::Fentry));
    progs
        .td_empty_fexit
        .set_autoload(companion == Some(Companion::Fexit));
    // Attached by hand: the stack programs only while capturing stacks.
    for p in [
        &mut progs.td_fentry_stack,
        &mut progs.td_kprobe_stack,
        &mut progs.td_empty_fentry,
        &mut progs.td_empty_fexit,
    ] {
        p.set_autoattach(false);
    }
    if fentry {
        for p in [
            &mut progs.td_fentry,
            &mut progs.td_fentry_stack,
            &mut progs.td_empty_fentry,
            &mut progs.td_empty_fexit,
        ] {
            p.set_attach_target(0, Some(settings.func.clone()))
                .map_err(|e| Error::bpf("setting the fentry target", e))?;
        }
    }
    configure(&mut open, settings);
    Ok(open)
}

/// Arguments of one self-test run: the caller's return address, then up to
/// 11 frames above it (used by deeper-frame rules).
pub const SELFTEST_ARGS: usize = 12;

/// Opens the object with only the self-test program, for BPF_PROG_TEST_RUN.
pub fn open_selftest<'obj>(
    storage: &'obj mut std::mem::MaybeUninit<OpenObject>,
    settings: &Settings,
) -> Result<OpenTopdownSkel<'obj>> {
    let mut open = TopdownSkelBuilder::default()
        .open(storage)
        .map_err(|e| Error::bpf("opening the BPF object", e))?;
    open.progs.td_fentry.set_autoload(false);
    open.progs.td_fentry_stack.set_autoload(false);
    open.progs.td_kprobe.set_autoload(false);
    open.progs.td_kprobe_stack.set_autoload(false);
    open.progs.td_empty_fentry.set_autoload(false);
    open.progs.td_empty_fexit.set_autoload(false);
    configure(&mut open, settings);
    if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
        ro.synthetic_stack = true;
    }
    Ok(open)
}

fn configure(open: &mut OpenTopdownSkel<'_>, s: &Settings) {
    let ro = open
        .maps
        .rodata_data
        .as_deref_mut()
        .expect("the BPF object has .rodata");
    ro.func_addr = s.func_addr;
    ro.entry_window = ENTRY_WINDOW;
    ro.verify_caller = s.verify_caller;
    ro.user_stacks = s.user_stacks;
    ro.stack_bytes = s.stack_frames.clamp(1, MAX_STACK_FRAMES) * 8;
    ro.sample_every = s.sample_every.max(1);
    ro.max_per_cpu_sec = s.max_per_cpu_sec;
    ro.own_tgid = s.own_tgid;
    ro.nr_callers = s.callers.len().min(MAX_DEEP_CALLERS) as u32;
    for (dst, c) in ro.callers.iter_mut().zip(&s.callers) {
        dst.lo = c.lo;
        dst.hi = c.hi;
        dst.rule_first = c.rule_first;
        dst.rule_count = c.rule_count;
        dst.reason = c.reason;
    }
    for (dst, r) in ro.rules.iter_mut().zip(&s.rules) {
        dst.lo = r.lo;
        dst.hi = r.hi;
        dst.reason = r.reason;
        dst.depth = r.depth.min(MAX_RULE_DEPTH);
    }
}

/// A loaded and attached object.
pub struct Probe<'obj> {
    skel: TopdownSkel<'obj>,
    mode: Mode,
    func: String,
    // Dropping a link detaches its program.
    link: Option<Link>,
    stack_link: Option<Link>,
    companion: Option<(Companion, Link)>,
}

fn sum_percpu<const N: usize>(values: &[Vec<u8>]) -> [u64; N] {
    let mut out = [0u64; N];
    for cpu in values {
        for (i, chunk) in cpu.chunks_exact(8).take(N).enumerate() {
            out[i] = out[i].wrapping_add(u64::from_ne_bytes(chunk.try_into().unwrap()));
        }
    }
    out
}

const ZERO_KEY: [u8; 4] = 0u32.to_ne_bytes();
const STATS_FIELDS: usize = size_of::<types::td_stats>() / 8;

impl<'obj> Probe<'obj> {
    pub fn new(skel: TopdownSkel<'obj>, mode: Mode, func: &str, link: Option<Link>) -> Self {
        Probe {
            skel,
            mode,
            func: func.to_string(),
            link,
            stack_link: None,
            companion: None,
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn func(&self) -> &str {
        &self.func
    }

    /// Detaches every program; the maps stay readable.
    pub fn detach(&mut self) {
        self.stack_link = None;
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
    pub fn attach_companion(&mut self, kind: Companion) -> Result<()> {
        let link = self
            .companion_prog(kind)
            .attach_trace()
            .map_err(|e| Error::bpf("attaching the companion program", e))?;
        self.companion = Some((kind, link));
        Ok(())
    }

    /// Run statistics of the companion program, if one is attached.
    pub fn companion_stats(&self) -> Option<(Companion, ProgStats)> {
        let (kind, _) = self.companion.as_ref()?;
        Some((*kind, prog_stats(self.companion_prog(*kind).as_fd())))
    }

    /// Per-slot counts summed over all possible CPUs.
    pub fn counts(&self) -> Result<Vec<u64>> {
        let v = self
            .skel
            .maps
            .counts
            .lookup_percpu(&ZERO_KEY, MapFlags::ANY)
            .map_err(|e| Error::bpf("reading the counters", e))?
            .unwrap_or_default();
        Ok(sum_percpu::<NR_SLOTS>(&v).to_vec())
    }

    /// Return addresses not yet in the site table, with their counts.
    pub fn pending(&self) -> Result<Vec<(u64, u64)>> {
        let map = &self.skel.maps.pending;
        let mut out = Vec::new();
        for key in map.keys() {
            let Ok(k) = <[u8; 8]>::try_from(key.as_slice()) else {
                continue;
            };
            // A key can vanish between listing and lookup only if deleted;
            // nothing deletes, so None is not expected.
            if let Some(v) = map
                .lookup_percpu(&k, MapFlags::ANY)
                .map_err(|e| Error::bpf("reading the pending sites", e))?
            {
                out.push((u64::from_ne_bytes(k), sum_percpu::<1>(&v)[0]));
            }
        }
        Ok(out)
    }

    /// Tells the BPF side which slot a return address counts in. Returns
    /// false when the site table is full (its events then stay pending).
    pub fn add_site(&self, ret: u64, slot: u32) -> Result<bool> {
        match self
            .skel
            .maps
            .sites
            .update(&ret.to_ne_bytes(), &slot.to_ne_bytes(), MapFlags::ANY)
        {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == libbpf_rs::ErrorKind::TooBig => Ok(false),
            Err(e) => Err(Error::bpf("updating the site table", e)),
        }
    }

    pub fn stats(&self) -> Result<Stats> {
        let v = self
            .skel
            .maps
            .stats
            .lookup_percpu(&ZERO_KEY, MapFlags::ANY)
            .map_err(|e| Error::bpf("reading the statistics", e))?
            .unwrap_or_default();
        let s = sum_percpu::<STATS_FIELDS>(&v);
        Ok(Stats {
            verify_checked: s[0],
            verify_mismatch: s[1],
            verify_unwind_failed: s[2],
            deep_unwind_failed: s[3],
            stack_matched: s[4],
            stack_sampled_out: s[5],
            stack_rate_capped: s[6],
            stack_ringbuf_full: s[7],
            stack_emitted: s[8],
            own_calls: s[9],
        })
    }

    /// Run statistics of the counting program (run_cnt and run_time_ns
    /// need kernel.bpf_stats_enabled=1).
    pub fn prog_stats(&self) -> ProgStats {
        let prog = match self.mode {
            Mode::Fentry => &self.skel.progs.td_fentry,
            Mode::Kprobe => &self.skel.progs.td_kprobe,
        };
        prog_stats(prog.as_fd())
    }

    /// A handle on the sample ring buffer, independent of `self`'s borrows.
    pub fn samples_map(&self) -> Result<MapHandle> {
        MapHandle::try_from(&self.skel.maps.samples)
            .map_err(|e| Error::bpf("opening the sample ring buffer", e))
    }

    /// Captures stacks of `slot` from now on; `callers` are the address
    /// ranges of the reason's caller functions, for calls from sites not
    /// resolved yet. Attaches the sampling program on first use, so it
    /// costs nothing until then.
    pub fn stacks_on(&mut self, slot: u32, callers: &[(u64, u64)]) -> Result<()> {
        if callers.len() > MAX_STACK_RANGES {
            return Err(Error::msg(format!(
                "the stack reason has {} caller ranges, more than the {MAX_STACK_RANGES} supported",
                callers.len()
            )));
        }
        self.set_stack_reason(TD_SLOT_NONE);
        if let Some(bss) = self.skel.maps.bss_data.as_deref_mut() {
            for (dst, &(lo, hi)) in bss.stack_ranges.iter_mut().zip(callers) {
                dst.lo = lo;
                dst.hi = hi;
            }
            // SAFETY: the section is mmap'ed and shared with the BPF side;
            // the count is published after the ranges it covers.
            unsafe { std::ptr::write_volatile(&mut bss.nr_stack_ranges, callers.len() as u32) };
        }
        self.set_stack_reason(slot);
        if self.stack_link.is_none() {
            let progs = &self.skel.progs;
            let link = match self.mode {
                Mode::Fentry => progs.td_fentry_stack.attach_trace(),
                Mode::Kprobe => progs.td_kprobe_stack.attach_kprobe(false, &self.func),
            }
            .map_err(|e| Error::bpf("attaching the stack program", e))?;
            self.stack_link = Some(link);
        }
        Ok(())
    }

    /// Runs the counting path `repeat` times on return address `ret`
    /// through BPF_PROG_TEST_RUN (object opened with `open_selftest`), so
    /// the kernel side can be checked on kernels that refuse fentry.
    pub fn test_count(&self, ret: u64, repeat: u32) -> Result<()> {
        self.test_count_stack(&[ret], repeat)
    }

    /// Like `test_count`, with `frames[0]` the caller's return address and
    /// the rest the frames above it, for deeper-frame rules.
    pub fn test_count_stack(&self, frames: &[u64], repeat: u32) -> Result<()> {
        let mut args = [0u64; SELFTEST_ARGS];
        for (a, f) in args.iter_mut().zip(frames) {
            *a = *f;
        }
        // raw_tp test runs take no repeat count: run it that many times.
        for _ in 0..repeat {
            let mut ctx: Vec<u8> = args.iter().flat_map(|a| a.to_ne_bytes()).collect();
            let input = libbpf_rs::ProgramInput {
                context_in: Some(&mut ctx),
                ..Default::default()
            };
            self.skel
                .progs
                .td_selftest
                .test_run(input)
                .map_err(|e| Error::bpf("running the self-test program", e))?;
        }
        Ok(())
    }

    fn set_stack_reason(&mut self, slot: u32) {
        if let Some(data) = self.skel.maps.data_data.as_deref_mut() {
            // The section is mmap'ed: the BPF side sees the store at once.
            unsafe { std::ptr::write_volatile(&mut data.stack_reason, slot) };
        }
    }
}

fn prog_stats(fd: std::os::fd::BorrowedFd<'_>) -> ProgStats {
    use std::os::fd::AsRawFd;
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = size_of::<libbpf_sys::bpf_prog_info>() as u32;
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
