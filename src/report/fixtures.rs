//! Reports to test with: rows, distributions, stacks and summaries that
//! the renderers' and the comparison's tests share.

use crate::report::{
    CaptureSpan, Cost, Distribution, Drops, Phase, ProcessCount, ReasonRow, ReasonStacks, Stack,
    StackCount, Summary,
};

pub(crate) fn row(reason: &str, count: u64, rate: f64, share: f64) -> ReasonRow {
    ReasonRow {
        reason: reason.into(),
        count,
        rate,
        share,
        special: false,
    }
}

pub(crate) fn sample_calls() -> Distribution {
    Distribution {
        secs: 2.0,
        total: 40,
        rate: 20.0,
        rows: vec![
            row("do_huge_pmd_anonymous_page", 30, 15.0, 75.0),
            row("folio_remove_rmap_ptes", 10, 5.0, 25.0),
        ],
    }
}

/// A process count: `thp[42]` with `count` stacks.
pub(crate) fn thp(count: u64) -> ProcessCount {
    ProcessCount {
        process: crate::report::Process {
            comm: "thp".into(),
            pid: 42,
        },
        count,
    }
}

/// Stacks of `reason`, each captured in process thp[42].
pub(crate) fn stacks_of(reason: &str, stacks: &[(&[&str], u64)]) -> ReasonStacks {
    let captured = stacks.iter().map(|s| s.1).sum();
    ReasonStacks {
        reason: reason.into(),
        captured,
        background: 0,
        stacks: stacks
            .iter()
            .map(|(k, n)| StackCount {
                stack: Stack {
                    kernel: k.iter().map(|f| f.to_string()).collect(),
                    user: vec![],
                },
                count: *n,
                processes: vec![thp(*n)],
            })
            .collect(),
        processes: vec![thp(captured)],
    }
}

pub(crate) fn sample_summary() -> Summary {
    Summary {
        func: "f".into(),
        tracepoint: None,
        mode: crate::bpf::probe::Mode::Fentry,
        phase: Phase::StackCapture,
        kernel: "6.12.0".into(),
        profile: None,
        start: 1_700_000_000.0,
        calls: sample_calls(),
        named: vec![
            "do_huge_pmd_anonymous_page".into(),
            "folio_remove_rmap_ptes".into(),
        ],
        other_merges: vec![],
        drops: Drops {
            stacks_rate_capped: 7,
            ..Drops::default()
        },
        stacks: vec![
            stacks_of("folio_remove_rmap_ptes", &[(&["z"], 1)]),
            stacks_of("do_huge_pmd_anonymous_page", &[(&["a", "b"], 3)]),
        ],
        captures: vec![
            CaptureSpan {
                reason: "folio_remove_rmap_ptes".into(),
                start: 0.5,
                end: 2.0,
                calls: 1,
                stacks: 1,
                start_ns: 1_000_000,
                first_stack_ns: Some(4_500_000),
            },
            CaptureSpan {
                reason: "do_huge_pmd_anonymous_page".into(),
                start: 2.0,
                end: 3.0,
                calls: 30,
                stacks: 3,
                start_ns: 2_000_000_000,
                first_stack_ns: None,
            },
        ],
        stacks_matched: 10,
        stacks_sent: 4,
        stacks_background: 0,
        gates: Vec::new(),
        drill: Vec::new(),
        verify: None,
        uncached: 0,
        cost: Cost::default(),
        companion: None,
        compare: None,
        filter: None,
        threshold: 80.0,
        system: None,
        fix: None,
    }
}

/// The sample summary compared with a baseline where ZAP was hot.
pub(crate) fn compared_summary() -> Summary {
    use crate::report::compare::{compare, Side};
    use crate::report::{Baseline, RunInfo, VerifyConfig};
    let mut sum = sample_summary();
    sum.profile = Some("built-in profile deferred_split_folio".into());
    sum.calls = Distribution {
        secs: 10.0,
        total: 60,
        rate: 6.0,
        rows: vec![row("FAULT_ALLOC", 60, 6.0, 100.0)],
    };
    sum.named = vec!["FAULT_ALLOC".into(), "ZAP".into()];
    let b = Baseline {
        file: "before.json".into(),
        saved: crate::report::saved::tests::sample(),
        verify: VerifyConfig {
            threshold: 80.0,
            drop: 50.0,
            fail_on_move: false,
        },
    };
    use crate::report::saved::tests::{knob, MAX_PTES_NONE, THP_DEFRAG};
    let info = RunInfo {
        kernel: "6.12.0".into(),
        profile: sum.profile.clone(),
        system: Some(crate::system::SystemState {
            build_id: Some("ab01".into()),
            cmdline: Some("console=ttyS0".into()),
            knobs: vec![
                knob(
                    THP_DEFRAG,
                    Some("always [defer] defer+madvise madvise never"),
                ),
                knob(MAX_PTES_NONE, Some("0")),
                knob("/sys/kernel/mm/transparent_hugepage/shrink_underused", None),
            ],
        }),
        fix: Some("defrag defer, max_ptes_none 0".into()),
    };
    let now = Side {
        calls: &sum.calls,
        named: &sum.named,
        gone: &[],
    };
    let cmp = compare(&b, now, &info);
    sum.fix = info.fix.clone();
    sum.system = info.system.clone();
    sum.phase = cmp.verdict.outcome.phase();
    sum.compare = Some(cmp);
    sum
}
