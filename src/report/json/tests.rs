use super::*;
use crate::report::fixtures::{sample_calls, sample_summary, stacks_of};

#[test]
fn numbers_are_rounded_and_integral_ones_plain() {
    let j = |v: f64| serde_json::to_string(&Num(v)).unwrap();
    assert_eq!(j(2.0), "2");
    assert_eq!(j(1.23456), "1.235");
    assert_eq!(j(f64::NAN), "null");
    assert_eq!(j(f64::INFINITY), "null");
    // Found by fuzzing: a finite figure too large to scale stays a number.
    assert_eq!(j(1.8e307), "1.8e+307");
}

#[test]
fn interval_shape() {
    let iv = IntervalReport {
        drill: Vec::new(),
        unix_time: 1.5,
        clock: "x".into(),
        calls: sample_calls(),
        stacks: Vec::new(),
        compare: None,
        drops: Drops::default(),
    };
    assert_eq!(
        interval(&iv, 5),
        "{\"type\":\"interval\",\"schema\":2,\"time\":1.5,\"secs\":2,\"total\":40,\"rate\":20,\"reasons\":[{\"reason\":\"do_huge_pmd_anonymous_page\",\"count\":30,\"rate\":15,\"share\":75},{\"reason\":\"folio_remove_rmap_ptes\",\"count\":10,\"rate\":5,\"share\":25}],\"stack_reason\":null,\"stacks_captured\":0,\"stacks\":[],\"stacks_by_reason\":[],\"compare\":null,\"drops\":{\"caller_not_found\":0,\"sites_full\":0,\"recursion_misses\":0,\"deep_unwind_failed\":0,\"stacks_sampled_out\":0,\"stacks_rate_capped\":0,\"stacks_ringbuf_full\":0,\"stacks_background_lost\":0,\"own_calls\":0}}"
    );
    let iv = IntervalReport {
        drill: Vec::new(),
        stacks: vec![stacks_of("ZAP", &[(&["a\"b"], 2)])],
        ..iv
    };
    assert!(interval(&iv, 5).ends_with(
        "\"stack_reason\":\"ZAP\",\"stacks_captured\":2,\"stacks\":[{\"count\":2,\"frames\":[\"a\\\"b\"],\"processes\":[{\"comm\":\"thp\",\"pid\":42,\"count\":2}]}],\"stacks_by_reason\":[{\"reason\":\"ZAP\",\"captured\":2,\"background\":0,\"stacks\":[{\"count\":2,\"frames\":[\"a\\\"b\"],\"processes\":[{\"comm\":\"thp\",\"pid\":42,\"count\":2}]}],\"processes\":[{\"comm\":\"thp\",\"pid\":42,\"count\":2}]}],\"compare\":null,\"drops\":{\"caller_not_found\":0,\"sites_full\":0,\"recursion_misses\":0,\"deep_unwind_failed\":0,\"stacks_sampled_out\":0,\"stacks_rate_capped\":0,\"stacks_ringbuf_full\":0,\"stacks_background_lost\":0,\"own_calls\":0}}"
    ));
}

/// Several reasons captured at once: each has its set, oldest first; the
/// flat fields name the newest.
#[test]
fn an_interval_with_two_reasons_captured_lists_both() {
    let iv = IntervalReport {
        drill: Vec::new(),
        unix_time: 1.5,
        clock: "x".into(),
        calls: sample_calls(),
        stacks: vec![
            stacks_of("FAULT", &[(&["f"], 1)]),
            stacks_of("ZAP", &[(&["z"], 3)]),
        ],
        compare: None,
        drops: Drops::default(),
    };
    let v: serde_json::Value = serde_json::from_str(&interval(&iv, 5)).unwrap();
    assert_eq!(
        (&v["stack_reason"], &v["stacks_captured"]),
        (&"ZAP".into(), &3.into())
    );
    let sets: Vec<(&str, u64)> = v["stacks_by_reason"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["reason"].as_str().unwrap(),
                s["captured"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(sets, [("FAULT", 1), ("ZAP", 3)]);
}

#[test]
fn a_comparison_adds_its_rows_the_baseline_and_the_verdict() {
    let sum = crate::report::fixtures::compared_summary();
    let j = summary(&sum, 5);
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v["phase"], "fix verified");
    assert!(j.contains("\"compare\":[{\"reason\":\"ZAP\",\"count_before\":200,\"rate_before\":20,\"share_before\":80,\"count\":0,\"rate\":0,\"share\":0,\"rate_change\":0,\"share_change\":-80},"), "{j}");
    assert_eq!(v["compare"][1]["rate_change"], 1.2);
    assert_eq!(v["baseline"]["file"], "before.json");
    assert_eq!(v["baseline"]["hot_reason"], "ZAP");
    assert_eq!(v["baseline"]["warnings"], serde_json::json!([]));
    let verdict = &v["verdict"];
    assert_eq!(verdict["outcome"], "fix verified");
    assert_eq!(verdict["reason"], "ZAP");
    assert_eq!(
        (verdict["share_before"].as_f64(), verdict["share"].as_f64()),
        (Some(80.0), Some(0.0))
    );
    assert_eq!(
        (verdict["drop"].as_f64(), verdict["verify_drop"].as_f64()),
        (Some(100.0), Some(50.0))
    );
    assert_eq!(verdict["share_below_threshold"], true);
    assert_eq!(verdict["rate_dropped"], true);
    assert!(verdict["message"]
        .as_str()
        .unwrap()
        .starts_with("ZAP (the baseline's hot reason): "));
    assert!(j.contains(",\"load_moved\":{\"reason\":\"FAULT_ALLOC\",\"share\":100,\"share_before\":20},\"fix_applied\":{\"fix\":\"defrag defer, max_ptes_none 0\",\"baseline_fix\":\"before: THP defaults\",\"recorded\":true,\"changes\":[{\"what\":\"/sys/kernel/mm/transparent_hugepage/defrag\",\"before\":\"madvise\",\"after\":\"defer\"},{\"what\":\"/sys/kernel/mm/transparent_hugepage/khugepaged/max_ptes_none\",\"before\":\"511\",\"after\":\"0\"}],\"no_change\":false},"), "{j}");
    assert_eq!(v["baseline"]["version"], 2);
    assert_eq!(v["baseline"]["top_reason"], "ZAP");
    assert_eq!(v["baseline"]["fix"], "before: THP defaults");
    assert_eq!(v["fix"], "defrag defer, max_ptes_none 0");
    assert_eq!(
        (v["top_reason"].as_str(), v["hot_reason"].as_str()),
        (Some("FAULT_ALLOC"), Some("FAULT_ALLOC"))
    );
}

#[test]
fn summary_shape() {
    let j = summary(&sample_summary(), 5);
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v["type"], "summary");
    assert_eq!(v["schema"], 2);
    assert_eq!(v["drops"]["stacks_rate_capped"], 7);
    // Drops in report order (serde_json's Value would sort them).
    assert!(j.contains("\"drops\":{\"caller_not_found\":0,\"sites_full\":0,\"recursion_misses\":0,\"deep_unwind_failed\":0,\"stacks_sampled_out\":0,\"stacks_rate_capped\":7,\"stacks_ringbuf_full\":0,\"stacks_background_lost\":0,\"own_calls\":0}"), "{j}");
    assert_eq!(v["stack_reason"], "do_huge_pmd_anonymous_page");
    assert_eq!(v["stacks_matched"], 10);
    assert_eq!(v["stacks_sent"], 4);
    assert_eq!(v["stacks_captured"], 3);
    assert_eq!(v["stacks"][0]["frames"], serde_json::json!(["a", "b"]));
    assert_eq!(v["stacks_by_reason"][0]["reason"], "folio_remove_rmap_ptes");
    assert_eq!(v["stacks_by_reason"][1]["captured"], 3);
    assert_eq!(v["verify"], serde_json::Value::Null);
    assert_eq!(v["bpf"]["run_cnt"], 0);
    assert_eq!(v["uncached"], 0);
    assert!(j.starts_with(
        "{\"type\":\"summary\",\"schema\":2,\"func\":\"f\",\"tracepoint\":null,\"mode\":\"fentry\""
    ));
    // Field order is part of the line format the guest tests grep.
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys.len(), 39, "{keys:?}");
    assert_eq!(v["kernel"], "6.12.0");
    assert_eq!(v["start"], 1_700_000_000);
    // 75% is below the 80% threshold: a top reason, no hot one.
    assert!(j.contains(",\"top_reason\":\"do_huge_pmd_anonymous_page\",\"top_share\":75,\"hot_reason\":null,\"threshold\":80,"), "{j}");
    for k in [
        "profile",
        "compare",
        "baseline",
        "verdict",
        "load_moved",
        "fix_applied",
        "filter",
        "fix",
    ] {
        assert_eq!(v[k], serde_json::Value::Null, "{k}");
    }
    assert_eq!(v["captures"][0]["first_stack_ns"], 4_500_000);
    assert_eq!(v["captures"][1]["first_stack_ns"], serde_json::Value::Null);
    assert_eq!(v["captures"][1]["calls"], 30);
}

#[test]
fn a_tracepoints_category_is_in_the_summary_and_its_baseline() {
    let mut sum = sample_summary();
    sum.func = "sched_switch".into();
    sum.tracepoint = Some("sched".into());
    sum.mode = crate::bpf::probe::Mode::TpBtf;
    let j = summary(&sum, 5);
    assert!(
        j.starts_with("{\"type\":\"summary\",\"schema\":2,\"func\":\"sched_switch\",\"tracepoint\":\"sched\",\"mode\":\"tp_btf\""),
        "{j}"
    );
    // The baseline's, as its file records it (null: a function).
    let mut sum = crate::report::fixtures::compared_summary();
    let v: serde_json::Value = serde_json::from_str(&summary(&sum, 5)).unwrap();
    assert_eq!(v["baseline"]["tracepoint"], serde_json::Value::Null);
    if let Some(c) = sum.compare.as_mut() {
        c.baseline.tracepoint = Some("sched".into());
    }
    let j = summary(&sum, 5);
    assert!(
        j.contains(",\"func\":\"deferred_split_folio\",\"tracepoint\":\"sched\",\"kernel\":"),
        "{j}"
    );
}

#[test]
fn each_captured_reasons_calls_are_one_object_in_report_order() {
    let mut sum = sample_summary();
    sum.gates = vec![crate::report::ReasonGate {
        reason: "ZAP".into(),
        gate: crate::report::Gate {
            calls: 9,
            shown: 2,
            sampled_out: 1,
            rate_capped: 5,
            ringbuf_full: 0,
            not_kept: 1,
            unseen: 0,
            unnamed: 0,
        },
    }];
    let j = summary(&sum, 5);
    // The guest tests grep it field by field.
    assert!(
        j.contains(
            "\"capture_calls\":[{\"reason\":\"ZAP\",\"calls\":9,\"shown\":2,\"sampled_out\":1,\"rate_capped\":5,\"ringbuf_full\":0,\"not_kept\":1,\"unseen\":0,\"unnamed\":0}]"
        ),
        "{j}"
    );
    assert!(summary(&sample_summary(), 5).contains("\"capture_calls\":[]"));
}

#[test]
fn a_drilled_reason_has_its_tree_and_folded_paths() {
    let mut sum = sample_summary();
    let path = |names: &[&str], n| (names.iter().map(|s| s.to_string()).collect(), n);
    sum.drill = vec![crate::report::drill::tree(
        "ZAP",
        (3, 80.0),
        Some(5),
        &[path(&["zap", "a"], 3), path(&["zap", "b"], 2)],
        0,
    )];
    let j = summary(&sum, 5);
    // The guest tests grep the paths.
    assert!(
        j.contains(
            "\"drill\":[{\"reason\":\"ZAP\",\"levels\":3,\"calls\":5,\"captured_calls\":5,\
             \"tree\":[{\"name\":\"zap\",\"calls\":5,\"children\":[{\"name\":\"a\",\"calls\":3},\
             {\"name\":\"b\",\"calls\":2}]}],\
             \"paths\":[{\"calls\":3,\"path\":\"zap;a\"},{\"calls\":2,\"path\":\"zap;b\"}]}]"
        ),
        "{j}"
    );
    assert!(!summary(&sample_summary(), 5).contains("\"drill\""));
}
