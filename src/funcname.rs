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

/// clap's value parser for the traced FUNC: as `parse_arg`, and bcc's and
/// bpftrace's `PATH:FUNC` (`c:malloc`, `uprobe:/lib/libc.so.6:free`) is
/// refused with the `-x` form to use instead.
pub fn parse_trace_arg(s: &str) -> Result<FuncName, String> {
    let spec = s.strip_prefix("uprobe:").unwrap_or(s);
    parse_arg(s).map_err(|why| match spec.rsplit_once(':') {
        Some((path, name)) => format!(
            "{why}; a function in a program or library is named with -x PATH FUNC \
             (here: -x {path} {name}), not PATH:FUNC"
        ),
        None => why,
    })
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
        let e = parse_trace_arg("c:malloc").unwrap_err();
        assert!(e.contains("-x c malloc"), "{e}");
        let e = parse_trace_arg("uprobe:/lib/x/libc.so.6:free").unwrap_err();
        assert!(e.contains("-x /lib/x/libc.so.6 free"), "{e}");
        assert_eq!(parse_trace_arg("vfs_read").unwrap(), "vfs_read");
        assert!(parse_trace_arg("a/b").is_err());
    }
}
