//! Deeper-frame rules: walked with bpf_loop or unrolled, known at load or
//! filled in after, with the calls before them kept with their frames.

use super::*;

#[test]
fn deep_rules_fall_back_to_the_callers_reason_when_no_frame_matches() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    for loop_helper in [false, true] {
        deep_rules_fall_back(loop_helper);
    }
}

// No frame above the caller lies in the rule's range, so the caller's
// default reason must be used, never a pending or lost count.
fn deep_rules_fall_back(loop_helper: bool) {
    let mut storage = MaybeUninit::uninit();
    let config = LoadConfig {
        func_addr: FUNC,
        deep: Some(
            Deep::one_rule(
                (0xffffffff81000000, 0xffffffff81001000),
                9,
                (0xffffffff81002000, 0xffffffff81003000),
                10,
                4,
            )
            .tables(),
        ),
        ..LoadConfig::default()
    };
    let p = load_walking_rules(&mut storage, &config, loop_helper);
    p.test_count(0xffffffff81000010, 6);
    let c = p.maps().counts().unwrap();
    assert_eq!(c[9], 6);
    assert_eq!(c[10], 0);
    assert!(p.maps().pending().unwrap().is_empty());
    assert_eq!(unwind_failures(&p), 0);
}

/// The deeper-frame callers' calls whose unwind failed, as the BPF side
/// counted them.
fn unwind_failures(p: &Probe<'_>) -> u64 {
    p.maps()
        .stats()
        .unwrap()
        .get(Stat::TD_STAT_DEEP_UNWIND_FAILED)
}

const B: u64 = 0xffffffff80000000;

/// Caller range [0x1000, 0x2000), rule 1: a frame in [0x5000, 0x6000)
/// within 2 frames means slot 10; rule 2: a frame in [0x7000, 0x8000)
/// within 4 frames means slot 11; otherwise slot 9.
fn deep_tables() -> Deep {
    Deep {
        callers: vec![DeepCaller {
            lo: B + 0x1000,
            hi: B + 0x2000,
            rule_first: 0,
            rule_count: 2,
            reason: 9,
        }],
        rules: vec![
            DeepRule {
                lo: B + 0x5000,
                hi: B + 0x6000,
                reason: 10,
                depth: 2,
            },
            DeepRule {
                lo: B + 0x7000,
                hi: B + 0x8000,
                reason: 11,
                depth: 4,
            },
        ],
    }
}

/// Made-up stacks for deep_tables(): the frames above the caller, and the
/// slot the rules give.
const DEEP_CASES: [(&[u64], usize); 9] = [
    (&[B + 0x5010], 10),                                     // rule 1 at depth 1
    (&[B + 0x3000, B + 0x5010], 10),                         // rule 1 at depth 2
    (&[B + 0x3000, B + 0x3000, B + 0x5010], 9),              // rule 1 too deep
    (&[B + 0x3000, B + 0x3000, B + 0x3000, B + 0x7010], 11), // rule 2 at depth 4
    (&[B + 0x7010, B + 0x5010], 10),                         // both: the first rule wins
    (&[B + 0x6000], 10),                                     // return address at hi: inside (-1)
    (&[B + 0x5000], 9),                                      // return address at lo: outside
    (&[0, B + 0x5010], 9),                                   // the stack ends at a zero frame
    (
        &[B + 0x3000, B + 0x3000, B + 0x3000, B + 0x3000, B + 0x7010],
        9,
    ), // rule 2 too deep
];

const DEEP_CALLER: u64 = B + 0x1010;

/// Runs each DEEP_CASES stack i+1 times (caller DEEP_CALLER) and returns
/// the calls each slot should have.
fn run_deep_cases(p: &Probe<'_>) -> [u64; 12] {
    let mut want = [0u64; 12];
    for (i, (above, slot)) in DEEP_CASES.iter().enumerate() {
        let mut frames = vec![DEEP_CALLER];
        frames.extend_from_slice(above);
        p.test_count_stack(&frames, (i + 1) as u32);
        want[*slot] += (i + 1) as u64;
    }
    want
}

/// Deeper-frame rules on made-up stacks (deep_tables, DEEP_CASES), known
/// at load; walked with bpf_loop and without.
#[test]
fn deep_rules_match_frames_within_their_depth_first_rule_first() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    for loop_helper in [false, true] {
        deep_rules_match(loop_helper);
    }
}

fn deep_rules_match(loop_helper: bool) {
    let mut storage = MaybeUninit::uninit();
    let config = LoadConfig {
        func_addr: FUNC,
        deep: Some(deep_tables().tables()),
        ..LoadConfig::default()
    };
    let p = load_walking_rules(&mut storage, &config, loop_helper);
    let want = run_deep_cases(&p);
    let c = p.maps().counts().unwrap();
    assert_eq!(
        &c[9..12],
        &want[9..12],
        "slots 9, 10, 11, bpf_loop: {loop_helper}"
    );
    assert_eq!(c.iter().sum::<u64>(), want.iter().sum::<u64>());
    assert!(p.maps().pending().unwrap().is_empty());
    assert_eq!(unwind_failures(&p), 0);
}

/// The same stacks before the rules are filled in: counted in the early
/// table with the frames the rules look at, and given there, by the user
/// space mirror of the rules, the slots the BPF side gives the same stacks
/// once the rules are in. A site with no rules waits there too, and is
/// resolved as any pending site.
#[test]
fn calls_before_the_rules_are_kept_with_their_frames_and_agree_after() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    for loop_helper in [false, true] {
        calls_before_the_rules(loop_helper);
    }
}

/// The self-test program for deep_tables() with the rules not filled in
/// yet, as in the moments after attaching; and the rules, for set_deep.
fn load_before_the_rules(
    storage: &mut MaybeUninit<libbpf_rs::OpenObject>,
    loop_helper: bool,
) -> (Probe<'_>, Deep) {
    let deep = deep_tables();
    let config = LoadConfig {
        func_addr: FUNC,
        deep_depth: deep.depth(),
        ..LoadConfig::default()
    };
    (load_walking_rules(storage, &config, loop_helper), deep)
}

fn calls_before_the_rules(loop_helper: bool) {
    let mut storage = MaybeUninit::uninit();
    let (p, deep) = load_before_the_rules(&mut storage, loop_helper);
    let want = run_deep_cases(&p);
    let plain = B + 0x9010;
    p.test_count_stack(&[plain, B + 0x5010], 3);
    assert!(p.maps().counts().unwrap().iter().all(|&n| n == 0));
    assert!(p.maps().pending().unwrap().is_empty());
    let mut early = Pending::default();
    p.maps().read_early(&mut early).unwrap();
    let mut got = [0u64; 12];
    let mut plain_calls = 0;
    for (key, n) in early.entries() {
        // Frames past the deepest rule's depth are not kept.
        assert!(
            key[1 + deep.depth() as usize..].iter().all(|&f| f == 0),
            "{key:x?}"
        );
        match deep.slot(key[0], &key[1..]) {
            Some(slot) => got[slot as usize] += n,
            None => {
                assert_eq!(key[0], plain);
                plain_calls += n;
            }
        }
    }
    assert_eq!(got, want, "early calls by the user space rules");
    assert_eq!(plain_calls, 3);

    p.maps().set_deep(&deep);
    let again = run_deep_cases(&p);
    assert_eq!(again, want);
    let c = p.maps().counts().unwrap();
    assert_eq!(&c[..12], &want, "calls after the rules, by the BPF side");
    // Nothing more in the early table; the plain site is pending now.
    p.test_count_stack(&[plain], 2);
    let mut after = Pending::default();
    p.maps().read_early(&mut after).unwrap();
    let mut before: Vec<_> = early.entries().map(|(k, n)| (k.to_vec(), n)).collect();
    let mut now: Vec<_> = after.entries().map(|(k, n)| (k.to_vec(), n)).collect();
    before.sort();
    now.sort();
    assert_eq!(now, before);
    assert_eq!(p.maps().pending().unwrap(), vec![(plain, 2)]);
}

/// A call from a deeper-frame caller whose unwind fails takes the caller's
/// own reason and counts as a deep unwind failure: by the BPF side once
/// the rules are in, and by user space from the early table before.
#[test]
fn unwind_failures_count_the_same_before_and_after_the_rules() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    let mut storage = MaybeUninit::uninit();
    let (p, deep) = load_before_the_rules(&mut storage, true);
    p.test_count_stack(&[DEEP_CALLER, abi::NO_FRAMES], 3);
    // A plain site's failed unwind changes nothing: it is not counted as one.
    p.test_count_stack(&[B + 0x9010, abi::NO_FRAMES], 2);
    let mut early = Pending::default();
    p.maps().read_early(&mut early).unwrap();
    let mut keys: Vec<_> = early.entries().map(|(k, n)| (k[..3].to_vec(), n)).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            (vec![DEEP_CALLER, abi::NO_FRAMES, 0], 3),
            (vec![B + 0x9010, abi::NO_FRAMES, 0], 2)
        ]
    );
    assert_eq!(deep.slot(DEEP_CALLER, &keys[0].0[1..]), Some(9));
    assert_eq!(deep.unwind_failures(&early), 3);
    assert_eq!(
        unwind_failures(&p),
        0,
        "the BPF side counts none before the rules"
    );

    p.maps().set_deep(&deep);
    p.test_count_stack(&[DEEP_CALLER, abi::NO_FRAMES], 4);
    assert_eq!(p.maps().counts().unwrap()[9], 4);
    assert_eq!(unwind_failures(&p), 4);
}
