//! Reason profiles: named reasons that group the traced function's callers.
//!
//! Without a profile every caller function of the traced function is a
//! reason of its own. A profile names reasons and says which callers count
//! for them, optionally depending on a deeper frame of the stack. Profiles
//! come from a TOML file, from a built-in file chosen by the traced
//! function's name or by the profile's name, or from a one-line inline form.
//!
//! # File format, version 1
//!
//! ```toml
//! version = 1                          # required; only 1 is accepted
//! function = "deferred_split_folio"    # required: the traced function
//! description = "..."                  # optional
//!
//! [[reason]]                           # one table per reason, in order
//! name = "ZAP"                         # required: A-Z, 0-9 and _, unique
//! description = "..."                  # optional
//! callers = ["folio_remove_rmap_ptes", "folio_remove_rmap_pmd"]
//! within = ["unmap_page_range"]        # optional: a deeper frame's function
//! depth = 4                            # optional, with `within` only:
//!                                      #   frames searched, 1-16, default 8
//! ```
//!
//! Any other key is an error. Function names are written without the
//! suffixes of compiler clones: `collapse_huge_page` also covers
//! `collapse_huge_page.isra.0`, `.constprop.N`, `.part.N` and its `.cold`
//! part, and every function of that name (static functions in other files,
//! modules).
//!
//! A reason without `within` is the *default* of each of its callers: every
//! call made from that caller counts for it. A caller has at most one
//! default. A reason with `within` is a *rule* for each of its callers: a
//! call counts for it when one of the `depth` frames above the caller (1 is
//! the caller's caller) lies in a `within` function. A caller's rules are
//! tried in file order and the first that matches wins; when none does, the
//! call counts for the caller's default, or, if it has none, for a reason
//! named after the caller. Callers that no reason lists count under their
//! own name, as without a profile. Reasons are numbered, and listed, in
//! file order; the name OTHER is reserved.
//!
//! A profile may name functions that the running kernel lacks, so that one
//! profile covers several kernel versions: they are reported as missing and
//! ignored, and a rule whose `within` functions are all missing is dropped.
//!
//! Inlined callers and source files: a default's `callers` may also name a
//! function the kernel inlined everywhere (it has no symbol) or a source
//! file as `file:PATH` (for example `file:mm/rmap.c`: call sites whose
//! source file ends with that path). kallsyms cannot place these; with a
//! debug vmlinux (`--vmlinux`, or the distribution's debug package) each new
//! call site is looked up in its DWARF, and a match counts for the reason
//! before the caller function's own route. Without one they never match.
//! Rules (`within`) take only functions with symbols.
//!
//! Defaults cost nothing per call (each call site is mapped once). A caller
//! with rules costs a stack walk on every call, and the BPF program takes
//! at most 16 address ranges of such callers and 32 address ranges of their
//! `within` functions (each caller's rules counted on their own); a
//! function takes one range per symbol, so a `.cold` part takes another.
//!
//! # Inline form
//!
//! `NAME=caller[,caller...][@within[,within...][/depth]]`, items joined by
//! `;`, for example
//! `ZAP=folio_remove_rmap_ptes@unmap_page_range/4;FAULT=do_huge_pmd_anonymous_page`.
//! Each item is a reason as above, in order, without a description.
//!
//! # Built-in profiles
//!
//! `profiles/NAME.toml` in the source tree, embedded in the binary. The one
//! whose `function` is the traced function is used unless another profile
//! is chosen.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::error::{Error, Result};
use crate::kallsyms::{base_name, Kallsyms};
use crate::probe::{MAX_DEEP_CALLERS, MAX_DEEP_RULES, MAX_RULE_DEPTH};
use crate::reasons::{MAX_REASONS, OTHER_NAME};

/// The profile format version this code reads.
pub const VERSION: u32 = 1;
/// Frames searched above the caller when a rule gives no `depth`.
pub const DEFAULT_DEPTH: u32 = 8;

/// A validated profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// Where it came from, for messages: a path, `built-in profile NAME` or
    /// `--rules`.
    pub origin: String,
    /// The traced function it was written for (none for the inline form).
    pub function: Option<String>,
    pub description: String,
    pub reasons: Vec<Reason>,
}

/// One named reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason {
    pub name: String,
    pub description: String,
    /// Caller functions (base names).
    pub callers: Vec<String>,
    /// None: the reason is the default of its callers; Some: a rule.
    pub within: Option<Within>,
}

/// A rule's condition: a frame within `depth` frames above the caller lies
/// in one of `functions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Within {
    pub functions: Vec<String>,
    pub depth: u32,
}

// ---------------------------------------------------------------- parsing

/// The file as written; `Spanned` keeps byte offsets for messages.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileProfile {
    version: Spanned<i64>,
    function: Spanned<String>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    reason: Vec<FileReason>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileReason {
    name: Spanned<String>,
    #[serde(default)]
    description: String,
    callers: Spanned<Vec<String>>,
    within: Option<Spanned<Vec<String>>>,
    depth: Option<Spanned<i64>>,
}

/// A reason as written in either form, with where each part came from.
struct Draft {
    name: String,
    description: String,
    callers: Vec<String>,
    within: Option<Vec<String>>,
    depth: Option<i64>,
    at_name: String,
    at_callers: String,
    at_within: String,
    at_depth: String,
}

/// 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    1 + text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

impl Profile {
    /// Parses and validates a profile file's text. `origin` names it in
    /// messages, which read `ORIGIN:LINE: ...`.
    pub fn parse(text: &str, origin: &str) -> Result<Profile> {
        let at = |offset: usize| format!("{origin}:{}", line_of(text, offset));
        let file: FileProfile = toml::from_str(text).map_err(|e| {
            let place = e.span().map_or_else(|| origin.to_string(), |s| at(s.start));
            let msg = e.message().trim().replace('\n', " ");
            Error::msg(format!("{place}: {msg}"))
        })?;

        let version = *file.version.get_ref();
        if version != i64::from(VERSION) {
            return Err(Error::msg(format!(
                "{}: unsupported profile version {version} (this topdown reads version {VERSION})",
                at(file.version.span().start)
            )));
        }
        let function = file.function.get_ref();
        check_function(function)
            .map_err(|m| Error::msg(format!("{}: {m}", at(file.function.span().start))))?;
        if file.reason.is_empty() {
            return Err(Error::msg(format!("{origin}: no [[reason]] tables")));
        }

        let drafts = file
            .reason
            .into_iter()
            .map(|r| {
                let name_at = at(r.name.span().start);
                Draft {
                    at_callers: at(r.callers.span().start),
                    at_within: r
                        .within
                        .as_ref()
                        .map_or_else(|| name_at.clone(), |w| at(w.span().start)),
                    at_depth: r
                        .depth
                        .as_ref()
                        .map_or_else(|| name_at.clone(), |d| at(d.span().start)),
                    at_name: name_at,
                    name: r.name.into_inner(),
                    description: r.description,
                    callers: r.callers.into_inner(),
                    within: r.within.map(Spanned::into_inner),
                    depth: r.depth.map(Spanned::into_inner),
                }
            })
            .collect();
        Ok(Profile {
            origin: origin.to_string(),
            function: Some(function.clone()),
            description: file.description,
            reasons: validate(drafts)?,
        })
    }

    /// Reads and parses a profile file.
    pub fn load(path: &Path) -> Result<Profile> {
        let origin = path.display().to_string();
        let text =
            std::fs::read_to_string(path).map_err(|e| Error::msg(format!("{origin}: {e}")))?;
        Self::parse(&text, &origin)
    }

    /// Parses the inline form (`--rules`):
    /// `NAME=caller[,caller...][@within[,within...][/depth]]` joined by `;`.
    pub fn inline(spec: &str) -> Result<Profile> {
        let mut drafts = Vec::new();
        for item in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            let at = format!("--rules `{item}`");
            let bad = |msg: &str| Error::msg(format!("{at}: {msg}"));
            let (name, rest) = item.split_once('=').ok_or_else(|| {
                bad("expected NAME=caller[,caller...][@within[,within...][/depth]]")
            })?;
            let (callers, within) = match rest.split_once('@') {
                Some((c, w)) => (c, Some(w)),
                None => (rest, None),
            };
            if callers.contains('/') {
                return Err(bad("a depth (/N) needs @within"));
            }
            let (within, depth) = match within.map(|w| w.split_once('/')) {
                None => (None, None),
                Some(None) => (within, None),
                Some(Some((w, d))) => {
                    let d = d.trim();
                    let d = d
                        .parse::<i64>()
                        .map_err(|_| bad(&format!("depth `{d}` is not a number")))?;
                    (Some(w), Some(d))
                }
            };
            let list = |s: &str| -> Vec<String> {
                s.split(',')
                    .map(str::trim)
                    .filter(|f| !f.is_empty())
                    .map(String::from)
                    .collect()
            };
            drafts.push(Draft {
                name: name.trim().to_string(),
                description: String::new(),
                callers: list(callers),
                within: within.map(list),
                depth,
                at_name: at.clone(),
                at_callers: at.clone(),
                at_within: at.clone(),
                at_depth: at,
            });
        }
        if drafts.is_empty() {
            return Err(Error::msg("--rules: no rules given"));
        }
        Ok(Profile {
            origin: "--rules".to_string(),
            function: None,
            description: String::new(),
            reasons: validate(drafts)?,
        })
    }
}

// ------------------------------------------------------------- validation

/// Reason names: capitals, digits and `_`, so that they never collide with
/// the (lower-case) function names of auto mode.
fn check_reason_name(name: &str) -> std::result::Result<(), String> {
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if !ok {
        return Err(format!(
            "bad reason name `{name}`: use capital letters, digits and _"
        ));
    }
    if name == OTHER_NAME {
        return Err(format!("reason name {OTHER_NAME} is reserved"));
    }
    Ok(())
}

/// Prefix of a caller pattern naming a source file instead of a function.
pub const FILE_PREFIX: &str = "file:";

/// Function names: C identifiers, without clone suffixes. In `callers`,
/// also `file:PATH` (a call site whose source file ends with PATH).
fn check_function(name: &str) -> std::result::Result<(), String> {
    if let Some(path) = name.strip_prefix(FILE_PREFIX) {
        if path.is_empty() || path.contains(char::is_whitespace) {
            return Err(format!("bad source file pattern `{name}`"));
        }
        return Ok(());
    }
    if name.contains('.') {
        return Err(format!(
            "bad function name `{name}`: write it without clone suffixes (`{}` covers them)",
            base_name(name)
        ));
    }
    let mut bytes = name.bytes();
    let ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !ok {
        return Err(format!("bad function name `{name}`"));
    }
    Ok(())
}

/// Checks a list of function names: not empty, valid, no repeats.
fn check_functions(key: &str, names: &[String]) -> std::result::Result<(), String> {
    if names.is_empty() {
        return Err(format!("`{key}` is empty"));
    }
    let mut seen = HashSet::new();
    for n in names {
        if key != "callers" && n.starts_with(FILE_PREFIX) {
            return Err(format!(
                "{key}: `{n}`: only `callers` take source files (rules need functions with addresses)"
            ));
        }
        check_function(n).map_err(|m| format!("{key}: {m}"))?;
        if !seen.insert(n) {
            return Err(format!("{key}: `{n}` is listed twice"));
        }
    }
    Ok(())
}

/// The checks both forms share; errors read `PLACE: reason NAME: ...`.
fn validate(drafts: Vec<Draft>) -> Result<Vec<Reason>> {
    if drafts.len() > MAX_REASONS {
        return Err(Error::msg(format!(
            "{}: {} reasons, at most {MAX_REASONS} are supported",
            drafts[MAX_REASONS].at_name,
            drafts.len()
        )));
    }
    let mut names = HashSet::new();
    // Caller -> the reason that is its default.
    let mut defaults: HashMap<String, String> = HashMap::new();
    let mut reasons = Vec::with_capacity(drafts.len());
    for d in drafts {
        let fail = |at: &str, msg: String| Error::msg(format!("{at}: reason {}: {msg}", d.name));
        check_reason_name(&d.name).map_err(|m| Error::msg(format!("{}: {m}", d.at_name)))?;
        if !names.insert(d.name.clone()) {
            return Err(fail(&d.at_name, "defined twice".into()));
        }
        check_functions("callers", &d.callers).map_err(|m| fail(&d.at_callers, m))?;
        let within = match (d.within, d.depth) {
            (None, Some(_)) => return Err(fail(&d.at_depth, "`depth` needs `within`".into())),
            (None, None) => {
                for c in &d.callers {
                    if let Some(other) = defaults.insert(c.clone(), d.name.clone()) {
                        return Err(fail(
                            &d.at_callers,
                            format!(
                                "caller {c} already counts for {other}; a caller can be listed \
                                 without `within` in one reason only"
                            ),
                        ));
                    }
                }
                None
            }
            (Some(functions), depth) => {
                check_functions("within", &functions).map_err(|m| fail(&d.at_within, m))?;
                let depth = match depth {
                    None => DEFAULT_DEPTH,
                    Some(n) if (1..=i64::from(MAX_RULE_DEPTH)).contains(&n) => n as u32,
                    Some(n) => {
                        return Err(fail(
                            &d.at_depth,
                            format!("depth {n} is out of range 1-{MAX_RULE_DEPTH}"),
                        ))
                    }
                };
                Some(Within { functions, depth })
            }
        };
        reasons.push(Reason {
            name: d.name,
            description: d.description,
            callers: d.callers,
            within,
        });
    }
    Ok(reasons)
}

// --------------------------------------------------------------- built-ins

/// `(NAME, text of profiles/NAME.toml)` for each listed name.
macro_rules! builtin_files {
    ($($name:literal),* $(,)?) => {
        &[$((
            $name,
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/profiles/", $name, ".toml")),
        )),*]
    };
}

/// The built-in profiles. To add one, put `NAME.toml` into `profiles/` and
/// its NAME here; a test fails if a file in `profiles/` is not listed.
const BUILTIN: &[(&str, &str)] = builtin_files!["deferred_split_folio", "deferred_split_huge_page"];

/// Parses an embedded profile; the tests check that all of them parse.
fn parse_builtin(name: &str, text: &str) -> Profile {
    let mut p = Profile::parse(text, &format!("profiles/{name}.toml"))
        .unwrap_or_else(|e| panic!("built-in profile {name} is broken: {e}"));
    p.origin = format!("built-in profile {name}");
    p
}

/// The built-in profile called `name`.
pub fn builtin(name: &str) -> Option<Profile> {
    BUILTIN
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(n, text)| parse_builtin(n, text))
}

/// The built-in profile for tracing `func` (clone suffixes folded).
pub fn builtin_for(func: &str) -> Option<Profile> {
    let func = base_name(func);
    BUILTIN
        .iter()
        .map(|(n, text)| parse_builtin(n, text))
        .find(|p| p.function.as_deref() == Some(func))
}

/// `(name, traced function, description)` of every built-in profile.
pub fn builtins() -> Vec<(&'static str, String, String)> {
    BUILTIN
        .iter()
        .map(|(n, text)| {
            let p = parse_builtin(n, text);
            (*n, p.function.unwrap_or_default(), p.description)
        })
        .collect()
}

// -------------------------------------------------------------- resolution

/// A profile resolved against the running kernel's symbols.
///
/// The BPF side needs one caller-table entry per address range in
/// `deep[i].ranges`, all ranges of one caller sharing that caller's rules,
/// and one rule-table entry per address range in `deep[i].rules[j].ranges`
/// (see `deep_caller_ranges` and `deep_rule_ranges`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    /// Reason names in profile order; they get their slots first.
    pub reasons: Vec<String>,
    /// `(caller function, reason)` for callers without rules.
    pub routes: Vec<(String, String)>,
    /// Callers with rules.
    pub deep: Vec<DeepCallerSpec>,
    /// Profile function names absent from this kernel, in profile order.
    pub missing: Vec<String>,
    /// `(pattern, reason)` for callers without rules that kallsyms cannot
    /// place: inlined functions and `file:` source paths. A call site
    /// matches through the debug vmlinux's DWARF, if there is one.
    pub source_routes: Vec<(String, String)>,
}

/// A caller whose reason depends on deeper frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeepCallerSpec {
    pub caller: String,
    /// `[lo, hi)` of each of its symbols, sorted, adjacent ones merged.
    pub ranges: Vec<(u64, u64)>,
    /// Reason when no rule matches; None: the caller's own name.
    pub default_reason: Option<String>,
    /// Tried in order; the first match wins.
    pub rules: Vec<RuleSpec>,
}

/// "A frame within `depth` frames above the caller lies in `ranges`."
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSpec {
    pub reason: String,
    pub ranges: Vec<(u64, u64)>,
    pub depth: u32,
}

impl Resolved {
    /// Entries the BPF caller table needs.
    pub fn deep_caller_ranges(&self) -> usize {
        self.deep.iter().map(|d| d.ranges.len()).sum()
    }

    /// Entries the BPF rule table needs.
    pub fn deep_rule_ranges(&self) -> usize {
        self.deep
            .iter()
            .flat_map(|d| &d.rules)
            .map(|r| r.ranges.len())
            .sum()
    }
}

/// Address ranges of all symbols of a function, merged.
fn function_ranges(ksyms: &Kallsyms, name: &str) -> Vec<(u64, u64)> {
    merge(ksyms.function(name).map(|s| (s.addr, s.end)).collect())
}

/// Sorts ranges and merges touching or overlapping ones. Symbols end where
/// the next one starts, so touching ranges cover exactly their union.
fn merge(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        match merged.last_mut() {
            Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    merged
}

/// Every function name a profile mentions, callers first, in order, once.
fn all_functions(profile: &Profile) -> Vec<&str> {
    let mut seen = HashSet::new();
    let callers = profile.reasons.iter().flat_map(|r| &r.callers);
    let within = profile
        .reasons
        .iter()
        .flat_map(|r| r.within.iter().flat_map(|w| &w.functions));
    callers
        .chain(within)
        .map(String::as_str)
        .filter(|n| seen.insert(*n))
        .collect()
}

/// Maps a profile onto the running kernel: which callers are routed to a
/// reason once per call site, which need rules, and the address ranges of
/// those. Fails only if the rules exceed the BPF program's tables. The
/// ranges mean something only if `ksyms` shows addresses (see
/// `Kallsyms::addresses_hidden`); names, and so `missing`, are right anyway.
pub fn resolve(profile: &Profile, ksyms: &Kallsyms) -> Result<Resolved> {
    let mut out = Resolved {
        reasons: profile.reasons.iter().map(|r| r.name.clone()).collect(),
        ..Resolved::default()
    };
    let mut ranges: HashMap<&str, Vec<(u64, u64)>> = HashMap::new();
    for name in all_functions(profile) {
        let r = function_ranges(ksyms, name);
        if r.is_empty() && !name.starts_with(FILE_PREFIX) {
            out.missing.push(name.to_string());
        }
        ranges.insert(name, r);
    }

    let mut callers: Vec<&str> = Vec::new();
    for c in profile.reasons.iter().flat_map(|r| &r.callers) {
        if !callers.contains(&c.as_str()) {
            callers.push(c);
        }
    }
    for caller in callers {
        let lists = |r: &&Reason| r.callers.iter().any(|c| c == caller);
        if ranges[caller].is_empty() {
            // Not a symbol (inlined, a source file, or absent): only debug
            // info can place its call sites, and only for a plain route.
            let default = profile
                .reasons
                .iter()
                .filter(lists)
                .find(|r| r.within.is_none());
            if let Some(r) = default {
                out.source_routes.push((caller.to_string(), r.name.clone()));
            }
            continue;
        }
        let default_reason = profile
            .reasons
            .iter()
            .filter(lists)
            .find(|r| r.within.is_none())
            .map(|r| r.name.clone());
        let mut rules = Vec::new();
        for r in profile.reasons.iter().filter(lists) {
            let Some(w) = &r.within else { continue };
            let rule_ranges = merge(
                w.functions
                    .iter()
                    .flat_map(|f| ranges[f.as_str()].iter().copied())
                    .collect(),
            );
            if rule_ranges.is_empty() {
                continue; // every `within` function is missing: drop the rule
            }
            rules.push(RuleSpec {
                reason: r.name.clone(),
                ranges: rule_ranges,
                depth: w.depth,
            });
        }
        if !rules.is_empty() {
            out.deep.push(DeepCallerSpec {
                caller: caller.to_string(),
                ranges: ranges[caller].clone(),
                default_reason,
                rules,
            });
        } else if let Some(reason) = default_reason {
            out.routes.push((caller.to_string(), reason));
        }
        // else: only rules, all dropped; the caller counts under its name.
    }

    let per_caller = |f: &dyn Fn(&DeepCallerSpec) -> usize| {
        out.deep
            .iter()
            .map(|d| format!("{} {}", d.caller, f(d)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let need = out.deep_caller_ranges();
    if need > MAX_DEEP_CALLERS {
        return Err(Error::msg(format!(
            "{}: callers with `within` rules need {need} address ranges on this kernel, \
             the BPF program takes at most {MAX_DEEP_CALLERS} ({})",
            profile.origin,
            per_caller(&|d| d.ranges.len())
        )));
    }
    let need = out.deep_rule_ranges();
    if need > MAX_DEEP_RULES {
        return Err(Error::msg(format!(
            "{}: `within` rules need {need} address ranges on this kernel, \
             the BPF program takes at most {MAX_DEEP_RULES} (per caller: {})",
            profile.origin,
            per_caller(&|d| d.rules.iter().map(|r| r.ranges.len()).sum())
        )));
    }
    Ok(out)
}

// ----------------------------------------------------------------- listing

/// `ffffffff81001010`, or `ffffffff81002000 (.isra.0), ...` for clones, or
/// `missing`.
fn addresses(ksyms: &Kallsyms, name: &str) -> String {
    let syms: Vec<String> = ksyms
        .function(name)
        .map(|s| match s.name.strip_prefix(name) {
            Some("") | None => format!("{:016x}", s.addr),
            Some(suffix) => format!("{:016x} ({suffix})", s.addr),
        })
        .collect();
    if syms.is_empty() {
        "missing".to_string()
    } else {
        syms.join(", ")
    }
}

/// `text` as lines of at most 78 columns (longer words stay whole), each
/// indented by two spaces.
fn wrapped(text: &str) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && 2 + line.len() + 1 + word.len() > 78 {
            let _ = writeln!(out, "  {line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "  {line}");
    }
    out
}

/// The `--list-reasons` listing: each reason with its description, callers
/// and `within` functions as found in this kernel, then what the BPF side
/// will do and what is missing.
pub fn describe(profile: &Profile, resolved: &Resolved, ksyms: &Kallsyms) -> String {
    let mut s = String::new();
    let _ = write!(s, "Reason profile: {}", profile.origin);
    if let Some(f) = &profile.function {
        let _ = write!(s, ", for {f}");
    }
    s.push('\n');
    s.push_str(&wrapped(&profile.description));
    let width = all_functions(profile)
        .iter()
        .map(|n| n.len())
        .max()
        .unwrap_or(0);
    for r in &profile.reasons {
        let _ = writeln!(s, "\n{}", r.name);
        s.push_str(&wrapped(&r.description));
        for c in &r.callers {
            let _ = writeln!(s, "  caller  {c:width$}  {}", addresses(ksyms, c));
        }
        if let Some(w) = &r.within {
            for f in &w.functions {
                let _ = writeln!(s, "  within  {f:width$}  {}", addresses(ksyms, f));
            }
            let _ = writeln!(s, "  depth   {}", w.depth);
        }
    }
    s.push('\n');
    for d in &resolved.deep {
        let rules: Vec<String> = d
            .rules
            .iter()
            .map(|r| format!("{} (depth {})", r.reason, r.depth))
            .collect();
        let default = d.default_reason.as_deref().unwrap_or(&d.caller);
        let _ = writeln!(
            s,
            "{}: stack walk per call: {}, else {default}",
            d.caller,
            rules.join(", then ")
        );
    }
    if !resolved.deep.is_empty() {
        let _ = writeln!(
            s,
            "BPF tables: {} of {MAX_DEEP_CALLERS} caller ranges, {} of {MAX_DEEP_RULES} rule ranges",
            resolved.deep_caller_ranges(),
            resolved.deep_rule_ranges()
        );
    }
    for (pattern, reason) in &resolved.source_routes {
        let _ = writeln!(
            s,
            "{pattern}: not a kernel symbol; call sites match through a debug vmlinux's DWARF \
             (--vmlinux), then count as {reason}"
        );
    }
    s.push_str("Callers not listed count under their own name.\n");
    if !resolved.missing.is_empty() {
        let _ = writeln!(s, "missing on this kernel: {}", resolved.missing.join(", "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
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

    fn err(r: Result<Profile>) -> String {
        r.expect_err("expected an error").to_string()
    }

    /// GOOD with `old` replaced by `new`, parsed as t.toml.
    fn parse_edited(old: &str, new: &str) -> Result<Profile> {
        assert!(GOOD.contains(old), "{old}");
        Profile::parse(&GOOD.replacen(old, new, 1), "t.toml")
    }

    #[test]
    fn a_valid_file_parses() {
        let p = Profile::parse(GOOD, "t.toml").unwrap();
        assert_eq!(p.origin, "t.toml");
        assert_eq!(p.function.as_deref(), Some("deferred_split_folio"));
        assert_eq!(p.description, "test profile");
        let names: Vec<_> = p.reasons.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["FAULT", "ZAP", "PARTIAL", "KHUGEPAGED"]);
        assert_eq!(p.reasons[0].description, "faults");
        assert_eq!(p.reasons[0].within, None);
        assert_eq!(
            p.reasons[1].within,
            Some(Within {
                functions: vec!["unmap_page_range".into(), "zap_pte_range".into()],
                depth: 4
            })
        );
        assert_eq!(p.reasons[2].description, "");
        assert_eq!(p.reasons[3].within.as_ref().unwrap().depth, DEFAULT_DEPTH);
    }

    #[test]
    fn syntax_errors_give_the_line() {
        let e = err(parse_edited("depth = 4", "depth = = 4"));
        assert!(e.starts_with("t.toml:15: "), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn unknown_keys_are_rejected_where_they_are() {
        let e = err(parse_edited("depth = 4", "depth = 4\ndepht = 5"));
        assert!(e.starts_with("t.toml:16: "), "{e}");
        assert!(e.contains("depht"), "{e}");
        let e = err(parse_edited("description = \"test profile\"", "colour = 1"));
        assert!(e.starts_with("t.toml:4: "), "{e}");
        assert!(e.contains("colour"), "{e}");
    }

    #[test]
    fn wrong_types_give_the_line() {
        let e = err(parse_edited("depth = 4", "depth = \"4\""));
        assert!(e.starts_with("t.toml:15: "), "{e}");
        let e = err(parse_edited(
            "callers = [\"collapse_huge_page\"]",
            "callers = \"collapse_huge_page\"",
        ));
        assert!(e.starts_with("t.toml:23: "), "{e}");
    }

    #[test]
    fn only_version_1_is_read() {
        let e = err(parse_edited("version = 1", "version = 2"));
        assert_eq!(
            e,
            "t.toml:2: unsupported profile version 2 (this topdown reads version 1)"
        );
        let e = err(parse_edited("version = 1\n", ""));
        assert!(e.contains("version"), "{e}");
    }

    #[test]
    fn function_and_reasons_are_required() {
        let e = err(parse_edited("function = \"deferred_split_folio\"\n", ""));
        assert!(e.contains("function"), "{e}");
        let e = err(Profile::parse("version = 1\nfunction = \"f\"\n", "t.toml"));
        assert_eq!(e, "t.toml: no [[reason]] tables");
        let e = err(parse_edited(
            "function = \"deferred_split_folio\"",
            "function = \"deferred_split_folio.isra.0\"",
        ));
        assert!(e.starts_with("t.toml:3: bad function name"), "{e}");
    }

    #[test]
    fn duplicate_reason_names_are_rejected() {
        let e = err(parse_edited("name = \"PARTIAL\"", "name = \"ZAP\""));
        assert_eq!(e, "t.toml:18: reason ZAP: defined twice");
    }

    #[test]
    fn a_caller_has_one_default() {
        let e = err(parse_edited(
            "callers = [\"folio_remove_rmap_ptes\"]",
            "callers = [\"folio_remove_rmap_ptes\", \"do_huge_pmd_anonymous_page\"]",
        ));
        assert!(e.starts_with("t.toml:19: reason PARTIAL: caller do_huge_pmd_anonymous_page already counts for FAULT"), "{e}");
        // Rules for a caller in several reasons are fine: they are tried in order.
        let p = parse_edited("within = [\"khugepaged\"]", "within = [\"khugepaged\"]\n[[reason]]\nname = \"MADV\"\ncallers = [\"collapse_huge_page\"]\nwithin = [\"madvise_collapse\"]").unwrap();
        assert_eq!(p.reasons.len(), 5);
    }

    #[test]
    fn depth_needs_within_and_a_range() {
        let e = err(parse_edited(
            "callers = [\"folio_remove_rmap_ptes\"]",
            "callers = [\"folio_remove_rmap_ptes\"]\ndepth = 3",
        ));
        assert_eq!(e, "t.toml:20: reason PARTIAL: `depth` needs `within`");
        for bad in ["0", "17", "-1"] {
            let e = err(parse_edited("depth = 4", &format!("depth = {bad}")));
            assert_eq!(
                e,
                format!("t.toml:15: reason ZAP: depth {bad} is out of range 1-16")
            );
        }
        let p = parse_edited("depth = 4", "depth = 16").unwrap();
        assert_eq!(p.reasons[1].within.as_ref().unwrap().depth, 16);
    }

    #[test]
    fn names_are_checked() {
        let e = err(parse_edited("name = \"ZAP\"", "name = \"zap\""));
        assert!(e.starts_with("t.toml:12: bad reason name `zap`"), "{e}");
        let e = err(parse_edited("name = \"ZAP\"", "name = \"OTHER\""));
        assert_eq!(e, "t.toml:12: reason name OTHER is reserved");
        let e = err(parse_edited("\"zap_pte_range\"", "\"zap_pte_range.cold\""));
        assert!(
            e.starts_with("t.toml:14: reason ZAP: within: bad function name `zap_pte_range.cold`"),
            "{e}"
        );
        let e = err(parse_edited(
            "\"folio_remove_rmap_pmd\"",
            "\"folio remove\"",
        ));
        assert!(
            e.starts_with("t.toml:13: reason ZAP: callers: bad function name"),
            "{e}"
        );
        let e = err(parse_edited(
            "\"folio_remove_rmap_pmd\"",
            "\"folio_remove_rmap_ptes\"",
        ));
        assert_eq!(
            e,
            "t.toml:13: reason ZAP: callers: `folio_remove_rmap_ptes` is listed twice"
        );
    }

    #[test]
    fn empty_lists_are_rejected() {
        let e = err(parse_edited(
            "callers = [\"do_huge_pmd_anonymous_page\"]",
            "callers = []",
        ));
        assert_eq!(e, "t.toml:9: reason FAULT: `callers` is empty");
        let e = err(parse_edited("within = [\"khugepaged\"]", "within = []"));
        assert_eq!(e, "t.toml:24: reason KHUGEPAGED: `within` is empty");
        let e = err(parse_edited(
            "callers = [\"do_huge_pmd_anonymous_page\"]\n",
            "",
        ));
        assert!(e.contains("callers"), "{e}");
    }

    #[test]
    fn inline_rules_parse() {
        let p = Profile::inline(
            " ZAP=folio_remove_rmap_ptes, folio_remove_rmap_pmd@unmap_page_range,zap_pte_range/4 ; \
             FAULT=do_huge_pmd_anonymous_page;K=collapse_huge_page@khugepaged;",
        )
        .unwrap();
        assert_eq!(p.origin, "--rules");
        assert_eq!(p.function, None);
        assert_eq!(p.reasons.len(), 3);
        assert_eq!(p.reasons[0].name, "ZAP");
        assert_eq!(
            p.reasons[0].callers,
            ["folio_remove_rmap_ptes", "folio_remove_rmap_pmd"]
        );
        assert_eq!(
            p.reasons[0].within,
            Some(Within {
                functions: vec!["unmap_page_range".into(), "zap_pte_range".into()],
                depth: 4
            })
        );
        assert_eq!(p.reasons[1].callers, ["do_huge_pmd_anonymous_page"]);
        assert_eq!(p.reasons[1].within, None);
        assert_eq!(p.reasons[2].within.as_ref().unwrap().depth, DEFAULT_DEPTH);
    }

    #[test]
    fn inline_errors_name_the_item() {
        let cases = [
            ("ZAP", "--rules `ZAP`: expected NAME=caller"),
            ("ZAP=a/4", "--rules `ZAP=a/4`: a depth (/N) needs @within"),
            (
                "ZAP=a@b/x",
                "--rules `ZAP=a@b/x`: depth `x` is not a number",
            ),
            (
                "ZAP=a@b/17",
                "--rules `ZAP=a@b/17`: reason ZAP: depth 17 is out of range 1-16",
            ),
            ("zap=a", "--rules `zap=a`: bad reason name `zap`"),
            ("ZAP=", "--rules `ZAP=`: reason ZAP: `callers` is empty"),
            ("ZAP=a@", "--rules `ZAP=a@`: reason ZAP: `within` is empty"),
            (
                "ZAP=a.isra.0",
                "--rules `ZAP=a.isra.0`: reason ZAP: callers: bad function name",
            ),
            (
                "A=f;B=f",
                "--rules `B=f`: reason B: caller f already counts for A",
            ),
            ("A=f;A=g@h", "--rules `A=g@h`: reason A: defined twice"),
            (" ; ", "--rules: no rules given"),
        ];
        for (spec, want) in cases {
            let e = err(Profile::inline(spec));
            assert!(e.starts_with(want), "{spec}: {e}");
        }
    }

    /// Addresses: zap_pte_range has a clone and a .cold part; foo.part.0
    /// directly follows foo, so their ranges merge.
    const KSYMS: &str = "\
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

    #[test]
    fn resolution_routes_and_rules() {
        let k = Kallsyms::parse(KSYMS);
        let p = Profile::parse(GOOD, "t.toml").unwrap();
        let r = resolve(&p, &k).unwrap();
        assert_eq!(r.reasons, ["FAULT", "ZAP", "PARTIAL", "KHUGEPAGED"]);
        assert_eq!(
            r.routes,
            [(
                "do_huge_pmd_anonymous_page".to_string(),
                "FAULT".to_string()
            )]
        );
        // khugepaged is missing: the KHUGEPAGED rule is dropped, and
        // collapse_huge_page, without a default, counts under its own name.
        assert_eq!(r.missing, ["khugepaged"]);
        let zap_ranges = vec![
            (0xffffffff81002000, 0xffffffff81003000), // zap_pte_range.isra.0
            (0xffffffff81005000, 0xffffffff81006000), // unmap_page_range
            (0xffffffff81009000, 0xffffffff8100a000), // zap_pte_range.cold
        ];
        let zap = RuleSpec {
            reason: "ZAP".into(),
            ranges: zap_ranges,
            depth: 4,
        };
        assert_eq!(
            r.deep,
            [
                DeepCallerSpec {
                    caller: "folio_remove_rmap_ptes".into(),
                    ranges: vec![(0xffffffff81003000, 0xffffffff81004000)],
                    default_reason: Some("PARTIAL".into()),
                    rules: vec![zap.clone()],
                },
                DeepCallerSpec {
                    caller: "folio_remove_rmap_pmd".into(),
                    ranges: vec![(0xffffffff81004000, 0xffffffff81005000)],
                    default_reason: None,
                    rules: vec![zap],
                },
            ]
        );
        assert_eq!(r.deep_caller_ranges(), 2);
        assert_eq!(r.deep_rule_ranges(), 6);
    }

    #[test]
    fn clones_fold_and_adjacent_parts_merge() {
        let k = Kallsyms::parse(KSYMS);
        assert_eq!(
            function_ranges(&k, "foo"),
            [(0xffffffff81007000, 0xffffffff81007200)]
        );
        assert_eq!(function_ranges(&k, "zap_pte_range").len(), 2);
        assert!(function_ranges(&k, "zap").is_empty());
    }

    #[test]
    fn a_rule_with_missing_within_leaves_the_default_route() {
        let k = Kallsyms::parse(KSYMS);
        let p = Profile::inline("A=foo@nowhere,nothere;B=foo;C=gone").unwrap();
        let r = resolve(&p, &k).unwrap();
        assert!(r.deep.is_empty());
        assert_eq!(r.routes, [("foo".to_string(), "B".to_string())]);
        assert_eq!(r.missing, ["gone", "nowhere", "nothere"]);
        assert_eq!(r.reasons, ["A", "B", "C"]);
    }

    #[test]
    fn bpf_limits_are_enforced() {
        // 17 callers with a rule: one range each.
        // Fillers keep the functions apart, so that no ranges merge.
        let mut text = String::new();
        for i in 0..18u64 {
            let addr = 0xffffffff81000000 + i * 0x200;
            text += &format!("{addr:016x} T f{i}\n{:016x} T filler{i}\n", addr + 0x100);
        }
        let k = Kallsyms::parse(&text);
        let callers: Vec<String> = (0..17).map(|i| format!("f{i}")).collect();
        let p = Profile::inline(&format!("A={}@f17", callers.join(","))).unwrap();
        let e = resolve(&p, &k).unwrap_err().to_string();
        assert!(
            e.starts_with("--rules: callers with `within` rules need 17 address ranges on this kernel, the BPF program takes at most 16 (f0 1, f1 1,"),
            "{e}"
        );
        // 16 fit.
        let p = Profile::inline(&format!("A={}@f17", callers[..16].join(","))).unwrap();
        assert_eq!(resolve(&p, &k).unwrap().deep_caller_ranges(), 16);
        // 3 callers x 11 within functions: 33 rule ranges.
        let within: Vec<String> = (3..14).map(|i| format!("f{i}")).collect();
        let p = Profile::inline(&format!("A=f0,f1,f2@{}", within.join(","))).unwrap();
        let e = resolve(&p, &k).unwrap_err().to_string();
        assert_eq!(
            e,
            "--rules: `within` rules need 33 address ranges on this kernel, the BPF program \
             takes at most 32 (per caller: f0 11, f1 11, f2 11)"
        );
    }

    #[test]
    fn the_listing_shows_addresses_and_missing_names() {
        let k = Kallsyms::parse(KSYMS);
        let p = Profile::parse(GOOD, "t.toml").unwrap();
        let r = resolve(&p, &k).unwrap();
        let s = describe(&p, &r, &k);
        assert!(
            s.starts_with("Reason profile: t.toml, for deferred_split_folio\n  test profile\n"),
            "{s}"
        );
        assert!(
            s.contains(
                "\nFAULT\n  faults\n  caller  do_huge_pmd_anonymous_page  ffffffff81001000\n"
            ),
            "{s}"
        );
        assert!(s.contains("  within  zap_pte_range               ffffffff81002000 (.isra.0), ffffffff81009000 (.cold)\n"), "{s}");
        assert!(
            s.contains("  within  khugepaged                  missing\n  depth   8\n"),
            "{s}"
        );
        assert!(
            s.contains(
                "folio_remove_rmap_ptes: stack walk per call: ZAP (depth 4), else PARTIAL\n"
            ),
            "{s}"
        );
        assert!(s.contains("folio_remove_rmap_pmd: stack walk per call: ZAP (depth 4), else folio_remove_rmap_pmd\n"), "{s}");
        assert!(
            s.contains("BPF tables: 2 of 16 caller ranges, 6 of 32 rule ranges\n"),
            "{s}"
        );
        assert!(s.ends_with("missing on this kernel: khugepaged\n"), "{s}");
    }

    #[test]
    fn descriptions_wrap() {
        let text = "word ".repeat(30);
        let out = wrapped(&text);
        assert!(
            out.lines()
                .all(|l| l.len() <= 78 && l.starts_with("  word")),
            "{out}"
        );
        assert_eq!(out.split_whitespace().count(), 30);
        assert_eq!(wrapped(""), "");
        assert_eq!(
            wrapped(&"x".repeat(100)),
            format!("  {}\n", "x".repeat(100))
        );
    }

    #[test]
    fn an_unreadable_file_is_named() {
        let e = err(Profile::load(Path::new("/nonexistent/p.toml")));
        assert!(e.starts_with("/nonexistent/p.toml: "), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn every_builtin_profile_is_valid_and_listed() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter_map(|n| n.strip_suffix(".toml").map(String::from))
            .collect();
        files.sort();
        let mut listed: Vec<String> = BUILTIN.iter().map(|(n, _)| n.to_string()).collect();
        listed.sort();
        assert_eq!(files, listed, "profiles/*.toml and BUILTIN differ");

        for (name, text) in BUILTIN {
            let p = Profile::parse(text, name).unwrap_or_else(|e| panic!("{e}"));
            assert!(!p.description.is_empty(), "{name}");
            for r in &p.reasons {
                assert!(!r.description.is_empty(), "{name}: {}", r.name);
            }
            let f = p.function.clone().unwrap();
            assert_eq!(
                builtin(name).unwrap().origin,
                format!("built-in profile {name}")
            );
            assert_eq!(builtin_for(&f).unwrap().function, Some(f.clone()));

            // Even with every name present (a kernel has only some of them)
            // the rules fit the BPF tables.
            // Each with a .cold part, and kept apart so that no ranges merge.
            let text: String = all_functions(&p)
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let a = 0xffffffff81000000 + i as u64 * 0x1000;
                    let c = 0xffffffff82000000 + i as u64 * 0x1000;
                    format!("{a:016x} t {f}\n{:016x} t gap{i}\n", a + 0x800)
                        + &format!("{c:016x} t {f}.cold\n{:016x} t gap_cold{i}\n", c + 0x800)
                })
                .collect();
            let k = Kallsyms::parse(&text);
            let r = resolve(&p, &k).unwrap_or_else(|e| panic!("{e}"));
            assert!(r.missing.is_empty());
        }
        assert!(builtin("nonexistent").is_none());
        assert!(builtin_for("vfs_read").is_none());
        assert!(builtin_for("deferred_split_folio.isra.0").is_some());
        let list = builtins();
        assert_eq!(list.len(), BUILTIN.len());
        assert!(list
            .iter()
            .any(|(n, f, _)| *n == "deferred_split_folio" && f == "deferred_split_folio"));
    }

    #[test]
    fn the_thp_profile_sorts_callers_as_verified() {
        let p = builtin("deferred_split_folio").unwrap();
        let names: Vec<_> = p.reasons.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "FAULT_ALLOC",
                "KHUGEPAGED",
                "MADV_COLLAPSE",
                "ZAP",
                "PARTIALLY_MAPPED",
                "MIGRATE"
            ]
        );
        // A 6.12-like kernel: zap_*_range inlined into unmap_page_range,
        // migrate_folio_move into migrate_pages_batch, no map_anon_folio_pmd*.
        let k = Kallsyms::parse(
            "\
ffffffff81000000 T do_huge_pmd_anonymous_page
ffffffff81001000 t collapse_huge_page
ffffffff81002000 t hpage_collapse_scan_pmd
ffffffff81003000 t khugepaged_scan_mm_slot
ffffffff81004000 t khugepaged_do_scan
ffffffff81005000 t khugepaged
ffffffff81006000 T madvise_collapse
ffffffff81007000 T folio_remove_rmap_ptes
ffffffff81008000 T folio_remove_rmap_pmd
ffffffff81009000 T unmap_page_range
ffffffff8100a000 t migrate_pages_batch
ffffffff8100b000 T deferred_split_folio
ffffffff8100c000 T _etext
",
        );
        let r = resolve(&p, &k).unwrap();
        let routes: Vec<(&str, &str)> = r
            .routes
            .iter()
            .map(|(c, n)| (c.as_str(), n.as_str()))
            .collect();
        assert_eq!(
            routes,
            [
                ("do_huge_pmd_anonymous_page", "FAULT_ALLOC"),
                ("migrate_pages_batch", "MIGRATE")
            ]
        );
        let deep: Vec<(&str, Option<&str>, Vec<&str>)> = r
            .deep
            .iter()
            .map(|d| {
                (
                    d.caller.as_str(),
                    d.default_reason.as_deref(),
                    d.rules.iter().map(|x| x.reason.as_str()).collect(),
                )
            })
            .collect();
        assert_eq!(
            deep,
            [
                (
                    "collapse_huge_page",
                    None,
                    vec!["KHUGEPAGED", "MADV_COLLAPSE"]
                ),
                (
                    "folio_remove_rmap_ptes",
                    Some("PARTIALLY_MAPPED"),
                    vec!["ZAP"]
                ),
                (
                    "folio_remove_rmap_pmd",
                    Some("PARTIALLY_MAPPED"),
                    vec!["ZAP"]
                ),
            ]
        );
        // KHUGEPAGED: khugepaged_scan_mm_slot and khugepaged (apart, as
        // khugepaged_do_scan lies between); then one range each.
        assert_eq!(r.deep_rule_ranges(), 2 + 1 + 1 + 1);
    }
}
