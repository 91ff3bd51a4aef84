//! Test helpers: a test that cannot run here says so, visibly, instead of
//! passing in silence.

use std::io::Write;

/// Reports the running test as skipped, and why. Written to the process's
/// standard error itself, which the test harness does not capture, so the
/// line shows in `cargo test`'s output (tests/run counts these lines).
pub(crate) fn skip(why: &str) {
    let current = std::thread::current();
    let name = current.name().unwrap_or("a test");
    let _ = writeln!(std::io::stderr(), "skipped: {name}: {why}");
}

/// Whether BPF programs can be loaded here (root, or CAP_BPF and
/// CAP_PERFMON); if not, the test is reported skipped.
pub(crate) fn bpf_or_skip() -> bool {
    match crate::host::check_privileges() {
        Ok(()) => true,
        Err(_) => {
            skip("loading BPF programs needs root, or CAP_BPF and CAP_PERFMON");
            false
        }
    }
}

/// Makes a FIFO at `path` (mkfifo(3)), mode 0600.
pub(crate) fn mkfifo(path: &std::path::Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a plain syscall on a NUL-terminated path.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "mkfifo {path:?}"
    );
}
