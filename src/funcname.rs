//! A kernel function's name, checked once where it enters topdown (the
//! command line, a result file, a pin directory's listing). It names a
//! directory in bpffs and a lock file, so it must never be a path: only
//! the characters kernel symbols are made of.

use std::fmt;
use std::ops::Deref;

/// KSYM_NAME_LEN since Linux 6.1 (128 before): no kernel symbol is longer.
pub const MAX_LEN: usize = 512;

/// A function name as kallsyms spells it: letters, digits, `_` and `.`
/// (the compiler's clones: `.isra.0`, `.constprop.0`, `.cold`, and
/// `.llvm.N` suffixes), not starting with a dot, at most `MAX_LEN` bytes.
/// No module-qualified form (`module:func`): topdown looks functions up by
/// name alone.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FuncName(String);

impl FuncName {
    /// The name, or why it is not one (a phrase that completes "'NAME' is
    /// not a kernel function name: ...").
    pub fn parse(s: &str) -> Result<FuncName, String> {
        let why = if s.is_empty() {
            "it is empty".to_string()
        } else if s.len() > MAX_LEN {
            format!("it is {} bytes long (at most {MAX_LEN})", s.len())
        } else if s.starts_with('.') {
            "it starts with '.'".to_string()
        } else if let Some(c) = s
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '.'))
        {
            match c {
                '/' => "it has a '/' (a function's name, not a path)".to_string(),
                ':' => "it has a ':' (name the function alone, without its module)".to_string(),
                c if c.is_control() || c.is_whitespace() => {
                    format!("it has the character {:?}", c)
                }
                c => format!("it has the character '{c}'"),
            }
        } else {
            return Ok(FuncName(s.to_string()));
        };
        Err(why)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// clap's value parser for FUNC: a refused name is a usage error.
pub fn parse_arg(s: &str) -> Result<FuncName, String> {
    FuncName::parse(s).map_err(|why| format!("not a kernel function name: {why}"))
}

/// What `topdown pin` counts: a kernel function, or a tracepoint
/// (`t:CATEGORY:EVENT`), pinned under its event's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinTarget {
    pub func: FuncName,
    /// A tracepoint's category: `func` is its event.
    pub tracepoint: Option<String>,
}

/// clap's value parser for pin's FUNC: a kernel function's name, or a
/// tracepoint; a refused one is a usage error.
pub fn parse_pin_arg(s: &str) -> Result<PinTarget, String> {
    if let Some(why) = return_probe(s) {
        return Err(why);
    }
    if s.starts_with(RAW_TP_PREFIX) {
        return Err(format!(
            "'{}': a pin takes its tracepoint as t:CATEGORY:EVENT (tp_btf, else a raw \
             tracepoint where the kernel lacks it)",
            s.escape_debug()
        ));
    }
    if TP_PREFIXES.iter().any(|p| s.starts_with(p)) {
        return match parse_trace_func(s, false)? {
            (func, Some(Hook::Tracepoint(category))) => Ok(PinTarget {
                func,
                tracepoint: Some(category),
            }),
            (func, _) => Ok(PinTarget {
                func,
                tracepoint: None,
            }),
        };
    }
    parse_arg(s).map(|func| PinTarget {
        func,
        tracepoint: None,
    })
}

/// clap's value parser for show's and unpin's FUNC: a pin's name, spelt as
/// `pin` took it (a tracepoint's pin is named after its event).
pub fn parse_pinned_arg(s: &str) -> Result<FuncName, String> {
    parse_pin_arg(s).map(|t| t.func)
}

/// How a probe-type prefix on a traced FUNC asks for it to be hooked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hook {
    /// `p:`, `k:`, `kprobe:` (perf, bcc, bpftrace): a kprobe, as --kprobe.
    Kprobe,
    /// `f:`, `fentry:`, `kfunc:` (bpftrace): topdown's default, fentry.
    Fentry,
    /// `t:CATEGORY:EVENT`, `tracepoint:CATEGORY:EVENT` (bcc, bpftrace): a
    /// tracepoint; the name is EVENT's, this its category.
    Tracepoint(String),
    /// `rawtracepoint:CATEGORY:EVENT`: the same tracepoint, through a raw
    /// tracepoint (not tp_btf).
    RawTracepoint(String),
    /// `u:LIB:FUNC`, `uprobe:PATH:FUNC` (bcc, bpftrace): as `-x LIB FUNC`;
    /// this is LIB or PATH.
    Uprobe(String),
}

/// Tracepoint prefixes (bcc's and bpftrace's), longest first.
const TP_PREFIXES: [&str; 2] = ["tracepoint:", "t:"];
/// A tracepoint through a raw tracepoint (bpftrace's probe type's name).
const RAW_TP_PREFIX: &str = "rawtracepoint:";
/// User-function prefixes (bcc's and bpftrace's), longest first.
const UPROBE_PREFIXES: [&str; 2] = ["uprobe:", "u:"];

/// Whether `s` is a tracepoint category or event name as tracefs lists
/// them: letters, digits and `_`, at most MAX_LEN bytes.
fn tp_name(s: &str) -> std::result::Result<(), String> {
    if s.is_empty() {
        return Err("it is empty".to_string());
    }
    if s.len() > MAX_LEN {
        return Err(format!("it is {} bytes long (at most {MAX_LEN})", s.len()));
    }
    match s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_'))
    {
        None => Ok(()),
        Some('*') | Some('?') | Some('[') => {
            Err("it has a wildcard (topdown traces one tracepoint)".to_string())
        }
        Some('/') => Err("it has a '/' (a name, not a path)".to_string()),
        Some(c) if c.is_control() || c.is_whitespace() => {
            Err(format!("it has the character {:?}", c))
        }
        Some(c) => Err(format!("it has the character '{c}'")),
    }
}

/// `CATEGORY:EVENT` after a tracepoint prefix (`raw`: rawtracepoint:):
/// the event's name and its category, or why not (completing "topdown: ").
fn parse_tracepoint(
    given: &str,
    spec: &str,
    raw: bool,
) -> Result<(FuncName, Option<Hook>), String> {
    let bad = |why: String| format!("'{}' is not a tracepoint: {why}", given.escape_debug());
    let prefix = if raw { RAW_TP_PREFIX } else { "t:" };
    let Some((category, event)) = spec.split_once(':') else {
        return Err(bad(format!(
            "name it as {prefix}CATEGORY:EVENT, e.g. {prefix}sched:sched_switch"
        )));
    };
    if event.contains(':') {
        return Err(bad(format!(
            "one category and one event, as in {prefix}kmem:mm_page_alloc"
        )));
    }
    tp_name(category).map_err(|why| bad(format!("its category: {why}")))?;
    tp_name(event).map_err(|why| bad(format!("its event: {why}")))?;
    let name = FuncName::parse(event).map_err(|why| bad(format!("its event: {why}")))?;
    let category = category.to_string();
    let hook = match raw {
        true => Hook::RawTracepoint(category),
        false => Hook::Tracepoint(category),
    };
    Ok((name, Some(hook)))
}

/// `LIB:FUNC` after a uprobe prefix, as `-x LIB FUNC`.
fn parse_uprobe(given: &str, spec: &str) -> Result<(FuncName, Option<Hook>), String> {
    let Some((lib, func)) = spec.split_once(':').filter(|(l, _)| !l.is_empty()) else {
        return Err(format!(
            "'{}' names no file: u:LIB:FUNC, e.g. u:c:malloc (or -x LIB FUNC)",
            given.escape_debug()
        ));
    };
    let (f, _) = parse_trace_func(func, true)?;
    Ok((f, Some(Hook::Uprobe(lib.to_string()))))
}

/// Probe-type prefixes other tools put before a kernel function, longest
/// first (`p::` is bcc trace's, with an empty module).
const HOOK_PREFIXES: [(&str, Hook); 7] = [
    ("kprobe:", Hook::Kprobe),
    ("fentry:", Hook::Fentry),
    ("kfunc:", Hook::Fentry),
    ("p::", Hook::Kprobe),
    ("p:", Hook::Kprobe),
    ("k:", Hook::Kprobe),
    ("f:", Hook::Fentry),
];

/// Return-probe types of perf, bcc and bpftrace, longest first, and whether
/// each is a user-space one. topdown counts calls at entry, by caller: a
/// return probe is refused rather than read as an entry.
const RETURN_PREFIXES: [(&str, bool); 7] = [
    ("uretprobe:", true),
    ("kretprobe:", false),
    ("kretfunc:", false),
    ("fexit:", false),
    ("ur:", true),
    ("kr:", false),
    ("r:", false),
];

/// The refusal of a return probe (`kretprobe:vfs_read`, `r::vfs_read`,
/// `uretprobe:/bin/bash:readline`), saying what to type instead.
fn return_probe(s: &str) -> Option<String> {
    let (prefix, user) = RETURN_PREFIXES.iter().find(|(p, _)| s.starts_with(p))?;
    let spec = &s[prefix.len()..];
    let instead = match (user, spec.rsplit_once(':')) {
        (true, Some((path, func))) if !path.is_empty() => format!("u:{path}:{func}"),
        (true, _) => "u:PATH:FUNC".to_string(),
        (false, Some((_, func))) => func.to_string(),
        (false, None) => spec.to_string(),
    };
    let instead = if instead.is_empty() {
        "FUNC".to_string()
    } else {
        instead
    };
    Some(format!(
        "'{}' is a return probe: topdown counts calls at a function's entry, by \
         caller, and traces no returns; to count the calls, give {instead}",
        s.escape_debug()
    ))
}

/// The traced FUNC as given, checked: a kernel function's name, or with
/// `-x` (`user`) a symbol of that file. For a kernel function the probe
/// types of perf, bcc and bpftrace (`p:vfs_read`, `kprobe:vfs_read`,
/// `kfunc:vfs_read`) are taken, and `module:func` is the function alone.
/// The error completes "topdown: ".
pub fn parse_trace_func(s: &str, user: bool) -> Result<(FuncName, Option<Hook>), String> {
    if let Some(why) = return_probe(s) {
        return Err(why);
    }
    if user {
        if s.contains("::") || s.contains('(') {
            return Err(format!(
                "'{s}' is a demangled name: -x looks a function up as the file's symbol \
                 table spells it, mangled for C++ and Rust (nm -D FILE lists them)"
            ));
        }
        if TP_PREFIXES
            .iter()
            .chain(&UPROBE_PREFIXES)
            .chain(&[RAW_TP_PREFIX])
            .any(|p| s.starts_with(p))
        {
            return Err(format!(
                "'{}' names its own target: give it without -x",
                s.escape_debug()
            ));
        }
        return FuncName::parse(s)
            .map(|f| (f, None))
            .map_err(|why| format!("'{}' is not a function name: {why}", s.escape_debug()));
    }
    if let Some(spec) = s.strip_prefix(RAW_TP_PREFIX) {
        return parse_tracepoint(s, spec, true);
    }
    if let Some(spec) = TP_PREFIXES.iter().find_map(|p| s.strip_prefix(p)) {
        return parse_tracepoint(s, spec, false);
    }
    if let Some(spec) = UPROBE_PREFIXES.iter().find_map(|p| s.strip_prefix(p)) {
        return parse_uprobe(s, spec);
    }
    let (name, hook) = HOOK_PREFIXES
        .iter()
        .find_map(|(p, h)| s.strip_prefix(p).map(|rest| (rest, Some(h.clone()))))
        .unwrap_or((s, None));
    let hooked = hook.is_some();
    // bpftrace's kfunc:MODULE:FUNC: the function alone, as kallsyms is
    // searched by name. A path or library is -x's. Without a probe type
    // the part before ':' would be one topdown does not know (bpftrace
    // refuses `foo:vfs_read` too): never read it as a module.
    let name = match name.split_once(':') {
        Some((module, func)) if !is_file_like(module) && !func.contains(':') => {
            if !hooked {
                return Err(format!(
                    "'{}': '{}:' is no probe type topdown knows: a kernel function is FUNC, \
                     kprobe:FUNC or fentry:FUNC (a module's: kfunc:MODULE:FUNC), a \
                     tracepoint t:CATEGORY:EVENT, a user function u:PATH:FUNC",
                    s.escape_debug(),
                    module.escape_debug()
                ));
            }
            func
        }
        _ => name,
    };
    FuncName::parse(name).map(|f| (f, hook)).map_err(|why| {
        let why = format!(
            "'{}' is not a kernel function name: {why}",
            s.escape_debug()
        );
        match s.rsplit_once(':') {
            Some((path, func))
                if !hooked && is_file_like(path) && FuncName::parse(func).is_ok() =>
            {
                format!(
                    "{why}; a function in a program or library is named with -x PATH FUNC \
                     or u:PATH:FUNC (here: -x {path} {func}, or u:{path}:{func})"
                )
            }
            _ => why,
        }
    })
}

/// Whether the part before a ':' names a file, as bcc's and bpftrace's
/// `PATH:FUNC` and `uprobe:PATH:FUNC` do (`c`, `libc`, `/lib/x/libc.so.6`),
/// not a kernel module.
fn is_file_like(s: &str) -> bool {
    s.contains('/') || s == "c" || s.starts_with("lib") || s.contains(".so")
}

/// topdown's commands: a FUNC that looks like one is likely a misspelling.
pub const COMMANDS: [&str; 5] = ["trace", "pin", "show", "unpin", "serve"];

/// The command `name` is, or looks like a misspelling of: one edit away,
/// or the same letters in another order (`shwo`).
pub fn command_like(name: &str) -> Option<String> {
    let letters = |s: &str| {
        let mut v: Vec<char> = s.chars().collect();
        v.sort_unstable();
        v
    };
    COMMANDS
        .iter()
        .find(|c| crate::kallsyms::distance(name, c) <= 1 || letters(name) == letters(c))
        .map(|c| c.to_string())
}

impl Deref for FuncName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for FuncName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FuncName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for FuncName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for FuncName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_symbols_are_names() {
        for ok in [
            "vfs_read",
            "deferred_split_folio",
            "_raw_spin_lock",
            "__x64_sys_read",
            "show_map_vma.isra.0",
            "copy_page_range.cold",
            "foo.llvm.1234567890",
            "a",
            "x9",
        ] {
            assert_eq!(FuncName::parse(ok).unwrap().as_str(), ok);
        }
        let longest = "f".repeat(MAX_LEN);
        assert!(FuncName::parse(&longest).is_ok());
    }

    #[test]
    fn paths_and_strangers_are_refused() {
        for (bad, why) in [
            ("", "it is empty"),
            ("..", "it starts with '.'"),
            (".", "it starts with '.'"),
            (".hidden", "it starts with '.'"),
            (
                "/tmp/rv/victim",
                "it has a '/' (a function's name, not a path)",
            ),
            ("../x", "it starts with '.'"),
            (
                "a/../../etc",
                "it has a '/' (a function's name, not a path)",
            ),
            ("/etc", "it has a '/' (a function's name, not a path)"),
            ("vfs_read ", "it has the character ' '"),
            ("a\nb", "it has the character '\\n'"),
            ("a\0b", "it has the character '\\0'"),
            (
                "ext4:ext4_readdir",
                "it has a ':' (name the function alone, without its module)",
            ),
            ("f-1", "it has the character '-'"),
            ("f*", "it has the character '*'"),
            ("fé", "it has the character 'é'"),
            ("$x", "it has the character '$'"),
        ] {
            assert_eq!(FuncName::parse(bad).unwrap_err(), why, "{bad:?}");
        }
        let long = "f".repeat(MAX_LEN + 1);
        assert_eq!(
            FuncName::parse(&long).unwrap_err(),
            "it is 513 bytes long (at most 512)"
        );
        assert_eq!(
            parse_arg("a/b").unwrap_err(),
            "not a kernel function name: it has a '/' (a function's name, not a path)"
        );
    }

    #[test]
    fn the_colon_syntax_is_refused_with_the_form_to_use() {
        let e = parse_trace_func("c:malloc", false).unwrap_err();
        assert!(e.contains("(here: -x c malloc, or u:c:malloc)"), "{e}");
        assert!(parse_trace_func("a/b", false).is_err());
    }

    #[test]
    fn other_tools_probe_types_name_the_kernel_function() {
        let ok = |s| parse_trace_func(s, false).unwrap();
        let f = |s: &str| FuncName::parse(s).unwrap();
        assert_eq!(ok("vfs_read"), (f("vfs_read"), None));
        assert_eq!(ok("p:vfs_read"), (f("vfs_read"), Some(Hook::Kprobe)));
        assert_eq!(ok("p::vfs_read"), (f("vfs_read"), Some(Hook::Kprobe)));
        assert_eq!(ok("k:vfs_read"), (f("vfs_read"), Some(Hook::Kprobe)));
        assert_eq!(ok("kprobe:vfs_read"), (f("vfs_read"), Some(Hook::Kprobe)));
        assert_eq!(ok("kfunc:vfs_read"), (f("vfs_read"), Some(Hook::Fentry)));
        assert_eq!(ok("fentry:vfs_read"), (f("vfs_read"), Some(Hook::Fentry)));
        assert_eq!(
            ok("kfunc:ext4:ext4_file_read_iter"),
            (f("ext4_file_read_iter"), Some(Hook::Fentry))
        );
        // A prefix that is no probe type is refused, not read as a module.
        let e = parse_trace_func("ext4:ext4_file_read_iter", false).unwrap_err();
        assert!(e.contains("'ext4:' is no probe type"), "{e}");
        assert!(e.contains("kfunc:MODULE:FUNC"), "{e}");
        let e = parse_trace_func("foo:vfs_read", false).unwrap_err();
        assert!(e.contains("'foo:' is no probe type"), "{e}");
        // No advice that fails when followed.
        for bad in ["p:/bin/ls:x", "kprobe:", "tracepoint:sched:x:y", "t:sched"] {
            let e = parse_trace_func(bad, false).unwrap_err();
            assert!(!e.contains("-x"), "{bad}: {e}");
        }
    }

    #[test]
    fn return_probes_are_refused_with_what_to_type_instead() {
        for (given, instead) in [
            ("kretprobe:vfs_read", "give vfs_read"),
            ("kretfunc:vfs_read", "give vfs_read"),
            ("fexit:vfs_read", "give vfs_read"),
            ("kr:vfs_read", "give vfs_read"),
            ("r:vfs_read", "give vfs_read"),
            ("r::vfs_read", "give vfs_read"),
            (
                "kretfunc:ext4:ext4_file_read_iter",
                "give ext4_file_read_iter",
            ),
            ("uretprobe:/bin/bash:readline", "give u:/bin/bash:readline"),
            ("ur:c:malloc", "give u:c:malloc"),
            ("uretprobe:", "give u:PATH:FUNC"),
            ("kretprobe:", "give FUNC"),
        ] {
            for user in [false, true] {
                let e = parse_trace_func(given, user).unwrap_err();
                assert!(e.contains("is a return probe"), "{given}: {e}");
                assert!(e.ends_with(instead), "{given}: {e}");
                assert!(!e.contains("-x"), "{given}: {e}");
            }
        }
        // A pinned function is spelt the same way.
        assert!(parse_pin_arg("kretprobe:vfs_read").is_err());
        assert!(parse_pinned_arg("kretprobe:vfs_read").is_err());
    }

    #[test]
    fn show_and_unpin_take_a_pin_as_pin_spelt_it() {
        for (given, pin) in [
            ("t:sched:sched_switch", "sched_switch"),
            ("tracepoint:kmem:mm_page_alloc", "mm_page_alloc"),
            ("vfs_read", "vfs_read"),
        ] {
            assert_eq!(parse_pinned_arg(given).unwrap().as_str(), pin, "{given}");
        }
        assert!(parse_pinned_arg("t:sched").is_err());
    }

    #[test]
    fn tracepoints_and_uprobes_are_spelt_as_bcc_and_bpftrace_do() {
        let ok = |s| parse_trace_func(s, false).unwrap();
        let f = |s: &str| FuncName::parse(s).unwrap();
        let tp = |c: &str| Some(Hook::Tracepoint(c.to_string()));
        let up = |l: &str| Some(Hook::Uprobe(l.to_string()));
        assert_eq!(ok("t:kmem:mm_page_alloc"), (f("mm_page_alloc"), tp("kmem")));
        assert_eq!(
            ok("tracepoint:sched:sched_switch"),
            (f("sched_switch"), tp("sched"))
        );
        assert_eq!(ok("u:c:malloc"), (f("malloc"), up("c")));
        assert_eq!(ok("uprobe:c:malloc"), (f("malloc"), up("c")));
        assert_eq!(
            ok("uprobe:/lib/x/libc.so.6:free"),
            (f("free"), up("/lib/x/libc.so.6"))
        );
        assert_eq!(ok("kprobe:vfs_read"), (f("vfs_read"), Some(Hook::Kprobe)));
        assert_eq!(
            ok("rawtracepoint:sched:sched_switch"),
            (
                f("sched_switch"),
                Some(Hook::RawTracepoint("sched".to_string()))
            )
        );
        let e = parse_trace_func("rawtracepoint:sched_switch", false).unwrap_err();
        assert!(e.contains("name it as rawtracepoint:CATEGORY:EVENT"), "{e}");
        let e = parse_trace_func("rawtracepoint:sched:sched_switch", true).unwrap_err();
        assert!(e.contains("names its own target"), "{e}");
        let e = parse_pin_arg("rawtracepoint:sched:sched_switch").unwrap_err();
        assert!(
            e.contains("a pin takes its tracepoint as t:CATEGORY:EVENT"),
            "{e}"
        );
    }

    #[test]
    fn bad_tracepoints_and_uprobes_say_what_is_wrong() {
        for (bad, says) in [
            ("t:", "name it as t:CATEGORY:EVENT"),
            ("t:kmem", "name it as t:CATEGORY:EVENT"),
            ("tracepoint:kmem", "name it as t:CATEGORY:EVENT"),
            ("t::mm_page_alloc", "its category: it is empty"),
            ("t:kmem:", "its event: it is empty"),
            ("t:kmem:mm_*", "its event: it has a wildcard"),
            ("t:*:sched_switch", "its category: it has a wildcard"),
            ("t:sched:sched_switch:x", "one category and one event"),
            ("t:../x:y", "its category: it has the character '.'"),
            ("t:a/b:c", "its category: it has a '/'"),
            ("t:kmem:a/../b", "its event: it has a '/'"),
            ("t:kmem:mm page", "its event: it has the character ' '"),
            ("t:kmem:.x", "its event: it has the character '.'"),
            ("u:malloc", "names no file"),
            ("u::malloc", "names no file"),
            ("uprobe:c:", "it is empty"),
            ("u:c:a/b", "it has a '/'"),
            ("u:c:std::terminate", "demangled"),
        ] {
            let e = parse_trace_func(bad, false).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(!e.contains("-x p "), "{bad}: {e}");
        }
        let long = format!("t:kmem:{}", "e".repeat(MAX_LEN + 1));
        assert!(parse_trace_func(&long, false)
            .unwrap_err()
            .contains("bytes long"));
        // With -x, a target of its own is refused.
        assert!(parse_trace_func("t:kmem:mm_page_alloc", true).is_err());
        assert!(parse_trace_func("u:c:malloc", true).is_err());
    }

    #[test]
    fn with_x_a_symbol_is_taken_as_the_file_spells_it() {
        let e = parse_trace_func("std::terminate", true).unwrap_err();
        assert!(e.contains("demangled") && e.contains("mangled"), "{e}");
        assert!(!e.contains("kernel"), "{e}");
        let (f, hook) = parse_trace_func("_ZSt9terminatev", true).unwrap();
        assert_eq!((f.as_str(), hook), ("_ZSt9terminatev", None));
        // A kernel probe type is no part of a symbol's name.
        assert!(parse_trace_func("p:malloc", true).is_err());
    }
}
