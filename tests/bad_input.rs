//! Bad input, run through the built binary: each case is refused before
//! anything is loaded, with one line on standard error naming the problem,
//! nothing on standard output, exit status 2 (the command line, or a file
//! or value it names, is wrong: see EXIT STATUS), and nothing left behind: no file in the
//! working or temporary directory, no lock, no pin. Each message is listed
//! in topdown(8)'s DIAGNOSTICS section.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const PAGE: &str = include_str!("../man/topdown.8");

/// A case: the arguments (`{d}` is the case's own directory), the exit
/// status, and a fragment of the error line, as DIAGNOSTICS lists it.
struct Case {
    args: &'static [&'static str],
    status: i32,
    says: &'static str,
}

const fn case(args: &'static [&'static str], status: i32, says: &'static str) -> Case {
    Case { args, status, says }
}

const LONG_NAME: &str = "a_function_name_longer_than_any_kernel_symbol_";

#[rustfmt::skip]
const CASES: &[Case] = &[
    // The command line (clap): exit status 2.
    case(&[], 2, "the following required arguments were not provided"),
    case(&["--bogus"], 2, "unexpected argument '--bogus' found"),
    case(&["vfs_read", "--bogus"], 2, "unexpected argument '--bogus' found"),
    case(&["vfs_read", "-i", "0"], 2, "is not a positive number of seconds"),
    case(&["vfs_read", "-i", "x"], 2, "is not a positive number of seconds"),
    case(&["vfs_read", "-i", "1e30"], 2, "seconds is out of range"),
    case(&["vfs_read", "-i", "0.001"], 2, "seconds is out of range"),
    case(&["vfs_read", "-i", "nan"], 2, "is not a positive number of seconds"),
    case(&["vfs_read", "-d", "0"], 2, "is not a positive number of seconds"),
    case(&["vfs_read", "-d", "1e300"], 2, "seconds is out of range"),
    case(&["vfs_read", "--fentry", "--kprobe"], 2, "cannot be used with"),
    case(&["vfs_read", "--threshold", "0"], 2, "is not a percentage in (0, 100]"),
    case(&["vfs_read", "--threshold", "101"], 2, "is not a percentage in (0, 100]"),
    case(&["vfs_read", "--threshold", "nan"], 2, "is not a percentage in (0, 100]"),
    case(&["vfs_read", "--min-rate", "-1"], 2, "unexpected argument"),
    case(&["vfs_read", "--min-rate", "x"], 2, "is not a rate"),
    case(&["vfs_read", "--min-rate", "inf"], 2, "is not a rate"),
    case(&["vfs_read", "--min-events", "x"], 2, "invalid digit found in string"),
    case(&["vfs_read", "--max-rate", "0"], 2, "is not in 1.."),
    case(&["vfs_read", "--sample", "0"], 2, "is not in 1.."),
    case(&["vfs_read", "--depth", "0"], 2, "is not in 1..=127"),
    case(&["vfs_read", "--depth", "128"], 2, "is not in 1..=127"),
    case(&["vfs_read", "--max-reasons", "0"], 2, "is not in 1..="),
    case(&["vfs_read", "--max-reasons", "254"], 2, "is not in 1..="),
    case(&["vfs_read", "--top", "-1"], 2, "unexpected argument"),
    case(&["vfs_read", "--top", "0"], 2, "is not a number of 1 or more"),
    case(&["vfs_read", "--rows", "0"], 2, "is not a number of 1 or more"),
    case(&["vfs_read", "--verify-drop", "101"], 2, "is not a percentage in [0, 100]"),
    case(&["vfs_read", "--verify-drop", "-1"], 2, "unexpected argument"),
    case(&["vfs_read", "--rules", "A=b", "--no-profile"], 2, "cannot be used with"),
    case(&["vfs_read", "--rules", "A=b", "--profile", "x"], 2, "cannot be used with"),
    case(&["vfs_read", "--reasons", "{d}/r.toml", "--rules", "A=b"], 2, "cannot be used with"),
    case(&["vfs_read", "-p", "x"], 2, "invalid digit found in string"),
    case(&["vfs_read", "-p", "-1"], 2, "unexpected argument"),
    case(&["vfs_read", "-p", "99999999999"], 2, "is not in 0..=4294967295"),
    case(&["vfs_read", "-C", "3-1"], 2, "is not a CPU list"),
    case(&["vfs_read", "-C", "x"], 2, "is not a CPU list"),
    case(&["vfs_read", "-C", ""], 2, "is not a CPU list"),
    case(&["vfs_read", "--list-profiles", "--bogus"], 2, "unexpected argument '--bogus' found"),
    // FUNC: a kernel symbol, never a path.
    case(&["/tmp/rv/victim"], 2, "it has a '/' (a function's name, not a path)"),
    case(&[".."], 2, "it starts with '.'"),
    case(&["."], 2, "it starts with '.'"),
    case(&[""], 2, "it is empty"),
    case(&["vfs read"], 2, "it has the character"),
    case(&["vfs_read\n"], 2, "it has the character"),
    case(&["a:b:c"], 2, "it has a ':' (name the function alone, without its module)"),
    case(&["vfs_read*"], 2, "it has the character '*'"),
    case(&[LONG_NAME], 2, "it is 513 bytes long (at most 512)"),
    case(&["trace", ".."], 2, "it starts with '.'"),
    case(&["trace", "../../etc/passwd"], 2, "it starts with '.'"),
    case(&["pin"], 2, "the following required arguments were not provided"),
    case(&["pin", "/etc"], 2, "it has a '/' (a function's name, not a path)"),
    case(&["pin", ".."], 2, "it starts with '.'"),
    case(&["pin", "vfs_read", "-p", "1"], 2, "unexpected argument"),
    case(&["pin", "show_map_vma.isra.0"], 2, "cannot be pinned: bpffs allows no '.' in names"),
    case(&["show", "/etc"], 2, "it has a '/' (a function's name, not a path)"),
    case(&["show", ".."], 2, "it starts with '.'"),
    case(&["show", "a", "b", "--save", "{d}/s.json"], 2, "--save and --baseline take one pinned function"),
    case(&["show", "--verify-drop", "101"], 2, "is not a percentage in [0, 100]"),
    case(&["unpin"], 2, "the following required arguments were not provided"),
    case(&["unpin", "vfs_read", "--all"], 2, "cannot be used with"),
    case(&["unpin", "/tmp/rv/victim"], 2, "it has a '/' (a function's name, not a path)"),
    case(&["unpin", ".."], 2, "it starts with '.'"),
    case(&["unpin", "../topdown"], 2, "it starts with '.'"),
    case(&["unpin", "vfs_read/.."], 2, "it has a '/' (a function's name, not a path)"),
    case(&["serve", "--listen", "nowhere"], 2, "is not ADDR:PORT"),
    case(&["serve", "--listen", "127.0.0.1"], 2, "is not ADDR:PORT"),
    case(&["serve", "--listen", "example.org:80"], 2, "is not ADDR:PORT"),
    case(&["serve", "vfs_read"], 2, "unexpected argument"),
    case(&["pin", "vfs_read", "--bogus"], 2, "(see topdown pin --help)"),
    // Other tools' habits: what to type instead.
    case(&["vfs_read", "5"], 2, "not bcc's INTERVAL [COUNT]"),
    case(&["vfs_read", "1", "5"], 2, "not bcc's INTERVAL [COUNT]"),
    case(&["-p", "1", "pin", "vfs_read"], 2, "the command comes first"),
    case(&["p:vfs_read", "--fentry"], 2, "asks for a kprobe: leave out --fentry"),
    case(&["-x", "c", "std::terminate"], 2, "is a demangled name"),
    // Tracepoints (bcc's t:, bpftrace's tracepoint:) and uprobes (u:, uprobe:).
    case(&["t:kmem"], 2, "name it as t:CATEGORY:EVENT"),
    case(&["tracepoint:sched_switch"], 2, "name it as t:CATEGORY:EVENT"),
    case(&["t:sched:sched_switch:x"], 2, "one category and one event"),
    case(&["t:kmem:mm_*"], 2, "it has a wildcard (topdown traces one tracepoint)"),
    case(&["t:*:sched_switch"], 2, "it has a wildcard (topdown traces one tracepoint)"),
    case(&["t:../x:y"], 2, "its category: it has the character '.'"),
    case(&["t:a/b:c"], 2, "its category: it has a '/' (a name, not a path)"),
    case(&["t:kmem:a/b"], 2, "its event: it has a '/' (a name, not a path)"),
    case(&["t::x"], 2, "its category: it is empty"),
    case(&["t:kmem:"], 2, "its event: it is empty"),
    case(&["t:kmem:mm_page_alloc", "--fentry"], 2, "is a tracepoint: it takes no --fentry"),
    case(&["t:kmem:mm_page_alloc", "--kprobe"], 2, "is a tracepoint: it takes no --kprobe"),
    case(&["-x", "c", "t:kmem:mm_page_alloc"], 2, "names its own target: give it without -x"),
    case(&["rawtracepoint:sched_switch"], 2, "name it as rawtracepoint:CATEGORY:EVENT"),
    // --drill: its levels, and kernel paths only.
    case(&["vfs_read", "--drill", "--drill-levels", "9"], 2, "is not in 2..=8"),
    case(&["vfs_read", "--drill-levels", "3"], 2, "the following required arguments were not provided"),
    case(&["-x", "c", "malloc", "--drill"], 2, "--drill splits a kernel function's or a tracepoint's calls by kernel path"),
    case(&["pin", "vfs_read", "--drill"], 2, "unexpected argument"),
    case(&["rawtracepoint:sched:sched_switch", "--kprobe"], 2, "is a tracepoint: it takes no --kprobe"),
    case(&["pin", "rawtracepoint:sched:sched_switch"], 2, "a pin takes its tracepoint as t:CATEGORY:EVENT"),
    // Return probes: refused, not read as entries; a prefix that is no probe type.
    case(&["kretprobe:vfs_read"], 2, "is a return probe: topdown counts calls at a function's entry"),
    case(&["kretfunc:vfs_read"], 2, "is a return probe: topdown counts calls at a function's entry"),
    case(&["fexit:vfs_read"], 2, "is a return probe: topdown counts calls at a function's entry"),
    case(&["r::vfs_read"], 2, "is a return probe: topdown counts calls at a function's entry"),
    case(&["uretprobe:/bin/bash:readline"], 2, "is a return probe: topdown counts calls at a function's entry"),
    case(&["pin", "kretprobe:vfs_read"], 2, "is a return probe: topdown counts calls at a function's entry"),
    case(&["foo:vfs_read"], 2, "is no probe type topdown knows"),
    case(&["u:malloc"], 2, "names no file: u:LIB:FUNC"),
    case(&["u:c:a/b"], 2, "it has a '/' (a function's name, not a path)"),
    // Files, names and values the command line gives that are wrong: exit
    // status 2 too, before anything is loaded.
    case(&["-x", "c", "no_such_sym"], 2, "is not a function defined in"),
    case(&["vfs_read", "--rules", "a=ksys_read"], 2, "--rules"),
    case(&["vfs_read", "--reasons", "{d}/no-such.toml"], 2, ": No such file or directory (os error 2)"),
    case(&["vfs_read", "--reasons", "{d}/bad.toml"], 2, ":1: key with no value, expected `=`"),
    case(&["vfs_read", "--reasons", "{d}/empty.toml"], 2, ":1: missing field `version`"),
    case(&["vfs_read", "--reasons", "/dev/zero"], 2, ": it is larger than 1 MiB"),
    case(&["vfs_read", "--baseline", "/dev/zero"], 2, "it is larger than 64 MiB"),
    // A named pipe nothing writes to: refused after a wait, never a hang.
    case(&["vfs_read", "--reasons", "{d}/fifo"], 2, "it is a FIFO that nothing wrote to in 5 s"),
    case(&["vfs_read", "--rules", "A"], 2, "--rules"),
    case(&["vfs_read", "--rules", "=b"], 2, "--rules"),
    case(&["vfs_read", "--rules", "A="], 2, "--rules"),
    case(&["vfs_read", "--profile", "nope"], 2, "no built-in profile named 'nope'"),
    case(&["vfs_read", "--baseline", "{d}/no-such.json"], 2, "cannot read it: No such file or directory"),
    case(&["vfs_read", "--baseline", "{d}/bad.toml"], 2, "not JSON"),
    case(&["vfs_read", "--baseline", "{d}/r.toml"], 2, "not JSON"),
    case(&["vfs_read", "--baseline", "{d}/array.json"], 2, "not a topdown result"),
    case(&["vfs_read", "--baseline", "{d}/other.json"], 2, "it is a result for function deferred_split_folio, not vfs_read"),
    case(&["show", "--baseline", "{d}/bad.toml"], 2, "not JSON"),
    case(&["vfs_read", "--save", "{d}/no/such/dir/s.json"], 2, "cannot write it: no directory"),
    case(&["vfs_read", "--folded", "{d}/no/such/dir/f"], 2, "cannot write it: no directory"),
    case(&["vfs_read", "--save", "/proc/version"], 2, "cannot write it: cannot create a file in /proc"),
    case(&["vfs_read", "--flamegraph", "{d}"], 2, "cannot write it: it is a directory"),
    case(&["show", "--save", "{d}"], 2, "cannot write it: it is a directory"),
    case(&["vfs_read", "--vmlinux", "{d}/no-such"], 2, "--vmlinux"),
    case(&["vfs_read", "--vmlinux", "{d}/bad.toml"], 2, "not an ELF file (a debug vmlinux is)"),
    case(&["vfs_read", "-p", "99999999"], 2, "--pid 99999999: no such process"),
    case(&["vfs_read", "--cgroup", "{d}/no-such"], 2, "no such cgroup directory"),
    case(&["vfs_read", "--cgroup", "/proc"], 2, "not a cgroup v2 directory"),
    case(&["vfs_read", "-C", "100000"], 2, "no such CPU"),
    case(&["pin", "vfs_read", "-C", "100000"], 2, "no such CPU"),
];

/// Cases that read /proc/kallsyms or bpffs, which needs root: run as root
/// only.
#[rustfmt::skip]
const AS_ROOT: &[Case] = &[
    case(&["no_such_function"], 2, "no kernel function named 'no_such_function'"),
    case(&["shwo"], 2, "did you mean the command topdown show?"),
    case(&["vfs_read", "--stack-on", "zap"], 2, "unknown reason 'zap' for --stack-on"),
    case(&["unpin", "no_such_function"], 2, "is not pinned (see topdown show"),
    case(&["show", "no_such_function"], 2, "is not pinned (see topdown show"),
    case(&["show", "t:sched:no_such_event"], 2, "is not pinned (see topdown show"),
    // Checked against tracefs whether it is mounted or not (no mount is left).
    case(&["t:bogus:mm_page_alloc"], 2, "no tracepoint category '"),
    case(&["t:kmem:sched_switch"], 2, "no tracepoint kmem:sched_switch on this kernel; it is sched:sched_switch"),
];

/// The case's directory with its input files: a profile that is not TOML,
/// an empty one, and a result file of another function.
fn fixture(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join("bad.toml"), "this is [not toml\n").unwrap();
    fs::write(dir.join("empty.toml"), "").unwrap();
    fs::write(dir.join("r.toml"), "").unwrap();
    let other = r#"{"format":"topdown-result","version":1,"topdown":"0.1.0","source":"run","func":"deferred_split_folio","kernel":"6.12.0","profile":null,"reason_names":[],"mode":"fentry","phase":"counting","start":1.0,"secs":1.0,"total":0,"rate":0,"reasons":[],"hot_reason":null,"stacks":[]}"#;
    fs::write(dir.join("other.json"), other).unwrap();
    fs::write(dir.join("array.json"), "[]").unwrap();
    let fifo = std::ffi::CString::new(dir.join("fifo").to_str().unwrap()).unwrap();
    // SAFETY: a plain syscall on a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
}

/// Every file under `dir`.
fn files(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                out.extend(files(&p));
            }
            out.insert(p);
        }
    }
    out
}

/// What topdown could leave behind outside the case's directory: locks,
/// pins, and mounts (tracefs, mounted for a check).
fn system_state() -> BTreeSet<PathBuf> {
    let mut s = files(Path::new("/run/topdown"));
    s.extend(files(Path::new("/sys/fs/bpf/topdown")));
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    s.extend(mounts.lines().map(|l| PathBuf::from(format!("mount: {l}"))));
    s
}

/// DIAGNOSTICS, as plain text (font escapes dropped, `\-` as `-`).
fn diagnostics() -> String {
    let start = PAGE
        .find("\n.SH DIAGNOSTICS")
        .expect("a DIAGNOSTICS section");
    let rest = &PAGE[start + 1..];
    let end = rest[4..].find("\n.SH ").map_or(rest.len(), |i| i + 4);
    rest[..end]
        .replace("\\fB", "")
        .replace("\\fI", "")
        .replace("\\fR", "")
        .replace("\\fP", "")
        .replace("\\-", "-")
        .replace("\\(aq", "'")
        .replace("\\e", "\\")
        .replace("\\&", "")
}

#[test]
fn bad_input_is_refused_in_one_line_leaving_nothing_behind() {
    let bin = env!("CARGO_BIN_EXE_topdown");
    let base = std::env::temp_dir().join(format!("topdown-bad-input-{}", std::process::id()));
    let docs = diagnostics();
    let before = system_state();
    let mut failures = Vec::new();
    // SAFETY: a plain syscall.
    let root = unsafe { libc::geteuid() } == 0;
    let cases = CASES.iter().chain(AS_ROOT.iter().filter(|_| root));
    for (i, c) in cases.enumerate() {
        let dir = base.join(i.to_string());
        fixture(&dir);
        let given = files(&dir);
        let d = dir.to_str().unwrap();
        let args: Vec<String> = c.args.iter().map(|a| a.replace("{d}", d)).collect();
        let args: Vec<String> = args
            .into_iter()
            .map(|a| if a == LONG_NAME { "f".repeat(513) } else { a })
            .collect();
        let out = Command::new(bin)
            .args(&args)
            .current_dir(&dir)
            .env("TMPDIR", &dir)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let mut wrong = Vec::new();
        if out.status.code() != Some(c.status) {
            wrong.push(format!(
                "exit status {:?}, want {}",
                out.status.code(),
                c.status
            ));
        }
        if stderr.lines().count() != 1 || !stderr.starts_with("topdown: ") {
            wrong.push("not one line starting 'topdown: '".to_string());
        }
        if !stderr.contains(c.says) {
            wrong.push(format!("does not say '{}'", c.says));
        }
        if !out.stdout.is_empty() {
            wrong.push("printed to standard output".into());
        }
        if stderr.contains("panicked") {
            wrong.push("panicked".into());
        }
        let left: Vec<_> = files(&dir).difference(&given).cloned().collect();
        if !left.is_empty() {
            wrong.push(format!("left {left:?}"));
        }
        if !docs.contains(c.says) {
            wrong.push(format!("'{}' is not in topdown(8)'s DIAGNOSTICS", c.says));
        }
        if !wrong.is_empty() {
            failures.push(format!("topdown {args:?}: {}: {stderr}", wrong.join("; ")));
        }
    }
    let _ = fs::remove_dir_all(&base);
    assert_eq!(system_state(), before, "locks or pins were left behind");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(CASES.len() >= 50, "{} cases", CASES.len());
}
