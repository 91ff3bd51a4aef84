//! The flags validated once into one `Plan`: which job to run and with
//! what. Everything that needs only the command line (and the files it
//! names) is checked here, before the kernel is asked anything.

use std::path::PathBuf;
use std::time::Duration;

use crate::bpf::attach::Request;
use crate::bpf::probe::{Companion, Mode};
use crate::cli::{Cli, CompanionKind};
use crate::error::{Error, Result};
use crate::profile::{self, Profile};
use crate::session::{self, TriggerConfig};

/// What to do.
#[derive(Debug)]
pub struct Plan {
    pub job: Job,
    /// Show libbpf's own messages.
    pub verbose: bool,
}

#[derive(Debug)]
pub enum Job {
    /// `--list-profiles`.
    ListProfiles,
    /// `--list-reasons`: the profile as resolved on this kernel.
    ListReasons(Target),
    /// Count calls, capture stacks, report.
    Trace(Box<Trace>),
}

/// The traced function and how its callers are grouped into reasons.
#[derive(Debug)]
pub struct Target {
    pub(crate) func: String,
    /// None: one reason per caller function.
    pub(crate) profile: Option<Profile>,
    /// A profile the user wrote (a file or --rules), as opposed to a
    /// built-in one: warnings are more detailed for it.
    pub(crate) users_own: bool,
    /// --vmlinux, if given.
    pub(crate) vmlinux: Option<PathBuf>,
}

/// A tracing run.
#[derive(Debug)]
pub struct Trace {
    pub(crate) target: Target,
    pub(crate) request: Request,
    pub(crate) companion: Option<Companion>,
    pub(crate) max_reasons: usize,
    pub(crate) stack_on: Option<String>,
    pub(crate) verify_caller: bool,
    pub(crate) user_stacks: bool,
    pub(crate) depth: u32,
    pub(crate) sample: u32,
    pub(crate) trigger: TriggerConfig,
    pub(crate) session: session::Options,
}

impl Plan {
    pub fn from_cli(cli: &Cli) -> Result<Plan> {
        let job = if cli.list_profiles {
            Job::ListProfiles
        } else if cli.list_reasons {
            Job::ListReasons(target(cli)?)
        } else {
            Job::Trace(Box::new(trace(cli)?))
        };
        Ok(Plan {
            job,
            verbose: cli.verbose,
        })
    }
}

fn target(cli: &Cli) -> Result<Target> {
    // clap requires FUNC unless --list-profiles is given.
    let func = cli.func.clone().unwrap_or_default();
    Ok(Target {
        profile: choose_profile(cli, &func)?,
        users_own: cli.reasons.is_some() || cli.rules.is_some(),
        vmlinux: cli.vmlinux.clone(),
        func,
    })
}

fn trace(cli: &Cli) -> Result<Trace> {
    let companion = cli.companion.map(|k| match k {
        CompanionKind::Fentry => Companion::Fentry,
        CompanionKind::Fexit => Companion::Fexit,
    });
    let request = match (cli.fentry, cli.kprobe, companion) {
        (_, true, Some(_)) => {
            return Err(Error::msg(
                "--companion needs fentry mode: leave out --kprobe",
            ))
        }
        // A companion program exists only beside fentry: no fallback.
        (true, _, _) | (_, _, Some(_)) => Request::Only(Mode::Fentry),
        (_, true, _) => Request::Only(Mode::Kprobe),
        _ => Request::Auto,
    };
    Ok(Trace {
        target: target(cli)?,
        request,
        companion,
        max_reasons: cli.max_reasons as usize,
        stack_on: cli.stack_on.clone(),
        verify_caller: cli.verify_caller,
        user_stacks: cli.user_stacks,
        depth: cli.depth,
        sample: cli.sample,
        trigger: TriggerConfig {
            threshold: cli.threshold,
            min_events: cli.min_events,
            min_rate: cli.min_rate,
            auto: !cli.no_auto,
        },
        session: session::Options {
            interval: Duration::from_secs_f64(cli.interval),
            duration: cli.duration.map(Duration::from_secs_f64),
            json: cli.json,
            quiet: cli.quiet,
            verify_caller: cli.verify_caller,
            top: cli.top,
            folded: cli.folded.clone(),
            max_rate: cli.max_rate,
            verbose: cli.verbose,
        },
    })
}

/// The profile the options ask for: a file, inline rules, a named
/// built-in, none, or by default the built-in for FUNC if there is one.
fn choose_profile(cli: &Cli, func: &str) -> Result<Option<Profile>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn plan(args: &[&str]) -> Result<Plan> {
        Plan::from_cli(&Cli::try_parse_from(args).unwrap())
    }

    fn trace_of(args: &[&str]) -> Trace {
        match plan(args).unwrap().job {
            Job::Trace(t) => *t,
            other => panic!("not a trace: {other:?}"),
        }
    }

    #[test]
    fn modes_and_companions() {
        let t = trace_of(&["topdown", "vfs_read"]);
        assert_eq!(t.request, Request::Auto);
        let t = trace_of(&["topdown", "vfs_read", "--kprobe"]);
        assert_eq!(t.request, Request::Only(Mode::Kprobe));
        let t = trace_of(&["topdown", "vfs_read", "--companion", "fexit"]);
        assert_eq!(t.request, Request::Only(Mode::Fentry));
        assert_eq!(t.companion, Some(Companion::Fexit));
        let e = plan(&["topdown", "vfs_read", "--companion", "fentry", "--kprobe"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--companion needs fentry mode: leave out --kprobe"
        );
    }

    #[test]
    fn profiles_are_chosen_once() {
        let t = trace_of(&["topdown", "deferred_split_folio"]);
        assert_eq!(
            t.target.profile.unwrap().origin,
            "built-in profile deferred_split_folio"
        );
        assert!(!t.target.users_own);
        let t = trace_of(&["topdown", "deferred_split_folio", "--no-profile"]);
        assert!(t.target.profile.is_none());
        let t = trace_of(&["topdown", "vfs_read", "--rules", "A=ksys_read"]);
        assert!(t.target.users_own);
        let e = plan(&["topdown", "vfs_read", "--profile", "nope"]).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("no built-in profile named 'nope'; built-in profiles: "));
        assert!(matches!(
            plan(&["topdown", "--list-profiles"]).unwrap().job,
            Job::ListProfiles
        ));
        assert!(matches!(
            plan(&["topdown", "vfs_read", "--list-reasons"])
                .unwrap()
                .job,
            Job::ListReasons(_)
        ));
    }
}
