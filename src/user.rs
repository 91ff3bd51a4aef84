//! User-space targets (`-x PATH FUNC`): the ELF file a name stands for, and
//! FUNC's file offset in it, for the uprobe. Checked when the plan is
//! made, so that bad input is one line and exit status 2 before anything
//! is loaded.

use std::path::{Path, PathBuf};

use blazesym::inspect::source::{Elf, Source};
use blazesym::inspect::Inspector;
use blazesym::SymType;

use crate::error::{Error, Result};

/// A function in an ELF file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UserTarget {
    /// The file, as found (absolute, symbolic links resolved).
    pub(crate) path: PathBuf,
    pub(crate) func: String,
    /// FUNC's entry as a file offset: what a uprobe is attached at.
    pub(crate) offset: u64,
    /// FUNC's entry as the file's virtual address: less FUNC's address in
    /// a process, where the file is mapped there.
    pub(crate) addr: u64,
}

impl UserTarget {
    /// Finds `func` in the file `name` stands for (see `locate`).
    pub(crate) fn find(name: &str, func: &str) -> Result<UserTarget> {
        let path = locate(name)?;
        let sections = elf_sections(&path)?;
        let inspector = Inspector::new();
        let found = inspector
            .lookup(&symbol_tables(&path), &[func])
            .map_err(|e| symbols_error(&path, e))?;
        let offset = found
            .into_iter()
            .flatten()
            .filter(|s| s.sym_type == SymType::Function || s.sym_type == SymType::Undefined)
            .find_map(|s| Some((s.file_offset.filter(|&o| o != 0)?, s.addr)));
        match offset {
            Some((offset, addr)) => Ok(UserTarget {
                path,
                func: func.to_string(),
                offset,
                addr,
            }),
            None => Err(Error::usage(format!(
                "{func} is not a function defined in {}: searched {}",
                path.display(),
                searched(&sections)
            ))),
        }
    }

    /// How the target is named in messages.
    pub(crate) fn describe(&self) -> String {
        format!("{} in {}", self.func, self.path.display())
    }
}

/// The symbol tables a lookup reads, and which of them the file has.
fn searched(sections: &[String]) -> String {
    [".symtab", ".dynsym", ".gnu_debugdata"]
        .iter()
        .map(|&s| match sections.iter().any(|n| n == s) {
            true => s.to_string(),
            false => format!("{s} (absent)"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The library directories searched for a name without a slash, as the
/// dynamic linker's defaults on Debian-like and other systems have them.
fn library_dirs() -> Vec<PathBuf> {
    let triplet = format!("{}-linux-gnu", std::env::consts::ARCH);
    [
        format!("/lib/{triplet}"),
        format!("/usr/lib/{triplet}"),
        "/lib64".into(),
        "/usr/lib64".into(),
        "/lib".into(),
        "/usr/lib".into(),
        "/usr/local/lib".into(),
    ]
    .into_iter()
    .map(PathBuf::from)
    .collect()
}

/// The functions defined in the ELF file `path` (its .symtab, .dynsym and
/// .gnu_debugdata), for `-l`: each name once.
pub(crate) fn functions(path: &Path) -> Result<Vec<String>> {
    elf_sections(path)?;
    let mut names = Vec::new();
    Inspector::new()
        .for_each(&symbol_tables(path), |s| {
            if s.sym_type == SymType::Function && s.file_offset.is_some_and(|o| o != 0) {
                names.push(s.name.to_string());
            }
            std::ops::ControlFlow::Continue(())
        })
        .map_err(|e| symbols_error(path, e))?;
    names.sort_unstable();
    names.dedup();
    Ok(names)
}

/// The section names of the ELF file `path` (for saying where a function
/// was looked for), or why it cannot be -x's file.
fn elf_sections(path: &Path) -> Result<Vec<String>> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::usage(format!("-x {}: cannot read it: {e}", path.display())))?;
    section_names(&bytes).ok_or_else(|| {
        Error::usage(format!(
            "-x {}: not an ELF file (give a program or a shared library)",
            path.display()
        ))
    })
}

/// The file's symbol tables as a source to inspect: DWARF would only slow
/// the lookup.
fn symbol_tables(path: &Path) -> Source {
    let mut src = Elf::new(path.to_path_buf());
    src.debug_syms = false;
    Source::Elf(src)
}

fn symbols_error(path: &Path, e: blazesym::Error) -> Error {
    Error::usage(format!(
        "-x {}: cannot read its symbols: {e}",
        path.display()
    ))
}

/// The file `name` stands for: a path if it has a slash; else, as bcc's
/// tools take it, a library (`c` or `libc`: the first `libc.so.N`, or
/// `libc.so`, that is an ELF file in the library directories), else a
/// program in $PATH.
pub(crate) fn locate(name: &str) -> Result<PathBuf> {
    if name.contains('/') {
        return std::fs::canonicalize(name)
            .map_err(|e| Error::usage(format!("-x {name}: cannot read it: {e}")));
    }
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    let programs: Vec<PathBuf> = std::env::split_paths(&path_var).collect();
    find_named(name, &library_dirs(), &programs).ok_or_else(|| {
        Error::usage(format!(
            "-x {name}: no library lib{}.so* in {} and no program {name} in $PATH; give a path",
            name.strip_prefix("lib").unwrap_or(name),
            library_dirs()
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

/// `locate` for a name without a slash, in these directories.
fn find_named(name: &str, libs: &[PathBuf], programs: &[PathBuf]) -> Option<PathBuf> {
    let stem = format!("lib{}.so", name.strip_prefix("lib").unwrap_or(name));
    for dir in libs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|f| f.to_str())
                    .is_some_and(|f| f == stem || f.starts_with(&format!("{stem}.")))
            })
            .filter(|p| is_elf(p))
            .collect();
        // libc.so.6 before libc.so.6.1: the shortest name is the soname.
        found.sort_by_key(|p| (p.as_os_str().len(), p.clone()));
        if let Some(p) = found.into_iter().next() {
            return std::fs::canonicalize(&p).ok();
        }
    }
    programs
        .iter()
        .map(|d| d.join(name))
        .find(|p| is_elf(p))
        .and_then(|p| std::fs::canonicalize(p).ok())
}

fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| &magic == b"\x7fELF")
}

/// A 64-bit little-endian ELF file's bytes (x86-64 and arm64, what
/// topdown runs on), read by offset.
struct Elf64<'a>(&'a [u8]);

impl<'a> Elf64<'a> {
    fn new(b: &'a [u8]) -> Option<Self> {
        (b.get(..6)? == b"\x7fELF\x02\x01").then_some(Elf64(b))
    }
    fn u16_at(&self, o: usize) -> Option<u16> {
        Some(u16::from_le_bytes(
            self.0.get(o..o.checked_add(2)?)?.try_into().ok()?,
        ))
    }
    fn u32_at(&self, o: usize) -> Option<u32> {
        Some(u32::from_le_bytes(
            self.0.get(o..o.checked_add(4)?)?.try_into().ok()?,
        ))
    }
    fn u64_at(&self, o: usize) -> Option<u64> {
        Some(u64::from_le_bytes(
            self.0.get(o..o.checked_add(8)?)?.try_into().ok()?,
        ))
    }
}

/// A loadable segment of an ELF file: where it is in the file, at which
/// virtual address it is loaded, how many bytes of the file, executable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segment {
    pub(crate) offset: u64,
    pub(crate) vaddr: u64,
    pub(crate) filesz: u64,
    pub(crate) exec: bool,
}

/// The loadable segments (PT_LOAD) of the ELF file `path`; empty if it is
/// no 64-bit little-endian ELF file or cannot be read.
pub(crate) fn segments(path: &Path) -> Vec<Segment> {
    const PT_LOAD: u32 = 1;
    const PF_X: u32 = 1;
    let mut head = vec![0u8; 64 * 1024];
    let Some(n) = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        .ok()
    else {
        return Vec::new();
    };
    let Some(e) = Elf64::new(&head[..n]) else {
        return Vec::new();
    };
    let table = || -> Option<Vec<Segment>> {
        let phoff = usize::try_from(e.u64_at(0x20)?).ok()?;
        let (phentsize, phnum) = (usize::from(e.u16_at(0x36)?), usize::from(e.u16_at(0x38)?));
        let mut out = Vec::new();
        for i in 0..phnum {
            let h = phoff.checked_add(i.checked_mul(phentsize)?)?;
            if e.u32_at(h)? == PT_LOAD {
                out.push(Segment {
                    offset: e.u64_at(h + 0x08)?,
                    vaddr: e.u64_at(h + 0x10)?,
                    filesz: e.u64_at(h + 0x20)?,
                    exec: e.u32_at(h + 4)? & PF_X != 0,
                });
            }
        }
        Some(out)
    };
    table().unwrap_or_default()
}

/// The lowest virtual address of an executable segment: where the
/// kernel's mm->start_code puts it, moved by the load bias
/// (load_elf_binary).
pub(crate) fn lowest_exec_vaddr(segments: &[Segment]) -> Option<u64> {
    segments.iter().filter(|s| s.exec).map(|s| s.vaddr).min()
}

/// The virtual address (what addr2line and objdump take) of file offset
/// `off`, through the segment that holds it; None outside them all.
pub(crate) fn vaddr_of(segments: &[Segment], off: u64) -> Option<u64> {
    let s = segments
        .iter()
        .find(|s| (s.offset..s.offset.saturating_add(s.filesz)).contains(&off))?;
    Some(off - s.offset + s.vaddr)
}

/// The section names of a 64-bit little-endian ELF file; None if it is no
/// such file.
fn section_names(b: &[u8]) -> Option<Vec<String>> {
    let e = Elf64::new(b)?;
    let (u16_at, u32_at, u64_at) = (|o| e.u16_at(o), |o| e.u32_at(o), |o| e.u64_at(o));
    let shoff = usize::try_from(u64_at(0x28)?).ok()?;
    let (shentsize, shnum, shstrndx) = (
        usize::from(u16_at(0x3a)?),
        usize::from(u16_at(0x3c)?),
        usize::from(u16_at(0x3e)?),
    );
    let header = |i: usize| shoff.checked_add(i.checked_mul(shentsize)?);
    let strtab = usize::try_from(u64_at(header(shstrndx)? + 0x18)?).ok()?;
    let mut names = Vec::new();
    for i in 0..shnum {
        let name = strtab.checked_add(u32_at(header(i)?)? as usize)?;
        let tail = b.get(name..)?;
        let end = tail.iter().position(|&c| c == 0)?;
        names.push(String::from_utf8_lossy(&tail[..end]).into_owned());
    }
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_names_are_read_and_non_elf_refused() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let names = section_names(&me).unwrap();
        assert!(names.iter().any(|n| n == ".text"), "{names:?}");
        assert!(section_names(b"#!/bin/sh\n").is_none());
        assert!(section_names(b"\x7fELF\x02\x01").is_none(), "truncated");
        let s = searched(&[".dynsym".to_string()]);
        assert_eq!(s, ".symtab (absent), .dynsym, .gnu_debugdata (absent)");
    }

    #[test]
    fn library_names_find_the_soname_and_programs_come_last() {
        let dir = std::env::temp_dir().join(format!("topdown-user-{}", std::process::id()));
        let (lib, bin) = (dir.join("lib"), dir.join("bin"));
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::create_dir_all(&bin).unwrap();
        let elf = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        // A linker script named libc.so is no ELF file: skipped.
        std::fs::write(lib.join("libc.so"), "GROUP ( libc.so.6 )").unwrap();
        std::fs::write(lib.join("libc.so.6"), &elf).unwrap();
        std::fs::write(lib.join("libcrypt.so.1"), &elf).unwrap();
        std::fs::write(bin.join("tool"), &elf).unwrap();
        let libs = [lib.clone()];
        let progs = [bin.clone()];
        let found =
            |n: &str| find_named(n, &libs, &progs).map(|p| p.file_name().unwrap().to_owned());
        assert_eq!(found("c").unwrap(), "libc.so.6");
        assert_eq!(found("libc").unwrap(), "libc.so.6");
        assert_eq!(found("crypt").unwrap(), "libcrypt.so.1");
        assert_eq!(found("tool").unwrap(), "tool");
        assert_eq!(found("nothing"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn functions_are_found_with_their_file_offset_or_refused() {
        // This test binary's own symbols: a function, and one that is not.
        let me = std::env::current_exe().unwrap();
        let me = me.to_str().unwrap();
        let t = UserTarget::find(me, "main").unwrap();
        assert!(t.offset > 0);
        let e = UserTarget::find(me, "no_such_function_here").unwrap_err();
        assert!(e.is_usage());
        assert!(
            e.to_string()
                .contains("no_such_function_here is not a function defined in")
                && e.to_string().contains("searched .symtab"),
            "{e}"
        );
        let e = UserTarget::find("/nonexistent/file", "f").unwrap_err();
        assert!(
            e.is_usage() && e.to_string().contains("cannot read it"),
            "{e}"
        );
    }
}
