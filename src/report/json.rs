//! Reports as NDJSON: one object per line, `"type"` first. The schema is
//! documented in topdown(8) (JSON OUTPUT); `schema` changes only when a
//! field is removed or changes meaning, never when one is added.

use serde::{Serialize, Serializer};

use crate::report::{
    CaptureSpan, Cost, Distribution, Drops, IntervalReport, Pinned, ReasonStacks, Summary, Verify,
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
struct StackJson {
    count: u64,
    frames: Vec<String>,
}

fn stacks(st: Option<&ReasonStacks>, top: usize) -> Vec<StackJson> {
    st.map_or(&[][..], |st| st.top(top))
        .iter()
        .map(|sc| StackJson {
            count: sc.count,
            frames: sc.stack.display(),
        })
        .collect()
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
    stacks: Vec<StackJson>,
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
    })
}

#[derive(Serialize)]
struct StackSet<'a> {
    reason: &'a str,
    captured: u64,
    stacks: Vec<StackJson>,
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
    stacks: Vec<StackJson>,
    stacks_by_reason: Vec<StackSet<'a>>,
    captures: Vec<Capture<'a>>,
    verify: Option<Verify>,
    bpf: Cost,
    companion: Option<CompanionJson<'a>>,
}

/// The final report as a JSON line (no newline).
pub(crate) fn summary(sum: &Summary, top: usize) -> String {
    let last = sum.stacks.last();
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
            })
            .collect(),
        captures: sum.captures.iter().map(Capture::of).collect(),
        verify: sum.verify,
        bpf: sum.cost,
        companion: sum
            .companion
            .as_ref()
            .map(|(kind, c)| CompanionJson { kind, stats: *c }),
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
}

/// A pinned instance's totals as a JSON line (no newline).
pub(crate) fn pinned(p: &Pinned) -> String {
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
        };
        assert_eq!(
            interval(&iv, 5),
            "{\"type\":\"interval\",\"schema\":1,\"time\":1.5,\"secs\":2,\"total\":40,\"rate\":20,\"reasons\":[{\"reason\":\"do_huge_pmd_anonymous_page\",\"count\":30,\"rate\":15,\"share\":75},{\"reason\":\"folio_remove_rmap_ptes\",\"count\":10,\"rate\":5,\"share\":25}],\"stack_reason\":null,\"stacks_captured\":0,\"stacks\":[]}"
        );
        let iv = IntervalReport {
            stacks: Some(stacks_of("ZAP", &[(&["a\"b"], 2)])),
            ..iv
        };
        assert!(interval(&iv, 5).ends_with(
            "\"stack_reason\":\"ZAP\",\"stacks_captured\":2,\"stacks\":[{\"count\":2,\"frames\":[\"a\\\"b\"]}]}"
        ));
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
        assert!(
            j.starts_with("{\"type\":\"summary\",\"schema\":1,\"func\":\"f\",\"mode\":\"fentry\"")
        );
        // Field order is part of the line format the guest tests grep.
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 21, "{keys:?}");
        assert_eq!(v["captures"][0]["first_stack_ns"], 4_500_000);
        assert_eq!(v["captures"][1]["first_stack_ns"], serde_json::Value::Null);
        assert_eq!(v["captures"][1]["calls"], 30);
    }
}
