//! A synthetic benchmark of one poll's user-space work, with no kernel:
//! 128 reasons and 256 or 1,024 CPUs of per-CPU values through the code a
//! poll runs. What it times, per poll:
//!
//! - counts: the counter array's per-CPU values, as the kernel copies them
//!   into the poller's buffer, summed into the slots (`Poller::slots`);
//! - pending: every pending call site's per-CPU counts, as batch lookups
//!   copy them into the poller's buffer, summed per site and added under
//!   the sites' slots (`Poller::add_pending`);
//! - fresh: every CPU's fresh table (`percpu::fresh_sites`), each CPU with
//!   as many taken entries as there are pending sites, up to the table's
//!   size;
//! - tick: `State::tick`, the trigger's decision over the last second;
//! - interval: the drop counters (`Poller::stats_of`) and
//!   `State::interval`, a print interval's figures with reason names (each
//!   print interval, not each tick; included in the total, so the total is
//!   the dearest kind of poll).
//!
//! Times are this thread's CPU time (the machine may be shared). Left out:
//! the map reads themselves (one `bpf()` call for the counters, one batch
//! call or a few for the pending table, one for the statistics at a print
//! interval, and the kernel's copying into the buffers, which the
//! benchmark does untimed) and the printing. It prints
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

use crate::bpf::abi::{FIRST_REASON, NR_SLOTS};
use crate::bpf::percpu::{self, PerCpu, Stats};
use crate::bpf::probe::ProgStats;
use crate::bpf::skel::types;
use crate::reasons::Reasons;
use crate::report::time::clock;
use crate::session::poll::Poller;
use crate::session::state::State;
use crate::session::timing::TICK;
use crate::session::trigger::{Trigger, TriggerConfig};

const REASONS: usize = 128;
/// Polls per figure in the benchmark.
const POLLS: usize = 2000;

/// Adds `n` to u64 number `word` of every CPU's value in `flat`.
fn bump(flat: &mut [u64], stride: usize, word: usize, n: u64) {
    for cpu in flat.chunks_exact_mut(stride) {
        cpu[word] = cpu[word].wrapping_add(n);
    }
}

/// What the kernel's copies leave in the poller's buffers (not timed: the
/// map reads are left out): the counter array's value, then the pending
/// table in batches of the room `Maps::read_pending` gives each.
fn kernel_copy(
    poller: &mut Poller,
    cpus: usize,
    counts: &[u64],
    stride: usize,
    sites: &[(u64, u32, Vec<u64>)],
) {
    let (c, pending) = poller.buffers();
    c.stride = stride;
    c.words.clear();
    c.words.extend_from_slice(counts);
    let room = pending.len() + 64;
    pending.clear(cpus, 1);
    for batch in sites.chunks(room) {
        let (keys, values) = pending.spare(room);
        for (i, (ret, _, flat)) in batch.iter().enumerate() {
            keys[i] = *ret;
            values[i * cpus..(i + 1) * cpus].copy_from_slice(flat);
        }
        pending.filled(batch.len());
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

/// Pending call sites, each with its return address, its reason's slot
/// and its per-CPU counts.
type PendingSites = Vec<(u64, u32, Vec<u64>)>;

/// REASONS named reasons and `sites_per_reason` call sites of each,
/// pending with their first calls on every CPU: the table keeps them after
/// resolution, so every poll reads every site.
fn reasons_and_sites(cpus: usize, sites_per_reason: usize) -> (Reasons, Vec<u32>, PendingSites) {
    let mut reasons = Reasons::new(REASONS);
    let slots: Vec<u32> = (0..REASONS)
        .map(|i| reasons.slot(&format!("REASON_{i}")))
        .collect();
    assert_eq!(slots[0], FIRST_REASON);
    let sites = (0..REASONS * sites_per_reason)
        .map(|i| {
            let ret = 0xffff_ffff_8100_0000 + 0x40 * i as u64;
            let mut flat = vec![0u64; cpus];
            bump(&mut flat, 1, 0, 1 + i as u64 % 7);
            (ret, slots[i / sites_per_reason], flat)
        })
        .collect();
    (reasons, slots, sites)
}

/// Entries of a CPU's fresh table.
const FRESH: usize = types::td_abi::TD_FRESH.0 as usize;

/// Every CPU's fresh table as the kernel copies it out: the first sites,
/// as many as it holds, in entries of their own on every CPU.
fn fresh_tables(cpus: usize, sites: &PendingSites) -> PerCpu {
    let stride = size_of::<types::td_fresh>() / 8;
    let mut words = vec![0u64; cpus * stride];
    for cpu in words.chunks_exact_mut(stride) {
        for (e, (ret, _, _)) in cpu.chunks_exact_mut(2).zip(sites) {
            (e[0], e[1]) = (*ret, 1);
        }
    }
    PerCpu { stride, words }
}

/// A run's state with the trigger on, from zero.
fn auto_state() -> State {
    let trigger = Trigger::new(
        TriggerConfig {
            threshold: 80.0,
            min_events: 10,
            min_rate: 20.0,
            auto: true,
        },
        None,
    );
    State::new(
        trigger,
        vec![0; NR_SLOTS],
        Stats::default(),
        ProgStats::default(),
    )
}

/// The totals a poll must give: the counts with every site's pending calls
/// under its reason.
fn expected_totals(counts: &[u64], stride: usize, sites: &PendingSites) -> Vec<u64> {
    let mut want = vec![0u64; NR_SLOTS];
    for cpu in counts.chunks_exact(stride) {
        for (w, c) in want.iter_mut().zip(cpu) {
            *w += c;
        }
    }
    for (_, slot, flat) in sites {
        want[*slot as usize] += flat.iter().sum::<u64>();
    }
    want
}

/// The time of each part of every poll timed.
#[derive(Default)]
struct Times {
    counts: Vec<Duration>,
    pending: Vec<Duration>,
    fresh: Vec<Duration>,
    tick: Vec<Duration>,
    interval: Vec<Duration>,
    total: Vec<Duration>,
}

impl Times {
    /// Takes the times of one poll, from the instants between its parts.
    fn push(&mut self, t: [Instant; 6]) {
        self.counts.push(t[1] - t[0]);
        self.pending.push(t[2] - t[1]);
        self.fresh.push(t[3] - t[2]);
        self.tick.push(t[4] - t[3]);
        self.interval.push(t[5] - t[4]);
        self.total.push(t[5] - t[0]);
    }

    fn print(&mut self, cpus: usize, sites: usize, polls: usize) {
        println!(
            "poll-bench: {REASONS} reasons, {sites} pending sites, {cpus} CPUs, median of {polls} polls (CPU time): \
             {:.1} us per poll (counts {:.1}, pending sites {:.1}, fresh tables {:.1}, tick {:.1}, interval {:.1}); \
             worst {:.1} us",
            micros(median(&mut self.total)),
            micros(median(&mut self.counts)),
            micros(median(&mut self.pending)),
            micros(median(&mut self.fresh)),
            micros(median(&mut self.tick)),
            micros(median(&mut self.interval)),
            micros(*self.total.iter().max().unwrap()),
        );
    }
}

/// Runs `polls` polls (after a first one that resolves every site) with
/// `sites_per_reason` pending call sites per reason; prints the median of
/// each part and of the whole, in µs, if `print`.
fn run(cpus: usize, sites_per_reason: usize, polls: usize, print: bool) {
    let stride = size_of::<types::td_counts>() / 8;
    let mut counts = vec![0u64; cpus * stride];
    let (reasons, slots, sites) = reasons_and_sites(cpus, sites_per_reason);
    let fresh = fresh_tables(cpus, &sites);
    let mut state = auto_state();
    let mut poller = Poller::default();
    let stats_stride = size_of::<types::td_stats>() / 8;
    let rare = PerCpu {
        stride: stats_stride,
        words: vec![1; cpus * stats_stride],
    };
    let mut times = Times::default();
    let tick = TICK.as_secs_f64();
    for p in 0..=polls {
        // Calls since the last poll, on every CPU, in every reason's slot.
        for (i, &s) in slots.iter().enumerate() {
            bump(&mut counts, stride, s as usize, 1 + (i + p) as u64 % 13);
        }
        kernel_copy(&mut poller, cpus, &counts, stride, &sites);
        let t0 = Instant::now();
        let mut cur = poller.slots();
        let t1 = Instant::now();
        poller
            .add_pending(&mut cur, |ret| {
                Ok(sites.iter().find(|s| s.0 == ret).map_or(0, |s| s.1))
            })
            .unwrap();
        let t2 = Instant::now();
        let taken = black_box(percpu::fresh_sites(black_box(&fresh)));
        let t3 = Instant::now();
        if !print {
            assert_eq!(taken.len(), sites.len().min(FRESH), "poll {p}");
            // Not timed.
            assert_eq!(cur, expected_totals(&counts, stride, &sites), "poll {p}");
        }
        let now = p as f64 * tick;
        black_box(state.tick(now, (now * 1e9) as u64, &cur));
        let t4 = Instant::now();
        // The drop counters: the statistics map's values (its read left
        // out like the others) with the stack path's counters from the
        // counter array summed above; the program's run statistics come
        // from a bpf() call, left out.
        let counters = (poller.stats_of(&rare), ProgStats::default());
        black_box(state.interval(cur, counters, tick, &reasons, (now, clock())));
        let t5 = Instant::now();
        // Poll 0 resolves every site: not the steady state.
        if p > 0 {
            times.push([t0, t1, t2, t3, t4, t5]);
        }
    }
    if print {
        times.print(cpus, sites.len(), polls);
    }
}

#[test]
#[ignore = "a benchmark: prints figures (cargo test --release poll_bench -- --ignored --nocapture)"]
fn poll_cost_128_reasons_256_and_1024_cpus() {
    for cpus in [256, 1024] {
        run(cpus, 1, POLLS, true);
        run(cpus, 4, POLLS, true);
    }
}

/// The benchmark's code path, a few polls, no figures.
#[test]
fn poll_bench_runs() {
    run(4, 1, 3, false);
}
