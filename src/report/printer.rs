//! One printer per output format, chosen in plan: the session and the
//! show job hand it what happened (an interval, the summary, a pinned
//! instance's counts) and it renders them.

use super::{json, text, IntervalReport, Pinned, Summary};

/// The output format of stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Printer {
    /// For people: tables.
    Text,
    /// One JSON object per line.
    Json,
}

impl Printer {
    /// --json's printer, or the text one.
    pub(crate) fn of(json: bool) -> Printer {
        if json {
            Printer::Json
        } else {
            Printer::Text
        }
    }

    /// One interval's counts, with the `top` stacks; a table fits `fit`
    /// (JSON is complete).
    pub(crate) fn interval(
        self,
        iv: &IntervalReport,
        top: usize,
        fit: crate::report::fit::Fit,
    ) -> String {
        match self {
            Printer::Text => text::interval(iv, top, fit),
            Printer::Json => json::interval(iv, top) + "\n",
        }
    }

    /// The run's summary, with the `top` reasons.
    pub(crate) fn summary(self, sum: &Summary, top: usize) -> String {
        match self {
            Printer::Text => text::summary(sum, top),
            Printer::Json => json::summary(sum, top) + "\n",
        }
    }

    /// Pinned instances' counts, one after another; what is printed when
    /// none is pinned.
    pub(crate) fn pinned(self, all: &[Pinned]) -> String {
        match self {
            Printer::Text if all.is_empty() => text::NOTHING_PINNED.to_string(),
            Printer::Text => all.iter().map(text::pinned).collect::<Vec<_>>().join("\n"),
            Printer::Json => all.iter().map(|p| json::pinned(p) + "\n").collect(),
        }
    }
}
