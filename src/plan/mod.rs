//! The flags validated once into one `Plan`: which job to run and with
//! what. Everything that needs only the command line (and the files it
//! names) is checked here, before the kernel is asked anything.

use std::path::PathBuf;
use std::time::Duration;

use crate::bpf::attach::Request;
use crate::bpf::probe::{Companion, Mode};
use clap::Parser;

use crate::cli::{
    CaptureArgs, Cli, Command, CompanionKind, ModeArgs, ProfileArgs, ShowArgs, TraceArgs,
    TriggerArgs,
};
use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::funcname::{self, FuncName, Hook};
use crate::listen::Listen;
use crate::profile::{self, Profile};
use crate::report::printer::Printer;
use crate::report::saved;
use crate::report::Saved;
use crate::report::{Baseline, VerifyConfig};
use crate::session::{self, TriggerConfig};
use crate::user::UserTarget;

/// What to do.
#[derive(Debug)]
pub struct Plan {
    pub job: Job,
    /// Show libbpf's own messages.
    pub verbose: bool,
    /// Options given that do nothing with the others: one line each.
    pub warnings: Vec<String>,
}

#[derive(Debug)]
pub enum Job {
    /// `--list-profiles` (with --json: NDJSON).
    ListProfiles { json: bool },
    /// `-l [PATTERN]`: what can be traced (with -x: in that file).
    ListTargets {
        pattern: String,
        binary: Option<String>,
    },
    /// `--list-reasons`: the profile as resolved on this kernel (with
    /// --json: one object).
    ListReasons { target: Target, json: bool },
    /// Count calls, capture stacks, report.
    Trace(Box<Trace>),
    /// Attach tier 1 and pin it.
    Pin(Box<Pin>),
    /// Print pinned functions' totals (all if none is named).
    Show(Box<Show>),
    /// Make the pinned set match the declarations in a directory.
    Sync { dir: PathBuf },
    /// Remove pinned functions (all if none is named; with `synced`, those
    /// `pin --sync` pinned).
    Unpin { funcs: Vec<FuncName>, synced: bool },
    /// Serve the pinned functions' counters (and with `capture`, steer
    /// their stack capture and serve the stacks).
    Serve {
        listen: Listen,
        capture: Option<ServeCapture>,
    },
}

/// What is fixed when the counting program is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    pub(crate) request: Request,
    pub(crate) user_stacks: bool,
    pub(crate) depth: u32,
    pub(crate) sample: u32,
    /// --background-stacks: stacks a reason may take on a CPU in a row
    /// before any capture (0: none).
    pub(crate) background: u32,
    /// --drill's deepest level (0: no --drill): the frames of a path, the
    /// caller's first (level 1, its reason's), then those above it.
    pub(crate) drill_levels: u32,
}

/// Tier 1 to pin.
#[derive(Debug)]
pub struct Pin {
    pub(crate) target: Target,
    pub(crate) max_reasons: usize,
    pub(crate) load: Load,
    /// --cgroup and --cpu (no --pid: a pin outlives processes).
    pub(crate) filter: Filter,
}

/// `topdown show`.
#[derive(Debug)]
pub struct Show {
    /// Empty: all, or with --save the one pinned function.
    pub(crate) funcs: Vec<FuncName>,
    pub(crate) printer: Printer,
    /// --save, checked writable.
    pub(crate) save: Option<PathBuf>,
    pub(crate) baseline: Option<Baseline>,
    /// The share at which a reason is hot, and --fix.
    pub(crate) threshold: f64,
    pub(crate) fix: Option<String>,
}

/// The traced function and how its callers are grouped into reasons.
#[derive(Debug)]
pub struct Target {
    /// A function's name, or a tracepoint's event's.
    pub(crate) func: FuncName,
    /// A tracepoint's category (`t:CATEGORY:EVENT`): `func` is the event.
    pub(crate) tracepoint: Option<String>,
    /// None: one reason per caller function.
    pub(crate) profile: Option<Profile>,
    /// A profile the user wrote (a file or --rules), as opposed to a
    /// built-in one: warnings are more detailed for it.
    pub(crate) users_own: bool,
    /// --vmlinux, if given.
    pub(crate) vmlinux: Option<PathBuf>,
    /// -x: FUNC is a function in this ELF file, traced with a uprobe.
    pub(crate) user: Option<UserTarget>,
}

/// A tracing run.
#[derive(Debug)]
pub struct Trace {
    pub(crate) target: Target,
    pub(crate) load: Load,
    pub(crate) companion: Option<Companion>,
    pub(crate) max_reasons: usize,
    pub(crate) stack_on: Option<String>,
    pub(crate) verify_caller: bool,
    /// Options the user gave that a pinned instance fixed at pin time.
    pub(crate) load_options: Vec<&'static str>,
    pub(crate) trigger: TriggerConfig,
    pub(crate) session: session::Options,
    /// Which calls count.
    pub(crate) filter: Filter,
    /// The files written at exit, checked writable.
    pub(crate) files: Files,
    /// --fix: what the fix was, kept in the result and the comparison.
    pub(crate) fix: Option<String>,
    /// -c CMD (as `/bin/sh -c CMD`) or `-- CMD ARGS`: run, and counted.
    pub(crate) command: Option<Vec<String>>,
}

impl Trace {
    /// Whether stacks may be captured in this run (capture can start by
    /// itself, or --stack-on): the capture gate and the background sampler
    /// are compiled in.
    pub(crate) fn stacks(&self) -> bool {
        self.trigger.auto || self.stack_on.is_some()
    }

    /// Whether the program has the background sampler (compiled in only
    /// where stacks may be captured: to a program without it, a flagged
    /// site is a mere cache miss, so user space must not flag).
    pub(crate) fn background(&self) -> bool {
        self.load.background > 0 && self.stacks()
    }
}

/// The files a run writes at exit (--folded, --flamegraph, --save),
/// checked writable before anything is loaded.
#[derive(Debug, Default)]
pub struct Files {
    pub(crate) folded: Option<PathBuf>,
    pub(crate) flamegraph: Option<PathBuf>,
    pub(crate) save: Option<PathBuf>,
}

impl Plan {
    /// The plan, or what is wrong with the command line or the files it
    /// names: a usage error (exit status 2), as nothing was asked of the
    /// system yet.
    pub fn from_cli(cli: &Cli) -> Result<Plan> {
        Plan::of(cli).map_err(Error::into_usage)
    }

    fn of(cli: &Cli) -> Result<Plan> {
        let (job, verbose) = match &cli.command {
            None => trace_job(&cli.trace)?,
            Some(Command::Trace(t)) => trace_job(t)?,
            Some(Command::Pin(p)) if p.binary.is_some() => {
                return Err(Error::usage(
                    "a user-space function cannot be pinned: its call sites are addresses in \
                     processes that only a running topdown can name before they exit; \
                     trace it with topdown -x PATH FUNC",
                ))
            }
            Some(Command::Pin(p)) if p.sync => (
                Job::Sync {
                    dir: p
                        .config_dir
                        .clone()
                        .unwrap_or_else(|| crate::cli::CONFIG_DIR.into()),
                },
                p.verbose,
            ),
            Some(Command::Pin(p)) => {
                let given = p
                    .func
                    .as_ref()
                    .ok_or_else(|| Error::usage("no FUNC given (see topdown pin --help)"))?;
                let mut load = load(&p.mode, &p.capture, None)?;
                if given.tracepoint.is_some() {
                    if p.mode.fentry || p.mode.kprobe {
                        return Err(Error::usage(format!(
                            "'t:{}:{}' is a tracepoint: it takes no --fentry or --kprobe",
                            given.tracepoint.as_deref().unwrap_or_default(),
                            given.func
                        )));
                    }
                    load.request = Request::Tracepoint;
                }
                (
                    Job::Pin(Box::new(Pin {
                        target: Target {
                            tracepoint: given.tracepoint.clone(),
                            ..target(pinnable(&given.func)?, &p.profile)?
                        },
                        max_reasons: p.profile.max_reasons as usize,
                        load,
                        filter: Filter::check(&[], p.cgroup.as_deref(), p.cpus.as_ref())?,
                    })),
                    p.verbose,
                )
            }
            Some(Command::Show(s)) => (Job::Show(Box::new(show(s)?)), false),
            Some(Command::Unpin(u)) => (
                Job::Unpin {
                    funcs: u.funcs.clone(),
                    synced: u.synced,
                },
                false,
            ),
            Some(Command::Serve(s)) => (
                Job::Serve {
                    listen: s.listen.clone(),
                    capture: s.capture.then(|| ServeCapture {
                        trigger: trigger_config(&s.trigger),
                        max_rate: s.trigger.max_rate,
                    }),
                },
                false,
            ),
        };
        Ok(Plan {
            job,
            verbose,
            warnings: idle_options(cli),
        })
    }
}

/// Options given (not at their defaults) that the others make do nothing.
fn idle_options(cli: &Cli) -> Vec<String> {
    let d = Cli::try_parse_from(["topdown", "f"])
        .map(|c| c.trace)
        .expect("the defaults parse");
    match &cli.command {
        None => idle_trace(&cli.trace, &d),
        Some(Command::Trace(t)) => idle_trace(t, &d),
        Some(Command::Serve(s)) if !s.capture => given_trigger(&s.trigger, &d.trigger)
            .into_iter()
            .map(|o| format!("{o} does nothing without --capture"))
            .collect(),
        _ => Vec::new(),
    }
}

/// The trigger's options given, with a value other than the default.
fn given_trigger(t: &TriggerArgs, d: &TriggerArgs) -> Vec<&'static str> {
    [
        (t.threshold != d.threshold, "--threshold"),
        (t.min_rate != d.min_rate, "--min-rate"),
        (t.min_events != d.min_events, "--min-events"),
        (t.max_rate != d.max_rate, "--max-rate"),
    ]
    .into_iter()
    .filter_map(|(given, name)| given.then_some(name))
    .collect()
}

fn idle_trace(t: &TraceArgs, d: &TraceArgs) -> Vec<String> {
    let mut idle = Vec::new();
    if t.no_auto {
        for o in given_trigger(&t.trigger, &d.trigger) {
            if o != "--max-rate" {
                idle.push(format!(
                    "{o} does nothing with --no-auto (capture never starts by itself)"
                ));
            }
        }
    }
    if t.no_auto && t.stack_on.is_none() {
        let c = &t.capture;
        let given = [
            (t.trigger.max_rate != d.trigger.max_rate, "--max-rate"),
            (c.sample != d.capture.sample, "--sample"),
            (c.depth != d.capture.depth, "--depth"),
            (c.user_stacks, "--user-stacks"),
            (t.drill, "--drill"),
            (
                c.background_stacks != d.capture.background_stacks,
                "--background-stacks",
            ),
        ];
        for (_, o) in given.iter().filter(|(given, _)| *given) {
            idle.push(format!(
                "{o} does nothing with --no-auto and no --stack-on (no stack is captured)"
            ));
        }
    }
    if t.verify_drop != d.verify_drop && t.baseline.is_none() {
        idle.push("--verify-drop does nothing without --baseline".to_string());
    }
    idle
}

/// A function whose name can name its pin directory: bpffs refuses dots
/// in names, so a compiler's clone (`f.isra.0`) cannot be pinned.
pub(crate) fn pinnable(func: &FuncName) -> Result<&FuncName> {
    if func.contains('.') {
        return Err(Error::usage(format!(
            "{func} cannot be pinned: bpffs allows no '.' in names; trace it with topdown {func}"
        )));
    }
    Ok(func)
}

fn trace_job(t: &TraceArgs) -> Result<(Job, bool)> {
    if t.list_profiles {
        return Ok((Job::ListProfiles { json: t.json }, t.verbose));
    }
    if let Some(pattern) = &t.list {
        let job = Job::ListTargets {
            pattern: pattern.clone(),
            binary: t.binary.clone(),
        };
        return Ok((job, t.verbose));
    }
    // clap requires FUNC unless --list-profiles is given.
    let given = t
        .func
        .as_deref()
        .ok_or_else(|| Error::usage("no FUNC given (see topdown --help)"))?;
    let (func, hook) =
        funcname::parse_trace_func(given, t.binary.is_some()).map_err(Error::usage)?;
    // `p:FUNC`, `kprobe:FUNC`: as --kprobe; `u:LIB:FUNC`: as -x LIB FUNC.
    let mut with_hook;
    let mut tracepoint = None;
    let raw = matches!(hook, Some(Hook::RawTracepoint(_)));
    let t = match hook {
        Some(Hook::Kprobe) if !t.mode.kprobe => {
            if t.mode.fentry {
                return Err(Error::usage(format!(
                    "'{given}' asks for a kprobe: leave out --fentry"
                )));
            }
            with_hook = t.clone();
            with_hook.mode.kprobe = true;
            &with_hook
        }
        Some(Hook::Uprobe(lib)) => {
            with_hook = t.clone();
            with_hook.binary = Some(lib);
            &with_hook
        }
        Some(Hook::Tracepoint(category) | Hook::RawTracepoint(category)) => {
            let refused = [
                (t.mode.fentry, "--fentry"),
                (t.mode.kprobe, "--kprobe"),
                (
                    matches!(
                        t.companion,
                        Some(CompanionKind::Fentry | CompanionKind::Fexit)
                    ),
                    "--companion fentry or fexit",
                ),
            ];
            if let Some((_, what)) = refused.iter().find(|(given, _)| *given) {
                return Err(Error::usage(format!(
                    "'{given}' is a tracepoint: it takes no {what}"
                )));
            }
            tracepoint = Some(category);
            t
        }
        _ => t,
    };
    let job = if t.list_reasons && t.binary.is_some() {
        return Err(Error::usage(
            "--list-reasons resolves a profile on the kernel: not with -x",
        ));
    } else if t.list_reasons {
        Job::ListReasons {
            target: Target {
                tracepoint,
                ..target(&func, &t.profile)?
            },
            json: t.json,
        }
    } else {
        let mut trace = trace(&func, tracepoint.as_deref(), t)?;
        if tracepoint.is_some() {
            trace.load.request = match raw {
                true => Request::RawTracepoint,
                false => Request::Tracepoint,
            };
        }
        Job::Trace(Box::new(trace))
    };
    Ok((job, t.verbose))
}

/// A --baseline file read and checked (for `func` if known), with what a
/// verified fix must achieve.
fn baseline(
    path: Option<&PathBuf>,
    func: Option<&str>,
    verify: VerifyConfig,
) -> Result<Option<Baseline>> {
    path.map(|p| {
        Ok(Baseline {
            file: p.display().to_string(),
            saved: Saved::load(p, func)?,
            verify,
        })
    })
    .transpose()
}

fn show(s: &ShowArgs) -> Result<Show> {
    let one = s.save.is_some() || s.baseline.is_some();
    if one && s.funcs.len() > 1 {
        return Err(Error::usage(
            "--save and --baseline take one pinned function: name one",
        ));
    }
    let verify = VerifyConfig {
        threshold: s.threshold,
        drop: s.verify_drop,
        fail_on_move: s.fail_on_move,
    };
    let baseline = baseline(
        s.baseline.as_ref(),
        s.funcs.first().map(FuncName::as_str),
        verify,
    )?;
    if let Some(path) = &s.save {
        saved::check_writable(path, "--save")?;
    }
    let mut funcs = s.funcs.clone();
    if let (true, Some(b)) = (funcs.is_empty(), &baseline) {
        // The baseline names the function.
        let func = FuncName::parse(&b.saved.func).map_err(|why| {
            Error::msg(format!(
                "baseline {}: '{}' is not a kernel function name: {why}",
                b.file,
                b.saved.func.escape_debug()
            ))
        })?;
        funcs.push(func);
    }
    Ok(Show {
        funcs,
        printer: Printer::of(s.json),
        save: s.save.clone(),
        baseline,
        threshold: s.threshold,
        fix: s.fix.clone(),
    })
}

fn target(func: &FuncName, p: &ProfileArgs) -> Result<Target> {
    if let Some(v) = &p.vmlinux {
        check_vmlinux(v)?;
    }
    Ok(Target {
        profile: choose_profile(p, func)?,
        users_own: p.reasons.is_some() || p.rules.is_some(),
        vmlinux: p.vmlinux.clone(),
        func: func.clone(),
        tracepoint: None,
        user: None,
    })
}

/// `-x PATH FUNC`: FUNC found in the file, and the options that make sense
/// for a uprobe. Reasons are caller functions; a profile (--reasons,
/// --rules) routes callers by name, without deeper frames.
fn user_target(binary: &str, func: &FuncName, t: &TraceArgs) -> Result<Target> {
    let p = &t.profile;
    let refused = [
        (
            t.mode.fentry || t.mode.kprobe,
            "--fentry and --kprobe: -x uses a uprobe",
        ),
        (
            p.vmlinux.is_some(),
            "--vmlinux: -x captures user stacks only",
        ),
        (
            p.profile.is_some(),
            "--profile: the built-in profiles are for kernel functions",
        ),
        (
            t.verify_caller,
            "--verify-caller: a uprobe reads its caller in one way only",
        ),
        (
            matches!(
                t.companion,
                Some(CompanionKind::Fentry | CompanionKind::Fexit)
            ),
            "--companion fentry and fexit: only bare goes with a uprobe",
        ),
    ];
    if let Some((_, what)) = refused.iter().find(|(given, _)| *given) {
        return Err(Error::usage(format!("-x takes no {what}")));
    }
    let profile = match (&p.reasons, &p.rules) {
        (Some(path), _) => Some(Profile::load(path)?),
        (_, Some(spec)) => Some(Profile::inline(spec)?),
        _ => None,
    };
    if let Some(r) = profile
        .iter()
        .flat_map(|p| &p.reasons)
        .find(|r| r.within.is_some())
    {
        return Err(Error::usage(format!(
            "reason {}: deeper-frame rules (within) are for kernel functions; \
             with -x a reason is a list of caller functions",
            r.name
        )));
    }
    Ok(Target {
        func: func.clone(),
        tracepoint: None,
        users_own: profile.is_some(),
        profile,
        vmlinux: None,
        user: Some(UserTarget::find(binary, func)?),
    })
}

fn load(mode: &ModeArgs, c: &CaptureArgs, companion: Option<Companion>) -> Result<Load> {
    // An empty companion program exists only beside fentry: no fallback.
    let fentry_only = matches!(companion, Some(Companion::Fentry | Companion::Fexit));
    let request = match (mode.fentry, mode.kprobe, fentry_only) {
        (_, true, true) => {
            return Err(Error::usage(
                "--companion fentry and fexit need fentry mode: leave out --kprobe",
            ))
        }
        (true, _, _) | (_, _, true) => Request::Only(Mode::Fentry),
        (_, true, _) => Request::Only(Mode::Kprobe),
        _ => Request::Auto,
    };
    Ok(Load {
        request,
        user_stacks: c.user_stacks,
        depth: c.depth,
        sample: c.sample,
        background: c.background_stacks,
        drill_levels: 0,
    })
}

/// The options of a trace that a pinned instance fixed when it was
/// pinned, as given (non-default) on this command line.
fn load_options(t: &TraceArgs) -> Vec<&'static str> {
    let p = &t.profile;
    [
        (t.mode.fentry, "--fentry"),
        (t.mode.kprobe, "--kprobe"),
        (p.reasons.is_some(), "--reasons"),
        (p.profile.is_some(), "--profile"),
        (p.no_profile, "--no-profile"),
        (p.rules.is_some(), "--rules"),
        (t.capture.user_stacks, "--user-stacks"),
        (t.capture.depth != 64, "--depth"),
        (t.capture.sample != 1, "--sample"),
        (t.capture.background_stacks != 16, "--background-stacks"),
        (t.verify_caller, "--verify-caller"),
        (t.companion.is_some(), "--companion"),
        (!t.filter.pids.is_empty(), "--pid"),
        (t.filter.cgroup.is_some(), "--cgroup"),
        (t.command.is_some() || !t.argv.is_empty(), "-c"),
        (t.filter.cpus.is_some(), "--cpu"),
    ]
    .into_iter()
    .filter_map(|(given, name)| given.then_some(name))
    .collect()
}

/// serve --capture's trigger and rate cap.
#[derive(Debug, Clone, Copy)]
pub struct ServeCapture {
    pub(crate) trigger: TriggerConfig,
    pub(crate) max_rate: u64,
}

/// The trigger's flags (automatic: a live run's --no-auto aside).
fn trigger_config(t: &TriggerArgs) -> TriggerConfig {
    TriggerConfig {
        threshold: t.threshold,
        min_events: t.min_events,
        min_rate: t.min_rate,
        auto: true,
    }
}

/// A run on `func`: a tracepoint's event if `tracepoint` (its category)
/// is given, a function otherwise.
fn trace(func: &FuncName, tracepoint: Option<&str>, t: &TraceArgs) -> Result<Trace> {
    let companion = t.companion.map(|k| match k {
        CompanionKind::Fentry => Companion::Fentry,
        CompanionKind::Fexit => Companion::Fexit,
        CompanionKind::Bare => Companion::Bare,
    });
    let verify = VerifyConfig {
        threshold: t.trigger.threshold,
        drop: t.verify_drop,
        fail_on_move: t.fail_on_move,
    };
    // Files first: a bad one is refused before anything is loaded.
    let baseline = baseline(t.baseline.as_ref(), Some(func), verify)?;
    if let Some(b) = &baseline {
        b.saved
            .check_tracepoint(tracepoint)
            .map_err(|why| Error::msg(format!("baseline {}: {why}", b.file)))?;
    }
    for (path, option) in [
        (&t.save, "--save"),
        (&t.folded, "--folded"),
        (&t.flamegraph, "--flamegraph"),
    ] {
        if let Some(path) = path {
            saved::check_writable(path, option)?;
        }
    }

    let f = &t.filter;
    let filter = Filter::check(&f.pids, f.cgroup.as_deref(), f.cpus.as_ref())?;
    let (target, load) = match &t.binary {
        Some(binary) => {
            let target = user_target(binary, func, t)?;
            let mut load = load(
                &ModeArgs {
                    fentry: false,
                    kprobe: false,
                },
                &t.capture,
                None,
            )?;
            // The caller's own stack is all a uprobe has to show.
            load.user_stacks = true;
            if t.drill {
                return Err(Error::usage(
                    "--drill splits a kernel function's or a tracepoint's calls by kernel \
                     path: leave it out with -x (a user-space function's callers are its reasons)",
                ));
            }
            (target, load)
        }
        None => (
            Target {
                tracepoint: tracepoint.map(String::from),
                ..target(func, &t.profile)?
            },
            Load {
                drill_levels: if t.drill { t.drill_levels } else { 0 },
                ..load(&t.mode, &t.capture, companion)?
            },
        ),
    };
    Ok(Trace {
        filter,
        target,
        load,
        companion,
        max_reasons: t.profile.max_reasons as usize,
        stack_on: t.stack_on.clone(),
        verify_caller: t.verify_caller,
        load_options: load_options(t),
        trigger: TriggerConfig {
            auto: !t.no_auto,
            ..trigger_config(&t.trigger)
        },
        session: session::Options {
            tracepoint: tracepoint.map(String::from),
            interval: Duration::from_secs_f64(t.interval),
            duration: t.duration.map(Duration::from_secs_f64),
            printer: Printer::of(t.json),
            quiet: t.quiet,
            verify_caller: t.verify_caller,
            top: t.top,
            rows: t.rows,
            baseline,
            max_rate: t.trigger.max_rate,
            verbose: t.verbose,
            drill_levels: load.drill_levels,
        },
        files: Files {
            folded: t.folded.clone(),
            flamegraph: t.flamegraph.clone(),
            save: t.save.clone(),
        },
        fix: t.fix.clone(),
        command: match (&t.command, t.argv.is_empty()) {
            (Some(c), _) => Some(vec!["/bin/sh".into(), "-c".into(), c.clone()]),
            (None, false) => Some(t.argv.clone()),
            (None, true) => None,
        },
    })
}

/// A --vmlinux must be an ELF file this process can read: found out now,
/// not after a long run when stacks are symbolized.
fn check_vmlinux(path: &std::path::Path) -> Result<()> {
    use std::io::Read;
    let fail = |why: String| Error::msg(format!("--vmlinux {}: {why}", path.display()));
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .map_err(|e| fail(format!("cannot read it: {e}")))?;
    if &magic != b"\x7fELF" {
        return Err(fail("not an ELF file (a debug vmlinux is)".into()));
    }
    Ok(())
}

/// The profile the options ask for: a file, inline rules, a named
/// built-in, none, or by default the built-in for FUNC if there is one.
fn choose_profile(args: &ProfileArgs, func: &str) -> Result<Option<Profile>> {
    let p = if args.no_profile {
        None
    } else if let Some(path) = &args.reasons {
        Some(Profile::load(path)?)
    } else if let Some(spec) = &args.rules {
        Some(Profile::inline(spec)?)
    } else if let Some(name) = &args.profile {
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
mod tests;
