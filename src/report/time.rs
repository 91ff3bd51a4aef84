//! Wall-clock time in the local time zone, as the reports print it.

/// Local wall-clock time as HH:MM:SS.
pub(crate) fn clock() -> String {
    // SAFETY: time(NULL) has no preconditions.
    let t = unsafe { libc::time(std::ptr::null_mut()) };
    local(t).1
}

/// A Unix time as local YYYY-MM-DD HH:MM:SS.
pub(crate) fn clock_at(unix: f64) -> String {
    let (date, time) = local(unix as libc::time_t);
    format!("{date} {time}")
}

fn local(t: libc::time_t) -> (String, String) {
    // SAFETY: localtime_r with valid pointers.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        tm
    };
    (
        format!(
            "{}-{:02}-{:02}",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday
        ),
        format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec),
    )
}
