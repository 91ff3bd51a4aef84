//! `topdown -l [PATTERN]`, run through the built binary on this host: what
//! it lists is spelt as FUNC takes it, and a listed tracepoint traces.

use std::process::Command;

fn topdown(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_topdown"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn mounts() -> String {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default()
}

#[test]
fn kernel_functions_and_tracepoints_are_listed_as_topdown_takes_them() {
    if !std::path::Path::new("/proc/kallsyms").exists() {
        eprintln!("skipped: kernel_functions_and_tracepoints_are_listed: no /proc/kallsyms");
        return;
    }
    let before = mounts();
    let (rc, out, err) = topdown(&["-l", "vfs_rea*"]);
    assert_eq!(rc, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.contains(&"vfs_read"), "{out}");
    assert!(lines.iter().all(|l| l.starts_with("vfs_rea")), "{out}");
    // Sorted, each once.
    let mut sorted = lines.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted, lines);

    // SAFETY: a plain syscall.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: tracepoints in -l: tracefs needs root");
        return;
    }
    let (rc, out, err) = topdown(&["-l", "t:sched:sched_swi*"]);
    assert_eq!((rc, out.as_str()), (0, "t:sched:sched_switch\n"), "{err}");
    // System calls' events too (raw_syscalls's, filtered by number); not
    // their category's enable and filter files.
    let (_, out, _) = topdown(&["-l", "t:syscalls:*read"]);
    assert!(
        out.lines().any(|l| l == "t:syscalls:sys_enter_read"),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l == "t:syscalls:sys_exit_read"),
        "{out}"
    );
    assert!(
        out.lines().all(|l| l.starts_with("t:syscalls:sys_")),
        "{out}"
    );
    let (_, out, _) = topdown(&["-l", "mm_page_alloc"]);
    assert!(out.lines().any(|l| l == "t:kmem:mm_page_alloc"), "{out}");
    // Whatever tracefs's state, none is left mounted.
    assert_eq!(mounts(), before);
    // What it lists traces: the first kmem tracepoint, for a moment.
    let (_, out, _) = topdown(&["-l", "t:kmem:mm_page_alloc"]);
    let (rc, _, err) = topdown(&[out.trim(), "-d", "0.5", "-q"]);
    assert_eq!(rc, 0, "{err}");
}

#[test]
fn a_files_functions_are_listed_as_u_path_func() {
    let (rc, out, err) = topdown(&["-x", "c", "-l", "mallo?"]);
    assert_eq!(rc, 0, "{err}");
    let line = out.lines().next().unwrap_or_default();
    assert!(
        line.starts_with("u:/") && line.ends_with("/libc.so.6:malloc"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 1, "{out}");
    let (rc, _, err) = topdown(&["-x", "/nonexistent/x", "-l"]);
    assert_eq!(rc, 2);
    assert!(
        err.starts_with("topdown: -x /nonexistent/x: cannot read it"),
        "{err}"
    );
}
