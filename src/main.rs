//! The topdown command.

use std::io;
use std::mem::MaybeUninit;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::Parser;

use topdown::attach::{self, Request};
use topdown::cli::Cli;
use topdown::error::{Error, Result};
use topdown::probe::Mode;
use topdown::profile;
use topdown::{plan, session};

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
    let chosen = plan::choose_profile(cli, func)?;
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
        let users_own = cli.reasons.is_some() || cli.rules.is_some();
        if let Some(warning) = plan::missing_warning(users_own, r) {
            eprintln!("topdown: warning: profile {}: {warning}", p.origin);
        }
        let vmlinux = plan::debug_vmlinux(cli.vmlinux.as_deref());
        if let Some(warning) = plan::source_warning(users_own, r, vmlinux.as_deref()) {
            eprintln!("topdown: warning: profile {}: {warning}", p.origin);
        }
    } else if cli.list_reasons {
        attach::resolve_function(&ksyms, func)?;
        println!("no reason profile: one reason per caller function of {func}");
        return Ok(());
    }
    let func_addr = attach::resolve_function(&ksyms, func)?;
    let (mut mapper, callers, rules) = plan::mapping(resolved.as_ref(), cli.max_reasons as usize);
    let stack_on = match &cli.stack_on {
        Some(name) => Some(plan::stack_reason(&ksyms, &mut mapper, name)?),
        None => None,
    };

    let settings = plan::settings(cli, func, func_addr, callers, rules);
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

    let opts = plan::session_options(cli, func_addr, stack_on);
    session::run(
        probe,
        &ksyms,
        &mut mapper,
        &opts,
        &stop,
        &mut io::stdout().lock(),
    )
}
