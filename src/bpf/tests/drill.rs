//! --drill in the kernel: a captured reason's calls counted by path,
//! exactly, on stacks made up by the test (the self-test program's
//! synthetic unwind); the table's limit counted, never lost.

use super::*;
use crate::bpf::drilled::DrilledPath;

const A: u32 = 2;
const B: u32 = 3;
const SITE_A: u64 = 0xffffffff81000010;
const SITE_B: u64 = 0xffffffff81001010;
/// A pending site inside A's caller range.
const PENDING_A: u64 = 0xffffffff81000090;
const A_RANGE: (u64, u64) = (0xffffffff81000000, 0xffffffff81000100);

fn f(n: u64) -> u64 {
    0xffffffff81100000 + n * 0x40
}

/// A's calls by path, sorted, and A's calls the full table left out.
fn drilled(p: &Probe<'_>, slot: u32) -> (Vec<(Vec<u64>, bool, u64)>, u64) {
    let d = p.maps().drilled().expect("the path table");
    let mut paths: Vec<_> = d
        .paths
        .into_iter()
        .filter(|x| x.slot == slot)
        .map(
            |DrilledPath {
                 frames,
                 unwound,
                 calls,
                 ..
             }| (frames, unwound, calls),
        )
        .collect();
    paths.sort();
    let full = d.full.iter().filter(|x| x.0 == slot).map(|x| x.1).sum();
    (paths, full)
}

fn load_drilling(
    storage: &mut MaybeUninit<libbpf_rs::OpenObject>,
    levels: u32,
    loop_helper: bool,
) -> Probe<'_> {
    let config = LoadConfig {
        drill_levels: levels,
        no_pool: true,
        ..capture_config()
    };
    let p = load_walking_rules(storage, &config, loop_helper);
    p.maps().add_site(SITE_A, A).unwrap();
    p.maps().add_site(SITE_B, B).unwrap();
    p.maps().refill_every(u64::MAX).unwrap();
    p.maps()
        .capture_set(&[Captured {
            slot: A,
            callers: vec![A_RANGE],
        }])
        .unwrap();
    assert!(p.maps().drills());
    p
}

/// Each of A's calls is counted under its frames from the caller up, as
/// deep as --drill-levels (3 here) or the stack goes; a pending site's by
/// its caller range; an unwind that found no caller as such; B, not
/// captured, nowhere.
#[test]
fn a_captured_reasons_calls_are_counted_by_path() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    for loop_helper in [false, true] {
        let mut storage = MaybeUninit::uninit();
        let p = load_drilling(&mut storage, 3, loop_helper);
        p.test_count_stack(&[SITE_A, f(1), f(2), f(3)], 5);
        p.test_count_stack(&[SITE_A, f(1), f(2), f(4)], 2); // the same to level 3
        p.test_count_stack(&[SITE_A, f(1), f(5)], 3);
        p.test_count_stack(&[SITE_A, f(6)], 1); // the stack ends at level 2
        p.test_count_stack(&[PENDING_A, f(1), f(2)], 4);
        p.test_count_stack(&[SITE_A, abi::NO_FRAMES], 1);
        p.test_count_stack(&[SITE_B, f(1), f(2)], 7);
        let (paths, full) = drilled(&p, A);
        assert_eq!(
            paths,
            vec![
                (vec![SITE_A], false, 1),
                (vec![SITE_A, f(1), f(2)], true, 7),
                (vec![SITE_A, f(1), f(5)], true, 3),
                (vec![SITE_A, f(6)], true, 1),
                (vec![PENDING_A, f(1), f(2)], true, 4),
            ],
            "bpf_loop: {loop_helper}"
        );
        assert_eq!(full, 0);
        assert_eq!(drilled(&p, B), (vec![], 0));
        // Every call of A at the gate is on one path.
        let gate = p.maps().reason_stacks([A]).unwrap()[A as usize];
        assert_eq!(gate[StackStat::TD_STACK_MATCHED.0 as usize], 16);
    }
}

/// Paths past the table's 512 are counted as full, by reason: a path
/// never lost, and the paths and the full count add up to the calls.
#[test]
fn paths_past_the_table_are_counted_as_full() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    let mut storage = MaybeUninit::uninit();
    let p = load_drilling(&mut storage, 2, true);
    let max = abi::MAX_PATHS as u64;
    for n in 0..max + 40 {
        p.test_count_stack(&[SITE_A, f(n + 1)], 1);
    }
    // A path already in the table is still counted there.
    p.test_count_stack(&[SITE_A, f(1)], 2);
    let (paths, full) = drilled(&p, A);
    assert_eq!(paths.len() as u64, max);
    assert_eq!(full, 40);
    let counted: u64 = paths.iter().map(|x| x.2).sum();
    assert_eq!(counted + full, max + 40 + 2);
}
