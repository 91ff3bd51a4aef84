//! A synthetic benchmark of one poll's user-space work, with no kernel:
//! 128 reasons and 256 CPUs of per-CPU values through the code a poll
//! runs. What it times, per poll:
//!
//! - counts: the per-CPU values of the counter array as libbpf-rs's
//!   `lookup_percpu` hands them back (one Vec per CPU, copied out of the
//!   buffer the kernel filled), summed into the slots (`abi::slots_of`);
//! - pending: the same for every pending call site (its key as the map's
//!   key iterator hands it back, its per-CPU values as lookup_percpu hands
//!   them back, timed apart too, then summed), and `Poller::merge` adding
//!   them under their sites' slots;
//! - tick: `State::tick`, the trigger's decision over the last second;
//! - interval: `State::interval`, a print interval's figures with reason
//!   names (each print interval, not each tick; included in the total, so
//!   the total is the dearest kind of poll).
//!
//! Times are this thread's CPU time (the machine may be shared). Left out:
//! the map reads themselves (one `bpf()` call per map and two
//! per pending site, and the kernel's copying) and the printing. It prints
//! figures and asserts nothing about time:
//!
//! ```text
//! cargo test --release poll_bench -- --ignored --nocapture
//! ```
//!
//! The default test run goes through the same code for a few polls
//! (`poll_bench_runs`), so that the benchmark cannot rot unnoticed.

use std::hint::black_box;
use std::mem::size_of;
use std::time::Duration;

use crate::bpf::abi::{self, Stats, FIRST_REASON, NR_SLOTS};
use crate::bpf::probe::ProgStats;
use crate::bpf::skel::types;
use crate::reasons::Reasons;
use crate::report::text::clock;
use crate::session::poll::Poller;
use crate::session::state::State;
use crate::session::trigger::{Config, Trigger};
use crate::session::TICK;

const CPUS: usize = 256;
const REASONS: usize = 128;
/// Polls per figure in the benchmark.
const POLLS: usize = 2000;

/// What libbpf-rs's lookup_percpu returns for a value of `size` bytes:
/// one Vec per CPU, copied out of the flat buffer (values 8-byte aligned).
fn percpu(flat: &[u8], size: usize) -> Vec<Vec<u8>> {
    flat.chunks_exact(size.next_multiple_of(8))
        .map(|c| c[..size].to_vec())
        .collect()
}

/// Adds `n` to u64 number `word` of every CPU's value in `flat`.
fn bump(flat: &mut [u8], size: usize, word: usize, n: u64) {
    for cpu in flat.chunks_exact_mut(size.next_multiple_of(8)) {
        let w = &mut cpu[word * 8..word * 8 + 8];
        let v = u64::from_ne_bytes(w.try_into().unwrap()).wrapping_add(n);
        w.copy_from_slice(&v.to_ne_bytes());
    }
}

/// This thread's CPU time: on a shared machine, wall time would count the
/// time the thread waited for a CPU.
#[derive(Clone, Copy)]
struct Instant(Duration);

impl Instant {
    fn now() -> Self {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: ts is a valid timespec to write.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        Instant(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }
}

impl std::ops::Sub for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Runs `polls` polls (after a first one that resolves every site) with
/// `sites_per_reason` pending call sites per reason; prints the median of
/// each part and of the whole, in µs, if `print`.
fn run(sites_per_reason: usize, polls: usize, print: bool) {
    let counts_size = size_of::<types::td_counts>();
    let mut counts = vec![0u8; CPUS * counts_size.next_multiple_of(8)];
    let mut reasons = Reasons::new(REASONS);
    let slots: Vec<u32> = (0..REASONS)
        .map(|i| reasons.slot(&format!("REASON_{i}")))
        .collect();
    assert_eq!(slots[0], FIRST_REASON);
    // Every site's first calls, pending per CPU: the table keeps them
    // after resolution, so every poll reads every site.
    let sites: Vec<(u64, u32, Vec<u8>)> = (0..REASONS * sites_per_reason)
        .map(|i| {
            let ret = 0xffff_ffff_8100_0000 + 0x40 * i as u64;
            let mut flat = vec![0u8; CPUS * 8];
            bump(&mut flat, 8, 0, 1 + i as u64 % 7);
            (ret, slots[i / sites_per_reason], flat)
        })
        .collect();
    let trigger = Trigger::new(
        Config {
            threshold: 80.0,
            min_events: 10,
            min_rate: 20.0,
            auto: true,
        },
        None,
    );
    let mut state = State::new(
        trigger,
        vec![0; NR_SLOTS],
        Stats::default(),
        ProgStats::default(),
    );
    let mut poller = Poller::default();
    let (mut t_counts, mut t_pending, mut t_copies, mut t_tick, mut t_interval, mut t_total) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let tick = TICK.as_secs_f64();
    for p in 0..=polls {
        // Calls since the last poll, on every CPU, in every reason's slot.
        for (i, &s) in slots.iter().enumerate() {
            bump(
                &mut counts,
                counts_size,
                s as usize,
                1 + (i + p) as u64 % 13,
            );
        }
        let t0 = Instant::now();
        let slot_counts = abi::slots_of(&percpu(&counts, counts_size));
        let t1 = Instant::now();
        let read: Vec<(Vec<u8>, Vec<Vec<u8>>)> = sites
            .iter()
            .map(|(ret, _, flat)| (ret.to_ne_bytes().to_vec(), percpu(flat, 8)))
            .collect();
        let t1b = Instant::now();
        let pending: Vec<(u64, u64)> = read
            .iter()
            .map(|(key, values)| {
                let k = <[u8; 8]>::try_from(key.as_slice()).unwrap();
                (u64::from_ne_bytes(k), abi::sum_percpu::<1>(values)[0])
            })
            .collect();
        drop(read);
        let cur = poller
            .merge(slot_counts, pending, |ret| {
                Ok(sites.iter().find(|s| s.0 == ret).map_or(0, |s| s.1))
            })
            .unwrap();
        let t2 = Instant::now();
        if !print {
            // Not timed: the totals are the counts with every site's
            // pending calls under its reason.
            let mut want = abi::slots_of(&percpu(&counts, counts_size));
            for (_, slot, flat) in &sites {
                want[*slot as usize] += abi::sum_percpu::<1>(&percpu(flat, 8))[0];
            }
            assert_eq!(cur, want, "poll {p}");
        }
        let now = p as f64 * tick;
        black_box(state.tick(now, (now * 1e9) as u64, &cur));
        let t3 = Instant::now();
        // The drop counters come from map reads, left out like the others.
        let counters = (Stats::default(), ProgStats::default());
        black_box(state.interval(cur, counters, tick, &reasons, (now, clock())));
        let t4 = Instant::now();
        // Poll 0 resolves every site: not the steady state.
        if p > 0 {
            t_counts.push(t1 - t0);
            t_pending.push(t2 - t1);
            t_copies.push(t1b - t1);
            t_tick.push(t3 - t2);
            t_interval.push(t4 - t3);
            t_total.push(t4 - t0);
        }
    }
    if !print {
        return;
    }
    println!(
        "poll-bench: {REASONS} reasons, {} pending sites, {CPUS} CPUs, median of {polls} polls (CPU time): \
         {:.1} us per poll (counts {:.1}, pending sites {:.1} of which their per-CPU Vecs \
         {:.1}, tick {:.1}, interval {:.1}); worst {:.1} us",
        sites.len(),
        micros(median(&mut t_total)),
        micros(median(&mut t_counts)),
        micros(median(&mut t_pending)),
        micros(median(&mut t_copies)),
        micros(median(&mut t_tick)),
        micros(median(&mut t_interval)),
        micros(*t_total.iter().max().unwrap()),
    );
}

#[test]
#[ignore = "a benchmark: prints figures (cargo test --release poll_bench -- --ignored --nocapture)"]
fn poll_cost_128_reasons_256_cpus() {
    run(1, POLLS, true);
    run(4, POLLS, true);
}

/// The benchmark's code path, a few polls, no figures.
#[test]
fn poll_bench_runs() {
    run(1, 3, false);
}
