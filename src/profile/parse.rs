//! Reading profiles: the TOML file form and the one-line inline form.

use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::error::{Error, Result};
use crate::profile::model::{Profile, VERSION};
use crate::profile::validate::{check_function, check_knobs, validate, Draft, FILE_PREFIX};

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
    knobs: Option<Spanned<Vec<String>>>,
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
    pub(crate) fn parse(text: &str, origin: &str) -> Result<Profile> {
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
        let knobs = match file.knobs {
            Some(k) => {
                let place = at(k.span().start);
                check_knobs(k.into_inner()).map_err(|m| Error::msg(format!("{place}: {m}")))?
            }
            None => Vec::new(),
        };
        Ok(Profile {
            origin: origin.to_string(),
            function: Some(function.clone()),
            description: file.description,
            reasons: validate(drafts)?,
            knobs,
        })
    }

    /// Reads and parses a profile file.
    pub(crate) fn load(path: &Path) -> Result<Profile> {
        let origin = path.display().to_string();
        let text = crate::input::read_text(path, crate::input::MAX_PROFILE)
            .map_err(|e| Error::msg(format!("{origin}: {e}")))?;
        Self::parse(&text, &origin)
    }

    /// Parses the inline form (`--rules`):
    /// `NAME=caller[,caller...][@within[,within...][/depth]]` joined by `;`.
    pub(crate) fn inline(spec: &str) -> Result<Profile> {
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
            // A / in callers is a misplaced depth, except in file: paths.
            if callers
                .split(',')
                .any(|c| c.contains('/') && !c.trim().starts_with(FILE_PREFIX))
            {
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
            knobs: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::fixtures::*;
    use crate::profile::model::{Within, DEFAULT_DEPTH};

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
    fn knobs_are_files_under_proc_sys_or_sys_given_once() {
        let with = |k: &str| {
            parse_edited(
                "description = \"test profile\"",
                &format!("description = \"test profile\"\nknobs = {k}"),
            )
        };
        assert!(parse_edited("", "").unwrap().knobs.is_empty());
        let p = with(r#"["/proc/sys/vm/swappiness", "/sys/kernel/mm/ksm/run"]"#).unwrap();
        assert_eq!(
            p.knobs,
            ["/proc/sys/vm/swappiness", "/sys/kernel/mm/ksm/run"]
        );
        assert_eq!(
            err(with(r#"["/etc/shadow"]"#)),
            "t.toml:5: knob `/etc/shadow`: not a file under /proc/sys or /sys"
        );
        assert_eq!(
            err(with(r#"["/sys/../etc/shadow"]"#)),
            "t.toml:5: knob `/sys/../etc/shadow`: empty, `.` or `..` parts in the path"
        );
        assert_eq!(
            err(with(r#"["/sys/a", "/sys/a"]"#)),
            "t.toml:5: knob `/sys/a` is named twice"
        );
        let many: Vec<String> = (0..65).map(|i| format!("\"/sys/k{i}\"")).collect();
        assert_eq!(
            err(with(&format!("[{}]", many.join(",")))),
            "t.toml:5: 65 knobs; at most 64 may be recorded"
        );
        assert!(err(with("\"/sys/a\"")).starts_with("t.toml:5: "));
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
    fn inline_file_patterns_keep_their_slashes() {
        let p = Profile::inline("GUP=file:mm/gup.c, faultin_page;Z=f@g/3").unwrap();
        assert_eq!(p.reasons[0].callers, ["file:mm/gup.c", "faultin_page"]);
        assert_eq!(p.reasons[0].within, None);
        assert_eq!(p.reasons[1].within.as_ref().unwrap().depth, 3);
        let e = err(Profile::inline("A=file:mm/gup.c,f/4"));
        assert!(e.contains("a depth (/N) needs @within"), "{e}");
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

    #[test]
    fn an_unreadable_file_is_named() {
        let e = err(Profile::load(Path::new("/nonexistent/p.toml")));
        assert!(e.starts_with("/nonexistent/p.toml: "), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
}
