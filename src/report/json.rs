//! Reports as NDJSON: one object per line, `"type"` first. The schema is
//! documented in topdown(8) (JSON OUTPUT); `schema` changes only when a
//! field is removed or changes meaning, never when one is added.

use serde::{Serialize, Serializer};

use crate::reasons::{NOT_FOUND_NAME, SITES_FULL_NAME};

use crate::report::{
    CaptureSpan, Cost, Distribution, Drops, FilterInfo, IntervalReport, Pinned, ProcessCount,
    ReasonRow, ReasonStacks, Summary, Verify,
};
use crate::report::{Change, Comparison, FixApplied, LoadMoved};

/// The JSON schema version written into every object. 2: `hot_reason`
/// is null unless the top reason reaches the threshold (`top_reason` is
/// the top one).
pub(crate) const SCHEMA: u32 = 2;

/// A figure rounded to 3 decimals; NaN and infinities as null.
#[derive(Debug, Clone, Copy)]
struct Num(f64);

impl Serialize for Num {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if !self.0.is_finite() {
            return s.serialize_none();
        }
        let v = (self.0 * 1000.0).round() / 1000.0;
        // Too large for decimals: as it is (rounding made it infinite).
        let v = if v.is_finite() { v } else { self.0 };
        if v.fract() == 0.0 && v.abs() < 1e15 {
            s.serialize_i64(v as i64)
        } else {
            s.serialize_f64(v)
        }
    }
}

#[derive(Serialize)]
struct Row<'a> {
    reason: &'a str,
    count: u64,
    rate: Num,
    share: Num,
}

fn rows(d: &Distribution) -> Vec<Row<'_>> {
    d.rows
        .iter()
        .map(|r| Row {
            reason: &r.reason,
            count: r.count,
            rate: Num(r.rate),
            share: Num(r.share),
        })
        .collect()
}

#[derive(Serialize)]
struct ProcessJson<'a> {
    comm: &'a str,
    pid: u32,
    count: u64,
}

/// The first `top` processes.
fn processes(list: &[ProcessCount], top: usize) -> Vec<ProcessJson<'_>> {
    list.iter()
        .take(top)
        .map(|p| ProcessJson {
            comm: &p.process.comm,
            pid: p.process.pid,
            count: p.count,
        })
        .collect()
}

#[derive(Serialize)]
struct StackJson<'a> {
    count: u64,
    frames: Vec<String>,
    processes: Vec<ProcessJson<'a>>,
}

fn stacks(st: Option<&ReasonStacks>, top: usize) -> Vec<StackJson<'_>> {
    st.map_or(&[][..], |st| st.top(top))
        .iter()
        .map(|sc| StackJson {
            count: sc.count,
            frames: sc.stack.display(),
            processes: processes(&sc.processes, top),
        })
        .collect()
}

/// A reason before (the baseline) and now; null where a side does not
/// know the reason.
#[derive(Serialize)]
struct ChangeJson<'a> {
    reason: &'a str,
    count_before: Option<u64>,
    rate_before: Option<Num>,
    share_before: Option<Num>,
    count: Option<u64>,
    rate: Option<Num>,
    share: Option<Num>,
    rate_change: Option<Num>,
    share_change: Num,
}

fn changes(rows: &[Change]) -> Vec<ChangeJson<'_>> {
    rows.iter()
        .map(|c| ChangeJson {
            reason: &c.reason,
            count_before: c.before.map(|f| f.count),
            rate_before: c.before.map(|f| Num(f.rate)),
            share_before: c.before.map(|f| Num(f.share)),
            count: c.now.map(|f| f.count),
            rate: c.now.map(|f| Num(f.rate)),
            share: c.now.map(|f| Num(f.share)),
            rate_change: c.rate_change().map(Num),
            share_change: Num(c.share_change()),
        })
        .collect()
}

/// The baseline a run was compared with.
#[derive(Serialize)]
struct BaselineJson<'a> {
    file: &'a str,
    version: u32,
    func: &'a str,
    kernel: &'a str,
    profile: Option<&'a str>,
    mode: &'a str,
    source: &'a str,
    start: Num,
    secs: Num,
    total: u64,
    rate: Num,
    hot_reason: Option<&'a str>,
    top_reason: Option<&'a str>,
    fix: Option<&'a str>,
    warnings: &'a [String],
}

#[derive(Serialize)]
struct VerdictJson<'a> {
    outcome: &'a str,
    reason: Option<&'a str>,
    share_before: Num,
    share: Num,
    threshold: Num,
    rate_before: Num,
    rate: Num,
    drop: Num,
    verify_drop: Num,
    share_below_threshold: bool,
    rate_dropped: bool,
    message: &'a str,
}

#[derive(Serialize)]
struct LoadMovedJson<'a> {
    reason: &'a str,
    share: Num,
    /// null: the baseline does not know the reason.
    share_before: Option<Num>,
}

#[derive(Serialize)]
struct SystemChangeJson<'a> {
    what: &'a str,
    before: &'a str,
    after: &'a str,
}

#[derive(Serialize)]
struct FixAppliedJson<'a> {
    fix: Option<&'a str>,
    baseline_fix: Option<&'a str>,
    /// false: the baseline is of an older format; its settings beside the
    /// kernel release, and its fix, are unknown.
    recorded: bool,
    changes: Vec<SystemChangeJson<'a>>,
    no_change: bool,
}

fn fix_applied(f: &FixApplied) -> FixAppliedJson<'_> {
    FixAppliedJson {
        fix: f.fix.as_deref(),
        baseline_fix: f.baseline_fix.as_deref(),
        recorded: f.recorded,
        changes: f
            .changes
            .iter()
            .map(|c| SystemChangeJson {
                what: &c.what,
                before: &c.before,
                after: &c.after,
            })
            .collect(),
        no_change: f.no_change(),
    }
}

/// The fields a comparison adds to a summary or a pinned instance:
/// `compare`, `baseline`, `verdict`, `load_moved`, `fix_applied` (all null
/// without one).
struct CompareFields<'a> {
    compare: Option<Vec<ChangeJson<'a>>>,
    baseline: Option<BaselineJson<'a>>,
    verdict: Option<VerdictJson<'a>>,
    load_moved: Option<LoadMovedJson<'a>>,
    fix_applied: Option<FixAppliedJson<'a>>,
}

fn comparison(cmp: Option<&Comparison>) -> CompareFields<'_> {
    let Some(c) = cmp else {
        return CompareFields {
            compare: None,
            baseline: None,
            verdict: None,
            load_moved: None,
            fix_applied: None,
        };
    };
    let b = &c.baseline;
    let v = &c.verdict;
    CompareFields {
        compare: Some(changes(&c.rows)),
        baseline: Some(BaselineJson {
            file: &c.file,
            version: b.version,
            func: &b.func,
            kernel: &b.kernel,
            profile: b.profile.as_deref(),
            mode: &b.mode,
            source: &b.source,
            start: Num(b.start),
            secs: Num(b.secs),
            total: b.total,
            rate: Num(b.rate),
            hot_reason: v.reason.as_deref(),
            top_reason: b
                .reasons
                .iter()
                .map(|r| r.reason.as_str())
                .find(|r| *r != NOT_FOUND_NAME && *r != SITES_FULL_NAME),
            fix: b.fix.as_deref(),
            warnings: &c.warnings,
        }),
        verdict: Some(VerdictJson {
            outcome: v.outcome.phase().name(),
            reason: v.reason.as_deref(),
            share_before: Num(v.before.share),
            share: Num(v.now.share),
            threshold: Num(v.config.threshold),
            rate_before: Num(v.before.rate),
            rate: Num(v.now.rate),
            drop: Num(v.drop),
            verify_drop: Num(v.config.drop),
            share_below_threshold: v.share_below,
            rate_dropped: v.rate_dropped,
            message: &v.why,
        }),
        load_moved: c.load_moved.as_ref().map(|m: &LoadMoved| LoadMovedJson {
            reason: &m.reason,
            share: Num(m.share),
            share_before: m.share_before.map(Num),
        }),
        fix_applied: Some(fix_applied(&c.fix_applied)),
    }
}

/// The top reason, its share, and the hot reason (the top one if its
/// share reaches the threshold).
type TopFields<'a> = (Option<&'a str>, Option<Num>, Option<&'a str>);

fn top_fields<'a>(top: Option<&'a ReasonRow>, hot: Option<&'a ReasonRow>) -> TopFields<'a> {
    (
        top.map(|r| r.reason.as_str()),
        top.map(|r| Num(r.share)),
        hot.map(|r| r.reason.as_str()),
    )
}

#[derive(Serialize)]
struct Interval<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    schema: u32,
    time: Num,
    secs: Num,
    total: u64,
    rate: Num,
    reasons: Vec<Row<'a>>,
    stack_reason: Option<&'a str>,
    stacks_captured: u64,
    stacks: Vec<StackJson<'a>>,
    compare: Option<Vec<ChangeJson<'a>>>,
    drops: Drops,
}

/// One interval as a JSON line (no newline).
pub(crate) fn interval(iv: &IntervalReport, top: usize) -> String {
    let st = iv.stacks.as_ref();
    to_line(&Interval {
        kind: "interval",
        schema: SCHEMA,
        time: Num(iv.unix_time),
        secs: Num(iv.calls.secs),
        total: iv.calls.total,
        rate: Num(iv.calls.rate),
        reasons: rows(&iv.calls),
        stack_reason: st.map(|s| s.reason.as_str()),
        stacks_captured: st.map_or(0, |s| s.captured),
        stacks: stacks(st, top),
        compare: iv.compare.as_deref().map(changes),
        drops: iv.drops,
    })
}

#[derive(Serialize)]
struct StackSet<'a> {
    reason: &'a str,
    captured: u64,
    stacks: Vec<StackJson<'a>>,
    processes: Vec<ProcessJson<'a>>,
}

#[derive(Serialize)]
struct Capture<'a> {
    reason: &'a str,
    start: Num,
    end: Num,
    calls: u64,
    stacks: u64,
    start_ns: u64,
    first_stack_ns: Option<u64>,
}

impl<'a> Capture<'a> {
    fn of(c: &'a CaptureSpan) -> Self {
        Capture {
            reason: &c.reason,
            start: Num(c.start),
            end: Num(c.end),
            calls: c.calls,
            stacks: c.stacks,
            start_ns: c.start_ns,
            first_stack_ns: c.first_stack_ns,
        }
    }
}

#[derive(Serialize)]
struct CompanionJson<'a> {
    kind: &'a str,
    stats: Cost,
}

#[derive(Serialize)]
struct SummaryJson<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    schema: u32,
    func: &'a str,
    mode: &'a str,
    phase: &'a str,
    secs: Num,
    total: u64,
    rate: Num,
    reasons: Vec<Row<'a>>,
    top_reason: Option<&'a str>,
    top_share: Option<Num>,
    hot_reason: Option<&'a str>,
    threshold: Num,
    other_merges: &'a [String],
    drops: Drops,
    stack_reason: Option<&'a str>,
    stacks_matched: u64,
    stacks_sent: u64,
    stacks_captured: u64,
    stacks: Vec<StackJson<'a>>,
    stacks_by_reason: Vec<StackSet<'a>>,
    captures: Vec<Capture<'a>>,
    verify: Option<Verify>,
    uncached: u64,
    bpf: Cost,
    companion: Option<CompanionJson<'a>>,
    start: Num,
    kernel: &'a str,
    profile: Option<&'a str>,
    compare: Option<Vec<ChangeJson<'a>>>,
    baseline: Option<BaselineJson<'a>>,
    verdict: Option<VerdictJson<'a>>,
    load_moved: Option<LoadMovedJson<'a>>,
    fix_applied: Option<FixAppliedJson<'a>>,
    filter: Option<&'a FilterInfo>,
    fix: Option<&'a str>,
}

/// The final report as a JSON line (no newline).
pub(crate) fn summary(sum: &Summary, top: usize) -> String {
    let last = sum.stacks.last();
    let c = comparison(sum.compare.as_ref());
    let (top_reason, top_share, hot_reason) = top_fields(sum.top(), sum.hot());
    to_line(&SummaryJson {
        kind: "summary",
        schema: SCHEMA,
        func: &sum.func,
        mode: sum.mode,
        phase: sum.phase.name(),
        secs: Num(sum.calls.secs),
        total: sum.calls.total,
        rate: Num(sum.calls.rate),
        reasons: rows(&sum.calls),
        top_reason,
        top_share,
        hot_reason,
        threshold: Num(sum.threshold),
        other_merges: &sum.other_merges,
        drops: sum.drops,
        stack_reason: last.map(|l| l.reason.as_str()),
        stacks_matched: sum.stacks_matched,
        stacks_sent: sum.stacks_sent,
        stacks_captured: last.map_or(0, |l| l.captured),
        stacks: stacks(last, top),
        stacks_by_reason: sum
            .stacks
            .iter()
            .map(|st| StackSet {
                reason: &st.reason,
                captured: st.captured,
                stacks: stacks(Some(st), top),
                processes: processes(&st.processes, top),
            })
            .collect(),
        captures: sum.captures.iter().map(Capture::of).collect(),
        verify: sum.verify,
        uncached: sum.uncached,
        bpf: sum.cost,
        companion: sum
            .companion
            .as_ref()
            .map(|(kind, c)| CompanionJson { kind, stats: *c }),
        start: Num(sum.start),
        kernel: &sum.kernel,
        profile: sum.profile.as_deref(),
        compare: c.compare,
        baseline: c.baseline,
        verdict: c.verdict,
        load_moved: c.load_moved,
        fix_applied: c.fix_applied,
        filter: sum.filter.as_ref(),
        fix: sum.fix.as_deref(),
    })
}

#[derive(Serialize)]
struct PinnedJson<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    schema: u32,
    func: &'a str,
    mode: &'a str,
    profile: Option<&'a str>,
    kernel: &'a str,
    version: &'a str,
    pinned_at: Num,
    secs: Num,
    total: u64,
    rate: Num,
    reasons: Vec<Row<'a>>,
    hot_reason: Option<&'a str>,
    top_reason: Option<&'a str>,
    top_share: Option<Num>,
    threshold: Num,
    drops: Drops,
    compare: Option<Vec<ChangeJson<'a>>>,
    baseline: Option<BaselineJson<'a>>,
    verdict: Option<VerdictJson<'a>>,
    load_moved: Option<LoadMovedJson<'a>>,
    fix_applied: Option<FixAppliedJson<'a>>,
    filter: Option<&'a str>,
    fix: Option<&'a str>,
}

/// A pinned instance's totals as a JSON line (no newline).
pub(crate) fn pinned(p: &Pinned) -> String {
    let c = comparison(p.compare.as_ref());
    let (top_reason, top_share, hot_reason) = top_fields(p.top(), p.hot());
    to_line(&PinnedJson {
        kind: "pinned",
        schema: SCHEMA,
        func: &p.func,
        mode: &p.mode,
        profile: p.profile.as_deref(),
        kernel: &p.kernel,
        version: &p.version,
        pinned_at: Num(p.pinned_at),
        secs: Num(p.calls.secs),
        total: p.calls.total,
        rate: Num(p.calls.rate),
        reasons: rows(&p.calls),
        hot_reason,
        top_reason,
        top_share,
        threshold: Num(p.threshold),
        drops: p.drops,
        compare: c.compare,
        baseline: c.baseline,
        verdict: c.verdict,
        load_moved: c.load_moved,
        fix_applied: c.fix_applied,
        filter: p.filter.as_deref(),
        fix: p.fix.as_deref(),
    })
}

fn to_line<T: Serialize>(v: &T) -> String {
    // Serializing plain structs of strings and numbers cannot fail.
    serde_json::to_string(v).expect("report serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::text::tests::{sample_calls, sample_summary, stacks_of};

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
            unix_time: 1.5,
            clock: "x".into(),
            calls: sample_calls(),
            stacks: None,
            compare: None,
            drops: Drops::default(),
        };
        assert_eq!(
            interval(&iv, 5),
            "{\"type\":\"interval\",\"schema\":2,\"time\":1.5,\"secs\":2,\"total\":40,\"rate\":20,\"reasons\":[{\"reason\":\"do_huge_pmd_anonymous_page\",\"count\":30,\"rate\":15,\"share\":75},{\"reason\":\"folio_remove_rmap_ptes\",\"count\":10,\"rate\":5,\"share\":25}],\"stack_reason\":null,\"stacks_captured\":0,\"stacks\":[],\"compare\":null,\"drops\":{\"caller_not_found\":0,\"sites_full\":0,\"recursion_misses\":0,\"deep_unwind_failed\":0,\"stacks_sampled_out\":0,\"stacks_rate_capped\":0,\"stacks_ringbuf_full\":0,\"own_calls\":0}}"
        );
        let iv = IntervalReport {
            stacks: Some(stacks_of("ZAP", &[(&["a\"b"], 2)])),
            ..iv
        };
        assert!(interval(&iv, 5).ends_with(
            "\"stack_reason\":\"ZAP\",\"stacks_captured\":2,\"stacks\":[{\"count\":2,\"frames\":[\"a\\\"b\"],\"processes\":[{\"comm\":\"thp\",\"pid\":42,\"count\":2}]}],\"compare\":null,\"drops\":{\"caller_not_found\":0,\"sites_full\":0,\"recursion_misses\":0,\"deep_unwind_failed\":0,\"stacks_sampled_out\":0,\"stacks_rate_capped\":0,\"stacks_ringbuf_full\":0,\"own_calls\":0}}"
        ));
    }

    #[test]
    fn a_comparison_adds_its_rows_the_baseline_and_the_verdict() {
        let sum = crate::report::text::tests::compared_summary();
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
        assert!(j.contains("\"drops\":{\"caller_not_found\":0,\"sites_full\":0,\"recursion_misses\":0,\"deep_unwind_failed\":0,\"stacks_sampled_out\":0,\"stacks_rate_capped\":7,\"stacks_ringbuf_full\":0,\"own_calls\":0}"), "{j}");
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
        assert!(
            j.starts_with("{\"type\":\"summary\",\"schema\":2,\"func\":\"f\",\"mode\":\"fentry\"")
        );
        // Field order is part of the line format the guest tests grep.
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 36, "{keys:?}");
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
}
