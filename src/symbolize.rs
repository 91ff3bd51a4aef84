//! Addresses to frame names: kernel frames from the kallsyms table topdown
//! has already loaded, or with a debug vmlinux through blazesym (inlined
//! frames, file:line); user frames through blazesym. One symbolizer for the
//! whole run and a cache by address, so a stack seen again costs no lookups.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use blazesym::symbolize::source::{Elf, Kernel, Process, Source};
use blazesym::symbolize::{cache, Input, Reason, Sym, Symbolized, Symbolizer};
use blazesym::{MaybeDefault, Pid};

use crate::bpf::sample::UserFrame;
use crate::build_ids::{self, BuildId, BuildIds};
use crate::kallsyms::{base_name, Kallsyms};
use crate::reasons::{ProcessCode, SourceLoc, SourceLookup};
use crate::user;

pub(crate) struct Symbols {
    /// The kernel's and files' symbols.
    sym: Symbolizer,
    /// Processes' maps and symbols: forgotten, with `cached_pids` and
    /// `ucache`, every MAX_PROCESSES processes, so a long run among many
    /// short-lived processes stays bounded (blazesym keeps each process's
    /// maps until its symbolizer is dropped).
    procs: Symbolizer,
    /// blazesym's kernel source when there is debug info to read (a
    /// vmlinux, or in tests an ELF image); None: kallsyms.
    kernel: Option<Source<'static>>,
    kcache: HashMap<u64, Vec<String>>,
    ucache: HashMap<(u32, u64, bool), Vec<String>>,
    /// User frames given as a build ID and a file offset.
    fcache: HashMap<(BuildId, u64, bool), Vec<String>>,
    files: BuildIds,
    /// Command names looked for along PATH.
    known_comms: HashSet<String>,
    cached_pids: HashSet<u32>,
    /// A uprobe's file, and FUNC's virtual address in it: names the call
    /// sites in that file of a process already gone (see user_caller).
    target: Option<(PathBuf, u64)>,
    /// Programs of processes already gone, by the device and inode the
    /// uprobe found: the file, and its lowest executable address (see
    /// in_program). Only those found: one not found yet may be met later.
    programs: HashMap<(u32, u64), (u64, PathBuf)>,
    /// ELF files' loadable segments, by path (see place).
    segments: HashMap<PathBuf, Vec<user::Segment>>,
    /// Say why symbolization failed (--verbose).
    verbose: bool,
}

/// Frames for one symbolized address, innermost first: inlined callees
/// (from DWARF, when a debug vmlinux is present) then the function itself
/// at `offset`.
fn frames(sym: &Sym<'_>, offset: u64) -> Vec<String> {
    let mut out: Vec<String> = sym
        .inlined
        .iter()
        .rev()
        .map(|f| match &f.code_info {
            Some(ci) => format!("{} (inlined) [{}]", f.name, location(ci)),
            None => format!("{} (inlined)", f.name),
        })
        .collect();
    let base = format!("{}+{offset:#x}", sym.name);
    out.push(match &sym.code_info {
        Some(ci) => format!("{base} [{}]", location(ci)),
        None => base,
    });
    out
}

/// The offset of kernel address `probe` in function `name`, which blazesym
/// found at offset `blazed`. blazesym (0.2) takes a vmlinux's functions at
/// their link-time addresses but subtracts those from the KASLR-slid
/// address, so its offsets include the slide; kallsyms has the slid
/// address of the same function.
fn kernel_offset(ksyms: &Kallsyms, probe: u64, name: &str, blazed: u64) -> u64 {
    match ksyms.lookup(probe) {
        Some(k) if base_name(&k.name) == base_name(name) => probe - k.addr,
        _ => blazed,
    }
}

/// A frame at offset `off` of `file` that has no symbol there.
fn file_frame(file: &Path, off: u64) -> String {
    let name = file.file_name().unwrap_or(file.as_os_str());
    format!("{}+{off:#x}", name.to_string_lossy())
}

/// The loadable segments of the ELF file `path`, read once into `cache`.
fn segments_of<'a>(
    cache: &'a mut HashMap<PathBuf, Vec<user::Segment>>,
    path: &Path,
) -> &'a [user::Segment] {
    cache
        .entry(path.to_path_buf())
        .or_insert_with(|| user::segments(path))
}

/// A frame with no symbol, by its file and virtual address (what
/// addr2line -e FILE and objdump take), from its file offset `off`; by the
/// offset where no segment holds it.
fn place(cache: &mut HashMap<PathBuf, Vec<user::Segment>>, file: &Path, off: u64) -> String {
    let vaddr = user::vaddr_of(segments_of(cache, file), off).unwrap_or(off);
    file_frame(file, vaddr)
}

/// How far before a user frame's address it is looked up: a return
/// address at -1, inside the call instruction, so that the frame shows the
/// call's function and line (as perf does), and at +1 again; the leaf, an
/// instruction pointer (`is_ip`), at itself.
fn back(is_ip: bool) -> u64 {
    u64::from(!is_ip)
}

/// The addresses not yet known, each once.
fn uncached(addrs: &[u64], known: impl Fn(u64) -> bool) -> Vec<u64> {
    let unknown: HashSet<u64> = addrs.iter().copied().filter(|&a| !known(a)).collect();
    unknown.into_iter().collect()
}

fn location(ci: &blazesym::symbolize::CodeInfo<'_>) -> String {
    let file = ci.to_path();
    match ci.line {
        Some(l) => format!("{}:{l}", file.display()),
        None => file.display().to_string(),
    }
}

impl Symbols {
    /// `vmlinux`: a debug kernel image for inlined frames and source lines
    /// (host::debug_vmlinux finds one); without it, kallsyms only.
    pub(crate) fn new(vmlinux: Option<PathBuf>, verbose: bool) -> Self {
        let kernel = vmlinux.map(|v| {
            Source::Kernel(Kernel {
                vmlinux: MaybeDefault::Some(v),
                ..Kernel::default()
            })
        });
        Symbols {
            sym: Symbolizer::new(),
            procs: Symbolizer::new(),
            kernel,
            kcache: HashMap::new(),
            ucache: HashMap::new(),
            fcache: HashMap::new(),
            files: BuildIds::default(),
            known_comms: HashSet::new(),
            target: None,
            programs: HashMap::new(),
            segments: HashMap::new(),
            cached_pids: HashSet::new(),
            verbose,
        }
    }

    /// Symbols of an image file (ELF with DWARF) at its link-time
    /// addresses, instead of the running kernel: for addresses taken from
    /// the image itself, such as a vmlinux's.
    #[cfg(test)]
    pub(crate) fn for_image(image: PathBuf) -> Self {
        let mut s = Self::new(None, false);
        s.kernel = Some(Source::Elf(blazesym::symbolize::source::Elf::new(image)));
        s
    }

    /// Frames of each address through blazesym (looked up at the address
    /// itself; shown at +1, the return address), and whether every lookup
    /// failed.
    fn blaze_frames(
        &self,
        src: &Source<'_>,
        ksyms: &Kallsyms,
        probes: &[u64],
    ) -> (Vec<Option<Vec<String>>>, bool) {
        let (input, kernel) = match src {
            Source::Elf(_) => (Input::VirtOffset(probes), false),
            _ => (Input::AbsAddr(probes), true),
        };
        let res = self.sym.symbolize(src, input).unwrap_or_default();
        let all_failed = res
            .iter()
            .all(|r| matches!(r, Symbolized::Unknown(Reason::IgnoredError)));
        let found = (0..probes.len())
            .map(|i| match res.get(i) {
                Some(Symbolized::Sym(s)) => {
                    let off = s.offset as u64;
                    let off = match kernel {
                        true => kernel_offset(ksyms, probes[i], &s.name, off),
                        false => off,
                    };
                    Some(frames(s, off + 1))
                }
                _ => None,
            })
            .collect();
        (found, all_failed)
    }

    /// Kernel return addresses to frames, caller first. Each is looked up
    /// at address - 1, inside the call instruction.
    pub(crate) fn kernel(&mut self, ksyms: &Kallsyms, addrs: &[u64]) -> Vec<String> {
        let missing = uncached(addrs, |a| self.kcache.contains_key(&a));
        if !missing.is_empty() {
            let probes: Vec<u64> = missing.iter().map(|a| a.saturating_sub(1)).collect();
            let mut found = match &self.kernel {
                Some(src) => {
                    let (found, all_failed) = self.blaze_frames(src, ksyms, &probes);
                    // blazesym's vmlinux path also needs /proc/modules, which
                    // kernels without module support lack: then every lookup
                    // fails, and kallsyms is all there is.
                    if all_failed {
                        if self.verbose {
                            eprintln!("topdown: the vmlinux gave no symbols; using kallsyms");
                        }
                        self.kernel = None;
                    }
                    found
                }
                None => vec![None; probes.len()],
            };
            if self.kernel.is_none() {
                found = missing.iter().map(|&a| kallsyms_frame(ksyms, a)).collect();
            }
            for (a, f) in missing.iter().zip(found) {
                self.kcache
                    .insert(*a, f.unwrap_or_else(|| vec![format!("{a:#x}")]));
            }
        }
        addrs.iter().flat_map(|a| self.kcache[a].clone()).collect()
    }

    /// Knows a uprobe's file `path`, whose function at virtual address
    /// `func` it traces: by its build ID, so that frames in it are named
    /// after the process that ran it has gone; and its call sites in it,
    /// from where the process had FUNC.
    pub(crate) fn know_target(&mut self, path: &Path, func: u64) {
        self.files.note(path);
        self.target = Some((path.to_path_buf(), func));
    }

    /// Where return address `ret` of a process gone before its maps were
    /// read is in the target file, and the virtual address there: FUNC was
    /// at `func_at` there, so the file was mapped `func_at - FUNC` from its
    /// own addresses. (A caller in another file is outside the file's
    /// symbols: elf_caller finds none.)
    fn in_target(&self, ret: u64, func_at: u64) -> Option<(PathBuf, u64)> {
        let (path, func) = self.target.clone()?;
        Some((path, ret.checked_sub(func_at.checked_sub(func)?)?))
    }

    /// Where return address `ret` of a process gone before its maps were
    /// read is, in its program's own text (a program calling a library's
    /// FUNC): the program's file, found by name (among the files topdown
    /// has met, then along PATH) and inode, and the virtual address there,
    /// as far from its lowest executable segment as `ret` is from the
    /// process's start_code.
    fn in_program(&mut self, ret: u64, code: &ProcessCode) -> Option<(PathBuf, u64)> {
        if !(code.start_code..code.end_code).contains(&ret) || code.exe_name.is_empty() {
            return None;
        }
        let key = (code.exe_dev, code.exe_ino);
        if !self.programs.contains_key(&key) {
            let found = self.files.find(&code.exe_name, code.exe_ino).or_else(|| {
                let path = std::env::var("PATH").unwrap_or_default();
                self.files.note_command(&code.exe_name, &path);
                self.files.find(&code.exe_name, code.exe_ino)
            })?;
            let lowest = user::lowest_exec_vaddr(self.segments(&found))?;
            self.programs.insert(key, (lowest, found));
        }
        let (lowest, path) = self.programs.get(&key)?.clone();
        Some((path, ret.checked_sub(code.start_code)? + lowest))
    }

    /// The loadable segments of the ELF file `path`, read once.
    fn segments(&mut self, path: &Path) -> &[user::Segment] {
        segments_of(&mut self.segments, path)
    }

    /// The function a return address lies in, at virtual address `vaddr`
    /// of the ELF file `path`, and its frame: looked up at `vaddr` - 1, in
    /// the call, as a live process's return addresses are (see user_addrs).
    fn elf_caller(&mut self, path: &Path, vaddr: u64) -> Option<(String, Vec<String>)> {
        let src = Source::Elf(Elf::new(path));
        let res = self
            .sym
            .symbolize(&src, Input::VirtOffset(&[vaddr.checked_sub(1)?]))
            .ok()?;
        match res.first()? {
            Symbolized::Sym(caller) => Some((
                caller.name.to_string(),
                frames(caller, caller.offset as u64 + 1),
            )),
            _ => None,
        }
    }

    /// Remembers a process's mappings while it is alive, so its stacks can
    /// be symbolized after it exits; and the build IDs of the files it
    /// maps, for the frames the kernel gives by build ID.
    pub(crate) fn remember_process(&mut self, pid: u32) {
        if self.cached_pids.is_empty() {
            // The libraries topdown maps itself (libc among them) are
            // those most processes map.
            self.files.note_process(std::process::id());
        }
        if !self.cached_pids.contains(&pid) && self.cached_pids.len() >= build_ids::MAX_PROCESSES {
            // Build ID frames keep their names: files stay known.
            self.procs = Symbolizer::new();
            self.cached_pids.clear();
            self.ucache.clear();
        }
        if self.cached_pids.insert(pid) {
            // A process that is already gone has nothing left to cache.
            let r = self
                .procs
                .cache(&cache::Cache::Process(cache::Process::new(Pid::from(pid))));
            if let (Err(e), true) = (r, self.verbose) {
                eprintln!("topdown: cannot keep the mappings of pid {pid}: {e}");
            }
            // Its files' paths, after what names its call sites.
            self.files.note_process(pid);
        }
    }

    /// The function user address `addr` of process `pid` lies in. Where its
    /// mappings, kept since the process was first seen, do not cover it
    /// (a library mapped since), they are read again.
    fn user_function(&mut self, pid: u32, addr: u64) -> Option<String> {
        self.remember_process(pid);
        let name = |sym: &Symbolizer| {
            let src = Source::Process(Process::new(Pid::from(pid)));
            let exited = Source::Process(Process {
                map_files: false,
                ..Process::new(Pid::from(pid))
            });
            let addrs = [addr];
            let res = sym
                .symbolize(&src, Input::AbsAddr(&addrs))
                .or_else(|_| sym.symbolize(&exited, Input::AbsAddr(&addrs)))
                .ok()?;
            match res.into_iter().next()? {
                Symbolized::Sym(s) => Some(s.name.to_string()),
                Symbolized::Unknown(_) => None,
            }
        };
        if let Some(n) = name(&self.procs) {
            return Some(n);
        }
        let fresh = cache::Cache::Process(cache::Process::new(Pid::from(pid)));
        self.procs.cache(&fresh).ok()?;
        name(&self.procs)
    }

    /// Knows the program a process named `comm` may have run, from the
    /// directories of PATH: for a process gone before its maps were read.
    pub(crate) fn know_command(&mut self, comm: &str) {
        // Asked once a sample: no allocation for a name looked for already.
        if !self.known_comms.contains(comm) {
            self.known_comms.insert(comm.to_string());
            let path = std::env::var("PATH").unwrap_or_default();
            self.files.note_command(comm, &path);
        }
    }

    /// User frames of process `pid` to names, innermost first: addresses
    /// through the process's maps, build ID frames through their files.
    /// `first_is_ip`: the first frame is where the process was (a system
    /// call's), not a return address as all the others are.
    pub(crate) fn user(&mut self, pid: u32, stack: &[UserFrame], first_is_ip: bool) -> Vec<String> {
        let frames: Vec<(UserFrame, bool)> = stack
            .iter()
            .enumerate()
            .map(|(i, f)| (*f, first_is_ip && i == 0))
            .collect();
        for is_ip in [true, false] {
            let addrs: Vec<u64> = frames
                .iter()
                .filter(|(_, ip)| *ip == is_ip)
                .filter_map(|(f, _)| f.addr())
                .collect();
            self.user_addrs(pid, &addrs, is_ip);
        }
        self.file_frames(&frames);
        frames
            .iter()
            .flat_map(|&(f, ip)| match f {
                UserFrame::Addr(a) => self.ucache[&(pid, a, ip)].clone(),
                UserFrame::File { build_id, offset } => {
                    self.fcache[&(build_id, offset, ip)].clone()
                }
            })
            .collect()
    }

    /// Names the build ID frames of `stack` not named yet: from the file
    /// of that build ID, or as `file+0xOFF` where the file has no symbol
    /// there, `[unknown]` past its end, or `[build-id:ID]+0xOFF` where
    /// topdown has not met the file.
    fn file_frames(&mut self, stack: &[(UserFrame, bool)]) {
        let mut missing: HashMap<BuildId, Vec<(u64, bool)>> = HashMap::new();
        for &(f, ip) in stack {
            if let UserFrame::File { build_id, offset } = f {
                if !self.fcache.contains_key(&(build_id, offset, ip)) {
                    let offs = missing.entry(build_id).or_default();
                    if !offs.contains(&(offset, ip)) {
                        offs.push((offset, ip));
                    }
                }
            }
        }
        for (id, wanted) in missing {
            let offsets: Vec<u64> = wanted
                .iter()
                .map(|&(off, ip)| off.saturating_sub(back(ip)))
                .collect();
            let path = self.files.path(&id).map(Path::to_path_buf);
            // A frame past the file's end is none of its: the kernel found
            // the mapping above a bogus address (a frame pointer chain
            // run past its end).
            let size = path
                .as_ref()
                .and_then(|p| std::fs::metadata(p).ok())
                .map_or(u64::MAX, |m| m.len());
            let res = match &path {
                Some(p) => {
                    let src = Source::Elf(Elf::new(p));
                    match self.sym.symbolize(&src, Input::FileOffset(&offsets)) {
                        Ok(r) => r,
                        Err(e) => {
                            if self.verbose {
                                eprintln!("topdown: cannot symbolize {}: {e}", p.display());
                            }
                            Vec::new()
                        }
                    }
                }
                None => Vec::new(),
            };
            for (i, &(off, ip)) in wanted.iter().enumerate() {
                let f = match (res.get(i), &path) {
                    (Some(Symbolized::Sym(s)), _) => frames(s, s.offset as u64 + back(ip)),
                    _ if off >= size => vec![crate::reasons::UNKNOWN_NAME.to_string()],
                    (_, Some(p)) => vec![place(&mut self.segments, p, off)],
                    (_, None) => vec![format!("[build-id:{}]+{off:#x}", build_ids::hex(&id))],
                };
                self.fcache.insert((id, off, ip), f);
            }
        }
    }

    /// Names user addresses of process `pid` not named yet: instruction
    /// pointers (`is_ip`), or return addresses.
    fn user_addrs(&mut self, pid: u32, addrs: &[u64], is_ip: bool) {
        let missing = uncached(addrs, |a| self.ucache.contains_key(&(pid, a, is_ip)));
        if !missing.is_empty() {
            let probes: Vec<u64> = missing
                .iter()
                .map(|a| a.saturating_sub(back(is_ip)))
                .collect();
            // map_files reaches binaries in other mount namespaces, but only
            // while the process lives; after it exits, its cached mappings
            // and the paths in them are all there is.
            let live = Source::Process(Process::new(Pid::from(pid)));
            let exited = Source::Process(Process {
                map_files: false,
                ..Process::new(Pid::from(pid))
            });
            let res = self
                .procs
                .symbolize(&live, Input::AbsAddr(&probes))
                .or_else(|_| self.procs.symbolize(&exited, Input::AbsAddr(&probes)));
            let res = match res {
                Ok(r) => r,
                Err(e) => {
                    if self.verbose {
                        eprintln!("topdown: cannot symbolize user addresses of pid {pid}: {e}");
                    }
                    Vec::new()
                }
            };
            if self.verbose {
                for (a, r) in missing.iter().zip(&res) {
                    if let Symbolized::Unknown(why) = r {
                        eprintln!("topdown: pid {pid} address {a:#x}: not symbolized ({why:?})");
                    }
                }
            }
            for (i, a) in missing.iter().enumerate() {
                let located = self
                    .files
                    .locate(pid, *a)
                    .map(|(f, o)| (f.to_path_buf(), o));
                let f = match (res.get(i), located) {
                    (Some(Symbolized::Sym(s)), _) => frames(s, s.offset as u64 + back(is_ip)),
                    (_, Some((file, off))) => vec![place(&mut self.segments, &file, off)],
                    (_, None) => vec![crate::reasons::UNKNOWN_NAME.to_string()],
                };
                self.ucache.insert((pid, *a, is_ip), f);
            }
        }
    }
}

/// A return address as `function+offset` from kallsyms.
fn kallsyms_frame(ksyms: &Kallsyms, ret: u64) -> Option<Vec<String>> {
    let s = ksyms.caller_of(ret)?;
    Some(vec![format!("{}+{:#x}", s.name, ret - s.addr)])
}

impl SourceLookup for Symbols {
    /// -1: the call instruction, not what follows it.
    fn user_caller(
        &mut self,
        pid: u32,
        ret: u64,
        code: &dyn Fn() -> Option<ProcessCode>,
    ) -> Option<String> {
        let name = self.user_function(pid, ret.checked_sub(1)?);
        // Its frame too, while the process may still be there: a stack
        // shows the caller by its address (see Stacks::symbolize).
        self.user_addrs(pid, &[ret], false);
        if name.is_some() {
            return name;
        }
        // Gone before its maps were read: where the uprobe saw its code.
        let code = code();
        let places: Vec<(PathBuf, u64)> = code
            .iter()
            .flat_map(|c| [self.in_target(ret, c.func_at), self.in_program(ret, c)])
            .flatten()
            .collect();
        for (path, vaddr) in &places {
            if let Some((name, frame)) = self.elf_caller(path, *vaddr) {
                self.ucache.insert((pid, ret, false), frame);
                return Some(name);
            }
        }
        // No symbol (a stripped program's static function): the call site
        // by its file and place, a reason of its own, never one [unknown].
        let place = match self.files.locate(pid, ret) {
            Some((file, off)) => {
                let file = file.to_path_buf();
                Some(place(&mut self.segments, &file, off))
            }
            None => places
                .iter()
                .find(|(path, vaddr)| {
                    let segs = self.segments(path);
                    segs.iter()
                        .any(|s| (s.vaddr..s.vaddr + s.filesz).contains(vaddr))
                })
                .map(|(path, vaddr)| file_frame(path, *vaddr)),
        }?;
        self.ucache.insert((pid, ret, false), vec![place.clone()]);
        Some(place)
    }

    /// The kernel address's place in the source: only a vmlinux with DWARF
    /// gives inlined functions and files (kallsyms says nothing more than
    /// the caller table already knows).
    fn source(&mut self, addr: u64) -> Option<SourceLoc> {
        let src = self.kernel.as_ref()?;
        let input = match src {
            Source::Elf(_) => Input::VirtOffset(std::slice::from_ref(&addr)),
            _ => Input::AbsAddr(std::slice::from_ref(&addr)),
        };
        let res = self.sym.symbolize(src, input).ok()?;
        let Some(Symbolized::Sym(sym)) = res.first() else {
            return None;
        };
        let mut functions: Vec<String> = sym
            .inlined
            .iter()
            .rev()
            .map(|f| f.name.to_string())
            .collect();
        functions.push(sym.name.to_string());
        let files = sym
            .code_info
            .iter()
            .map(|ci| ci.to_path().display().to_string())
            .chain(
                sym.inlined
                    .iter()
                    .filter_map(|f| f.code_info.as_ref())
                    .map(|ci| ci.to_path().display().to_string()),
            )
            .collect();
        Some(SourceLoc { functions, files })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A function of this test binary's, found by its name.
    #[no_mangle]
    #[inline(never)]
    extern "C" fn td_build_id_probe() -> u64 {
        std::hint::black_box(7)
    }

    /// A caller of td_build_id_probe's, for a return address in it.
    #[no_mangle]
    #[inline(never)]
    extern "C" fn td_site_caller() -> u64 {
        td_build_id_probe() + 1
    }

    #[test]
    fn a_gone_process_site_in_the_target_file_is_named_from_funcs_address() {
        assert_eq!(td_site_caller(), 8);
        let exe = std::env::current_exe().unwrap();
        let inspector = blazesym::inspect::Inspector::new();
        let src = blazesym::inspect::source::Source::Elf(blazesym::inspect::source::Elf::new(&exe));
        let func = inspector.lookup(&src, &["td_build_id_probe"]).unwrap()[0][0].addr;
        // Where this process has them (the test binary is position independent).
        let func_at = td_build_id_probe as *const () as usize as u64;
        let ret = td_site_caller as *const () as usize as u64 + 4;
        // No such process: its maps cannot be read.
        let gone = u32::MAX - 1;
        let mut s = Symbols::new(None, false);
        s.know_target(&exe, func);
        let at = |func_at| ProcessCode {
            func_at,
            ..ProcessCode::default()
        };
        assert_eq!(
            s.user_caller(gone, ret, &|| Some(at(func_at))).as_deref(),
            Some("td_site_caller")
        );
        // Its frame in the stacks too.
        // At the return address's own offset.
        assert_eq!(
            s.user(gone, &[UserFrame::Addr(ret)], false),
            vec!["td_site_caller+0x4".to_string()]
        );
        // Without FUNC's address, or outside the file: not named.
        assert_eq!(s.user_caller(gone, ret, &|| None), None);
        let heap = Box::new(0u64);
        let outside = &*heap as *const u64 as u64;
        assert_eq!(s.user_caller(gone, outside, &|| Some(at(func_at))), None);
    }

    #[test]
    fn a_gone_process_site_in_its_program_is_named_from_its_code_s_place() {
        use std::os::unix::fs::MetadataExt;
        assert_eq!(td_site_caller(), 8);
        let exe = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
        let inspector = blazesym::inspect::Inspector::new();
        let src = blazesym::inspect::source::Source::Elf(blazesym::inspect::source::Elf::new(&exe));
        let func = inspector.lookup(&src, &["td_build_id_probe"]).unwrap()[0][0].addr;
        // This process's load bias, and where the kernel's start_code is.
        let bias = td_build_id_probe as *const () as usize as u64 - func;
        let start_code = bias + user::lowest_exec_vaddr(&user::segments(&exe)).unwrap();
        let ret = td_site_caller as *const () as usize as u64 + 4;
        let code = ProcessCode {
            // FUNC's file is another (a library): not this one.
            func_at: 0,
            start_code,
            end_code: start_code + (64 << 20),
            exe_dev: 0,
            exe_ino: std::fs::metadata(&exe).unwrap().ino(),
            exe_name: exe.file_name().unwrap().to_string_lossy().into_owned(),
        };
        let gone = u32::MAX - 1;
        let mut s = Symbols::new(None, false);
        // Met as a file a live process mapped.
        s.files.note(&exe);
        assert_eq!(
            s.user_caller(gone, ret, &|| Some(code.clone())).as_deref(),
            Some("td_site_caller")
        );
        // Another file of that name (another inode), or outside the text:
        // not named.
        let mut s = Symbols::new(None, false);
        s.files.note(&exe);
        let other = ProcessCode {
            exe_ino: code.exe_ino + 1,
            ..code.clone()
        };
        assert_eq!(s.user_caller(gone, ret, &|| Some(other.clone())), None);
        let below = ProcessCode {
            start_code: ret + 1,
            ..code.clone()
        };
        assert_eq!(s.user_caller(gone, ret, &|| Some(below.clone())), None);
    }

    #[test]
    fn addresses_without_a_symbol_are_shown_by_file_or_unknown() {
        let pid = std::process::id();
        let exe = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        // The ELF header's page: the executable's first mapping, no symbol.
        let header = build_ids::mappings(&maps)
            .into_iter()
            .find(|m| m.path == exe && m.offset == 0)
            .unwrap();
        let heap = Box::new(0u64);
        let mut s = Symbols::new(None, false);
        s.remember_process(pid);
        let got = s.user(
            pid,
            &[
                UserFrame::Addr(header.start + 0x10),
                UserFrame::Addr(&*heap as *const u64 as u64),
            ],
            false,
        );
        let name = exe.file_name().unwrap().to_string_lossy();
        assert_eq!(got, vec![format!("{name}+0x10"), "[unknown]".to_string()]);
    }

    #[test]
    fn build_id_frames_are_named_from_their_file() {
        assert_eq!(td_build_id_probe(), 7);
        let exe = std::env::current_exe().unwrap();
        let id = blazesym::helper::read_elf_build_id(&exe).unwrap().unwrap();
        let build_id = build_ids::padded(&id).unwrap();
        let inspector = blazesym::inspect::Inspector::new();
        let src = blazesym::inspect::source::Source::Elf(blazesym::inspect::source::Elf::new(&exe));
        let found = inspector.lookup(&src, &["td_build_id_probe"]).unwrap();
        let offset = found[0][0].file_offset.unwrap();
        let size = std::fs::metadata(&exe).unwrap().len();

        let mut s = Symbols::new(None, false);
        let stack = [
            UserFrame::File { build_id, offset },
            UserFrame::File {
                build_id,
                offset: size + 0x1000,
            },
            UserFrame::File {
                build_id: [0xab; 20],
                offset: 0x10,
            },
        ];
        // Not met yet: by build ID.
        let unknown = format!("[build-id:{}]+{offset:#x}", build_ids::hex(&build_id));
        assert_eq!(s.user(1, &stack[..1], true), vec![unknown]);
        let mut s = Symbols::new(None, false);
        s.know_target(&exe, 0);
        // The first frame where the process was; the others return addresses.
        assert_eq!(
            s.user(1, &stack, true),
            vec![
                "td_build_id_probe+0x0".to_string(),
                "[unknown]".into(),
                format!("[build-id:{}]+0x10", "ab".repeat(20)),
            ]
        );
        // A return address inside it: its own offset, looked up in the call.
        let ret = [UserFrame::File {
            build_id,
            offset: offset + 5,
        }];
        assert_eq!(s.user(1, &ret, false), vec!["td_build_id_probe+0x5"]);
        // One just past a function's end, where a call was its last
        // instruction, is still that function's.
        let start = [UserFrame::File { build_id, offset }];
        assert_ne!(s.user(1, &start, false), vec!["td_build_id_probe+0x0"]);
    }

    #[test]
    fn the_processes_kept_are_bounded() {
        let mut s = Symbols::new(None, false);
        // No such processes: each is noted, and nothing read.
        let first = u32::MAX - 3 * build_ids::MAX_PROCESSES as u32;
        for pid in first..first + build_ids::MAX_PROCESSES as u32 {
            s.remember_process(pid);
        }
        assert_eq!(s.cached_pids.len(), build_ids::MAX_PROCESSES);
        s.remember_process(first);
        assert_eq!(s.cached_pids.len(), build_ids::MAX_PROCESSES);
        // One more: all are forgotten, and it is the first kept.
        s.remember_process(first + build_ids::MAX_PROCESSES as u32);
        assert_eq!(s.cached_pids.len(), 1);
    }

    #[test]
    fn without_a_vmlinux_kernel_frames_come_from_kallsyms() {
        let k = Kallsyms::parse(
            "ffffffff81000000 T do_huge_pmd_anonymous_page\nffffffff81001000 T next_fn\n",
        );
        let mut s = Symbols::new(None, false);
        // A return address at a function's end belongs to it (looked up at -1).
        assert_eq!(
            s.kernel(&k, &[0xffffffff810002bd, 0xffffffff81001000, 0x1234]),
            [
                "do_huge_pmd_anonymous_page+0x2bd",
                "do_huge_pmd_anonymous_page+0x1000",
                "0x1234"
            ]
        );
        assert!(s.source(0xffffffff81000010).is_none());
    }

    #[test]
    fn kernel_offsets_from_a_vmlinux_are_taken_from_kallsyms() {
        let k = Kallsyms::parse(
            "ffffffff9a000000 t collapse_huge_page.isra.0\nffffffff9a001000 T next_fn\n",
        );
        // blazesym's offset carries the KASLR slide (here 0x19000000).
        let slid = 0x19000000 + 0x2bc;
        assert_eq!(
            kernel_offset(&k, 0xffffffff9a0002bc, "collapse_huge_page.isra.0", slid),
            0x2bc
        );
        assert_eq!(
            kernel_offset(&k, 0xffffffff9a0002bc, "collapse_huge_page", slid),
            0x2bc
        );
        // Another function (kallsyms and the vmlinux disagree): blazesym's.
        assert_eq!(kernel_offset(&k, 0xffffffff9a0002bc, "other", 7), 7);
        assert_eq!(kernel_offset(&k, 0x1000, "other", 7), 7);
    }
}
