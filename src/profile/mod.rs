//! Reason profiles: named reasons that group the traced function's callers.
//!
//! Without a profile every caller function of the traced function is a
//! reason of its own. A profile names reasons and says which callers count
//! for them, optionally depending on a deeper frame of the stack. The file
//! format, the inline form and the built-in profiles are specified in
//! topdown(8) (man/topdown.8, PROFILES), the one place they are written
//! down; the tests here hold the code to it.
//!
//! `model` holds the types the stages share. The pipeline: `parse` reads a file or `--rules` into drafts, `validate`
//! checks them into a `Profile`, `builtin` embeds `profiles/*.toml`,
//! `resolve` maps a profile onto the running kernel's symbols, `describe`
//! lists the result (`--list-reasons`), and `compile` turns it into reason
//! slots and the BPF side's tables.

mod builtin;
mod compile;
mod describe;
mod model;
mod parse;
mod resolve;
mod validate;

pub(crate) use builtin::{builtin, builtin_for, builtins};
pub(crate) use compile::compile;
pub(crate) use describe::{describe, describe_json};
pub(crate) use model::Profile;
pub(crate) use resolve::resolve;

#[cfg(test)]
pub(crate) mod fixtures {
    use super::Profile;
    use crate::error::Result;

    pub(crate) const GOOD: &str = r#"
version = 1
function = "deferred_split_folio"
description = "test profile"

[[reason]]
name = "FAULT"
description = "faults"
callers = ["do_huge_pmd_anonymous_page"]

[[reason]]
name = "ZAP"
callers = ["folio_remove_rmap_ptes", "folio_remove_rmap_pmd"]
within = ["unmap_page_range", "zap_pte_range"]
depth = 4

[[reason]]
name = "PARTIAL"
callers = ["folio_remove_rmap_ptes"]

[[reason]]
name = "KHUGEPAGED"
callers = ["collapse_huge_page"]
within = ["khugepaged"]
"#;

    pub(crate) fn err(r: Result<Profile>) -> String {
        r.expect_err("expected an error").to_string()
    }

    /// GOOD with `old` replaced by `new`, parsed as t.toml.
    pub(crate) fn parse_edited(old: &str, new: &str) -> Result<Profile> {
        assert!(GOOD.contains(old), "{old}");
        Profile::parse(&GOOD.replacen(old, new, 1), "t.toml")
    }

    pub(crate) const KSYMS: &str = "\
ffffffff81000000 T _stext
ffffffff81001000 T do_huge_pmd_anonymous_page
ffffffff81002000 t zap_pte_range.isra.0
ffffffff81003000 T folio_remove_rmap_ptes
ffffffff81004000 T folio_remove_rmap_pmd
ffffffff81005000 T unmap_page_range
ffffffff81006000 t collapse_huge_page
ffffffff81007000 t foo
ffffffff81007100 t foo.part.0
ffffffff81007200 T bar
ffffffff81009000 t zap_pte_range.cold
ffffffff8100a000 T _etext
";
}
