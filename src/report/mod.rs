//! What topdown reports, as plain data with reason names resolved, and its
//! renderings: aligned text tables (`text`), NDJSON (`json`) and folded
//! stacks for flame graph tools (`folded`); and a run's result saved as a
//! file (`saved`) to compare a later run with (`compare`). The data types
//! of all of them live here, so that the children use this module and
//! never each other in a circle.

pub(crate) mod compare;
pub(crate) mod drill;
pub(crate) mod fit;
#[cfg(test)]
pub(crate) mod fixtures;
pub(crate) mod flamegraph;
pub(crate) mod folded;
mod hot;
pub(crate) mod json;
pub(crate) mod openmetrics;
mod phase;
pub(crate) mod pprof;
pub(crate) mod printer;
pub(crate) mod saved;
pub(crate) mod text;
pub(crate) mod text_compare;
pub(crate) mod time;

use serde::{Deserialize, Serialize};

use crate::bpf::probe::Mode;
use crate::system::SystemState;

pub(crate) use hot::{is_hot, top_label, DEFAULT_THRESHOLD};
pub(crate) use phase::{Outcome, Phase};

/// One reason's figures over an interval or the whole run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ReasonRow {
    pub(crate) reason: String,
    pub(crate) count: u64,
    pub(crate) rate: f64,
    /// Percent of the calls in the same span.
    pub(crate) share: f64,
    /// A slot of calls without a reason (caller not found, tables full):
    /// never the hot reason.
    pub(crate) special: bool,
}

/// Calls over a span, per reason, largest first.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Distribution {
    pub(crate) secs: f64,
    pub(crate) total: u64,
    pub(crate) rate: f64,
    pub(crate) rows: Vec<ReasonRow>,
}

impl Distribution {
    /// The reason with the most calls, special slots aside.
    pub(crate) fn top(&self) -> Option<&ReasonRow> {
        self.rows.iter().find(|r| !r.special && r.count > 0)
    }

    /// The hot reason: the top one if its share reaches `threshold`. The
    /// one definition, for the summaries, `show` and the verdict.
    pub(crate) fn hot(&self, threshold: f64) -> Option<&ReasonRow> {
        self.top().filter(|r| is_hot(r.share, threshold))
    }
}

/// A symbolized stack: kernel frames caller first, then user frames
/// innermost first.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Stack {
    pub(crate) kernel: Vec<String>,
    pub(crate) user: Vec<String>,
}

impl Stack {
    /// Frames for display, with `--` before the user part.
    pub(crate) fn display(&self) -> Vec<String> {
        let mut f = self.kernel.clone();
        if !self.user.is_empty() {
            f.push("--".into());
            f.extend(self.user.iter().cloned());
        }
        f
    }
}

/// A process a stack was captured in: its command name (the thread's, as
/// the kernel has it) and pid (the thread group's).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Process {
    pub(crate) comm: String,
    pub(crate) pid: u32,
}

impl std::fmt::Display for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}[{}]", self.comm, self.pid)
    }
}

/// A process and how many stacks were captured in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcessCount {
    pub(crate) process: Process,
    pub(crate) count: u64,
}

/// Processes by count, most first (ties by name and pid).
pub(crate) fn rank_processes(
    counts: impl IntoIterator<Item = (Process, u64)>,
) -> Vec<ProcessCount> {
    let mut v: Vec<ProcessCount> = counts
        .into_iter()
        .map(|(process, count)| ProcessCount { process, count })
        .collect();
    v.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.process.cmp(&b.process))
    });
    v
}

/// A distinct stack and how often it was captured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StackCount {
    pub(crate) stack: Stack,
    pub(crate) count: u64,
    /// The processes it was captured in, most first.
    pub(crate) processes: Vec<ProcessCount>,
}

/// The stacks captured of one reason, most frequent first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReasonStacks {
    pub(crate) reason: String,
    /// Stacks captured while capture was on the reason.
    pub(crate) captured: u64,
    /// Stacks the background sampler took before the reason qualified.
    /// The counts below sum to both.
    pub(crate) background: u64,
    pub(crate) stacks: Vec<StackCount>,
    /// The processes its stacks were captured in, most first.
    pub(crate) processes: Vec<ProcessCount>,
}

impl ReasonStacks {
    /// Every stack shown: captured, and the background sampler's.
    pub(crate) fn total(&self) -> u64 {
        self.captured + self.background
    }

    pub(crate) fn top(&self, n: usize) -> &[StackCount] {
        &self.stacks[..n.min(self.stacks.len())]
    }

    pub(crate) fn top_processes(&self, n: usize) -> &[ProcessCount] {
        &self.processes[..n.min(self.processes.len())]
    }
}

/// One print interval.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IntervalReport {
    /// Seconds since the Unix epoch, and local time as HH:MM:SS.
    pub(crate) unix_time: f64,
    pub(crate) clock: String,
    pub(crate) calls: Distribution,
    /// The reasons whose stacks are being captured, oldest first, and the
    /// interval's stacks of each.
    pub(crate) stacks: Vec<ReasonStacks>,
    /// With --baseline: the interval's reasons against the baseline's.
    pub(crate) compare: Option<Vec<Change>>,
    /// The interval's drops.
    pub(crate) drops: Drops,
    /// --drill: the interval's calls of each drilled reason by path.
    pub(crate) drill: Vec<drill::DrillTree>,
}

/// Drops and misses: calls not counted under their true reason, or stacks
/// not captured. Always reported, zeros included, so "none" is visible.
/// (Field order is report order. Read back from result files, where a
/// field added later may be missing.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub(crate) struct Drops {
    /// Calls whose caller's return address was not found.
    pub(crate) caller_not_found: u64,
    /// Calls counted without a reason because the site tables were full.
    pub(crate) sites_full: u64,
    /// Calls the kernel did not run the program for (recursion).
    pub(crate) recursion_misses: u64,
    /// Calls of a deeper-frame reason whose unwind failed (counted under
    /// the caller's default reason).
    pub(crate) deep_unwind_failed: u64,
    pub(crate) stacks_sampled_out: u64,
    pub(crate) stacks_rate_capped: u64,
    pub(crate) stacks_ringbuf_full: u64,
    /// The background sampler's stacks lost: to a full ring buffer, or
    /// from a call site never resolved while they could be shown.
    pub(crate) stacks_background_lost: u64,
    /// Calls made by topdown itself (symbolizing reads files), not counted.
    pub(crate) own_calls: u64,
}

impl Drops {
    /// The fields that are not zero, as `name=N`, names in words.
    pub(crate) fn nonzero(&self) -> Vec<String> {
        self.fields()
            .iter()
            .filter(|(_, v)| *v > 0)
            .map(|(k, v)| format!("{}={v}", k.replace('_', " ")))
            .collect()
    }

    /// Every field with its name, in report order.
    pub(crate) fn fields(&self) -> [(&'static str, u64); 9] {
        [
            ("caller_not_found", self.caller_not_found),
            ("sites_full", self.sites_full),
            ("recursion_misses", self.recursion_misses),
            ("deep_unwind_failed", self.deep_unwind_failed),
            ("stacks_sampled_out", self.stacks_sampled_out),
            ("stacks_rate_capped", self.stacks_rate_capped),
            ("stacks_ringbuf_full", self.stacks_ringbuf_full),
            ("stacks_background_lost", self.stacks_background_lost),
            ("own_calls", self.own_calls),
        ]
    }
}

/// The filters a run counted with (--pid, --cgroup, --cpu).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct FilterInfo {
    /// Processes (thread groups); empty: any.
    pub(crate) pids: Vec<u32>,
    pub(crate) cgroup: Option<String>,
    pub(crate) cpus: Option<Vec<u32>>,
    /// In words, as the header says it.
    pub(crate) text: String,
}

impl FilterInfo {
    /// The filter as reports carry it; None without one.
    pub(crate) fn of(f: &crate::filter::Filter) -> Option<FilterInfo> {
        (!f.is_empty()).then(|| FilterInfo {
            pids: f.tgids(),
            cgroup: f.cgroup.as_ref().map(|c| c.path.display().to_string()),
            cpus: f.cpus.clone(),
            text: f.describe().unwrap_or_default(),
        })
    }
}

/// The cheap caller lookup checked against a full unwind (--verify-caller).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Verify {
    pub(crate) checked: u64,
    pub(crate) mismatches: u64,
    pub(crate) unwind_failed: u64,
    /// A tracepoint's deeper frames read from the stack and checked
    /// against the unwind's (a difference counts as a mismatch).
    pub(crate) frames_checked: u64,
    /// Call sites by what the instruction before them says: a full
    /// unwind cannot see a function that jumped to FUNC, this can.
    #[serde(flatten)]
    pub(crate) sites: crate::tailcall::Sites,
}

/// A BPF program's cost from the kernel's run statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Cost {
    pub(crate) run_cnt: u64,
    pub(crate) run_time_ns: u64,
    pub(crate) recursion_misses: u64,
}

/// What became of one reason's calls while it was captured: `calls` is
/// the sum of `shown`, `sampled_out`, `rate_capped`, `ringbuf_full`,
/// `not_kept`, `unseen` and `unnamed`, every call accounted for. A live
/// run's calls are those its capture spans counted (the same figures as
/// the "stack capture" lines); serve's, those the stack gate took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Gate {
    /// Calls of the reason while it was captured.
    pub(crate) calls: u64,
    /// Stacks shown (the summary's `captured`), a uprobe's from sites not
    /// yet named among them.
    pub(crate) shown: u64,
    pub(crate) sampled_out: u64,
    pub(crate) rate_capped: u64,
    pub(crate) ringbuf_full: u64,
    /// Stacks sent but not shown: left in the ring buffer at the end, or
    /// (a uprobe's) told to be another reason's once named.
    pub(crate) not_kept: u64,
    /// Counted before the switch reached the reason's call sites (its
    /// cached sites are flagged a moment after capture starts): the stack
    /// gate never saw them.
    pub(crate) unseen: u64,
    /// A uprobe's calls from sites not named yet, sent untagged, and not
    /// shown: dropped among those sites' calls (the "(unresolved)" row's
    /// causes), or found to be this reason's only later.
    pub(crate) unnamed: u64,
}

impl Gate {
    /// The calls the parts account for.
    pub(crate) fn accounted(&self) -> u64 {
        self.shown
            + self.sampled_out
            + self.rate_capped
            + self.ringbuf_full
            + self.not_kept
            + self.unseen
            + self.unnamed
    }

    /// Whether the parts add up to the calls.
    #[cfg(test)]
    pub(crate) fn holds(&self) -> bool {
        self.accounted() == self.calls
    }
}

/// The gate counts' name for a uprobe's calls from sites not resolved yet.
pub(crate) const UNRESOLVED: &str = "(unresolved)";

/// A reason's gate counts (see Gate): a reason's, or, named "(unresolved)",
/// a uprobe's calls from sites not resolved yet, sent untagged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReasonGate {
    pub(crate) reason: String,
    pub(crate) gate: Gate,
}

/// One stretch of stack capture: a reason captured from `start` to `end`
/// (seconds since the run started).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CaptureSpan {
    pub(crate) reason: String,
    pub(crate) start: f64,
    pub(crate) end: f64,
    /// The reason's calls meanwhile, and the stacks captured of them.
    pub(crate) calls: u64,
    pub(crate) stacks: u64,
    /// CLOCK_MONOTONIC (the kernel's bpf_ktime_get_ns) when capture was
    /// switched on, and of its first stack: the reaction to a spike.
    pub(crate) start_ns: u64,
    pub(crate) first_stack_ns: Option<u64>,
}

/// Everything the final report says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Summary {
    pub(crate) func: String,
    /// A tracepoint's category (`t:CATEGORY:EVENT`): `func` is the event.
    /// None: a function.
    pub(crate) tracepoint: Option<String>,
    pub(crate) mode: Mode,
    pub(crate) phase: Phase,
    /// The kernel release, and where the profile came from (None: one
    /// reason per caller).
    pub(crate) kernel: String,
    pub(crate) profile: Option<String>,
    /// When counting started, in Unix seconds.
    pub(crate) start: f64,
    pub(crate) calls: Distribution,
    /// Every reason named by the end, with calls or not, special slots
    /// aside.
    pub(crate) named: Vec<String>,
    /// Callers merged into OTHER past --max-reasons.
    pub(crate) other_merges: Vec<String>,
    pub(crate) drops: Drops,
    /// Stacks of every reason captured, in the order capture reached them;
    /// the last is the one captured at the end.
    pub(crate) stacks: Vec<ReasonStacks>,
    /// When each reason was captured, in order.
    pub(crate) captures: Vec<CaptureSpan>,
    /// Calls of the captured reasons seen by the stack program, and
    /// samples it sent, over the run.
    pub(crate) stacks_matched: u64,
    pub(crate) stacks_sent: u64,
    /// Stacks the background sampler sent (shown or not).
    pub(crate) stacks_background: u64,
    /// Each captured reason's calls at the stack gate, and what became of
    /// them.
    pub(crate) gates: Vec<ReasonGate>,
    /// --drill: each captured reason's calls by path.
    pub(crate) drill: Vec<drill::DrillTree>,
    pub(crate) verify: Option<Verify>,
    /// Calls the site cache did not serve (new sites, deeper-frame rules,
    /// callers not found, fentry frames the quick read misses): the ones
    /// that took the counting program's slow path.
    pub(crate) uncached: u64,
    /// The counting program's run statistics.
    pub(crate) cost: Cost,
    /// An empty companion program's, named by its kind.
    pub(crate) companion: Option<(&'static str, Cost)>,
    /// With --baseline: the run against the baseline, and the verdict.
    pub(crate) compare: Option<Comparison>,
    /// Which calls were counted (None: all).
    pub(crate) filter: Option<FilterInfo>,
    /// --threshold: the share at which a reason is hot.
    pub(crate) threshold: f64,
    /// The system's settings during the run, and --fix.
    pub(crate) system: Option<SystemState>,
    pub(crate) fix: Option<String>,
}

impl Summary {
    pub(crate) fn top(&self) -> Option<&ReasonRow> {
        self.calls.top()
    }

    pub(crate) fn hot(&self) -> Option<&ReasonRow> {
        self.calls.hot(self.threshold)
    }
}

/// A pinned instance's counts since it was pinned.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pinned {
    pub(crate) func: String,
    /// A tracepoint's category, as recorded at pin time (None: a
    /// function's, or a pin older than the record).
    pub(crate) tracepoint: Option<String>,
    pub(crate) mode: Mode,
    /// Where its profile came from (None: one reason per caller).
    pub(crate) profile: Option<String>,
    pub(crate) kernel: String,
    /// The topdown version that pinned it.
    pub(crate) version: String,
    /// When it was pinned, in Unix seconds; `calls.secs` is its age.
    pub(crate) pinned_at: f64,
    /// Every reason named so far, calls or not, largest first.
    pub(crate) calls: Distribution,
    pub(crate) drops: Drops,
    /// With --baseline: the counts against the baseline, and the verdict.
    pub(crate) compare: Option<Comparison>,
    /// The filter fixed at pin time, in words (None: every call counts).
    pub(crate) filter: Option<String>,
    /// The share at which a reason is hot (`topdown show --threshold`).
    pub(crate) threshold: f64,
    /// With `show --save` or `--baseline`: the system's settings now, and
    /// --fix.
    pub(crate) system: Option<SystemState>,
    pub(crate) fix: Option<String>,
}

impl Pinned {
    pub(crate) fn top(&self) -> Option<&ReasonRow> {
        self.calls.top()
    }

    pub(crate) fn hot(&self) -> Option<&ReasonRow> {
        self.calls.hot(self.threshold)
    }
}

/// `N call(s)`.
pub(crate) fn calls(n: u64) -> String {
    format!("{n} call{}", if n == 1 { "" } else { "s" })
}

// What a run is compared with (`--baseline`), and the comparison.

/// What a fix must achieve: the baseline's hot reason's share now below
/// `threshold` percent, and its rate down by at least `drop` percent; with
/// `fail_on_move` (--fail-on-move), no other reason risen past the
/// threshold in its place.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct VerifyConfig {
    pub(crate) threshold: f64,
    pub(crate) drop: f64,
    pub(crate) fail_on_move: bool,
}

/// A saved baseline to compare with.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Baseline {
    /// The file, as named on the command line.
    pub(crate) file: String,
    pub(crate) saved: Saved,
    pub(crate) verify: VerifyConfig,
}

/// What a run is, beside its counts: for warnings about a baseline taken
/// elsewhere, and for what changed on the system since.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct RunInfo {
    pub(crate) kernel: String,
    /// Where the profile came from; None: one reason per caller.
    pub(crate) profile: Option<String>,
    /// The system's settings (None: not read), and --fix.
    pub(crate) system: Option<SystemState>,
    pub(crate) fix: Option<String>,
}

/// One reason's calls on one side.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Fig {
    pub(crate) count: u64,
    pub(crate) rate: f64,
    /// Percent of that side's calls.
    pub(crate) share: f64,
}

impl From<&ReasonRow> for Fig {
    fn from(r: &ReasonRow) -> Self {
        Fig {
            count: r.count,
            rate: r.rate,
            share: r.share,
        }
    }
}

/// A reason before and now.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Change {
    pub(crate) reason: String,
    /// None: that side does not know the reason at all (another profile,
    /// or a caller it never saw); a known reason without calls is zeros.
    pub(crate) before: Option<Fig>,
    pub(crate) now: Option<Fig>,
}

impl Change {
    /// Percentage points the share moved; a side without the reason
    /// counts as 0%.
    pub(crate) fn share_change(&self) -> f64 {
        self.now.unwrap_or_default().share - self.before.unwrap_or_default().share
    }

    /// The rate now as a multiple of the rate before; None when there was
    /// none before.
    pub(crate) fn rate_change(&self) -> Option<f64> {
        let before = self.before.unwrap_or_default().rate;
        (before > 0.0).then(|| self.now.unwrap_or_default().rate / before)
    }
}

/// The verdict on the baseline's hot reason.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Verdict {
    pub(crate) outcome: Outcome,
    /// The baseline's hot reason (None: the baseline has no calls), its
    /// figures before and now.
    pub(crate) reason: Option<String>,
    pub(crate) before: Fig,
    pub(crate) now: Fig,
    /// The two conditions (both false when inconclusive).
    pub(crate) share_below: bool,
    pub(crate) rate_dropped: bool,
    /// Percent the rate fell (negative: it rose).
    pub(crate) drop: f64,
    pub(crate) config: VerifyConfig,
    /// What was found, one sentence without the outcome.
    pub(crate) why: String,
}

/// Where the load went: the baseline's hot reason fell below the
/// threshold and this reason rose past it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LoadMoved {
    pub(crate) reason: String,
    pub(crate) share: f64,
    /// None: the baseline does not know the reason.
    pub(crate) share_before: Option<f64>,
}

/// One recorded setting that differs between the baseline and this run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SystemChange {
    /// `kernel`, `kernel build id`, `kernel command line` or a knob's
    /// name (`knob_name`).
    pub(crate) what: String,
    pub(crate) before: String,
    pub(crate) after: String,
}

/// What was changed on the system between the baseline and this run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FixApplied {
    /// --fix of this run, and of the baseline.
    pub(crate) fix: Option<String>,
    pub(crate) baseline_fix: Option<String>,
    /// Both sides record the system's settings; false for a baseline of
    /// an older format (which records only the kernel release): then the
    /// other settings and the baseline's fix are unknown.
    pub(crate) recorded: bool,
    /// Every difference, the kernel release first.
    pub(crate) changes: Vec<SystemChange>,
}

impl FixApplied {
    /// Nothing recorded differs, and everything was recorded.
    pub(crate) fn no_change(&self) -> bool {
        self.recorded && self.changes.is_empty()
    }
}

/// A run compared with its baseline.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Comparison {
    /// The baseline file as named, and what it holds (its stacks left out).
    pub(crate) file: String,
    pub(crate) baseline: Saved,
    pub(crate) rows: Vec<Change>,
    pub(crate) verdict: Verdict,
    /// Differences that make the comparison less meaningful.
    pub(crate) warnings: Vec<String>,
    /// Where the load went, if it moved to another reason.
    pub(crate) load_moved: Option<LoadMoved>,
    pub(crate) fix_applied: FixApplied,
    /// --drill in both runs: the node of the baseline's hot reason whose
    /// share of the reason's calls fell the most, found level by level.
    pub(crate) drill_drop: Option<drill::NodeDrop>,
}

// A result file (`--save`), as saved.rs reads and writes it.

/// One reason's calls over the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SavedRow {
    pub(crate) reason: String,
    pub(crate) count: u64,
    pub(crate) rate: f64,
    pub(crate) share: f64,
}

/// A distinct stack and how often it was captured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SavedStack {
    pub(crate) count: u64,
    /// Caller first; "--" before user frames.
    pub(crate) frames: Vec<String>,
}

/// A reason's top stacks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SavedStacks {
    pub(crate) reason: String,
    pub(crate) captured: u64,
    /// The background sampler's (missing from older files: none).
    #[serde(default)]
    pub(crate) background: u64,
    pub(crate) stacks: Vec<SavedStack>,
}

/// A saved result. (Field order is file order.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Saved {
    pub(crate) format: String,
    pub(crate) version: u32,
    /// The topdown version that wrote it.
    pub(crate) topdown: String,
    /// "run": a run's calls from its start; "pinned": a pinned instance's
    /// since it was pinned (`topdown show`).
    pub(crate) source: String,
    pub(crate) func: String,
    /// A tracepoint's category: `func` is the event. None: a function, or
    /// not recorded (files written before it was, and a pinned instance's:
    /// `mode` says whether it is a tracepoint).
    #[serde(default)]
    pub(crate) tracepoint: Option<String>,
    /// The kernel release it ran on.
    pub(crate) kernel: String,
    /// Where the profile came from; None: one reason per caller.
    pub(crate) profile: Option<String>,
    /// Every reason named in the run, with calls or not, special slots aside.
    pub(crate) reason_names: Vec<String>,
    pub(crate) mode: Mode,
    pub(crate) phase: String,
    /// Unix seconds when counting started, and for how long it went on.
    pub(crate) start: f64,
    pub(crate) secs: f64,
    pub(crate) total: u64,
    pub(crate) rate: f64,
    /// Reasons with calls, most first.
    pub(crate) reasons: Vec<SavedRow>,
    /// The top reason if its share reached `threshold` (version 1: the
    /// top reason).
    pub(crate) hot_reason: Option<String>,
    /// The top stacks of every reason captured, in the order capture
    /// reached them.
    pub(crate) stacks: Vec<SavedStacks>,
    #[serde(default)]
    pub(crate) drops: Drops,
    /// The reason with most calls, and --threshold (version 2 on).
    #[serde(default)]
    pub(crate) top_reason: Option<String>,
    #[serde(default)]
    pub(crate) threshold: Option<f64>,
    /// --fix, and the system's settings (version 2 on; None in an older
    /// file: unknown).
    #[serde(default)]
    pub(crate) fix: Option<String>,
    #[serde(default)]
    pub(crate) system: Option<SystemState>,
    /// --drill: each drilled reason's calls by path (added within version
    /// 2: missing, none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) drill: Vec<SavedDrill>,
}

/// A drilled reason's paths as saved: each leaf's names from the caller
/// up, with its calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SavedDrill {
    pub(crate) reason: String,
    pub(crate) paths: Vec<SavedPath>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SavedPath {
    pub(crate) calls: u64,
    pub(crate) path: Vec<String>,
}
