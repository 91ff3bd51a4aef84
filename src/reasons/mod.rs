//! Reason slots: the names behind the per-CPU counter array, and the
//! mapping from a caller's return address to a slot.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::bpf::abi::{FIRST_REASON, NR_SLOTS, SLOT_NOT_FOUND};
use crate::bpf::deep::Deep;
use crate::error::{Error, Result};
use crate::kallsyms::{base_name, Kallsyms};
use crate::tailcall::{Caller, TailCalls};

/// Named reasons at most, leaving one slot for OTHER.
pub(crate) const MAX_REASONS: usize = NR_SLOTS - FIRST_REASON as usize - 1;

pub(crate) const NOT_FOUND_NAME: &str = "[caller not found]";
/// What `--stack-on` also takes for the calls whose caller is not found.
pub(crate) const NOT_FOUND_ALIAS: &str = "not-found";

/// Whether `name` names the calls whose caller is not found, for
/// `--stack-on`: the report's name or its alias.
pub(crate) fn is_not_found(name: &str) -> bool {
    name == NOT_FOUND_NAME || name.eq_ignore_ascii_case(NOT_FOUND_ALIAS)
}
pub(crate) const SITES_FULL_NAME: &str = "[site table full]";
pub(crate) const OTHER_NAME: &str = "OTHER";
/// How a reason named after a tail call is marked.
pub(crate) const TAIL_MARK: &str = "(tail call)";
/// After the caller's name, for a site whose call instruction is indirect:
/// the call may have reached FUNC through the pointer or through a function
/// that jumped to it, and no instruction left tells which.
pub(crate) const INDIRECT_MARK: &str = "\u{2192} indirect";
/// Reason for return addresses outside every kallsyms symbol.
pub(crate) const UNKNOWN_NAME: &str = "[unknown]";

/// The names of the slots in use, allocated as reasons appear. Several
/// topdown processes reading one pinned instance agree on slots through
/// its names map: a slot claimed there by another process is adopted here
/// (see `Mapper::claim`).
#[derive(Debug)]
pub(crate) struct Reasons {
    /// By slot; None: free.
    names: Vec<Option<String>>,
    by_name: HashMap<String, u32>,
    max: usize,
    other: Option<u32>,
    merged: BTreeSet<String>,
}

impl Reasons {
    /// A table that names at most `max` reasons; more go to OTHER.
    pub(crate) fn new(max: usize) -> Self {
        Reasons {
            names: vec![Some(NOT_FOUND_NAME.into()), Some(SITES_FULL_NAME.into())],
            by_name: HashMap::new(),
            max: max.min(MAX_REASONS),
            other: None,
            merged: BTreeSet::new(),
        }
    }

    /// The slot of a reason, allocated on first use.
    pub(crate) fn slot(&mut self, name: &str) -> u32 {
        if let Some(&s) = self.by_name.get(name) {
            return s;
        }
        if self.by_name.len() - usize::from(self.other.is_some()) >= self.max {
            self.merged.insert(name.to_string());
            return self.other_slot();
        }
        self.push(name)
    }

    fn other_slot(&mut self) -> u32 {
        match self.other {
            Some(s) => s,
            None => {
                let s = self.push(OTHER_NAME);
                self.other = Some(s);
                s
            }
        }
    }

    /// Names the first free slot.
    fn push(&mut self, name: &str) -> u32 {
        let s = match self.names.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                self.names.push(None);
                self.names.len() - 1
            }
        };
        self.set(s as u32, name);
        s as u32
    }

    fn set(&mut self, slot: u32, name: &str) {
        let i = slot as usize;
        if self.names.len() <= i {
            self.names.resize(i + 1, None);
        }
        self.names[i] = Some(name.to_string());
        self.by_name.insert(name.to_string(), slot);
        if name == OTHER_NAME {
            self.other = Some(slot);
        }
    }

    /// Takes another process's naming of `slot`. A name this table had
    /// given the slot loses it (and is allocated anew when next asked for);
    /// a name this table had elsewhere moves to the slot.
    pub(crate) fn adopt(&mut self, slot: u32, name: &str) {
        if self.names.get(slot as usize).and_then(Option::as_deref) == Some(name) {
            return;
        }
        if let Some(Some(old)) = self.names.get(slot as usize).cloned() {
            self.by_name.remove(&old);
            if old == OTHER_NAME {
                self.other = None;
            }
        }
        if let Some(prev) = self.by_name.get(name).copied() {
            self.names[prev as usize] = None;
        }
        self.set(slot, name);
    }

    /// The slot of an existing reason.
    pub(crate) fn lookup(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    pub(crate) fn name(&self, slot: u32) -> &str {
        self.names
            .get(slot as usize)
            .and_then(Option::as_deref)
            .unwrap_or("?")
    }

    /// Whether `slot` has a name.
    pub(crate) fn known(&self, slot: u32) -> bool {
        self.names.get(slot as usize).is_some_and(Option::is_some)
    }

    /// Slots and names of the reasons, without the special slots.
    pub(crate) fn named(&self) -> impl Iterator<Item = (u32, &str)> {
        self.names
            .iter()
            .enumerate()
            .skip(FIRST_REASON as usize)
            .filter_map(|(s, n)| Some((s as u32, n.as_deref()?)))
    }

    /// Names of the reasons, without the special slots.
    pub(crate) fn reason_names(&self) -> impl Iterator<Item = &str> {
        self.named().map(|(_, n)| n)
    }

    /// Callers merged into OTHER because the table was full.
    pub(crate) fn merged(&self) -> &BTreeSet<String> {
        &self.merged
    }

    /// OTHER's slot, once it has one.
    pub(crate) fn other(&self) -> Option<u32> {
        self.other
    }

    pub(crate) fn is_special(slot: u32) -> bool {
        slot < FIRST_REASON
    }
}

/// Where an address lies in the source, from debug info: the functions
/// inlined there, innermost first, then the function itself; and the
/// source files of those locations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SourceLoc {
    pub(crate) functions: Vec<String>,
    pub(crate) files: Vec<String>,
}

/// Looks up source locations (a symbolizer with a debug vmlinux).
pub(crate) trait SourceLookup {
    fn source(&mut self, addr: u64) -> Option<SourceLoc>;

    /// The function that user return address `ret` of process `pid` lies
    /// in (a uprobe's caller); `code`: where that process had its code,
    /// if the uprobe recorded it (a map lookup, made only where the
    /// process's maps cannot name the caller).
    fn user_caller(
        &mut self,
        _pid: u32,
        _ret: u64,
        _code: &dyn Fn() -> Option<ProcessCode>,
    ) -> Option<String> {
        None
    }
}

/// Where a process that called a uprobe's function had its code, as the
/// program found it at the call: enough to name a call site once the
/// process, and its maps, are gone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ProcessCode {
    /// The traced function's address in the process.
    pub(crate) func_at: u64,
    /// The program's executable text: from its lowest executable
    /// segment's address (moved by the load bias) to its end.
    pub(crate) start_code: u64,
    pub(crate) end_code: u64,
    /// The program's file: its device (the kernel's dev_t, major << 20 |
    /// minor), inode and name (without its directory).
    pub(crate) exe_dev: u32,
    pub(crate) exe_ino: u64,
    pub(crate) exe_name: String,
}

/// A call site pattern that only debug info can match.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum SourcePattern {
    /// A function inlined at the call site (or the caller itself).
    Function(String),
    /// A source file whose path ends with this.
    File(String),
}

impl SourcePattern {
    fn matches(&self, loc: &SourceLoc) -> bool {
        match self {
            SourcePattern::File(path) => loc.files.iter().any(|f| f.ends_with(path.as_str())),
            SourcePattern::Function(name) => loc.functions.iter().any(|f| base_name(f) == name),
        }
    }
}

/// What claiming a slot's name found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The slot now has the name (it was free, or already had it).
    Ours,
    /// Another process named the slot first.
    Taken(String),
    /// The name has this other slot (given by the programs or another
    /// process first); the slot asked for was given back.
    Elsewhere(u32),
}

/// The table of reason names that the processes reading one BPF object
/// share (the names map, `bpf::maps::Maps`), so that they agree on slots.
pub(crate) trait NameTable {
    /// Every slot's name recorded so far, by slot.
    fn names(&self) -> Result<Vec<(u32, String)>>;
    /// Records `name` for `slot` unless another process named it first.
    fn claim_name(&self, slot: u32, name: &str) -> Result<Claim>;
    /// The callers the programs merged into reason `slot` (OTHER), by name.
    fn merged_into(&self, slot: u32) -> Result<Vec<String>>;
}

/// Maps call sites to reason slots: through the profile's caller table
/// where it names the caller, else one reason per caller function.
#[derive(Debug)]
pub(crate) struct Mapper {
    pub(crate) reasons: Reasons,
    by_caller: HashMap<String, u32>,
    /// Inlined callers and source files, matched through debug info
    /// before the caller table: they are the more specific.
    by_source: Vec<(SourcePattern, u32)>,
    /// The deeper-frame rules, for the calls counted before the BPF side
    /// had them (empty for a pinned instance: its rules came before load).
    pub(crate) deep: Deep,
    /// Tells tail calls apart by the call instruction before a new site
    /// (None where the kernel's text cannot be read).
    pub(crate) tail: Option<TailCalls>,
    /// The (slot, name) pairs this process has found in the names map:
    /// names are never taken back, so each is claimed once, not once per
    /// new site (every bpf() call of a poll is a call topdown makes while
    /// its own calls take the counting program's slow path).
    claimed: HashSet<(u32, String)>,
    /// OTHER's count when the callers merged into it were last read.
    other_read: u64,
}

impl Mapper {
    /// One reason per caller function.
    pub(crate) fn auto(max_reasons: usize) -> Self {
        Mapper {
            reasons: Reasons::new(max_reasons),
            by_caller: HashMap::new(),
            by_source: Vec::new(),
            deep: Deep::default(),
            tail: None,
            claimed: HashSet::new(),
            other_read: 0,
        }
    }

    /// The mapping recorded for a pinned instance: the slots its names map
    /// gives, then its routes by caller name and by source pattern.
    pub(crate) fn from_routes(
        max_reasons: usize,
        names: &[(u32, String)],
        routes: &[(String, String)],
        source_routes: &[(SourcePattern, String)],
    ) -> Self {
        let mut m = Mapper::auto(max_reasons);
        for (slot, name) in names {
            m.reasons.adopt(*slot, name);
        }
        for (caller, reason) in routes {
            m.route(caller, reason);
        }
        for (pattern, reason) in source_routes {
            m.route_source(pattern.clone(), reason);
        }
        m
    }

    /// Routes calls from `caller` (a function name, clones folded) to `reason`.
    pub(crate) fn route(&mut self, caller: &str, reason: &str) -> u32 {
        let slot = self.reasons.slot(reason);
        self.by_caller.insert(caller.to_string(), slot);
        slot
    }

    /// Caller functions whose calls count as `slot` (without deeper
    /// rules): those routed to it or, for a reason of auto mode, the
    /// function it is named after.
    pub(crate) fn callers_of(&self, slot: u32) -> Vec<&str> {
        let mut v: Vec<&str> = self
            .by_caller
            .iter()
            .filter(|(_, &s)| s == slot)
            .map(|(c, _)| c.as_str())
            .collect();
        if v.is_empty() && !Reasons::is_special(slot) {
            v.push(self.reasons.name(slot));
        }
        v.sort_unstable();
        v
    }

    /// Makes the names map agree with this table on `slot` (as `classify`
    /// just allocated it): claims it there, or, if another process named the
    /// slot first, adopts that and allocates the name again. Returns the
    /// slot the name ends up with.
    pub(crate) fn claim(&mut self, maps: &dyn NameTable, mut slot: u32) -> Result<u32> {
        loop {
            if Reasons::is_special(slot) {
                return Ok(slot);
            }
            let name = self.reasons.name(slot).to_string();
            let key = (slot, name);
            if self.claimed.contains(&key) {
                return Ok(slot);
            }
            let name = &key.1;
            match maps.claim_name(slot, name)? {
                Claim::Ours => {
                    self.claimed.insert(key);
                    return Ok(slot);
                }
                Claim::Taken(other) => {
                    self.reasons.adopt(slot, &other);
                    slot = self.reasons.slot(name);
                }
                Claim::Elsewhere(other) => {
                    self.reasons.adopt(other, name);
                    self.claimed.insert((other, key.1));
                    return Ok(other);
                }
            }
        }
    }

    /// Claims every slot this table has named (a fresh object's profile
    /// reasons, in order), then adopts whatever else the names map holds.
    pub(crate) fn sync(&mut self, maps: &dyn NameTable) -> Result<()> {
        let named: Vec<u32> = self.reasons.named().map(|(s, _)| s).collect();
        for s in named {
            let name = self.reasons.name(s).to_string();
            match maps.claim_name(s, &name)? {
                Claim::Ours => {}
                Claim::Taken(other) => {
                    return Err(Error::msg(format!(
                        "reason slot {s} is {other} in the names map, not {name}: \
                         the instance was made with another profile"
                    )))
                }
                // Named by the programs first: theirs is the name's slot.
                Claim::Elsewhere(other) => self.reasons.adopt(other, &name),
            }
        }
        for (s, name) in maps.names()? {
            self.reasons.adopt(s, &name);
        }
        Ok(())
    }

    /// `(caller, reason)` of every caller routed by name.
    pub(crate) fn routes(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .by_caller
            .iter()
            .map(|(c, &s)| (c.clone(), self.reasons.name(s).to_string()))
            .collect();
        v.sort();
        v
    }

    /// `(caller, slot)` of every caller routed by name: what the programs
    /// route new sites by where they name them (td_kres).
    pub(crate) fn route_slots(&self) -> Vec<(String, u32)> {
        let mut v: Vec<(String, u32)> = self
            .by_caller
            .iter()
            .map(|(c, &s)| (c.clone(), s))
            .collect();
        v.sort();
        v
    }

    /// Whether the programs can name new sites as this mapping would: not
    /// where a route goes by debug info (`debug_info`: a debug vmlinux is
    /// read), which only user space reads. Without one those routes never
    /// match, in user space either.
    pub(crate) fn kernel_can_name(&self, debug_info: bool) -> bool {
        !(debug_info && self.needs_source())
    }

    /// Adopts the names the programs (or another reader) gave slots this
    /// table does not know, where `totals` counts calls in them.
    pub(crate) fn adopt_new(&mut self, maps: &dyn NameTable, totals: &[u64]) -> Result<()> {
        let unknown = totals
            .iter()
            .enumerate()
            .skip(FIRST_REASON as usize)
            .any(|(s, &n)| n != 0 && !self.reasons.known(s as u32));
        if unknown {
            for (s, name) in maps.names()? {
                self.reasons.adopt(s, &name);
            }
        }
        // Callers the programs merged into OTHER since, named where they
        // merged them.
        if let Some(o) = self.reasons.other() {
            let n = totals.get(o as usize).copied().unwrap_or(0);
            if n != self.other_read {
                self.other_read = n;
                self.reasons.merged.extend(maps.merged_into(o)?);
            }
        }
        Ok(())
    }

    /// `(pattern, reason)` of every source pattern, in matching order.
    pub(crate) fn source_routes(&self) -> Vec<(SourcePattern, String)> {
        self.by_source
            .iter()
            .map(|(p, s)| (p.clone(), self.reasons.name(*s).to_string()))
            .collect()
    }

    /// The slot of the reason named by --stack-on: a profile reason, or
    /// any kernel function (callers are reasons).
    /// A uprobe's --stack-on reason's slot: not-found, a reason, or any
    /// caller function's name (user functions are named per process, when
    /// their calls come, so none can be checked now).
    pub(crate) fn user_stack_reason(&mut self, name: &str) -> u32 {
        if is_not_found(name) {
            return SLOT_NOT_FOUND;
        }
        self.reasons
            .lookup(name)
            .unwrap_or_else(|| self.reasons.slot(name))
    }

    pub(crate) fn stack_reason(&mut self, ksyms: &Kallsyms, name: &str) -> Result<u32> {
        if is_not_found(name) {
            return Ok(SLOT_NOT_FOUND);
        }
        if let Some(slot) = self.reasons.lookup(name) {
            return Ok(slot);
        }
        if ksyms.function(name).next().is_some() {
            return Ok(self.reasons.slot(name));
        }
        let known: Vec<&str> = self.reasons.reason_names().collect();
        let valid = if known.is_empty() {
            format!("{NOT_FOUND_ALIAS} or a caller function's name")
        } else {
            format!(
                "one of {}, {NOT_FOUND_ALIAS} or a caller function's name",
                known.join(", ")
            )
        };
        // `zap` for ZAP: profile reasons are upper case.
        let hint = known
            .iter()
            .find(|k| k.eq_ignore_ascii_case(name))
            .map_or(String::new(), |k| format!("did you mean {k}? "));
        Err(Error::usage(format!(
            "unknown reason '{name}' for --stack-on: {hint}give {valid}"
        )))
    }

    /// Routes call sites matching `pattern` (through debug info) to `reason`.
    pub(crate) fn route_source(&mut self, pattern: SourcePattern, reason: &str) {
        let slot = self.reasons.slot(reason);
        self.by_source.push((pattern, slot));
    }

    /// True if some routes can only be matched through debug info.
    fn needs_source(&self) -> bool {
        !self.by_source.is_empty()
    }

    /// The slot of the first source pattern the location matches.
    fn source_slot(&self, loc: &SourceLoc) -> Option<u32> {
        self.by_source
            .iter()
            .find_map(|(pattern, slot)| pattern.matches(loc).then_some(*slot))
    }

    /// The slot for a caller's return address. `src` places it in the
    /// source (inlined callers, files) where the profile asks for that.
    pub(crate) fn classify(
        &mut self,
        ksyms: &Kallsyms,
        ret: u64,
        src: Option<&mut (dyn SourceLookup + '_)>,
    ) -> u32 {
        // A tail call is named after the function that jumped to FUNC (a
        // profile may route it by that name), or, through an indirect
        // call, marked: never after the caller's caller alone.
        let judged = self.tail.as_mut().map(|t| t.judge_site(ksyms, ret));
        match judged {
            Some(Caller::Tail(g)) => {
                // A profile's rules were written against return addresses:
                // a route for the caller still holds where none names G.
                let routed = self
                    .by_caller
                    .get(&g)
                    .or_else(|| self.by_caller.get(caller_name(ksyms, ret)));
                return match routed {
                    Some(&slot) => slot,
                    None => self.reasons.slot(&format!("{g} {TAIL_MARK}")),
                };
            }
            Some(Caller::IndirectTail) => {
                let caller = caller_name(ksyms, ret);
                return self
                    .reasons
                    .slot(&format!("{caller} {INDIRECT_MARK} {TAIL_MARK}"));
            }
            _ => {}
        }
        let indirect = judged == Some(Caller::Indirect);
        if let Some(src) = src.filter(|_| self.needs_source()) {
            // -1: the call instruction, not what follows it.
            if let Some(slot) = src.source(ret - 1).and_then(|l| self.source_slot(&l)) {
                return slot;
            }
        }
        let caller = caller_name(ksyms, ret);
        match self.by_caller.get(caller) {
            Some(&slot) => slot,
            None if indirect => self.reasons.slot(&format!("{caller} {INDIRECT_MARK}")),
            None => self.reasons.slot(caller),
        }
    }
}

impl Mapper {
    /// The slot for calls from caller function `caller` (a user-space
    /// caller, already symbolized): its route, else its own reason.
    pub(crate) fn classify_name(&mut self, caller: &str) -> u32 {
        match self.by_caller.get(caller) {
            Some(&slot) => slot,
            None => self.reasons.slot(caller),
        }
    }
}

/// The name of the caller function a return address lies in, clone
/// suffixes folded.
pub(crate) fn caller_name(ksyms: &Kallsyms, ret: u64) -> &str {
    ksyms
        .caller_of(ret)
        .map_or(UNKNOWN_NAME, |s| base_name(&s.name))
}

#[cfg(test)]
mod tests;
