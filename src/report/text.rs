//! Reports as aligned text tables.

use std::fmt::Write as _;

use crate::bpf::limits::MAX_SITES;
use crate::bpf::probe::Mode;
use crate::reasons::SITES_FULL_NAME;
pub(crate) use crate::report::fit::Fit;
use crate::report::fit::{column_width, elide};
use crate::report::text_compare::{before_after, interval_changes};
use crate::report::{
    calls, is_hot, top_label, Cost, Distribution, Drops, IntervalReport, Pinned, ProcessCount,
    ReasonGate, ReasonRow, ReasonStacks, Summary, UNRESOLVED,
};

/// The columns of a table row besides REASON.
const NUMBERS: usize = 2 + 13 + 13 + 8;

fn table(out: &mut String, d: &Distribution, count_title: &str, fit: Fit) {
    let (rows, rest) = d.rows.split_at(d.rows.len().min(fit.rows));
    let more = (!rest.is_empty()).then(|| format!("({} more)", rest.len()));
    let names = rows.iter().map(|r| r.reason.chars().count());
    let w = fit.name_width(names.chain(more.iter().map(String::len)), NUMBERS);
    let _ = writeln!(
        out,
        "  {:<w$} {:>12} {:>12} {:>7}",
        "REASON", count_title, "RATE/s", "SHARE"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "  {:<w$} {:>12} {:>12.1} {:>6.1}%",
            elide(&r.reason, w),
            r.count,
            r.rate,
            r.share
        );
    }
    if let Some(more) = more {
        let count: u64 = rest.iter().map(|r| r.count).sum();
        let rate: f64 = rest.iter().map(|r| r.rate).sum();
        let share: f64 = rest.iter().map(|r| r.share).sum();
        let _ = writeln!(
            out,
            "  {:<w$} {count:>12} {rate:>12.1} {share:>6.1}%",
            elide(&more, w)
        );
    }
}

/// The per-interval table, then the interval's top stacks if any were
/// captured.
pub(crate) fn interval(iv: &IntervalReport, top: usize, fit: Fit) -> String {
    let d = &iv.calls;
    let drops = iv.drops.nonzero();
    let drops = if drops.is_empty() {
        String::new()
    } else {
        format!("; drops: {}", drops.join(", "))
    };
    let mut s = format!(
        "{}  {} in {:.2}s, {:.1}/s{drops}\n",
        iv.clock,
        calls(d.total),
        d.secs,
        d.rate
    );
    match &iv.compare {
        Some(rows) if !rows.is_empty() => interval_changes(&mut s, rows, fit),
        _ if !d.rows.is_empty() => table(&mut s, d, "COUNT", fit),
        _ => {}
    }
    for st in iv.stacks.iter().filter(|st| st.total() > 0) {
        s.push_str(&stacks(st, top, None));
    }
    for t in iv.drill.iter().filter(|t| t.root.calls > 0) {
        s.push_str(&super::drill::text(t));
    }
    s
}

/// `hot reason: X (85.0%)`, or `top reason: X (55.6%, below the 80%
/// threshold)`.
fn top_line(s: &mut String, top: &ReasonRow, threshold: f64) {
    let below = if is_hot(top.share, threshold) {
        String::new()
    } else {
        format!(", below the {threshold}% threshold")
    };
    let _ = writeln!(
        s,
        "  {}: {} ({:.1}%{below})",
        top_label(top.share, threshold),
        top.reason,
        top.share
    );
}

/// Processes shown with each stack.
const STACK_PROCESSES: usize = 3;

/// The first `n` processes as `comm[pid] count`, and how many more there are.
fn processes(list: &[ProcessCount], n: usize) -> String {
    let mut parts: Vec<String> = list
        .iter()
        .take(n)
        .map(|p| format!("{} {}", p.process, p.count))
        .collect();
    if list.len() > n {
        parts.push(format!("+{} more", list.len() - n));
    }
    parts.join(", ")
}

/// A reason's top processes over the run, by the stacks sampled in each:
/// samples, not a share of the reason's calls.
fn top_processes(st: &ReasonStacks, top: usize) -> String {
    let list: Vec<String> = st
        .top_processes(top)
        .iter()
        .map(|p| format!("{} {}", p.process, p.count))
        .collect();
    let more = st.processes.len().saturating_sub(top);
    let more = if more > 0 {
        format!(", +{more} more")
    } else {
        String::new()
    };
    format!(
        "  top processes of {} (by its {} sampled stacks): {}{more}\n",
        st.reason,
        st.total(),
        list.join(", ")
    )
}

/// A reason's top stacks as an indented list, caller first, each with the
/// number of samples that took it. Samples say which paths occur, not how
/// the reason's calls split among them: so no share is printed, and where
/// the calls made while capture was on are known (`calls`), the heading
/// says how many were sampled of them.
pub(crate) fn stacks(st: &ReasonStacks, top: usize, calls: Option<u64>) -> String {
    // The background sampler's, taken before the reason qualified.
    let early = match st.background {
        0 => String::new(),
        n => format!(", {n} more from before the trigger"),
    };
    let of = match calls {
        Some(n) => format!(" of {} while captured", self::calls(n)),
        None => String::new(),
    };
    let mut s = format!(
        "  top stacks of {} ({} sampled{of}{early}):\n",
        st.reason, st.captured
    );
    for sc in st.top(top) {
        let _ = writeln!(
            s,
            "    {} sampled  {}",
            sc.count,
            processes(&sc.processes, STACK_PROCESSES)
        );
        for f in sc.stack.display() {
            let _ = writeln!(s, "      {f}");
        }
    }
    s
}

/// The final report.
pub(crate) fn summary(sum: &Summary, top: usize) -> String {
    let d = &sum.calls;
    let mut s = format!(
        "Summary: {} of {} in {:.1}s ({:.1}/s), mode {}, phase reached: {}\n",
        calls(d.total),
        sum.func,
        d.secs,
        d.rate,
        sum.mode,
        sum.phase.name()
    );
    if let Some(f) = &sum.filter {
        let _ = writeln!(s, "  counting only calls {}", f.text);
    }
    table(&mut s, d, "TOTAL", Fit::ALL);
    if !sum.other_merges.is_empty() {
        let _ = writeln!(
            s,
            "  OTHER merges {} callers past --max-reasons",
            sum.other_merges.len()
        );
    }
    if let Some(top) = sum.top() {
        top_line(&mut s, top, sum.threshold);
    }
    if !sum.captures.is_empty() {
        s.push_str(&captures(sum));
    }
    if !sum.gates.is_empty() {
        s.push_str(&gates(&sum.gates));
    }
    for t in &sum.drill {
        s.push_str(&super::drill::text(t));
    }
    let (early, shown): (Vec<&ReasonStacks>, Vec<&ReasonStacks>) =
        sum.stacks.iter().partition(|st| background_only(sum, st));
    for st in shown {
        if st.total() > 0 {
            s.push_str(&top_processes(st, top));
        }
        let calls = sum.gates.iter().find(|g| g.reason == st.reason);
        s.push_str(&stacks(st, top, calls.map(|g| g.gate.calls)));
    }
    if !early.is_empty() {
        s.push_str(&not_captured(early, top));
    }
    if let Some(cmp) = &sum.compare {
        before_after(&mut s, cmp);
    }
    drops_line(&mut s, &sum.drops);
    if let Some(why) = misses_note(sum.mode, sum.drops.recursion_misses) {
        let _ = writeln!(s, "  {why}");
    }
    if let Some(why) = sites_full_note(sum.drops.sites_full) {
        let _ = writeln!(s, "  {why}");
    }
    if let Some(v) = sum.verify {
        let _ = writeln!(
            s,
            "  caller check against full unwind: checked={}, mismatches={}, unwind failed={}, \
             frames checked={}",
            v.checked, v.mismatches, v.unwind_failed, v.frames_checked
        );
        let t = &v.sites;
        let _ = writeln!(
            s,
            "  call sites by the instruction before them: tail calls={}, indirect tail calls={}, \
             indirect (tail call not ruled out)={}, not decoded={}",
            t.tail_call_sites, t.indirect_tail_call_sites, t.indirect_sites, t.undecoded_sites
        );
    }
    if sum.cost.run_cnt > 0 {
        let _ = writeln!(s, "  BPF cost: {}", cost(&sum.cost));
        if let Some((kind, c)) = &sum.companion {
            let _ = writeln!(s, "  empty {kind} companion: {}", cost(c));
        }
    }
    s
}

/// Whether a reason's stacks are all the background sampler's: it burst,
/// but capture never reached it.
fn background_only(sum: &Summary, st: &ReasonStacks) -> bool {
    st.captured == 0 && st.background > 0 && !sum.captures.iter().any(|c| c.reason == st.reason)
}

/// The reasons with background stacks only, a line each for the `top`
/// with most (their stacks would make a summary hundreds of lines long;
/// JSON, the folded file and the result file keep them).
fn not_captured(mut list: Vec<&ReasonStacks>, top: usize) -> String {
    list.sort_by_key(|st| std::cmp::Reverse(st.background));
    let (shown, rest) = list.split_at(list.len().min(top));
    let w = column_width(shown.iter().map(|st| st.reason.as_str()));
    let mut s = String::from(
        "  not captured, with stacks from before the trigger only \
         (--json, --folded and --save have them):\n",
    );
    for st in shown {
        let n = st.background;
        let _ = writeln!(
            s,
            "    {:<w$}  {n} stack{}: {}",
            elide(&st.reason, w),
            if n == 1 { "" } else { "s" },
            processes(&st.processes, STACK_PROCESSES)
        );
    }
    if !rest.is_empty() {
        let _ = writeln!(
            s,
            "    +{} more reason{}",
            rest.len(),
            if rest.len() == 1 { "" } else { "s" }
        );
    }
    s
}

/// Each captured reason's calls at the stack gate, as the sum of what
/// became of them (the causes that took none left out).
pub(crate) fn gates(gates: &[ReasonGate]) -> String {
    let w = column_width(gates.iter().map(|g| g.reason.as_str()));
    let mut s = String::from("  calls while captured, and what became of them:\n");
    for ReasonGate { reason, gate: g } in gates {
        // The unnamed sites' stacks shown are each shown under its reason.
        let under = if reason == UNRESOLVED {
            " under their reasons"
        } else {
            ""
        };
        let mut parts = vec![format!("{} shown{under}", g.shown)];
        for (n, what) in [
            (g.sampled_out, "sampled out"),
            (g.rate_capped, "rate capped"),
            (g.ringbuf_full, "ring buffer full"),
            (g.not_kept, "not kept"),
            (g.unseen, "before the switch reached its call sites"),
            (g.unnamed, "from sites not yet named, not shown"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        }
        let _ = writeln!(
            s,
            "    {:<w$}  {} = {}",
            elide(reason, w),
            g.calls,
            parts.join(" + ")
        );
    }
    s
}

/// When each reason was captured and what that covered.
fn captures(sum: &Summary) -> String {
    let w = column_width(sum.captures.iter().map(|c| c.reason.as_str()));
    let mut s = String::from("  stack capture:\n");
    for c in &sum.captures {
        let first = match c.first_stack_ns {
            Some(ns) => format!(
                ", first {:.1} ms after the switch",
                ns.saturating_sub(c.start_ns) as f64 / 1e6
            ),
            None => String::new(),
        };
        let _ = writeln!(
            s,
            "    {:<w$}  {:.1}s to {:.1}s: {}, {} stack{}{first}",
            elide(&c.reason, w),
            c.start,
            c.end,
            calls(c.calls),
            c.stacks,
            if c.stacks == 1 { "" } else { "s" }
        );
    }
    s
}

/// Why some calls have no reason, when the site tables filled.
fn sites_full_note(n: u64) -> Option<String> {
    (n > 0).then(|| {
        format!(
            "sites full: {} came from call sites past the {} the site tables hold, so they are \
             in the total under {SITES_FULL_NAME}, not under their reasons; trace fewer \
             processes (--pid, --cgroup) to leave room",
            calls(n),
            MAX_SITES
        )
    })
}

/// Why the kernel skipped calls, and what counts them, when it did.
/// fentry's trampoline keeps a task on its CPU but lets it be preempted:
/// on a preemptible kernel (PREEMPT, PREEMPT_LAZY, the default from 6.13
/// on some builds) a task preempted inside the program keeps it busy on
/// that CPU, and the next task's call there is skipped. A kprobe program
/// runs with preemption off (only a preempted map syscall, which holds the
/// same guard, makes it skip calls then).
fn misses_note(mode: Mode, misses: u64) -> Option<String> {
    (misses > 0 && mode == Mode::Fentry).then(|| {
        format!(
            "recursion misses: the kernel did not run the program for {} (not in the counts \
             above): on a preemptible kernel, a task preempted inside the fentry program blocks \
             it on that CPU meanwhile; --kprobe, which runs it with preemption off, misses far \
             fewer, at a higher cost a call",
            calls(misses)
        )
    })
}

fn drops_line(s: &mut String, drops: &Drops) {
    let d: Vec<String> = drops
        .fields()
        .iter()
        .map(|(k, v)| format!("{}={v}", k.replace('_', " ")))
        .collect();
    let _ = writeln!(s, "  drops: {}", d.join(", "));
}

/// A length of time as `1d 2h 3m 4s`, largest units first, zeros left out.
fn age(secs: f64) -> String {
    // Under a minute in tenths, as the live summary shows it: a pin less
    // than a second old is not "0s" old.
    if secs < 60.0 {
        return format!("{:.1}s", secs.max(0.0));
    }
    let mut left = secs as u64;
    let mut parts = Vec::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if left >= size {
            parts.push(format!("{}{unit}", left / size));
            left %= size;
        }
    }
    if left > 0 || parts.is_empty() {
        parts.push(format!("{left}s"));
    }
    parts.join(" ")
}

/// A pinned instance's totals since it was pinned.
pub(crate) fn pinned(p: &Pinned) -> String {
    let d = &p.calls;
    let profile = p.profile.as_deref().unwrap_or("one reason per caller");
    let mut s = format!(
        "{}: {} in {} since it was pinned ({:.1}/s), mode {}, {profile}\n",
        p.func,
        calls(d.total),
        age(d.secs),
        d.rate,
        p.mode,
    );
    if let Some(f) = &p.filter {
        let _ = writeln!(s, "  counting only calls {f}");
    }
    let shown = Distribution {
        rows: d.rows.iter().filter(|r| r.count > 0).cloned().collect(),
        ..d.clone()
    };
    if !shown.rows.is_empty() {
        table(&mut s, &shown, "TOTAL", Fit::ALL);
    }
    if let Some(top) = p.top() {
        top_line(&mut s, top, p.threshold);
    }
    if let Some(cmp) = &p.compare {
        before_after(&mut s, cmp);
    }
    drops_line(&mut s, &p.drops);
    s
}

/// What `topdown show` says when nothing is pinned.
pub(crate) const NOTHING_PINNED: &str =
    "nothing is pinned (pin a function with topdown pin FUNC; pins do not survive a reboot)\n";

fn cost(c: &Cost) -> String {
    format!(
        "{} runs, {:.0} ns/run (kernel.bpf_stats_enabled=1)",
        c.run_cnt,
        c.run_time_ns as f64 / c.run_cnt.max(1) as f64
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::{compared_summary, row, sample_calls, sample_summary, stacks_of};
    use crate::report::Stack;

    fn report(calls: Distribution) -> IntervalReport {
        IntervalReport {
            drill: Vec::new(),
            unix_time: 1.5,
            clock: "12:00:00".into(),
            calls,
            stacks: Vec::new(),
            compare: None,
            drops: Drops::default(),
        }
    }

    #[test]
    fn table_is_aligned_and_sorted() {
        let t = interval(&report(sample_calls()), 5, Fit::ALL);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "12:00:00  40 calls in 2.00s, 20.0/s");
        assert!(lines[1].contains("REASON") && lines[1].ends_with("SHARE"));
        assert!(lines[2].starts_with("  do_huge_pmd_anonymous_page"));
        assert!(lines[2].ends_with("15.0   75.0%"), "{}", lines[2]);
        assert!(lines[3].ends_with("5.0   25.0%"), "{}", lines[3]);
        assert_eq!(lines[2].len(), lines[3].len());
    }

    #[test]
    fn wide_names_are_elided_to_the_screen_and_the_top_rows_shown() {
        let wide = "<alloc::vec::Vec<T,A> as alloc::vec::spec_extend::SpecExtend<T,I>>::spec_extend::h0123456789abcdef";
        let d = Distribution {
            secs: 1.0,
            total: 100,
            rate: 100.0,
            rows: vec![
                row(wide, 60, 60.0, 60.0),
                row("caller_two", 30, 30.0, 30.0),
                row("caller_three", 6, 6.0, 6.0),
                row("caller_four", 4, 4.0, 4.0),
            ],
        };
        let fit = Fit {
            rows: 2,
            width: Some(80),
        };
        let t = interval(&report(d.clone()), 5, fit);
        let lines: Vec<&str> = t.lines().skip(1).collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(lines.iter().all(|l| l.chars().count() <= 80), "{t}");
        assert!(lines.iter().all(|l| l.len() == lines[0].len()), "{t}");
        assert!(lines[1].starts_with("  <alloc::vec::Vec<T,A") && lines[1].contains("..."));
        assert!(lines[1].contains("h0123456789abcdef "), "{t}");
        assert!(lines[3].starts_with("  (2 more) "), "{t}");
        assert!(lines[3].ends_with(" 10         10.0   10.0%"), "{t}");
        // No width (a pipe): names up to MAX_NAME whole, longer ones
        // elided to it; the summary: every row, names as in a pipe.
        let capped = elide(wide, crate::report::fit::MAX_NAME);
        assert!(
            capped.starts_with("<alloc::vec::Vec<T,A> as") && capped.ends_with("h0123456789abcdef")
        );
        let t = interval(
            &report(d.clone()),
            5,
            Fit {
                rows: 2,
                width: None,
            },
        );
        assert!(
            t.contains(&format!("  {capped} ")) && !t.contains(wide),
            "{t}"
        );
        let mut sum = sample_summary();
        sum.calls = d;
        let t = summary(&sum, 5);
        assert!(
            t.contains(&format!("  {capped} "))
                && t.contains("caller_four")
                && !t.contains("more)"),
            "{t}"
        );
    }

    #[test]
    fn a_very_long_reason_does_not_widen_the_text_tables() {
        // Two 177-character C++ symbols that differ only near their ends.
        let long = |end: &str| {
            format!(
                "std::_Function_handler<void (std::shared_ptr<data::model::Node>&&), \
                 tensorflow::data::model::Model::FlushMetrics()::\
                 {{lambda(std::shared_ptr<data::model::Node>)#1}}>::_M_invoke_{end}"
            )
        };
        let (a, b) = (long("a1"), long("b2"));
        assert_eq!((a.chars().count(), b.chars().count()), (177, 177));
        let mut sum = sample_summary();
        sum.calls.rows = vec![row(&a, 60, 60.0, 60.0), row(&b, 40, 40.0, 40.0)];
        sum.gates = vec![ReasonGate {
            reason: a.clone(),
            gate: crate::report::Gate {
                calls: 2,
                shown: 2,
                ..Default::default()
            },
        }];
        sum.captures[1].reason = a.clone();
        let mut cmp = compared_summary().compare.unwrap();
        cmp.rows[0].reason = b.clone();
        sum.compare = Some(cmp);
        let t = summary(&sum, 5);
        let max = crate::report::fit::MAX_NAME;
        let (ea, eb) = (elide(&a, max), elide(&b, max));
        assert_ne!(ea, eb, "two long names stay apart");
        // The REASON table, and the interval's (no width: a pipe).
        for r in [&ea, &eb] {
            assert!(t.contains(&format!("\n  {r} ")), "{t}");
        }
        let lines: Vec<&str> = t.lines().collect();
        let at = |s: &str| lines.iter().position(|l| l.contains(s)).unwrap();
        let table = &lines[at("REASON")..at("REASON") + 3];
        assert!(
            table.iter().all(|l| l.chars().count() == max + NUMBERS),
            "{t}"
        );
        let iv = interval(
            &report(sum.calls.clone()),
            5,
            Fit {
                rows: 5,
                width: None,
            },
        );
        assert!(
            iv.lines()
                .skip(1)
                .all(|l| l.chars().count() == max + NUMBERS),
            "{iv}"
        );
        // The gates, the capture spans and the before/after table.
        assert!(t.contains(&format!("\n    {ea}  2 = 2 shown\n")), "{t}");
        assert!(t.contains(&format!("\n    {ea}  2.0s to 3.0s: ")), "{t}");
        assert!(t.contains(&format!("\n    {eb:<max$}       20.0")), "{t}");
        assert!(
            t.contains(&format!("\n    {:<max$}        5.0", "FAULT_ALLOC")),
            "{t}"
        );
        // Whole where it is not a column (the top line), and in JSON.
        assert!(t.contains(&format!("  top reason: {a} (60.0%")), "{t}");
        let j = crate::report::json::summary(&sum, 5);
        assert!(
            j.contains(&a) && j.contains(&b) && !j.contains("..."),
            "{j}"
        );
    }

    #[test]
    fn empty_interval_prints_only_the_header_line() {
        let empty = Distribution {
            secs: 1.0,
            total: 0,
            rate: 0.0,
            rows: vec![],
        };
        assert_eq!(
            interval(&report(empty.clone()), 5, Fit::ALL),
            "12:00:00  0 calls in 1.00s, 0.0/s\n"
        );
        let one = Distribution {
            total: 1,
            rate: 1.0,
            rows: vec![row("a", 1, 1.0, 100.0)],
            ..empty
        };
        assert!(interval(&report(one), 5, Fit::ALL).starts_with("12:00:00  1 call in 1.00s"));
    }

    #[test]
    fn interval_stacks_show_only_when_captured() {
        let mut iv = report(sample_calls());
        iv.stacks = vec![stacks_of("ZAP", &[])];
        assert!(!interval(&iv, 5, Fit::ALL).contains("top stacks"));
        iv.stacks = vec![stacks_of("ZAP", &[(&["zap+0x1"], 2), (&["other+0x2"], 1)])];
        let t = interval(&iv, 1, Fit::ALL);
        assert!(t.contains(
            "  top stacks of ZAP (3 sampled):\n    2 sampled  thp[42] 2\n      zap+0x1\n"
        ));
        assert!(!t.contains("other"), "--top 1 shows one stack: {t}");
        // Stacks from the background sampler are said to be.
        let st = &mut iv.stacks[0];
        (st.captured, st.background) = (1, 2);
        assert!(interval(&iv, 1, Fit::ALL).contains(
            "  top stacks of ZAP (1 sampled, 2 more from before the trigger):\n    2 sampled"
        ));
    }

    #[test]
    fn nonzero_drops_show_on_the_interval_line() {
        let mut iv = report(sample_calls());
        assert!(interval(&iv, 5, Fit::ALL).starts_with("12:00:00  40 calls in 2.00s, 20.0/s\n"));
        iv.drops.stacks_rate_capped = 12;
        iv.drops.own_calls = 1;
        assert!(interval(&iv, 5, Fit::ALL).starts_with(
            "12:00:00  40 calls in 2.00s, 20.0/s; drops: stacks rate capped=12, own calls=1\n"
        ));
    }

    #[test]
    fn the_summary_adds_up_each_captured_reasons_calls() {
        let mut sum = sample_summary();
        sum.gates = vec![
            ReasonGate {
                reason: "ZAP".into(),
                gate: crate::report::Gate {
                    calls: 150,
                    shown: 16,
                    rate_capped: 130,
                    not_kept: 4,
                    ..Default::default()
                },
            },
            ReasonGate {
                reason: "FAULT_ALLOC".into(),
                gate: crate::report::Gate {
                    calls: 3,
                    shown: 3,
                    ..Default::default()
                },
            },
        ];
        let t = summary(&sum, 5);
        assert!(
            t.contains(
                "  calls while captured, and what became of them:\n    ZAP          150 = 16 shown + 130 rate capped + 4 not kept\n    FAULT_ALLOC  3 = 3 shown\n"
            ),
            "{t}"
        );
        assert!(!summary(&sample_summary(), 5).contains("calls while captured"));
        // Stacks are samples: said of how many calls, never as a share.
        sum.gates.push(ReasonGate {
            reason: "do_huge_pmd_anonymous_page".into(),
            gate: crate::report::Gate {
                calls: 160,
                shown: 3,
                rate_capped: 157,
                ..Default::default()
            },
        });
        let t = summary(&sum, 5);
        assert!(
            t.contains("  top stacks of do_huge_pmd_anonymous_page (3 sampled of 160 calls while captured):\n"),
            "{t}"
        );
        assert!(!t.contains("%)  "), "a stack printed with a share: {t}");
    }

    #[test]
    fn summary_reports_drops_hot_reason_and_stacks_in_order() {
        let t = summary(&sample_summary(), 5);
        assert!(t.contains("phase reached: stack capture"));
        assert!(t.contains(
            "\n  top reason: do_huge_pmd_anonymous_page (75.0%, below the 80% threshold)\n"
        ));
        let mut hot = sample_summary();
        hot.threshold = 75.0;
        assert!(summary(&hot, 5).contains("\n  hot reason: do_huge_pmd_anonymous_page (75.0%)\n"));
        assert!(t.contains("stacks rate capped=7"));
        assert!(!t.contains("recursion misses: "), "{t}");
        // Calls the kernel skipped: said why, and what counts them, under fentry only.
        let mut missed = sample_summary();
        missed.drops.recursion_misses = 691_291;
        let m = summary(&missed, 5);
        assert!(m.contains("\n  recursion misses: the kernel did not run the program for 691291 calls (not in the counts above): on a preemptible kernel"), "{m}");
        assert!(m.contains("; --kprobe, which runs it with preemption off, misses far fewer, at a higher cost a call\n"), "{m}");
        missed.mode = Mode::Kprobe;
        assert!(!summary(&missed, 5).contains("recursion misses: "));
        // Calls past full site tables: said why, in one line.
        assert!(!t.contains("sites full: "), "{t}");
        let mut full = sample_summary();
        full.drops.sites_full = 100;
        assert!(summary(&full, 5).contains("\n  sites full: 100 calls came from call sites past the 16384 the site tables hold, so they are in the total under [site table full], not under their reasons; trace fewer processes (--pid, --cgroup) to leave room\n"));
        assert!(t.contains("      a\n      b\n"));
        let first = t
            .find("top stacks of folio_remove_rmap_ptes (1 sampled")
            .unwrap();
        let second = t
            .find("top stacks of do_huge_pmd_anonymous_page (3 sampled")
            .unwrap();
        assert!(first < second);
        assert!(t.contains(
            "  top processes of do_huge_pmd_anonymous_page (by its 3 sampled stacks): thp[42] 3\n  top stacks of do_huge_pmd_anonymous_page (3 sampled"
        ), "{t}");
        let mut more = sample_summary();
        more.stacks[1].processes = (1..=7)
            .map(|n| ProcessCount {
                process: crate::report::Process {
                    comm: format!("p{n}"),
                    pid: n as u32,
                },
                count: 8 - n,
            })
            .collect();
        assert!(summary(&more, 2).contains(
            "  top processes of do_huge_pmd_anonymous_page (by its 3 sampled stacks): p1[1] 7, p2[2] 6, +5 more\n"
        ));
        more.stacks[1].stacks[0].processes = more.stacks[1].processes.clone();
        assert!(summary(&more, 5).contains("    3 sampled  p1[1] 7, p2[2] 6, p3[3] 5, +4 more\n"));
        assert!(t.contains(
            "  stack capture:\n    folio_remove_rmap_ptes      0.5s to 2.0s: 1 call, 1 stack, first 3.5 ms after the switch\n    do_huge_pmd_anonymous_page  2.0s to 3.0s: 30 calls, 3 stacks\n"
        ), "{t}");
    }

    #[test]
    fn reasons_never_captured_get_a_line_each_not_their_stacks() {
        let frames: Vec<String> = (0..20).map(|i| format!("frame_{i}+0x1")).collect();
        let frames: Vec<&str> = frames.iter().map(String::as_str).collect();
        let early = |name: &str, n: u64| {
            let mut st = stacks_of(name, &[(&frames, n)]);
            (st.captured, st.background) = (0, n);
            st
        };
        let mut sum = sample_summary();
        let base = summary(&sum, 5);
        // Background-only reasons come first, as State::finish orders them.
        let mut all: Vec<ReasonStacks> = (1..=7).map(|i| early(&format!("BURST_{i}"), i)).collect();
        all.append(&mut sum.stacks);
        sum.stacks = all;
        let t = summary(&sum, 5);
        assert!(!t.contains("BURST_1") && !t.contains("frame_0"), "{t}");
        assert!(
            t.contains(
                "  not captured, with stacks from before the trigger only (--json, --folded and --save have them):\n    \
                 BURST_7  7 stacks: thp[42] 7\n    \
                 BURST_6  6 stacks: thp[42] 6\n    \
                 BURST_5  5 stacks: thp[42] 5\n    \
                 BURST_4  4 stacks: thp[42] 4\n    \
                 BURST_3  3 stacks: thp[42] 3\n    \
                 +2 more reasons\n"
            ),
            "{t}"
        );
        // The captured reasons' stacks as before, and a line each more.
        assert!(
            t.contains("  top stacks of do_huge_pmd_anonymous_page (3 sampled"),
            "{t}"
        );
        assert_eq!(t.lines().count(), base.lines().count() + 7, "{t}");
        // JSON keeps every reason's stacks.
        let v: serde_json::Value =
            serde_json::from_str(&crate::report::json::summary(&sum, 5)).unwrap();
        let sets = v["stacks_by_reason"].as_array().unwrap();
        assert_eq!(sets.len(), 9);
        assert_eq!(sets[0]["reason"], "BURST_1");
        assert_eq!(sets[0]["stacks"][0]["frames"].as_array().unwrap().len(), 20);
        // A reason capture reached shows its stacks, even if all are the
        // sampler's; one line says one stack.
        sum.stacks.truncate(1);
        sum.captures[0].reason = "BURST_1".into();
        let t = summary(&sum, 5);
        assert!(
            t.contains("  top stacks of BURST_1 (0 sampled, 1 more from before the trigger):\n"),
            "{t}"
        );
        assert!(!t.contains("not captured"), "{t}");
        sum.captures.clear();
        assert!(summary(&sum, 5).contains(":\n    BURST_1  1 stack: thp[42] 1\n"));
    }

    #[test]
    fn the_hot_reason_is_never_a_special_slot() {
        let mut s = sample_summary();
        s.calls.rows.insert(
            0,
            ReasonRow {
                special: true,
                ..row("[caller not found]", 100, 1.0, 70.0)
            },
        );
        assert_eq!(s.top().unwrap().reason, "do_huge_pmd_anonymous_page");
    }

    #[test]
    fn a_pinned_instance_shows_its_age_and_totals() {
        let p = Pinned {
            func: "f".into(),
            tracepoint: None,
            mode: Mode::Fentry,
            profile: None,
            kernel: "k".into(),
            version: "v".into(),
            pinned_at: 0.0,
            calls: Distribution {
                secs: 3723.0,
                rows: vec![
                    row("a", 30, 0.0, 75.0),
                    row("b", 10, 0.0, 25.0),
                    row("c", 0, 0.0, 0.0),
                ],
                ..sample_calls()
            },
            drops: Drops::default(),
            compare: None,
            filter: None,
            threshold: 80.0,
            system: None,
            fix: None,
        };
        let t = pinned(&p);
        assert!(
            t.starts_with("f: 40 calls in 1h 2m 3s since it was pinned (20.0/s), mode fentry, one reason per caller\n"),
            "{t}"
        );
        assert!(
            t.contains("  top reason: a (75.0%, below the 80% threshold)\n"),
            "{t}"
        );
        assert!(pinned(&Pinned {
            threshold: 70.0,
            ..p.clone()
        })
        .contains("  hot reason: a (75.0%)\n"));
        assert!(
            !t.contains("  c "),
            "reasons without calls are left out: {t}"
        );
        assert!(t.ends_with("own calls=0\n"), "{t}");
        assert_eq!(age(0.4), "0.4s");
        assert_eq!(age(60.0), "1m");
        assert_eq!(age(90061.0), "1d 1h 1m 1s");
    }

    #[test]
    fn the_summary_ends_with_the_before_after_table_and_the_verdict() {
        let t = summary(&compared_summary(), 5);
        assert!(t.starts_with("Summary: 60 calls of f in 10.0s (6.0/s), mode fentry, phase reached: fix verified\n"), "{t}");
        let at = |s: &str| t.find(s).unwrap_or_else(|| panic!("no {s:?} in {t}"));
        // The seed's order: distribution, hot reason, stacks, before/after.
        assert!(at("  hot reason: FAULT_ALLOC") < at("  top stacks of"));
        assert!(at("  top stacks of do_huge") < at("  before/after, baseline before.json ("));
        assert!(at("  before/after") < at("  drops:"));
        assert!(t.contains(", 250 calls in 10.0s, 25.0/s):\n    REASON        BEFORE/s      NOW/s   CHANGE  BEFORE%     NOW%    CHANGE\n    ZAP               20.0        0.0    0.00x    80.0%     0.0%   -80.0pp\n    FAULT_ALLOC        5.0        6.0    1.20x    20.0%   100.0%   +80.0pp\n"), "{t}");
        assert!(t.contains("\n  fix verified: ZAP (the baseline's hot reason): share 0.0% (was 80.0%), below the 80% threshold; rate fell 100.0%, from 20.0/s to 0.0/s (a fall of 50% needed)\n"), "{t}");
        assert!(!t.contains("warning:"), "{t}");
        // Then where the load went, and what was changed on the system.
        assert!(t.contains("(a fall of 50% needed)\n  load moved to FAULT_ALLOC: share 100.0%, was 20.0%\n  fix applied: \"defrag defer, max_ptes_none 0\" (baseline: \"before: THP defaults\")\n    /sys/kernel/mm/transparent_hugepage/defrag: madvise → defer\n    /sys/kernel/mm/transparent_hugepage/khugepaged/max_ptes_none: 511 → 0\n  drops:"), "{t}");
        // Nothing changed; an older baseline, which records none of it.
        let mut same = compared_summary();
        let cmp = same.compare.as_mut().unwrap();
        cmp.fix_applied.changes.clear();
        cmp.fix_applied.fix = None;
        let t = summary(&same, 5);
        assert!(t.contains("\n  fix applied: none given (baseline: \"before: THP defaults\")\n    no recorded change\n"), "{t}");
        let cmp = same.compare.as_mut().unwrap();
        cmp.fix_applied.recorded = false;
        cmp.fix_applied.baseline_fix = None;
        cmp.baseline.version = 1;
        let t = summary(&same, 5);
        assert!(t.contains("\n  fix applied: none given (baseline: unknown)\n    kernel build id, command line and knobs: unknown (the baseline is a result file of format version 1, which does not record them)\n  drops:"), "{t}");
    }

    #[test]
    fn an_interval_against_the_baseline_shows_both_and_the_change() {
        use crate::report::{Change, Fig};
        let fig = |count, rate, share| Some(Fig { count, rate, share });
        let mut iv = report(sample_calls());
        iv.compare = Some(vec![
            Change {
                reason: "ZAP".into(),
                before: fig(200, 20.0, 80.0),
                now: fig(0, 0.0, 0.0),
            },
            Change {
                reason: "new".into(),
                before: None,
                now: fig(3, 3.0, 100.0),
            },
        ]);
        let t = interval(&iv, 5, Fit::ALL);
        assert_eq!(
            t,
            "12:00:00  40 calls in 2.00s, 20.0/s\n  \
             REASON        COUNT       RATE/s   SHARE   BEFORE/s   CHANGE  BEFORE%    CHANGE\n  \
             ZAP               0          0.0    0.0%       20.0    0.00x    80.0%   -80.0pp\n  \
             new               3          3.0  100.0%          -      new        -  +100.0pp\n"
        );
    }

    #[test]
    fn user_frames_follow_a_separator() {
        let s = Stack {
            kernel: vec!["k".into()],
            user: vec!["u".into()],
        };
        assert_eq!(s.display(), ["k", "--", "u"]);
    }
}
