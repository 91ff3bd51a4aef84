//! Pinned instances as metrics for Prometheus (`topdown serve`), in either
//! of its text formats, with the same names, labels and values:
//! OpenMetrics, encoded by the Prometheus project's client library, for
//! clients that ask for it (Prometheus itself does); otherwise the
//! Prometheus text format 0.0.4, which every scraper and promtool parse.
//!
//! - `topdown_calls_total{function,reason}`: calls per reason since the
//!   instance was pinned (every reason named so far, zeros included);
//! - `topdown_drops_total{function,cause}`: calls not counted under their
//!   reason, and stacks not captured, by cause (as in the summary's drops);
//! - `topdown_info{function,mode,profile,kernel,version}`: 1 (an info
//!   metric in OpenMetrics; in 0.0.4, which has no such type, a gauge, as
//!   the usual convention has it);
//! - `topdown_pinned_timestamp_seconds{function}`: when it was pinned, so a
//!   re-pin (counters starting over) can be told from a counter wrap;
//! - `topdown_read_error{function}`: 1 for a pinned function that could not
//!   be read in this scrape (`topdown serve` logs why); the others are
//!   served all the same;
//! - with `serve --capture`, `topdown_capture_active{function,reason}`: 1
//!   for each reason whose stacks are captured now, 0 for those captured
//!   before; `topdown_stacks_total{function,reason}`: stacks captured
//!   since serve started; and the calls of each reason captured since,
//!   `topdown_capture_calls_total{function,reason}`, as the sum over
//!   `topdown_capture_outcomes_total{function,reason,outcome}` of what
//!   became of them (shown, sampled_out, rate_capped, ringbuf_full,
//!   not_kept: the summary's capture_calls).

use std::fmt::Write as _;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::report::{Gate, Pinned};

/// A reason serve --capture has captured stacks of.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CaptureSeries {
    pub(crate) function: String,
    pub(crate) reason: String,
    /// Captured now.
    pub(crate) active: bool,
    pub(crate) stacks: u64,
    /// Its calls at the stack gate since serve started, and what became
    /// of them.
    pub(crate) gate: Gate,
}

/// The text formats of a scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// The Prometheus text format 0.0.4: what a client gets unless it asks
    /// for OpenMetrics.
    Prometheus,
    /// OpenMetrics 1.0.0.
    OpenMetrics,
}

impl Format {
    /// The Content-Type of a scrape in this format.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Info,
}

#[derive(Debug, Clone, Copy)]
enum Value {
    Int(u64),
    Float(f64),
}

type Labels = Vec<(&'static str, String)>;

/// A metric family, as OpenMetrics names it (a counter's samples add
/// `_total`, an info metric's `_info`), with its samples: labels and a
/// value (an info metric's is 1).
#[derive(Debug)]
struct Family {
    name: &'static str,
    help: &'static str,
    kind: Kind,
    samples: Vec<(Labels, Value)>,
}

impl Family {
    fn new(name: &'static str, help: &'static str, kind: Kind) -> Family {
        Family {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }

    fn add(&mut self, labels: &[(&'static str, &str)], value: Value) {
        let labels = labels.iter().map(|&(k, v)| (k, v.to_string())).collect();
        self.samples.push((labels, value));
    }

    /// The name of its samples.
    fn sample_name(&self) -> String {
        match self.kind {
            Kind::Counter => format!("{}_total", self.name),
            Kind::Info => format!("{}_info", self.name),
            Kind::Gauge => self.name.to_string(),
        }
    }
}

/// The families of a scrape: `pinned`, `unreadable` (functions that could
/// not be read) and with --capture `captures`.
fn families(
    pinned: &[Pinned],
    unreadable: &[String],
    captures: Option<&[CaptureSeries]>,
) -> Vec<Family> {
    let mut calls = Family::new(
        "topdown_calls",
        "Calls of the pinned kernel function or tracepoint per reason since it was pinned.",
        Kind::Counter,
    );
    let mut drops = Family::new(
        "topdown_drops",
        "Calls not counted under their reason, and stacks not captured, by cause.",
        Kind::Counter,
    );
    let mut info = Family::new(
        "topdown",
        "A pinned function: how it is traced.",
        Kind::Info,
    );
    let mut pinned_at = Family::new(
        "topdown_pinned_timestamp_seconds",
        "When the function was pinned (Unix time): its counters started then.",
        Kind::Gauge,
    );
    let mut read_error = Family::new(
        "topdown_read_error",
        "1: the pinned function could not be read in this scrape (topdown serve logs why).",
        Kind::Gauge,
    );
    for p in pinned {
        let func = p.func.as_str();
        for r in p.calls.rows.iter().filter(|r| !r.special) {
            calls.add(
                &[("function", func), ("reason", r.reason.as_str())],
                Value::Int(r.count),
            );
        }
        for (cause, n) in p.drops.fields() {
            drops.add(&[("function", func), ("cause", cause)], Value::Int(n));
        }
        info.add(
            &[
                ("function", func),
                ("mode", p.mode.name()),
                ("profile", p.profile.as_deref().unwrap_or("none")),
                ("kernel", p.kernel.as_str()),
                ("version", p.version.as_str()),
            ],
            Value::Int(1),
        );
        pinned_at.add(&[("function", func)], Value::Float(p.pinned_at));
    }
    for func in unreadable {
        read_error.add(&[("function", func.as_str())], Value::Int(1));
    }
    let mut all = vec![calls, drops, info, pinned_at, read_error];
    if let Some(captures) = captures {
        let mut active = Family::new(
            "topdown_capture_active",
            "1: a reason whose stacks topdown serve --capture captures now (several can be).",
            Kind::Gauge,
        );
        let mut stacks = Family::new(
            "topdown_stacks",
            "Stacks captured by topdown serve --capture since it started, per reason.",
            Kind::Counter,
        );
        let mut gate_calls = Family::new(
            "topdown_capture_calls",
            "Calls of a reason the stack program took while topdown serve --capture captured it.",
            Kind::Counter,
        );
        let mut outcomes = Family::new(
            "topdown_capture_outcomes",
            "What became of those calls: they sum to topdown_capture_calls_total.",
            Kind::Counter,
        );
        for c in captures {
            let labels = [
                ("function", c.function.as_str()),
                ("reason", c.reason.as_str()),
            ];
            active.add(&labels, Value::Int(u64::from(c.active)));
            stacks.add(&labels, Value::Int(c.stacks));
            gate_calls.add(&labels, Value::Int(c.gate.calls));
            let g = &c.gate;
            for (outcome, n) in [
                ("shown", g.shown),
                ("sampled_out", g.sampled_out),
                ("rate_capped", g.rate_capped),
                ("ringbuf_full", g.ringbuf_full),
                ("not_kept", g.not_kept),
            ] {
                outcomes.add(&[labels[0], labels[1], ("outcome", outcome)], Value::Int(n));
            }
        }
        all.extend([active, stacks, gate_calls, outcomes]);
    }
    all
}

/// The families, for the client library's OpenMetrics encoder.
#[derive(Debug)]
struct Collected(Vec<Family>);

impl prometheus_client::collector::Collector for Collected {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        for f in &self.0 {
            let kind = match f.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Info => MetricType::Info,
            };
            let mut m = enc.encode_descriptor(f.name, f.help, None, kind)?;
            for (labels, value) in &f.samples {
                match (f.kind, *value) {
                    (Kind::Info, _) => m.encode_info(labels)?,
                    (Kind::Counter, Value::Int(n)) => {
                        ConstCounter::new(n).encode(m.encode_family(labels)?)?
                    }
                    (Kind::Counter, Value::Float(x)) => {
                        ConstCounter::new(x).encode(m.encode_family(labels)?)?
                    }
                    (Kind::Gauge, Value::Int(n)) => {
                        ConstGauge::new(n).encode(m.encode_family(labels)?)?
                    }
                    (Kind::Gauge, Value::Float(x)) => {
                        ConstGauge::new(x).encode(m.encode_family(labels)?)?
                    }
                }
            }
        }
        Ok(())
    }
}

/// The Prometheus text format 0.0.4 of `families`: HELP and TYPE name
/// the samples (`topdown_calls_total`); an info metric is a gauge of 1; a
/// family with no samples is left out, as the Go client does; no `# EOF`.
fn prometheus_text(families: &[Family]) -> String {
    let mut out = String::new();
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        let name = f.sample_name();
        let kind = match f.kind {
            Kind::Counter => "counter",
            Kind::Gauge | Kind::Info => "gauge",
        };
        // Writing into a String cannot fail.
        let _ = writeln!(out, "# HELP {name} {}", escape(f.help, false));
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in &f.samples {
            out.push_str(&name);
            if !labels.is_empty() {
                out.push('{');
                for (i, (k, v)) in labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{k}=\"{}\"", escape(v, true));
                }
                out.push('}');
            }
            let _ = match value {
                Value::Int(n) => writeln!(out, " {n}"),
                Value::Float(x) => writeln!(out, " {}", float(*x)),
            };
        }
    }
    out
}

/// `s` escaped for 0.0.4: backslash and newline, and in a label value the
/// double quote.
fn escape(s: &str, label_value: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if label_value => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

/// A float as Go's ParseFloat reads it: the shortest digits that give it
/// back, with an exponent when it is very large or small (Debug's form;
/// Display would write a 1e81 in 82 digits), and infinities as the format
/// spells them.
fn float(x: f64) -> String {
    if x == f64::INFINITY {
        "+Inf".into()
    } else if x == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{x:?}")
    }
}

/// The text of `pinned`, of `unreadable` (functions that could not be
/// read) and of `captures` (with --capture) in `format` (OpenMetrics
/// with its `# EOF`).
pub(crate) fn encode(
    format: Format,
    pinned: &[Pinned],
    unreadable: &[String],
    captures: Option<&[CaptureSeries]>,
) -> String {
    let families = families(pinned, unreadable, captures);
    match format {
        Format::Prometheus => prometheus_text(&families),
        Format::OpenMetrics => {
            let mut registry = prometheus_client::registry::Registry::default();
            registry.register_collector(Box::new(Collected(families)));
            let mut out = String::new();
            // Writing into a String cannot fail.
            prometheus_client::encoding::text::encode(&mut out, &registry).expect("encodes");
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::probe::Mode;
    use crate::report::{Distribution, Drops, ReasonRow};

    fn pinned() -> Pinned {
        let row = |reason: &str, count: u64, special: bool| ReasonRow {
            reason: reason.into(),
            count,
            rate: 0.0,
            share: 0.0,
            special,
        };
        Pinned {
            func: "deferred_split_folio".into(),
            tracepoint: None,
            mode: Mode::Fentry,
            profile: Some("built-in profile deferred_split_folio".into()),
            kernel: "6.12.0".into(),
            version: "0.1.0".into(),
            pinned_at: 1700000000.5,
            calls: Distribution {
                secs: 10.0,
                total: 12,
                rate: 1.2,
                rows: vec![
                    row("ZAP", 7, false),
                    row("FAULT_ALLOC", 4, false),
                    row("[caller not found]", 1, true),
                    row("MIGRATE", 0, false),
                ],
            },
            drops: Drops {
                caller_not_found: 1,
                ..Drops::default()
            },
            compare: None,
            filter: None,
            threshold: 80.0,
            system: None,
            fix: None,
        }
    }

    #[test]
    fn counters_info_and_timestamp_in_openmetrics_text() {
        let t = encode(Format::OpenMetrics, &[pinned()], &["vfs_read".into()], None);
        assert!(!t.contains("topdown_capture_active"), "{t}");
        let lines: Vec<&str> = t.lines().collect();
        for want in [
            "# TYPE topdown_calls counter",
            "topdown_calls_total{function=\"deferred_split_folio\",reason=\"ZAP\"} 7",
            "topdown_calls_total{function=\"deferred_split_folio\",reason=\"FAULT_ALLOC\"} 4",
            "topdown_calls_total{function=\"deferred_split_folio\",reason=\"MIGRATE\"} 0",
            "# TYPE topdown_drops counter",
            "topdown_drops_total{function=\"deferred_split_folio\",cause=\"caller_not_found\"} 1",
            "topdown_drops_total{function=\"deferred_split_folio\",cause=\"own_calls\"} 0",
            "# TYPE topdown info",
            "topdown_info{function=\"deferred_split_folio\",mode=\"fentry\",profile=\"built-in profile deferred_split_folio\",kernel=\"6.12.0\",version=\"0.1.0\"} 1",
            "# TYPE topdown_pinned_timestamp_seconds gauge",
            "topdown_pinned_timestamp_seconds{function=\"deferred_split_folio\"} 1700000000.5",
            "# TYPE topdown_read_error gauge",
            "topdown_read_error{function=\"vfs_read\"} 1",
        ] {
            assert!(lines.contains(&want), "no `{want}` in:\n{t}");
        }
        // Special slots are drops, not reasons.
        assert!(!t.contains("caller not found\"} "), "{t}");
        assert_eq!(lines.last(), Some(&"# EOF"));
        // Every sample line: a name, labels, one value.
        for l in lines.iter().filter(|l| !l.starts_with('#')) {
            let (name, rest) = l.split_once('{').expect(l);
            assert!(name.starts_with("topdown"), "{l}");
            let (_, value) = rest.rsplit_once("} ").expect(l);
            value.parse::<f64>().expect(l);
        }
    }

    #[test]
    fn nothing_pinned_is_an_empty_exposition() {
        let t = encode(Format::OpenMetrics, &[], &[], None);
        assert!(t.ends_with("# EOF\n"), "{t}");
        assert!(!t.lines().any(|l| !l.starts_with('#')), "{t}");
        assert_eq!(encode(Format::Prometheus, &[], &[], None), "");
    }

    #[test]
    fn captures_are_a_gauge_and_a_counter_per_reason() {
        let series = |reason: &str, active: bool, stacks: u64| CaptureSeries {
            function: "deferred_split_folio".into(),
            reason: reason.into(),
            active,
            stacks,
            gate: Gate {
                calls: stacks + 5,
                shown: stacks,
                rate_capped: 5,
                ..Gate::default()
            },
        };
        let t = encode(
            Format::OpenMetrics,
            &[pinned()],
            &[],
            Some(&[series("FAULT_ALLOC", false, 3), series("ZAP", true, 9)]),
        );
        let lines: Vec<&str> = t.lines().collect();
        for want in [
            "# TYPE topdown_capture_active gauge",
            "topdown_capture_active{function=\"deferred_split_folio\",reason=\"FAULT_ALLOC\"} 0",
            "topdown_capture_active{function=\"deferred_split_folio\",reason=\"ZAP\"} 1",
            "# TYPE topdown_stacks counter",
            "topdown_stacks_total{function=\"deferred_split_folio\",reason=\"FAULT_ALLOC\"} 3",
            "topdown_stacks_total{function=\"deferred_split_folio\",reason=\"ZAP\"} 9",
            "# TYPE topdown_capture_calls counter",
            "topdown_capture_calls_total{function=\"deferred_split_folio\",reason=\"ZAP\"} 14",
            "# TYPE topdown_capture_outcomes counter",
            "topdown_capture_outcomes_total{function=\"deferred_split_folio\",reason=\"ZAP\",outcome=\"shown\"} 9",
            "topdown_capture_outcomes_total{function=\"deferred_split_folio\",reason=\"ZAP\",outcome=\"rate_capped\"} 5",
            "topdown_capture_outcomes_total{function=\"deferred_split_folio\",reason=\"ZAP\",outcome=\"not_kept\"} 0",
        ] {
            assert!(lines.contains(&want), "no `{want}` in:\n{t}");
        }
        // --capture with nothing captured yet: the families, no samples.
        let t = encode(Format::OpenMetrics, &[], &[], Some(&[]));
        assert!(t.contains("# TYPE topdown_stacks counter"), "{t}");
        // In 0.0.4, a family with no samples is left out.
        let t = encode(Format::Prometheus, &[pinned()], &[], Some(&[]));
        assert!(!t.contains("topdown_stacks"), "{t}");
    }

    /// The whole 0.0.4 text of one pinned function, one that could not be
    /// read and a capture: HELP and TYPE name the samples, the info metric
    /// is a gauge, label values are escaped, and there is no `# EOF`.
    #[test]
    fn prometheus_text_format() {
        let mut p = pinned();
        p.calls.rows.truncate(2);
        p.profile = Some("a \"quoted\\ name\n".into());
        let capture = CaptureSeries {
            function: "deferred_split_folio".into(),
            reason: "ZAP".into(),
            active: true,
            stacks: 9,
            gate: Gate {
                calls: 10,
                shown: 9,
                not_kept: 1,
                ..Gate::default()
            },
        };
        let t = encode(
            Format::Prometheus,
            &[p],
            &["vfs_read".into()],
            Some(&[capture]),
        );
        let drops: String = crate::report::Drops::default()
            .fields()
            .into_iter()
            .map(|(cause, _)| {
                let n = u64::from(cause == "caller_not_found");
                format!("topdown_drops_total{{function=\"deferred_split_folio\",cause=\"{cause}\"}} {n}\n")
            })
            .collect();
        let want = format!(
            "\
# HELP topdown_calls_total Calls of the pinned kernel function or tracepoint per reason since it was pinned.
# TYPE topdown_calls_total counter
topdown_calls_total{{function=\"deferred_split_folio\",reason=\"ZAP\"}} 7
topdown_calls_total{{function=\"deferred_split_folio\",reason=\"FAULT_ALLOC\"}} 4
# HELP topdown_drops_total Calls not counted under their reason, and stacks not captured, by cause.
# TYPE topdown_drops_total counter
{drops}\
# HELP topdown_info A pinned function: how it is traced.
# TYPE topdown_info gauge
topdown_info{{function=\"deferred_split_folio\",mode=\"fentry\",profile=\"a \\\"quoted\\\\ name\\n\",kernel=\"6.12.0\",version=\"0.1.0\"}} 1
# HELP topdown_pinned_timestamp_seconds When the function was pinned (Unix time): its counters started then.
# TYPE topdown_pinned_timestamp_seconds gauge
topdown_pinned_timestamp_seconds{{function=\"deferred_split_folio\"}} 1700000000.5
# HELP topdown_read_error 1: the pinned function could not be read in this scrape (topdown serve logs why).
# TYPE topdown_read_error gauge
topdown_read_error{{function=\"vfs_read\"}} 1
# HELP topdown_capture_active 1: a reason whose stacks topdown serve --capture captures now (several can be).
# TYPE topdown_capture_active gauge
topdown_capture_active{{function=\"deferred_split_folio\",reason=\"ZAP\"}} 1
# HELP topdown_stacks_total Stacks captured by topdown serve --capture since it started, per reason.
# TYPE topdown_stacks_total counter
topdown_stacks_total{{function=\"deferred_split_folio\",reason=\"ZAP\"}} 9
# HELP topdown_capture_calls_total Calls of a reason the stack program took while topdown serve --capture captured it.
# TYPE topdown_capture_calls_total counter
topdown_capture_calls_total{{function=\"deferred_split_folio\",reason=\"ZAP\"}} 10
# HELP topdown_capture_outcomes_total What became of those calls: they sum to topdown_capture_calls_total.
# TYPE topdown_capture_outcomes_total counter
topdown_capture_outcomes_total{{function=\"deferred_split_folio\",reason=\"ZAP\",outcome=\"shown\"}} 9
topdown_capture_outcomes_total{{function=\"deferred_split_folio\",reason=\"ZAP\",outcome=\"sampled_out\"}} 0
topdown_capture_outcomes_total{{function=\"deferred_split_folio\",reason=\"ZAP\",outcome=\"rate_capped\"}} 0
topdown_capture_outcomes_total{{function=\"deferred_split_folio\",reason=\"ZAP\",outcome=\"ringbuf_full\"}} 0
topdown_capture_outcomes_total{{function=\"deferred_split_folio\",reason=\"ZAP\",outcome=\"not_kept\"}} 1
"
        );
        assert_eq!(t, want);
    }

    /// Both formats carry the same samples: names, labels and values.
    #[test]
    fn both_formats_carry_the_same_samples() {
        let capture = [CaptureSeries {
            function: "deferred_split_folio".into(),
            reason: "ZAP".into(),
            active: false,
            stacks: 3,
            gate: Gate::default(),
        }];
        let samples = |f: Format| -> Vec<String> {
            let t = encode(f, &[pinned()], &["vfs_read".into()], Some(&capture));
            let mut s: Vec<String> = t
                .lines()
                .filter(|l| !l.starts_with('#'))
                .map(String::from)
                .collect();
            s.sort();
            s
        };
        let om = samples(Format::OpenMetrics);
        assert!(om.len() > 10, "{om:?}");
        assert_eq!(samples(Format::Prometheus), om);
    }

    /// promtool (Debian package prometheus), the Prometheus project's own
    /// checker, passes the 0.0.4 text, lint included, and refuses the
    /// OpenMetrics text ("unknown metric type "info""): what content
    /// negotiation is for.
    #[test]
    fn promtool_checks_the_text_format() {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let check = |text: &str| {
            let mut child = Command::new("promtool")
                .args(["check", "metrics"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?;
            child
                .stdin
                .take()
                .expect("piped")
                .write_all(text.as_bytes())?;
            let out = child.wait_with_output()?;
            let said = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            Ok::<_, std::io::Error>((out.status.success(), said))
        };
        let mut p = pinned();
        p.profile = Some("a \"quoted\\ name\n".into());
        let capture = [CaptureSeries {
            function: "deferred_split_folio".into(),
            reason: "ZAP".into(),
            active: true,
            stacks: 9,
            gate: Gate {
                calls: 9,
                shown: 9,
                ..Gate::default()
            },
        }];
        let args = (&[p][..], &["vfs_read".to_string()][..], Some(&capture[..]));
        let plain = encode(Format::Prometheus, args.0, args.1, args.2);
        let (ok, said) = match check(&plain) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return crate::testing::skip("promtool not found (Debian package prometheus)");
            }
            Err(e) => panic!("promtool: {e}"),
        };
        assert!(
            ok && said.trim().is_empty(),
            "promtool check metrics: {said}\n{plain}"
        );
        let om = encode(Format::OpenMetrics, args.0, args.1, args.2);
        let (ok, said) = check(&om).expect("promtool runs");
        assert!(
            !ok && said.contains("info"),
            "promtool check metrics: {said}\n{om}"
        );
    }

    #[test]
    fn floats_as_go_reads_them() {
        assert_eq!(float(1700000000.5), "1700000000.5");
        assert_eq!(float(3.0), "3.0");
        assert_eq!(float(-1.0068923074456493e81), "-1.0068923074456493e81");
        assert_eq!(float(f64::INFINITY), "+Inf");
        assert_eq!(float(f64::NEG_INFINITY), "-Inf");
        assert_eq!(float(f64::NAN), "NaN");
    }
}
