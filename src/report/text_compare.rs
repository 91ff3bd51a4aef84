//! The comparison with a baseline, as text: an interval's table against
//! it, and the summary's before/after table with the verdict.

use std::fmt::Write as _;

use crate::report::fit::{elide, Fit};
use crate::report::time::clock_at;
use crate::report::{calls, Change, Comparison, Fig, FixApplied, LoadMoved};

fn rate_cell(f: Option<Fig>) -> String {
    f.map_or("-".into(), |f| format!("{:.1}", f.rate))
}

fn share_cell(f: Option<Fig>) -> String {
    f.map_or("-".into(), |f| format!("{:.1}%", f.share))
}

/// The rate now as a multiple of the rate before: "new" for a reason
/// without calls before.
fn times_cell(c: &Change) -> String {
    match c.rate_change() {
        Some(x) => format!("{x:.2}x"),
        None if c.now.is_some_and(|f| f.count > 0) => "new".into(),
        None => "-".into(),
    }
}

fn pp_cell(c: &Change) -> String {
    format!("{:+.1}pp", c.share_change())
}

fn reason_width(rows: &[Change]) -> usize {
    Fit::ALL.name_width(rows.iter().map(|r| r.reason.chars().count()), 0)
}

/// The columns of an interval's row against the baseline besides REASON.
const NUMBERS: usize = 2 + 13 + 13 + 8 + 11 + 9 + 9 + 10;

/// An interval's table against the baseline: the interval's calls, rate and
/// share of each reason, then the baseline's rate and share and the change.
pub(crate) fn interval_changes(out: &mut String, rows: &[Change], fit: Fit) {
    let (rows, rest) = rows.split_at(rows.len().min(fit.rows));
    let more = (!rest.is_empty()).then(|| format!("({} more)", rest.len()));
    let names = rows.iter().map(|r| r.reason.chars().count());
    let w = fit.name_width(names.chain(more.iter().map(String::len)), NUMBERS);
    let _ = writeln!(
        out,
        "  {:<w$} {:>12} {:>12} {:>7} {:>10} {:>8} {:>8} {:>9}",
        "REASON", "COUNT", "RATE/s", "SHARE", "BEFORE/s", "CHANGE", "BEFORE%", "CHANGE"
    );
    for c in rows {
        let count = c.now.map_or("-".into(), |f| f.count.to_string());
        let _ = writeln!(
            out,
            "  {:<w$} {:>12} {:>12} {:>7} {:>10} {:>8} {:>8} {:>9}",
            elide(&c.reason, w),
            count,
            rate_cell(c.now),
            share_cell(c.now),
            rate_cell(c.before),
            times_cell(c),
            share_cell(c.before),
            pp_cell(c)
        );
    }
    if let Some(more) = more {
        let _ = writeln!(out, "  {}", elide(&more, w));
    }
}

/// The summary's before/after table, its warnings and the verdict.
pub(crate) fn before_after(s: &mut String, cmp: &Comparison) {
    let b = &cmp.baseline;
    let _ = writeln!(
        s,
        "  before/after, baseline {} ({}, {} in {:.1}s, {:.1}/s):",
        cmp.file,
        clock_at(b.start),
        calls(b.total),
        b.secs,
        b.rate
    );
    let w = reason_width(&cmp.rows);
    let _ = writeln!(
        s,
        "    {:<w$} {:>10} {:>10} {:>8} {:>8} {:>8} {:>9}",
        "REASON", "BEFORE/s", "NOW/s", "CHANGE", "BEFORE%", "NOW%", "CHANGE"
    );
    for c in &cmp.rows {
        let _ = writeln!(
            s,
            "    {:<w$} {:>10} {:>10} {:>8} {:>8} {:>8} {:>9}",
            elide(&c.reason, w),
            rate_cell(c.before),
            rate_cell(c.now),
            times_cell(c),
            share_cell(c.before),
            share_cell(c.now),
            pp_cell(c)
        );
    }
    for w in &cmp.warnings {
        let _ = writeln!(s, "  warning: {w}");
    }
    let v = &cmp.verdict;
    let _ = writeln!(s, "  {}: {}", v.outcome.phase().name(), v.why);
    if let Some(d) = &cmp.drill_drop {
        let _ = writeln!(
            s,
            "  by path (--drill): of {}'s calls, {} fell from {:.1}% to {:.1}%",
            d.reason,
            d.path.join(" <- "),
            d.before,
            d.now
        );
    }
    if let Some(m) = &cmp.load_moved {
        let _ = writeln!(s, "  {}", load_moved(m));
    }
    fix_applied(s, &cmp.fix_applied, cmp.baseline.version);
}

/// `load moved to X: share 85.0%, was 3.0%`.
fn load_moved(m: &LoadMoved) -> String {
    let was = m
        .share_before
        .map_or("not in the baseline".into(), |b| format!("was {b:.1}%"));
    format!("load moved to {}: share {:.1}%, {was}", m.reason, m.share)
}

/// What was changed on the system: both --fix texts, then each recorded
/// difference `before → after`, or that there is none.
fn fix_applied(s: &mut String, f: &FixApplied, baseline_version: u32) {
    let text = |t: &Option<String>, known: bool| match t {
        Some(t) => format!("\"{t}\""),
        None if known => "none given".into(),
        None => "unknown".into(),
    };
    let _ = writeln!(
        s,
        "  fix applied: {} (baseline: {})",
        text(&f.fix, true),
        text(&f.baseline_fix, f.recorded)
    );
    for c in &f.changes {
        let _ = writeln!(s, "    {}: {} → {}", c.what, c.before, c.after);
    }
    if !f.recorded {
        let _ = writeln!(
            s,
            "    kernel build id, command line and knobs: unknown (the baseline is a result file of format version {baseline_version}, which does not record them)"
        );
    } else if f.no_change() {
        let _ = writeln!(s, "    no recorded change");
    }
}
