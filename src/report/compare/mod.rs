//! Before and after a fix: a run's reasons against those of a saved
//! baseline (`--baseline`), and the verdict on the baseline's hot reason.
//! Pure functions over plain data; the renderers show the result and
//! `jobs` turns the verdict into the exit status.

use crate::reasons::{NOT_FOUND_NAME, SITES_FULL_NAME};
use crate::report::drill::{self, DrillTree};
use crate::report::{
    is_hot, Baseline, Change, Comparison, Distribution, Fig, FixApplied, LoadMoved, Outcome,
    RunInfo, Saved, SystemChange, Verdict, VerifyConfig,
};
use crate::system::{knob_name, shown_value, Knob, SystemState};

/// Calls of the baseline's hot reason needed to say anything: in the
/// baseline, and in this run had the reason kept its old rate. (Were the
/// rate unchanged, a count of 20 would look halved by chance about once in
/// a hundred runs.)
pub(crate) const MIN_CALLS: u64 = 20;

/// A side's calls, with the reasons it knows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Side<'a> {
    pub(crate) calls: &'a Distribution,
    /// Every reason named, with calls or not (special slots aside).
    pub(crate) named: &'a [String],
    /// What made the run's window fall short of its workload's: `--pid`
    /// processes that exited before it ended ("pid 7 (sleep) exited 0.5s
    /// into the run"). Its rates then read low: no verdict.
    pub(crate) gone: &'a [String],
}

impl Side<'_> {
    fn fig(&self, reason: &str) -> Option<Fig> {
        match self.calls.rows.iter().find(|r| r.reason == reason) {
            Some(r) => Some(Fig::from(r)),
            None => self.named.iter().any(|n| n == reason).then(Fig::default),
        }
    }
}

/// Every reason with calls on either side: the baseline's in its order
/// (most calls first), then those only this run has calls of, most first.
pub(crate) fn changes(before: Side<'_>, now: Side<'_>) -> Vec<Change> {
    let mut names: Vec<&str> = before
        .calls
        .rows
        .iter()
        .filter(|r| r.count > 0)
        .map(|r| r.reason.as_str())
        .collect();
    // Rows are most calls first already.
    let only_now: Vec<_> = now
        .calls
        .rows
        .iter()
        .filter(|r| r.count > 0 && !names.contains(&r.reason.as_str()))
        .collect();
    names.extend(only_now.iter().map(|r| r.reason.as_str()));
    names
        .into_iter()
        .map(|name| Change {
            reason: name.to_string(),
            before: before.fig(name),
            now: now.fig(name),
        })
        .collect()
}

fn calls(n: f64) -> String {
    crate::report::calls(n.round() as u64)
}

/// The verdict: fix verified when the baseline's hot reason's share is now
/// below the threshold and its rate fell by at least `drop` percent; not
/// verified otherwise; inconclusive when either side is too short to tell
/// or this run cannot count the reason. `same_profile`: both sides grouped
/// callers the same way, so that a reason this run does not know has had
/// no calls.
pub(crate) fn verdict(
    before: &Distribution,
    now: Side<'_>,
    same_profile: bool,
    cfg: VerifyConfig,
) -> Verdict {
    let mut v = Verdict {
        outcome: Outcome::Inconclusive,
        reason: None,
        before: Fig::default(),
        now: Fig::default(),
        share_below: false,
        rate_dropped: false,
        drop: 0.0,
        config: cfg,
        why: String::new(),
    };
    let Some(top) = before.top() else {
        v.why = "the baseline has no calls: nothing to compare with".into();
        return v;
    };
    let Some(hot) = before.hot(cfg.threshold) else {
        v.why = format!(
            "the baseline has no hot reason: its top reason, {}, has {:.1}% of the calls, below the {}% threshold",
            top.reason, top.share, cfg.threshold
        );
        return v;
    };
    let (name, b) = (hot.reason.as_str(), Fig::from(hot));
    v.reason = Some(name.to_string());
    v.before = b;
    if b.count < MIN_CALLS {
        v.why = format!(
            "the baseline is too short: {} of {name}, its hot reason (at least {MIN_CALLS} needed to tell)",
            crate::report::calls(b.count)
        );
        return v;
    }
    let n = match now.fig(name) {
        Some(f) => f,
        None if same_profile => Fig::default(),
        None => {
            v.why =
                format!("{name}, the baseline's hot reason, is not a reason of this run's profile");
            return v;
        }
    };
    v.now = n;
    if let Some(first) = now.gone.first() {
        v.why = format!(
            "{first}: this run did not watch its workload for all of its {:.1}s, so its rates \
             read low (run it again with a process that lives to the end, or -d shorter)",
            now.calls.secs
        );
        return v;
    }
    let expected = b.rate * now.calls.secs;
    if expected < MIN_CALLS as f64 {
        v.why = format!(
            "this run is too short: at the baseline's {:.1}/s, {name} would have made {} in {:.1}s (at least {MIN_CALLS} needed to tell)",
            b.rate,
            calls(expected),
            now.calls.secs
        );
        return v;
    }
    // A share needs calls to be a share of: with none, or a handful, the
    // hot reason's absence says nothing (the workload may not have run).
    if now.calls.total < MIN_CALLS {
        v.why = format!(
            "this run saw too few calls to tell: {} in {:.1}s, at least {MIN_CALLS} needed \
             (did its workload run?)",
            crate::report::calls(now.calls.total),
            now.calls.secs
        );
        return v;
    }
    judge(&mut v, name, b, n);
    v
}

/// Judges a verdict both sides can tell: `b` and `n` are the figures of
/// `name`, the baseline's hot reason, before and now.
fn judge(v: &mut Verdict, name: &str, b: Fig, n: Fig) {
    let cfg = v.config;
    v.drop = 100.0 * (1.0 - n.rate / b.rate);
    v.share_below = n.share < cfg.threshold;
    v.rate_dropped = v.drop >= cfg.drop;
    v.outcome = if v.share_below && v.rate_dropped {
        Outcome::Verified
    } else {
        Outcome::NotVerified
    };
    let share = format!(
        "share {:.1}% (was {:.1}%), {} the {}% threshold",
        n.share,
        b.share,
        if v.share_below { "below" } else { "not below" },
        cfg.threshold
    );
    let fell = if v.rate_dropped {
        format!("fell {:.1}%", v.drop)
    } else if v.drop > 0.0 {
        format!("fell only {:.1}%", v.drop)
    } else if v.drop < 0.0 {
        format!("rose {:.1}%", -v.drop)
    } else {
        "did not change".into()
    };
    v.why = format!(
        "{name} (the baseline's hot reason): {share}; rate {fell}, from {:.1}/s to {:.1}/s (a fall of {}% needed)",
        b.rate, n.rate, cfg.drop
    );
}

/// The reason the load moved to, if the baseline's hot reason `hot` is
/// now below `threshold` and another reason, below it before, is now at
/// or above it (the largest such). With `same_profile`, a hot reason with
/// no calls now has fallen.
pub(crate) fn load_moved(
    rows: &[Change],
    hot: Option<&str>,
    threshold: f64,
    same_profile: bool,
) -> Option<LoadMoved> {
    let hot = hot?;
    let fell = rows
        .iter()
        .find(|c| c.reason == hot)
        // Under the same profile, no calls now at all is the farthest
        // fall; under another, the reason may just be named otherwise.
        .is_some_and(|c| match c.now {
            Some(f) => !is_hot(f.share, threshold),
            None => same_profile,
        });
    if !fell {
        return None;
    }
    rows.iter()
        .filter(|c| c.reason != hot && c.reason != NOT_FOUND_NAME && c.reason != SITES_FULL_NAME)
        .filter(|c| c.now.is_some_and(|f| is_hot(f.share, threshold)))
        .filter(|c| !c.before.is_some_and(|f| is_hot(f.share, threshold)))
        .max_by(|a, b| {
            let share = |c: &Change| c.now.unwrap_or_default().share;
            share(a).total_cmp(&share(b))
        })
        .map(|c| LoadMoved {
            reason: c.reason.clone(),
            share: c.now.unwrap_or_default().share,
            share_before: c.before.map(|f| f.share),
        })
}

/// A knob's state as shown.
fn knob_state(k: Option<&Knob>) -> String {
    match k {
        None => "not recorded".into(),
        Some(Knob { value: Some(v), .. }) => shown_value(v).to_string(),
        Some(Knob { error: Some(e), .. }) => format!("unreadable ({e})"),
        Some(_) => "absent".into(),
    }
}

/// The recorded differences between two states: the build id, the
/// command line, then each knob, the baseline's in its order and then
/// those only this run records. A choice file counts as changed only if
/// its choice did (`shown_value`).
pub(crate) fn system_changes(before: &SystemState, now: &SystemState) -> Vec<SystemChange> {
    let mut out = Vec::new();
    let unknown = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
    for (what, b, n) in [
        ("kernel build id", &before.build_id, &now.build_id),
        ("kernel command line", &before.cmdline, &now.cmdline),
    ] {
        if b != n {
            out.push(SystemChange {
                what: what.into(),
                before: unknown(b),
                after: unknown(n),
            });
        }
    }
    let mut paths: Vec<&str> = before.knobs.iter().map(|k| k.path.as_str()).collect();
    for k in &now.knobs {
        if !paths.contains(&k.path.as_str()) {
            paths.push(&k.path);
        }
    }
    let find = |s: &'_ SystemState, p: &str| s.knobs.iter().find(|k| k.path == p).cloned();
    for p in paths {
        let (b, n) = (
            knob_state(find(before, p).as_ref()),
            knob_state(find(now, p).as_ref()),
        );
        if b != n {
            out.push(SystemChange {
                what: knob_name(p),
                before: b,
                after: n,
            });
        }
    }
    out
}

/// The baseline's recorded state against this run's.
pub(crate) fn fix_applied(b: &Saved, info: &RunInfo) -> FixApplied {
    let mut changes = Vec::new();
    if b.kernel != info.kernel {
        changes.push(SystemChange {
            what: "kernel".into(),
            before: b.kernel.clone(),
            after: info.kernel.clone(),
        });
    }
    let recorded = match (&b.system, &info.system) {
        (Some(before), Some(now)) => {
            changes.extend(system_changes(before, now));
            true
        }
        _ => false,
    };
    FixApplied {
        fix: info.fix.clone(),
        baseline_fix: b.fix.clone(),
        recorded,
        changes,
    }
}

fn profile_name(p: Option<&str>) -> &str {
    p.unwrap_or("one reason per caller")
}

/// Warnings about a baseline taken on another kernel or with another
/// profile: known before the run starts.
pub(crate) fn setup_warnings(b: &Saved, info: &RunInfo) -> Vec<String> {
    let mut w = Vec::new();
    if b.kernel != info.kernel {
        w.push(format!(
            "the baseline is from kernel {}, this is {}",
            b.kernel, info.kernel
        ));
    }
    if b.profile != info.profile {
        w.push(format!(
            "the baseline used {}, this run {}: reasons may not correspond",
            profile_name(b.profile.as_deref()),
            profile_name(info.profile.as_deref())
        ));
    }
    w
}

/// The run's calls (with the reasons it named) against the baseline.
pub(crate) fn compare(base: &Baseline, now: Side<'_>, info: &RunInfo) -> Comparison {
    let before_calls = base.saved.calls();
    let before = Side {
        calls: &before_calls,
        named: &base.saved.reason_names,
        gone: &[],
    };
    let rows = changes(before, now);
    let mut warnings = setup_warnings(&base.saved, info);
    let list = |f: &dyn Fn(&Change) -> bool| -> Vec<&str> {
        rows.iter()
            .filter(|c| f(c))
            .map(|c| c.reason.as_str())
            .collect()
    };
    let only_before = list(&|c| c.now.is_none());
    let only_now = list(&|c| c.before.is_none());
    if !only_before.is_empty() {
        warnings.push(format!("only in the baseline: {}", only_before.join(", ")));
    }
    if !only_now.is_empty() {
        warnings.push(format!("only in this run: {}", only_now.join(", ")));
    }
    let same_profile = base.saved.profile == info.profile;
    let mut verdict = verdict(&before_calls, now, same_profile, base.verify);
    // A move needs the evidence a verdict needs: without it, "100% now" may
    // be one call of a workload that was gone.
    let load_moved = match verdict.outcome {
        Outcome::Inconclusive => None,
        _ => load_moved(
            &rows,
            verdict.reason.as_deref(),
            base.verify.threshold,
            same_profile,
        ),
    };
    if let (true, Outcome::Verified, Some(m)) =
        (base.verify.fail_on_move, verdict.outcome, &load_moved)
    {
        verdict.outcome = Outcome::NotVerified;
        verdict.why.push_str(&format!(
            "; but the load moved to {} ({:.1}%), refused by --fail-on-move",
            m.reason, m.share
        ));
    }
    Comparison {
        file: base.file.clone(),
        baseline: Saved {
            stacks: Vec::new(),
            ..base.saved.clone()
        },
        rows,
        verdict,
        warnings,
        load_moved,
        fix_applied: fix_applied(&base.saved, info),
        drill_drop: None,
    }
}

/// --drill in the baseline and in this run (`now`): where the baseline's
/// hot reason's calls fell, node by node; a verified fix names the node.
pub(crate) fn add_drill(cmp: &mut Comparison, now: &[DrillTree]) {
    let Some(reason) = cmp.verdict.reason.clone() else {
        return;
    };
    let before = cmp.baseline.drill.iter().find(|d| d.reason == reason);
    let (Some(before), Some(now)) = (before, now.iter().find(|t| t.reason == reason)) else {
        return;
    };
    let before: Vec<(Vec<String>, u64)> = before
        .paths
        .iter()
        .map(|p| (p.path.clone(), p.calls))
        .collect();
    let now: Vec<(Vec<String>, u64)> = now
        .folded()
        .into_iter()
        .map(|(p, n)| (p.split(';').map(String::from).collect(), n))
        .collect();
    cmp.drill_drop = drill::node_drop(&reason, &before, &now);
    if let (Outcome::Verified, Some(d)) = (cmp.verdict.outcome, &cmp.drill_drop) {
        cmp.verdict.why.push_str(&format!(
            "; by path, {} fell from {:.1}% to {:.1}% of its calls",
            d.path.join(" <- "),
            d.before,
            d.now
        ));
    }
}

#[cfg(test)]
mod tests;
