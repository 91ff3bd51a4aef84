//! The listing jobs: built-in profiles, and a profile's reasons as
//! resolved on the running kernel.

use std::collections::BTreeSet;
use std::io::{self, Write};

use crate::error::{Error, Result};
use crate::host;
use crate::kallsyms::Kallsyms;
use crate::plan::Target;
use crate::profile;
use crate::tracepoint::{self, Tracefs};
use crate::user;

/// `--list-profiles`: name, traced function and description of each; with
/// `json`, one object per line.
pub fn list_profiles(json: bool) -> Result<()> {
    let mut out = io::stdout().lock();
    for (name, func, description) in profile::builtins() {
        if json {
            let o =
                serde_json::json!({"profile": name, "function": func, "description": description});
            writeln!(out, "{o}")?;
        } else {
            writeln!(out, "{name}\t{func}\t{description}")?;
        }
    }
    Ok(())
}

/// `--list-reasons`: the profile as resolved on the running kernel; with
/// `json`, as one object.
pub fn list_reasons(t: &Target, json: bool) -> Result<()> {
    let ksyms = host::load_kallsyms()?;
    let text = match (&t.profile, json) {
        (Some(p), false) => {
            profile::describe(p, &profile::resolve(p, &ksyms)?, &ksyms, t.users_own)
        }
        (Some(p), true) => profile::describe_json(p, &profile::resolve(p, &ksyms)?, &ksyms) + "\n",
        (None, false) => {
            host::resolve_function(&ksyms, &t.func)?;
            format!(
                "no reason profile: one reason per caller function of {}\n",
                t.func
            )
        }
        (None, true) => {
            host::resolve_function(&ksyms, &t.func)?;
            let o =
                serde_json::json!({"profile": null, "function": t.func.as_str(), "reasons": []});
            format!("{o}\n")
        }
    };
    io::stdout().lock().write_all(text.as_bytes())?;
    Ok(())
}

/// `-l [PATTERN]`: what can be traced, one a line, spelt as topdown takes
/// it, as bpftrace -l and perf list do: kernel functions (`vfs_read`) and
/// tracepoints (`t:sched:sched_switch`); with -x FILE, its functions
/// (`u:/usr/bin/bash:readline`). PATTERN is a shell pattern (`*`, `?`):
/// one with a ':' is matched against the spelling, one without against the
/// name alone.
pub fn list_targets(pattern: &str, binary: Option<&str>) -> Result<()> {
    let mut lines = BTreeSet::new();
    let keep = |lines: &mut BTreeSet<String>, name: &str, spelt: String| {
        let subject = if pattern.contains(':') {
            spelt.as_str()
        } else {
            name
        };
        if glob(pattern, subject) {
            lines.insert(spelt);
        }
    };
    if let Some(b) = binary {
        let path = user::locate(b)?;
        for name in user::functions(&path)? {
            keep(&mut lines, &name, format!("u:{}:{name}", path.display()));
        }
    } else {
        // Names only: no addresses needed (kptr_restrict may hide them).
        let ksyms =
            Kallsyms::load().map_err(|e| Error::msg(format!("cannot read /proc/kallsyms: {e}")))?;
        // One tracefs for both lists (where topdown mounts it, one mount).
        let tracefs = Tracefs::open();
        match tracefs.as_ref().and_then(Tracefs::traceable_functions) {
            Some(funcs) => funcs.iter().for_each(|f| keep(&mut lines, f, f.clone())),
            None => {
                // Every text symbol: some cannot be traced (notrace, inlined
                // away, blacklisted), which topdown says when given one.
                let before = lines.len();
                ksyms
                    .functions()
                    .for_each(|f| keep(&mut lines, f, f.to_string()));
                if lines.len() > before {
                    eprintln!(
                        "topdown: kernel functions from /proc/kallsyms: tracefs's \
                         available_filter_functions cannot be read here, so some listed \
                         may not be traceable"
                    );
                }
            }
        }
        // What topdown can attach to: a tracepoint of the kernel's, or a
        // system call's event (raw_syscalls's, filtered by its number), not
        // the other events of tracefs (ftrace's own, kprobes made there).
        for (category, event) in tracefs.as_ref().map(Tracefs::all).unwrap_or_default() {
            let fired = match tracepoint::syscall(&category, &event) {
                Ok(Some(s)) => s.event(),
                Ok(None) => event.as_str(),
                Err(_) => continue,
            };
            if ksyms
                .named(&format!("__traceiter_{fired}"))
                .next()
                .is_some()
            {
                keep(&mut lines, &event, format!("t:{category}:{event}"));
            }
        }
    }
    let mut out = io::BufWriter::new(io::stdout().lock());
    for l in &lines {
        writeln!(out, "{l}")?;
    }
    out.flush()?;
    Ok(())
}

/// Whether `text` matches the shell pattern `pattern` (`*` any run, `?` any
/// one character; no classes).
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // The classic two-pointer match, backtracking to the last '*'.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < t.len() {
        if i < p.len() && (p[i] == '?' || p[i] == t[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn patterns_match_as_a_shell_does() {
        assert!(glob("*", "vfs_read"));
        assert!(glob("vfs_*", "vfs_read"));
        assert!(glob("*_read", "vfs_read"));
        assert!(glob("v?s_read", "vfs_read"));
        assert!(glob("t:sched:*", "t:sched:sched_switch"));
        assert!(glob("*sched*switch", "t:sched:sched_switch"));
        assert!(glob("vfs_read", "vfs_read"));
        assert!(!glob("vfs_read", "vfs_readv"));
        assert!(!glob("vfs_*", "do_vfs_read"));
        assert!(!glob("?", ""));
        assert!(glob("", ""));
        assert!(!glob("", "x"));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(!glob("a*b*c", "axxbyy"));
    }
}
