//! Reports as NDJSON: one object per line, `"type"` first. The schema is
//! documented in topdown(8) (JSON OUTPUT); `schema` changes only when a
//! field is removed or changes meaning, never when one is added.

use serde::{Serialize, Serializer};

use crate::report::compare::{Change, Comparison};
use crate::report::{
    CaptureSpan, Cost, Distribution, Drops, FilterInfo, IntervalReport, Pinned, ProcessCount,
    ReasonStacks, Summary, Verify,
};

/// The JSON schema version written into every object.
pub(crate) const SCHEMA: u32 = 1;

/// A figure rounded to 3 decimals; NaN and infinities as null.
#[derive(Debug, Clone, Copy)]
struct Num(f64);

impl Serialize for Num {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if !self.0.is_finite() {
            return s.serialize_none();
        }
        let v = (self.0 * 1000.0).round() / 1000.0;
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

/// The fields a comparison adds to a summary or a pinned instance:
/// `compare`, `baseline`, `verdict` (all null without one).
type CompareFields<'a> = (
    Option<Vec<ChangeJson<'a>>>,
    Option<BaselineJson<'a>>,
    Option<VerdictJson<'a>>,
);

fn comparison(cmp: Option<&Comparison>) -> CompareFields<'_> {
    let Some(c) = cmp else {
        return (None, None, None);
    };
    let b = &c.baseline;
    let v = &c.verdict;
    (
        Some(changes(&c.rows)),
        Some(BaselineJson {
            file: &c.file,
            func: &b.func,
            kernel: &b.kernel,
            profile: b.profile.as_deref(),
            mode: &b.mode,
            source: &b.source,
            start: Num(b.start),
            secs: Num(b.secs),
            total: b.total,
            rate: Num(b.rate),
            hot_reason: b.hot_reason.as_deref(),
            warnings: &c.warnings,
        }),
        Some(VerdictJson {
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
    filter: Option<&'a FilterInfo>,
}

/// The final report as a JSON line (no newline).
pub(crate) fn summary(sum: &Summary, top: usize) -> String {
    let last = sum.stacks.last();
    let (compare, baseline, verdict) = comparison(sum.compare.as_ref());
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
        compare,
        baseline,
        verdict,
        filter: sum.filter.as_ref(),
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
    drops: Drops,
    compare: Option<Vec<ChangeJson<'a>>>,
    baseline: Option<BaselineJson<'a>>,
    verdict: Option<VerdictJson<'a>>,
    filter: Option<&'a str>,
}

/// A pinned instance's totals as a JSON line (no newline).
pub(crate) fn pinned(p: &Pinned) -> String {
    let (compare, baseline, verdict) = comparison(p.compare.as_ref());
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
        hot_reason: p.hot().map(|r| r.reason.as_str()),
        drops: p.drops,
        compare,
        baseline,
        verdict,
        filter: p.filter.as_deref(),
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
            "{\"type\":\"interval\",\"schema\":1,\"time\":1.5,\"secs\":2,\"total\":40,\"rate\":20,\"reasons\":[{\"reason\":\"do_huge_pmd_anonymous_page\",\"count\":30,\"rate\":15,\"share\":75},{\"reason\":\"folio_remove_rmap_ptes\",\"count\":10,\"rate\":5,\"share\":25}],\"stack_reason\":null,\"stacks_captured\":0,\"stacks\":[],\"compare\":null,\"drops\":{\"caller_not_found\":0,\"sites_full\":0,\"recursion_misses\":0,\"deep_unwind_failed\":0,\"stacks_sampled_out\":0,\"stacks_rate_capped\":0,\"stacks_ringbuf_full\":0,\"own_calls\":0}}"
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
    }

    #[test]
    fn summary_shape() {
        let j = summary(&sample_summary(), 5);
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["type"], "summary");
        assert_eq!(v["schema"], 1);
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
            j.starts_with("{\"type\":\"summary\",\"schema\":1,\"func\":\"f\",\"mode\":\"fentry\"")
        );
        // Field order is part of the line format the guest tests grep.
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 29, "{keys:?}");
        assert_eq!(v["kernel"], "6.12.0");
        assert_eq!(v["start"], 1_700_000_000);
        for k in ["profile", "compare", "baseline", "verdict", "filter"] {
            assert_eq!(v[k], serde_json::Value::Null, "{k}");
        }
        assert_eq!(v["captures"][0]["first_stack_ns"], 4_500_000);
        assert_eq!(v["captures"][1]["first_stack_ns"], serde_json::Value::Null);
        assert_eq!(v["captures"][1]["calls"], 30);
    }
}
