//! `topdown -x`: real uprobes on the machine's own kernel, on the workload
//! tests/workloads/ucallers.c built here as a PIE program and a shared
//! library. Needs root, uprobes and a C compiler: each test says SKIP with
//! the reason otherwise.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const TOPDOWN: &str = env!("CARGO_BIN_EXE_topdown");

/// Why the tests cannot run here, if they cannot.
fn missing() -> Option<String> {
    // SAFETY: a plain syscall.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    if !Path::new("/sys/bus/event_source/devices/uprobe").exists() {
        return Some("the kernel has no uprobe PMU (CONFIG_UPROBE_EVENTS)".into());
    }
    if Command::new("cc").arg("--version").output().is_err() {
        return Some("no C compiler (cc)".into());
    }
    None
}

macro_rules! need_uprobes {
    () => {
        if let Some(why) = missing() {
            eprintln!("SKIP: {why}");
            return;
        }
    };
}

/// The workload, built once per test in a directory of its own: the PIE
/// program `ucallers` linked with `libucallers.so`.
struct Built {
    dir: PathBuf,
}

impl Built {
    fn new(name: &str) -> Built {
        let dir =
            std::env::temp_dir().join(format!("topdown-uprobe-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/workloads/ucallers.c");
        let cc = |args: &[&str]| {
            let st = Command::new("cc")
                .args(["-O2", "-fno-omit-frame-pointer", "-Wall"])
                .args(args)
                .current_dir(&dir)
                .status()
                .unwrap();
            assert!(st.success(), "cc {args:?}");
        };
        cc(&[
            "-DUCALLERS_LIB",
            "-shared",
            "-fPIC",
            "-o",
            "libucallers.so",
            src,
        ]);
        cc(&[
            "-fPIE",
            "-pie",
            "-DUCALLERS_WITH_LIB",
            "-o",
            "ucallers",
            src,
            "-L.",
            "-lucallers",
            "-Wl,-rpath,$ORIGIN",
        ]);
        Built { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// A workload process, waiting for "go": its pid. It lives 800 ms
    /// after its calls.
    fn start(&self, n: [u32; 3]) -> (Child, u32) {
        self.start_holding(n, 800)
    }

    /// A workload process that lives `hold_ms` after its calls.
    fn start_holding(&self, n: [u32; 3], hold_ms: u32) -> (Child, u32) {
        let mut child = Command::new(self.dir.join("ucallers"))
            .args(n.map(|v| v.to_string()))
            .arg(hold_ms.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let pid = line.trim().strip_prefix("ready ").unwrap().parse().unwrap();
        (child, pid)
    }
}

impl Drop for Built {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs topdown ARGS --json -q; once it counts, lets the workloads run and
/// waits for them; returns the JSON summary.
fn run(args: &[&str], workloads: Vec<Child>) -> serde_json::Value {
    run_then(args, None, || {
        for mut w in workloads {
            w.stdin.take().unwrap().write_all(b"go\n").unwrap();
            assert!(w.wait().unwrap().success());
        }
    })
}

/// Runs topdown ARGS --json -q (with PATH `path` if given); once it
/// counts, runs `work`; returns the JSON summary.
fn run_then(args: &[&str], path: Option<&str>, work: impl FnOnce()) -> serde_json::Value {
    let mut td = Command::new(TOPDOWN);
    if let Some(p) = path {
        td.env("PATH", p);
    }
    let mut td = td
        .args(args)
        .args(["-d", "3", "--json", "-q"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = td.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("{line}");
            if line.contains("Ctrl-C to end") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("topdown attached");
    work();
    let out = td.wait_with_output().unwrap();
    assert!(out.status.success(), "topdown {args:?}: {:?}", out.status);
    let text = String::from_utf8(out.stdout).unwrap();
    serde_json::from_str(text.lines().last().unwrap()).unwrap()
}

/// The summary's count per reason, and its total.
fn counts(sum: &serde_json::Value) -> (Vec<(String, u64)>, u64) {
    let mut v: Vec<(String, u64)> = sum["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["reason"].as_str().unwrap().to_string(),
                r["count"].as_u64().unwrap(),
            )
        })
        .collect();
    v.sort();
    (v, sum["total"].as_u64().unwrap())
}

fn want(n: [u64; 3]) -> Vec<(String, u64)> {
    let mut v = vec![
        ("caller_one".to_string(), n[0]),
        ("caller_two".to_string(), n[1]),
        ("caller_three".to_string(), n[2]),
    ];
    v.sort();
    v
}

#[test]
fn a_shared_library_function_is_counted_exactly_by_caller_in_every_process() {
    need_uprobes!();
    let b = Built::new("lib");
    let (a, _) = b.start([100, 200, 300]);
    let (c, _) = b.start([1, 2, 3]);
    let sum = run(
        &["-x", &b.path("libucallers.so"), "td_lib_work"],
        vec![a, c],
    );
    assert_eq!(counts(&sum), (want([101, 202, 303]), 606));
    assert_eq!(sum["mode"], "uprobe");
}

#[test]
fn a_pie_programs_function_is_counted_for_one_process_and_its_stacks_captured() {
    need_uprobes!();
    let b = Built::new("pie");
    let (a, pid) = b.start([100, 200, 300]);
    let (other, _) = b.start([7, 8, 9]);
    let folded = b.path("stacks.folded");
    let pid = pid.to_string();
    let args = [
        "-x",
        &b.path("ucallers"),
        "td_work",
        "-p",
        &pid,
        "--stack-on",
        "caller_two",
        "--max-rate",
        "100000",
        "--folded",
        &folded,
    ];
    let sum = run(&args, vec![a, other]);
    assert_eq!(counts(&sum), (want([100, 200, 300]), 600));
    // Every call of caller_two's gave a stack, caller first, under main.
    assert_eq!(sum["stacks_captured"], 200);
    let text = std::fs::read_to_string(&folded).unwrap();
    let line = text.lines().next().unwrap();
    assert!(
        line.contains("main+") && line.contains(";caller_two+"),
        "{text}"
    );
    assert!(line.ends_with(" 200"), "{text}");
    // Return addresses at their own offsets (within the call, never +0x0
    // at a function's first byte): where bpftrace's ustack puts them.
    for frame in line.trim_end_matches(" 200").split(';') {
        let Some((name, off)) = frame.split(' ').next().unwrap().split_once("+0x") else {
            continue;
        };
        if name == "main" || name == "caller_two" {
            assert_ne!(
                u64::from_str_radix(off, 16).unwrap(),
                0,
                "{frame} in {text}"
            );
        }
    }
    gates_add_up(&sum);
}

/// Every captured reason's calls at the stack gate are its stacks shown
/// plus each cause of the others (the summary's capture_calls).
fn gates_add_up(sum: &serde_json::Value) {
    for g in sum["capture_calls"].as_array().unwrap() {
        let n = |k: &str| g[k].as_u64().unwrap();
        let parts = [
            "shown",
            "sampled_out",
            "rate_capped",
            "ringbuf_full",
            "not_kept",
            "unseen",
            "unnamed",
        ];
        assert_eq!(n("calls"), parts.iter().map(|k| n(k)).sum::<u64>(), "{g}");
        // A captured reason's calls are its capture spans' calls.
        let spans: Vec<u64> = sum["captures"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["reason"] == g["reason"])
            .map(|c| c["calls"].as_u64().unwrap())
            .collect();
        if !spans.is_empty() {
            assert_eq!(n("calls"), spans.iter().sum::<u64>(), "{g}: {sum}");
        }
    }
}

/// The stacks shown of `reason` in the summary.
fn shown(sum: &serde_json::Value, reason: &str) -> u64 {
    sum["stacks_by_reason"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["reason"] == reason)
        .map_or(0, |s| s["captured"].as_u64().unwrap())
}

/// The case: three callers' calls in one burst, over before topdown
/// names any of their call sites, at the default --max-rate. They all come
/// untagged; the busiest first caller's used to spend the whole budget, and
/// the captured reason's calls, last, got none.
#[test]
fn a_captured_callers_first_calls_have_stacks_whatever_the_other_callers_made() {
    need_uprobes!();
    let b = Built::new("untagged");
    let sum = capture_three(&b, b.start([3000, 2000, 1000]), &[]);
    assert_eq!(counts(&sum), (want([3000, 2000, 1000]), 6000));
    assert_eq!(shown(&sum, "caller_one"), 0, "{sum}");
}

/// Runs topdown on `workload` (a process and its pid) with `--stack-on
/// caller_three` and `more` flags; checks that caller_three has 10 stacks
/// shown or more and that each reason's calls at the gate add up; returns
/// the summary.
fn capture_three(b: &Built, workload: (Child, u32), more: &[&str]) -> serde_json::Value {
    let (w, pid) = workload;
    let (path, pid) = (b.path("ucallers"), pid.to_string());
    let mut args = vec![
        "-x",
        &path,
        "td_work",
        "-p",
        &pid,
        "--stack-on",
        "caller_three",
    ];
    args.extend_from_slice(more);
    let sum = run(&args, vec![w]);
    let got = shown(&sum, "caller_three");
    assert!(got >= 10, "caller_three: {got} stacks shown: {sum}");
    gates_add_up(&sum);
    sum
}

/// A process that exits as soon as its calls are made, a few milliseconds
/// after its first: its call sites are named, its calls counted under
/// them, and the captured reason's stacks shown with function names. The
/// program wakes topdown at each new site, and topdown reads the process's
/// maps then; at its next tick the process would be gone.
#[test]
fn a_process_that_exits_at_once_has_its_calls_named_and_its_stacks_shown() {
    need_uprobes!();
    let b = Built::new("exits");
    let folded = b.path("stacks.folded");
    let workload = b.start_holding([100, 200, 300], 0);
    let sum = capture_three(&b, workload, &["--folded", &folded]);
    assert_eq!(counts(&sum), (want([100, 200, 300]), 600));
    let text = std::fs::read_to_string(&folded).unwrap();
    assert!(
        text.lines()
            .all(|l| l.contains("main+") && l.contains(";caller_three+")),
        "{text}"
    );
}

/// Twenty processes in a row, each started once the last has exited,
/// making its calls of a library's FUNC from its program's functions and
/// exiting at once: topdown reads few of their maps in time (it named 15%
/// of such calls before), so the program records where each process had
/// its code, and the program's file is found by name (along PATH here)
/// and inode: every call named, none [unknown].
#[test]
fn short_lived_processes_calling_a_library_function_keep_their_callers() {
    need_uprobes!();
    let b = Built::new("back2back");
    let lib = b.path("libucallers.so");
    let path = format!("{}:/usr/bin:/bin", b.dir.display());
    let sum = run_then(&["-x", &lib, "td_lib_work"], Some(&path), || {
        for _ in 0..20 {
            let (mut w, _) = b.start_holding([5, 10, 15], 0);
            w.stdin.take().unwrap().write_all(b"go\n").unwrap();
            assert!(w.wait().unwrap().success());
        }
    });
    assert_eq!(counts(&sum), (want([100, 200, 300]), 600));
}

/// Runs `tool ARGS` in `dir`, which must succeed; its standard output.
fn tool(dir: &Path, tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{tool} {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// A program as distributions ship it: stripped to its dynamic symbols
/// (its callers, not exported, have no name in it), its debug information
/// split off into a file it names (.gnu_debuglink). Without that file each
/// call site is a reason of its own, FILE+0xVADDR (the address addr2line
/// takes: the unstripped program's addr2line names the right caller at
/// each, with its exact count); with it beside the program, or under the
/// build-ID path /usr/lib/debug/.build-id/xx/rest.debug, every caller is
/// named.
#[test]
fn a_stripped_programs_callers_are_located_then_named_from_its_debug_file() {
    need_uprobes!();
    let b = Built::new("split");
    let dir = b.dir.clone();
    std::fs::copy(dir.join("ucallers"), dir.join("ucallers.full")).unwrap();
    tool(
        &dir,
        "objcopy",
        &["--only-keep-debug", "ucallers", "ucallers.debug"],
    );
    tool(&dir, "strip", &["--strip-all", "ucallers"]);
    tool(
        &dir,
        "objcopy",
        &["--add-gnu-debuglink=ucallers.debug", "ucallers"],
    );
    let debug = dir.join("ucallers.debug");
    let aside = dir.join("aside.debug");
    std::fs::rename(&debug, &aside).unwrap();
    let lib = b.path("libucallers.so");
    let args = ["-x", lib.as_str(), "td_lib_work"];

    // Located: each site by its place, named by the full program's addr2line.
    let sum = run(&args, vec![b.start([100, 200, 300]).0]);
    let (rows, total) = counts(&sum);
    assert_eq!(total, 600, "{sum}");
    let mut named: Vec<(String, u64)> = rows
        .iter()
        .map(|(reason, n)| {
            let off = reason
                .strip_prefix("ucallers+0x")
                .unwrap_or_else(|| panic!("{reason}: {sum}"));
            let ret = u64::from_str_radix(off, 16).unwrap();
            let at = format!("{:#x}", ret - 1);
            let f = tool(&dir, "addr2line", &["-f", "-e", "ucallers.full", &at]);
            (f.lines().next().unwrap().to_string(), *n)
        })
        .collect();
    named.sort();
    assert_eq!(named, want([100, 200, 300]), "{sum}");

    // Named: its debug file beside it, as its debug link says.
    std::fs::rename(&aside, &debug).unwrap();
    let sum = run(&args, vec![b.start([100, 200, 300]).0]);
    assert_eq!(counts(&sum), (want([100, 200, 300]), 600));

    // Named: under the build-ID path instead.
    let notes = tool(&dir, "readelf", &["-n", "ucallers"]);
    let id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("a build ID")
        .to_string();
    let by_id = Path::new("/usr/lib/debug/.build-id").join(&id[..2]);
    std::fs::create_dir_all(&by_id).unwrap();
    let file = by_id.join(format!("{}.debug", &id[2..]));
    std::fs::rename(&debug, &file).unwrap();
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
            let _ = std::fs::remove_dir(self.0.parent().unwrap());
        }
    }
    let _gone = Remove(file);
    let sum = run(&args, vec![b.start([100, 200, 300]).0]);
    assert_eq!(counts(&sum), (want([100, 200, 300]), 600));
}

#[test]
fn a_stripped_library_is_searched_through_its_dynamic_symbols() {
    need_uprobes!();
    let b = Built::new("strip");
    let st = Command::new("strip")
        .args(["--strip-all", &b.path("libucallers.so")])
        .status();
    if !st.is_ok_and(|s| s.success()) {
        eprintln!("SKIP: no strip");
        return;
    }
    let (a, pid) = b.start([5, 6, 7]);
    let pid = pid.to_string();
    let sum = run(
        &["-x", &b.path("libucallers.so"), "td_lib_work", "-p", &pid],
        vec![a],
    );
    assert_eq!(counts(&sum), (want([5, 6, 7]), 18));
}

/// topdown ARGS: exit status 2 and one line on stderr containing `text`.
fn refused(args: &[&str], text: &str) {
    let out = Command::new(TOPDOWN).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "topdown {args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(text), "topdown {args:?}: {err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_user_targets_are_one_line_and_exit_status_2() {
    if Command::new("cc").arg("--version").output().is_err()
        || Command::new("strip").arg("--version").output().is_err()
    {
        eprintln!("SKIP: no C compiler (cc) or strip");
        return;
    }
    let b = Built::new("bad");
    refused(&["-x", "/nonexistent/libx.so", "f"], "cannot read it");
    let text = b.path("not-elf");
    std::fs::write(&text, "#!/bin/sh\n").unwrap();
    refused(&["-x", &text, "f"], "not an ELF file");
    refused(
        &["-x", &b.path("libucallers.so"), "no_such_fn"],
        "no_such_fn is not a function defined in",
    );
    // td_work is the program's own, not exported: gone with .symtab.
    let st = Command::new("strip")
        .args(["--strip-all", &b.path("ucallers")])
        .status()
        .unwrap();
    assert!(st.success());
    refused(
        &["-x", &b.path("ucallers"), "td_work"],
        "searched .symtab (absent), .dynsym, .gnu_debugdata (absent)",
    );
    refused(&["c:malloc"], "-x c malloc");
    refused(&["pin", "-x", "c", "malloc"], "cannot be pinned");
    refused(
        &["-x", "c", "malloc", "--kprobe"],
        "-x takes no --fentry and --kprobe",
    );
}

#[test]
fn a_stripped_programs_minidebuginfo_names_its_functions() {
    need_uprobes!();
    let b = Built::new("mdi");
    // As distributions make MiniDebugInfo: the symbol table, xz-compressed,
    // in .gnu_debugdata of the stripped program.
    let steps: [&[&str]; 4] = [
        &["objcopy", "--only-keep-debug", "ucallers", "mini"],
        &["xz", "mini"],
        &["strip", "--strip-all", "ucallers"],
        &[
            "objcopy",
            "--add-section",
            ".gnu_debugdata=mini.xz",
            "ucallers",
        ],
    ];
    for step in steps {
        let st = Command::new(step[0])
            .args(&step[1..])
            .current_dir(&b.dir)
            .status();
        if !st.is_ok_and(|s| s.success()) {
            eprintln!("SKIP: {step:?} failed (binutils and xz-utils needed)");
            return;
        }
    }
    let (a, pid) = b.start([3, 4, 5]);
    let pid = pid.to_string();
    let sum = run(&["-x", &b.path("ucallers"), "td_work", "-p", &pid], vec![a]);
    assert_eq!(counts(&sum), (want([3, 4, 5]), 12));
}

#[test]
fn a_reader_that_goes_away_ends_the_run_as_ctrl_c_does() {
    need_uprobes!();
    let b = Built::new("epipe");
    let saved = b.path("run.json");
    let args = [
        "-x",
        &b.path("libucallers.so"),
        "td_lib_work",
        "-i",
        "0.1",
        "--save",
        &saved,
    ];
    let mut td = Command::new(TOPDOWN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // `topdown ... | head -1`: one line read, then the reader is gone.
    let mut reader = BufReader::new(td.stdout.take().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    drop(reader);
    let mut waited = Duration::ZERO;
    let status = loop {
        if let Some(st) = td.try_wait().unwrap() {
            break st;
        }
        if waited > Duration::from_secs(20) {
            let _ = td.kill();
            panic!("topdown ran on after its reader went away");
        }
        std::thread::sleep(Duration::from_millis(100));
        waited += Duration::from_millis(100);
    };
    assert!(status.success(), "{status:?}");
    // The summary went to the file asked for.
    let text = std::fs::read_to_string(&saved).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["func"], "td_lib_work", "{text}");
}
