//! The Rust side of `topdown.h`: its constants (read from the skeleton's
//! BTF-derived types, so there is one definition), the settings written
//! into `td_config` before load, and the encodings of the site cache and
//! the pid filter. A leaf: `deep`, `percpu` and `sample` build on it.
//! Nothing here touches the kernel.

use std::mem::size_of;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use crate::bpf::skel::types;
use crate::tracepoint::Syscall;

/// Reason slots in the per-CPU counter array.
pub(crate) const NR_SLOTS: usize = types::td_abi::TD_NR_SLOTS.0 as usize;
/// Calls whose caller's return address was not found.
pub(crate) const SLOT_NOT_FOUND: u32 = types::td_abi::TD_SLOT_NOT_FOUND.0;
/// Calls counted while the site tables were full.
pub(crate) const SLOT_SITES_FULL: u32 = types::td_abi::TD_SLOT_SITES_FULL.0;
/// Call sites each site table holds (and return addresses the pending one).
pub(crate) const MAX_SITES: usize = types::td_abi::TD_MAX_SITES.0 as usize;
/// Entries of a CPU's fresh table (td_fresh).
#[cfg(test)]
pub(crate) const FRESH: usize = types::td_abi::TD_FRESH.0 as usize;
/// The first slot of a named reason.
pub(crate) const FIRST_REASON: u32 = types::td_abi::TD_FIRST_REASON.0;
/// No slot: stacks are off, or a site is not resolved yet.
pub(crate) const SLOT_NONE: u32 = types::td_slot_none::TD_SLOT_NONE.0;
pub(crate) const MAX_DEEP_CALLERS: usize = types::td_abi::TD_MAX_CALLERS.0 as usize;
pub(crate) const MAX_DEEP_RULES: usize = types::td_abi::TD_MAX_RULES.0 as usize;
pub(crate) const MAX_RULE_DEPTH: u32 = types::td_abi::TD_MAX_RULE_DEPTH.0;
pub(crate) const MAX_STACK_FRAMES: u32 = types::td_abi::TD_MAX_FRAMES.0;
pub(crate) const MAX_STACK_RANGES: usize = types::td_abi::TD_MAX_STACK_RANGES.0 as usize;
/// The most CPUs a --cpu filter can name (the BPF side's bitmap).
pub(crate) const MAX_CPUS: u32 = types::td_abi::TD_MAX_CPUS.0;
/// FUNC's entry frame lies within this many bytes of FUNC.
pub(crate) const ENTRY_WINDOW: u64 = types::td_abi::TD_ENTRY_WINDOW.0 as u64;
#[cfg(test)]
pub(crate) const SELFTEST_ARGS: usize = types::td_abi::TD_SELFTEST_ARGS.0 as usize;
pub(crate) const NR_STATS: usize = types::td_stat::TD_NR_STATS.0 as usize;
pub(crate) const SITE_SHIFT: u32 = types::td_abi::TD_SITE_SHIFT.0;
const SLOT_SHIFT: u32 = types::td_abi::TD_SLOT_SHIFT.0;
pub(crate) const SITE_CACHE: usize = types::td_abi::TD_SITE_CACHE.0 as usize;
pub(crate) const NR_STACK_STATS: usize = types::td_stack_stat::TD_NR_STACK_STATS.0 as usize;
/// Pool slots (td_pool): a new site's own counter, after the reason slots.
pub(crate) const POOL: usize = types::td_abi::TD_POOL.0 as usize;
/// Reason and pool slots: the stack path's counters follow them.
pub(crate) const ALL_SLOTS: usize = types::td_abi::TD_ALL_SLOTS.0 as usize;
/// u64s in one CPU's td_counts: the slots, the stack path's counters, seen.
pub(crate) const COUNTS_WORDS: usize = ALL_SLOTS + NR_STACK_STATS + 1;

// The arrays the structs are made of follow the constants above.
const _: () = assert!(size_of::<types::td_counts>() == COUNTS_WORDS * 8);
const _: () = assert!(size_of::<types::td_budget>() == 16);
const _: () = assert!(size_of::<types::td_stats>() == NR_STATS * 8);
const _: () = assert!(NR_SLOTS.is_power_of_two());
// An empty site cache entry (0) reads as return address 0, not found.
const _: () = assert!(SLOT_NOT_FOUND == 0);
// Every slot's byte offset fits in the entry's bits from SITE_SHIFT up.
const _: () = assert!(SLOT_SHIFT == SITE_SHIFT + 3 && ALL_SLOTS <= 1 << (64 - SLOT_SHIFT));
const _: () = assert!(ALL_SLOTS == NR_SLOTS + POOL);
const _: () = assert!(size_of::<types::td_pool>() == (POOL + 1) * 8);
const _: () = assert!(std::mem::offset_of!(types::td_control, nr_captured) == 0);

/// The site cache entry for `ret` in `slot`, and its index; None where the
/// cache cannot hold it (an address with a bit clear above the bits the
/// BPF side compares, or a slot too large), which the sites hash then
/// serves alone. As site_index() and cached_reason() in caller.bpf.h.
pub(crate) fn site_cache_entry(ret: u64, slot: u32) -> Option<(usize, u64)> {
    let high = !0u64 << SITE_SHIFT;
    // x86-64 compares the low 32 bits only: all its kernel text is in the
    // top 2 GiB.
    let named = if cfg!(target_arch = "x86_64") {
        !0u64 << 32
    } else {
        high
    };
    if ret & named != named || u64::from(slot) >= 1 << (64 - SLOT_SHIFT) {
        return None;
    }
    let index = (ret >> 3) as usize & (SITE_CACHE - 1);
    Some((index, (u64::from(slot) << SLOT_SHIFT) | (ret & !high)))
}

/// The return address and slot a site cache entry names (the inverse of
/// site_cache_entry).
pub(crate) fn site_cache_site(entry: u64) -> (u64, u32) {
    let high = !0u64 << SITE_SHIFT;
    ((entry & !high) | high, (entry >> SLOT_SHIFT) as u32)
}

/// The index of reason `slot` in the per-reason stack maps (rstacks,
/// budget, the background buckets): NR_SLOTS for SLOT_NONE, a uprobe's
/// untagged calls; as the BPF side's rstack_index.
pub(crate) fn stack_index(slot: u32) -> u32 {
    if slot == SLOT_NONE {
        NR_SLOTS as u32
    } else {
        slot & (NR_SLOTS as u32 - 1)
    }
}

/// The background sampler's token bucket for --background-stacks `n`, as
/// the BPF side keeps it (GCRA): one token every `4 s / n` (a quarter of
/// the bucket a second), `n` in a row. (0, 0): off.
pub(crate) fn background_bucket(n: u32) -> (u64, u64) {
    if n == 0 {
        return (0, 0);
    }
    let every = 4_000_000_000 / u64::from(n);
    (every, every * (u64::from(n) - 1))
}

/// Everything the BPF programs are given before load.
#[derive(Debug, Clone, Default)]
pub(crate) struct LoadConfig {
    pub(crate) func_addr: u64,
    pub(crate) verify_caller: bool,
    pub(crate) user_stacks: bool,
    pub(crate) stack_frames: u32,
    pub(crate) sample_every: u32,
    /// --background-stacks: stacks a reason may take on a CPU in a row
    /// before any capture (0: none; only where `stacks`).
    pub(crate) background: u32,
    /// The deeper-frame tables where they are known before load
    /// (`Deep::tables`, written into .bss, ready); None: filled in right
    /// after attaching (`Maps::set_deep`).
    pub(crate) deep: Option<types::td_deep>,
    /// The deepest frame a rule of the profile looks at, where the rules
    /// are filled in after attaching (0: no deeper-frame rules).
    pub(crate) deep_depth: u32,
    /// Stacks may be captured: compiles the capture gate in.
    pub(crate) stacks: bool,
    /// Which calls count (the pids and the cgroup also go into maps, after
    /// load: `probe::set_filter`).
    pub(crate) filter: Filters,
    /// A tracepoint's glue: the address ranges of the functions between
    /// the code that fired it and the program (at most MAX_GLUE).
    pub(crate) glue: Vec<(u64, u64)>,
    /// New sites' calls are counted in the per-CPU fresh table first (a
    /// pinned instance's; see td_fresh).
    pub(crate) fresh: bool,
    /// New sites never take pool slots (td_pool), so that a test reaches
    /// the pending path with its first call.
    pub(crate) no_pool: bool,
    /// The programs may name new sites themselves (td_kres, where the
    /// kernel has bpf_loop), with at most this many reasons; None: user
    /// space names them.
    pub(crate) resolve: Option<u32>,
    /// What the programs name new sites with, where it is known before
    /// load (a pin's): put in before attach, so that they name every site
    /// from its first call. Else user space puts it in after attaching.
    pub(crate) names_at_load: Option<NameTables>,
    /// --drill: a captured reason's calls are counted by path too, this
    /// many frames from the caller up (0: off; at most DRILL_FRAMES).
    pub(crate) drill_levels: u32,
}

/// Frames a drilled path holds: the caller's return address and those above.
pub(crate) const DRILL_FRAMES: u32 = types::td_abi::TD_DRILL_FRAMES.0;
/// Distinct paths --drill counts, over all reasons.
#[cfg(test)]
pub(crate) const MAX_PATHS: u32 = types::td_abi::TD_MAX_PATHS.0;

/// The reasons known so far, as the programs name new sites with them.
#[derive(Debug, Clone, Default)]
pub(crate) struct NameTables {
    /// FUNC's entry: a direct call elsewhere is a tail call.
    pub(crate) func: u64,
    /// Tail calls are told apart (user space can read the kernel's text).
    pub(crate) tail: bool,
    /// A profile's (caller function, slot) routes.
    pub(crate) routes: Vec<(String, u32)>,
    /// (slot, name) of every reason named so far.
    pub(crate) names: Vec<(u32, String)>,
}

/// Address ranges of a tracepoint's glue the programs take.
pub(crate) const MAX_GLUE: usize = types::td_abi::TD_MAX_GLUE.0 as usize;

/// Which calls count, as the BPF side takes them: plain values, checked
/// against the machine by `filter::Filter`, which makes them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filters {
    /// The thread groups counted; empty: every process.
    pub(crate) tgids: Vec<u32>,
    /// The cgroup (v2) directory whose tasks count, open; None: every cgroup.
    pub(crate) cgroup: Option<Arc<OwnedFd>>,
    /// The CPUs counted; None: every CPU.
    pub(crate) cpus: Option<Vec<u32>>,
    /// One system call's calls of raw_syscalls's sys_enter or sys_exit
    /// (`t:syscalls:...`); None: every call of the traced function.
    pub(crate) syscall: Option<Syscall>,
}

impl Filters {
    pub(crate) fn is_empty(&self) -> bool {
        self.tgids.is_empty()
            && self.cgroup.is_none()
            && self.cpus.is_none()
            && self.syscall.is_none()
    }
}

/// The deepest frame a rule of `tables` looks at; at least 1 where there
/// is a deeper-frame caller (0 turns the BPF side's tables off).
pub(crate) fn tables_depth(tables: &types::td_deep) -> u32 {
    if tables.nr_callers == 0 {
        return 0;
    }
    let deepest = tables.rules.iter().map(|r| r.depth).max().unwrap_or(0);
    deepest.clamp(1, MAX_RULE_DEPTH)
}

impl LoadConfig {
    /// Whether these settings need the counting program that reads every
    /// switch (td_fentry_any, ...: TD_PATH_ANY): a filter, or
    /// --verify-caller. The common one reads none on every call.
    pub(crate) fn any_path(&self) -> bool {
        self.verify_caller || !self.filter.is_empty()
    }

    /// Writes the settings into the object's `td_config`, clamped to what
    /// the tables hold (profile resolution has already refused more).
    pub(crate) fn write(&self, dst: &mut types::td_config) {
        dst.func_addr = self.func_addr;
        dst.verify_caller = self.verify_caller.into();
        // User frames come by build ID (BPF_F_USER_BUILD_ID, 4.18 on).
        dst.user_stacks = self.user_stacks.into();
        dst.stack_bytes = self.stack_frames.clamp(1, MAX_STACK_FRAMES) * 8;
        dst.sample_every = self.sample_every.max(1);
        dst.stacks = self.stacks.into();
        dst.fresh = self.fresh.into();
        dst.no_pool = self.no_pool.into();
        dst.resolve = self.resolve.is_some().into();
        // A reason takes a slot below max_slot; OTHER then max_slot.
        dst.max_slot = FIRST_REASON
            + self
                .resolve
                .unwrap_or(0)
                .min(NR_SLOTS as u32 - FIRST_REASON - 1);
        (dst.bg_every_ns, dst.bg_burst_ns) = match self.stacks {
            true => background_bucket(self.background),
            false => (0, 0),
        };
        // Paths are counted only where stacks are captured (their trigger).
        dst.drill_levels = match self.stacks {
            true => self.drill_levels.min(DRILL_FRAMES),
            false => 0,
        };
        let known = self.deep.as_ref().map_or(0, tables_depth);
        dst.deep_depth = self.deep_depth.min(MAX_RULE_DEPTH).max(known);
        let f = &self.filter;
        dst.filter_pids = (!f.tgids.is_empty()).into();
        dst.filter_cgroup = f.cgroup.is_some().into();
        dst.filter_cpus = f.cpus.is_some().into();
        (dst.filter_syscall, dst.syscall_nr) = match f.syscall {
            None => (0, 0),
            Some(s) => {
                let on = match s.exit {
                    false => types::td_syscall_filter::TD_SYSCALL_ENTER,
                    true => types::td_syscall_filter::TD_SYSCALL_EXIT,
                };
                (on.0 as u8, s.nr)
            }
        };
        dst.filtered = (dst.filter_pids | dst.filter_cgroup | dst.filter_cpus | dst.filter_syscall
            != 0)
            .into();
        dst.cpus = [0; MAX_CPUS as usize / 64];
        for &c in f.cpus.iter().flatten().filter(|&&c| c < MAX_CPUS) {
            dst.cpus[c as usize / 64] |= 1 << (c % 64);
        }
        let glue = &self.glue[..self.glue.len().min(MAX_GLUE)];
        dst.nr_glue = glue.len() as u32;
        for (i, &(lo, hi)) in glue.iter().enumerate() {
            dst.glue_lo[i] = lo;
            dst.glue_hi[i] = hi;
        }
    }
}

/// Processes a --pid filter can name.
pub(crate) const MAX_PIDS: usize = types::td_abi::TD_MAX_PIDS.0 as usize;
/// What an exited process of the pid filter becomes (no tgid is this).
pub(crate) const NO_PID: u32 = types::td_no_pid::TD_NO_PID.0;
/// An early key's first frame where the unwind found no caller.
pub(crate) const NO_FRAMES: u64 = types::td_abi::TD_NO_FRAMES.0 as u64;

const _: () = assert!(size_of::<types::td_pids>() == 4 + MAX_PIDS * 4);

/// The pid filter's map value (td_pids) for `tgids` (at most MAX_PIDS).
pub(crate) fn pid_list(tgids: &[u32]) -> Vec<u8> {
    let n = tgids.len().min(MAX_PIDS);
    let mut v = vec![0u8; size_of::<types::td_pids>()];
    v[..4].copy_from_slice(&(n as u32).to_ne_bytes());
    for (i, t) in tgids[..n].iter().enumerate() {
        v[4 + 4 * i..8 + 4 * i].copy_from_slice(&t.to_ne_bytes());
    }
    v
}

/// `list` (a td_pids value) with `tgid` replaced by NO_PID, in place: the
/// other entries keep their places. None if it is not listed.
pub(crate) fn pid_dropped(list: &[u8], tgid: u32) -> Option<Vec<u8>> {
    let mut v = list.to_vec();
    let n = (u32::from_ne_bytes(v.get(..4)?.try_into().ok()?) as usize).min(MAX_PIDS);
    let i = (0..n).find(|i| v[4 + 4 * i..8 + 4 * i] == tgid.to_ne_bytes())?;
    v[4 + 4 * i..8 + 4 * i].copy_from_slice(&NO_PID.to_ne_bytes());
    Some(v)
}

/// Names of the per-CPU counters besides the reason slots, as `topdown.h`
/// numbers them (summed in `percpu::Stats`).
pub(crate) use types::td_stack_stat as StackStat;
pub(crate) use types::td_stat as Stat;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::deep::Deep;

    #[test]
    fn constants_come_from_the_header() {
        assert_eq!(NR_SLOTS, 256);
        assert_eq!((SLOT_NOT_FOUND, SLOT_SITES_FULL, FIRST_REASON), (0, 1, 2));
        assert_eq!(SLOT_NONE, u32::MAX);
        assert_eq!(ENTRY_WINDOW, 16);
    }

    #[test]
    fn site_cache_entries_hold_kernel_text_addresses_only() {
        let (i, e) = site_cache_entry(0xffffffff81234567, 5).unwrap();
        assert_eq!(i, (0x1234567 >> 3) & (SITE_CACHE - 1));
        assert_eq!(e, (5 << 55) | 0x000f_ffff_8123_4567);
        // What the BPF side compares: the low 52 bits, or 32 on x86-64.
        assert_eq!((e ^ 0xffffffff81234567) << 12, 0);
        assert_eq!(e as u32, 0x81234567);
        // What the common path adds to the counters' address: slot 5's.
        assert_eq!(e >> SITE_SHIFT, 5 * 8);
        assert_eq!(site_cache_entry(0x00007fff81234567, 5), None);
        assert_eq!(
            site_cache_entry(0xffffffff81234567, 255).unwrap().1 >> SITE_SHIFT,
            255 * 8
        );
        // A pool slot's too: after the reason slots.
        assert_eq!(
            site_cache_entry(0xffffffff81234567, (ALL_SLOTS - 1) as u32)
                .unwrap()
                .1
                >> SITE_SHIFT,
            (ALL_SLOTS as u64 - 1) * 8
        );
        assert_eq!(site_cache_entry(0xffffffff81234567, 1 << 9), None);
        let arm64 = site_cache_entry(0xffff800081234567, 5);
        assert_eq!(arm64.is_none(), cfg!(target_arch = "x86_64"));
        // Neighbouring call sites take different entries.
        let a = site_cache_entry(0xffffffff81000010, 2).unwrap().0;
        let b = site_cache_entry(0xffffffff81000018, 2).unwrap().0;
        assert_ne!(a, b);
    }

    #[test]
    fn a_cache_entry_names_its_site() {
        let ret = if cfg!(target_arch = "x86_64") {
            0xffffffff81234567
        } else {
            0xffff800080234567
        };
        let (_, e) = site_cache_entry(ret, 7).unwrap();
        assert_eq!(site_cache_site(e), (ret, 7));
        // Flagged for the background sampler: the address one off.
        assert_eq!(site_cache_site(e ^ 1), (ret ^ 1, 7));
    }

    #[test]
    fn the_background_bucket_is_a_quarter_refilled_a_second() {
        assert_eq!(background_bucket(0), (0, 0));
        // 16: a token every 250 ms, 16 in a row (the 16th 3.75 s ahead).
        assert_eq!(background_bucket(16), (250_000_000, 3_750_000_000));
        assert_eq!(background_bucket(1), (4_000_000_000, 0));
        let mut dst = types::td_config::default();
        let on = |stacks| LoadConfig {
            background: 16,
            stacks,
            ..LoadConfig::default()
        };
        on(false).write(&mut dst);
        assert_eq!((dst.bg_every_ns, dst.bg_burst_ns), (0, 0));
        on(true).write(&mut dst);
        assert_eq!(dst.bg_every_ns, 250_000_000);
    }

    #[test]
    fn config_is_clamped_into_the_tables() {
        let mut dst = types::td_config::default();
        let deep = Deep::oversized();
        LoadConfig {
            stack_frames: 1000,
            sample_every: 0,
            deep: Some(deep.tables()),
            ..LoadConfig::default()
        }
        .write(&mut dst);
        assert_eq!(dst.stack_bytes, MAX_STACK_FRAMES * 8);
        assert_eq!(dst.sample_every, 1);
        assert_eq!(dst.deep_depth, MAX_RULE_DEPTH);
        assert_eq!(
            (
                dst.filter_pids,
                dst.filter_cgroup,
                dst.filter_cpus,
                dst.filtered
            ),
            (0, 0, 0, 0)
        );
    }

    #[test]
    fn pid_lists_are_counted_and_dropped_in_place() {
        let v = pid_list(&[7, 9, 11]);
        assert_eq!(v.len(), 4 + 4 * MAX_PIDS);
        let word = |v: &[u8], i: usize| u32::from_ne_bytes(v[4 * i..4 * i + 4].try_into().unwrap());
        assert_eq!(
            (word(&v, 0), word(&v, 1), word(&v, 2), word(&v, 3)),
            (3, 7, 9, 11)
        );
        let d = pid_dropped(&v, 9).unwrap();
        assert_eq!(
            (word(&d, 0), word(&d, 1), word(&d, 2), word(&d, 3)),
            (3, 7, NO_PID, 11)
        );
        assert_eq!(pid_dropped(&d, 9), None);
        assert_eq!(pid_dropped(&v, 12), None);
    }

    #[test]
    fn the_common_settings_get_a_counting_program_of_their_own() {
        assert!(!LoadConfig::default().any_path());
        let stacks = LoadConfig {
            stacks: true,
            ..LoadConfig::default()
        };
        // The stack gate is off the common path (see td_watch).
        assert!(!stacks.any_path());
        let verify = LoadConfig {
            verify_caller: true,
            ..stacks.clone()
        };
        assert!(verify.any_path());
        let filtered = LoadConfig {
            filter: Filters {
                cpus: Some(vec![0]),
                ..Filters::default()
            },
            ..LoadConfig::default()
        };
        assert!(filtered.any_path());
    }

    #[test]
    fn cpu_filters_become_a_bitmap() {
        let mut dst = types::td_config::default();
        LoadConfig {
            filter: Filters {
                cpus: Some(vec![0, 3, 64, MAX_CPUS - 1]),
                ..Filters::default()
            },
            ..LoadConfig::default()
        }
        .write(&mut dst);
        assert_eq!((dst.filter_cpus, dst.filter_pids, dst.filtered), (1, 0, 1));
        assert_eq!(dst.cpus[0], 0b1001);
        assert_eq!(dst.cpus[1], 1);
        assert_eq!(dst.cpus[MAX_CPUS as usize / 64 - 1], 1 << 63);
        assert_eq!(dst.cpus.iter().map(|w| w.count_ones()).sum::<u32>(), 4);
    }
}
