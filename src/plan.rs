//! From the command line to what gets loaded: the reason profile, the
//! reason mapping, the BPF settings and the loop's options.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cli::Cli;
use crate::error::{Error, Result};
use crate::kallsyms::Kallsyms;
use crate::probe::{self, Companion, DeepCaller, DeepRule, Settings};
use crate::profile::{self, Profile, Resolved};
use crate::reasons::Mapper;
use crate::session;

/// The profile the options ask for: a file, inline rules, a named
/// built-in, none, or by default the built-in for FUNC if there is one.
pub fn choose_profile(cli: &Cli, func: &str) -> Result<Option<Profile>> {
    let p = if cli.no_profile {
        None
    } else if let Some(path) = &cli.reasons {
        Some(Profile::load(path)?)
    } else if let Some(spec) = &cli.rules {
        Some(Profile::inline(spec)?)
    } else if let Some(name) = &cli.profile {
        let names: Vec<&str> = profile::builtins().into_iter().map(|b| b.0).collect();
        Some(profile::builtin(name).ok_or_else(|| {
            Error::msg(format!(
                "no built-in profile named '{name}'; built-in profiles: {}",
                names.join(", ")
            ))
        })?)
    } else {
        profile::builtin_for(func)
    };
    if let Some(p) = &p {
        if let Some(f) = p.function.as_deref().filter(|f| *f != func) {
            eprintln!(
                "topdown: warning: profile {} is meant for {f}, not {func}",
                p.origin
            );
        }
    }
    Ok(p)
}

/// What to say about profile functions this kernel lacks. A user's own
/// profile: every one. A built-in profile covers several kernel versions,
/// so names from other versions are expected to be missing: only reasons
/// left with no function at all, whose rows would stay empty, are named.
pub fn missing_warning(users_own: bool, r: &Resolved) -> Option<String> {
    let see = "(inlined or absent; see --list-reasons)";
    if users_own {
        return (!r.missing.is_empty()).then(|| {
            format!(
                "functions not in this kernel {see}: {}",
                r.missing.join(", ")
            )
        });
    }
    let live: HashSet<&str> = r
        .routes
        .iter()
        .map(|(_, reason)| reason.as_str())
        .chain(r.deep.iter().flat_map(|d| {
            d.rules
                .iter()
                .map(|rule| rule.reason.as_str())
                .chain(d.default_reason.as_deref())
        }))
        .collect();
    let dead: Vec<&str> = r
        .reasons
        .iter()
        .map(String::as_str)
        .filter(|name| !live.contains(name))
        .collect();
    (!dead.is_empty()).then(|| {
        format!(
            "reasons with no function in this kernel {see}: {}",
            dead.join(", ")
        )
    })
}

/// The debug vmlinux stacks and source patterns are resolved with: the
/// one given, or one where distributions install it for this kernel.
pub fn debug_vmlinux(given: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = given {
        return Some(p.to_path_buf());
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let release = release.trim();
    [
        format!("/usr/lib/debug/boot/vmlinux-{release}"),
        format!("/boot/vmlinux-{release}"),
        format!("/usr/lib/debug/lib/modules/{release}/vmlinux"),
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

/// What to say when a user's profile has callers that only debug info can
/// place and there is no debug vmlinux. (A built-in profile's names from
/// other kernel versions are missing as a matter of course.)
pub fn source_warning(users_own: bool, r: &Resolved, vmlinux: Option<&Path>) -> Option<String> {
    if !users_own || r.source_routes.is_empty() || vmlinux.is_some() {
        return None;
    }
    let names: Vec<&str> = r.source_routes.iter().map(|(p, _)| p.as_str()).collect();
    Some(format!(
        "{} can only be matched with a debug vmlinux (--vmlinux PATH); \
         without one, those calls count under their caller functions",
        names.join(", ")
    ))
}

/// The reason mapping and the BPF deep-caller tables for a profile (or
/// none: one reason per caller).
pub fn mapping(
    resolved: Option<&Resolved>,
    max_reasons: usize,
) -> (Mapper, Vec<DeepCaller>, Vec<DeepRule>) {
    match resolved {
        Some(r) => Mapper::from_profile(r, max_reasons),
        None => (Mapper::auto(max_reasons), Vec::new(), Vec::new()),
    }
}

/// The slot of the reason named by --stack-on: a profile reason, or in
/// auto mode any kernel function (callers are reasons).
pub fn stack_reason(ksyms: &Kallsyms, mapper: &mut Mapper, name: &str) -> Result<u32> {
    if let Some(slot) = mapper.reasons.lookup(name) {
        return Ok(slot);
    }
    if ksyms.function(name).next().is_some() {
        return Ok(mapper.reasons.slot(name));
    }
    let known: Vec<&str> = mapper.reasons.reason_names().collect();
    let valid = if known.is_empty() {
        "a caller function's name".to_string()
    } else {
        format!("one of {} or a caller function's name", known.join(", "))
    };
    Err(Error::msg(format!(
        "unknown reason '{name}' for --stack-on: give {valid}"
    )))
}

/// What the BPF programs are given before load.
pub fn settings(
    cli: &Cli,
    func: &str,
    func_addr: u64,
    callers: Vec<DeepCaller>,
    rules: Vec<DeepRule>,
) -> Settings {
    let cpus = libbpf_rs::num_possible_cpus().unwrap_or(1);
    Settings {
        func: func.to_string(),
        func_addr,
        verify_caller: cli.verify_caller,
        user_stacks: cli.user_stacks,
        stack_frames: cli.depth,
        sample_every: cli.sample,
        max_per_cpu_sec: per_cpu_budget(cli.max_rate, cpus),
        callers,
        rules,
        own_tgid: std::process::id(),
        companion: match cli.companion.as_deref() {
            Some("fentry") => Some(Companion::Fentry),
            Some("fexit") => Some(Companion::Fexit),
            _ => None,
        },
    }
}

/// How the interval loop runs and reports.
pub fn session_options(cli: &Cli, func_addr: u64, stack_on: Option<u32>) -> session::Options {
    session::Options {
        interval: Duration::from_secs_f64(cli.interval),
        duration: cli.duration.map(Duration::from_secs_f64),
        json: cli.json,
        quiet: cli.quiet,
        verify_caller: cli.verify_caller,
        func_addr,
        entry_window: probe::ENTRY_WINDOW,
        threshold: cli.threshold,
        min_events: cli.min_events,
        auto: !cli.no_auto,
        stack_on,
        top: cli.top,
        folded: cli.folded.clone(),
        vmlinux: debug_vmlinux(cli.vmlinux.as_deref()),
        verbose: cli.verbose,
    }
}

/// The stack-rate cap per CPU: the BPF side keeps one budget per CPU so the
/// hot path needs no shared state. Rounded up, and at least 1.
pub fn per_cpu_budget(max_rate: u64, cpus: usize) -> u64 {
    max_rate.div_ceil(cpus.max(1) as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{DeepCallerSpec, RuleSpec};

    fn resolved() -> Resolved {
        Resolved {
            reasons: vec!["FAULT".into(), "KHUGEPAGED".into(), "MIGRATE".into()],
            routes: vec![("do_fault".into(), "FAULT".into())],
            deep: vec![DeepCallerSpec {
                caller: "collapse".into(),
                ranges: vec![(1, 2)],
                default_reason: None,
                rules: vec![RuleSpec {
                    reason: "KHUGEPAGED".into(),
                    ranges: vec![(3, 4)],
                    depth: 8,
                }],
            }],
            missing: vec!["map_anon_folio_pmd".into(), "migrate_folio_move".into()],
            source_routes: vec![],
        }
    }

    #[test]
    fn a_built_in_profile_warns_only_about_reasons_left_empty() {
        assert_eq!(
            missing_warning(false, &resolved()).unwrap(),
            "reasons with no function in this kernel (inlined or absent; see --list-reasons): MIGRATE"
        );
        let mut r = resolved();
        r.reasons.pop();
        assert_eq!(missing_warning(false, &r), None);
    }

    #[test]
    fn a_users_profile_warns_about_every_missing_function() {
        assert_eq!(
            missing_warning(true, &resolved()).unwrap(),
            "functions not in this kernel (inlined or absent; see --list-reasons): map_anon_folio_pmd, migrate_folio_move"
        );
    }

    #[test]
    fn stack_reasons_are_profile_reasons_or_kernel_functions() {
        let k = Kallsyms::parse("ffffffff81000000 T vfs_read\nffffffff81001000 T end\n");
        let (mut m, _, _) = mapping(Some(&resolved()), 64);
        assert_eq!(stack_reason(&k, &mut m, "FAULT").unwrap(), 2);
        let own = stack_reason(&k, &mut m, "vfs_read").unwrap();
        assert_eq!(m.reasons.name(own), "vfs_read");
        let e = stack_reason(&k, &mut m, "NOPE").unwrap_err().to_string();
        assert!(
            e.starts_with(
                "unknown reason 'NOPE' for --stack-on: give one of FAULT, KHUGEPAGED, MIGRATE"
            ),
            "{e}"
        );
    }

    #[test]
    fn source_patterns_without_a_vmlinux_are_a_warning() {
        let mut r = resolved();
        assert_eq!(source_warning(true, &r, None), None);
        r.source_routes = vec![
            ("zap_pte_range".into(), "ZAP".into()),
            ("file:mm/rmap.c".into(), "ZAP".into()),
        ];
        assert_eq!(
            source_warning(true, &r, Some(Path::new("/x/vmlinux"))),
            None
        );
        assert_eq!(source_warning(false, &r, None), None);
        assert_eq!(
            source_warning(true, &r, None).unwrap(),
            "zap_pte_range, file:mm/rmap.c can only be matched with a debug vmlinux (--vmlinux PATH); \
             without one, those calls count under their caller functions"
        );
        assert_eq!(
            debug_vmlinux(Some(Path::new("/x"))),
            Some(PathBuf::from("/x"))
        );
    }

    #[test]
    fn the_stack_cap_is_split_over_cpus_rounding_up() {
        assert_eq!(per_cpu_budget(1000, 2), 500);
        assert_eq!(per_cpu_budget(1001, 2), 501);
        assert_eq!(per_cpu_budget(1, 64), 1);
        assert_eq!(per_cpu_budget(10, 0), 10);
    }
}
