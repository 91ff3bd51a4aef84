//! The topdown command.

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
use topdown::probe::{Mode, Settings};
use topdown::reasons::Mapper;
use topdown::session;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("topdown: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<()> {
    let func = cli.func.as_deref().unwrap_or_default();
    if !cli.verbose {
        // Refusals are explained in one line of our own; libbpf's lines
        // would only repeat them.
        libbpf_rs::set_print(None);
    }
    attach::check_privileges()?;
    let ksyms = attach::load_kallsyms()?;
    let func_addr = attach::resolve_function(&ksyms, func)?;
    let mut mapper = Mapper::auto(cli.max_reasons as usize);

    let settings = Settings {
        func: func.to_string(),
        func_addr,
        verify_caller: cli.verify_caller,
        user_stacks: cli.user_stacks,
        stack_frames: cli.depth,
        sample_every: cli.sample,
        max_per_cpu_sec: per_cpu_budget(cli.max_rate),
        callers: Vec::new(),
        rules: Vec::new(),
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
    let probe = attached.probe;
    let mode = probe.mode().name();
    match &attached.fallback_reason {
        Some(why) => eprintln!("topdown: tracing {func} with a kprobe: fentry unavailable: {why}"),
        None => eprintln!("topdown: tracing {func} with {mode}"),
    }
    eprintln!(
        "topdown: Ctrl-C to end{}",
        cli.duration
            .map_or(String::new(), |d| format!(", or after {d}s"))
    );

    let opts = session::Options {
        interval: Duration::from_secs_f64(cli.interval),
        duration: cli.duration.map(Duration::from_secs_f64),
        json: cli.json,
        quiet: cli.quiet,
        verify_caller: cli.verify_caller,
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

/// The stack-rate cap per CPU: the BPF side keeps one budget per CPU so the
/// hot path needs no shared state.
fn per_cpu_budget(max_rate: u64) -> u64 {
    let cpus = libbpf_rs::num_possible_cpus().unwrap_or(1).max(1) as u64;
    max_rate.div_ceil(cpus).max(1)
}
