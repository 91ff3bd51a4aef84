//! Declared pins: `/etc/topdown/pins.d/*.toml`, one file per pinned
//! function, read for `topdown pin --sync`. A file's keys are `function`
//! and the long options of `topdown pin` (`profile = "..."`,
//! `kprobe = true`, `depth = 32`, `cpu = "0-3"`, ...), turned into the very
//! command line `topdown pin` would parse, so a key means exactly what its
//! option means and is checked by the same code. Each key is checked alone
//! first, so a bad value is blamed on its key.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

use crate::cli::Cli;
use crate::error::{Error, Result};
use crate::funcname::FuncName;

/// One declaration, checked: the function and the `topdown pin` command
/// line it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    /// The file's name in the directory (`vfs_read.toml`).
    pub file: String,
    pub function: FuncName,
    /// `topdown pin`'s arguments after the command name, keys sorted.
    pub args: Vec<String>,
    /// What the pinned instance records: the arguments, and a digest of
    /// the files they name (a --reasons file edited is a change).
    pub spec: String,
}

/// A file that cannot be applied: one line naming the file and the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bad {
    pub file: String,
    pub error: String,
}

/// `topdown pin`'s long options a file may set, and whether each takes a
/// value (false: a flag, set with `true`).
fn pin_keys() -> Vec<(String, bool)> {
    let cmd = Cli::command();
    let pin = cmd
        .find_subcommand("pin")
        .expect("topdown has a pin command");
    pin.get_arguments()
        .filter(|a| !a.is_positional() && !a.is_hide_set())
        .filter_map(|a| Some((a.get_long()?.to_string(), a.get_action().takes_values())))
        // Not pin's settings: how sync itself runs.
        .filter(|(l, _)| !matches!(l.as_str(), "verbose" | "sync" | "config-dir" | "help"))
        .collect()
}

/// The directory's declarations (`*.toml`, by name) and the files that
/// cannot be applied. An unreadable directory is an error: nothing is
/// known, so nothing may be unpinned.
pub fn read_dir(dir: &Path) -> Result<(Vec<Declared>, Vec<Bad>)> {
    let entries = fs::read_dir(dir).map_err(|e| {
        Error::msg(format!(
            "cannot read {}: {e}; declare pins there (one FUNC.toml each) or give --config-dir DIR",
            dir.display()
        ))
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    let (mut good, mut bad) = (Vec::<Declared>::new(), Vec::new());
    for path in files {
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let parsed = check_owner(&path)
            .and_then(|()| {
                crate::input::read_text(&path, crate::input::MAX_PROFILE)
                    .map_err(|e| Error::msg(format!("cannot read it: {e}")))
            })
            .map_err(|e| e.to_string())
            .and_then(|text| parse(&file, &text));
        match parsed {
            Ok(d) => match good.iter().find(|g| g.function == d.function) {
                Some(first) => bad.push(Bad {
                    error: format!(
                        "key 'function': {} is declared in {} already: one file per function",
                        d.function, first.file
                    ),
                    file,
                }),
                None => good.push(d),
            },
            Err(error) => bad.push(Bad { file, error }),
        }
    }
    Ok((good, bad))
}

/// A warning when `d`'s file is named after another kernel function than
/// the one it declares (`vfs_read.toml` pinning vfs_write): applied all
/// the same, as a file may have any name, but not without a word.
pub fn misnamed(d: &Declared, is_function: impl Fn(&str) -> bool) -> Option<String> {
    let stem = d.file.strip_suffix(".toml").unwrap_or(&d.file);
    (stem != d.function.as_str() && is_function(stem)).then(|| {
        format!(
            "warning: it declares {f}, not the kernel function {stem} it is named after: \
             rename it {f}.toml",
            f = d.function
        )
    })
}

/// A file root acts on must be root's and writable by root alone.
fn check_owner(path: &Path) -> Result<()> {
    let m = fs::metadata(path).map_err(|e| Error::msg(format!("cannot read it: {e}")))?;
    if m.uid() != 0 && m.uid() != unsafe_euid() {
        return Err(Error::msg(format!(
            "it belongs to uid {}: declarations must be root's",
            m.uid()
        )));
    }
    if m.mode() & 0o022 != 0 {
        return Err(Error::msg(format!(
            "it is writable by others (mode {:o}): chmod go-w it",
            m.mode() & 0o777
        )));
    }
    Ok(())
}

fn unsafe_euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// One file's text into its declaration, or one line naming the key at
/// fault.
pub fn parse(file: &str, text: &str) -> std::result::Result<Declared, String> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
        let msg = e.message().lines().next().unwrap_or("").to_string();
        match line {
            Some(l) => format!("line {l}: {msg}"),
            None => msg,
        }
    })?;
    // Checked before anything else: the name becomes a directory's and a
    // lock file's as root.
    let function = match table.get("function") {
        Some(toml::Value::String(s)) => FuncName::parse(s)
            .map_err(|why| {
                format!(
                    "key 'function': '{}' is not a kernel function name: {why}",
                    s.escape_default()
                )
            })
            .and_then(|f| {
                crate::plan::pinnable(&f)
                    .map_err(|e| format!("key 'function': {e}"))
                    .map(|_| f.clone())
            })?,
        Some(_) => return Err("key 'function': give the name as a string".into()),
        None => return Err("key 'function' is missing: name the function to pin".into()),
    };
    let keys = pin_keys();
    let mut args = vec![function.to_string()];
    let mut digest = Digest::default();
    for (key, value) in &table {
        if key == "function" {
            continue;
        }
        let opt = key.replace('_', "-");
        let Some(&(_, takes_value)) = keys.iter().find(|(k, _)| *k == opt) else {
            let names: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
            return Err(format!(
                "unknown key '{key}': keys are function and topdown pin's options: {}",
                names.join(", ")
            ));
        };
        let mut one = Vec::new();
        match (value, takes_value) {
            (toml::Value::Boolean(true), false) => one.push(format!("--{opt}")),
            (toml::Value::Boolean(false), false) => {}
            (_, false) => return Err(format!("key '{key}': a flag: give true or false")),
            (toml::Value::String(s), true) => one.extend([format!("--{opt}"), s.clone()]),
            (toml::Value::Integer(n), true) => one.extend([format!("--{opt}"), n.to_string()]),
            (_, true) => return Err(format!("key '{key}': give a string or a number")),
        }
        check_args(&function, &one).map_err(|e| format!("key '{key}': {e}"))?;
        if opt == "reasons" {
            if let Some(path) = one.get(1) {
                digest.file(path);
            }
        }
        args.extend(one);
    }
    // Together: options that exclude each other.
    check_args(&function, &args[1..]).map_err(|e| format!("keys: {e}"))?;
    let spec = format!("{}{}", args.join(" "), digest.text());
    Ok(Declared {
        file: file.to_string(),
        function,
        args,
        spec,
    })
}

/// Parses `topdown pin FUNC ARGS` and plans it, as the command line would
/// be: the error in one line.
fn check_args(func: &str, args: &[String]) -> Result<()> {
    let argv = ["topdown", "pin", func]
        .into_iter()
        .map(String::from)
        .chain(args.iter().cloned());
    let cli = <Cli as clap::Parser>::try_parse_from(argv).map_err(|e| {
        let text = e.render().to_string();
        let first = text.lines().next().unwrap_or("").trim();
        Error::msg(first.trim_start_matches("error: ").to_string())
    })?;
    crate::plan::Plan::from_cli(&cli).map(|_| ())
}

/// FNV-1a over the files a declaration names: enough to tell an edit.
#[derive(Default)]
struct Digest {
    parts: Vec<String>,
}

impl Digest {
    fn file(&mut self, path: &str) {
        let bytes = fs::read(path).unwrap_or_default();
        let mut h: u64 = 0xcbf29ce484222325;
        for b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100000001b3);
        }
        self.parts.push(format!("{path}={h:016x}"));
    }

    fn text(&self) -> String {
        self.parts.iter().map(|p| format!(" #{p}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_files_are_kernel_function_names() {
        for ok in ["vfs_read", "_x", "deferred_split_folio", "f2"] {
            let d = parse("a.toml", &format!("function = \"{ok}\"")).unwrap();
            assert_eq!(d.function, ok);
        }
        for (bad, why) in [
            ("", "it is empty"),
            ("../etc", "it starts with '.'"),
            ("a/b", "it has a '/' (a function's name, not a path)"),
            ("a-b", "it has the character '-'"),
            ("a b", "it has the character ' '"),
            (
                "mod:f",
                "it has a ':' (name the function alone, without its module)",
            ),
        ] {
            let e = parse("a.toml", &format!("function = \"{bad}\"")).unwrap_err();
            assert_eq!(
                e,
                format!("key 'function': '{bad}' is not a kernel function name: {why}")
            );
        }
        // A clone is a kernel function, but bpffs refuses its name.
        let e = parse("a.toml", "function = \"foo.isra.0\"").unwrap_err();
        assert!(
            e.starts_with("key 'function': foo.isra.0 cannot be pinned: bpffs allows no '.'"),
            "{e}"
        );
    }

    #[test]
    fn keys_become_pin_options_in_a_stable_order() {
        let d = parse(
            "a.toml",
            "function = \"vfs_read\"\nkprobe = true\nno_profile = true\ndepth = 32\ncpu = \"0-1\"\nuser-stacks = false\n",
        )
        .unwrap();
        assert_eq!(d.function, "vfs_read");
        // toml tables are sorted by key: the spec does not depend on the
        // order of lines in the file.
        assert_eq!(
            d.args,
            [
                "vfs_read",
                "--cpu",
                "0-1",
                "--depth",
                "32",
                "--kprobe",
                "--no-profile"
            ]
        );
        assert_eq!(
            d.spec,
            "vfs_read --cpu 0-1 --depth 32 --kprobe --no-profile"
        );
        let same = parse(
            "b.toml",
            "no-profile = true\ncpu = \"0-1\"\ndepth = 32\nkprobe = true\nfunction = \"vfs_read\"\n",
        )
        .unwrap();
        assert_eq!(same.spec, d.spec);
        let bare = parse("c.toml", "function = \"vfs_read\"").unwrap();
        assert_eq!(bare.args, ["vfs_read"]);
    }

    #[test]
    fn bad_files_name_the_key() {
        let err = |text: &str| parse("x.toml", text).unwrap_err();
        assert_eq!(
            err("kprobe = true"),
            "key 'function' is missing: name the function to pin"
        );
        assert!(err("function = \"../../etc\"")
            .starts_with("key 'function': '../../etc' is not a kernel function name"));
        assert_eq!(
            err("function = 3"),
            "key 'function': give the name as a string"
        );
        let e = err("function = \"f\"\ndeep = 3");
        assert!(e.starts_with("unknown key 'deep': keys are function and topdown pin's options: "));
        assert!(
            e.contains("profile") && e.contains("cpu") && !e.contains("verbose"),
            "{e}"
        );
        assert!(!e.contains("sync"), "{e}");
        assert_eq!(
            err("function = \"f\"\nkprobe = \"yes\""),
            "key 'kprobe': a flag: give true or false"
        );
        assert_eq!(
            err("function = \"f\"\ndepth = [1]"),
            "key 'depth': give a string or a number"
        );
        let e = err("function = \"f\"\ndepth = 500");
        assert!(e.starts_with("key 'depth': invalid value '500'"), "{e}");
        let e = err("function = \"f\"\ncpu = \"3-1\"");
        assert!(e.starts_with("key 'cpu': "), "{e}");
        let e = err("function = \"f\"\nkprobe = true\nfentry = true");
        assert!(e.starts_with("keys: ") && e.contains("--fentry"), "{e}");
        let e = err("function = \"f\"\nprofile = \"nope\"");
        assert!(e.starts_with("key 'profile': "), "{e}");
        let e = err("function = \"f\"\nreasons = \"/nonexistent.toml\"");
        assert!(e.starts_with("key 'reasons': "), "{e}");
        assert_eq!(
            err("function = \"f\"\nx = "),
            "line 2: string values must be quoted, expected literal string"
        );
    }

    #[test]
    fn a_directory_with_good_bad_and_duplicate_files() {
        let dir = std::env::temp_dir().join(format!("topdown-declared-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir(&dir).unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            fs::write(&p, text).unwrap();
            let mut perm = fs::metadata(&p).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o644);
            fs::set_permissions(&p, perm).unwrap();
        };
        write("a.toml", "function = \"vfs_read\"\nno-profile = true\n");
        write("b.toml", "function = \"vfs_read\"\n");
        write("c.toml", "function = \"vfs_write\"\ndepth = 0\n");
        write("d.toml", "function = \"vfs_open\"\n");
        write("notes.txt", "not a declaration");
        let (good, bad) = read_dir(&dir).unwrap();
        let names: Vec<_> = good
            .iter()
            .map(|d| (d.file.as_str(), d.function.as_str()))
            .collect();
        assert_eq!(names, [("a.toml", "vfs_read"), ("d.toml", "vfs_open")]);
        assert_eq!(bad.len(), 2);
        assert_eq!(bad[0].file, "b.toml");
        assert_eq!(
            bad[0].error,
            "key 'function': vfs_read is declared in a.toml already: one file per function"
        );
        assert!(bad[1].error.starts_with("key 'depth': "), "{:?}", bad[1]);
        // Writable by others: refused.
        let p = dir.join("d.toml");
        let mut perm = fs::metadata(&p).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o666);
        fs::set_permissions(&p, perm).unwrap();
        let (good, bad) = read_dir(&dir).unwrap();
        assert_eq!(good.len(), 1);
        assert!(bad.iter().any(|b| b.file == "d.toml"
            && b.error == "it is writable by others (mode 666): chmod go-w it"));
        fs::remove_dir_all(&dir).unwrap();
        let e = read_dir(&dir).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("cannot read {}: ", dir.display())),
            "{e}"
        );
    }

    #[test]
    fn a_file_named_after_another_function_is_warned_about() {
        let d = parse("vfs_read.toml", "function = \"vfs_write\"").unwrap();
        let kernel = |f: &str| ["vfs_read", "vfs_write"].contains(&f);
        let w = misnamed(&d, kernel).unwrap();
        assert!(
            w.contains("declares vfs_write, not the kernel function vfs_read"),
            "{w}"
        );
        assert!(w.ends_with("rename it vfs_write.toml"), "{w}");
        let d = parse("new.toml", "function = \"vfs_open\"").unwrap();
        assert_eq!(misnamed(&d, kernel), None);
        let d = parse("vfs_write.toml", "function = \"vfs_write\"").unwrap();
        assert_eq!(misnamed(&d, kernel), None);
    }
}
