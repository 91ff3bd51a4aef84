//! Addresses to frame names with blazesym: one symbolizer for the whole run
//! and a cache by address, so a stack seen again costs no lookups.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use blazesym::symbolize::source::{Kernel, Process, Source};
use blazesym::symbolize::{cache, Input, Sym, Symbolized, Symbolizer};
use blazesym::{MaybeDefault, Pid};

pub struct Symbols {
    sym: Symbolizer,
    kernel: Source<'static>,
    kcache: HashMap<u64, Vec<String>>,
    ucache: HashMap<(u32, u64), Vec<String>>,
    cached_pids: HashSet<u32>,
    /// Say why symbolization failed (--verbose).
    verbose: bool,
}

/// Frames for one symbolized address, innermost first: inlined callees
/// (from DWARF, when a debug vmlinux is present) then the function itself.
fn frames(sym: &Sym<'_>, shift: u64) -> Vec<String> {
    let mut out: Vec<String> = sym
        .inlined
        .iter()
        .rev()
        .map(|f| match &f.code_info {
            Some(ci) => format!("{} (inlined) [{}]", f.name, location(ci)),
            None => format!("{} (inlined)", f.name),
        })
        .collect();
    let base = format!("{}+{:#x}", sym.name, sym.offset as u64 + shift);
    out.push(match &sym.code_info {
        Some(ci) => format!("{base} [{}]", location(ci)),
        None => base,
    });
    out
}

fn location(ci: &blazesym::symbolize::CodeInfo<'_>) -> String {
    let file = ci.to_path();
    match ci.line {
        Some(l) => format!("{}:{l}", file.display()),
        None => file.display().to_string(),
    }
}

impl Symbols {
    /// `vmlinux`: a debug kernel image for inlined frames and source lines;
    /// without one blazesym looks in the usual places, then uses kallsyms.
    pub fn new(vmlinux: Option<PathBuf>, verbose: bool) -> Self {
        let kernel = Kernel {
            vmlinux: vmlinux.map_or(MaybeDefault::Default, MaybeDefault::Some),
            ..Kernel::default()
        };
        Symbols {
            sym: Symbolizer::new(),
            kernel: Source::Kernel(kernel),
            kcache: HashMap::new(),
            ucache: HashMap::new(),
            cached_pids: HashSet::new(),
            verbose,
        }
    }

    /// Kernel return addresses to frames, caller first. Each is looked up
    /// at address - 1, inside the call instruction.
    pub fn kernel(&mut self, addrs: &[u64]) -> Vec<String> {
        let missing: Vec<u64> = addrs
            .iter()
            .filter(|a| !self.kcache.contains_key(a))
            .copied()
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        if !missing.is_empty() {
            let probes: Vec<u64> = missing.iter().map(|a| a.saturating_sub(1)).collect();
            let res = self
                .sym
                .symbolize(&self.kernel, Input::AbsAddr(&probes))
                .unwrap_or_default();
            for (i, a) in missing.iter().enumerate() {
                let f = match res.get(i) {
                    Some(Symbolized::Sym(s)) => frames(s, 1),
                    _ => vec![format!("{a:#x}")],
                };
                self.kcache.insert(*a, f);
            }
        }
        addrs.iter().flat_map(|a| self.kcache[a].clone()).collect()
    }

    /// Remembers a process's mappings while it is alive, so its stacks can
    /// be symbolized after it exits.
    pub fn remember_process(&mut self, pid: u32) {
        if self.cached_pids.insert(pid) {
            // A process that is already gone has nothing left to cache.
            let r = self
                .sym
                .cache(&cache::Cache::Process(cache::Process::new(Pid::from(pid))));
            if let (Err(e), true) = (r, self.verbose) {
                eprintln!("topdown: cannot keep the mappings of pid {pid}: {e}");
            }
        }
    }

    /// User addresses of process `pid` to frames, innermost first.
    pub fn user(&mut self, pid: u32, addrs: &[u64]) -> Vec<String> {
        let missing: Vec<u64> = addrs
            .iter()
            .filter(|a| !self.ucache.contains_key(&(pid, **a)))
            .copied()
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        if !missing.is_empty() {
            // map_files reaches binaries in other mount namespaces, but only
            // while the process lives; after it exits, its cached mappings
            // and the paths in them are all there is.
            let live = Source::Process(Process::new(Pid::from(pid)));
            let exited = Source::Process(Process {
                map_files: false,
                ..Process::new(Pid::from(pid))
            });
            let res = self
                .sym
                .symbolize(&live, Input::AbsAddr(&missing))
                .or_else(|_| self.sym.symbolize(&exited, Input::AbsAddr(&missing)));
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
                let f = match res.get(i) {
                    Some(Symbolized::Sym(s)) => frames(s, 0),
                    _ => vec![format!("{a:#x}")],
                };
                self.ucache.insert((pid, *a), f);
            }
        }
        addrs
            .iter()
            .flat_map(|a| self.ucache[&(pid, *a)].clone())
            .collect()
    }
}
