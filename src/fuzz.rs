//! Fuzzing with proptest (cargo-fuzz needs a nightly compiler): every
//! parser of outside input, and the writers whose output is read back by
//! others, on generated inputs and on a corpus of inputs kept in
//! tests/fuzz-corpus/TARGET/ (regressions and samples, one file each).
//! Bounded: a fixed number of cases per target, so `cargo test` runs them
//! all. No input may panic; writers' output must parse back to what was
//! written. Each target says how many inputs it tried (visible in the
//! test output, as a skip is).

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::bpf::probe::Mode;
use crate::cli::Cli;
use crate::filter::cpu_list;
use crate::funcname::FuncName;
use crate::profile::Profile;
use crate::report::Saved;
use crate::report::{Distribution, Drops, Pinned, ReasonRow};

/// Generated cases per target.
const CASES: u32 = 2000;

/// The corpus of `target`: each file's text.
fn corpus(target: &str) -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz-corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned())
        .collect()
}

/// Runs `check` on the corpus of `target` and on `CASES` generated
/// inputs, and says how many it tried.
/// (Writers have no corpus: `of_corpus` None.)
fn fuzz<S: Strategy>(
    target: &str,
    strategy: S,
    check: impl Fn(S::Value),
    of_corpus: Option<&dyn Fn(&str)>,
) where
    S::Value: std::fmt::Debug,
{
    let tried = AtomicU64::new(0);
    let files = match of_corpus {
        Some(_) => corpus(target),
        None => Vec::new(),
    };
    for text in &files {
        of_corpus.expect("a parser")(text);
    }
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&strategy, |v| {
            tried.fetch_add(1, Ordering::Relaxed);
            check(v);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{target}: {e}"));
    let _ = writeln!(
        std::io::stderr(),
        "fuzz: {target}: {} inputs ({} generated, {} from the corpus), no panic",
        tried.load(Ordering::Relaxed) + files.len() as u64,
        tried.load(Ordering::Relaxed),
        files.len()
    );
}

/// Text that is mostly near the grammar of interest: its own pieces,
/// arbitrary characters between them.
fn text_of(pieces: &'static [&'static str]) -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => proptest::sample::select(pieces).prop_map(str::to_string),
        1 => any::<char>().prop_map(|c| c.to_string()),
        1 => "[ -~]{0,8}",
    ];
    proptest::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

const TOML_PIECES: &[&str] = &[
    "version = 1\n",
    "version = ",
    "[[reason]]\n",
    "name = ",
    "callers = ",
    "within = ",
    "depth = ",
    "function = ",
    "description = ",
    "\"",
    "'",
    "[",
    "]",
    ",",
    "=",
    "\n",
    "#",
    "\"ZAP\"",
    "\"vfs_read\"",
    "\"file:mm/rmap.c\"",
    "\"inlined:foo\"",
    "-1",
    "0",
    "3",
    "99999999999999999999",
    "{",
    "}",
    ".",
    "\"\"",
    "[\"a\", \"b\"]",
    "\\u0000",
    "\\",
];

#[test]
fn fuzz_profile_toml() {
    let parse = |t: &str| {
        let _ = Profile::parse(t, "fuzz.toml");
    };
    fuzz(
        "profile-toml",
        text_of(TOML_PIECES),
        |t| parse(&t),
        Some(&parse),
    );
}

const RULES_PIECES: &[&str] = &[
    "ZAP",
    "=",
    ";",
    ",",
    "@",
    "/",
    "vfs_read",
    "file:",
    "mm/rmap.c",
    "inlined:",
    "0",
    "3",
    "99999999999",
    "-",
    " ",
    "A",
    "__",
    ".isra.0",
    ":",
    "*",
];

#[test]
fn fuzz_rules() {
    let parse = |t: &str| {
        let _ = Profile::inline(t);
    };
    fuzz("rules", text_of(RULES_PIECES), |t| parse(&t), Some(&parse));
}

const RESULT_PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"format\"",
    "\"topdown-result\"",
    "\"version\"",
    "1",
    "2",
    "99999999999999999999",
    "-1",
    "1e308",
    "1e999",
    "null",
    "true",
    "\"func\"",
    "\"f\"",
    "\"reasons\"",
    "\"reason\"",
    "\"count\"",
    "\"rate\"",
    "\"share\"",
    "\"stacks\"",
    "\"frames\"",
    "\"captured\"",
    "\"drops\"",
    "\"secs\"",
    "\"total\"",
    "\"hot_reason\"",
    "\"reason_names\"",
    "\"kernel\"",
    "\"source\"",
    "\"run\"",
    "\"\\u0000\"",
    "\"\\ud800\"",
];

#[test]
fn fuzz_result_file() {
    let parse = |t: &str| {
        if let Ok(s) = Saved::parse(t, None) {
            // What was read is written again and reads back the same.
            let again = Saved::parse(&s.to_json(), None).expect("a result written reads back");
            assert_eq!(again.func, s.func);
            assert_eq!(again.reasons.len(), s.reasons.len());
        }
    };
    let valid = Saved::parse(&crate::report::saved::tests::sample().to_json(), None).unwrap();
    let mutated = (any::<String>(), any::<u64>(), any::<f64>(), any::<String>()).prop_map(
        move |(func, count, rate, reason)| {
            let mut s = valid.clone();
            s.func = func;
            s.total = count;
            s.rate = rate;
            s.reasons[0].reason = reason;
            s.to_json()
        },
    );
    let strategy = prop_oneof![text_of(RESULT_PIECES), mutated];
    fuzz("result-file", strategy, |t| parse(&t), Some(&parse));
}

#[test]
fn fuzz_function_names() {
    let check = |t: &str| match FuncName::parse(t) {
        Ok(f) => {
            assert!(!f.is_empty() && f.len() <= crate::funcname::MAX_LEN);
            // Kernel symbols have dots (foo.isra.0, foo.cold): "a..b" is a
            // name, and as a file name no way out; "." and ".." start with '.'.
            assert!(!f.starts_with('.') && !f.contains('/'));
            // As a file name under a directory, it stays in it.
            let p = std::path::Path::new("/root").join(f.as_str());
            assert_eq!(p.parent(), Some(std::path::Path::new("/root")), "{t:?}");
        }
        Err(why) => assert!(!why.is_empty() && !why.contains('\n'), "{t:?}: {why}"),
    };
    let strategy = prop_oneof![
        "[A-Za-z0-9_./:$ -]{0,20}",
        any::<String>(),
        "[a-z_]{500,520}",
    ];
    fuzz("function-names", strategy, |t| check(&t), Some(&check));
}

#[test]
fn fuzz_cpu_lists() {
    let check = |t: &str| {
        if let Ok(l) = cpu_list(t) {
            assert!(
                l.0.windows(2).all(|w| w[0] < w[1]),
                "sorted, no repeats: {t:?}"
            );
            // The compact form parses back to the same CPUs.
            let text = crate::filter::cpus_text(&l.0);
            if !l.0.is_empty() {
                assert_eq!(cpu_list(&text).unwrap(), l, "{t:?} -> {text}");
            }
        }
    };
    let strategy = prop_oneof![
        "[0-9,\\- ]{0,24}",
        any::<String>(),
        text_of(&[
            "0",
            "1",
            "3",
            "-",
            ",",
            "4294967295",
            "65535",
            " ",
            "x",
            "99999999999"
        ]),
    ];
    fuzz("cpu-lists", strategy, |t| check(&t), Some(&check));
}

#[test]
fn fuzz_pid_lists() {
    use clap::Parser;
    let check = |t: &str| {
        if let Ok(c) = Cli::try_parse_from(["topdown", "vfs_read", "-p", t]) {
            let n = t.split(',').count();
            assert_eq!(c.trace.filter.pids.len(), n, "{t:?}");
        }
    };
    let strategy = prop_oneof![
        "[0-9,]{0,24}",
        any::<String>(),
        text_of(&[
            "1",
            "0",
            ",",
            "4294967295",
            "4294967296",
            "-1",
            " ",
            "+1",
            "x"
        ]),
    ];
    fuzz("pid-lists", strategy, |t| check(&t), Some(&check));
}

/// A pinned instance with arbitrary names and numbers.
fn pinned_strategy() -> impl Strategy<Value = Pinned> {
    let name = prop_oneof![any::<String>(), "[A-Za-z_\"\\\\\n{}=,]{0,12}"];
    let row = (
        name.clone(),
        any::<u64>(),
        any::<f64>(),
        any::<f64>(),
        any::<bool>(),
    )
        .prop_map(|(reason, count, rate, share, special)| ReasonRow {
            reason,
            count,
            rate,
            share,
            special,
        });
    let mode = prop_oneof![Just(Mode::Fentry), Just(Mode::Kprobe), Just(Mode::Uprobe)];
    (
        "[A-Za-z0-9_.]{1,20}",
        mode,
        proptest::option::of(name.clone()),
        name.clone(),
        any::<f64>(),
        proptest::collection::vec(row, 0..6),
        any::<u64>(),
        proptest::option::of(name),
    )
        .prop_map(
            |(func, mode, profile, kernel, at, rows, total, filter)| Pinned {
                func,
                tracepoint: None,
                mode,
                profile,
                kernel,
                version: "0.1.0".into(),
                pinned_at: at,
                calls: Distribution {
                    secs: at,
                    total,
                    rate: at,
                    rows,
                },
                drops: Drops {
                    own_calls: total,
                    ..Drops::default()
                },
                compare: None,
                filter,
                threshold: 80.0,
                system: None,
                fix: None,
            },
        )
}

/// One sample line: name, labels, value.
type MetricLine = (String, Vec<(String, String)>, String);

/// The samples of an OpenMetrics or 0.0.4 text; None if a line is not one.
fn samples(text: &str) -> Option<Vec<MetricLine>> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let open = line.find('{')?;
        let name = line[..open].to_string();
        let mut labels = Vec::new();
        let mut rest = &line[open + 1..];
        loop {
            if let Some(r) = rest.strip_prefix('}') {
                rest = r;
                break;
            }
            let eq = rest.find("=\"")?;
            let key = rest[..eq].to_string();
            let mut value = String::new();
            let mut chars = rest[eq + 2..].char_indices();
            let end = loop {
                match chars.next()? {
                    (i, '"') => break i,
                    (_, '\\') => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        c => value.push(c),
                    },
                    (_, c) => value.push(c),
                }
            };
            labels.push((key, value));
            rest = &rest[eq + 2 + end + 1..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
        let value = rest.strip_prefix(' ')?.to_string();
        out.push((name, labels, value));
    }
    Some(out)
}

#[test]
fn fuzz_openmetrics_writer() {
    let check = |ps: Vec<Pinned>| {
        use crate::report::openmetrics::{encode, Format};
        let text = encode(Format::OpenMetrics, &ps, &["f_unread".into()], None);
        let got = samples(&text).unwrap_or_else(|| panic!("not OpenMetrics text:\n{text}"));
        assert_eq!(text.lines().last(), Some("# EOF"));
        // The text format 0.0.4: the same samples, no # EOF.
        let plain = encode(Format::Prometheus, &ps, &["f_unread".into()], None);
        let mut got_plain =
            samples(&plain).unwrap_or_else(|| panic!("not Prometheus text:\n{plain}"));
        assert!(!plain.contains("# EOF"), "{plain}");
        // Values compared as numbers: the encoders may spell a float
        // differently.
        let number = |v: &String| v.parse::<f64>().map(f64::to_bits).unwrap_or(u64::MAX);
        let mut sorted = got.clone();
        sorted.sort();
        got_plain.sort();
        assert_eq!(
            got_plain.len(),
            sorted.len(),
            "0.0.4:\n{plain}\nOpenMetrics:\n{text}"
        );
        for (a, b) in got_plain.iter().zip(&sorted) {
            assert!(
                a.0 == b.0
                    && a.1 == b.1
                    && number(&a.2) == number(&b.2)
                    && number(&a.2) != u64::MAX,
                "0.0.4 {a:?}, OpenMetrics {b:?}"
            );
        }
        for p in &ps {
            for r in p.calls.rows.iter().filter(|r| !r.special) {
                let want = [
                    ("function".to_string(), p.func.clone()),
                    ("reason".to_string(), r.reason.clone()),
                ];
                assert!(
                    got.iter().any(|(n, l, v)| n == "topdown_calls_total"
                        && l[..] == want[..]
                        && *v == r.count.to_string()),
                    "no calls sample for {:?} in:\n{text}",
                    r.reason
                );
            }
        }
    };
    let strategy = proptest::collection::vec(pinned_strategy(), 0..3);
    fuzz("openmetrics", strategy, check, None);
}

#[test]
fn fuzz_json_writers() {
    let check = |p: Pinned| {
        let line = crate::report::json::pinned(&p);
        assert!(!line.contains('\n'), "one line: {line}");
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON parses back");
        assert_eq!(
            v["function"].as_str().or(v["func"].as_str()),
            Some(p.func.as_str())
        );
        let reasons = v["reasons"].as_array().expect("reasons");
        for r in p.calls.rows.iter() {
            assert!(
                reasons.iter().any(|j| j["reason"] == r.reason.as_str()),
                "no row {:?} in {line}",
                r.reason
            );
        }
        // The same instance as a result file reads back.
        let saved = Saved::of_pinned(&p);
        let back = Saved::parse(&saved.to_json(), Some(&p.func)).expect("a result reads back");
        assert_eq!(back.func, p.func);
        assert_eq!(back.kernel, p.kernel);
    };
    fuzz("json", pinned_strategy(), check, None);
}

/// --drill's trees from any paths: every node's children add up to it, the
/// root to all the paths' calls and the full table's, the folded paths give
/// the calls back, and a node's fall between two sets of paths is a fall.
#[test]
fn fuzz_drill_trees() {
    use crate::report::drill::{node_drop, tree};
    fn sums_hold(n: &crate::report::drill::DrillNode) -> bool {
        n.children.is_empty()
            || (n.children.iter().map(|c| c.calls).sum::<u64>() == n.calls
                && n.children.iter().all(sums_hold))
    }
    // As the kernel counts them: 5 levels, or fewer and the stack's end.
    let name = prop_oneof![Just("a"), Just("b"), Just("c")];
    let path = (prop::collection::vec(name, 1..6), 1u64..1000).prop_map(|(p, n)| {
        let mut p: Vec<String> = p.into_iter().map(String::from).collect();
        if p.len() < 5 {
            p.push("[stack end]".into());
        }
        (p, n)
    });
    let paths = prop::collection::vec(path, 0..12);
    let strategy = (paths.clone(), paths, 0u64..50);
    type Paths = Vec<(Vec<String>, u64)>;
    let check = |(before, now, full): (Paths, Paths, u64)| {
        let t = tree("R", (8, 80.0), None, &now, full);
        let total: u64 = now.iter().map(|p| p.1).sum();
        assert_eq!(t.root.calls, total + full);
        assert!(sums_hold(&t.root), "{now:?}");
        assert_eq!(t.folded().iter().map(|f| f.1).sum::<u64>(), total + full);
        if let Some(d) = node_drop("R", &before, &now) {
            assert!(d.before > d.now, "{d:?}");
        }
        let _ = crate::report::drill::text(&t);
    };
    fuzz("drill-trees", strategy, check, None);
}
