//! Reports as NDJSON: one object per line, `"type"` first. The schema is
//! documented in topdown(8) (JSON OUTPUT); `schema` changes only when a
//! field is removed or changes meaning, never when one is added.

use serde::{Serialize, Serializer};

use crate::bpf::probe::Mode;
use crate::reasons::{NOT_FOUND_NAME, SITES_FULL_NAME};

use crate::report::drill::{DrillNode, DrillTree};
use crate::report::{
    CaptureSpan, Cost, Distribution, Drops, FilterInfo, Gate, IntervalReport, Pinned, ProcessCount,
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
struct RowJson<'a> {
    reason: &'a str,
    count: u64,
    rate: Num,
    share: Num,
}

fn rows(d: &Distribution) -> Vec<RowJson<'_>> {
    d.rows
        .iter()
        .map(|r| RowJson {
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
    /// A tracepoint's category; null: a function, or not recorded.
    tracepoint: Option<&'a str>,
    kernel: &'a str,
    profile: Option<&'a str>,
    mode: Mode,
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
    drill_drop: Option<DrillDropJson<'a>>,
}

/// --drill in both runs: the node whose share of the hot reason's calls
/// fell the most (percent of the reason's calls).
#[derive(Serialize)]
struct DrillDropJson<'a> {
    reason: &'a str,
    path: &'a [String],
    share_before: Num,
    share: Num,
}

fn comparison(cmp: Option<&Comparison>) -> CompareFields<'_> {
    let Some(c) = cmp else {
        return CompareFields {
            compare: None,
            baseline: None,
            verdict: None,
            load_moved: None,
            fix_applied: None,
            drill_drop: None,
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
            tracepoint: b.tracepoint.as_deref(),
            kernel: &b.kernel,
            profile: b.profile.as_deref(),
            mode: b.mode,
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
        drill_drop: c.drill_drop.as_ref().map(|d| DrillDropJson {
            reason: &d.reason,
            path: &d.path,
            share_before: Num(d.before),
            share: Num(d.now),
        }),
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
struct IntervalJson<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    schema: u32,
    time: Num,
    secs: Num,
    total: u64,
    rate: Num,
    reasons: Vec<RowJson<'a>>,
    /// The newest reason captured, and its stacks; every reason captured
    /// in stacks_by_reason, oldest first.
    stack_reason: Option<&'a str>,
    stacks_captured: u64,
    stacks: Vec<StackJson<'a>>,
    stacks_by_reason: Vec<StackSet<'a>>,
    compare: Option<Vec<ChangeJson<'a>>>,
    drops: Drops,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    drill: Vec<DrillJson<'a>>,
}

fn stack_sets(sets: &[ReasonStacks], top: usize) -> Vec<StackSet<'_>> {
    sets.iter()
        .map(|st| StackSet {
            reason: &st.reason,
            captured: st.captured,
            background: st.background,
            stacks: stacks(Some(st), top),
            processes: processes(&st.processes, top),
        })
        .collect()
}

/// One interval as a JSON line (no newline).
pub(crate) fn interval(iv: &IntervalReport, top: usize) -> String {
    let st = iv.stacks.last();
    to_line(&IntervalJson {
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
        stacks_by_reason: stack_sets(&iv.stacks, top),
        compare: iv.compare.as_deref().map(changes),
        drops: iv.drops,
        drill: iv.drill.iter().map(DrillJson::of).collect(),
    })
}

#[derive(Serialize)]
struct StackSet<'a> {
    reason: &'a str,
    captured: u64,
    /// Of those, the background sampler's.
    background: u64,
    stacks: Vec<StackJson<'a>>,
    processes: Vec<ProcessJson<'a>>,
}

#[derive(Serialize)]
struct GateJson<'a> {
    reason: &'a str,
    #[serde(flatten)]
    gate: Gate,
}

#[derive(Serialize)]
struct CaptureJson<'a> {
    reason: &'a str,
    start: Num,
    end: Num,
    calls: u64,
    stacks: u64,
    start_ns: u64,
    first_stack_ns: Option<u64>,
}

impl<'a> CaptureJson<'a> {
    fn of(c: &'a CaptureSpan) -> Self {
        CaptureJson {
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
    /// A tracepoint's category (`func` is its event); null: a function.
    tracepoint: Option<&'a str>,
    mode: Mode,
    phase: &'a str,
    secs: Num,
    total: u64,
    rate: Num,
    reasons: Vec<RowJson<'a>>,
    top_reason: Option<&'a str>,
    top_share: Option<Num>,
    hot_reason: Option<&'a str>,
    threshold: Num,
    other_merges: &'a [String],
    drops: Drops,
    stack_reason: Option<&'a str>,
    stacks_matched: u64,
    stacks_sent: u64,
    stacks_background: u64,
    stacks_captured: u64,
    stacks: Vec<StackJson<'a>>,
    stacks_by_reason: Vec<StackSet<'a>>,
    captures: Vec<CaptureJson<'a>>,
    /// Each captured reason's calls while captured: calls = shown +
    /// sampled_out + rate_capped + ringbuf_full + not_kept + unseen +
    /// unnamed.
    capture_calls: Vec<GateJson<'a>>,
    /// --drill: each captured reason's tree, every node's children
    /// adding up to it (empty without --drill).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    drill: Vec<DrillJson<'a>>,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    drill_drop: Option<DrillDropJson<'a>>,
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
        tracepoint: sum.tracepoint.as_deref(),
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
        stacks_background: sum.stacks_background,
        stacks_captured: last.map_or(0, |l| l.captured),
        stacks: stacks(last, top),
        stacks_by_reason: stack_sets(&sum.stacks, top),
        captures: sum.captures.iter().map(CaptureJson::of).collect(),
        capture_calls: sum
            .gates
            .iter()
            .map(|g| GateJson {
                reason: &g.reason,
                gate: g.gate,
            })
            .collect(),
        drill: sum.drill.iter().map(DrillJson::of).collect(),
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
        drill_drop: c.drill_drop,
        filter: sum.filter.as_ref(),
        fix: sum.fix.as_deref(),
    })
}

/// A drilled reason: its tree, and the same as folded paths (each leaf's
/// names from the caller up, joined by `;`).
#[derive(Serialize)]
struct DrillJson<'a> {
    reason: &'a str,
    levels: u32,
    calls: u64,
    captured_calls: Option<u64>,
    tree: &'a [DrillNode],
    paths: Vec<PathJson>,
}

#[derive(Serialize)]
struct PathJson {
    calls: u64,
    path: String,
}

impl<'a> DrillJson<'a> {
    fn of(t: &'a DrillTree) -> Self {
        DrillJson {
            reason: &t.reason,
            levels: t.levels,
            calls: t.root.calls,
            captured_calls: t.captured_calls,
            tree: &t.root.children,
            paths: t
                .folded()
                .into_iter()
                .map(|(path, calls)| PathJson { calls, path })
                .collect(),
        }
    }
}

#[derive(Serialize)]
struct PinnedJson<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    schema: u32,
    func: &'a str,
    tracepoint: Option<&'a str>,
    mode: Mode,
    profile: Option<&'a str>,
    kernel: &'a str,
    version: &'a str,
    pinned_at: Num,
    secs: Num,
    total: u64,
    rate: Num,
    reasons: Vec<RowJson<'a>>,
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
        tracepoint: p.tracepoint.as_deref(),
        mode: p.mode,
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
mod tests;
