//! What pruning saves a poll: the time to read the pending table with the
//! resolved sites' entries left in it (as before pruning) against an empty
//! one (a live run prunes them a second or two after resolving them), on
//! the host's kernel, and the one-time cost of pruning an entry. Prints
//! figures and asserts nothing about time:
//!
//! ```text
//! cargo test --release prune_bench -- --ignored --nocapture
//! ```

use super::*;

/// Reads of the table per figure.
const READS: u32 = 200;

/// The mean time of one whole read of `p`'s pending table.
fn read_time(p: &Probe<'_>, buf: &mut Pending) -> Duration {
    let start = Instant::now();
    for _ in 0..READS {
        p.maps().read_pending(buf).unwrap();
    }
    start.elapsed() / READS
}

#[test]
#[ignore]
fn prune_bench() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    let cpus = libbpf_rs::num_possible_cpus().unwrap();
    println!("pending table reads, {cpus} possible CPUs, mean of {READS} whole reads:");
    for n in [0u64, 1_000, 4_000, 16_000] {
        let mut storage = MaybeUninit::uninit();
        let config = LoadConfig {
            func_addr: FUNC,
            ..LoadConfig::default()
        };
        let p = selftest::load(&mut storage, &config);
        let sites: Vec<u64> = (0..n).map(|i| 0xffffffff81000000 + 0x40 * i).collect();
        for &ret in &sites {
            p.test_count(ret, 1);
        }
        let mut buf = Pending::default();
        let kept = read_time(&p, &mut buf);
        let start = Instant::now();
        for &ret in &sites {
            p.maps().take_pending(ret).unwrap();
        }
        let prune = start.elapsed();
        let pruned = read_time(&p, &mut buf);
        println!(
            "  {n:>6} resolved sites: read {:>9.1} us kept, {:>6.1} us pruned; pruning them once {:.1} ms ({:.2} us a site)",
            kept.as_secs_f64() * 1e6,
            pruned.as_secs_f64() * 1e6,
            prune.as_secs_f64() * 1e3,
            prune.as_secs_f64() * 1e6 / n.max(1) as f64,
        );
    }
}
