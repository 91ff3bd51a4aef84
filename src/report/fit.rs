//! How a table fits the screen: the rows shown and the names elided.

/// How an interval's table fits the screen: at most `rows` reasons (the
/// others summed on one line, as bpftrace and perf top show the top N)
/// and, with a `width`, names elided in the middle so that a row fits in
/// it. Names longer than MAX_NAME are elided in every text table. The
/// summary's table has every row; JSON, folded stacks and metrics have
/// every name whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fit {
    pub(crate) rows: usize,
    pub(crate) width: Option<usize>,
}

impl Fit {
    /// Every row, names elided only past MAX_NAME.
    pub(crate) const ALL: Fit = Fit {
        rows: usize::MAX,
        width: None,
    };

    /// The REASON column's width for these names, in a row whose other
    /// columns take `numbers` characters: at most MAX_NAME.
    pub(crate) fn name_width(self, names: impl Iterator<Item = usize>, numbers: usize) -> usize {
        let w = names.max().unwrap_or(0).max("REASON".len()).min(MAX_NAME);
        match self.width {
            Some(cols) => w.min(cols.saturating_sub(numbers).max(MIN_NAME)),
            None => w,
        }
    }
}

/// The fewest characters a name is elided to, however narrow the screen.
const MIN_NAME: usize = 16;

/// The widest a name column gets, however wide the screen (or with none,
/// in a pipe): a caller such as a 177-character C++ symbol would make
/// every row of its table as wide. Longer names are elided to it, their
/// start and end kept, so that two of them still differ.
pub(crate) const MAX_NAME: usize = 60;

/// The width of a column of `names` (not a table's REASON column: no
/// title), at most MAX_NAME; elide each to it.
pub(crate) fn column_width<'a>(names: impl Iterator<Item = &'a str>) -> usize {
    names
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(0)
        .min(MAX_NAME)
}

/// `name` in at most `w` characters: its start and end, `...` between
/// (the end of a Rust path and a clone's suffix say the most).
pub(crate) fn elide(name: &str, w: usize) -> String {
    let n = name.chars().count();
    if n <= w {
        return name.to_string();
    }
    if w < 5 {
        return name.chars().take(w).collect();
    }
    let head = (w - 3) / 2;
    let tail = w - 3 - head;
    let mut s: String = name.chars().take(head).collect();
    s.push_str("...");
    s.extend(name.chars().skip(n - tail));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_columns_are_capped_whatever_the_width() {
        let long = [177, 10].into_iter();
        assert_eq!(Fit::ALL.name_width(long.clone(), 36), MAX_NAME);
        let wide = Fit {
            rows: 5,
            width: Some(400),
        };
        assert_eq!(wide.name_width(long.clone(), 36), MAX_NAME);
        let narrow = Fit {
            rows: 5,
            width: Some(80),
        };
        assert_eq!(narrow.name_width(long, 36), 44);
        assert_eq!(Fit::ALL.name_width([3].into_iter(), 36), "REASON".len());
        assert_eq!(column_width(["ZAP", "FAULT_ALLOC"].into_iter()), 11);
        assert_eq!(column_width(["x".repeat(177).as_str()].into_iter()), 60);
    }

    #[test]
    fn elide_keeps_both_ends() {
        assert_eq!(elide("short", 16), "short");
        assert_eq!(elide("abcdefghijklmnopqrstuvwxyz", 11), "abcd...wxyz");
        assert_eq!(elide("abcdefghijklmnopqrstuvwxyz", 12), "abcd...vwxyz");
        assert_eq!(elide("é".repeat(20).as_str(), 9), "ééé...ééé");
        assert_eq!(elide("abcdef", 3), "abc");
    }
}
