//! The counting path's BPF code, run for real on the host kernel through
//! BPF_PROG_TEST_RUN on a raw_tp wrapper (this host refuses fentry; the
//! guest tests cover attaching). Needs root, as CI has.

use std::mem::MaybeUninit;

use libbpf_rs::skel::OpenSkel;
use topdown::kallsyms::Kallsyms;
use topdown::poll::Poller;
use topdown::probe::{self, Mode, Probe, Settings};
use topdown::reasons::{Mapper, SLOT_NOT_FOUND};

const KSYMS: &str = "\
ffffffff81000000 T caller_a
ffffffff81001000 t caller_b.isra.0
ffffffff81002000 T caller_c
ffffffff81003000 T end_of_text
";

fn with_probe(f: impl FnOnce(&Probe<'_>)) {
    let mut storage = MaybeUninit::uninit();
    let settings = Settings {
        func: "selftest".into(),
        func_addr: 0xffffffff82000000,
        ..Settings::default()
    };
    let open = probe::open_selftest(&mut storage, &settings).expect("open");
    let skel = open
        .load()
        .expect("load the raw_tp self-test program (needs root)");
    f(&Probe::new(skel, Mode::Kprobe, "selftest", None));
}

#[test]
fn new_sites_are_pending_then_counted_in_their_slot() {
    with_probe(|p| {
        let a = 0xffffffff81000123;
        p.test_count(a, 3).unwrap();
        assert_eq!(p.pending().unwrap(), vec![(a, 3)]);
        assert!(p.counts().unwrap().iter().all(|&n| n == 0));

        assert!(p.add_site(a, 7).unwrap());
        p.test_count(a, 5).unwrap();
        assert_eq!(p.counts().unwrap()[7], 5);
        // The pending count is frozen once the site is known.
        assert_eq!(p.pending().unwrap(), vec![(a, 3)]);
    });
}

#[test]
fn a_missing_return_address_counts_as_not_found() {
    with_probe(|p| {
        p.test_count(0, 4).unwrap();
        let c = p.counts().unwrap();
        assert_eq!(c[SLOT_NOT_FOUND as usize], 4);
        assert_eq!(c.iter().sum::<u64>(), 4);
        assert!(p.pending().unwrap().is_empty());
    });
}

#[test]
fn poller_totals_are_exact_across_resolution() {
    let k = Kallsyms::parse(KSYMS);
    with_probe(|p| {
        let mut m = Mapper::auto(64);
        let mut poller = Poller::default();
        let (a, b1, b2) = (0xffffffff81000010, 0xffffffff81001010, 0xffffffff81001800);
        p.test_count(a, 2).unwrap();
        p.test_count(b1, 1).unwrap();
        let t = poller.totals(p, &k, &mut m, None).unwrap();
        let sa = m.reasons.lookup("caller_a").unwrap();
        let sb = m.reasons.lookup("caller_b").unwrap();
        assert_eq!((t[sa as usize], t[sb as usize]), (2, 1));

        // Resolved sites now count in the array; a second call site of
        // caller_b appears and is pending for one poll.
        p.test_count(a, 10).unwrap();
        p.test_count(b1, 20).unwrap();
        p.test_count(b2, 30).unwrap();
        let t = poller.totals(p, &k, &mut m, None).unwrap();
        assert_eq!((t[sa as usize], t[sb as usize]), (12, 51));
        assert_eq!(t.iter().sum::<u64>(), 63);
        p.test_count(b2, 1).unwrap();
        let t = poller.totals(p, &k, &mut m, None).unwrap();
        assert_eq!(t[sb as usize], 52);
        assert_eq!(poller.sites(), 3);
    });
}

#[test]
fn deep_rules_fall_back_to_the_callers_reason_when_no_frame_matches() {
    // No frame above the caller lies in the rule's range, so the caller's
    // default reason must be used, never a pending or lost count.
    let mut storage = MaybeUninit::uninit();
    let settings = Settings {
        func: "selftest".into(),
        func_addr: 0xffffffff82000000,
        callers: vec![probe::DeepCaller {
            lo: 0xffffffff81000000,
            hi: 0xffffffff81001000,
            rule_first: 0,
            rule_count: 1,
            reason: 9,
        }],
        rules: vec![probe::DeepRule {
            lo: 0xffffffff81002000,
            hi: 0xffffffff81003000,
            reason: 10,
            depth: 4,
        }],
        ..Settings::default()
    };
    let open = probe::open_selftest(&mut storage, &settings).expect("open");
    let p = Probe::new(open.load().expect("load"), Mode::Kprobe, "selftest", None);
    p.test_count(0xffffffff81000010, 6).unwrap();
    let c = p.counts().unwrap();
    assert_eq!(c[9], 6);
    assert_eq!(c[10], 0);
    assert!(p.pending().unwrap().is_empty());
    assert_eq!(p.stats().unwrap().deep_unwind_failed, 0);
}

/// Deeper-frame rules on made-up stacks: caller range [0x1000, 0x2000),
/// rule 1: a frame in [0x5000, 0x6000) within 2 frames means slot 10;
/// rule 2: a frame in [0x7000, 0x8000) within 4 frames means slot 11;
/// otherwise slot 9.
#[test]
fn deep_rules_match_frames_within_their_depth_first_rule_first() {
    const B: u64 = 0xffffffff80000000;
    let mut storage = MaybeUninit::uninit();
    let settings = Settings {
        func: "selftest".into(),
        func_addr: 0xffffffff82000000,
        callers: vec![probe::DeepCaller {
            lo: B + 0x1000,
            hi: B + 0x2000,
            rule_first: 0,
            rule_count: 2,
            reason: 9,
        }],
        rules: vec![
            probe::DeepRule {
                lo: B + 0x5000,
                hi: B + 0x6000,
                reason: 10,
                depth: 2,
            },
            probe::DeepRule {
                lo: B + 0x7000,
                hi: B + 0x8000,
                reason: 11,
                depth: 4,
            },
        ],
        ..Settings::default()
    };
    let open = probe::open_selftest(&mut storage, &settings).expect("open");
    let p = Probe::new(open.load().expect("load"), Mode::Kprobe, "selftest", None);
    let caller = B + 0x1010;
    let other = B + 0x3000;
    // (frames above the caller, expected slot)
    let cases: [(&[u64], usize); 8] = [
        (&[B + 0x5010], 10),                      // rule 1 at depth 1
        (&[other, B + 0x5010], 10),               // rule 1 at depth 2
        (&[other, other, B + 0x5010], 9),         // rule 1 too deep
        (&[other, other, other, B + 0x7010], 11), // rule 2 at depth 4
        (&[B + 0x7010, B + 0x5010], 10),          // both: the first rule wins
        (&[B + 0x6000], 10),                      // return address at hi: inside (-1)
        (&[B + 0x5000], 9),                       // return address at lo: outside
        (&[0, B + 0x5010], 9),                    // the stack ends at a zero frame
    ];
    let mut want = [0u64; 12];
    for (i, (above, slot)) in cases.iter().enumerate() {
        let mut frames = vec![caller];
        frames.extend_from_slice(above);
        p.test_count_stack(&frames, (i + 1) as u32).unwrap();
        want[*slot] += (i + 1) as u64;
    }
    let c = p.counts().unwrap();
    assert_eq!(&c[9..12], &want[9..12], "slots 9, 10, 11");
    assert_eq!(c.iter().sum::<u64>(), (1..=8).sum::<u64>());
    assert!(p.pending().unwrap().is_empty());
    assert_eq!(p.stats().unwrap().deep_unwind_failed, 0);
}
