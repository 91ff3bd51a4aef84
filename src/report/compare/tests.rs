use super::*;
use crate::report::fixtures::row;
use crate::report::saved::tests::sample;

const CFG: VerifyConfig = VerifyConfig {
    threshold: 80.0,
    drop: 50.0,
    fail_on_move: false,
};

fn dist(secs: f64, rows: &[(&str, u64)]) -> Distribution {
    let total: u64 = rows.iter().map(|r| r.1).sum();
    Distribution {
        secs,
        total,
        rate: total as f64 / secs,
        rows: rows
            .iter()
            .map(|&(n, c)| {
                let share = if total > 0 {
                    100.0 * c as f64 / total as f64
                } else {
                    0.0
                };
                row(n, c, c as f64 / secs, share)
            })
            .collect(),
    }
}

fn names(n: &[&str]) -> Vec<String> {
    n.iter().map(|s| s.to_string()).collect()
}

#[test]
fn rows_cover_both_sides_in_the_baselines_order() {
    let before = dist(10.0, &[("ZAP", 200), ("FAULT_ALLOC", 45), ("gone", 5)]);
    let now = dist(10.0, &[("FAULT_ALLOC", 90), ("new_caller", 7)]);
    let (bn, nn) = (
        names(&["ZAP", "FAULT_ALLOC", "gone"]),
        names(&["ZAP", "FAULT_ALLOC", "new_caller"]),
    );
    let c = changes(
        Side {
            calls: &before,
            named: &bn,
            gone: &[],
        },
        Side {
            calls: &now,
            named: &nn,
            gone: &[],
        },
    );
    let order: Vec<&str> = c.iter().map(|c| c.reason.as_str()).collect();
    assert_eq!(order, ["ZAP", "FAULT_ALLOC", "gone", "new_caller"]);
    // ZAP is known now, without calls: zeros, a 0x rate.
    assert_eq!(c[0].now, Some(Fig::default()));
    assert_eq!(c[0].rate_change(), Some(0.0));
    assert_eq!(c[0].share_change(), -80.0);
    assert_eq!(c[1].rate_change(), Some(2.0));
    // Known on one side only.
    assert_eq!((c[2].before.is_some(), c[2].now), (true, None));
    assert_eq!((c[3].before, c[3].rate_change()), (None, None));
    assert!((c[3].share_change() - 7.216).abs() < 0.001);
}

#[test]
fn verified_when_the_share_is_below_and_the_rate_halved() {
    let before = dist(10.0, &[("ZAP", 200), ("FAULT_ALLOC", 50)]);
    let n = names(&["ZAP", "FAULT_ALLOC"]);
    let now = dist(10.0, &[("FAULT_ALLOC", 60)]);
    let side = Side {
        calls: &now,
        named: &n,
        gone: &[],
    };
    let v = verdict(&before, side, true, CFG);
    assert_eq!(v.outcome, Outcome::Verified, "{}", v.why);
    assert_eq!(v.reason.as_deref(), Some("ZAP"));
    assert_eq!((v.drop, v.share_below, v.rate_dropped), (100.0, true, true));
    assert_eq!(
        v.why,
        "ZAP (the baseline's hot reason): share 0.0% (was 80.0%), below the 80% threshold; \
         rate fell 100.0%, from 20.0/s to 0.0/s (a fall of 50% needed)"
    );
    // Exactly the required fall is enough; a share at the threshold is not below it.
    let now = dist(10.0, &[("ZAP", 100), ("FAULT_ALLOC", 900)]);
    let v = verdict(
        &before,
        Side {
            calls: &now,
            ..side
        },
        true,
        CFG,
    );
    assert_eq!(v.outcome, Outcome::Verified, "{}", v.why);
    let now = dist(10.0, &[("ZAP", 80), ("FAULT_ALLOC", 20)]);
    let v = verdict(
        &before,
        Side {
            calls: &now,
            ..side
        },
        true,
        CFG,
    );
    assert_eq!(v.outcome, Outcome::NotVerified);
    assert!(!v.share_below && v.rate_dropped);
    assert!(
        v.why
            .contains("share 80.0% (was 80.0%), not below the 80% threshold; rate fell 60.0%"),
        "{}",
        v.why
    );
}

#[test]
fn not_verified_says_which_condition_failed() {
    let before = dist(10.0, &[("ZAP", 200), ("FAULT_ALLOC", 50)]);
    let n = names(&["ZAP", "FAULT_ALLOC"]);
    let side = |d| Side {
        calls: d,
        named: &n,
        gone: &[],
    };
    // The same workload: neither condition.
    let same = dist(10.0, &[("ZAP", 210), ("FAULT_ALLOC", 50)]);
    let v = verdict(&before, side(&same), true, CFG);
    assert_eq!(v.outcome, Outcome::NotVerified);
    assert!(!v.share_below && !v.rate_dropped);
    assert!(
        v.why
            .contains("not below the 80% threshold; rate rose 5.0%, from 20.0/s to 21.0/s"),
        "{}",
        v.why
    );
    // The share fell below the threshold but the rate only by a quarter:
    // other reasons grew.
    let diluted = dist(10.0, &[("ZAP", 150), ("FAULT_ALLOC", 150)]);
    let v = verdict(&before, side(&diluted), true, CFG);
    assert_eq!(v.outcome, Outcome::NotVerified);
    assert!(v.share_below && !v.rate_dropped);
    assert!(v.why.contains("rate fell only 25.0%"), "{}", v.why);
    // A stricter --verify-drop.
    let fewer = dist(10.0, &[("ZAP", 60), ("FAULT_ALLOC", 50)]);
    let strict = VerifyConfig { drop: 90.0, ..CFG };
    assert_eq!(
        verdict(&before, side(&fewer), true, strict).outcome,
        Outcome::NotVerified
    );
    assert_eq!(
        verdict(&before, side(&fewer), true, CFG).outcome,
        Outcome::Verified
    );
}

#[test]
fn too_few_calls_are_inconclusive() {
    let n = names(&["ZAP"]);
    let now = dist(10.0, &[]);
    let side = Side {
        calls: &now,
        named: &n,
        gone: &[],
    };
    let short = dist(1.0, &[("ZAP", 19)]);
    let v = verdict(&short, side, true, CFG);
    assert_eq!(v.outcome, Outcome::Inconclusive);
    assert_eq!(
        v.why,
        "the baseline is too short: 19 calls of ZAP, its hot reason (at least 20 needed to tell)"
    );
    let v = verdict(&dist(1.0, &[]), side, true, CFG);
    assert_eq!(v.outcome, Outcome::Inconclusive);
    assert_eq!(v.reason, None);
    // 20 calls in 10 s: 2/s, so this run needs 10 s to expect 20.
    let slow = dist(10.0, &[("ZAP", 20)]);
    // Long enough, but no calls at all: nothing shows the workload ran.
    let v = verdict(&slow, side, true, CFG);
    assert_eq!(v.outcome, Outcome::Inconclusive);
    assert_eq!(
        v.why,
        "this run saw too few calls to tell: 0 calls in 10.0s, at least 20 needed (did its workload run?)"
    );
    let few = dist(10.0, &[("FAULT_ALLOC", 19)]);
    let v = verdict(
        &slow,
        Side {
            calls: &few,
            ..side
        },
        true,
        CFG,
    );
    assert_eq!(v.outcome, Outcome::Inconclusive);
    assert!(v.why.contains(": 19 calls in 10.0s"), "{}", v.why);
    let busy = dist(10.0, &[("FAULT_ALLOC", 20)]);
    let v = verdict(
        &slow,
        Side {
            calls: &busy,
            ..side
        },
        true,
        CFG,
    );
    assert_eq!(v.outcome, Outcome::Verified, "{}", v.why);
    let brief = dist(5.0, &[]);
    let v = verdict(
        &slow,
        Side {
            calls: &brief,
            ..side
        },
        true,
        CFG,
    );
    assert_eq!(v.outcome, Outcome::Inconclusive);
    assert!(
        v.why.starts_with(
            "this run is too short: at the baseline's 2.0/s, ZAP would have made 10 calls in 5.0s"
        ),
        "{}",
        v.why
    );
}

#[test]
fn zero_rates_and_special_slots() {
    // No calls of ZAP now: 0% share and a 100% fall.
    let before = dist(10.0, &[("[caller not found]", 900), ("ZAP", 100)]);
    let mut before_special = before.clone();
    before_special.rows[0].special = true;
    let empty = dist(10.0, &[("FAULT_ALLOC", 50)]);
    let v = verdict(
        &before_special,
        Side {
            calls: &empty,
            named: &[],
            gone: &[],
        },
        true,
        VerifyConfig {
            threshold: 10.0,
            ..CFG
        },
    );
    // The special slot is never the hot reason.
    assert_eq!(v.reason.as_deref(), Some("ZAP"));
    assert_eq!(
        (v.outcome, v.now, v.drop),
        (Outcome::Verified, Fig::default(), 100.0)
    );
    // A reason with no rate before has no rate change.
    let c = Change {
        reason: "x".into(),
        before: Some(Fig::default()),
        now: Some(Fig::default()),
    };
    assert_eq!((c.rate_change(), c.share_change()), (None, 0.0));
}

#[test]
fn a_run_whose_process_exited_gives_no_verdict() {
    let before = dist(10.0, &[("ZAP", 200)]);
    let n = names(&["ZAP"]);
    // One call in 3 s, the -p process gone after half a second: its ZAP
    // rate reads as a 100% fall.
    let gone = ["pid 7 (sleep) exited 0.5s into the run".to_string()];
    let judge = |now: &Distribution| {
        let side = Side {
            calls: now,
            named: &n,
            gone: &gone,
        };
        verdict(&before, side, true, CFG)
    };
    let v = judge(&dist(3.0, &[("BLOCKED", 1)]));
    assert_eq!(v.outcome, Outcome::Inconclusive);
    assert!(
        v.why.starts_with(
            "pid 7 (sleep) exited 0.5s into the run: this run did not watch its workload"
        ),
        "{}",
        v.why
    );
    // However many calls it saw before.
    let v = judge(&dist(3.0, &[("BLOCKED", 500)]));
    assert_eq!(v.outcome, Outcome::Inconclusive);
}

#[test]
fn no_load_moved_without_a_verdict() {
    let base = Baseline {
        file: "before.json".into(),
        saved: sample(),
        verify: CFG,
    };
    let info = RunInfo {
        kernel: "6.12.0".into(),
        profile: base.saved.profile.clone(),
        system: None,
        fix: None,
    };
    let n = names(&["FAULT_ALLOC", "ZAP", "KHUGEPAGED"]);
    let cmp = |now: &Distribution, gone: &[String]| {
        let side = Side {
            calls: now,
            named: &n,
            gone,
        };
        compare(&base, side, &info)
    };
    // The load moved to FAULT_ALLOC, with the calls to show it.
    let moved = dist(10.0, &[("FAULT_ALLOC", 100)]);
    let c = cmp(&moved, &[]);
    assert_eq!(c.verdict.outcome, Outcome::Verified, "{}", c.verdict.why);
    assert_eq!(c.load_moved.map(|m| m.reason), Some("FAULT_ALLOC".into()));
    // One call, or the workload gone: neither a verdict nor a move.
    let one = dist(10.0, &[("FAULT_ALLOC", 1)]);
    let c = cmp(&one, &[]);
    assert_eq!(
        (c.verdict.outcome, c.load_moved),
        (Outcome::Inconclusive, None)
    );
    let gone = ["pid 7 (sleep) exited 0.5s into the run".to_string()];
    let c = cmp(&moved, &gone);
    assert_eq!(
        (c.verdict.outcome, c.load_moved),
        (Outcome::Inconclusive, None)
    );
}

#[test]
fn a_baseline_without_a_hot_reason_is_inconclusive() {
    let before = dist(10.0, &[("FAULT_ALLOC", 556), ("ZAP", 444)]);
    let n = names(&["FAULT_ALLOC", "ZAP"]);
    let now = dist(10.0, &[("ZAP", 30)]);
    let side = Side {
        calls: &now,
        named: &n,
        gone: &[],
    };
    let v = verdict(&before, side, true, CFG);
    assert_eq!(
        (v.outcome, v.reason.as_deref()),
        (Outcome::Inconclusive, None)
    );
    assert_eq!(
        v.why,
        "the baseline has no hot reason: its top reason, FAULT_ALLOC, has 55.6% of the calls, below the 80% threshold"
    );
    // At the threshold it is hot (the same definition as the summary's).
    let v = verdict(
        &before,
        side,
        true,
        VerifyConfig {
            threshold: 55.6,
            ..CFG
        },
    );
    assert_eq!(v.reason.as_deref(), Some("FAULT_ALLOC"));
    assert_eq!(v.outcome, Outcome::Verified, "{}", v.why);
}

fn change(reason: &str, before: Option<f64>, now: Option<f64>) -> Change {
    let fig = |share| Fig {
        count: 1,
        rate: 1.0,
        share,
    };
    Change {
        reason: reason.into(),
        before: before.map(fig),
        now: now.map(fig),
    }
}

#[test]
fn load_moves_when_the_hot_reason_fell_and_another_rose_past_the_threshold() {
    let rows = [
        change("ZAP", Some(97.0), Some(10.0)),
        change("FAULT_ALLOC", Some(3.0), Some(85.0)),
        change("new", None, Some(5.0)),
    ];
    assert_eq!(
        load_moved(&rows, Some("ZAP"), 80.0, false),
        Some(LoadMoved {
            reason: "FAULT_ALLOC".into(),
            share: 85.0,
            share_before: Some(3.0)
        })
    );
    // At the threshold counts as past it; the largest one wins.
    let rows = [
        change("ZAP", Some(97.0), Some(0.0)),
        change("a", Some(1.0), Some(30.0)),
        change("b", None, Some(70.0)),
    ];
    let m = load_moved(&rows, Some("ZAP"), 30.0, false).unwrap();
    assert_eq!((m.reason.as_str(), m.share_before), ("b", None));
    assert_eq!(
        load_moved(&rows, Some("ZAP"), 80.0, false),
        None,
        "none rose past it"
    );
    // The hot reason did not fall below the threshold.
    let rows = [
        change("ZAP", Some(97.0), Some(80.0)),
        change("a", Some(3.0), Some(20.0)),
    ];
    assert_eq!(load_moved(&rows, Some("ZAP"), 20.0, false), None);
    // Already hot before: not where the load went; nor a special slot,
    // nor anything when the baseline had no hot reason or this run
    // does not know it.
    let rows = [
        change("ZAP", Some(50.0), Some(0.0)),
        change("a", Some(50.0), Some(50.0)),
        change(NOT_FOUND_NAME, Some(0.0), Some(50.0)),
    ];
    assert_eq!(load_moved(&rows, Some("ZAP"), 50.0, false), None);
    assert_eq!(load_moved(&rows, None, 50.0, false), None);
    let rows = [
        change("ZAP", Some(97.0), None),
        change("a", None, Some(99.0)),
    ];
    assert_eq!(load_moved(&rows, Some("ZAP"), 80.0, false), None);
    // Under the same profile, a hot reason with no calls now fell.
    assert_eq!(
        load_moved(&rows, Some("ZAP"), 80.0, true).map(|m| m.reason),
        Some("a".to_string())
    );
}

fn state(knobs: &[(&str, Option<&str>)]) -> SystemState {
    SystemState {
        build_id: Some("b1".into()),
        cmdline: Some("ro".into()),
        knobs: knobs
            .iter()
            .map(|&(p, v)| Knob {
                path: p.into(),
                value: v.map(String::from),
                error: None,
            })
            .collect(),
    }
}

#[test]
fn system_changes_knob_by_knob() {
    const DEFRAG: &str = "/sys/kernel/mm/transparent_hugepage/defrag";
    const SWAP: &str = "/proc/sys/vm/swappiness";
    const GONE: &str = "/sys/kernel/mm/transparent_hugepage/shrink_underused";
    let before = state(&[
        (DEFRAG, Some("always defer [madvise] never")),
        (SWAP, Some("60")),
        (GONE, None),
    ]);
    assert!(system_changes(&before, &before).is_empty());
    // Another kernel's list of choices, the same choice: no change.
    let mut now = state(&[
        (DEFRAG, Some("always defer defer+madvise [madvise] never")),
        (SWAP, Some("10")),
        (GONE, Some("1")),
        ("/proc/sys/vm/extra", Some("x")),
    ]);
    now.build_id = None;
    now.knobs[0].error = None;
    let shown: Vec<String> = system_changes(&before, &now)
        .iter()
        .map(|c| format!("{}: {} → {}", c.what, c.before, c.after))
        .collect();
    assert_eq!(
        shown,
        [
            "kernel build id: b1 → unknown",
            "vm.swappiness: 60 → 10",
            "/sys/kernel/mm/transparent_hugepage/shrink_underused: absent → 1",
            "vm.extra: not recorded → x",
        ]
    );
    now.knobs[1] = Knob {
        path: SWAP.into(),
        value: None,
        error: Some("Permission denied".into()),
    };
    now.cmdline = Some("ro quiet".into());
    let c = system_changes(&before, &now);
    assert_eq!(
        (
            c[1].what.as_str(),
            c[1].before.as_str(),
            c[1].after.as_str()
        ),
        ("kernel command line", "ro", "ro quiet")
    );
    assert_eq!(c[2].after, "unreadable (Permission denied)");
}

#[test]
fn fix_applied_lists_the_kernel_and_the_knobs_or_says_unknown() {
    let mut b = sample();
    let info = RunInfo {
        kernel: "6.12.0".into(),
        profile: b.profile.clone(),
        system: b.system.clone(),
        fix: None,
    };
    let f = fix_applied(&b, &info);
    assert!(f.recorded && f.changes.is_empty() && f.no_change(), "{f:?}");
    assert_eq!(f.baseline_fix.as_deref(), Some("before: THP defaults"));
    // An older baseline: only the kernel release is known.
    b.system = None;
    b.fix = None;
    b.kernel = "6.1.0".into();
    let f = fix_applied(&b, &info);
    assert!(!f.recorded && !f.no_change());
    assert_eq!(
        f.changes,
        [SystemChange {
            what: "kernel".into(),
            before: "6.1.0".into(),
            after: "6.12.0".into()
        }]
    );
}

#[test]
fn another_profile_makes_a_missing_hot_reason_inconclusive_and_warns() {
    let mut base = sample();
    base.kernel = "6.1.0".into();
    let b = Baseline {
        file: "before.json".into(),
        saved: base,
        verify: CFG,
    };
    let now = dist(10.0, &[("folio_remove_rmap_ptes", 200)]);
    let n = names(&["folio_remove_rmap_ptes"]);
    let info = RunInfo {
        kernel: "6.12.0".into(),
        profile: None,
        ..RunInfo::default()
    };
    let c = compare(
        &b,
        Side {
            calls: &now,
            named: &n,
            gone: &[],
        },
        &info,
    );
    assert_eq!(c.verdict.outcome, Outcome::Inconclusive);
    assert_eq!(
        c.verdict.why,
        "ZAP, the baseline's hot reason, is not a reason of this run's profile"
    );
    assert_eq!(
        c.warnings,
        [
            "the baseline is from kernel 6.1.0, this is 6.12.0",
            "the baseline used built-in profile deferred_split_folio, this run one reason per caller: reasons may not correspond",
            "only in the baseline: ZAP, FAULT_ALLOC",
            "only in this run: folio_remove_rmap_ptes",
        ]
    );
    assert!(c.baseline.stacks.is_empty());
    // The same profile: the reason had no calls.
    let info = RunInfo {
        kernel: "6.1.0".into(),
        profile: b.saved.profile.clone(),
        ..RunInfo::default()
    };
    let c = compare(
        &b,
        Side {
            calls: &now,
            named: &n,
            gone: &[],
        },
        &info,
    );
    assert_eq!(c.verdict.outcome, Outcome::Verified);
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
    // All the load moved to a new reason: with --fail-on-move, no fix.
    assert_eq!(
        c.load_moved.as_ref().unwrap().reason,
        "folio_remove_rmap_ptes"
    );
    let strict = Baseline {
        verify: VerifyConfig {
            fail_on_move: true,
            ..CFG
        },
        ..b.clone()
    };
    let side = Side {
        calls: &now,
        named: &n,
        gone: &[],
    };
    let c = compare(&strict, side, &info);
    assert_eq!(c.verdict.outcome, Outcome::NotVerified);
    assert!(
        c.verdict.why.ends_with(
            "; but the load moved to folio_remove_rmap_ptes (100.0%), refused by --fail-on-move"
        ),
        "{}",
        c.verdict.why
    );
}
