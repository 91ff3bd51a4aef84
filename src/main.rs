//! The topdown command.

use std::collections::HashSet;
use std::io;
use std::mem::MaybeUninit;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

use topdown::attach::{self, Request};
use topdown::cli::Cli;
use topdown::error::{Error, Result};
use topdown::kallsyms::Kallsyms;
use topdown::probe::{self, Companion, Mode, Settings};
use topdown::profile::{self, Profile};
use topdown::reasons::Mapper;
use topdown::session;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`topdown ... | head`): a normal end.
        Err(e) if e.errno() == Some(libc::EPIPE) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("topdown: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Help and version go to stdout as clap renders them; a usage error
/// becomes one line on stderr and exit status 2.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    let text = e.render().to_string();
    let first: Vec<&str> = text
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let msg = first.join(" ");
    eprintln!(
        "topdown: {} (see topdown --help)",
        msg.trim_start_matches("error: ")
    );
    ExitCode::from(2)
}

fn run(cli: &Cli) -> Result<()> {
    if cli.list_profiles {
        for (name, func, description) in profile::builtins() {
            println!("{name}\t{func}\t{description}");
        }
        return Ok(());
    }
    let func = cli.func.as_deref().unwrap_or_default();
    if !cli.verbose {
        // Refusals are explained in one line of our own; libbpf's lines
        // would only repeat them.
        libbpf_rs::set_print(None);
    }
    if !cli.list_reasons {
        attach::check_privileges()?;
    }
    let chosen = choose_profile(cli, func)?;
    let ksyms = attach::load_kallsyms()?;
    let resolved = chosen
        .as_ref()
        .map(|p| profile::resolve(p, &ksyms))
        .transpose()?;
    if let (Some(p), Some(r)) = (&chosen, &resolved) {
        if cli.list_reasons {
            print!("{}", profile::describe(p, r, &ksyms));
            return Ok(());
        }
        if let Some(warning) = missing_warning(cli, r) {
            eprintln!("topdown: warning: profile {}: {warning}", p.origin);
        }
    } else if cli.list_reasons {
        attach::resolve_function(&ksyms, func)?;
        println!("no reason profile: one reason per caller function of {func}");
        return Ok(());
    }
    let func_addr = attach::resolve_function(&ksyms, func)?;
    let (mut mapper, callers, rules) = match &resolved {
        Some(r) => Mapper::from_profile(r, cli.max_reasons as usize),
        None => (
            Mapper::auto(cli.max_reasons as usize),
            Vec::new(),
            Vec::new(),
        ),
    };
    let stack_on = match &cli.stack_on {
        Some(name) => Some(stack_reason(&ksyms, &mut mapper, name)?),
        None => None,
    };

    let settings = Settings {
        func: func.to_string(),
        func_addr,
        verify_caller: cli.verify_caller,
        user_stacks: cli.user_stacks,
        stack_frames: cli.depth,
        sample_every: cli.sample,
        max_per_cpu_sec: per_cpu_budget(cli.max_rate),
        callers,
        rules,
        own_tgid: std::process::id(),
        companion: match cli.companion.as_deref() {
            Some("fentry") => Some(Companion::Fentry),
            Some("fexit") => Some(Companion::Fexit),
            _ => None,
        },
    };
    let req = match (cli.fentry, cli.kprobe) {
        (true, _) => Request::Only(Mode::Fentry),
        (_, true) => Request::Only(Mode::Kprobe),
        _ => Request::Auto,
    };

    // Install the handler before attaching, so a signal that arrives
    // while attaching still ends the run through the normal path.
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))
        .map_err(|e| Error::msg(format!("cannot install the signal handler: {e}")))?;

    let mut fentry_obj = MaybeUninit::uninit();
    let mut kprobe_obj = MaybeUninit::uninit();
    let attached = attach::attach(&mut fentry_obj, &mut kprobe_obj, &settings, req)?;
    let mut probe = attached.probe;
    if let Some(kind) = settings.companion {
        if probe.mode() != Mode::Fentry {
            return Err(Error::msg("--companion needs fentry mode"));
        }
        probe.attach_companion(kind)?;
    }
    let mode = probe.mode().name();
    match &attached.fallback_reason {
        Some(why) => eprintln!("topdown: tracing {func} with a kprobe: fentry unavailable: {why}"),
        None => eprintln!("topdown: tracing {func} with {mode}"),
    }

    let opts = session::Options {
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
        vmlinux: cli.vmlinux.clone(),
        verbose: cli.verbose,
    };
    session::run(
        probe,
        &ksyms,
        &mut mapper,
        &opts,
        &stop,
        &mut io::stdout().lock(),
    )
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
    if let Some(Some(f)) = p.as_ref().map(|p| p.function.as_deref()) {
        if f != func {
            eprintln!(
                "topdown: warning: profile {} is meant for {f}, not {func}",
                p.as_ref().unwrap().origin
            );
        }
    }
    Ok(p)
}

/// What to say about profile functions this kernel lacks. A user's own
/// profile: every one. A built-in profile covers several kernel versions,
/// so names from other versions are expected to be missing: only reasons
/// left with no function at all, whose rows would stay empty, are named.
fn missing_warning(cli: &Cli, r: &profile::Resolved) -> Option<String> {
    let see = "(inlined or absent; see --list-reasons)";
    if cli.reasons.is_some() || cli.rules.is_some() {
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

/// The slot of the reason named by --stack-on: a profile reason, or in
/// auto mode any kernel function (callers are reasons).
fn stack_reason(ksyms: &Kallsyms, mapper: &mut Mapper, name: &str) -> Result<u32> {
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

/// The stack-rate cap per CPU: the BPF side keeps one budget per CPU so the
/// hot path needs no shared state.
fn per_cpu_budget(max_rate: u64) -> u64 {
    let cpus = libbpf_rs::num_possible_cpus().unwrap_or(1).max(1) as u64;
    max_rate.div_ceil(cpus).max(1)
}
