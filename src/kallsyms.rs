//! Kernel text symbols from /proc/kallsyms: address → function and
//! function name → address ranges.

use std::collections::HashSet;
use std::fs;
use std::io::Read;
use std::sync::OnceLock;

/// One text symbol and the address range it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Symbol {
    pub(crate) addr: u64,
    /// First address past the symbol (the next text symbol's address).
    pub(crate) end: u64,
    pub(crate) name: String,
    pub(crate) module: Option<String>,
}

/// Text symbols sorted by address.
#[derive(Debug, Default)]
pub(crate) struct Kallsyms {
    syms: Vec<Symbol>,
    /// Indices into `syms` by a hash of the base name (clone suffixes
    /// folded), sorted, built on first use: profiles look up a few dozen
    /// names, each a scan otherwise.
    by_base: OnceLock<Vec<(u64, u32)>>,
}

/// Size assumed for the last symbol, which has no successor.
const LAST_SYMBOL_SIZE: u64 = 4096;

/// A compiler clone's name folded to its function: `foo.constprop.0`,
/// `foo.isra.0`, `foo.part.0` and `foo.cold` are all `foo`. Kernel C
/// identifiers have no dots, so everything from the first dot on is a
/// suffix.
pub(crate) fn base_name(name: &str) -> &str {
    match name.find('.') {
        Some(0) | None => name,
        Some(i) => &name[..i],
    }
}

impl Kallsyms {
    pub(crate) fn load() -> std::io::Result<Self> {
        // Read whole (the kernel formats every symbol, text or not), then
        // parsed as bytes: no UTF-8 check, and only text symbols' names
        // are copied.
        let mut text = Vec::with_capacity(8 << 20);
        fs::File::open("/proc/kallsyms")?.read_to_end(&mut text)?;
        Ok(Self::parse_bytes(&text))
    }

    /// Parses kallsyms text (`ADDR TYPE NAME [MODULE]` per line), keeping
    /// text symbols. `__pfx_` padding symbols are dropped: no return
    /// address points into them.
    #[cfg(test)]
    pub(crate) fn parse(text: &str) -> Self {
        Self::parse_bytes(text.as_bytes())
    }

    fn parse_bytes(text: &[u8]) -> Self {
        let mut syms: Vec<Symbol> = text
            .split(|&b| b == b'\n')
            .filter_map(|line| {
                let mut f = line
                    .split(|b| b.is_ascii_whitespace())
                    .filter(|f| !f.is_empty());
                let addr = parse_hex(f.next()?)?;
                let ty = f.next()?;
                if !matches!(ty, b"t" | b"T" | b"w" | b"W") {
                    return None;
                }
                let name = f.next()?;
                if name.starts_with(b"__pfx_") {
                    return None;
                }
                let module = f.next().map(|m| {
                    let m = m.strip_prefix(b"[").unwrap_or(m);
                    String::from_utf8_lossy(m.strip_suffix(b"]").unwrap_or(m)).into_owned()
                });
                Some(Symbol {
                    addr,
                    end: 0,
                    name: String::from_utf8_lossy(name).into_owned(),
                    module,
                })
            })
            .collect();
        // Mostly in address order already (the core kernel's are).
        syms.sort_by_key(|s| s.addr);
        for i in 0..syms.len() {
            // A symbol ends where the next one of its module (or of the
            // core kernel) starts; the last of each, whose size kallsyms
            // does not say, is given LAST_SYMBOL_SIZE, so that an address
            // in a gap (BPF programs loaded later) is not taken for it.
            let addr = syms[i].addr;
            let module = &syms[i].module;
            let end =
                syms[i + 1..]
                    .iter()
                    .find(|s| s.addr > addr)
                    .map_or(addr + LAST_SYMBOL_SIZE, |n| {
                        if n.module == *module {
                            n.addr
                        } else {
                            n.addr.min(addr + LAST_SYMBOL_SIZE)
                        }
                    });
            syms[i].end = end;
        }
        Kallsyms {
            syms,
            by_base: OnceLock::new(),
        }
    }

    /// Every symbol whose base name is `base`, in address order.
    fn of_base<'a>(&'a self, base: &'a str) -> impl Iterator<Item = &'a Symbol> + 'a {
        // (hash of the base name, index), sorted: built once without a
        // string per symbol, which on a kernel of 150,000 text symbols
        // took longer than everything else a profile's resolution does.
        let index = self.by_base.get_or_init(|| {
            let mut v: Vec<(u64, u32)> = self
                .syms
                .iter()
                .enumerate()
                .map(|(i, s)| (name_hash(base_name(&s.name)), i as u32))
                .collect();
            v.sort_unstable();
            v
        });
        let h = name_hash(base);
        let from = index.partition_point(|&(k, _)| k < h);
        index[from..]
            .iter()
            .take_while(move |&&(k, _)| k == h)
            .map(|&(_, i)| &self.syms[i as usize])
            .filter(move |s| base_name(&s.name) == base)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// True when every address reads as zero: kptr_restrict (or missing
    /// CAP_SYSLOG) hides them.
    pub(crate) fn addresses_hidden(&self) -> bool {
        self.syms.iter().all(|s| s.addr == 0)
    }

    /// The symbol whose range holds `addr`.
    pub(crate) fn lookup(&self, addr: u64) -> Option<&Symbol> {
        let i = self.syms.partition_point(|s| s.addr <= addr);
        let s = self.syms.get(i.checked_sub(1)?)?;
        (addr < s.end).then_some(s)
    }

    /// The first symbol at or after `addr`.
    pub(crate) fn at_or_after(&self, addr: u64) -> Option<&Symbol> {
        self.syms.get(self.syms.partition_point(|s| s.addr < addr))
    }

    /// The function a return address belongs to. One is subtracted first
    /// because a call can be a function's last instruction.
    pub(crate) fn caller_of(&self, ret: u64) -> Option<&Symbol> {
        self.lookup(ret.checked_sub(1)?)
    }

    /// The text symbols of module `name`.
    pub(crate) fn of_module<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Symbol> + 'a {
        self.syms
            .iter()
            .filter(move |s| s.module.as_deref() == Some(name))
    }

    /// Symbols named exactly `name`.
    pub(crate) fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Symbol> + 'a {
        self.of_base(base_name(name))
            .filter(move |s| s.name == name)
    }

    /// Every symbol of a function: its own name and its clones and parts
    /// (`name.*`), in address order.
    pub(crate) fn function<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Symbol> + 'a {
        self.of_base(name)
    }

    /// The names of the symbols that start with `prefix`, without it.
    pub(crate) fn names_after<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.syms
            .iter()
            .filter_map(move |s| s.name.strip_prefix(prefix))
    }

    /// Every function's name, clones folded (`f.isra.0` is `f`), in
    /// address order, repeated where clones are.
    pub(crate) fn functions(&self) -> impl Iterator<Item = &str> + '_ {
        self.syms.iter().map(|s| base_name(&s.name))
    }

    /// Up to `n` function names close to `name`, closest first.
    pub(crate) fn suggest(&self, name: &str, n: usize) -> Vec<String> {
        closest(name, self.syms.iter().map(|s| base_name(&s.name)), n)
    }
}

/// Up to `n` of `names` close to `name` (a few edits away, or holding
/// it), closest first; each name once.
pub(crate) fn closest<'a>(
    name: &str,
    names: impl Iterator<Item = &'a str>,
    n: usize,
) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut scored: Vec<(usize, &str)> = names
        .filter(|b| seen.insert(*b))
        .filter_map(|b| {
            let d = distance(name, b);
            let close = d <= name.len().max(4) / 3 || (b.contains(name) && name.len() >= 4);
            close.then_some((d, b))
        })
        .collect();
    scored.sort();
    scored
        .into_iter()
        .take(n)
        .map(|(_, b)| b.to_string())
        .collect()
}

/// A hexadecimal address.
fn parse_hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    s.iter().try_fold(0u64, |v, &c| {
        let d = (c as char).to_digit(16)?;
        Some(v << 4 | u64::from(d))
    })
}

/// FNV-1a: the base-name index's key.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Levenshtein distance.
pub(crate) fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
ffffffff81000000 T _stext
ffffffff81001000 t __pfx_do_huge_pmd_anonymous_page
ffffffff81001010 T do_huge_pmd_anonymous_page
ffffffff81001400 d some_data
ffffffff81002000 t collapse_huge_page.isra.0
ffffffff81002800 t collapse_huge_page.cold
ffffffff81002900 T deferred_split_folio
ffffffff81002a00 T folio_remove_rmap_ptes
ffffffffc0001000 t thp_helper\t[thpmod]
";

    #[test]
    fn lookup_uses_next_text_symbol_as_end() {
        let k = Kallsyms::parse(TEXT);
        let s = k.lookup(0xffffffff81001fff).unwrap();
        assert_eq!(s.name, "do_huge_pmd_anonymous_page");
        assert_eq!(s.end, 0xffffffff81002000);
        assert_eq!(
            k.lookup(0xffffffff81002000).unwrap().name,
            "collapse_huge_page.isra.0"
        );
        assert!(k.lookup(0xffffffff80000000).is_none());
        assert!(k.lookup(0xffffffffc0002000).is_none());
    }

    #[test]
    fn pfx_and_data_symbols_are_dropped() {
        let k = Kallsyms::parse(TEXT);
        assert_eq!(k.named("__pfx_do_huge_pmd_anonymous_page").count(), 0);
        assert_eq!(k.named("some_data").count(), 0);
        // The padding before a function belongs to its predecessor.
        assert_eq!(k.lookup(0xffffffff81001008).unwrap().name, "_stext");
    }

    #[test]
    fn return_address_at_range_end_belongs_to_the_caller() {
        let k = Kallsyms::parse(TEXT);
        // A call that is a function's last instruction returns to the next
        // function's first byte.
        assert_eq!(
            k.caller_of(0xffffffff81002000).unwrap().name,
            "do_huge_pmd_anonymous_page"
        );
        assert_eq!(
            k.caller_of(0xffffffff81002001).unwrap().name,
            "collapse_huge_page.isra.0"
        );
    }

    #[test]
    fn clone_suffixes_fold() {
        assert_eq!(base_name("collapse_huge_page.isra.0"), "collapse_huge_page");
        assert_eq!(base_name("foo.constprop.12"), "foo");
        assert_eq!(base_name("foo.part.3"), "foo");
        assert_eq!(base_name("foo.cold"), "foo");
        assert_eq!(base_name("foo"), "foo");
        assert_eq!(base_name(".hidden"), ".hidden");
        let k = Kallsyms::parse(TEXT);
        let names: Vec<_> = k
            .function("collapse_huge_page")
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(
            names,
            ["collapse_huge_page.isra.0", "collapse_huge_page.cold"]
        );
    }

    #[test]
    fn the_last_symbol_of_a_module_does_not_reach_into_the_gap_after_it() {
        let k = Kallsyms::parse(
            "ffffffffc0001000 t a\t[m1]\nffffffffc0001100 t b\t[m1]\nffffffffc0100000 t c\t[m2]\n",
        );
        assert_eq!(k.lookup(0xffffffffc0001200).unwrap().name, "b");
        assert!(k.lookup(0xffffffffc0010000).is_none(), "in the gap");
        assert_eq!(k.lookup(0xffffffffc0100010).unwrap().name, "c");
    }

    #[test]
    fn modules_are_kept() {
        let k = Kallsyms::parse(TEXT);
        let s = k.lookup(0xffffffffc0001004).unwrap();
        assert_eq!(s.module.as_deref(), Some("thpmod"));
    }

    #[test]
    fn hidden_addresses_are_detected() {
        let k = Kallsyms::parse("0000000000000000 T foo\n0000000000000000 t bar\n");
        assert!(k.addresses_hidden());
        assert!(!Kallsyms::parse(TEXT).addresses_hidden());
    }

    #[test]
    fn suggestions_are_close_names() {
        let k = Kallsyms::parse(TEXT);
        assert_eq!(
            k.suggest("deferred_split_foli", 5),
            ["deferred_split_folio"]
        );
        assert_eq!(k.suggest("collapse_huge", 5), ["collapse_huge_page"]);
        assert!(k.suggest("zzzzzzzz", 5).is_empty());
    }

    #[test]
    fn edit_distance() {
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("abc", "abc"), 0);
    }
}
