//! How a table fits the screen: the rows shown and the names elided.

/// How an interval's table fits the screen: at most `rows` reasons (the
/// others summed on one line, as bpftrace and perf top show the top N)
/// and, with a `width`, names elided in the middle so that a row fits in
/// it. The summary's table and JSON are complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fit {
    pub(crate) rows: usize,
    pub(crate) width: Option<usize>,
}

impl Fit {
    /// Every row, every name whole.
    pub(crate) const ALL: Fit = Fit {
        rows: usize::MAX,
        width: None,
    };

    /// The REASON column's width for these names, in a row whose other
    /// columns take `numbers` characters.
    pub(crate) fn name_width(self, names: impl Iterator<Item = usize>, numbers: usize) -> usize {
        let w = names.max().unwrap_or(0).max("REASON".len());
        match self.width {
            Some(cols) => w.min(cols.saturating_sub(numbers).max(MIN_NAME)),
            None => w,
        }
    }
}

/// The fewest characters a name is elided to, however narrow the screen.
const MIN_NAME: usize = 16;

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
    fn elide_keeps_both_ends() {
        assert_eq!(elide("short", 16), "short");
        assert_eq!(elide("abcdefghijklmnopqrstuvwxyz", 11), "abcd...wxyz");
        assert_eq!(elide("abcdefghijklmnopqrstuvwxyz", 12), "abcd...vwxyz");
        assert_eq!(elide("é".repeat(20).as_str(), 9), "ééé...ééé");
        assert_eq!(elide("abcdef", 3), "abc");
    }
}
