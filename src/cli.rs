//! Command-line interface: the flags and their syntax, nothing more.
//! `plan` turns them into what to do.

use std::path::PathBuf;

use clap::{ArgAction, ArgGroup, Args, Parser, Subcommand, ValueEnum};

use crate::bpf::limits::MAX_STACK_FRAMES;
use crate::filter::CpuList;
use crate::funcname::{self, FuncName};
use crate::listen::Listen;
use crate::reasons::MAX_REASONS;

/// Where `topdown pin --sync` reads declared pins by default.
pub const CONFIG_DIR: &str = "/etc/topdown/pins.d";

/// Count a kernel function's calls by caller path, and capture the stacks of
/// the path that dominates.
#[derive(Debug, Parser)]
#[command(
    name = "topdown",
    version = crate::version::long(),
    about,
    long_about = "Count a kernel function's calls by caller path (tier 1, always on) and capture \
the stacks of one reason when it dominates (tier 2, on demand).\n\n\
Every interval topdown prints, per reason, the calls in the interval, their rate and their share \
of the total. A reason is, by default, the calling function; a profile groups call sites into named \
reasons. When one reason reaches --threshold percent of the calls of the last second (checked every \
50 ms, whatever the interval), topdown captures its kernel stacks and prints the top ones.\n\n\
`topdown pin FUNC` leaves tier 1 counting with no topdown process running; `topdown show`, \
`topdown serve` (Prometheus) and `topdown FUNC` read it; `topdown unpin FUNC` removes it.",
    after_help = "Examples:\n  topdown deferred_split_folio -i 1\n  topdown t:sched:sched_switch -d 5   (where kernel functions cannot be traced)\n  topdown u:c:malloc -p 1234\n  topdown deferred_split_folio --stack-on ZAP\n  topdown vfs_read -p 1234 --flamegraph reads.svg\n  topdown vfs_read -d 10 --no-auto\n  topdown deferred_split_folio -d 30 --save before.json   (then, after a fix:)\n  topdown deferred_split_folio -d 30 --baseline before.json\n  topdown pin deferred_split_folio && topdown show",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// `topdown FUNC ...`: the same as `topdown trace FUNC ...`.
    #[command(flatten)]
    pub trace: TraceArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Trace FUNC, as `topdown FUNC` does (for a function named like a command).
    Trace(Box<TraceArgs>),
    /// Attach tier 1 for FUNC and pin it in bpffs: it keeps counting with no topdown running.
    Pin(PinArgs),
    /// Print pinned functions' calls per reason since they were pinned.
    Show(ShowArgs),
    /// Detach pinned functions and remove their pins.
    Unpin(UnpinArgs),
    /// Serve every pinned function's counters to Prometheus on /metrics (text format 0.0.4, or OpenMetrics when asked for).
    Serve(ServeArgs),
}

/// How callers are grouped into reasons.
#[derive(Debug, Clone, Args)]
pub struct ProfileArgs {
    /// Reason profile file (TOML); see topdown(8).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["profile", "no_profile"])]
    pub reasons: Option<PathBuf>,

    /// Built-in profile to use instead of the one for FUNC.
    #[arg(long, value_name = "NAME", conflicts_with = "no_profile")]
    pub profile: Option<String>,

    /// One reason per caller function, even where a built-in profile exists.
    #[arg(long)]
    pub no_profile: bool,

    /// Inline reason rules, e.g. 'ZAP=folio_remove_rmap_ptes;FAULT=do_huge_pmd_anonymous_page'.
    #[arg(long, value_name = "RULES", conflicts_with_all = ["reasons", "profile", "no_profile"])]
    pub rules: Option<String>,

    /// Debug vmlinux: inlined frames and file:line in stacks, inlined and file: callers in profiles.
    #[arg(long, value_name = "PATH")]
    pub vmlinux: Option<PathBuf>,

    /// Most reasons shown on their own rows; more are merged into OTHER.
    #[arg(long, value_name = "N", default_value_t = 128,
          value_parser = clap::value_parser!(u32).range(1..=MAX_REASONS as i64))]
    pub max_reasons: u32,
}

/// How the function is hooked.
#[derive(Debug, Clone, Args)]
pub struct ModeArgs {
    /// Use fentry only (no kprobe fallback).
    #[arg(long, conflicts_with = "kprobe")]
    pub fentry: bool,

    /// Use a kprobe instead of fentry.
    #[arg(long)]
    pub kprobe: bool,
}

/// What a captured stack holds (fixed when the program is loaded).
#[derive(Debug, Clone, Args)]
pub struct CaptureArgs {
    /// Keep 1 in N of the reason's calls for stacks.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub sample: u32,

    /// Frames captured per stack, kernel and (with -U) user (at most 127).
    #[arg(long, value_name = "N", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=MAX_STACK_FRAMES as i64))]
    pub depth: u32,

    /// Capture user-space stacks too.
    #[arg(short = 'U', long)]
    pub user_stacks: bool,

    /// Stacks each reason may take on each CPU before any capture, kept until it is captured, so that a short burst has stacks (refilled at N/4 a second; 0: none).
    #[arg(long, value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub background_stacks: u32,
}

/// Which calls count: the filters, applied in the kernel (filtered calls
/// are neither counted nor captured).
#[derive(Debug, Clone, Args)]
pub struct FilterArgs {
    /// Only calls made by these processes (thread groups, at most 64), e.g. -p 123,456.
    #[arg(short = 'p', long = "pid", value_name = "PID", value_delimiter = ',')]
    pub pids: Vec<u32>,

    /// Only calls made by tasks in this cgroup (v2) or below it: a path, or one under the cgroup v2 mount.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,

    /// Only calls made on these CPUs, e.g. 0-3,8.
    #[arg(short = 'C', long = "cpu", value_name = "LIST", value_parser = crate::filter::cpu_list)]
    pub cpus: Option<CpuList>,
}

/// When stack capture starts or moves by itself: a live run's and
/// `serve --capture`'s.
#[derive(Debug, Clone, Args)]
pub struct TriggerArgs {
    /// Share (percent) of the last second's calls at which a reason's stacks are captured.
    #[arg(long, value_name = "PCT", default_value_t = 80.0, value_parser = percent)]
    pub threshold: f64,

    /// Calls per second a reason needs (since its first call in the last second) before --threshold applies.
    #[arg(long, value_name = "RATE", default_value_t = 20.0, value_parser = rate)]
    pub min_rate: f64,

    /// Calls a reason needs in the last second before --threshold applies.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub min_events: u64,

    /// Most stacks captured per second (spread evenly over the CPUs).
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_rate: u64,
}

#[derive(Debug, Clone, Args)]
#[command(group = ArgGroup::new("result").args(["save", "baseline"]).multiple(true))]
pub struct TraceArgs {
    /// What to trace: a kernel function (FUNC, kprobe:FUNC or p:FUNC, fentry:FUNC or kfunc:FUNC), a tracepoint (t:CATEGORY:EVENT, tracepoint:CATEGORY:EVENT), or a user function (u:PATH:FUNC, uprobe:PATH:FUNC; with -x: FUNC in that file). Return probes are refused: calls are counted at entry.
    #[arg(value_name = "FUNC", required_unless_present_any = ["list_profiles", "list"])]
    pub func: Option<String>,

    /// List what can be traced, spelt as FUNC takes it (kernel functions, tracepoints; with -x, the file's functions), those matching PATTERN (*, ?) if given, and exit.
    #[arg(short = 'l', long = "list", value_name = "PATTERN", num_args = 0..=1,
          default_missing_value = "*", conflicts_with = "func")]
    pub list: Option<String>,

    /// Trace FUNC in this program or library with a uprobe: a path, or a library name as bcc takes it (c: the C library).
    #[arg(short = 'x', long = "binary", value_name = "PATH")]
    pub binary: Option<String>,

    /// Run CMD (with /bin/sh -c) and count only its calls and its children's, from its first instruction; the run ends when it exits.
    #[arg(short = 'c', long = "command", value_name = "CMD",
          conflicts_with_all = ["pids", "cgroup", "argv"])]
    pub command: Option<String>,

    /// As -c, the command after `--`, run as its words are (no shell): topdown FUNC -- CMD ARGS.
    #[arg(last = true, value_name = "CMD ARGS", conflicts_with_all = ["pids", "cgroup"])]
    pub argv: Vec<String>,

    /// Seconds between reports.
    #[arg(short, long, value_name = "SECS", default_value_t = 1.0, value_parser = interval_secs)]
    pub interval: f64,

    /// Stop after SECS seconds and print the summary.
    #[arg(short, long, value_name = "SECS", value_parser = duration_secs)]
    pub duration: Option<f64>,

    #[command(flatten)]
    pub mode: ModeArgs,

    #[command(flatten)]
    pub profile: ProfileArgs,

    #[command(flatten)]
    pub filter: FilterArgs,

    /// Print the reason profile as resolved on this kernel, and exit.
    #[arg(long)]
    pub list_reasons: bool,

    /// List the built-in profiles, and exit.
    #[arg(long)]
    pub list_profiles: bool,

    /// Capture stacks of REASON from the start: a profile reason, a caller function, or not-found.
    #[arg(long, value_name = "REASON")]
    pub stack_on: Option<String>,

    /// Count each captured reason's calls by path too, exactly (the frames above its caller, split level by level): see topdown(8), DRILL-DOWN.
    #[arg(long)]
    pub drill: bool,

    /// With --drill: the deepest level, the reason (its caller) being level 1 and the frame above it level 2 (2 to 8).
    #[arg(long, value_name = "N", default_value_t = 4, requires = "drill",
          value_parser = clap::value_parser!(u32).range(2..=8))]
    pub drill_levels: u32,

    #[command(flatten)]
    pub trigger: TriggerArgs,

    /// Never switch stack capture on by itself.
    #[arg(long)]
    pub no_auto: bool,

    #[command(flatten)]
    pub capture: CaptureArgs,

    /// Most reasons on an interval's table, the others summed on one line (the summary and --json show all).
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = at_least_one)]
    pub rows: usize,

    /// Distinct stacks shown per interval and in the summary.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = at_least_one)]
    pub top: usize,

    /// Write captured stacks, folded (flame graph input), to FILE at exit.
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,

    /// Write captured stacks as an interactive flame graph (SVG) to FILE at exit.
    #[arg(long, value_name = "FILE")]
    pub flamegraph: Option<PathBuf>,

    /// Print NDJSON (one object per interval, then a summary) instead of tables.
    #[arg(long)]
    pub json: bool,

    /// Write the run's result (JSON) to FILE at exit, to compare a later run with (--baseline).
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,

    /// Compare with a result saved by --save: each reason before and now, and whether the fix is verified.
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,

    /// With --baseline: how much (percent) the baseline's hot reason's rate must fall for a verified fix.
    #[arg(long, value_name = "PCT", default_value_t = 50.0, value_parser = drop_percent)]
    pub verify_drop: f64,

    /// With --baseline: a fix is not verified if another reason rose past --threshold in place of the hot one.
    #[arg(long, requires = "baseline")]
    pub fail_on_move: bool,

    /// With --save or --baseline: what the fix was (a commit, a package version, a setting), kept in the result.
    #[arg(long, value_name = "TEXT", value_parser = fix_text, requires = "result")]
    pub fix: Option<String>,

    /// Check the cheap caller lookup against a full stack unwind on every call (slow).
    #[arg(long)]
    pub verify_caller: bool,

    /// Attach an empty fentry or fexit program, or a bare counter, beside the counting one (self-checks, cost baselines).
    #[arg(long, value_name = "KIND", value_enum, hide = true)]
    pub companion: Option<CompanionKind>,

    /// Show libbpf's own messages (verifier logs, attach details).
    #[arg(short, long)]
    pub verbose: bool,

    /// Print only the summary at the end, not every interval.
    #[arg(short, long, action = ArgAction::SetTrue)]
    pub quiet: bool,
}

#[derive(Debug, Clone, Args)]
pub struct PinArgs {
    /// Kernel function to count, or a tracepoint (t:CATEGORY:EVENT).
    #[arg(
        value_name = "FUNC",
        value_parser = funcname::parse_pin_arg,
        required_unless_present = "sync",
        conflicts_with = "config_dir"
    )]
    pub func: Option<funcname::PinTarget>,

    /// Make the pinned set match the declarations in --config-dir: pin, re-pin and unpin.
    #[arg(long, conflicts_with_all = ["func", "fentry", "kprobe", "reasons", "profile", "no_profile",
          "rules", "vmlinux", "max_reasons", "sample", "depth", "user_stacks", "cgroup", "cpus"])]
    pub sync: bool,

    /// With --sync: the directory of declarations, FUNC.toml files [default: /etc/topdown/pins.d].
    #[arg(long, value_name = "DIR")]
    pub config_dir: Option<PathBuf>,

    /// Refused: a user-space function is traced, not pinned (see topdown(8)).
    #[arg(short = 'x', long = "binary", value_name = "PATH")]
    pub binary: Option<String>,

    #[command(flatten)]
    pub mode: ModeArgs,

    #[command(flatten)]
    pub profile: ProfileArgs,

    #[command(flatten)]
    pub capture: CaptureArgs,

    /// Count only calls made by tasks in this cgroup (v2) or below it.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,

    /// Count only calls made on these CPUs, e.g. 0-3,8.
    #[arg(short = 'C', long = "cpu", value_name = "LIST", value_parser = crate::filter::cpu_list)]
    pub cpus: Option<CpuList>,

    /// Show libbpf's own messages (verifier logs, attach details).
    #[arg(short, long)]
    pub verbose: bool,
}

#[derive(Debug, Clone, Args)]
#[command(group = ArgGroup::new("show_result").args(["save", "baseline"]).multiple(true))]
pub struct ShowArgs {
    /// Pinned functions to show (default: all); a tracepoint as pinned, t:CATEGORY:EVENT.
    #[arg(value_name = "FUNC", value_parser = funcname::parse_pinned_arg)]
    pub funcs: Vec<FuncName>,

    /// Print NDJSON, one object per function.
    #[arg(long)]
    pub json: bool,

    /// Write the function's counts since it was pinned as a result file (JSON) to FILE.
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,

    /// Compare the function's counts since it was pinned with a result saved by --save.
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,

    /// With --baseline: share (percent) the baseline's hot reason must now be below.
    #[arg(long, value_name = "PCT", default_value_t = 80.0, value_parser = percent)]
    pub threshold: f64,

    /// With --baseline: how much (percent) the baseline's hot reason's rate must fall.
    #[arg(long, value_name = "PCT", default_value_t = 50.0, value_parser = drop_percent)]
    pub verify_drop: f64,

    /// With --baseline: a fix is not verified if another reason rose past --threshold in place of the hot one.
    #[arg(long, requires = "baseline")]
    pub fail_on_move: bool,

    /// With --save or --baseline: what the fix was (a commit, a package version, a setting), kept in the result.
    #[arg(long, value_name = "TEXT", value_parser = fix_text, requires = "show_result")]
    pub fix: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct UnpinArgs {
    /// Pinned functions to remove; a tracepoint as pinned, t:CATEGORY:EVENT.
    #[arg(
        value_name = "FUNC",
        required_unless_present_any = ["all", "synced"],
        conflicts_with_all = ["all", "synced"],
        value_parser = funcname::parse_pinned_arg
    )]
    pub funcs: Vec<FuncName>,

    /// Remove every pinned function.
    #[arg(long, conflicts_with = "synced")]
    pub all: bool,

    /// Remove every function pinned by topdown pin --sync (not those pinned by hand).
    #[arg(long)]
    pub synced: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address and port to listen on: ADDR:PORT, [ADDR]:PORT, :PORT (all addresses) or localhost:PORT.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9476",
          value_parser = Listen::parse)]
    pub listen: Listen,

    /// Run the trigger on every pinned function and capture the hot reason's stacks, served as pprof at /debug/pprof/topdown.
    #[arg(long)]
    pub capture: bool,

    #[command(flatten)]
    pub trigger: TriggerArgs,
}

/// The program --companion attaches beside the counting one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompanionKind {
    /// An empty fentry program.
    Fentry,
    /// An empty fexit program.
    Fexit,
    /// A bare per-CPU counter, in the counting program's mode.
    Bare,
}

/// The command as shell completions offer it: the visible arguments and
/// commands. clap_complete lists hidden options too (test hooks such as
/// --companion), so each command is rebuilt from its visible arguments,
/// keeping their relations (conflicts, groups), which the zsh script uses,
/// and the texts completions show.
pub fn completion_command() -> clap::Command {
    fn visible(full: &clap::Command) -> clap::Command {
        let leak = |s: &str| -> &'static str { s.to_owned().leak() };
        let mut cmd = clap::Command::new(leak(full.get_name()));
        if let Some(v) = full.get_version() {
            cmd = cmd.version(leak(v));
        }
        if let Some(about) = full.get_about() {
            cmd = cmd.about(about.clone());
        }
        if let Some(about) = full.get_long_about() {
            cmd = cmd.long_about(about.clone());
        }
        cmd = cmd
            .args(full.get_arguments().filter(|a| !a.is_hide_set()).cloned())
            .groups(full.get_groups().cloned());
        for sub in full.get_subcommands().filter(|s| !s.is_hide_set()) {
            cmd = cmd.subcommand(visible(sub));
        }
        cmd
    }
    use clap::CommandFactory;
    visible(&Cli::command())
}

/// Seconds within [lo, hi]: bounded so that a typo neither spins the
/// interval loop nor overflows a Duration.
fn secs_in(s: &str, lo: f64, hi: f64) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && (lo..=hi).contains(&v) => Ok(v),
        Ok(v) if v.is_finite() && v > 0.0 => {
            Err(format!("{s} seconds is out of range (from {lo} to {hi})"))
        }
        _ => Err(format!("'{s}' is not a positive number of seconds")),
    }
}

fn interval_secs(s: &str) -> Result<f64, String> {
    secs_in(s, 0.01, 86_400.0)
}

fn duration_secs(s: &str) -> Result<f64, String> {
    secs_in(s, 0.001, 1e9)
}

/// A count of one or more.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("'{s}' is not a number of 1 or more")),
    }
}

fn rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("'{s}' is not a rate (calls per second, 0 or more)")),
    }
}

fn percent(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) && v > 0.0 => Ok(v),
        _ => Err(format!("'{s}' is not a percentage in (0, 100]")),
    }
}

/// Characters a --fix text may have: enough for a sentence, a commit id
/// and a package version.
pub(crate) const MAX_FIX: usize = 200;

/// A --fix text: one line of printable text, not empty, not too long.
fn fix_text(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("the text is empty: say what the fix was".into());
    }
    if s.chars().any(char::is_control) {
        return Err("the text must be one line, without control characters".into());
    }
    let n = s.chars().count();
    if n > MAX_FIX {
        return Err(format!(
            "the text has {n} characters; at most {MAX_FIX} (name the commit or setting)"
        ));
    }
    Ok(s.to_string())
}

/// A fall in percent: 0 (none needed) to 100 (down to nothing).
fn drop_percent(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!("'{s}' is not a percentage in [0, 100]")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults() {
        let c = Cli::try_parse_from(["topdown", "deferred_split_folio"]).unwrap();
        assert!(c.command.is_none());
        let t = c.trace;
        assert_eq!(t.func.as_deref(), Some("deferred_split_folio"));
        assert_eq!(t.interval, 1.0);
        assert_eq!(t.trigger.threshold, 80.0);
        assert_eq!(t.duration, None);
        assert!(!t.mode.fentry && !t.mode.kprobe);
        assert!(t.filter.pids.is_empty() && t.filter.cgroup.is_none() && t.filter.cpus.is_none());
        let c = Cli::try_parse_from(["topdown", "f", "-p", "1,2", "--pid", "3", "-C", "0-1,4"])
            .unwrap();
        assert_eq!(c.trace.filter.pids, [1, 2, 3]);
        assert_eq!(c.trace.filter.cpus.unwrap().0, [0, 1, 4]);
    }

    #[test]
    fn commands_and_the_trace_shorthand() {
        // After an option, a command's name is FUNC.
        let c = Cli::try_parse_from(["topdown", "-i", "2", "show"]).unwrap();
        assert!(c.command.is_none());
        assert_eq!(c.trace.func.as_deref(), Some("show"));
        let c = Cli::try_parse_from(["topdown", "trace", "show", "-i", "2"]).unwrap();
        let Some(Command::Trace(t)) = c.command else {
            panic!("{c:?}")
        };
        assert_eq!((t.func.as_deref(), t.interval), (Some("show"), 2.0));
        let c = Cli::try_parse_from(["topdown", "pin", "vfs_read", "--kprobe", "-U"]).unwrap();
        let Some(Command::Pin(p)) = c.command else {
            panic!("{c:?}")
        };
        assert!(p.mode.kprobe && p.capture.user_stacks);
        let c = Cli::try_parse_from(["topdown", "show"]).unwrap();
        assert!(
            matches!(c.command, Some(Command::Show(ShowArgs { ref funcs, .. })) if funcs.is_empty())
        );
        let c = Cli::try_parse_from(["topdown", "unpin", "--all"]).unwrap();
        assert!(matches!(
            c.command,
            Some(Command::Unpin(UnpinArgs { all: true, .. }))
        ));
        let c = Cli::try_parse_from(["topdown", "serve"]).unwrap();
        let Some(Command::Serve(s)) = c.command else {
            panic!("{c:?}")
        };
        assert!(s.listen.is_loopback(), "localhost by default");
    }

    #[test]
    fn fix_is_one_short_line_with_save_or_baseline() {
        let c = Cli::try_parse_from(["topdown", "f", "--save", "a", "--fix", " v2 "]).unwrap();
        assert_eq!(c.trace.fix.as_deref(), Some("v2"));
        let c = Cli::try_parse_from(["topdown", "f", "--baseline", "a", "--fix", "x"]).unwrap();
        assert_eq!(c.trace.fix.as_deref(), Some("x"));
        let c = Cli::try_parse_from(["topdown", "show", "--save", "a", "--fix", "x"]).unwrap();
        assert!(matches!(
            c.command,
            Some(Command::Show(ShowArgs { fix: Some(_), .. }))
        ));
        let err = |args: &[&str]| Cli::try_parse_from(args).unwrap_err().to_string();
        assert!(err(&["topdown", "f", "--fix", "x"]).contains("--save"));
        assert!(err(&["topdown", "show", "--fix", "x"]).contains("--save"));
        let long = "x".repeat(MAX_FIX + 1);
        assert!(err(&["topdown", "f", "--save", "a", "--fix", &long])
            .contains("the text has 201 characters; at most 200"));
        assert!(err(&["topdown", "f", "--save", "a", "--fix", "a\nb"]).contains("one line"));
        assert!(err(&["topdown", "f", "--save", "a", "--fix", " "]).contains("empty"));
        assert_eq!(
            fix_text(&"é".repeat(MAX_FIX)).unwrap().chars().count(),
            MAX_FIX
        );
    }

    #[test]
    fn bad_values_are_rejected() {
        for args in [
            &["topdown", "f", "-i", "0"][..],
            &["topdown", "f", "-i", "x"],
            &["topdown", "f", "--fentry", "--kprobe"],
            &["topdown", "f", "--threshold", "101"],
            &["topdown", "f", "--min-rate", "-1"],
            &["topdown", "f", "--depth", "200"],
            &["topdown", "f", "-i", "1e30"],
            &["topdown", "f", "-i", "0.001"],
            &["topdown", "f", "-d", "1e300"],
            &["topdown", "f", "--rules", "A=b", "--no-profile"],
            &["topdown", "f", "--max-reasons", "254"],
            &["topdown", "f", "--companion", "kprobe"],
            &["topdown", "f", "--top", "0"],
            &["topdown", "f", "--verify-drop", "-1"],
            &["topdown", "show", "--verify-drop", "101"],
            &["topdown"],
            &["topdown", "unpin"],
            &["topdown", "unpin", "f", "--all"],
            &["topdown", "pin"],
            &["topdown", "serve", "--listen", "nowhere"],
            &["topdown", "f", "-p", "x"],
            &["topdown", "f", "-C", "3-1"],
            &["topdown", "pin", "f", "-p", "1"],
            &["topdown", "pin", "f", "--sync"],
            &["topdown", "pin", "--sync", "--kprobe"],
            &["topdown", "pin", "--sync", "--depth", "3"],
            &["topdown", "pin", "f", "--config-dir", "/x"],
            &["topdown", "unpin", "--synced", "--all"],
            &["topdown", "unpin", "f", "--synced"],
        ] {
            assert!(Cli::try_parse_from(args).is_err(), "{args:?}");
        }
    }
}
