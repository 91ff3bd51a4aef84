//! Rendering reports as aligned tables or as NDJSON.

use std::fmt::Write as _;

use crate::probe::ProgStats;
use crate::rates::Interval;
use crate::reasons::Reasons;

/// Drops and misses: events not counted under their true reason, or stacks
/// not captured. Always reported, zeros included, so "none" is visible.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drops {
    /// Calls whose caller's return address was not found.
    pub caller_not_found: u64,
    /// Calls counted without a reason because the site tables were full.
    pub sites_full: u64,
    /// Calls the kernel did not run the program for (recursion).
    pub recursion_misses: u64,
    /// Calls of a deeper-frame reason whose unwind failed (counted under
    /// the caller's default reason).
    pub deep_unwind_failed: u64,
    pub stacks_sampled_out: u64,
    pub stacks_rate_capped: u64,
    pub stacks_ringbuf_full: u64,
    /// Calls made by topdown itself (symbolizing reads files), not counted.
    pub own_calls: u64,
}

impl Drops {
    fn fields(&self) -> [(&'static str, u64); 8] {
        [
            ("caller_not_found", self.caller_not_found),
            ("sites_full", self.sites_full),
            ("recursion_misses", self.recursion_misses),
            ("deep_unwind_failed", self.deep_unwind_failed),
            ("stacks_sampled_out", self.stacks_sampled_out),
            ("stacks_rate_capped", self.stacks_rate_capped),
            ("stacks_ringbuf_full", self.stacks_ringbuf_full),
            ("own_calls", self.own_calls),
        ]
    }
}

/// One captured stack with its count, frames caller first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackRow {
    pub count: u64,
    pub frames: Vec<String>,
}

/// The cheap caller lookup checked against a full unwind (--verify-caller).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verify {
    pub checked: u64,
    pub mismatches: u64,
    pub unwind_failed: u64,
}

/// The run's stacks of one captured reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackSet {
    pub reason: String,
    pub captured: u64,
    pub stacks: Vec<StackRow>,
}

/// Everything the final report says.
#[derive(Debug, Clone)]
pub struct Summary<'a> {
    pub func: &'a str,
    pub mode: &'a str,
    pub run: &'a Interval,
    pub reasons: &'a Reasons,
    pub drops: Drops,
    /// "counting" or "stack capture".
    pub phase: &'a str,
    /// Stacks of every reason captured, in the order capture reached them;
    /// the last is the one captured at the end.
    pub stack_sets: &'a [StackSet],
    /// Calls of the captured reasons seen by the stack program, and
    /// samples it sent, over the run.
    pub stacks_matched: u64,
    pub stacks_sent: u64,
    pub verify: Option<Verify>,
    /// The counting program's run statistics.
    pub prog: ProgStats,
    /// An empty companion program's, named by its kind.
    pub companion: Option<(&'a str, ProgStats)>,
}

/// Local wall-clock time as HH:MM:SS.
pub fn clock() -> String {
    // SAFETY: time(NULL) and localtime_r with valid pointers.
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
    }
}

fn width(iv: &Interval, reasons: &Reasons) -> usize {
    iv.rows
        .iter()
        .map(|r| reasons.name(r.slot).len())
        .max()
        .unwrap_or(0)
        .max("REASON".len())
}

fn table(out: &mut String, iv: &Interval, reasons: &Reasons, count_title: &str) {
    let w = width(iv, reasons);
    let _ = writeln!(
        out,
        "  {:<w$} {:>12} {:>12} {:>7}",
        "REASON", count_title, "RATE/s", "SHARE"
    );
    for r in &iv.rows {
        let _ = writeln!(
            out,
            "  {:<w$} {:>12} {:>12.1} {:>6.1}%",
            reasons.name(r.slot),
            r.count,
            r.rate,
            r.share
        );
    }
}

fn calls(n: u64) -> String {
    format!("{n} call{}", if n == 1 { "" } else { "s" })
}

/// The per-interval table.
pub fn interval_table(clock: &str, iv: &Interval, reasons: &Reasons) -> String {
    let mut s = format!(
        "{clock}  {} in {:.2}s, {:.1}/s\n",
        calls(iv.total),
        iv.secs,
        iv.rate()
    );
    if !iv.rows.is_empty() {
        table(&mut s, iv, reasons, "COUNT");
    }
    s
}

/// A reason's top stacks as an indented list, caller first, each with its
/// count and share of the `total` captured.
pub fn stacks_text(reason: &str, total: u64, stacks: &[StackRow]) -> String {
    let mut s = format!("  top stacks of {reason} ({total} captured):\n");
    for st in stacks {
        let share = 100.0 * st.count as f64 / total.max(1) as f64;
        let _ = writeln!(s, "    {} ({share:.1}%)", st.count);
        for f in &st.frames {
            let _ = writeln!(s, "      {f}");
        }
    }
    s
}

/// The final report as text.
pub fn summary_table(sum: &Summary<'_>) -> String {
    let mut s = format!(
        "Summary: {} of {} in {:.1}s ({:.1}/s), mode {}, phase reached: {}\n",
        calls(sum.run.total),
        sum.func,
        sum.run.secs,
        sum.run.rate(),
        sum.mode,
        sum.phase
    );
    table(&mut s, sum.run, sum.reasons, "TOTAL");
    let merged = sum.reasons.merged().len();
    if merged > 0 {
        let _ = writeln!(s, "  OTHER merges {merged} callers past --max-reasons");
    }
    if let Some(top) = sum.run.rows.iter().find(|r| !Reasons::is_special(r.slot)) {
        let _ = writeln!(
            s,
            "  hot reason: {} ({:.1}%)",
            sum.reasons.name(top.slot),
            top.share
        );
    }
    for set in sum.stack_sets {
        s.push_str(&stacks_text(&set.reason, set.captured, &set.stacks));
    }
    let drops: Vec<String> = sum
        .drops
        .fields()
        .iter()
        .map(|(k, v)| format!("{}={v}", k.replace('_', " ")))
        .collect();
    let _ = writeln!(s, "  drops: {}", drops.join(", "));
    if let Some(v) = sum.verify {
        let _ = writeln!(
            s,
            "  caller check against full unwind: checked={}, mismatches={}, unwind failed={}",
            v.checked, v.mismatches, v.unwind_failed
        );
    }
    if sum.prog.run_cnt > 0 {
        let _ = writeln!(s, "  BPF cost: {}", cost_text(&sum.prog));
        if let Some((kind, c)) = &sum.companion {
            let _ = writeln!(s, "  empty {kind} companion: {}", cost_text(c));
        }
    }
    s
}

fn cost_text(p: &ProgStats) -> String {
    format!(
        "{} runs, {:.0} ns/run (kernel.bpf_stats_enabled=1)",
        p.run_cnt,
        p.run_time_ns as f64 / p.run_cnt.max(1) as f64
    )
}

fn prog_json(p: &ProgStats) -> String {
    format!(
        "{{\"run_cnt\":{},\"run_time_ns\":{},\"recursion_misses\":{}}}",
        p.run_cnt, p.run_time_ns, p.recursion_misses
    )
}

/// A JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn json_num(v: f64) -> String {
    if v.is_finite() {
        format!("{}", (v * 1000.0).round() / 1000.0)
    } else {
        "null".into()
    }
}

fn json_rows(iv: &Interval, reasons: &Reasons) -> String {
    let rows: Vec<String> = iv
        .rows
        .iter()
        .map(|r| {
            format!(
                "{{\"reason\":{},\"count\":{},\"rate\":{},\"share\":{}}}",
                json_str(reasons.name(r.slot)),
                r.count,
                json_num(r.rate),
                json_num(r.share)
            )
        })
        .collect();
    format!("[{}]", rows.join(","))
}

fn json_stacks(stacks: &[StackRow]) -> String {
    let v: Vec<String> = stacks
        .iter()
        .map(|s| {
            let frames: Vec<String> = s.frames.iter().map(|f| json_str(f)).collect();
            format!(
                "{{\"count\":{},\"frames\":[{}]}}",
                s.count,
                frames.join(",")
            )
        })
        .collect();
    format!("[{}]", v.join(","))
}

/// One interval as a JSON object.
pub fn interval_json(
    unix_secs: f64,
    iv: &Interval,
    reasons: &Reasons,
    stack_reason: Option<&str>,
    stacks_captured: u64,
    stacks: &[StackRow],
) -> String {
    format!(
        "{{\"type\":\"interval\",\"time\":{},\"secs\":{},\"total\":{},\"rate\":{},\"reasons\":{},\"stack_reason\":{},\"stacks_captured\":{},\"stacks\":{}}}",
        json_num(unix_secs),
        json_num(iv.secs),
        iv.total,
        json_num(iv.rate()),
        json_rows(iv, reasons),
        stack_reason.map_or("null".into(), json_str),
        stacks_captured,
        json_stacks(stacks)
    )
}

/// The final report as a JSON object.
pub fn summary_json(sum: &Summary<'_>) -> String {
    let drops: Vec<String> = sum
        .drops
        .fields()
        .iter()
        .map(|(k, v)| format!("\"{k}\":{v}"))
        .collect();
    let merged: Vec<String> = sum.reasons.merged().iter().map(|m| json_str(m)).collect();
    let last = sum.stack_sets.last();
    let sets: Vec<String> = sum
        .stack_sets
        .iter()
        .map(|set| {
            format!(
                "{{\"reason\":{},\"captured\":{},\"stacks\":{}}}",
                json_str(&set.reason),
                set.captured,
                json_stacks(&set.stacks)
            )
        })
        .collect();
    format!(
        "{{\"type\":\"summary\",\"func\":{},\"mode\":{},\"phase\":{},\"secs\":{},\"total\":{},\"rate\":{},\"reasons\":{},\"other_merges\":[{}],\"drops\":{{{}}},\"stack_reason\":{},\"stacks_matched\":{},\"stacks_sent\":{},\"stacks_captured\":{},\"stacks\":{},\"stacks_by_reason\":[{}],\"verify\":{},\"bpf\":{},\"companion\":{}}}",
        json_str(sum.func),
        json_str(sum.mode),
        json_str(sum.phase),
        json_num(sum.run.secs),
        sum.run.total,
        json_num(sum.run.rate()),
        json_rows(sum.run, sum.reasons),
        merged.join(","),
        drops.join(","),
        last.map_or("null".into(), |l| json_str(&l.reason)),
        sum.stacks_matched,
        sum.stacks_sent,
        last.map_or(0, |l| l.captured),
        json_stacks(last.map_or(&[][..], |l| &l.stacks)),
        sets.join(","),
        sum.verify.map_or("null".into(), |v| format!(
            "{{\"checked\":{},\"mismatches\":{},\"unwind_failed\":{}}}",
            v.checked, v.mismatches, v.unwind_failed
        )),
        prog_json(&sum.prog),
        sum.companion.as_ref().map_or("null".into(), |(kind, c)| format!(
            "{{\"kind\":{},\"stats\":{}}}",
            json_str(kind),
            prog_json(c)
        ))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Reasons, Interval) {
        let mut r = Reasons::new(8);
        let a = r.slot("do_huge_pmd_anonymous_page");
        let b = r.slot("folio_remove_rmap_ptes");
        let mut d = vec![0u64; 8];
        d[a as usize] = 30;
        d[b as usize] = 10;
        (r, Interval::from_deltas(&d, 2.0))
    }

    #[test]
    fn table_is_aligned_and_sorted() {
        let (r, iv) = sample();
        let t = interval_table("12:00:00", &iv, &r);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "12:00:00  40 calls in 2.00s, 20.0/s");
        assert!(lines[1].contains("REASON") && lines[1].ends_with("SHARE"));
        assert!(lines[2].starts_with("  do_huge_pmd_anonymous_page"));
        assert!(lines[2].ends_with("15.0   75.0%"), "{}", lines[2]);
        assert!(lines[3].ends_with("5.0   25.0%"), "{}", lines[3]);
        assert_eq!(lines[2].len(), lines[3].len());
    }

    #[test]
    fn empty_interval_prints_only_the_header_line() {
        let r = Reasons::new(8);
        let iv = Interval::from_deltas(&[0, 0], 1.0);
        assert_eq!(interval_table("t", &iv, &r), "t  0 calls in 1.00s, 0.0/s\n");
        let iv = Interval::from_deltas(&[1], 1.0);
        assert!(interval_table("t", &iv, &r).starts_with("t  1 call in 1.00s"));
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_str("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
    }

    #[test]
    fn interval_json_shape() {
        let (r, iv) = sample();
        let j = interval_json(1.5, &iv, &r, None, 0, &[]);
        assert_eq!(
            j,
            "{\"type\":\"interval\",\"time\":1.5,\"secs\":2,\"total\":40,\"rate\":20,\"reasons\":[{\"reason\":\"do_huge_pmd_anonymous_page\",\"count\":30,\"rate\":15,\"share\":75},{\"reason\":\"folio_remove_rmap_ptes\",\"count\":10,\"rate\":5,\"share\":25}],\"stack_reason\":null,\"stacks_captured\":0,\"stacks\":[]}"
        );
    }

    #[test]
    fn summary_reports_drops_hot_reason_and_stacks() {
        let (r, iv) = sample();
        let sets = [
            StackSet {
                reason: "folio_remove_rmap_ptes".into(),
                captured: 1,
                stacks: vec![StackRow {
                    count: 1,
                    frames: vec!["z".into()],
                }],
            },
            StackSet {
                reason: "do_huge_pmd_anonymous_page".into(),
                captured: 3,
                stacks: vec![StackRow {
                    count: 3,
                    frames: vec!["a".into(), "b".into()],
                }],
            },
        ];
        let sum = Summary {
            func: "f",
            mode: "fentry",
            run: &iv,
            reasons: &r,
            drops: Drops {
                stacks_rate_capped: 7,
                ..Drops::default()
            },
            phase: "stack capture",
            stack_sets: &sets,
            stacks_matched: 10,
            stacks_sent: 4,
            verify: None,
            prog: ProgStats::default(),
            companion: None,
        };
        let t = summary_table(&sum);
        assert!(t.contains("phase reached: stack capture"));
        assert!(t.contains("hot reason: do_huge_pmd_anonymous_page (75.0%)"));
        assert!(t.contains("stacks rate capped=7"));
        assert!(t.contains("      a\n      b\n"));
        let first = t
            .find("top stacks of folio_remove_rmap_ptes (1 captured):")
            .unwrap();
        let second = t
            .find("top stacks of do_huge_pmd_anonymous_page (3 captured):")
            .unwrap();
        assert!(first < second);
        let j = summary_json(&sum);
        assert!(j.contains("\"stacks_rate_capped\":7"));
        assert!(j.contains(
            "\"stack_reason\":\"do_huge_pmd_anonymous_page\",\"stacks_matched\":10,\"stacks_sent\":4,\"stacks_captured\":3"
        ));
        assert!(j.contains(
            "\"stacks_by_reason\":[{\"reason\":\"folio_remove_rmap_ptes\",\"captured\":1,\"stacks\":[{\"count\":1,\"frames\":[\"z\"]}]},{\"reason\":\"do_huge_pmd_anonymous_page\",\"captured\":3,"
        ));
        assert!(j.contains("\"stacks\":[{\"count\":3,\"frames\":[\"a\",\"b\"]}]"));
        assert!(j.starts_with("{\"type\":\"summary\",\"func\":\"f\",\"mode\":\"fentry\""));
    }
}
