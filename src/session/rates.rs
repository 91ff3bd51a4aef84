//! Interval arithmetic over monotonic counters: deltas, rates and shares.

use crate::reasons::Reasons;
use crate::report::{Distribution, ReasonRow};

/// One reason's figures over an interval.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub(crate) slot: u32,
    pub(crate) count: u64,
    pub(crate) rate: f64,
    /// Percent of the interval's total.
    pub(crate) share: f64,
}

/// An interval's figures: rows sorted by count, largest first, zero rows
/// left out.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Interval {
    pub(crate) secs: f64,
    pub(crate) total: u64,
    pub(crate) rows: Vec<Row>,
}

impl Interval {
    /// Figures between two readings of the per-slot totals. Counters are
    /// monotonic u64s, so a wrapped counter still gives the right delta.
    pub(crate) fn between(prev: &[u64], cur: &[u64], secs: f64) -> Self {
        let deltas: Vec<u64> = cur
            .iter()
            .enumerate()
            .map(|(i, &c)| c.wrapping_sub(prev.get(i).copied().unwrap_or(0)))
            .collect();
        Self::from_deltas(&deltas, secs)
    }

    pub(crate) fn from_deltas(deltas: &[u64], secs: f64) -> Self {
        let total = deltas.iter().fold(0u64, |a, &d| a.wrapping_add(d));
        let mut rows: Vec<Row> = deltas
            .iter()
            .enumerate()
            .filter(|(_, &d)| d > 0)
            .map(|(slot, &count)| Row {
                slot: slot as u32,
                count,
                rate: per_sec(count, secs),
                share: 100.0 * count as f64 / total as f64,
            })
            .collect();
        rows.sort_by(|a, b| b.count.cmp(&a.count).then(a.slot.cmp(&b.slot)));
        Interval { secs, total, rows }
    }

    pub(crate) fn rate(&self) -> f64 {
        per_sec(self.total, self.secs)
    }

    /// The figures with the slots' reason names, for a report.
    pub(crate) fn named(&self, reasons: &Reasons) -> Distribution {
        Distribution {
            secs: self.secs,
            total: self.total,
            rate: self.rate(),
            rows: self
                .rows
                .iter()
                .map(|r| ReasonRow {
                    reason: reasons.name(r.slot).to_string(),
                    count: r.count,
                    rate: r.rate,
                    share: r.share,
                    special: Reasons::is_special(r.slot),
                })
                .collect(),
        }
    }
}

fn per_sec(n: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 / secs
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_rates_and_shares() {
        let iv = Interval::between(&[0, 10, 5, 7], &[0, 40, 15, 7], 2.0);
        assert_eq!(iv.total, 40);
        assert_eq!(iv.rate(), 20.0);
        assert_eq!(
            iv.rows,
            vec![
                Row {
                    slot: 1,
                    count: 30,
                    rate: 15.0,
                    share: 75.0
                },
                Row {
                    slot: 2,
                    count: 10,
                    rate: 5.0,
                    share: 25.0
                },
            ]
        );
    }

    #[test]
    fn named_rows_carry_reason_names_and_special_slots() {
        let mut r = Reasons::new(8);
        let a = r.slot("a") as usize;
        let mut d = vec![0u64; 4];
        d[0] = 1;
        d[a] = 3;
        let n = Interval::from_deltas(&d, 1.0).named(&r);
        assert_eq!((n.total, n.rate), (4, 4.0));
        assert_eq!(n.rows[0].reason, "a");
        assert!(!n.rows[0].special);
        assert_eq!(n.rows[1].reason, "[caller not found]");
        assert!(n.rows[1].special);
    }

    #[test]
    fn wrapped_counters_give_the_true_delta() {
        let iv = Interval::between(&[u64::MAX - 1], &[3], 1.0);
        assert_eq!(iv.total, 5);
        assert_eq!(iv.rows[0].count, 5);
    }

    #[test]
    fn an_interval_without_events_has_no_rows_and_no_nan() {
        let iv = Interval::between(&[4, 4], &[4, 4], 1.0);
        assert_eq!(iv.total, 0);
        assert!(iv.rows.is_empty());
        assert_eq!(iv.rate(), 0.0);
    }

    #[test]
    fn a_zero_length_interval_has_zero_rates() {
        let iv = Interval::between(&[0], &[8], 0.0);
        assert_eq!(iv.rows[0].rate, 0.0);
        assert_eq!(iv.rows[0].share, 100.0);
    }

    #[test]
    fn new_slots_count_from_zero_and_ties_keep_slot_order() {
        let iv = Interval::between(&[1], &[2, 1, 1], 1.0);
        let slots: Vec<u32> = iv.rows.iter().map(|r| r.slot).collect();
        assert_eq!(slots, [0, 1, 2]);
    }
}
