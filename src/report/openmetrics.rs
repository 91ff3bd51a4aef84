//! Pinned instances as OpenMetrics text, for Prometheus (`topdown serve`),
//! encoded by the Prometheus project's client library:
//!
//! - `topdown_calls_total{function,reason}`: calls per reason since the
//!   instance was pinned (every reason named so far, zeros included);
//! - `topdown_drops_total{function,cause}`: calls not counted under their
//!   reason, and stacks not captured, by cause (as in the summary's drops);
//! - `topdown_info{function,mode,profile,kernel,version}`: 1;
//! - `topdown_pinned_timestamp_seconds{function}`: when it was pinned, so a
//!   re-pin (counters starting over) can be told from a counter wrap;
//! - `topdown_read_error{function}`: 1 for a pinned function that could not
//!   be read in this scrape (`topdown serve` logs why); the others are
//!   served all the same;
//! - with `serve --capture`, `topdown_capture_active{function,reason}`: 1
//!   for the reason whose stacks are captured now, 0 for those captured
//!   before; and `topdown_stacks_total{function,reason}`: stacks captured
//!   since serve started.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::report::Pinned;

/// A reason serve --capture has captured stacks of.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CaptureSeries {
    pub(crate) function: String,
    pub(crate) reason: String,
    /// Captured now.
    pub(crate) active: bool,
    pub(crate) stacks: u64,
}

/// A scrape's worth of pinned instances, the functions that could not be
/// read, and with --capture what was captured (None: no capture).
#[derive(Debug)]
struct Scrape(Vec<Pinned>, Vec<String>, Option<Vec<CaptureSeries>>);

impl prometheus_client::collector::Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        self.encode_counts(&mut enc)?;
        self.encode_instances(&mut enc)?;
        match &self.2 {
            Some(captures) => encode_captures(captures, &mut enc),
            None => Ok(()),
        }
    }
}

impl Scrape {
    /// The calls per reason and the drops per cause.
    fn encode_counts(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let mut m = enc.encode_descriptor(
            "topdown_calls",
            "Calls of the traced kernel function per reason since it was pinned.",
            None,
            MetricType::Counter,
        )?;
        for p in &self.0 {
            for r in p.calls.rows.iter().filter(|r| !r.special) {
                let labels = [("function", p.func.as_str()), ("reason", r.reason.as_str())];
                ConstCounter::new(r.count).encode(m.encode_family(&labels)?)?;
            }
        }
        let mut m = enc.encode_descriptor(
            "topdown_drops",
            "Calls not counted under their reason, and stacks not captured, by cause.",
            None,
            MetricType::Counter,
        )?;
        for p in &self.0 {
            for (cause, n) in p.drops.fields() {
                let labels = [("function", p.func.as_str()), ("cause", cause)];
                ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }

    /// How each pinned function is traced, when it was pinned, and which
    /// could not be read.
    fn encode_instances(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let mut m = enc.encode_descriptor(
            "topdown",
            "A pinned function: how it is traced.",
            None,
            MetricType::Info,
        )?;
        for p in &self.0 {
            let labels = [
                ("function", p.func.as_str()),
                ("mode", p.mode.name()),
                ("profile", p.profile.as_deref().unwrap_or("none")),
                ("kernel", p.kernel.as_str()),
                ("version", p.version.as_str()),
            ];
            m.encode_info(&labels)?;
        }
        let mut m = enc.encode_descriptor(
            "topdown_pinned_timestamp_seconds",
            "When the function was pinned (Unix time): its counters started then.",
            None,
            MetricType::Gauge,
        )?;
        for p in &self.0 {
            let labels = [("function", p.func.as_str())];
            ConstGauge::new(p.pinned_at).encode(m.encode_family(&labels)?)?;
        }
        let mut m = enc.encode_descriptor(
            "topdown_read_error",
            "1: the pinned function could not be read in this scrape (topdown serve logs why).",
            None,
            MetricType::Gauge,
        )?;
        for func in &self.1 {
            let labels = [("function", func.as_str())];
            ConstGauge::new(1i64).encode(m.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// With --capture: the reason captured now, and the stacks per reason.
fn encode_captures(captures: &[CaptureSeries], enc: &mut DescriptorEncoder) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(
        "topdown_capture_active",
        "1: the reason whose stacks topdown serve --capture captures now.",
        None,
        MetricType::Gauge,
    )?;
    for c in captures {
        let labels = [
            ("function", c.function.as_str()),
            ("reason", c.reason.as_str()),
        ];
        ConstGauge::new(i64::from(c.active)).encode(m.encode_family(&labels)?)?;
    }
    let mut m = enc.encode_descriptor(
        "topdown_stacks",
        "Stacks captured by topdown serve --capture since it started, per reason.",
        None,
        MetricType::Counter,
    )?;
    for c in captures {
        let labels = [
            ("function", c.function.as_str()),
            ("reason", c.reason.as_str()),
        ];
        ConstCounter::new(c.stacks).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

/// The OpenMetrics text of `pinned`, of `unreadable` (functions that
/// could not be read) and of `captures` (with --capture), `# EOF`
/// included.
pub(crate) fn encode(
    pinned: Vec<Pinned>,
    unreadable: Vec<String>,
    captures: Option<Vec<CaptureSeries>>,
) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Scrape(pinned, unreadable, captures)));
    let mut out = String::new();
    // Writing into a String cannot fail.
    prometheus_client::encoding::text::encode(&mut out, &registry).expect("encodes");
    out
}

/// The content type of `encode`'s text.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

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
        let t = encode(vec![pinned()], vec!["vfs_read".into()], None);
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
        let t = encode(vec![], vec![], None);
        assert!(t.ends_with("# EOF\n"), "{t}");
        assert!(!t.lines().any(|l| !l.starts_with('#')), "{t}");
    }

    #[test]
    fn captures_are_a_gauge_and_a_counter_per_reason() {
        let series = |reason: &str, active: bool, stacks: u64| CaptureSeries {
            function: "deferred_split_folio".into(),
            reason: reason.into(),
            active,
            stacks,
        };
        let t = encode(
            vec![pinned()],
            vec![],
            Some(vec![
                series("FAULT_ALLOC", false, 3),
                series("ZAP", true, 9),
            ]),
        );
        let lines: Vec<&str> = t.lines().collect();
        for want in [
            "# TYPE topdown_capture_active gauge",
            "topdown_capture_active{function=\"deferred_split_folio\",reason=\"FAULT_ALLOC\"} 0",
            "topdown_capture_active{function=\"deferred_split_folio\",reason=\"ZAP\"} 1",
            "# TYPE topdown_stacks counter",
            "topdown_stacks_total{function=\"deferred_split_folio\",reason=\"FAULT_ALLOC\"} 3",
            "topdown_stacks_total{function=\"deferred_split_folio\",reason=\"ZAP\"} 9",
        ] {
            assert!(lines.contains(&want), "no `{want}` in:\n{t}");
        }
        // --capture with nothing captured yet: the families, no samples.
        let t = encode(vec![], vec![], Some(vec![]));
        assert!(t.contains("# TYPE topdown_stacks counter"), "{t}");
    }
}
