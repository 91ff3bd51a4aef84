//! What the per-CPU maps hold as user space reads them: one key's
//! per-CPU value, the pending and early tables' batches (with their keys'
//! layouts), and the counters besides the reason slots, summed over CPUs.

use std::collections::HashMap;
use std::mem::size_of;

use crate::bpf::abi::{
    StackStat, Stat, ALL_SLOTS, COUNTS_WORDS, MAX_RULE_DEPTH, NR_SLOTS, NR_STACK_STATS, NR_STATS,
};
use crate::bpf::skel::types;

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
        if let Some(c) = counts.get(ALL_SLOTS..ALL_SLOTS + NR_STACK_STATS) {
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

/// The per-CPU values of the `counts` map, summed: the reason slots, the
/// pool slots, then the stack path's counters.
pub(crate) fn counts_of(counts: &PerCpu) -> Vec<u64> {
    counts.sum::<COUNTS_WORDS>().to_vec()
}

/// The return address of each pool slot taken, from a td_pool's bytes
/// (the count taken, then the addresses).
pub(crate) fn pool_sites(bytes: &[u8]) -> Vec<u64> {
    let words: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|w| u64::from_ne_bytes(w.try_into().unwrap_or_default()))
        .collect();
    let Some((&taken, rets)) = words.split_first() else {
        return Vec::new();
    };
    rets[..(taken as usize).min(rets.len())].to_vec()
}

/// Each pool slot's site (`rets`, by slot, from `pool_sites`; 0: not
/// written yet, left for the next read) with its calls, from the summed
/// counters (`counts_of`).
pub(crate) fn pooled(rets: &[u64], summed: &[u64]) -> Vec<(u64, u64)> {
    let counts = summed.get(NR_SLOTS..).unwrap_or_default();
    rets.iter()
        .zip(counts)
        .filter(|(&ret, _)| ret != 0)
        .map(|(&ret, &n)| (ret, n))
        .collect()
}

/// u64s in a td_fresh: an address and its count per entry.
const FRESH_WORDS: usize = 2 * types::td_abi::TD_FRESH.0 as usize;
const _: () = assert!(size_of::<types::td_fresh>() == FRESH_WORDS * 8);

/// The sites of the `fresh` map's per-CPU values (a taken entry names its
/// address, which it keeps), each with its count summed over the CPUs, by
/// address. An entry being taken may show its address before its count,
/// or its count before its address: read later, it only grows.
pub(crate) fn fresh_sites(fresh: &PerCpu) -> Vec<(u64, u64)> {
    // An address has the same entry on every CPU: summed entry by entry,
    // with a map only for addresses whose entry another CPU gave to
    // another address (a hash per entry of every CPU cost 10 times more).
    let mut by = vec![(0u64, 0u64); FRESH_WORDS / 2];
    let mut others: HashMap<u64, u64> = HashMap::new();
    if fresh.stride >= FRESH_WORDS {
        for cpu in fresh.words.chunks_exact(fresh.stride) {
            for (e, sum) in cpu[..FRESH_WORDS].chunks_exact(2).zip(by.iter_mut()) {
                if e[0] == 0 || e[1] == 0 {
                    continue;
                }
                if sum.0 == 0 || sum.0 == e[0] {
                    *sum = (e[0], sum.1.wrapping_add(e[1]));
                } else {
                    let n = others.entry(e[0]).or_insert(0);
                    *n = n.wrapping_add(e[1]);
                }
            }
        }
    }
    by.retain(|s| s.0 != 0);
    by.extend(others);
    by
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

    /// A one-CPU table of `keys` (key_words u64s each) and their counts.
    #[cfg(test)]
    pub(crate) fn for_test(key_words: usize, keys: &[u64], counts: &[u64]) -> Pending {
        Pending {
            cpus: 1,
            key_words,
            len: counts.len(),
            keys: keys.to_vec(),
            values: counts.to_vec(),
        }
    }

    /// Adds entries of one-word keys whose counts are summed over the
    /// CPUs already (the fresh tables', the pool slots').
    pub(crate) fn add_summed(&mut self, sites: &[(u64, u64)]) {
        let (keys, values) = self.spare(sites.len());
        let cpus = values.len() / sites.len().max(1);
        for (i, &(ret, n)) in sites.iter().enumerate() {
            keys[i] = ret;
            values[i * cpus..(i + 1) * cpus].fill(0);
            values[i * cpus] = n;
        }
        self.filled(sites.len());
    }

    /// Each return address with its count, for the pending table.
    pub(crate) fn sums(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.entries().map(|(k, n)| (k[0], n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_sites_are_summed_by_address_over_the_cpus() {
        let mut cpu0 = vec![0u64; FRESH_WORDS];
        let mut cpu1 = vec![0u64; FRESH_WORDS];
        // a in entry 1 on both CPUs, b in entry 2 on one; an entry with
        // its address not yet seen, and one with no count yet, left out
        (cpu0[2], cpu0[3]) = (0xa0, 4);
        (cpu0[4], cpu0[5]) = (0xb0, 1);
        (cpu0[6], cpu0[7]) = (0, 9);
        (cpu1[2], cpu1[3]) = (0xa0, 2);
        (cpu1[8], cpu1[9]) = (0xc0, 0);
        // d holds b's entry on the other CPU
        (cpu1[4], cpu1[5]) = (0xd0, 3);
        let v = PerCpu {
            stride: FRESH_WORDS,
            words: [cpu0, cpu1].concat(),
        };
        let mut got = fresh_sites(&v);
        got.sort();
        assert_eq!(got, vec![(0xa0, 6), (0xb0, 1), (0xd0, 3)]);
        assert!(fresh_sites(&PerCpu::default()).is_empty());
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
        cpu[ALL_SLOTS + StackStat::TD_STACK_EMITTED.0 as usize] = 3;
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
}
