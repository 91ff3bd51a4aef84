//! Reading the counters: per-reason totals from the slot array plus the
//! per-address counts of call sites not yet resolved, resolving new sites
//! as they appear.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::time::{Duration, Instant};

use crate::bpf::abi::{Stat, NR_SLOTS};
use crate::bpf::maps::Maps;
use crate::bpf::percpu::{self, Pending, PerCpu, Stats, EARLY_KEY_WORDS};
use crate::error::Result;
use crate::reasons::UNKNOWN_NAME;
use crate::reasons::{Mapper, SourceLookup};

use super::ksyms::LiveKsyms;

#[derive(Debug, Default)]
pub(crate) struct Poller {
    /// Every return address seen in the pending table, and its slot.
    sites: HashMap<u64, u32>,
    /// The maps' values as the kernel copies them out, in buffers kept
    /// from poll to poll.
    counts: PerCpu,
    pending: Pending,
    /// Calls counted before the deeper-frame rules were filled in, and
    /// the slot each key (return address and frames) was given.
    early: Pending,
    early_slots: HashMap<[u64; EARLY_KEY_WORDS], u32>,
    /// Calls among those from a deeper-frame caller whose unwind failed.
    early_unwind_failed: u64,
    /// The counter array last read, summed over the CPUs.
    summed: Vec<u64>,
    /// A uprobe's pending sites, and the slot of every (tgid, return
    /// address) seen there.
    upending: Pending,
    usites: HashMap<(u32, u64), u32>,
    /// Calls from the pending entries of processes that have exited, and
    /// of sites in modules since unloaded, per slot: the entries are
    /// removed from the tables (see prune_user, forget_sites).
    retired: Vec<u64>,
    /// What the pending table held for a site of an unloaded module when
    /// it was forgotten: its calls since (the address reused by the next
    /// module) are a new site's.
    site_base: HashMap<u64, u64>,
    /// Whether resolved sites' pending entries are taken out of the table
    /// (see prune_sites): in a run of its own object only.
    pub(crate) prunes: bool,
    /// Sites resolved since the last pruning, and those resolved in the
    /// period before it (pruned at the next).
    young: Vec<u64>,
    ripe: Vec<u64>,
    /// Pool sites the last read found in no pending table: nothing of
    /// theirs to take out when they are pruned (see prune_sites).
    pool_only: HashSet<u64>,
    last_site_prune: Option<Instant>,
    last_prune: Option<Instant>,
    /// Processes seen exited at the last pruning, after that poll's read:
    /// retired at the next, whose read holds every call they made.
    dead: HashSet<u32>,
}

/// How often a uprobe's tables are rid of exited processes' entries.
const PRUNE_EVERY: Duration = Duration::from_secs(1);

impl Poller {
    /// Cumulative per-slot totals. Calls from a site counted while it was
    /// pending stay in the pending table and are added here under the
    /// site's reason, so a new caller's first calls are neither lost nor
    /// misfiled. The work is proportional to the number of distinct call
    /// sites, not of calls.
    pub(crate) fn totals(
        &mut self,
        maps: &Maps,
        ksyms: &mut LiveKsyms<'_>,
        mapper: &mut Mapper,
        mut src: Option<&mut (dyn SourceLookup + '_)>,
    ) -> Result<Vec<u64>> {
        if self.prunes
            && self
                .last_site_prune
                .is_none_or(|t| t.elapsed() >= PRUNE_EVERY)
        {
            self.last_site_prune = Some(Instant::now());
            // Before the reads: what it takes out is retired, not read.
            self.prune_sites(maps)?;
        }
        maps.read_counts(&mut self.counts)?;
        maps.read_pending(&mut self.pending)?;
        maps.read_early(&mut self.early)?;
        let mut totals = self.slots();
        // Pool slots are pending sites too, their counts in the counters
        // just read: after them, so a count read has its address (td_pool).
        let pooled = percpu::pooled(&maps.read_pool()?, &self.summed);
        self.note_pool_only(&pooled);
        self.pending.add_summed(&pooled);
        // Another process may have resolved sites of a pinned object, and
        // the programs may name sites themselves.
        let shared = !self.prunes || maps.resolves_in_kernel();
        self.add_pending(&mut totals, |ret| {
            resolve(maps, ksyms, mapper, src.as_deref_mut(), ret, shared)
        })?;
        // Calls before the rules: a deeper-frame caller's by its rules on
        // the frames counted with them, any other as its site.
        self.add_early(&mut totals, |ret, frames| {
            match mapper.deep.slot(ret, frames) {
                Some(s) => Ok(s),
                None => resolve(maps, ksyms, mapper, src.as_deref_mut(), ret, shared),
            }
        })?;
        self.early_unwind_failed = mapper.deep.unwind_failures(&self.early);
        // Reasons the programs named since.
        mapper.adopt_new(maps, &totals)?;
        // Retired before this read (pruned sites, exited processes,
        // unloaded modules): the pruning below retires entries this read
        // still holds, for the next.
        for (t, r) in totals.iter_mut().zip(&self.retired) {
            *t = t.wrapping_add(*r);
        }
        if maps.has_user_sites() {
            maps.read_upending(&mut self.upending)?;
            let entries = self
                .upending
                .entries()
                .filter_map(|(k, n)| Some((percpu::user_key_of(k)?, n)));
            add_by_slot(&mut totals, &mut self.usites, entries, |(tgid, ret)| {
                resolve_user(maps, mapper, src.as_deref_mut(), tgid, ret)
            })?;
            if self.last_prune.is_none_or(|t| t.elapsed() >= PRUNE_EVERY) {
                self.last_prune = Some(Instant::now());
                let gone = self
                    .prune_user(|tgid| !std::path::Path::new(&format!("/proc/{tgid}")).exists());
                let processes: HashSet<u32> = gone.iter().map(|&(t, _)| t).collect();
                for (tgid, ret) in gone {
                    maps.remove_user_site(tgid, ret)?;
                }
                for tgid in processes {
                    maps.forget_user_process(tgid)?;
                }
            }
        }
        Ok(totals)
    }

    /// The per-slot counts the counts buffer holds, summed over the CPUs.
    pub(crate) fn slots(&mut self) -> Vec<u64> {
        self.summed = percpu::counts_of(&self.counts);
        let mut totals = self.summed.clone();
        totals.truncate(NR_SLOTS);
        totals.resize(NR_SLOTS, 0);
        totals
    }

    /// The kernel side's statistics, with the stack path's counters from
    /// the counter array `totals` last read: the largest map a poll reads
    /// (a value per slot per CPU) is not read a second time, and the
    /// counters agree with the totals.
    pub(crate) fn stats(&self, maps: &Maps) -> Result<Stats> {
        let mut rare = PerCpu::default();
        maps.read_stats(&mut rare)?;
        Ok(self.stats_of(&rare))
    }

    /// The statistics from the `stats` map's per-CPU values and the
    /// counter array last summed, with the failed unwinds of the calls
    /// before the rules. No kernel: `stats` reads the map.
    pub(crate) fn stats_of(&self, rare: &PerCpu) -> Stats {
        let mut s = Stats::from_percpu(rare, &self.summed);
        s.add(Stat::TD_STAT_DEEP_UNWIND_FAILED, self.early_unwind_failed);
        s
    }

    /// Adds the counts the pending buffer holds to `totals`, each under its
    /// site's slot; `resolve` gives a site seen for the first time its
    /// slot. No kernel: `totals` fills the buffers.
    pub(crate) fn add_pending(
        &mut self,
        totals: &mut [u64],
        resolve: impl FnMut(u64) -> Result<u32>,
    ) -> Result<()> {
        if self.site_base.is_empty() {
            let new = add_by_slot(totals, &mut self.sites, self.pending.sums(), resolve)?;
            self.young.extend(new);
            return Ok(());
        }
        let sums = self.pending_by_address();
        let base = &self.site_base;
        let entries = sums
            .into_iter()
            .filter_map(|(ret, n)| match base.get(&ret) {
                // not called since its module went: not a site now
                Some(&b) if n <= b => None,
                Some(&b) => Some((ret, n - b)),
                None => Some((ret, n)),
            });
        let new = add_by_slot(totals, &mut self.sites, entries, resolve)?;
        self.young.extend(new);
        Ok(())
    }

    /// Takes the pending entries of the sites resolved a pruning period
    /// or more ago out of the table, keeping their calls as retired under
    /// their slots: each poll reads the table whole, and a long run would
    /// fill it with sites whose calls no longer come there. A site the
    /// site table could not take (full) keeps counting there and stays;
    /// an entry the BPF side makes again (the site's cache entry emptied)
    /// is read as the site's, from zero.
    fn prune_sites(&mut self, maps: &Maps) -> Result<()> {
        let ripe = std::mem::replace(&mut self.ripe, std::mem::take(&mut self.young));
        if ripe.is_empty() {
            return Ok(());
        }
        if self.retired.len() < NR_SLOTS {
            self.retired.resize(NR_SLOTS, 0);
        }
        for ret in ripe {
            // A reused address's counts are read against a base: left be.
            let Some(&slot) = self.sites.get(&ret) else {
                continue;
            };
            // A pool site counts in its slot, with no entry to take out:
            // three bpf() calls saved per site (and topdown's own calls
            // of FUNC in them). Should an entry come after that read (its
            // cache entry taken), it stays, read and added as before.
            if self.pool_only.contains(&ret) {
                continue;
            }
            if self.site_base.contains_key(&ret) || maps.site(ret)? != Some(slot) {
                continue;
            }
            let n = maps.take_pending(ret)?;
            let r = &mut self.retired[slot as usize % NR_SLOTS];
            *r = r.wrapping_add(n);
        }
        Ok(())
    }

    /// Records which of the pool's sites `pooled` the pending and fresh
    /// tables just read (before the pool's are added) do not hold.
    fn note_pool_only(&mut self, pooled: &[(u64, u64)]) {
        self.pool_only.clear();
        if pooled.is_empty() {
            return;
        }
        let tabled: HashSet<u64> = self.pending.sums().map(|(ret, _)| ret).collect();
        self.pool_only.extend(
            pooled
                .iter()
                .map(|&(ret, _)| ret)
                .filter(|ret| !tabled.contains(ret)),
        );
    }

    /// The pending calls last read, summed by address: an address may be
    /// in the pending table and in a fresh table.
    fn pending_by_address(&self) -> HashMap<u64, u64> {
        let mut sums: HashMap<u64, u64> = HashMap::new();
        for (ret, n) in self.pending.sums() {
            *sums.entry(ret).or_default() += n;
        }
        sums
    }

    /// Forgets the sites (return address, slot) `gone` picks: those that
    /// lay in a module since unloaded, or named by no symbol,
    /// keeping their pending calls, as the last read holds them, as
    /// retired under their slots; which sites, with their slots, to take
    /// out of the site table and cache. Read after the module went, that
    /// holds every call it made; calls after it, from the same addresses,
    /// are a new module's, resolved anew.
    pub(crate) fn forget_sites(&mut self, gone: impl Fn(u64, u32) -> bool) -> Vec<(u64, u32)> {
        let sums = self.pending_by_address();
        if self.retired.len() < NR_SLOTS {
            self.retired.resize(NR_SLOTS, 0);
        }
        let mut forgotten = Vec::new();
        let (retired, base) = (&mut self.retired, &mut self.site_base);
        self.sites.retain(|&ret, &mut slot| {
            if !gone(ret, slot) {
                return true;
            }
            let n = sums.get(&ret).copied().unwrap_or(0);
            let before = base.insert(ret, n).unwrap_or(0);
            let r = &mut retired[slot as usize % NR_SLOTS];
            *r = r.wrapping_add(n.saturating_sub(before));
            forgotten.push((ret, slot));
            false
        });
        forgotten.sort_unstable();
        forgotten
    }

    /// Adds the counts the early buffer holds to `totals`, each under the
    /// slot `resolve` gives its return address and frames the first time
    /// the key is seen. No kernel: `totals` fills the buffers.
    pub(crate) fn add_early(
        &mut self,
        totals: &mut [u64],
        mut resolve: impl FnMut(u64, &[u64]) -> Result<u32>,
    ) -> Result<()> {
        let entries = self
            .early
            .entries()
            .filter_map(|(key, n)| Some((<[u64; EARLY_KEY_WORDS]>::try_from(key).ok()?, n)));
        add_by_slot(totals, &mut self.early_slots, entries, |k| {
            resolve(k[0], &k[1..])
        })?;
        Ok(())
    }

    /// Forgets the user sites of processes found exited at the last
    /// pruning, keeping their pending calls (read this poll, already in its
    /// totals) as retired; which sites to remove from the tables. Then
    /// notes the processes `exited` says are gone now, for the next time.
    /// Without it a system-wide -x fills the tables with exited processes'
    /// sites, and each poll reads them all. A process is retired only a
    /// pruning after it was seen gone: this poll's read came after that, so
    /// it holds every call the process made (seen gone just after the read,
    /// it may have called between the read and its exit). A pid reused
    /// within the second is the one way to lose calls here.
    fn prune_user(&mut self, exited: impl Fn(u32) -> bool) -> Vec<(u32, u64)> {
        let gone = std::mem::take(&mut self.dead);
        self.dead = self
            .usites
            .keys()
            .map(|&(t, _)| t)
            .filter(|t| !gone.contains(t))
            .collect::<HashSet<u32>>()
            .into_iter()
            .filter(|&t| exited(t))
            .collect();
        if gone.is_empty() {
            return Vec::new();
        }
        if self.retired.len() < NR_SLOTS {
            self.retired.resize(NR_SLOTS, 0);
        }
        for (k, n) in self.upending.entries() {
            let Some(key) = percpu::user_key_of(k) else {
                continue;
            };
            if let (true, Some(&s)) = (gone.contains(&key.0), self.usites.get(&key)) {
                let r = &mut self.retired[s as usize % NR_SLOTS];
                *r = r.wrapping_add(n);
            }
        }
        let sites: Vec<(u32, u64)> = self
            .usites
            .keys()
            .filter(|(t, _)| gone.contains(t))
            .copied()
            .collect();
        for k in &sites {
            self.usites.remove(k);
        }
        sites
    }

    /// The buffers `totals` reads the maps into, for the benchmark to fill
    /// as the kernel would.
    #[cfg(test)]
    pub(crate) fn buffers(&mut self) -> (&mut PerCpu, &mut Pending) {
        (&mut self.counts, &mut self.pending)
    }

    /// Distinct call sites seen so far.
    #[cfg(test)]
    pub(crate) fn sites(&self) -> usize {
        self.sites.len()
    }
}

/// Adds each entry's count to `totals` under its key's slot: from `slots`,
/// where `resolve` put it the first time the key was seen; the keys seen
/// for the first time.
fn add_by_slot<K: Copy + Eq + Hash>(
    totals: &mut [u64],
    slots: &mut HashMap<K, u32>,
    entries: impl Iterator<Item = (K, u64)>,
    mut resolve: impl FnMut(K) -> Result<u32>,
) -> Result<Vec<K>> {
    let mut new = Vec::new();
    for (key, n) in entries {
        let slot = match slots.get(&key) {
            Some(&s) => s,
            None => {
                let s = resolve(key)?;
                slots.insert(key, s);
                new.push(key);
                s
            }
        };
        totals[slot as usize] = totals[slot as usize].wrapping_add(n);
    }
    Ok(new)
}

/// The slot of a new call site. Another topdown process reading the same
/// pinned instance (`shared`) may have resolved it, or named slots, first:
/// the site table and the names map decide, so that every reader agrees.
/// A run's own object has no other writer: its site table holds only what
/// this process put there, so a new site is not looked up first (a bpf()
/// call saved, made while topdown's own calls take the slow path).
fn resolve(
    maps: &Maps,
    ksyms: &mut LiveKsyms<'_>,
    mapper: &mut Mapper,
    src: Option<&mut (dyn SourceLookup + '_)>,
    ret: u64,
    shared: bool,
) -> Result<u32> {
    if let Some(s) = if shared { maps.site(ret)? } else { None } {
        if !mapper.reasons.known(s) {
            mapper.sync(maps)?;
        }
        return Ok(s);
    }
    let s = mapper.classify(ksyms.for_site(ret), ret, src);
    let s = mapper.claim(maps, s)?;
    // A full site table leaves the site pending: its calls are still
    // counted, here, under the right reason.
    maps.add_site(ret, s)
}

/// The slot of a new user call site (tgid, ret): its caller function,
/// symbolized in its process, routed as the profile says. Where the
/// process is gone and its mappings were never read, a caller in the
/// traced file is still named, from where the uprobe found FUNC; any
/// other is [unknown].
fn resolve_user(
    maps: &Maps,
    mapper: &mut Mapper,
    src: Option<&mut (dyn SourceLookup + '_)>,
    tgid: u32,
    ret: u64,
) -> Result<u32> {
    let caller = src.and_then(|s| s.user_caller(tgid, ret, &|| maps.user_process(tgid)));
    let s = mapper.classify_name(caller.as_deref().unwrap_or(UNKNOWN_NAME));
    let s = mapper.claim(maps, s)?;
    maps.add_user_site(tgid, ret, s)
}

/// The poller against the real counting path (BPF_PROG_TEST_RUN; root).
#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;

    use super::*;
    use crate::bpf::abi::{LoadConfig, FIRST_REASON, POOL};
    use crate::bpf::probe::{selftest, Probe};

    const KSYMS: &str = "\
ffffffff81000000 T caller_a
ffffffff81001000 t caller_b.isra.0
ffffffff81002000 T caller_c
ffffffff81003000 T end_of_text
";

    /// Runs `f` on the self-test object with KSYMS' symbols, as root.
    fn with_selftest(f: impl FnOnce(&Probe<'_>, &mut LiveKsyms<'_>)) {
        with_config(&LoadConfig::default(), f)
    }

    /// The same, its pool used up: new sites are pending from their first
    /// call.
    fn with_pending_path(f: impl FnOnce(&Probe<'_>, &mut LiveKsyms<'_>)) {
        let config = LoadConfig {
            no_pool: true,
            ..LoadConfig::default()
        };
        with_config(&config, f)
    }

    fn with_config(config: &LoadConfig, f: impl FnOnce(&Probe<'_>, &mut LiveKsyms<'_>)) {
        if !crate::testing::bpf_or_skip() {
            return;
        }
        let k = crate::kallsyms::Kallsyms::parse(KSYMS);
        let mut storage = MaybeUninit::uninit();
        let p = selftest::load(&mut storage, config);
        f(&p, &mut LiveKsyms::fixed(&k));
    }

    /// A new site takes a pool slot with its first call, and its later
    /// calls take the common path, counted there until a poll resolves it;
    /// then its cache entry is its reason's. Its calls add up either way,
    /// and past the pool new sites are pending as before.
    #[test]
    fn pooled_sites_take_the_common_path_and_add_up_across_resolution() {
        with_selftest(|p, k| {
            let mut m = Mapper::auto(64);
            // A run's own object: new sites resolved without a lookup first.
            let mut poller = Poller {
                prunes: true,
                ..Poller::default()
            };
            let (a, b) = (0xffffffff81000010, 0xffffffff81001010);
            p.test_count(a, 3);
            p.test_count(b, 2);
            // Only each site's first call missed the cache.
            let uncached = |p: &Probe<'_>| p.maps().stats().unwrap().get(Stat::TD_STAT_UNCACHED);
            assert_eq!(uncached(p), 2);
            assert_eq!(p.maps().read_pool().unwrap(), [a, b]);
            let mut c = PerCpu::default();
            p.maps().read_counts(&mut c).unwrap();
            let summed = percpu::counts_of(&c);
            assert_eq!(summed[NR_SLOTS..NR_SLOTS + 3], [3, 2, 0]);
            // No wake-up asked: the calls are cheap until the next poll.
            assert!(!p.maps().take_new_sites());
            let t = poller.totals(p.maps(), k, &mut m, None).unwrap();
            let (sa, sb) = (
                m.reasons.lookup("caller_a").unwrap(),
                m.reasons.lookup("caller_b").unwrap(),
            );
            assert_eq!((t[sa as usize], t[sb as usize]), (3, 2));
            // In no pending table: pruning them takes nothing out.
            assert_eq!(poller.pool_only, HashSet::from([a, b]));
            poller.prune_sites(p.maps()).unwrap();
            poller.prune_sites(p.maps()).unwrap();
            assert_eq!(poller.retired.iter().sum::<u64>(), 0);
            // Resolved: the entries are the reasons', the pool's counts kept.
            p.test_count(a, 4);
            p.test_count(b, 1);
            assert_eq!(uncached(p), 2);
            let counts = p.maps().counts().unwrap();
            assert_eq!((counts[sa as usize], counts[sb as usize]), (4, 1));
            let t = poller.totals(p.maps(), k, &mut m, None).unwrap();
            assert_eq!((t[sa as usize], t[sb as usize]), (7, 3));
            assert_eq!(t.iter().sum::<u64>(), 10);
            // The rest of the pool, then one site past it: pending.
            let more: Vec<u64> = (0..POOL as u64 - 1)
                .map(|i| 0xffffffff81002000 + 8 * i)
                .collect();
            for &ret in &more {
                p.test_count(ret, 1);
            }
            assert_eq!(p.maps().read_pool().unwrap().len(), POOL);
            p.test_count(a + 0x20, 5);
            assert_eq!(uncached(p), 2 + more.len() as u64 + 5);
            let t = poller.totals(p.maps(), k, &mut m, None).unwrap();
            assert_eq!(t[sa as usize], 12);
            assert_eq!(t.iter().sum::<u64>(), 10 + more.len() as u64 + 5);
        });
    }

    #[test]
    fn stats_take_the_stack_counters_from_the_counts_the_poll_read() {
        use crate::bpf::abi::{StackStat, Stat};
        let mut poller = Poller::default();
        // Before any read: no stack counters.
        assert_eq!(poller.stats_of(&PerCpu::default()), Stats::default());
        let stride = std::mem::size_of::<crate::bpf::skel::types::td_counts>() / 8;
        let mut cpu = vec![0u64; stride];
        cpu[FIRST_REASON as usize] = 4;
        cpu[crate::bpf::abi::ALL_SLOTS + StackStat::TD_STACK_EMITTED.0 as usize] = 3;
        let (counts, _) = poller.buffers();
        *counts = PerCpu {
            stride,
            words: [cpu.clone(), cpu].concat(),
        };
        assert_eq!(poller.slots()[FIRST_REASON as usize], 8);
        let mut rare = vec![0u64; Stat::TD_NR_STATS.0 as usize];
        rare[Stat::TD_STAT_OWN_CALLS.0 as usize] = 5;
        rare[Stat::TD_STAT_DEEP_UNWIND_FAILED.0 as usize] = 1;
        let rare = PerCpu {
            stride: rare.len(),
            words: rare,
        };
        // The early table's failed unwinds join the BPF side's.
        poller.early_unwind_failed = 2;
        let s = poller.stats_of(&rare);
        assert_eq!(s.stack(StackStat::TD_STACK_EMITTED), 6);
        assert_eq!(s.get(Stat::TD_STAT_OWN_CALLS), 5);
        assert_eq!(s.get(Stat::TD_STAT_DEEP_UNWIND_FAILED), 3);
    }

    #[test]
    fn exited_processes_are_retired_a_pruning_after_they_are_seen_gone() {
        let mut poller = Poller::default();
        let slot = crate::bpf::abi::FIRST_REASON;
        // Process 7 (two sites) and 8 (one), all resolved to `slot`.
        for k in [(7, 0x10), (7, 0x20), (8, 0x10)] {
            poller.usites.insert(k, slot);
        }
        let mut keys = Vec::new();
        for (t, r) in [(7u32, 0x10u64), (7, 0x20), (8, 0x10)] {
            keys.extend(
                percpu::user_key(t, r)
                    .chunks(8)
                    .map(|c| u64::from_ne_bytes(c.try_into().unwrap())),
            );
        }
        poller.upending = Pending::for_test(percpu::USER_KEY_WORDS, &keys, &[3, 4, 5]);
        // 7 has exited: seen now, nothing retired yet.
        assert!(poller.prune_user(|t| t == 7).is_empty());
        assert!(poller.retired.is_empty());
        // The next pruning retires it: its pending calls kept, its sites
        // removed; 8 is still alive.
        let mut gone = poller.prune_user(|t| t == 7);
        gone.sort();
        assert_eq!(gone, [(7, 0x10), (7, 0x20)]);
        assert_eq!(poller.retired[slot as usize], 7);
        assert_eq!(poller.usites.len(), 1);
        assert!(poller.prune_user(|t| t == 7).is_empty());
    }

    #[test]
    fn poller_totals_are_exact_across_resolution() {
        with_selftest(|p, k| {
            let mut m = Mapper::auto(64);
            let mut poller = Poller::default();
            let (a, b1, b2) = (0xffffffff81000010, 0xffffffff81001010, 0xffffffff81001800);
            p.test_count(a, 2);
            p.test_count(b1, 1);
            let t = poller.totals(p.maps(), k, &mut m, None).unwrap();
            let sa = m.reasons.lookup("caller_a").unwrap();
            let sb = m.reasons.lookup("caller_b").unwrap();
            assert_eq!((t[sa as usize], t[sb as usize]), (2, 1));

            // Resolved sites now count in the array; a second call site of
            // caller_b appears and is pending for one poll.
            p.test_count(a, 10);
            p.test_count(b1, 20);
            p.test_count(b2, 30);
            let t = poller.totals(p.maps(), k, &mut m, None).unwrap();
            assert_eq!((t[sa as usize], t[sb as usize]), (12, 51));
            assert_eq!(t.iter().sum::<u64>(), 63);
            p.test_count(b2, 1);
            let t = poller.totals(p.maps(), k, &mut m, None).unwrap();
            assert_eq!(t[sb as usize], 52);
            assert_eq!(poller.sites(), 3);
        });
    }

    #[test]
    fn an_unloaded_modules_sites_keep_their_counts_and_their_address_counts_anew() {
        if !crate::testing::bpf_or_skip() {
            return;
        }
        let old = crate::kallsyms::Kallsyms::parse(
            "ffffffffc0a00000 t brd_insert_page\t[brd]\n\
             ffffffffc0a00100 t brd_submit_bio\t[brd]\n",
        );
        // Another module loaded at the same address.
        let new = crate::kallsyms::Kallsyms::parse("ffffffffc0a00000 t loop_queue_rq\t[loop]\n");
        let mut storage = MaybeUninit::uninit();
        let p = &selftest::load(&mut storage, &LoadConfig::default());
        let mut m = Mapper::auto(64);
        let mut poller = Poller::default();
        let (a, b) = (0xffffffffc0a00010, 0xffffffffc0a00110);
        p.test_count(a, 3);
        p.test_count(b, 1);
        let t = poller
            .totals(p.maps(), &mut LiveKsyms::fixed(&old), &mut m, None)
            .unwrap();
        let sa = m.reasons.lookup("brd_insert_page").unwrap();
        let sb = m.reasons.lookup("brd_submit_bio").unwrap();
        assert_eq!((t[sa as usize], t[sb as usize]), (3, 1));
        // Resolved: in the slot array from now on.
        p.test_count(a, 4);
        // The module goes; both its sites are forgotten.
        poller
            .totals(p.maps(), &mut LiveKsyms::fixed(&old), &mut m, None)
            .unwrap();
        let gone =
            poller.forget_sites(|ret, _| (0xffffffffc0a00001..=0xffffffffc0a00200).contains(&ret));
        assert_eq!(gone, [(a, sa), (b, sb)]);
        for &(ret, slot) in &gone {
            p.maps().forget_site(ret, slot).unwrap();
        }
        let t = poller
            .totals(p.maps(), &mut LiveKsyms::fixed(&new), &mut m, None)
            .unwrap();
        assert_eq!((t[sa as usize], t[sb as usize]), (7, 1));
        assert_eq!(t.iter().sum::<u64>(), 8);
        // Calls from a's address now are the new module's: pending (the
        // cache and the site table no longer name it), then resolved.
        p.test_count(a, 5);
        let t = poller
            .totals(p.maps(), &mut LiveKsyms::fixed(&new), &mut m, None)
            .unwrap();
        let sl = m.reasons.lookup("loop_queue_rq").unwrap();
        assert_eq!((t[sa as usize], t[sb as usize], t[sl as usize]), (7, 1, 5));
        p.test_count(a, 2);
        let t = poller
            .totals(p.maps(), &mut LiveKsyms::fixed(&new), &mut m, None)
            .unwrap();
        assert_eq!((t[sa as usize], t[sl as usize]), (7, 7));
        assert_eq!(t.iter().sum::<u64>(), 15);
        // Forgotten twice (gone again): nothing counted twice.
        let gone = poller.forget_sites(|ret, _| ret == a);
        assert_eq!(gone, [(a, sl)]);
        p.maps().forget_site(a, sl).unwrap();
        let t = poller
            .totals(p.maps(), &mut LiveKsyms::fixed(&new), &mut m, None)
            .unwrap();
        assert_eq!((t[sa as usize], t[sl as usize]), (7, 7));
        assert_eq!(t.iter().sum::<u64>(), 15);
    }

    #[test]
    fn resolved_sites_leave_the_pending_table_a_period_on_their_calls_kept() {
        with_pending_path(|p, k| {
            let mut m = Mapper::auto(64);
            let mut poller = Poller::default();
            let (a, b) = (0xffffffff81000010, 0xffffffff81001010);
            p.test_count(a, 3);
            let t = poller.totals(p.maps(), k, &mut m, None).unwrap();
            let sa = m.reasons.lookup("caller_a").unwrap();
            assert_eq!(t[sa as usize], 3);
            // a resolved in the first period, b in the second: a goes at the
            // second pruning, b at the third.
            poller.prune_sites(p.maps()).unwrap();
            p.test_count(b, 2);
            p.test_count(a, 4);
            poller.totals(p.maps(), k, &mut m, None).unwrap();
            poller.prune_sites(p.maps()).unwrap();
            let pending = |poller: &mut Poller| {
                p.maps().read_pending(&mut poller.pending).unwrap();
                poller.pending.sums().map(|(r, _)| r).collect::<Vec<_>>()
            };
            assert_eq!(pending(&mut poller), [b]);
            let t = poller.totals(p.maps(), k, &mut m, None).unwrap();
            let sb = m.reasons.lookup("caller_b").unwrap();
            assert_eq!((t[sa as usize], t[sb as usize]), (7, 2));
            poller.prune_sites(p.maps()).unwrap();
            assert!(pending(&mut poller).is_empty());
            p.test_count(a, 1);
            p.test_count(b, 1);
            let t = poller.totals(p.maps(), k, &mut m, None).unwrap();
            assert_eq!((t[sa as usize], t[sb as usize]), (8, 3));
            assert_eq!(t.iter().sum::<u64>(), 11);
        });
    }
}
