//! The module graph of src/ has no cycles: a module that uses another never
//! reaches back to itself through what that one uses. Test code (`#[cfg(test)]`
//! items) is left out; a parent's `mod child;` is not a use, but a parent using
//! its child's items and the child using the parent's is a cycle.
//!
//! It reads the source as text: `crate::`, `super::` and `self::` paths, in
//! `use` trees and in code, and paths that start with a child module's name.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module's path from the crate root (`["report", "compare"]`).
type ModPath = Vec<String>;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Colons,
    Open,
    Close,
    Comma,
    Semi,
    Other(char),
}

/// The source without comments, string and char literals.
fn strip(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && is_raw_start(&b, i) {
            // r"..." or r#"..."#
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            j += 1; // the opening quote
            'raw: while j < b.len() {
                if b[j] == '"' && (1..=hashes).all(|k| b.get(j + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break 'raw;
                }
                j += 1;
            }
            i = j;
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && is_char_literal(&b, i) {
            i += 1;
            while i < b.len() && b[i] != '\'' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_raw_start(b: &[char], i: usize) -> bool {
    let before_ok = i == 0 || !(b[i - 1].is_alphanumeric() || b[i - 1] == '_');
    let mut j = i + 1;
    while b.get(j) == Some(&'#') {
        j += 1;
    }
    before_ok && b.get(j) == Some(&'"')
}

/// A char literal, not a lifetime: 'x' or '\n' (a lifetime has no closing quote).
fn is_char_literal(b: &[char], i: usize) -> bool {
    matches!(
        (b.get(i + 1), b.get(i + 2)),
        (Some('\\'), _) | (Some(_), Some('\''))
    )
}

fn tokens(src: &str) -> Vec<Tok> {
    let b: Vec<char> = src.chars().collect();
    let mut t = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_alphabetic() || c == '_' {
            let s = i;
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            t.push(Tok::Ident(b[s..i].iter().collect()));
            continue;
        }
        match c {
            ':' if b.get(i + 1) == Some(&':') => {
                t.push(Tok::Colons);
                i += 2;
                continue;
            }
            '{' => t.push(Tok::Open),
            '}' => t.push(Tok::Close),
            ',' => t.push(Tok::Comma),
            ';' => t.push(Tok::Semi),
            c if c.is_whitespace() => {}
            c => t.push(Tok::Other(c)),
        }
        i += 1;
    }
    t
}

/// The tokens without `#[cfg(test)]` items; also whether a `#[cfg(test)] mod x;`
/// declared a test-only child `x`.
fn without_tests(t: &[Tok], test_children: &mut BTreeSet<String>) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        let is_cfg_test = t[i] == Tok::Other('#')
            && t.get(i + 1) == Some(&Tok::Other('['))
            && t.get(i + 2) == Some(&Tok::Ident("cfg".into()))
            && t.get(i + 3) == Some(&Tok::Other('('))
            && t.get(i + 4) == Some(&Tok::Ident("test".into()))
            && t.get(i + 5) == Some(&Tok::Other(')'))
            && t.get(i + 6) == Some(&Tok::Other(']'));
        if !is_cfg_test {
            out.push(t[i].clone());
            i += 1;
            continue;
        }
        // Skip the item: to a `;` at depth 0 or the end of its first `{...}`;
        // an enum variant or a field (`#[cfg(test)] SelfTest,`) ends at its
        // `,`, or at the `}` that closes what holds it (kept).
        let mut j = i + 7;
        let mut depth = 0usize;
        let mut seen_mod = None;
        while j < t.len() {
            match &t[j] {
                Tok::Ident(s) if s == "mod" && depth == 0 => {
                    if let Some(Tok::Ident(n)) = t.get(j + 1) {
                        seen_mod = Some(n.clone());
                    }
                }
                Tok::Comma if depth == 0 => break,
                Tok::Close if depth == 0 => {
                    j -= 1;
                    break;
                }
                Tok::Open => depth += 1,
                Tok::Close => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                Tok::Semi if depth == 0 => {
                    if let Some(n) = seen_mod.take() {
                        test_children.insert(n);
                    }
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        i = j + 1;
    }
    out
}

/// Parses a path tree at t[i..] (after its first segment was taken as `prefix`),
/// pushing every full path into `out`; returns the index after it.
fn tree(t: &[Tok], mut i: usize, prefix: ModPath, out: &mut Vec<ModPath>) -> usize {
    let mut path = prefix;
    loop {
        if t.get(i) != Some(&Tok::Colons) {
            out.push(path);
            return i;
        }
        i += 1;
        match t.get(i) {
            Some(Tok::Ident(s)) => {
                path.push(s.clone());
                i += 1;
            }
            Some(Tok::Open) => {
                i += 1;
                loop {
                    match t.get(i) {
                        Some(Tok::Close) => return i + 1,
                        Some(Tok::Comma) => i += 1,
                        Some(Tok::Ident(s)) => {
                            let mut p = path.clone();
                            if s != "self" {
                                p.push(s.clone());
                            }
                            i = tree(t, i + 1, p, out);
                            // `as name`
                            if t.get(i) == Some(&Tok::Ident("as".into())) {
                                i += 2;
                            }
                        }
                        Some(_) => i += 1,
                        None => return i,
                    }
                }
            }
            _ => {
                out.push(path);
                return i;
            }
        }
    }
}

struct Crate {
    root: PathBuf,
    /// Every module that has a file, by its path.
    files: BTreeMap<ModPath, PathBuf>,
}

impl Crate {
    fn load(root: &Path) -> Crate {
        let mut files = BTreeMap::new();
        fn walk(dir: &Path, root: &Path, files: &mut BTreeMap<ModPath, PathBuf>) {
            for e in fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, root, files);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    let rel = p.strip_prefix(root).unwrap();
                    let mut m: ModPath = rel
                        .iter()
                        .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
                        .collect();
                    if m.last().is_some_and(|l| l == "mod" || l == "lib") {
                        m.pop();
                    }
                    if m.last().is_some_and(|l| l == "main") {
                        continue; // the binary: outside the library's graph
                    }
                    files.insert(m, p);
                }
            }
        }
        walk(root, root, &mut files);
        Crate {
            root: root.to_path_buf(),
            files,
        }
    }

    /// The module file a path names: its longest prefix that is a module.
    fn module_of(&self, p: &[String]) -> ModPath {
        (0..=p.len())
            .rev()
            .map(|n| p[..n].to_vec())
            .find(|m| self.files.contains_key(m))
            .unwrap_or_default()
    }

    fn children(&self, m: &ModPath) -> BTreeSet<String> {
        self.files
            .keys()
            .filter(|k| k.len() == m.len() + 1 && k.starts_with(m))
            .map(|k| k[m.len()].clone())
            .collect()
    }

    /// The modules `m` uses, outside test code.
    fn uses(&self, m: &ModPath, test_only: &mut BTreeSet<ModPath>) -> BTreeSet<ModPath> {
        let src = fs::read_to_string(&self.files[m]).unwrap();
        let mut test_children = BTreeSet::new();
        let t = without_tests(&tokens(&strip(&src)), &mut test_children);
        for c in test_children {
            let mut p = m.clone();
            p.push(c);
            test_only.insert(p);
        }
        let children = self.children(m);
        let mut paths = Vec::new();
        let mut i = 0;
        while i < t.len() {
            let prev_colons = i > 0 && t[i - 1] == Tok::Colons;
            let start = match (&t[i], t.get(i + 1)) {
                (Tok::Ident(s), Some(Tok::Colons)) if !prev_colons => match s.as_str() {
                    "crate" => Some(Vec::new()),
                    "super" => Some(m[..m.len().saturating_sub(1)].to_vec()),
                    "self" => Some(m.clone()),
                    s if children.contains(s) => {
                        let mut p = m.clone();
                        p.push(s.to_string());
                        Some(p)
                    }
                    _ => None,
                },
                _ => None,
            };
            match start {
                Some(mut p) => {
                    // `super::super::x`
                    let mut j = i + 1;
                    while t.get(j) == Some(&Tok::Colons)
                        && t.get(j + 1) == Some(&Tok::Ident("super".into()))
                    {
                        p.pop();
                        j += 2;
                    }
                    i = tree(&t, j, p, &mut paths);
                }
                None => i += 1,
            }
        }
        paths
            .iter()
            .map(|p| self.module_of(p))
            .filter(|d| d != m)
            .collect()
    }
}

/// Strongly connected components of more than one module (Tarjan).
fn cycles(g: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct St<'a> {
        g: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<ModPath, usize>,
        low: BTreeMap<ModPath, usize>,
        on: BTreeSet<ModPath>,
        stack: Vec<ModPath>,
        next: usize,
        out: Vec<Vec<ModPath>>,
    }
    fn visit(s: &mut St, v: &ModPath) {
        s.index.insert(v.clone(), s.next);
        s.low.insert(v.clone(), s.next);
        s.next += 1;
        s.stack.push(v.clone());
        s.on.insert(v.clone());
        for w in s.g.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let l = s.low[v].min(s.low[w]);
                s.low.insert(v.clone(), l);
            } else if s.on.contains(w) {
                let l = s.low[v].min(s.index[w]);
                s.low.insert(v.clone(), l);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(&w);
                let done = &w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = St {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        on: BTreeSet::new(),
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn name(m: &ModPath) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

#[test]
fn no_module_cycles() {
    let krate = Crate::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let mut test_only = BTreeSet::new();
    let mut g: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for m in krate.files.keys() {
        g.insert(m.clone(), krate.uses(m, &mut test_only));
    }
    for t in &test_only {
        g.remove(t);
    }
    for deps in g.values_mut() {
        deps.retain(|d| !test_only.contains(d));
    }
    let found = cycles(&g);
    let mut msg = String::new();
    for c in &found {
        msg += &format!("cycle among {} modules:\n", c.len());
        for m in c {
            let within: Vec<String> = g[m].iter().filter(|d| c.contains(d)).map(name).collect();
            msg += &format!("  {} uses {}\n", name(m), within.join(", "));
        }
    }
    assert!(
        found.is_empty(),
        "{msg}(read from {})",
        krate.root.display()
    );
    // The check sees real edges: the pipeline's first stages are used.
    assert!(g.values().any(|d| d.contains(&vec!["plan".to_string()])));
}

#[test]
fn a_planted_cycle_is_found() {
    let mut g: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    let a = vec!["a".to_string()];
    let b = vec!["b".to_string()];
    let c = vec!["c".to_string()];
    g.insert(a.clone(), [b.clone()].into());
    g.insert(b.clone(), [c.clone()].into());
    g.insert(c.clone(), [a.clone()].into());
    assert_eq!(cycles(&g), vec![vec![a.clone(), b.clone(), c.clone()]]);
    g.insert(c.clone(), BTreeSet::new());
    assert!(cycles(&g).is_empty());
}

#[test]
fn use_trees_are_read() {
    let src = "use crate::report::{self, saved::{Saved, load}, compare as c};\n\
               fn f() { let x = super::y::Z; /* crate::not::this */ let s = \"crate::nor::this\"; }\n\
               #[cfg(test)]\nmod tests { use crate::hidden::X; }\n";
    let mut tc = BTreeSet::new();
    let t = without_tests(&tokens(&strip(src)), &mut tc);
    let mut paths = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if let Tok::Ident(s) = &t[i] {
            if (s == "crate" || s == "super") && t.get(i + 1) == Some(&Tok::Colons) {
                i = tree(&t, i + 1, vec![s.clone()], &mut paths);
                continue;
            }
        }
        i += 1;
    }
    let got: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        got,
        [
            "crate::report",
            "crate::report::saved::Saved",
            "crate::report::saved::load",
            "crate::report::compare",
            "super::y::Z"
        ]
    );
}

/// The modules of src/bpf/ that are its inside: the maps, the skeleton, the
/// ABI mirrored from the C header, the per-CPU decoding, the control block.
const BPF_INTERNALS: [&str; 5] = ["abi", "maps", "ctl", "skel", "percpu"];

/// Files outside src/bpf/ that still name its internals: the counting
/// protocol's user half (session/) and the slot numbers reasons/ assigns,
/// to be moved behind src/bpf/mod.rs's vocabulary. None may be added; one
/// that stops is taken off.
const STILL_THROUGH_THE_WALL: [&str; 12] = [
    "reasons/mod.rs",
    "reasons/tests.rs",
    "session/background.rs",
    "session/mod.rs",
    "session/poll.rs",
    "session/poll_bench.rs",
    "session/run.rs",
    "session/stacks.rs",
    "session/state.rs",
    "session/timing.rs",
    "session/trigger.rs",
    "session/watch.rs",
];

/// Whether `src` names one of src/bpf's internals through a `bpf::` path
/// (`bpf::abi::X`, `bpf::{maps::Maps, ..}`), test code included.
fn names_bpf_internals(src: &str) -> bool {
    let t = tokens(&strip(src));
    let internal = |tok: Option<&Tok>| matches!(tok, Some(Tok::Ident(s)) if BPF_INTERNALS.contains(&s.as_str()));
    (0..t.len()).any(|i| {
        if t[i] != Tok::Ident("bpf".into()) || t.get(i + 1) != Some(&Tok::Colons) {
            return false;
        }
        match t.get(i + 2) {
            Some(Tok::Open) => {
                // A group: a path of its own starts after `{` or `,`.
                let mut depth = 0;
                for j in i + 2..t.len() {
                    match &t[j] {
                        Tok::Open => depth += 1,
                        Tok::Close if depth == 1 => return false,
                        Tok::Close => depth -= 1,
                        _ if depth == 1
                            && matches!(t[j - 1], Tok::Open | Tok::Comma)
                            && internal(Some(&t[j])) =>
                        {
                            return true
                        }
                        _ => {}
                    }
                }
                false
            }
            tok => internal(tok),
        }
    })
}

#[test]
fn only_src_bpf_names_the_kernel_side_s_internals() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let krate = Crate::load(&root);
    let through: BTreeSet<String> = krate
        .files
        .iter()
        .filter(|(m, _)| m.first().map(String::as_str) != Some("bpf"))
        .filter(|(_, path)| names_bpf_internals(&fs::read_to_string(path).unwrap()))
        .map(|(_, path)| {
            let rel = path.strip_prefix(&root).unwrap();
            rel.display().to_string()
        })
        .collect();
    let known: BTreeSet<String> = STILL_THROUGH_THE_WALL
        .iter()
        .map(|s| s.to_string())
        .collect();
    let new: Vec<&String> = through.difference(&known).collect();
    let gone: Vec<&String> = known.difference(&through).collect();
    assert!(
        new.is_empty(),
        "{new:?} name src/bpf's internals ({BPF_INTERNALS:?}): use what src/bpf/mod.rs offers \
         (limits, LoadConfig, Filters, the Maps and Probe methods)"
    );
    assert!(
        gone.is_empty(),
        "{gone:?} no longer name src/bpf's internals: take them off STILL_THROUGH_THE_WALL"
    );
    eprintln!(
        "{} files outside src/bpf name its internals: {through:?}",
        through.len()
    );
}

#[test]
fn a_path_through_the_wall_is_found() {
    assert!(names_bpf_internals("use crate::bpf::abi::SLOT_NONE;"));
    assert!(names_bpf_internals("use crate::bpf::{self, maps::Maps};"));
    assert!(names_bpf_internals(
        "fn f() { let x = bpf::percpu::Stats::default(); }"
    ));
    assert!(!names_bpf_internals(
        "use crate::bpf::{limits::MAX_PIDS, Filters};"
    ));
    assert!(!names_bpf_internals("use crate::bpf::probe::{self, abi};"));
    assert!(!names_bpf_internals(
        "// crate::bpf::abi::X in a comment\nfn f() {}"
    ));
}
