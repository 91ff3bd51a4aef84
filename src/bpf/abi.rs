//! The Rust side of `topdown.h`: its constants (read from the skeleton's
//! BTF-derived types, so there is one definition), the settings written
//! into `td_config` before load, and plain decodings of what the maps
//! hold. Nothing here touches the kernel.

use std::mem::size_of;

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
/// FUNC's entry frame lies within this many bytes of FUNC.
pub(crate) const ENTRY_WINDOW: u64 = types::td_abi::TD_ENTRY_WINDOW.0 as u64;
#[cfg(test)]
pub(crate) const SELFTEST_ARGS: usize = types::td_abi::TD_SELFTEST_ARGS.0 as usize;
const NR_STATS: usize = types::td_stat::TD_NR_STATS.0 as usize;

// The arrays the structs are made of follow the constants above.
const _: () = assert!(size_of::<types::td_counts>() == NR_SLOTS * 8);
const _: () = assert!(size_of::<types::td_stats>() == NR_STATS * 8);
const _: () = assert!(NR_SLOTS.is_power_of_two());
const _: () = assert!(std::mem::offset_of!(types::td_control, reason) == 0);

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

/// Everything the BPF programs are given before load.
#[derive(Debug, Clone, Default)]
pub(crate) struct Config {
    pub(crate) func_addr: u64,
    pub(crate) verify_caller: bool,
    pub(crate) user_stacks: bool,
    pub(crate) stack_frames: u32,
    pub(crate) sample_every: u32,
    pub(crate) max_per_cpu_sec: u64,
    pub(crate) callers: Vec<DeepCaller>,
    pub(crate) rules: Vec<DeepRule>,
    /// Calls from this process are left out (0: count everything).
    pub(crate) own_tgid: u32,
}

impl Config {
    /// Writes the settings into the object's `td_config`, clamped to what
    /// the tables hold (profile resolution has already refused more).
    pub(crate) fn write(&self, dst: &mut types::td_config) {
        dst.func_addr = self.func_addr;
        dst.verify_caller = self.verify_caller.into();
        dst.user_stacks = self.user_stacks.into();
        dst.stack_bytes = self.stack_frames.clamp(1, MAX_STACK_FRAMES) * 8;
        dst.sample_every = self.sample_every.max(1);
        dst.max_per_cpu_sec = self.max_per_cpu_sec;
        dst.own_tgid = self.own_tgid;
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
}

/// The per-CPU counters kept besides the reason slots, summed over CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stats([u64; NR_STATS]);

impl Default for Stats {
    fn default() -> Self {
        Stats([0; NR_STATS])
    }
}

/// Names of the counters in `Stats`, as `topdown.h` numbers them.
pub(crate) use types::td_stat as Stat;

impl Stats {
    pub(crate) fn get(&self, which: Stat) -> u64 {
        self.0[which.0 as usize]
    }

    /// Sums the per-CPU values of the `stats` map.
    pub(crate) fn from_percpu(values: &[Vec<u8>]) -> Self {
        Stats(sum_percpu(values))
    }

    #[cfg(test)]
    pub(crate) fn with(pairs: &[(Stat, u64)]) -> Self {
        let mut s = Stats::default();
        for (k, v) in pairs {
            s.0[k.0 as usize] = *v;
        }
        s
    }
}

/// Sums per-CPU values made of u64s, element by element (wrapping, as the
/// counters do).
pub(crate) fn sum_percpu<const N: usize>(values: &[Vec<u8>]) -> [u64; N] {
    let mut out = [0u64; N];
    for cpu in values {
        for (o, chunk) in out.iter_mut().zip(cpu.chunks_exact(8)) {
            *o = o.wrapping_add(u64::from_ne_bytes(chunk.try_into().expect("8 bytes")));
        }
    }
    out
}

// SAFETY: td_sample is a repr(C) struct of integers and arrays: any bytes
// of its size are a valid value.
unsafe impl plain::Plain for types::td_sample {}

/// One captured sample, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sample {
    pub(crate) reason: u32,
    pub(crate) pid: u32,
    /// The caller's return address the BPF side found (0: not found).
    pub(crate) caller: u64,
    pub(crate) kstack: Vec<u64>,
    pub(crate) ustack: Vec<u64>,
}

fn frames_of(stack: &[u64], bytes: i32) -> Vec<u64> {
    let n = (bytes.max(0) as usize / 8).min(stack.len());
    stack[..n].iter().copied().take_while(|&a| a != 0).collect()
}

impl Sample {
    /// Decodes one ring buffer record; None if it is too short.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Sample> {
        let mut raw = types::td_sample::default();
        plain::copy_from_bytes(&mut raw, bytes).ok()?;
        Some(Sample {
            reason: raw.reason,
            pid: raw.pid,
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
            reason: 5,
            caller: 7,
            kstack_bytes: 3 * 8,
            ustack_bytes: -14,
            ..Default::default()
        };
        raw.kstack[0] = 1;
        raw.kstack[1] = 2;
        raw.kstack[2] = 0;
        // SAFETY: reading a repr(C) value's bytes.
        let bytes = unsafe { plain::as_bytes(&raw) };
        let s = Sample::decode(bytes).unwrap();
        assert_eq!((s.pid, s.reason, s.caller), (42, 5, 7));
        assert_eq!(s.kstack, vec![1, 2]);
        assert!(s.ustack.is_empty());
        assert!(Sample::decode(&bytes[..10]).is_none());
    }

    #[test]
    fn percpu_values_are_summed_per_element() {
        let cpu = |a: u64, b: u64| [a.to_ne_bytes(), b.to_ne_bytes()].concat();
        let s: [u64; 2] = sum_percpu(&[cpu(1, 2), cpu(10, u64::MAX)]);
        assert_eq!(s, [11, 1]);
    }

    #[test]
    fn config_is_clamped_into_the_tables() {
        let mut dst = types::td_config::default();
        Config {
            stack_frames: 1000,
            sample_every: 0,
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
            ..Config::default()
        }
        .write(&mut dst);
        assert_eq!(dst.stack_bytes, MAX_STACK_FRAMES * 8);
        assert_eq!(dst.sample_every, 1);
        assert_eq!(dst.nr_callers as usize, MAX_DEEP_CALLERS);
        assert_eq!(dst.rules[0].depth, MAX_RULE_DEPTH);
        assert_eq!(dst.callers[0].reason, 3);
    }
}
