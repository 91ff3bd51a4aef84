//! The Rust side of `topdown.h`: its constants (read from the skeleton's
//! BTF-derived types, so there is one definition), the settings written
//! into `td_config` before load, and plain decodings of what the maps
//! hold. Nothing here touches the kernel.

use std::mem::size_of;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use crate::bpf::skel::types;

/// Reason slots in the per-CPU counter array.
pub(crate) const NR_SLOTS: usize = types::td_abi::TD_NR_SLOTS.0 as usize;
/// Calls whose caller's return address was not found.
pub(crate) const SLOT_NOT_FOUND: u32 = types::td_abi::TD_SLOT_NOT_FOUND.0;
/// Calls counted while the site tables were full.
pub(crate) const SLOT_SITES_FULL: u32 = types::td_abi::TD_SLOT_SITES_FULL.0;
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
const NR_STATS: usize = types::td_stat::TD_NR_STATS.0 as usize;
const SITE_SHIFT: u32 = types::td_abi::TD_SITE_SHIFT.0;
const SLOT_SHIFT: u32 = types::td_abi::TD_SLOT_SHIFT.0;
const SITE_CACHE: usize = types::td_abi::TD_SITE_CACHE.0 as usize;
const NR_STACK_STATS: usize = types::td_stack_stat::TD_NR_STACK_STATS.0 as usize;
/// u64s in one CPU's td_counts: the slots, the stack path's counters, seen.
const COUNTS_WORDS: usize = NR_SLOTS + NR_STACK_STATS + 1;

// The arrays the structs are made of follow the constants above.
const _: () = assert!(size_of::<types::td_counts>() == COUNTS_WORDS * 8);
const _: () = assert!(size_of::<types::td_budget>() == 8);
const _: () = assert!(size_of::<types::td_stats>() == NR_STATS * 8);
const _: () = assert!(NR_SLOTS.is_power_of_two());
// An empty site cache entry (0) reads as return address 0, not found.
const _: () = assert!(SLOT_NOT_FOUND == 0);
// Every slot's byte offset fits in the entry's bits from SITE_SHIFT up.
const _: () = assert!(SLOT_SHIFT == SITE_SHIFT + 3 && NR_SLOTS <= 1 << (64 - SLOT_SHIFT));
const _: () = assert!(std::mem::offset_of!(types::td_control, reason) == 0);

/// The site cache entry for `ret` in `slot`, and its index; None where the
/// cache cannot hold it (an address with a bit clear above the bits the
/// BPF side compares, or a slot too large), which the sites hash then
/// serves alone. As site_index() and cached_reason() in topdown.bpf.c.
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

/// A caller function range whose reason depends on deeper frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeepCaller {
    pub(crate) lo: u64,
    pub(crate) hi: u64,
    pub(crate) rule_first: u32,
    pub(crate) rule_count: u32,
    /// Slot when no rule matches.
    pub(crate) reason: u32,
}

/// "A frame in [lo, hi) within `depth` frames above the caller means `reason`."
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeepRule {
    pub(crate) lo: u64,
    pub(crate) hi: u64,
    pub(crate) reason: u32,
    pub(crate) depth: u32,
}

/// Whether return address `ret` lies in the function at [lo, hi): -1, as a
/// call can be a function's last instruction.
fn returns_into(lo: u64, hi: u64, ret: u64) -> bool {
    (lo..hi).contains(&ret.wrapping_sub(1))
}

/// The deeper-frame rules: caller ranges, each with its slice of `rules`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Deep {
    pub(crate) callers: Vec<DeepCaller>,
    pub(crate) rules: Vec<DeepRule>,
}

impl Deep {
    /// The deepest frame a rule looks at; at least 1 where there is a
    /// deeper-frame caller (0 turns the BPF side's tables off).
    pub(crate) fn depth(&self) -> u32 {
        if self.callers.is_empty() {
            return 0;
        }
        let deepest = self.rules.iter().map(|r| r.depth).max().unwrap_or(0);
        deepest.clamp(1, MAX_RULE_DEPTH)
    }

    /// Writes the tables into td_deep, clamped to what it holds (profile
    /// resolution has already refused more); `ready` is left alone.
    pub(crate) fn write(&self, dst: &mut types::td_deep) {
        dst.nr_callers = self.callers.len().min(MAX_DEEP_CALLERS) as u32;
        for (d, c) in dst.callers.iter_mut().zip(&self.callers) {
            d.lo = c.lo;
            d.hi = c.hi;
            d.rule_first = c.rule_first;
            d.rule_count = c.rule_count;
            d.reason = c.reason;
        }
        for (d, r) in dst.rules.iter_mut().zip(&self.rules) {
            d.lo = r.lo;
            d.hi = r.hi;
            d.reason = r.reason;
            d.depth = r.depth.min(MAX_RULE_DEPTH);
        }
    }

    /// The slot of a call from `ret` with `frames` above its caller
    /// (nearest first), as deep_reason() in topdown.bpf.c decides it: the
    /// first rule with a frame in its range within its depth, else the
    /// caller's own, also where the first frame is NO_FRAMES (no unwind);
    /// None where `ret` is in no deeper-frame caller. For the calls counted
    /// before the tables were ready.
    pub(crate) fn slot(&self, ret: u64, frames: &[u64]) -> Option<u32> {
        let c = self.caller(ret)?;
        // The unwind found no caller: deep_reason() falls back to the caller's own.
        if frames.first() == Some(&NO_FRAMES) {
            return Some(c.reason);
        }
        let first = c.rule_first as usize;
        let rules = self.rules.iter().take(MAX_DEEP_RULES);
        for r in rules.skip(first).take(c.rule_count as usize) {
            let depth = r.depth.min(MAX_RULE_DEPTH) as usize;
            // A zero frame ends the stack.
            let mut above = frames.iter().take(depth).take_while(|&&ip| ip != 0);
            if above.any(|&ip| returns_into(r.lo, r.hi, ip)) {
                return Some(r.reason);
            }
        }
        Some(c.reason)
    }

    /// The deeper-frame caller `ret` returns into, as deep_caller() in
    /// topdown.bpf.c finds it.
    fn caller(&self, ret: u64) -> Option<&DeepCaller> {
        self.callers
            .iter()
            .take(MAX_DEEP_CALLERS)
            .find(|c| returns_into(c.lo, c.hi, ret))
    }

    /// The calls in the early table from a deeper-frame caller whose
    /// unwind found no caller. `slot` gives them the caller's own reason,
    /// as deep_reason() does after the tables are ready, where it counts
    /// them as deep unwind failures: so are these.
    pub(crate) fn unwind_failures(&self, early: &Pending) -> u64 {
        early
            .entries()
            .filter(|(key, _)| key.get(1) == Some(&NO_FRAMES) && self.caller(key[0]).is_some())
            .map(|(_, n)| n)
            .sum()
    }
}

/// Everything the BPF programs are given before load.
#[derive(Debug, Clone, Default)]
pub(crate) struct Config {
    pub(crate) func_addr: u64,
    pub(crate) verify_caller: bool,
    pub(crate) user_stacks: bool,
    pub(crate) stack_frames: u32,
    pub(crate) sample_every: u32,
    /// The deeper-frame rules where they are known before load (written
    /// into .bss, ready); None: filled in after attaching (`Maps::set_deep`).
    pub(crate) deep: Option<Deep>,
    /// The deepest frame a rule of the profile looks at, where the rules
    /// are filled in after attaching (0: no deeper-frame rules).
    pub(crate) deep_depth: u32,
    /// Stacks may be captured: compiles the capture gate in.
    pub(crate) stacks: bool,
    /// Which calls count (the pids and the cgroup also go into maps, after
    /// load: `probe::set_filter`).
    pub(crate) filter: Filters,
}

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
}

impl Filters {
    pub(crate) fn is_empty(&self) -> bool {
        self.tgids.is_empty() && self.cgroup.is_none() && self.cpus.is_none()
    }
}

impl Config {
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
        dst.user_stacks = self.user_stacks.into();
        dst.stack_bytes = self.stack_frames.clamp(1, MAX_STACK_FRAMES) * 8;
        dst.sample_every = self.sample_every.max(1);
        dst.stacks = self.stacks.into();
        let known = self.deep.as_ref().map_or(0, Deep::depth);
        dst.deep_depth = self.deep_depth.min(MAX_RULE_DEPTH).max(known);
        let f = &self.filter;
        dst.filter_pids = (!f.tgids.is_empty()).into();
        dst.filter_cgroup = f.cgroup.is_some().into();
        dst.filter_cpus = f.cpus.is_some().into();
        dst.filtered = (dst.filter_pids | dst.filter_cgroup | dst.filter_cpus != 0).into();
        dst.cpus = [0; MAX_CPUS as usize / 64];
        for &c in f.cpus.iter().flatten().filter(|&&c| c < MAX_CPUS) {
            dst.cpus[c as usize / 64] |= 1 << (c % 64);
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

/// The per-CPU counters kept besides the reason slots, summed over CPUs:
/// the rare events of the `stats` map and the stack path's counters of
/// the `counts` map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stats {
    rare: [u64; NR_STATS],
    stack: [u64; NR_STACK_STATS],
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            rare: [0; NR_STATS],
            stack: [0; NR_STACK_STATS],
        }
    }
}

/// Names of the counters in `Stats`, as `topdown.h` numbers them.
pub(crate) use types::td_stack_stat as StackStat;
pub(crate) use types::td_stat as Stat;

impl Stats {
    pub(crate) fn get(&self, which: Stat) -> u64 {
        self.rare[which.0 as usize]
    }

    pub(crate) fn stack(&self, which: StackStat) -> u64 {
        self.stack[which.0 as usize]
    }

    /// Adds `n` to counter `which`: what user space counts for the kernel side.
    pub(crate) fn add(&mut self, which: Stat, n: u64) {
        let c = &mut self.rare[which.0 as usize];
        *c = c.wrapping_add(n);
    }

    /// What was counted since `base` was read.
    pub(crate) fn since(&self, base: &Stats) -> Stats {
        let mut out = *self;
        for (o, b) in out.rare.iter_mut().zip(&base.rare) {
            *o = o.wrapping_sub(*b);
        }
        for (o, b) in out.stack.iter_mut().zip(&base.stack) {
            *o = o.wrapping_sub(*b);
        }
        out
    }

    /// From the per-CPU values of the `stats` map and the summed ones of
    /// the `counts` map (`counts_of`; empty: none read yet).
    pub(crate) fn from_percpu(stats: &PerCpu, counts: &[u64]) -> Self {
        let mut stack = [0; NR_STACK_STATS];
        if let Some(c) = counts.get(NR_SLOTS..NR_SLOTS + NR_STACK_STATS) {
            stack.copy_from_slice(c);
        }
        Stats {
            rare: stats.sum(),
            stack,
        }
    }

    #[cfg(test)]
    pub(crate) fn with(rare: &[(Stat, u64)], stack: &[(StackStat, u64)]) -> Self {
        let mut s = Stats::default();
        for (k, v) in rare {
            s.rare[k.0 as usize] = *v;
        }
        for (k, v) in stack {
            s.stack[k.0 as usize] = *v;
        }
        s
    }
}

/// The per-CPU values of the `counts` map, summed: the reason slots, then
/// the stack path's counters.
pub(crate) fn counts_of(counts: &PerCpu) -> Vec<u64> {
    counts.sum::<COUNTS_WORDS>().to_vec()
}

/// One key's per-CPU value as the kernel copies it out: each possible
/// CPU's value in turn, rounded up to whole u64s (`stride` of them). Read
/// into one buffer kept from poll to poll: libbpf-rs's lookup_percpu
/// hands back a new Vec per CPU, which cost more than the summing.
#[derive(Debug, Default, Clone)]
pub(crate) struct PerCpu {
    pub(crate) stride: usize,
    pub(crate) words: Vec<u64>,
}

impl PerCpu {
    /// The first N u64s of the value, summed over the CPUs element by
    /// element (wrapping, as the counters do).
    pub(crate) fn sum<const N: usize>(&self) -> [u64; N] {
        let mut out = [0u64; N];
        if self.stride == 0 {
            return out;
        }
        for cpu in self.words.chunks_exact(self.stride) {
            for (o, &v) in out.iter_mut().zip(cpu) {
                *o = o.wrapping_add(v);
            }
        }
        out
    }
}

/// A per-CPU hash of u64 counts as a batch lookup copies it out: the
/// keys, each `key_words` u64s (the pending table's: a return address; the
/// early table's: td_early_key), and for each key every possible CPU's
/// count in turn. The buffers are kept from poll to poll and only grow.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    cpus: usize,
    key_words: usize,
    len: usize,
    keys: Vec<u64>,
    values: Vec<u64>,
}

/// u64s in a td_early_key: the return address and the frames above it.
pub(crate) const EARLY_KEY_WORDS: usize = 1 + MAX_RULE_DEPTH as usize;
const _: () = assert!(size_of::<types::td_early_key>() == EARLY_KEY_WORDS * 8);

/// u64s in a td_ukey: the tgid (and padding), then the return address.
pub(crate) const USER_KEY_WORDS: usize = 2;
const _: () = assert!(size_of::<types::td_ukey>() == USER_KEY_WORDS * 8);

/// The bytes of a td_ukey.
pub(crate) fn user_key(tgid: u32, ret: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..4].copy_from_slice(&tgid.to_ne_bytes());
    k[8..].copy_from_slice(&ret.to_ne_bytes());
    k
}

/// (tgid, return address) of a td_ukey read as two u64s.
pub(crate) fn user_key_of(words: &[u64]) -> Option<(u32, u64)> {
    let [w0, ret] = <[u64; USER_KEY_WORDS]>::try_from(words).ok()?;
    // the tgid is the first 4 bytes in memory
    let tgid = u32::from_ne_bytes(w0.to_ne_bytes()[..4].try_into().ok()?);
    Some((tgid, ret))
}

impl Pending {
    /// Empties the table, for values of `cpus` CPUs and keys of
    /// `key_words` u64s.
    pub(crate) fn clear(&mut self, cpus: usize, key_words: usize) {
        self.cpus = cpus;
        self.key_words = key_words.max(1);
        self.len = 0;
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Room for `n` more entries: key and value buffers, past those held,
    /// for a batch lookup to fill (then `filled`).
    pub(crate) fn spare(&mut self, n: usize) -> (&mut [u64], &mut [u64]) {
        let (kw, keys) = (self.key_words.max(1), self.len + n);
        if self.keys.len() < keys * kw {
            self.keys.resize(keys * kw, 0);
        }
        if self.values.len() < keys * self.cpus {
            self.values.resize(keys * self.cpus, 0);
        }
        (
            &mut self.keys[self.len * kw..keys * kw],
            &mut self.values[self.len * self.cpus..keys * self.cpus],
        )
    }

    /// The next `n` entries of the spare room hold data.
    pub(crate) fn filled(&mut self, n: usize) {
        self.len = (self.len + n).min(self.keys.len() / self.key_words.max(1));
    }

    /// Each key with its count summed over the CPUs (wrapping).
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&[u64], u64)> + '_ {
        let kw = self.key_words.max(1);
        let values = self.values.chunks_exact(self.cpus.max(1));
        let keys = self.keys[..self.len * kw].chunks_exact(kw);
        keys.zip(values).map(|(k, v)| {
            let n = v.iter().fold(0u64, |a, &b| a.wrapping_add(b));
            (k, n)
        })
    }

    /// Each return address with its count, for the pending table.
    pub(crate) fn sums(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.entries().map(|(k, n)| (k[0], n))
    }
}

// SAFETY: td_sample is a repr(C) struct of integers and arrays: any bytes
// of its size are a valid value.
unsafe impl plain::Plain for types::td_sample {}

/// One captured sample, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sample {
    /// CLOCK_MONOTONIC nanoseconds of the call.
    pub(crate) ts: u64,
    pub(crate) reason: u32,
    /// The thread group (process) and thread that made the call, the CPU
    /// it ran on, and the thread's command name.
    pub(crate) pid: u32,
    pub(crate) tid: u32,
    pub(crate) cpu: u32,
    pub(crate) comm: String,
    /// The caller's return address the BPF side found (0: not found).
    pub(crate) caller: u64,
    pub(crate) kstack: Vec<u64>,
    pub(crate) ustack: Vec<u64>,
}

fn frames_of(stack: &[u64], bytes: i32) -> Vec<u64> {
    let n = (bytes.max(0) as usize / 8).min(stack.len());
    stack[..n].iter().copied().take_while(|&a| a != 0).collect()
}

/// A kernel command name: up to the first NUL, bytes not UTF-8 replaced.
/// The skeleton types `char` as i8 on every architecture (c_char is u8
/// on arm64).
fn comm_of(raw: &[i8]) -> String {
    let bytes: Vec<u8> = raw
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl Sample {
    /// Decodes one ring buffer record; None if it is too short.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Sample> {
        let mut raw = types::td_sample::default();
        plain::copy_from_bytes(&mut raw, bytes).ok()?;
        Some(Sample {
            ts: raw.ts,
            reason: raw.reason,
            pid: raw.pid,
            tid: raw.tid,
            cpu: raw.cpu,
            comm: comm_of(&raw.comm),
            caller: raw.caller,
            kstack: frames_of(&raw.kstack, raw.kstack_bytes),
            ustack: frames_of(&raw.ustack, raw.ustack_bytes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_come_from_the_header() {
        assert_eq!(NR_SLOTS, 256);
        assert_eq!((SLOT_NOT_FOUND, SLOT_SITES_FULL, FIRST_REASON), (0, 1, 2));
        assert_eq!(SLOT_NONE, u32::MAX);
        assert_eq!(ENTRY_WINDOW, 16);
    }

    #[test]
    fn decode_reads_sizes_and_stops_at_zero_frames() {
        let mut raw = types::td_sample {
            pid: 42,
            tid: 43,
            cpu: 1,
            reason: 5,
            caller: 7,
            kstack_bytes: 3 * 8,
            ustack_bytes: -14,
            ..Default::default()
        };
        raw.kstack[0] = 1;
        raw.kstack[1] = 2;
        raw.kstack[2] = 0;
        for (d, c) in raw.comm.iter_mut().zip(b"thp\0junk") {
            *d = *c as _;
        }
        // SAFETY: reading a repr(C) value's bytes.
        let bytes = unsafe { plain::as_bytes(&raw) };
        let s = Sample::decode(bytes).unwrap();
        assert_eq!((s.pid, s.reason, s.caller), (42, 5, 7));
        assert_eq!((s.tid, s.cpu, s.comm.as_str()), (43, 1, "thp"));
        assert_eq!(s.kstack, vec![1, 2]);
        assert!(s.ustack.is_empty());
        assert!(Sample::decode(&bytes[..10]).is_none());
    }

    #[test]
    fn percpu_values_are_summed_per_element() {
        let v = PerCpu {
            stride: 3,
            words: vec![1, 2, 7, 10, u64::MAX, 7],
        };
        let s: [u64; 2] = v.sum();
        assert_eq!(s, [11, 1]);
        assert_eq!(PerCpu::default().sum::<2>(), [0, 0]);
    }

    #[test]
    fn counts_split_into_slots_and_stack_counters() {
        let mut cpu = vec![0u64; COUNTS_WORDS];
        cpu[2] = 5;
        cpu[NR_SLOTS + StackStat::TD_STACK_EMITTED.0 as usize] = 3;
        let both = PerCpu {
            stride: COUNTS_WORDS,
            words: [cpu.clone(), cpu].concat(),
        };
        let summed = counts_of(&both);
        assert_eq!(summed[2], 10);
        let s = Stats::from_percpu(&PerCpu::default(), &summed);
        assert_eq!(s.stack(StackStat::TD_STACK_EMITTED), 6);
        assert_eq!(s.get(Stat::TD_STAT_OWN_CALLS), 0);
    }

    #[test]
    fn failed_unwinds_before_the_rules_count_for_deeper_frame_callers_only() {
        let deep = Deep {
            callers: vec![DeepCaller {
                lo: 0xffffffff81000000,
                hi: 0xffffffff81001000,
                rule_first: 0,
                rule_count: 1,
                reason: 9,
            }],
            rules: vec![DeepRule {
                lo: 0,
                hi: u64::MAX,
                reason: 10,
                depth: 1,
            }],
        };
        let mut early = Pending::default();
        early.clear(1, EARLY_KEY_WORDS);
        for (ret, first, n) in [
            (0xffffffff81000010, NO_FRAMES, 3), // a deeper-frame caller, failed
            (0xffffffff81000010, 0xffffffff82000000, 4), // the same, with frames
            (0xffffffff81002010, NO_FRAMES, 5), // another caller, failed
        ] {
            let (k, v) = early.spare(1);
            k.fill(0);
            k[0] = ret;
            k[1] = first;
            v[0] = n;
            early.filled(1);
        }
        assert_eq!(deep.unwind_failures(&early), 3);
        // They take the caller's own reason, even from a rule that covers
        // every address.
        assert_eq!(deep.slot(0xffffffff81000010, &[NO_FRAMES]), Some(9));
        assert_eq!(
            deep.slot(0xffffffff81000010, &[0xffffffff82000000]),
            Some(10)
        );
    }

    #[test]
    fn pending_entries_are_summed_per_key_and_reused() {
        let mut p = Pending::default();
        p.clear(2, 1);
        assert_eq!(p.sums().count(), 0);
        // Two batches, the first with room to spare.
        let (k, v) = p.spare(4);
        k[..1].copy_from_slice(&[0xa]);
        v[..2].copy_from_slice(&[1, 2]);
        p.filled(1);
        let (k, v) = p.spare(1);
        k.copy_from_slice(&[0xb]);
        v.copy_from_slice(&[u64::MAX, 5]);
        p.filled(1);
        assert_eq!(p.len(), 2);
        assert_eq!(p.sums().collect::<Vec<_>>(), [(0xa, 3), (0xb, 4)]);
        // Cleared, the buffers stay: stale entries are not summed.
        p.clear(2, 1);
        let (k, v) = p.spare(1);
        k[0] = 0xc;
        v.copy_from_slice(&[0, 9]);
        p.filled(1);
        assert_eq!(p.sums().collect::<Vec<_>>(), [(0xc, 9)]);
    }

    #[test]
    fn site_cache_entries_hold_kernel_text_addresses_only() {
        let (i, e) = site_cache_entry(0xffffffff81234567, 5).unwrap();
        assert_eq!(i, (0x1234567 >> 3) & (SITE_CACHE - 1));
        assert_eq!(e, (5 << 56) | 0x001f_ffff_8123_4567);
        // What the BPF side compares: the low 53 bits, or 32 on x86-64.
        assert_eq!((e ^ 0xffffffff81234567) << 11, 0);
        assert_eq!(e as u32, 0x81234567);
        // What the common path adds to the counters' address: slot 5's.
        assert_eq!(e >> SITE_SHIFT, 5 * 8);
        assert_eq!(site_cache_entry(0x00007fff81234567, 5), None);
        assert_eq!(
            site_cache_entry(0xffffffff81234567, 255).unwrap().1 >> SITE_SHIFT,
            255 * 8
        );
        assert_eq!(site_cache_entry(0xffffffff81234567, 1 << 8), None);
        let arm64 = site_cache_entry(0xffff800081234567, 5);
        assert_eq!(arm64.is_none(), cfg!(target_arch = "x86_64"));
        // Neighbouring call sites take different entries.
        let a = site_cache_entry(0xffffffff81000010, 2).unwrap().0;
        let b = site_cache_entry(0xffffffff81000018, 2).unwrap().0;
        assert_ne!(a, b);
    }

    #[test]
    fn config_is_clamped_into_the_tables() {
        let mut dst = types::td_config::default();
        let deep = Deep {
            callers: vec![
                DeepCaller {
                    lo: 1,
                    hi: 2,
                    rule_first: 0,
                    rule_count: 1,
                    reason: 3
                };
                MAX_DEEP_CALLERS + 1
            ],
            rules: vec![DeepRule {
                lo: 4,
                hi: 5,
                reason: 6,
                depth: 99,
            }],
        };
        Config {
            stack_frames: 1000,
            sample_every: 0,
            deep: Some(deep.clone()),
            ..Config::default()
        }
        .write(&mut dst);
        assert_eq!(dst.stack_bytes, MAX_STACK_FRAMES * 8);
        assert_eq!(dst.sample_every, 1);
        assert_eq!(dst.deep_depth, MAX_RULE_DEPTH);
        let mut tables = types::td_deep::default();
        deep.write(&mut tables);
        assert_eq!(tables.nr_callers as usize, MAX_DEEP_CALLERS);
        assert_eq!(tables.rules[0].depth, MAX_RULE_DEPTH);
        assert_eq!(tables.callers[0].reason, 3);
        assert_eq!(tables.ready, 0);
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
        assert!(!Config::default().any_path());
        let stacks = Config {
            stacks: true,
            ..Config::default()
        };
        // The stack gate is off the common path (see td_watch).
        assert!(!stacks.any_path());
        let verify = Config {
            verify_caller: true,
            ..stacks.clone()
        };
        assert!(verify.any_path());
        let filtered = Config {
            filter: Filters {
                cpus: Some(vec![0]),
                ..Filters::default()
            },
            ..Config::default()
        };
        assert!(filtered.any_path());
    }

    #[test]
    fn cpu_filters_become_a_bitmap() {
        let mut dst = types::td_config::default();
        Config {
            filter: Filters {
                cpus: Some(vec![0, 3, 64, MAX_CPUS - 1]),
                ..Filters::default()
            },
            ..Config::default()
        }
        .write(&mut dst);
        assert_eq!((dst.filter_cpus, dst.filter_pids, dst.filtered), (1, 0, 1));
        assert_eq!(dst.cpus[0], 0b1001);
        assert_eq!(dst.cpus[1], 1);
        assert_eq!(dst.cpus[MAX_CPUS as usize / 64 - 1], 1 << 63);
        assert_eq!(dst.cpus.iter().map(|w| w.count_ones()).sum::<u32>(), 4);
    }
}
