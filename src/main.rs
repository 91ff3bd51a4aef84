//! The topdown command: parse → plan → dispatch.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Parser;

use topdown::cli::Cli;
use topdown::jobs::{self, Status};
use topdown::plan::{Job, Plan};
use topdown::usage;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let result = Plan::from_cli(&cli).and_then(|plan| {
        // Refusals are explained in one line of our own (quoting the
        // verifier); libbpf's lines are shown with -v only.
        topdown::route_libbpf_messages(plan.verbose);
        for w in &plan.warnings {
            let _ = writeln!(io::stderr(), "topdown: warning: {w}");
        }
        match plan.job {
            Job::ListProfiles { json } => jobs::list_profiles(json).map(done),
            Job::ListTargets { pattern, binary } => {
                jobs::list_targets(&pattern, binary.as_deref()).map(done)
            }
            Job::ListReasons { target, json } => jobs::list_reasons(&target, json).map(done),
            Job::Trace(trace) => jobs::trace(*trace),
            Job::Pin(pin) => jobs::pin(*pin).map(done),
            Job::Show(show) => jobs::show(&show),
            Job::Sync { dir } => jobs::sync(&dir).map(done),
            Job::Unpin { funcs, synced } => jobs::unpin(&funcs, synced).map(done),
            Job::Serve { listen, capture } => jobs::serve(listen, capture).map(done),
        }
    });
    match result {
        Ok(status) => ExitCode::from(status.code()),
        // The reader went away (`topdown --list-profiles | head`): a
        // normal end.
        Err(e) if e.errno() == Some(libc::EPIPE) => ExitCode::SUCCESS,
        Err(e) => {
            // Standard error may be gone too: the status still tells.
            let _ = writeln!(io::stderr(), "topdown: {e}");
            ExitCode::from(if e.is_usage() { 2 } else { 1 })
        }
    }
}

fn done(_: ()) -> Status {
    Status::Done
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
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let _ = writeln!(io::stderr(), "topdown: {}", usage::explain(&args, &e));
    ExitCode::from(2)
}
