//! Interval arithmetic over monotonic counters: deltas, rates and shares.

/// One reason's figures over an interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub slot: u32,
    pub count: u64,
    pub rate: f64,
    /// Percent of the interval's total.
    pub share: f64,
}

/// An interval's figures: rows sorted by count, largest first, zero rows
/// left out.
#[derive(Debug, Clone, PartialEq)]
pub struct Interval {
    pub secs: f64,
    pub total: u64,
    pub rows: Vec<Row>,
}

impl Interval {
    /// Figures between two readings of the per-slot totals. Counters are
    /// monotonic u64s, so a wrapped counter still gives the right delta.
    pub fn between(prev: &[u64], cur: &[u64], secs: f64) -> Self {
        let deltas: Vec<u64> = cur
            .iter()
            .enumerate()
            .map(|(i, &c)| c.wrapping_sub(prev.get(i).copied().unwrap_or(0)))
            .collect();
        Self::from_deltas(&deltas, secs)
    }

    pub fn from_deltas(deltas: &[u64], secs: f64) -> Self {
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

    pub fn rate(&self) -> f64 {
        per_sec(self.total, self.secs)
    }

    pub fn count(&self, slot: u32) -> u64 {
        self.rows
            .iter()
            .find(|r| r.slot == slot)
            .map_or(0, |r| r.count)
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
        assert_eq!(iv.count(3), 0);
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
