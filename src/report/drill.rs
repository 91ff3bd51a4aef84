//! --drill's trees: a captured reason's calls split by the frames above its
//! caller, level by level, from exact per-path counts, and their text.
//! Every node's children add up to it: paths are counted whole, so a level
//! is the sum of the one below it ([stack end] where a stack ends first,
//! [unknown] where the unwind found no caller, [paths full] where the
//! kernel's table had no room for a new path).

use std::fmt::Write;

use serde::Serialize;

/// A function on the calls' paths (or one of the bracketed names) and the
/// calls through it, its children largest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct DrillNode {
    pub(crate) name: String,
    pub(crate) calls: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) children: Vec<DrillNode>,
}

/// One drilled reason's tree: the root is the reason, its children the
/// caller functions, theirs the functions that called those, and so on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DrillTree {
    pub(crate) reason: String,
    /// --drill-levels: the root's children are level 1's callers.
    pub(crate) levels: u32,
    /// The reason's calls the stack gate saw while it was captured (the
    /// calls the paths were counted from), where known.
    pub(crate) captured_calls: Option<u64>,
    /// --threshold: a node's split is shown where it holds this percent
    /// of its parent.
    pub(crate) threshold: f64,
    pub(crate) root: DrillNode,
}

pub(crate) const STACK_END: &str = "[stack end]";
pub(crate) const UNKNOWN: &str = "[unknown]";
pub(crate) const PATHS_FULL: &str = "[paths full]";

impl DrillNode {
    fn add(&mut self, path: &[String], calls: u64) {
        self.calls += calls;
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        let at = match self.children.iter().position(|c| &c.name == first) {
            Some(i) => i,
            None => {
                self.children.push(DrillNode {
                    name: first.clone(),
                    calls: 0,
                    children: Vec::new(),
                });
                self.children.len() - 1
            }
        };
        self.children[at].add(rest, calls);
    }

    fn sort(&mut self) {
        self.children
            .sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.name.cmp(&b.name)));
        self.children.iter_mut().for_each(DrillNode::sort);
    }
}

/// The tree of `reason` from its paths (function names from the caller
/// up, each with its calls; a path's last name may be one of the bracketed
/// ones), the calls the full table left out under [paths full].
pub(crate) fn tree(
    reason: &str,
    (levels, threshold): (u32, f64),
    captured_calls: Option<u64>,
    paths: &[(Vec<String>, u64)],
    full: u64,
) -> DrillTree {
    let mut root = DrillNode {
        name: reason.to_string(),
        calls: 0,
        children: Vec::new(),
    };
    for (names, calls) in paths {
        root.add(names, *calls);
    }
    if full > 0 {
        root.add(&[PATHS_FULL.to_string()], full);
    }
    root.sort();
    DrillTree {
        reason: reason.to_string(),
        levels,
        captured_calls,
        threshold,
        root,
    }
}

impl DrillTree {
    /// Each path from the caller up as its names joined by `;` (folded,
    /// as flame graph tools take stacks, caller first), with its calls.
    pub(crate) fn folded(&self) -> Vec<(String, u64)> {
        fn walk(n: &DrillNode, prefix: &mut Vec<String>, out: &mut Vec<(String, u64)>) {
            if n.children.is_empty() {
                out.push((prefix.join(";"), n.calls));
            }
            for c in &n.children {
                prefix.push(c.name.clone());
                walk(c, prefix, out);
                prefix.pop();
            }
        }
        let mut out = Vec::new();
        for c in &self.root.children {
            walk(c, &mut vec![c.name.clone()], &mut out);
        }
        out
    }
}

/// Where a drilled reason's calls fell between two runs: the node (its
/// names from the caller up) whose share of the reason's calls fell the
/// most, found level by level, and its share before and now (percent).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodeDrop {
    pub(crate) reason: String,
    pub(crate) path: Vec<String>,
    pub(crate) before: f64,
    pub(crate) now: f64,
}

/// Each node's share of all the paths' calls, by its names from the caller up.
fn node_shares(paths: &[(Vec<String>, u64)]) -> Vec<(Vec<String>, f64)> {
    let total: u64 = paths.iter().map(|p| p.1).sum();
    let mut nodes: Vec<(Vec<String>, u64)> = Vec::new();
    for (names, calls) in paths {
        for end in 1..=names.len() {
            let prefix = &names[..end];
            match nodes.iter_mut().find(|n| n.0 == prefix) {
                Some(n) => n.1 += calls,
                None => nodes.push((prefix.to_vec(), *calls)),
            }
        }
    }
    nodes
        .into_iter()
        .map(|(p, n)| (p, share(n, total)))
        .collect()
}

/// The node of `reason` whose share of its calls fell the most from
/// `before` to `now` (each run's paths), found top-down as toplev's
/// drill-down does: from the root, the child whose share fell the most,
/// while it carries at least 80% of its parent's fall (down a chain whose
/// share held, such as the reason's one caller). None if no node's share
/// fell.
pub(crate) fn node_drop(
    reason: &str,
    before: &[(Vec<String>, u64)],
    now: &[(Vec<String>, u64)],
) -> Option<NodeDrop> {
    let (b, n) = (node_shares(before), node_shares(now));
    let of =
        |v: &[(Vec<String>, f64)], p: &[String]| v.iter().find(|x| x.0 == p).map_or(0.0, |x| x.1);
    let fall = |p: &[String]| of(&b, p) - of(&n, p);
    let mut at: Vec<String> = Vec::new();
    let mut parent_fall = 0.0f64;
    loop {
        let depth = at.len() + 1;
        let child = b
            .iter()
            .chain(n.iter())
            .filter(|x| x.0.len() == depth && x.0[..depth - 1] == at[..])
            .map(|x| (fall(&x.0), &x.0))
            .max_by(|x, y| x.0.total_cmp(&y.0).then_with(|| y.1.cmp(x.1)));
        match child {
            Some((f, p)) if f >= 0.0 && f >= 0.8 * parent_fall => {
                at = p.clone();
                parent_fall = f;
            }
            _ => break,
        }
    }
    (fall(&at) > 0.0).then(|| NodeDrop {
        reason: reason.to_string(),
        before: of(&b, &at),
        now: of(&n, &at),
        path: at,
    })
}

fn share(n: u64, of: u64) -> f64 {
    match of {
        0 => 0.0,
        _ => n as f64 * 100.0 / of as f64,
    }
}

/// A chain of single children from `node`, as one line's names, and the
/// node it ends at.
fn chain(node: &DrillNode) -> (Vec<&str>, &DrillNode) {
    let mut names = vec![node.name.as_str()];
    let mut at = node;
    while let [only] = at.children.as_slice() {
        names.push(only.name.as_str());
        at = only;
    }
    (names, at)
}

struct Lines {
    out: String,
    threshold: f64,
}

impl Lines {
    /// `node`'s line (its chain of single children on it) and, if it holds
    /// `threshold` percent of `parent`, its split below; `dominant`: every
    /// node above it held it too (the deepest such is marked `<==`).
    fn node(&mut self, node: &DrillNode, parent: u64, depth: usize, dominant: bool) {
        let (names, end) = chain(node);
        let pct = share(node.calls, parent);
        let held = dominant && pct >= self.threshold;
        let split = held && end.children.len() > 1;
        let deepest = held
            && !(split
                && end
                    .children
                    .iter()
                    .any(|c| share(c.calls, end.calls) >= self.threshold));
        let _ = writeln!(
            self.out,
            "  {:indent$}{}  {}  {pct:.1}%{}",
            "",
            names.join(" <- "),
            node.calls,
            if deepest { "  <==" } else { "" },
            indent = 2 * depth
        );
        if split {
            for c in &end.children {
                self.node(c, end.calls, depth + 1, true);
            }
        }
    }
}

/// The tree as indented text: each line a chain of functions (the caller
/// first, `<-` its caller), its calls and its share of the line above. A
/// node's split is shown where it holds the tree's threshold percent of
/// its parent, as capture's trigger does for reasons.
pub(crate) fn text(t: &DrillTree) -> String {
    let mut lines = Lines {
        out: String::new(),
        threshold: t.threshold,
    };
    let of = match t.captured_calls {
        Some(c) => format!(" of its {c} calls seen while captured"),
        None => String::new(),
    };
    let _ = writeln!(
        lines.out,
        "  {} by path (--drill, exact, {} levels): {} calls{of}",
        t.reason, t.levels, t.root.calls
    );
    for c in &t.root.children {
        lines.node(c, t.root.calls, 1, true);
    }
    lines.out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(names: &[&str], n: u64) -> (Vec<String>, u64) {
        (names.iter().map(|s| s.to_string()).collect(), n)
    }

    /// Whether every node's children add up to it (leaves aside).
    fn sums_hold(n: &DrillNode) -> bool {
        n.children.is_empty()
            || (n.children.iter().map(|c| c.calls).sum::<u64>() == n.calls
                && n.children.iter().all(sums_hold))
    }

    fn two_paths() -> DrillTree {
        tree(
            "zap_pte_range",
            (6, 80.0),
            Some(1002),
            &[
                p(
                    &[
                        "zap_pte_range",
                        "zap_pmd_range",
                        "unmap_vmas",
                        "unmap_region",
                    ],
                    750,
                ),
                p(
                    &[
                        "zap_pte_range",
                        "zap_pmd_range",
                        "zap_page_range_single",
                        "madvise",
                    ],
                    240,
                ),
                p(
                    &[
                        "zap_pte_range",
                        "zap_pmd_range",
                        "zap_page_range_single",
                        "other",
                    ],
                    10,
                ),
                p(&["zap_pte_range", UNKNOWN], 1),
            ],
            1,
        )
    }

    #[test]
    fn every_node_is_the_sum_of_its_children() {
        let t = two_paths();
        assert_eq!(t.root.calls, 1002);
        assert!(sums_hold(&t.root));
        let zap = &t.root.children[0];
        assert_eq!((zap.name.as_str(), zap.calls), ("zap_pte_range", 1001));
        assert_eq!(zap.children[0].calls, 1000);
        assert_eq!(zap.children[1].name, UNKNOWN);
        assert_eq!(t.root.children[1].name, PATHS_FULL);
    }

    #[test]
    fn the_fall_is_found_at_the_node_that_lost_its_calls() {
        let before = [
            p(&["zap", "walk", "unmap_vmas", "munmap"], 75),
            p(&["zap", "walk", "zap_single", "madvise"], 25),
        ];
        let now = [p(&["zap", "walk", "unmap_vmas", "munmap"], 40)];
        let d = node_drop("zap", &before, &now).unwrap();
        assert_eq!(d.path, ["zap", "walk", "zap_single", "madvise"]);
        assert_eq!((d.before, d.now), (25.0, 0.0));
        // Nothing fell: no node.
        assert_eq!(node_drop("zap", &before, &before), None);
        // Two sub-paths that fell alike: the fall stops above them.
        let before = [
            p(&["zap", "a", "x"], 40),
            p(&["zap", "a", "y"], 40),
            p(&["zap", "b"], 20),
        ];
        let now = [
            p(&["zap", "b"], 20),
            p(&["zap", "a", "x"], 10),
            p(&["zap", "a", "y"], 10),
        ];
        let d = node_drop("zap", &before, &now).unwrap();
        assert_eq!(d.path, ["zap", "a"]);
        assert_eq!((d.before, d.now), (80.0, 50.0));
    }

    #[test]
    fn folded_paths_are_the_leaves() {
        let f = two_paths().folded();
        assert_eq!(f.len(), 5);
        assert_eq!(
            f[0],
            (
                "zap_pte_range;zap_pmd_range;unmap_vmas;unmap_region".to_string(),
                750
            )
        );
        assert_eq!(f[3], (format!("zap_pte_range;{UNKNOWN}"), 1));
        assert_eq!(f[4], (PATHS_FULL.to_string(), 1));
        assert_eq!(f.iter().map(|p| p.1).sum::<u64>(), 1002);
    }

    #[test]
    fn the_text_splits_dominant_nodes_and_marks_the_deepest() {
        let s = text(&two_paths());
        assert!(s.contains("zap_pte_range by path (--drill, exact, 6 levels): 1002 calls of its 1002 calls seen"), "{s}");
        assert!(s.contains("\n    zap_pte_range  1001  99.9%\n"), "{s}");
        assert!(s.contains("      zap_pmd_range  1000  99.9%  <==\n"), "{s}");
        // 75% of zap_pmd_range: shown, but not split further
        assert!(
            s.contains("        unmap_vmas <- unmap_region  750  75.0%\n"),
            "{s}"
        );
        assert!(
            s.contains("        zap_page_range_single  250  25.0%\n"),
            "{s}"
        );
        assert!(!s.contains("madvise"), "{s}");
    }

    #[test]
    fn a_lower_threshold_goes_further_down() {
        let s = text(&DrillTree {
            threshold: 20.0,
            ..two_paths()
        });
        assert!(s.contains("          madvise  240  96.0%  <==\n"), "{s}");
        assert!(s.contains("          other  10  4.0%\n"), "{s}");
    }
}
