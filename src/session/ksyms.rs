//! The kernel's symbols during a run, read again when a module comes or
//! goes: a module loaded after the start has call sites no symbol read
//! then names, and an unloaded module's addresses may be reused by the
//! next one loaded.

use std::time::Duration;

use crate::error::Result;
use crate::kallsyms::Kallsyms;

/// How often a run looks at /proc/modules when no new site asks.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(1);

/// A module as /proc/modules lists it: its name and where its text is.
type Loaded = (String, u64);

/// The modules /proc/modules lists, by name and address, sorted; None
/// where the kernel has no modules (no file) or hides their addresses. A
/// module still loading is left out: its symbols may not all be in place
/// yet, and the next look finds it loaded.
fn parse_modules(text: &str) -> Option<Vec<Loaded>> {
    let mut v = Vec::new();
    for line in text.lines() {
        // NAME SIZE REFS DEPS STATE ADDR [TAINTS]
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(name), Some(addr)) = (f.first(), f.get(5)) else {
            continue;
        };
        if f.get(4) == Some(&"Loading") {
            continue;
        }
        let addr = u64::from_str_radix(addr.trim_start_matches("0x"), 16).ok()?;
        if addr == 0 {
            return None;
        }
        v.push((name.to_string(), addr));
    }
    v.sort();
    Some(v)
}

fn read_modules() -> Option<Vec<Loaded>> {
    parse_modules(&std::fs::read_to_string("/proc/modules").ok()?)
}

/// A module no longer where it was: the range its symbols covered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Gone {
    pub(crate) name: String,
    pub(crate) lo: u64,
    pub(crate) hi: u64,
}

impl Gone {
    /// Whether return address `ret` lay in the module's text.
    pub(crate) fn holds(&self, ret: u64) -> bool {
        crate::bpf::deep::returns_into(self.lo, self.hi, ret)
    }
}

/// What changed when the symbols were read again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Change {
    pub(crate) loaded: Vec<String>,
    pub(crate) gone: Vec<Gone>,
}

/// The modules of `before` not in `after` (by name and address), each
/// with the range its symbols in `old` covered, and the names new in
/// `after`.
fn change(before: &[Loaded], after: &[Loaded], old: &Kallsyms) -> Change {
    let gone = before
        .iter()
        .filter(|m| !after.contains(m))
        .filter_map(|(name, _)| {
            let (lo, hi) = old
                .of_module(name)
                .fold(None, |r: Option<(u64, u64)>, s| match r {
                    None => Some((s.addr, s.end)),
                    Some((lo, hi)) => Some((lo.min(s.addr), hi.max(s.end))),
                })?;
            Some(Gone {
                name: name.clone(),
                lo,
                hi,
            })
        })
        .collect();
    let loaded = after
        .iter()
        .filter(|m| !before.contains(m))
        .map(|(name, _)| name.clone())
        .collect();
    Change { loaded, gone }
}

/// The symbols a run names call sites with: those read at the start,
/// then, once a module has come or gone, those read again.
pub(crate) struct LiveKsyms<'a> {
    first: &'a Kallsyms,
    now: Option<Kallsyms>,
    /// The modules when the symbols in use were read; None: never read
    /// again (no /proc/modules, or a copy that stays as it is).
    modules: Option<Vec<Loaded>>,
    changes: Change,
}

impl<'a> LiveKsyms<'a> {
    /// `first`, read again as modules change.
    pub(crate) fn new(first: &'a Kallsyms) -> Self {
        LiveKsyms {
            modules: read_modules(),
            ..Self::fixed(first)
        }
    }

    /// `first` alone, never read again.
    pub(crate) fn fixed(first: &'a Kallsyms) -> Self {
        LiveKsyms {
            first,
            now: None,
            modules: None,
            changes: Change::default(),
        }
    }

    pub(crate) fn get(&self) -> &Kallsyms {
        self.now.as_ref().unwrap_or(self.first)
    }

    /// The symbols to name the new call site `ret` with: read again first
    /// if no symbol holds it and the modules changed (a module loaded
    /// since: its calls come before the next check).
    pub(crate) fn for_site(&mut self, ret: u64) -> &Kallsyms {
        if self.get().caller_of(ret).is_none() {
            // Not readable now: the symbols in use stay, and say [unknown].
            let _ = self.refresh();
        }
        self.get()
    }

    /// Reads the symbols again if the modules changed since they were
    /// read. Where they cannot be read now, those in use stay.
    pub(crate) fn check(&mut self) {
        let _ = self.refresh();
    }

    fn refresh(&mut self) -> Result<()> {
        let Some(before) = &self.modules else {
            return Ok(());
        };
        let Some(after) = read_modules() else {
            return Ok(());
        };
        if *before == after {
            return Ok(());
        }
        let fresh = crate::host::load_kallsyms()?;
        let c = change(before, &after, self.get());
        self.changes.loaded.extend(c.loaded);
        self.changes.gone.extend(c.gone);
        self.now = Some(fresh);
        self.modules = Some(after);
        Ok(())
    }

    /// The changes since the last call.
    pub(crate) fn take_changes(&mut self) -> Change {
        std::mem::take(&mut self.changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODULES: &str = "\
brd 20480 0 - Live 0xffffffffc0a00000
ext4 1048576 1 - Live 0xffffffffc0800000 (E)
";

    #[test]
    fn modules_are_read_by_name_and_address() {
        assert_eq!(
            parse_modules(MODULES).unwrap(),
            vec![
                ("brd".to_string(), 0xffffffffc0a00000),
                ("ext4".to_string(), 0xffffffffc0800000)
            ]
        );
        assert_eq!(parse_modules("").unwrap(), vec![]);
        assert_eq!(
            parse_modules("brd 20480 0 - Loading 0xffffffffc0a00000\n").unwrap(),
            vec![]
        );
        // Addresses hidden: no way to tell a reload at another address.
        assert_eq!(
            parse_modules("brd 20480 0 - Live 0x0000000000000000\n"),
            None
        );
    }

    #[test]
    fn a_module_gone_or_moved_is_gone_over_its_old_symbols() {
        let old = Kallsyms::parse(
            "ffffffffc0800000 t ext4_a\t[ext4]\n\
             ffffffffc0a00000 t brd_insert_page\t[brd]\n\
             ffffffffc0a00100 t brd_submit_bio\t[brd]\n\
             ffffffffc0a00400 T cleanup_module\t[brd]\n\
             ffffffffc0b00000 t other\t[other]\n",
        );
        let before = parse_modules(MODULES).unwrap();
        // brd unloaded, then loaded again elsewhere; xfs new.
        let after = parse_modules(
            "brd 20480 0 - Live 0xffffffffc0c00000\n\
             ext4 1048576 1 - Live 0xffffffffc0800000\n\
             xfs 1048576 0 - Live 0xffffffffc1000000\n",
        )
        .unwrap();
        let c = change(&before, &after, &old);
        assert_eq!(c.loaded, vec!["brd".to_string(), "xfs".to_string()]);
        assert_eq!(c.gone.len(), 1);
        let g = &c.gone[0];
        assert_eq!(g.name, "brd");
        assert_eq!(g.lo, 0xffffffffc0a00000);
        // the module's last symbol ends where the next module begins, or
        // a page on
        assert!(g.hi > 0xffffffffc0a00400 && g.hi <= 0xffffffffc0b00000);
        assert!(g.holds(0xffffffffc0a00105));
        assert!(!g.holds(0xffffffffc0a00000));
        assert!(!g.holds(0xffffffffc0800010));
        assert_eq!(change(&before, &before, &old), Change::default());
    }

    #[test]
    fn a_fixed_copy_is_never_read_again() {
        let k = Kallsyms::parse("ffffffff81000000 T foo\n");
        let mut live = LiveKsyms::fixed(&k);
        assert!(live.for_site(0x10).caller_of(0x10).is_none());
        live.check();
        assert_eq!(live.take_changes(), Change::default());
    }
}
